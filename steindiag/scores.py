"""Scores computed once: ``add_scores`` stores a PyMC model's scores in the trace.

Data flow::

    trace + model -> inputs.read_input (the unconstrained draws every function reads)
                  -> inputs._pymc.model_scores (one pass: batched or per-draw, the faster)
                  -> the same trace with sample_stats["unconstrained_draw"] and
                     sample_stats["gradient"] (nutpie's layout, which every function reads)
"""

import numpy as np
import xarray as xr

from steindiag._validate import check_finite
from steindiag.engine.progress import check_progress
from steindiag.inputs import as_trace, is_labelled, read_input

__all__ = ["add_scores"]

_STATS_GROUPS = {"posterior": "sample_stats", "warmup_posterior": "warmup_sample_stats"}
_PARAMETER_DIM = "unconstrained_parameter"


def _add_scores_iv(trace, model, group, strategy, progress):
    from steindiag.inputs._trace import _container_kind

    kind = _container_kind(trace)
    if kind not in ("inferencedata", "datatree") or (kind == "datatree" and not trace.children):
        raise TypeError(
            "trace must be an arviz.InferenceData or an xarray.DataTree with groups (the "
            "output of pm.sample): the scores are stored in its sample_stats group; got "
            f"{type(trace).__name__}. For a posterior Dataset, make a trace of it first, "
            "e.g. xarray.DataTree.from_dict({'posterior': dataset})."
        )
    if model is None:
        raise TypeError("model is required: add_scores evaluates the scores of a PyMC model.")
    if group not in _STATS_GROUPS:
        raise ValueError(
            f"group must be one of {list(_STATS_GROUPS)} (the groups whose sampler "
            f"statistics group can hold the scores); got {group!r}."
        )
    from steindiag.inputs._pymc import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}; got {strategy!r}.")
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")


def _with_group(trace, name, dataset):
    """A copy of ``trace`` (same type) whose group ``name`` is ``dataset``."""
    from steindiag.inputs._trace import _container_kind

    if _container_kind(trace) == "datatree":
        nodes = {node.path: node.to_dataset(inherit=False) for node in trace.subtree}
        nodes[f"/{name}"] = dataset
        return xr.DataTree.from_dict(nodes, name=trace.name)
    import arviz as az

    groups = {group: getattr(trace, group) for group in trace.groups()}
    groups[name] = dataset
    return az.InferenceData(**groups)


def add_scores(trace, model=None, *, group="posterior", compile_mode=None, strategy="auto",
               chunk_size=None, progress=None):
    """Evaluate a PyMC (or numpyro) model's scores once and store them in the trace.

    Every function of steindiag then reads the returned trace without ``model=``: the
    stored unconstrained draws and scores are used as they are, with the same numbers
    as a call with ``model=`` on the original trace, and the model is not evaluated
    again.

    Parameters
    ----------
    trace : arviz.InferenceData, xarray.DataTree or numpyro MCMC
        The output of ``pm.sample`` (InferenceData on ArviZ 0.x, DataTree on ArviZ 1.x);
        or a numpyro ``MCMC`` after ``.run``, whose trace (as ``az.from_numpyro`` makes
        it, divergences included) is returned with the scores.
    model : pymc.Model or numpyro MCMC
        The model that produced the trace (the ``MCMC`` for a trace of a numpyro run;
        None when ``trace`` is the ``MCMC``). For numpyro the scores are those of its
        potential (``jax.grad``, in float64, as :func:`steindiag.ksd` computes them) at
        the latent sites' unconstrained values, and ``compile_mode``, ``strategy`` and
        ``chunk_size`` do not apply.
    group : {"posterior", "warmup_posterior"}, default "posterior"
        Group holding the draws; the scores go to its sampler statistics group
        (``sample_stats`` or ``warmup_sample_stats``).
    compile_mode : str or pytensor.compile.mode.Mode, optional
        PyTensor mode of the model's graphs (as in :func:`steindiag.ksd`).
    strategy : {"auto", "batched", "per-draw"}, default "auto"
        ``"batched"``: the score graph vectorised over draws, evaluated on chunks;
        ``"per-draw"``: the one-draw graph (as ``model.compile_dlogp`` compiles it)
        called once per draw; ``"auto"``: from 512 draws on, time a chunk both ways and
        keep the faster (the per-draw way is only tried when the batched one costs more
        than 10 us a draw). The numbers are the same to rounding.
    chunk_size : int, optional
        Draws per evaluation (default: sized from the model so that an intermediate
        array holds about 32k elements).
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        pass is expected to take more than a few seconds. Ctrl-C stops the pass between
        chunks; the trace is left unchanged.

    Returns
    -------
    Same type as ``trace``
        A copy whose sampler statistics group adds ``unconstrained_draw`` and
        ``gradient`` with dims (chain, draw, unconstrained_parameter): the model's value
        variables flattened in C order and concatenated in the order of
        ``model.value_vars``, and grad of ``model.logp(jacobian=True)`` at them (the
        layout nutpie writes with ``store_unconstrained=True, store_gradient=True``).
        Coordinate ``unconstrained_parameter`` holds nutpie's labels (``sigma_log__``,
        ``beta_0``), coordinate ``parameter_label`` the labels of steindiag's results
        (``beta[0]``, ``theta[a]``). The gradient's attrs record the provenance:
        ``space`` ("unconstrained"), ``jacobian`` ("included"), ``log_density``,
        ``free_variables``, ``value_variables``, ``transforms``, ``pytensor_mode``,
        ``score_strategy`` and ``steindiag_version``. Other groups are kept as they are.

    Raises
    ------
    TypeError
        If ``trace`` is not an InferenceData or a DataTree with groups, or ``model`` is
        missing.
    ValueError
        As the functions with ``model=`` (a model that does not match the trace,
        draws outside the support), or a score that is not finite at some draw.

    Notes
    -----
    A trace with stored scores, read by a function:

    - without ``model=``: the stored draws and scores are used. Only chains and draws
      can be selected with ``coords`` (a stored vector has no score for part of a
      variable) and ``var_names`` is refused;
    - with ``model=``: the stored scores are still used (the model defines the layout,
      which must match the stored labels; its data are checked against the trace's
      ``observed_data``); ``attrs["scores_from"]`` says so. To recompute them, call
      ``add_scores`` again or pass the trace without the two variables;
    - ``stein_variational`` and ``stein_thin(..., regularized=True)`` evaluate the score
      at new points (or its derivative) and still need ``model=``;
    - ``mmd`` compares the stored unconstrained draws, as ``mmd(..., model=model)``.

    Cost: one pass of the score over the draws, memory O(chunk_size * (d + size of the
    observed data)); the stored arrays add 2 N d float64 numbers to the trace.

    Examples
    --------
    >>> import numpy as np, pymc as pm, steindiag
    >>> with pm.Model() as model:
    ...     sigma = pm.HalfNormal("sigma", 1.0)
    ...     _ = pm.Normal("y", 0.0, sigma, observed=[0.3, -1.2, 0.8])
    >>> idata = pm.sample(draws=100, tune=100, chains=2, random_seed=1, progressbar=False,
    ...                   compile_kwargs={"mode": "FAST_COMPILE"})  # doctest: +SKIP
    >>> scored = steindiag.add_scores(idata, model)                  # doctest: +SKIP
    >>> steindiag.ksd(scored)["ksd_pooled"]   # no model: the stored scores  # doctest: +SKIP
    """
    from steindiag.inputs._numpyro import is_numpyro_mcmc

    if is_numpyro_mcmc(trace) or is_numpyro_mcmc(model):
        return _add_numpyro_scores(trace, model, group, compile_mode, strategy, chunk_size,
                                   progress)
    trace = as_trace(trace, model)   # a MultiTrace: the InferenceData / DataTree of it
    _add_scores_iv(trace, model, group, strategy, progress)
    pending = read_input(trace, model, group=group, compile_mode=compile_mode,
                         need_score=False)
    from steindiag import __version__
    from steindiag.inputs import _pymc
    from steindiag.inputs._trace import _STORED_MARK, _nutpie_labels

    layout = _pymc.model_layout(model)
    mode = _pymc.default_compile_mode() if compile_mode is None else compile_mode
    n_chain, n_draw, d = pending.draws.shape
    scores, chosen = _pymc.model_scores(
        model, layout, pending.draws.reshape(-1, d), chunk_size=chunk_size, mode=mode,
        strategy=strategy, progress=progress, return_strategy=True,
    )
    scores = scores.reshape(n_chain, n_draw, d)
    check_finite(scores, "scores", pending.chain, pending.draw)
    attrs = {
        _STORED_MARK: "unconstrained draws and grad log p of the model at them",
        "space": "unconstrained",
        "jacobian": "included",
        "log_density": "model.logp(jacobian=True)",
        "free_variables": [var.name for var in layout],
        "value_variables": [var.value_name for var in layout],
        "transforms": [var.transform for var in layout],
        "pytensor_mode": mode if isinstance(mode, str) else str(mode),
        "score_strategy": chosen,
        "steindiag_version": __version__,
    }
    return _stored(trace, group, pending, scores, _nutpie_labels(layout), attrs)


def _stored(trace, group, pending, scores, unconstrained_labels, attrs):
    """``trace`` with the unconstrained draws of ``pending`` and their ``scores`` in the
    sampler statistics group of ``group`` (nutpie's layout, plus steindiag's labels)."""
    from steindiag.inputs._trace import _STORED_LABEL, _get_group

    dims = ("chain", "draw", _PARAMETER_DIM)
    stored = xr.Dataset(
        {
            "unconstrained_draw": (dims, pending.draws, {"space": "unconstrained"}),
            "gradient": (dims, scores, attrs),
        },
        coords={"chain": pending.chain, "draw": pending.draw,
                _PARAMETER_DIM: unconstrained_labels,
                _STORED_LABEL: (_PARAMETER_DIM, np.asarray(pending.parameter, dtype=str))},
    )
    stats_name = _STATS_GROUPS[group]
    stats = _get_group(trace, stats_name)
    if stats is None:
        stats = stored
    else:
        stale = [name for name in (*stored.data_vars, _STORED_LABEL, _PARAMETER_DIM)
                 if name in stats.variables]
        stats = stats.drop_vars(stale).merge(stored, join="left", compat="override")
    return _with_group(trace, stats_name, stats)


def _add_numpyro_scores(trace, model, group, compile_mode, strategy, chunk_size, progress):
    """``add_scores`` for a numpyro MCMC, or a trace of one with its MCMC."""
    given = [name for name, value, default in (("compile_mode", compile_mode, None),
                                               ("strategy", strategy, "auto"),
                                               ("chunk_size", chunk_size, None))
             if value != default]
    if given:
        raise TypeError(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to PyMC models "
            "only: a numpyro model's scores are jax.vmap(jax.grad(...)) of its potential, "
            "evaluated in chunks.")
    if group != "posterior":
        raise ValueError(
            f"group must be 'posterior' with a numpyro MCMC (its draws); got {group!r}.")
    check_progress(progress)
    if not is_labelled(trace) and model is not None:
        raise TypeError(
            "trace is a numpyro MCMC, which carries its own model: model must be None (got "
            f"{type(model).__name__}).")
    if is_labelled(trace):
        _add_scores_iv(trace, model, group, strategy, progress)
    from steindiag import __version__
    from steindiag.inputs._trace import _STORED_MARK

    pending = read_input(trace, model, group=group)
    prepared = pending.with_scores()
    check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
    attrs = {
        _STORED_MARK: "unconstrained draws and grad log p of the model at them",
        "space": "unconstrained",
        "jacobian": "included",
        "log_density": prepared.attrs.get("log_density", "-potential_energy (numpyro)"),
        "free_variables": list(prepared.attrs.get("latent_sites", [])),
        "transforms": list(prepared.attrs.get("transforms", [])),
        "score_strategy": "jax.jit(jax.vmap(jax.grad(-potential_energy)))",
        "steindiag_version": __version__,
    }
    return _stored(pending.container, group, prepared, prepared.scores,
                   list(prepared.parameter), attrs)
