"""Input layer: traces (InferenceData, DataTree, Dataset) + a score source -> ``SteinInput``.

Data flow::

    data (DataTree | InferenceData | Dataset), group, coords, sample_dims
      -> posterior Dataset with (chain, draw) leading
    + score source: PyMC model | callable | arrays | nutpie's stored gradients
      -> draws and scores as float64 (chain, draw, d) arrays in the unconstrained space

This module validates the arguments, selects the group and the draws and chooses the score
source; :mod:`steindiag.inputs._trace_arrays` flattens variables and score arrays,
:mod:`steindiag.inputs._trace_model` reads a PyMC model's draws and nutpie's stored
gradients, :mod:`steindiag.inputs._space` checks the space of a sampler's stored draws.
PyMC, PyTensor and ArviZ are imported only when a PyMC model is passed (in
:mod:`steindiag.inputs._pymc`); this module depends on NumPy and xarray only.
"""

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from steindiag._containers import (
    COMPANION_GROUPS, STORED_LABEL, check_not_empty, container_kind, coordinate, get_group,
    group_names, picks_one, select, with_sample_dims,
)
from steindiag._types import PendingInput, SteinInput
from steindiag._validate import as_draws_array, check_bool, check_int
from steindiag.inputs import _pymc
from steindiag.inputs._checks import check_compile_mode, check_space, where_not_finite
from steindiag.inputs._selection import (check_model_names, model_selection,
                                         score_selection_attrs, select_coordinates)
from steindiag.inputs._space import (check_trace_space, is_untransformed, score_failure_hint,
                                     warn_constrained_variables)
from steindiag.inputs._trace_arrays import (dataarray_as_dataset, flatten_dataset, group_score,
                                            score_variables, user_scores)
from steindiag.inputs._trace_model import (
    check_model_selection, check_stored_selection, model_draws, nutpie_stats,
    stored_score_attrs, written_by_add_scores,
)

__all__ = ["read_trace", "read_labelled"]

_NO_SCORE_SOURCE = (
    "pass model= (a PyMC model) or score= (a callable or arrays of grad log p); without "
    "them the trace must hold nutpie's stored unconstrained draws and gradients "
    "(store_unconstrained=True, store_gradient=True)."
)


def _is_pymc_model(model):
    module = type(model).__module__ or ""
    if not module.startswith("pymc"):
        return False
    import pymc as pm

    return isinstance(model, pm.Model)


def _prepare_trace_iv(data, model, score, batched, group, var_names, coords, sample_dims,
                      chunk_size, compile_mode):
    if container_kind(data) is None:
        raise TypeError(
            "data must be an arviz.InferenceData, an xarray.DataTree (ArviZ >= 1), an "
            "xarray.Dataset of the posterior or an xarray.DataArray of draws; got "
            f"{type(data).__name__}."
        )
    if model is not None and not _is_pymc_model(model):
        raise TypeError(f"model must be a pymc.Model or None; got {type(model).__name__}.")
    if score is not None and not (
        callable(score) or isinstance(score, (xr.DataArray, xr.Dataset, np.ndarray, list, tuple))
    ):
        raise TypeError(
            "score must be a callable on the flat unconstrained vector, an array or "
            "xarray.DataArray of shape (chain, draw, d), or an xarray.Dataset of scores; "
            f"got {type(score).__name__}."
        )
    check_bool(batched, "batched")
    if not isinstance(group, str):
        raise TypeError(f"group must be a string naming a group; got {type(group).__name__}.")
    if isinstance(var_names, str):
        var_names = [var_names]
    if var_names is not None:
        if not (isinstance(var_names, Sequence) and all(isinstance(v, str) for v in var_names)):
            raise TypeError(f"var_names must be a string or a list of strings; got {var_names!r}.")
        if len(var_names) == 0:
            raise ValueError("var_names must name at least one variable; got an empty list.")
        var_names = list(var_names)
    if var_names is not None and container_kind(data) == "dataarray":
        raise TypeError(
            "var_names selects variables of a trace; data is a DataArray (one variable), "
            f"so var_names must be None; got var_names={var_names}."
        )
    if coords is not None and not isinstance(coords, Mapping):
        raise TypeError(f"coords must be a dict {{dim: values}}; got {type(coords).__name__}.")
    if isinstance(sample_dims, str):
        sample_dims = (sample_dims,)
    if not (
        isinstance(sample_dims, Sequence)
        and 1 <= len(sample_dims) <= 2
        and all(isinstance(dim, str) for dim in sample_dims)
        and len(set(sample_dims)) == len(sample_dims)
    ):
        raise ValueError(
            "sample_dims must be (chain_dim, draw_dim) or (draw_dim,), distinct strings; "
            f"got {sample_dims!r}."
        )
    for dim in sample_dims:
        if coords and dim in coords and picks_one(coords[dim]):
            value = coords[dim]
            value = value.item() if isinstance(value, np.generic) else value
            raise ValueError(
                f"coords={{{dim!r}: {value!r}}} selects a single {dim} and so drops the "
                f"{dim!r} dimension, which the draws need; pass a list to keep it: "
                f"coords={{{dim!r}: [{value!r}]}}."
            )
    check_int(chunk_size, "chunk_size", minimum=1, allow_none=True)
    if compile_mode is not None and not (
        isinstance(compile_mode, str) or type(compile_mode).__name__ == "Mode"
    ):
        raise TypeError(
            f"compile_mode must be a PyTensor mode (a name such as 'CVM' or 'NUMBA', or a "
            f"pytensor Mode) or None; got {compile_mode!r}."
        )
    return var_names, dict(coords) if coords else None, tuple(sample_dims)


def _pending(draws, chain, draw, labels, attrs, scores):
    """A trace's ``PendingInput``: ``with_scores()`` calls ``scores`` (() -> (scores
    (chain, draw, d), source); None: no score source) and checks the scores."""
    def complete():
        if scores is None:
            raise TypeError(_NO_SCORE_SOURCE)
        values, source = scores()
        if values.shape != draws.shape:
            raise ValueError(
                f"scores have shape {values.shape} but draws have shape {draws.shape}."
            )
        where_not_finite(
            values, chain, draw, labels, "scores",
            "The score (grad log p) must be finite at every draw; check the model or the "
            "score source at those draws.",
        )
        return SteinInput(draws=draws, scores=np.ascontiguousarray(values, dtype=np.float64),
                          chain=chain, draw=draw, parameter=list(labels),
                          attrs={**attrs, "score_source": source})

    return PendingInput(draws=draws, chain=chain, draw=draw, parameter=labels, attrs=attrs,
                        complete=complete)


def read_trace(data, model=None, *, score=None, batched=True, group="posterior",
               var_names=None, coords=None, sample_dims=("chain", "draw"),
               chunk_size=None, compile_mode=None, space=None, need_score=True):
    """The draws of a trace, read and checked, their scores not yet evaluated.

    Every argument is validated before anything is read; no score is evaluated and no
    score graph compiled (a PyMC model's forward transforms may be compiled to map
    constrained values to the value variables). ``with_scores()`` of the result
    evaluates (or loads) the scores.

    Parameters
    ----------
    data : arviz.InferenceData, xarray.DataTree, xarray.Dataset or xarray.DataArray
        The trace: ``pm.sample`` output (InferenceData on ArviZ 0.x, DataTree on
        ArviZ 1.x / PyMC 6), the posterior Dataset itself, or one variable's draws as a
        DataArray with the sample dims and any parameter dims (named by its name, "x"
        if it has none; a score array of its shape or a score DataArray with its dims
        is read as that variable's score).
    model : pymc.Model, optional
        The model that produced the trace. Draws are the model's value variables
        (unconstrained space): taken from the trace when it stores them
        (``include_transformed=True``, an ``unconstrained_posterior`` group, nutpie's
        ``store_unconstrained=True``), otherwise mapped forward from the posterior's
        constrained values through each free variable's transform. Scores are grad of
        ``model.logp(jacobian=True)`` with respect to the value variables, or nutpie's
        stored gradients (``store_gradient=True``) when present.
    score : callable, array_like, xarray.DataArray or xarray.Dataset, optional
        Score source instead of the model's gradient:

        - a callable on the flat parameter vector: ``batched=True`` maps (n, d) to
          (n, d), ``batched=False`` maps (d,) to (d,);
        - an array or DataArray of shape (chain, draw, d), aligned on the trace's chain
          and draw coordinates (a DataArray's parameter coordinate matched to the
          parameter labels: reordered to them, refused if it differs);
        - a Dataset (or a trace group's DataTree node) with the same variable names as
          the draws (the value variables with ``model``, otherwise ``var_names``), each
          variable matched by its dims' names and coordinate values.

        With ``model`` as well, the model only defines the unconstrained draws.
    batched : bool, default True
        Whether a ``score`` callable takes a batch (n, d) or one draw (d,).
    group : str, default "posterior"
        Group of ``data`` holding the draws (ignored for a Dataset).
    var_names : list of str, optional
        Without ``model``: the variables forming x, in order (default: all variables of
        the group, or of ``score`` when it is a Dataset). With ``model``: the free
        variables checked (by name or value-variable name; deterministics are passed
        over), in the model's order: the whole score is evaluated and its selected
        components kept (``attrs["stein_coordinates"]``; ``selection`` of the result).
    coords : dict, optional
        Selection applied to the group before anything else (``Dataset.sel``), e.g.
        ``{"chain": [0, 1], "draw": slice(500, None)}``.
    sample_dims : sequence of str, default ("chain", "draw")
        Names of the chain and draw dimensions; a single name means one chain.
    chunk_size : int, optional
        Draws per evaluation of the score (default: for a PyMC model, sized so that an
        intermediate array holds about 32k elements; for a callable, 4096).
    compile_mode : str or pytensor.compile.Mode, optional
        PyTensor mode for the model's batched score graph (default: "CVM", the C
        backend, when a C++ compiler is available, else "NUMBA"; see
        benchmarks/bench_scores.py for compile and run times).
    need_score : bool, default True
        False: only the draws are wanted (no score source is required).
    space : {"unconstrained", "constrained"}, optional
        With ``score`` and no ``model``: the space of the stored draws, in which the
        score is grad log p; recorded in ``attrs["space"]`` ("as given" if None). Must be
        given for a trace written by a sampler library that transforms its variables
        (ArviZ's ``inference_library`` attribute, e.g. numpyro, Stan, PyMC; not emcee).

    Returns
    -------
    PendingInput
        Its ``with_scores()`` gives the ``SteinInput``: ``draws`` and ``scores`` as float64
        arrays of shape (chain, draw, d); ``chain`` and ``draw`` coordinate values;
        ``parameter`` labels (value-variable names with coordinate values or positions,
        e.g. ``"sigma_log__"``, ``"beta[0]"``, ``"theta[a]"``: the rule of
        :mod:`steindiag.inputs._labels`); ``attrs`` naming the space, the score source,
        and for a model its free variables, value variables, transforms and where each
        value came from.

    Raises
    ------
    TypeError
        For arguments of the wrong type.
    ValueError
        For a missing group, missing chain/draw dims, discrete free variables, free
        variables missing from the trace, shape or coordinate mismatches between model
        and trace, non-finite unconstrained draws (with counts and where), a score
        callable that raises or returns the wrong shape.

    Warns
    -----
    UserWarning
        When the model's observed or ``pm.Data`` values differ from the trace's
        ``observed_data`` / ``constant_data`` groups.

    Notes
    -----
    KSD needs the score of a density that is positive and differentiable on all of
    R^d: for a PyMC model that is the log density of the value variables including the
    log-Jacobian of the transforms, log p(x) = log p_c(T^-1(x)) + log |det J_{T^-1}(x)|.
    The score is one vectorised PyTensor graph evaluated on chunks of draws: memory
    O(chunk_size * (d + size of observed data)).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from steindiag.inputs._trace import read_trace
    >>> rng = np.random.default_rng(0)
    >>> posterior = xr.Dataset({"x": (("chain", "draw"), rng.standard_normal((2, 100)))})
    >>> prepared = read_trace(posterior, score=lambda x: -x).with_scores()  # s(x) = -x
    >>> prepared.draws.shape, prepared.parameter
    ((2, 100, 1), ['x'])
    """
    score = group_score(score)
    var_names, coords, sample_dims = _prepare_trace_iv(
        data, model, score, batched, group, var_names, coords, sample_dims, chunk_size,
        compile_mode,
    )
    if container_kind(data) == "dataarray":
        data, score = dataarray_as_dataset(data, score)
    if container_kind(data) == "dataset":
        posterior, group_label = data, "data"
    elif container_kind(data) == "datatree" and not data.children and data.has_data:
        # A single group's node, e.g. ``idata.posterior`` on ArviZ 1.x.
        posterior, group_label = data.to_dataset(), f"node {data.name!r}"
    else:
        posterior, group_label = get_group(data, group), f"group {group!r}"
        if posterior is None:
            raise ValueError(
                f"data has no group {group!r}; its groups are {group_names(data)}."
            )
    if model is not None:
        check_model_names(var_names, model, posterior.data_vars)
    if model is not None and coords:
        check_model_selection(model, posterior, coords, sample_dims, group_label)
    posterior = select(posterior, coords, group_label, strict=True)
    check_not_empty(posterior, None, coords, group_label)
    posterior, pair = with_sample_dims(posterior, sample_dims, group_label)
    check_not_empty(posterior, pair, coords, group_label)
    chain, draw = coordinate(posterior, pair[0]), coordinate(posterior, pair[1])
    stats_group = COMPANION_GROUPS.get(group, (None, None))[1]
    if container_kind(data) == "dataset":
        stats_group = None

    selection = None   # with a model: the free variables var_names selects
    if model is not None:
        layout, whole, whole_labels, attrs, nutpie_scores = model_draws(
            data, model, posterior, pair, chain, draw, coords=coords, group=group,
            sample_dims=sample_dims, chunk_size=chunk_size, compile_mode=compile_mode,
        )
        nutpie_gradient = nutpie_stats(data, stats_group, coords, sample_dims, chain,
                                        draw)[1]

        def scores():
            if score is not None:
                names = [var.value_name for var in layout]
                return user_scores(score, whole, whole_labels, names, chain, draw, sample_dims,
                                   batched=batched, chunk_size=chunk_size,
                                   reference=posterior)
            if nutpie_scores is not None:
                if written_by_add_scores(nutpie_gradient):
                    attrs.update(stored_score_attrs(nutpie_gradient, stats_group))
                    return nutpie_scores, "stored"
                attrs["scores_from"] = "sample_stats['gradient'] (nutpie store_gradient=True)"
                return nutpie_scores, "nutpie"
            mode = _pymc.default_compile_mode() if compile_mode is None else compile_mode
            flat = _pymc.model_scores(model, layout, whole.reshape(-1, whole.shape[2]),
                                      chunk_size=chunk_size, mode=mode)
            attrs["pytensor_mode"] = mode if isinstance(mode, str) else str(mode)
            return flat.reshape(whole.shape), "pymc"

        selection = model_selection(var_names, layout, posterior.data_vars)
        draws, labels, scores = select_coordinates(
            selection, whole, whole_labels, scores, attrs,
            lambda points, values, names, source: SteinInput(
                draws=points, scores=values, chain=chain, draw=draw, parameter=names,
                attrs={**attrs, "score_source": source}))
    else:
        nutpie_draw, nutpie_gradient = None, None
        if score is None and (need_score or var_names is None):
            nutpie_draw, nutpie_gradient = nutpie_stats(data, stats_group, coords,
                                                         sample_dims, chain, draw)
            if not need_score and not written_by_add_scores(nutpie_gradient):
                # Draws only (mmd): a nutpie trace keeps its stored constrained variables.
                nutpie_draw, nutpie_gradient = None, None
        if nutpie_draw is not None and nutpie_gradient is not None:
            check_stored_selection(None, var_names, sample_dims)
            if space == "constrained":
                raise ValueError(
                    "space='constrained' was given, but without score= the draws and scores "
                    "are nutpie's stored unconstrained ones."
                )
            parameter_dim = nutpie_draw.dims[2]
            labels = [str(v) for v in coordinate(nutpie_draw.to_dataset(name="x"),
                                                  parameter_dim)]
            draws = np.asarray(nutpie_draw.values, dtype=np.float64)
            gradient = nutpie_gradient
            if parameter_dim in nutpie_gradient.coords and parameter_dim in nutpie_draw.coords:
                gradient = nutpie_gradient.sel({parameter_dim: nutpie_draw[parameter_dim].values})
            attrs = {"space": "unconstrained",
                     "scores_from": "sample_stats['gradient'] (nutpie store_gradient=True)"}
            source = "nutpie"
            if written_by_add_scores(nutpie_gradient):
                check_stored_selection(coords, var_names, sample_dims)
                labels = [str(v) for v in nutpie_draw[STORED_LABEL].values]
                attrs = stored_score_attrs(nutpie_gradient, stats_group)
                source = "stored"

            def scores():
                return np.asarray(gradient.values, dtype=np.float64), source
        elif score is None and need_score:
            raise TypeError(_NO_SCORE_SOURCE)
        else:
            if score is not None:
                check_trace_space(data, posterior, space, group_label)
            chose_all = var_names is None and not isinstance(score, xr.Dataset)
            if var_names is None:
                var_names = (score_variables(score, posterior) if isinstance(score, xr.Dataset)
                             else list(posterior.data_vars))
            draws, labels = flatten_dataset(posterior, var_names, pair, group_label)
            attrs = {"space": "as given" if space is None else space,
                     "variables": list(var_names)}
            if isinstance(score, xr.Dataset):
                attrs.update(score_selection_attrs(score, var_names, pair))
            if score is not None and (space == "unconstrained"
                                      or is_untransformed(data, posterior)):
                warn_constrained_variables(posterior, var_names, pair, draws, attrs["space"],
                                           labels)

            def scores():
                try:
                    return user_scores(score, draws, labels, var_names, chain, draw,
                                       sample_dims, batched=batched, chunk_size=chunk_size,
                                       reference=posterior)
                except ValueError as err:
                    hint = score_failure_hint(var_names, labels, chose_all and callable(score))
                    if not hint:
                        raise
                    # Keep the score's own exception as the cause (what raised inside it).
                    raise ValueError(f"{err}{hint}") from (err.__cause__ or err)
        where_not_finite(draws, chain, draw, labels, "draws",
                          "KSD needs finite draws; drop those draws with coords=.")
    if group_label.startswith("group"):
        attrs["group"] = group   # which group of the trace the draws are
    pending = _pending(np.ascontiguousarray(draws, dtype=np.float64), chain, draw,
                       list(labels), attrs, scores if (score is not None or model is not None
                                                       or need_score) else None)
    pending.selection = selection
    return pending


def read_labelled(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=None, space=None, need_score=True,
                  compile_mode=None):
    """A labelled container's draws as a ``PendingInput`` (no score source attached yet).

    :func:`read_trace` after the checks of ``space`` and ``compile_mode``; the draws and
    the scores are checked finite there, with the (chain, draw) of the first non-finite
    ones, and here at least 2 draws per chain.
    """
    check_space(space, model)
    check_compile_mode(compile_mode, model)
    pending = read_trace(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=("chain", "draw") if sample_dims is None else sample_dims,
        space=space, need_score=need_score, compile_mode=compile_mode,
    )
    as_draws_array(pending.draws, "data")
    return pending
