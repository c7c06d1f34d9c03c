"""Input layer: traces (InferenceData, DataTree, Dataset) + a score source -> ``SteinInput``.

Data flow::

    data (DataTree | InferenceData | Dataset), group, coords, sample_dims
      -> posterior Dataset with (chain, draw) leading
    + score source: PyMC model | callable | arrays | nutpie's stored gradients
      -> draws and scores as float64 (chain, draw, d) arrays in the unconstrained space

PyMC, PyTensor and ArviZ are imported only when a PyMC model is passed (in
:mod:`steindiag.inputs._pymc`); this module depends on NumPy and xarray only.
"""

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from steindiag._containers import (
    COMPANION_GROUPS, STORED_LABEL, aligned,
    check_not_empty, container_kind, coordinate, get_group, group_names, picks_one, select,
    with_sample_dims,
)
from steindiag._types import PendingInput, SteinInput
from steindiag._validate import (
    as_draws_array, check_finite, evaluate_score_callable, warn_if_low_precision,
)
from steindiag.inputs import _pymc
from steindiag.inputs._checks import check_compile_mode, check_space, where_not_finite
from steindiag.inputs._labels import variable_labels
from steindiag.inputs._space import score_failure_hint, warn_constrained_columns
from steindiag.inputs._trace_model import (
    check_stored_selection, model_draws, nutpie_stats, stored_score_attrs, written_by_add_scores,
)

__all__ = ["read_trace", "read_labelled", "TraceDraws", "as_trace", "is_multitrace"]

# Libraries whose stored draws are the sampler's own coordinates (no transforms): the
# draws of their traces are taken as given with a score and no ``space``.
_UNTRANSFORMED_LIBRARIES = ("emcee",)


# --------------------------------------------------------------------------------------
# containers
# --------------------------------------------------------------------------------------


def is_multitrace(data):
    """True for a PyMC ``MultiTrace`` (``pm.sample(return_inferencedata=False)``)."""
    module = type(data).__module__ or ""
    return module.startswith("pymc") and type(data).__name__ == "MultiTrace"


def as_trace(data, model=None):
    """A PyMC ``MultiTrace`` converted as ``pm.to_inference_data`` does; other data as is.

    ``pm.sample(return_inferencedata=False)`` returns a MultiTrace (PyMC 5 and 6); it is
    converted with the model that sampled it (the trace keeps a reference to it), else
    with ``model``. The result is what ``pm.sample`` returns by default: an
    ``arviz.InferenceData`` (PyMC 5) or an ``xarray.DataTree`` (PyMC 6).
    """
    if not is_multitrace(data):
        return data
    import pymc as pm

    straces = getattr(data, "_straces", None) or {}
    own = getattr(next(iter(straces.values()), None), "model", None)
    source = own if own is not None else model
    if source is None:
        raise TypeError(
            "data is a PyMC MultiTrace (pm.sample(return_inferencedata=False)) that does not "
            "say which model sampled it: pass model=, or convert it first with "
            "pm.to_inference_data(trace, model=model)."
        )
    try:
        return pm.to_inference_data(data, model=source)
    except Exception as err:  # noqa: BLE001 - any failure of PyMC's own conversion
        raise TypeError(
            "data is a PyMC MultiTrace (pm.sample(return_inferencedata=False)) and "
            f"pm.to_inference_data could not convert it ({type(err).__name__}: {err}); "
            "convert it yourself and pass the InferenceData / DataTree."
        ) from err


# --------------------------------------------------------------------------------------
# validation, up front
# --------------------------------------------------------------------------------------


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
    if not isinstance(batched, (bool, np.bool_)):
        raise TypeError(f"batched must be True or False; got {batched!r}.")
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
        if model is not None:
            raise ValueError(
                "var_names cannot be combined with model: the score of a PyMC model involves "
                f"all its free variables; got var_names={var_names}."
            )
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
    if chunk_size is not None and (
        isinstance(chunk_size, (bool, np.bool_))
        or not isinstance(chunk_size, numbers.Integral)
        or chunk_size < 1
    ):
        raise ValueError(f"chunk_size must be a positive integer or None; got {chunk_size!r}.")
    if compile_mode is not None and not (
        isinstance(compile_mode, str) or type(compile_mode).__name__ == "Mode"
    ):
        raise TypeError(
            f"compile_mode must be a PyTensor mode (a name such as 'CVM' or 'NUMBA', or a "
            f"pytensor Mode) or None; got {compile_mode!r}."
        )
    return var_names, dict(coords) if coords else None, tuple(sample_dims)


def _check_model_selection(model, posterior, coords, sample_dims, what):
    """With a model, ``coords`` must keep every element of every free variable.

    A selection along a dim of a free variable (``{"school": "Choate"}``) leaves the
    draws without some of the model's coordinates; refuse it here, saying what the
    selection did, rather than as a mismatch between model and trace later.
    """
    free = {rv.name for rv in model.free_RVs}
    free |= {model.rvs_to_values[rv].name for rv in model.free_RVs}
    for dim, value in coords.items():
        if dim in sample_dims or dim not in posterior.dims:
            continue
        hit = [name for name in posterior.data_vars
               if name in free and dim in posterior[name].dims]
        if not hit:
            continue
        size = posterior.sizes[dim]
        if picks_one(value):
            did = (f"picks one of the {size} values of {dim!r} and drops the dimension")
        else:
            try:
                kept = posterior[[hit[0]]].sel({dim: value})
            except (KeyError, ValueError, IndexError, TypeError):
                continue  # not selectable at all: select says why
            have = coordinate(posterior, dim)
            if kept.sizes[dim] == size and np.array_equal(coordinate(kept, dim), have):
                continue  # keeps every value in order: no change
            did = f"keeps {kept.sizes[dim]} of the {size} values of {dim!r}"
        raise ValueError(
            f"coords={{{dim!r}: {value!r}}} {did} in {what}, a dimension of the model's "
            f"free variable(s) {hit}. With model=, the score is grad log p of all free "
            "variables together, so the draws must keep every element of each: coords can "
            f"select along {list(sample_dims)} only (e.g. coords={{'draw': slice(100, "
            "None)}}). This is not a mismatch between the model and the trace. For a "
            "subset of the parameters, pass the score of their marginal density as score= "
            "without model (and var_names=)."
        )


# --------------------------------------------------------------------------------------
# labelled draws
# --------------------------------------------------------------------------------------


def _as_float_block(data_array, sample_dims, name, what):
    """(chain, draw, k) float64 block of one variable, its per-draw shape."""
    missing = [dim for dim in sample_dims if dim not in data_array.dims]
    if missing:
        raise ValueError(
            f"variable {name!r} of {what} has no dimension(s) {missing}; its dims are "
            f"{list(data_array.dims)}."
        )
    data_array = data_array.transpose(*sample_dims, ...)
    values = np.asarray(data_array.values)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise TypeError(f"variable {name!r} of {what} must be numeric; got dtype {values.dtype}.")
    n_chain, n_draw = values.shape[:2]
    return values.astype(np.float64).reshape(n_chain, n_draw, -1), values.shape[2:]


def _flatten_dataset(dataset, names, sample_dims, what):
    """Concatenate ``names`` of ``dataset`` into (chain, draw, d) with labels."""
    missing = [name for name in names if name not in dataset.data_vars]
    if missing:
        raise ValueError(
            f"{what} has no variable(s) {missing}; it has {list(dataset.data_vars)}."
        )
    blocks, labels = [], []
    for name in names:
        block, _ = _as_float_block(dataset[name], sample_dims, name, what)
        blocks.append(block)
        labels.extend(variable_labels(name, dataset[name], sample_dims))
    return np.concatenate(blocks, axis=2), labels


# --------------------------------------------------------------------------------------
# error messages for non-finite values
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# score sources
# --------------------------------------------------------------------------------------


def _user_scores(score, draws, labels, names, chain, draw, sample_dims, *, batched, chunk_size):
    """Scores from a callable, an array, a DataArray or a Dataset (aligned on chain/draw)."""
    n_chain, n_draw, d = draws.shape
    if callable(score):
        kwargs = {} if chunk_size is None else {"chunk_size": int(chunk_size)}
        return evaluate_score_callable(score, draws, batched=batched, **kwargs), "callable"
    if isinstance(score, (xr.Dataset, xr.DataArray)):
        is_dataset = isinstance(score, xr.Dataset)
        dataset = score if is_dataset else score.to_dataset(name="__score__")
        dataset, pair = with_sample_dims(dataset, sample_dims, "score")
        dataset = aligned(dataset, chain, draw, pair, "score")
        for variable in dataset.data_vars.values():
            warn_if_low_precision(variable.dtype, "score")
        if is_dataset:
            scores, _ = _flatten_dataset(dataset, names, pair, "score")
        else:
            scores = _data_array_scores(dataset["__score__"], pair, labels)
        if scores.shape != draws.shape:
            raise ValueError(
                f"score has shape {scores.shape} (chain, draw, d) after alignment; the draws "
                f"have shape {draws.shape} with parameters {labels[:6]}"
                f"{'...' if len(labels) > 6 else ''}."
            )
        return scores, "arrays"
    values = np.asarray(score)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise TypeError(f"score must hold real numbers; got dtype {values.dtype}.")
    warn_if_low_precision(values.dtype, "score")
    if values.shape != draws.shape:
        raise ValueError(
            f"score array must have the shape of the draws, (chain, draw, d) = {draws.shape}; "
            f"got {values.shape}."
        )
    return values.astype(np.float64), "arrays"


def _data_array_scores(score, pair, labels):
    """(chain, draw, d) values of a score DataArray with dims (chain, draw[, parameter])."""
    other = [dim for dim in score.dims if dim not in pair]
    if len(other) > 1:
        raise ValueError(
            f"score DataArray must have dims ({pair[0]}, {pair[1]}, parameter); got "
            f"{list(score.dims)}."
        )
    if not other:
        return np.asarray(score.transpose(*pair).values, dtype=np.float64)[:, :, None]
    [parameter_dim] = other
    if parameter_dim in score.coords:
        have = [str(v) for v in score[parameter_dim].values]
        if sorted(have) == sorted(labels) and have != list(labels):
            # The parameter labels say which column is which: follow them.
            score = score.isel({parameter_dim: [have.index(label) for label in labels]})
    return np.asarray(score.transpose(*pair, parameter_dim).values, dtype=np.float64)


# --------------------------------------------------------------------------------------
# PyMC models
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# public entry point of the layer
# --------------------------------------------------------------------------------------


def _inference_library(data, posterior):
    """The library that wrote the trace (ArviZ's ``inference_library`` attribute), or None."""
    for attrs in (posterior.attrs, getattr(data, "attrs", None) or {}):
        library = attrs.get("inference_library")
        if library:
            return str(library)
    return None


def _untransformed(data, posterior):
    """Whether the trace was written by a library without transforms (emcee)."""
    library = _inference_library(data, posterior)
    return library is not None and library.lower() in _UNTRANSFORMED_LIBRARIES


def _warn_constrained(posterior, var_names, pair, draws, space, labels):
    """The space check of :mod:`steindiag.inputs._space`, per variable of the trace."""
    columns, start = [], 0
    for name in var_names:
        size = int(np.prod([posterior[name].sizes[dim] for dim in posterior[name].dims
                            if dim not in pair]))
        columns.append(np.arange(start, start + size))
        start += size
    warn_constrained_columns(var_names, columns, draws, space, labels)


def _check_trace_space(data, posterior, space, group_label):
    """Refuse to guess the space of a sampler's stored draws against a user's score."""
    library = _inference_library(data, posterior)
    if space is not None or library is None or library.lower() in _UNTRANSFORMED_LIBRARIES:
        return
    raise ValueError(
        f"the trace's {group_label} was written by {library} (attrs['inference_library']) "
        "and score= is given without a model, so steindiag cannot tell which space the "
        f"draws and the score are in. {library} stores constrained values (e.g. sigma > 0), "
        "while the usual scores (numpyro's potential_energy, Stan's grad_log_prob or "
        "log_density_gradient, a PyMC model's value variables) are in the unconstrained "
        "space; mixing the two gives a plausible but wrong KSD. Either pass the "
        "unconstrained draws as an array with their score (the user guide's recipes for "
        "numpyro and Stan do this), or say what the trace holds: space='unconstrained' if "
        "the stored variables are unconstrained coordinates and the score (log-Jacobian "
        "included) is in them, space='constrained' if the score is grad log p of the stored "
        "values themselves (valid only for a density smooth and positive on all of R^d). "
        "For a PyMC trace, pass the model instead."
    )


@dataclass(kw_only=True)
class TraceDraws:
    """Draws of a trace read and checked, their scores not yet evaluated.

    ``with_scores()`` evaluates (or loads) the scores and returns the ``SteinInput``;
    everything that can be checked without a score has been checked by then.
    """

    draws: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    parameter: list
    attrs: dict
    scores: object = None  # () -> (scores (chain, draw, d), source), or None

    def with_scores(self):
        if self.scores is None:
            raise TypeError(
                "pass model= (a PyMC model) or score= (a callable or arrays of grad log "
                "p); without them the trace must hold nutpie's stored unconstrained "
                "draws and gradients (store_unconstrained=True, store_gradient=True)."
            )
        scores, source = self.scores()
        if scores.shape != self.draws.shape:
            raise ValueError(
                f"scores have shape {scores.shape} but draws have shape {self.draws.shape}."
            )
        where_not_finite(
            scores, self.chain, self.draw, self.parameter, "scores",
            "The score (grad log p) must be finite at every draw; check the model or the "
            "score source at those draws.",
        )
        return SteinInput(
            draws=self.draws,
            scores=np.ascontiguousarray(scores, dtype=np.float64),
            chain=self.chain,
            draw=self.draw,
            parameter=list(self.parameter),
            attrs={**self.attrs, "score_source": source},
        )


def _dataarray_as_dataset(data, score):
    """A DataArray of draws as a one-variable Dataset, and its score in the same form.

    A score array of the DataArray's shape, or a score DataArray with its dims, is
    read as that variable's score (so its elements get the same labels).
    """
    name = data.name if data.name is not None else "x"
    if isinstance(score, (np.ndarray, list, tuple)) and np.shape(score) == data.shape:
        score = data.copy(data=np.asarray(score))
    if isinstance(score, xr.DataArray) and set(score.dims) == set(data.dims):
        score = score.to_dataset(name=name)
    return data.to_dataset(name=name), score


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
          and draw coordinates (a DataArray's parameter coordinate, if it carries the
          parameter labels, is used to order the columns);
        - a Dataset with the same variable names as the draws (the value variables with
          ``model``, otherwise ``var_names``).

        With ``model`` as well, the model only defines the unconstrained draws.
    batched : bool, default True
        Whether a ``score`` callable takes a batch (n, d) or one draw (d,).
    group : str, default "posterior"
        Group of ``data`` holding the draws (ignored for a Dataset).
    var_names : list of str, optional
        Without ``model``: the variables forming x, in order (default: all variables of
        the group, or of ``score`` when it is a Dataset). Not allowed with ``model``,
        whose score involves all free variables.
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
    TraceDraws
        Its ``with_scores()`` gives the ``SteinInput``: ``draws`` and ``scores`` as float64 arrays of shape (chain, draw, d); ``chain``
        and ``draw`` coordinate values; ``parameter`` labels (value-variable names with
        coordinate values or positions, e.g. ``"sigma_log__"``, ``"beta[0]"``,
        ``"theta[a]"``: the rule of :mod:`steindiag.inputs._labels`); ``attrs`` naming the space,
        the score source, and for a model its free variables, value variables,
        transforms and where each value came from.

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
    var_names, coords, sample_dims = _prepare_trace_iv(
        data, model, score, batched, group, var_names, coords, sample_dims, chunk_size,
        compile_mode,
    )
    if container_kind(data) == "dataarray":
        data, score = _dataarray_as_dataset(data, score)
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
    if model is not None and coords:
        _check_model_selection(model, posterior, coords, sample_dims, group_label)
    posterior = select(posterior, coords, group_label, strict=True)
    check_not_empty(posterior, None, coords, group_label)
    posterior, pair = with_sample_dims(posterior, sample_dims, group_label)
    check_not_empty(posterior, pair, coords, group_label)
    chain, draw = coordinate(posterior, pair[0]), coordinate(posterior, pair[1])
    stats_group = COMPANION_GROUPS.get(group, (None, None))[1]
    if container_kind(data) == "dataset":
        stats_group = None

    if model is not None:
        layout, draws, labels, attrs, nutpie_scores = model_draws(
            data, model, posterior, pair, chain, draw, coords=coords, group=group,
            sample_dims=sample_dims, chunk_size=chunk_size, compile_mode=compile_mode,
        )
        nutpie_gradient = nutpie_stats(data, stats_group, coords, sample_dims, chain,
                                        draw)[1]

        def scores():
            if score is not None:
                names = [var.value_name for var in layout]
                return _user_scores(score, draws, labels, names, chain, draw, sample_dims,
                                    batched=batched, chunk_size=chunk_size)
            if nutpie_scores is not None:
                if written_by_add_scores(nutpie_gradient):
                    attrs.update(stored_score_attrs(nutpie_gradient, stats_group))
                    return nutpie_scores, "stored"
                attrs["scores_from"] = "sample_stats['gradient'] (nutpie store_gradient=True)"
                return nutpie_scores, "nutpie"
            mode = _pymc.default_compile_mode() if compile_mode is None else compile_mode
            flat = _pymc.model_scores(model, layout, draws.reshape(-1, draws.shape[2]),
                                      chunk_size=chunk_size, mode=mode)
            attrs["pytensor_mode"] = mode if isinstance(mode, str) else str(mode)
            return flat.reshape(draws.shape), "pymc"
    else:
        nutpie_draw, nutpie_gradient = None, None
        if score is None and (need_score or var_names is None):
            nutpie_draw, nutpie_gradient = nutpie_stats(data, stats_group, coords,
                                                         sample_dims, chain, draw)
            if not need_score and not written_by_add_scores(nutpie_gradient):
                # Draws only (mmd): a nutpie trace keeps its stored constrained variables.
                nutpie_draw, nutpie_gradient = None, None
        if nutpie_draw is not None and nutpie_gradient is not None:
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
            raise TypeError(
                "pass model= (a PyMC model) or score= (a callable or arrays of grad log "
                "p); without them the trace must hold nutpie's stored unconstrained "
                "draws and gradients (store_unconstrained=True, store_gradient=True)."
            )
        else:
            if score is not None:
                _check_trace_space(data, posterior, space, group_label)
            chose_all = var_names is None and not isinstance(score, xr.Dataset)
            if var_names is None:
                var_names = (list(score.data_vars) if isinstance(score, xr.Dataset)
                             else list(posterior.data_vars))
            draws, labels = _flatten_dataset(posterior, var_names, pair, group_label)
            attrs = {"space": "as given" if space is None else space,
                     "variables": list(var_names)}
            if score is not None and (space == "unconstrained" or _untransformed(data,
                                                                                 posterior)):
                _warn_constrained(posterior, var_names, pair, draws, attrs["space"], labels)

            def scores():
                try:
                    return _user_scores(score, draws, labels, var_names, chain, draw,
                                        sample_dims, batched=batched, chunk_size=chunk_size)
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
    return TraceDraws(
        draws=np.ascontiguousarray(draws, dtype=np.float64),
        chain=chain,
        draw=draw,
        parameter=list(labels),
        attrs=attrs,
        scores=scores if (score is not None or model is not None or need_score) else None,
    )


def read_labelled(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=None, space=None, need_score=True,
                  compile_mode=None):
    """A labelled container's draws as a ``PendingInput`` (no score source attached yet).

    :func:`read_trace` after the checks of ``space`` and ``compile_mode``; the draws and
    the scores are checked finite, with the (chain, draw) of the first non-finite ones.
    """
    check_space(space, model)
    check_compile_mode(compile_mode, model)
    pending = read_trace(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=("chain", "draw") if sample_dims is None else sample_dims,
        space=space, need_score=need_score, compile_mode=compile_mode,
    )
    draws, chain, draw = pending.draws, pending.chain, pending.draw
    as_draws_array(draws, "data")
    check_finite(draws, "draws", chain, draw)

    def complete():
        prepared = pending.with_scores()
        check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
        return prepared

    return PendingInput(draws=draws, chain=chain, draw=draw, parameter=pending.parameter,
                        attrs=pending.attrs, complete=complete)
