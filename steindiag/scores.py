"""Scores computed once: ``add_scores`` stores a model's scores in the trace.

Data flow::

    trace + model -> inputs.read_input (the unconstrained draws every function reads)
                  -> the score source's one pass (PyMC: per-draw, or batched where it pays;
                     numpyro: jax.grad of its potential)
                  -> outputs.traces: the same trace with sample_stats["unconstrained_draw"]
                     and sample_stats["gradient"] (nutpie's layout, which every function
                     reads)
"""

from steindiag._containers import STORED_MARK, container_kind, is_labelled
from steindiag._validate import check_choice, check_finite
from steindiag._version import __version__
from steindiag.engine.progress import check_progress
from steindiag.inputs import as_trace, derived_score, read_input
from steindiag.inputs._pymc import STRATEGIES
from steindiag.outputs.traces import STATS_GROUPS, with_stored_scores

__all__ = ["add_scores"]


def _add_scores_iv(trace, model, group, strategy, progress):
    kind = container_kind(trace)
    if kind not in ("inferencedata", "datatree") or (kind == "datatree" and not trace.children):
        raise TypeError(
            "trace must be an arviz.InferenceData or an xarray.DataTree with groups (the "
            "output of pm.sample): the scores are stored in its sample_stats group; got "
            f"{type(trace).__name__}. For a posterior Dataset, make a trace of it first, "
            "e.g. xarray.DataTree.from_dict({'posterior': dataset})."
        )
    if model is None:
        raise TypeError("model is required: add_scores evaluates the scores of a PyMC model.")
    if group not in STATS_GROUPS:
        raise ValueError(
            f"group must be one of {list(STATS_GROUPS)} (the groups whose sampler "
            f"statistics group can hold the scores); got {group!r}."
        )
    check_choice(strategy, "strategy", STRATEGIES)
    check_progress(progress)


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
        ``"per-draw"``: the function ``pm.sample`` compiles (log p and its gradient at
        one draw, already in PyTensor's compile cache after sampling) called once per
        draw; ``"auto"``: the per-draw way, and the batched graph compiled and timed
        only where the loop would take more than 10 s, then the faster. The numbers
        are the same to rounding.
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
    if derived_score(trace, model) == "numpyro":
        return _add_numpyro_scores(trace, model, group, compile_mode, strategy, chunk_size,
                                   progress)
    trace, model = as_trace(trace, model)   # a MultiTrace or an approximation: a trace
    _add_scores_iv(trace, model, group, strategy, progress)
    pending = read_input(trace, model, group=group, compile_mode=compile_mode,
                         need_score=False)
    scores, labels, attrs = pending.source.model_scores(
        pending.draws, strategy=strategy, chunk_size=chunk_size, progress=progress)
    check_finite(scores, "scores", pending.chain, pending.draw)
    return with_stored_scores(trace, group, pending, scores, labels, attrs)


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
    pending = read_input(trace, model, group=group)
    prepared = pending.with_scores()
    check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
    attrs = {
        STORED_MARK: "unconstrained draws and grad log p of the model at them",
        "space": "unconstrained",
        "jacobian": "included",
        "log_density": prepared.attrs.get("log_density", "-potential_energy (numpyro)"),
        "free_variables": list(prepared.attrs.get("latent_sites", [])),
        "transforms": list(prepared.attrs.get("transforms", [])),
        "score_strategy": "jax.jit(jax.vmap(jax.grad(-potential_energy)))",
        "steindiag_version": __version__,
    }
    return with_stored_scores(pending.origin.data, group, prepared, prepared.scores,
                              list(prepared.canonical), attrs)
