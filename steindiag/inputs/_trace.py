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

from steindiag._types import SteinInput
from steindiag._validate import warn_if_low_precision
from steindiag.inputs._labels import element_labels, variable_labels
from steindiag.inputs._space import score_failure_hint, warn_constrained_columns

__all__ = ["prepare_trace", "read_trace", "TraceDraws", "as_trace", "is_multitrace"]

# group -> (group of stored unconstrained values, group of sampler statistics)
_COMPANION_GROUPS = {
    "posterior": ("unconstrained_posterior", "sample_stats"),
    "warmup_posterior": ("warmup_unconstrained_posterior", "warmup_sample_stats"),
}
# nutpie (store_unconstrained=True / store_gradient=True) writes these to sample_stats.
_NUTPIE_DRAW, _NUTPIE_GRADIENT = "unconstrained_draw", "gradient"
# Libraries whose stored draws are the sampler's own coordinates (no transforms): the
# draws of their traces are taken as given with a score and no ``space``.
_UNTRANSFORMED_LIBRARIES = ("emcee",)


# --------------------------------------------------------------------------------------
# containers
# --------------------------------------------------------------------------------------


def _container_kind(data):
    if isinstance(data, xr.DataArray):
        return "dataarray"
    if isinstance(data, xr.Dataset):
        return "dataset"
    if isinstance(data, xr.DataTree):
        return "datatree"
    if type(data).__name__ == "InferenceData" and hasattr(data, "groups"):
        return "inferencedata"
    return None


def _group_names(data):
    kind = _container_kind(data)
    if kind == "datatree":
        return list(data.children)
    if kind == "inferencedata":
        return list(data.groups())
    return []


def _get_group(data, name):
    """The group ``name`` of ``data`` as an ``xarray.Dataset``, or None if absent."""
    kind = _container_kind(data)
    if kind == "datatree":
        return data[name].to_dataset() if name in data.children else None
    if kind == "inferencedata":
        return getattr(data, name) if name in data.groups() else None
    return None


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
    if _container_kind(data) is None:
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
    if var_names is not None and _container_kind(data) == "dataarray":
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
        if coords and dim in coords and _picks_one(coords[dim]):
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


def _picks_one(value):
    """Whether a ``.sel`` indexer picks one value and drops its dimension (a scalar)."""
    return not isinstance(value, slice) and np.ndim(value) == 0


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
        if _picks_one(value):
            did = (f"picks one of the {size} values of {dim!r} and drops the dimension")
        else:
            try:
                kept = posterior[[hit[0]]].sel({dim: value})
            except (KeyError, ValueError, IndexError, TypeError):
                continue  # not selectable at all: _select says why
            have = _coordinate(posterior, dim)
            if kept.sizes[dim] == size and np.array_equal(_coordinate(kept, dim), have):
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


def _select(dataset, coords, what, *, strict=False):
    """``dataset.sel(coords)`` on the dims it has (``strict``: every dim must exist)."""
    if not coords:
        return dataset
    unknown = [dim for dim in coords if dim not in dataset.dims]
    if strict and unknown:
        raise ValueError(
            f"coords names dimension(s) {unknown} that {what} does not have; its dimensions "
            f"are {list(dataset.dims)}."
        )
    selection = {dim: values for dim, values in coords.items() if dim in dataset.dims}
    try:
        return dataset.sel(selection)
    except (KeyError, ValueError, IndexError) as err:
        raise ValueError(f"coords={coords!r} could not be selected from {what}: {err}") from err


def _check_not_empty(dataset, sample_dims, coords, what):
    """At least one variable (and, given ``sample_dims``, one draw of each), after ``coords``."""
    if not dataset.data_vars:
        raise ValueError(
            f"{what} has no variables: there are no draws to read. Pass the trace's group "
            "that holds the draws (group=, e.g. 'posterior') or a Dataset with at least one "
            "variable."
        )
    if sample_dims is None:
        return
    empty = {dim: dataset.sizes[dim] for dim in sample_dims if dataset.sizes[dim] == 0}
    if empty:
        selected = (f"coords={coords!r} selects no {', no '.join(empty)}"
                    if coords else f"{what} has no {', no '.join(empty)}")
        raise ValueError(
            f"{selected}: there are no draws to read (sizes after the selection: "
            f"{ {dim: dataset.sizes[dim] for dim in sample_dims} }). Select at least one "
            "chain and a few draws (e.g. coords={'draw': slice(500, None)} keeps the draws "
            "from 500 on; labels, not positions)."
        )


def _with_sample_dims(dataset, sample_dims, what):
    """Dataset with (chain_dim, draw_dim); a missing chain dim (one sample dim) is added."""
    missing = [dim for dim in sample_dims if dim not in dataset.dims]
    if missing:
        raise ValueError(
            f"{what} has no dimension(s) {missing} (sample_dims={list(sample_dims)}); its "
            f"dimensions are {list(dataset.dims)}. Pass sample_dims= naming the chain and "
            "draw dimensions."
        )
    if len(sample_dims) == 1:
        dataset = dataset.expand_dims(chain=[0])
        return dataset, ("chain", sample_dims[0])
    return dataset, tuple(sample_dims)


def _coordinate(dataset, dim):
    if dim in dataset.coords:
        return np.asarray(dataset[dim].values)
    return np.arange(dataset.sizes[dim])


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


def _aligned(dataset, reference_chain, reference_draw, sample_dims, what):
    """``dataset`` restricted to the reference chain/draw coordinates (error if absent)."""
    chain_dim, draw_dim = sample_dims
    for dim, wanted in ((chain_dim, reference_chain), (draw_dim, reference_draw)):
        if dim not in dataset.dims:
            raise ValueError(f"{what} has no {dim!r} dimension; its dims are {list(dataset.dims)}.")
        if dim in dataset.coords:
            have = dataset[dim].values
            if len(have) == len(wanted) and np.array_equal(have, wanted):
                continue
            try:
                dataset = dataset.sel({dim: wanted})
            except KeyError as err:
                raise ValueError(
                    f"{what} does not cover the {dim} coordinates of the draws: {err}"
                ) from err
        elif dataset.sizes[dim] != len(wanted):
            raise ValueError(
                f"{what} has {dataset.sizes[dim]} entries along {dim!r}; the draws have "
                f"{len(wanted)}."
            )
    return dataset


# --------------------------------------------------------------------------------------
# error messages for non-finite values
# --------------------------------------------------------------------------------------


def _where_not_finite(array, chain, draw, labels, what, hint):
    bad = ~np.isfinite(array)
    if not bad.any():
        return
    bad_draw = bad.any(axis=2)
    chain_idx, draw_idx = np.nonzero(bad_draw)
    where = ", ".join(
        f"(chain={chain[c].item()!r}, draw={draw[t].item()!r})"
        for c, t in zip(chain_idx[:5], draw_idx[:5])
    )
    more = f" and {len(chain_idx) - 5} more" if len(chain_idx) > 5 else ""
    per_parameter = bad.sum(axis=(0, 1))
    columns = [
        f"{labels[k]}: {int(per_parameter[k])}" for k in np.flatnonzero(per_parameter)[:10]
    ]
    raise ValueError(
        f"{what} are not finite at {len(chain_idx)} of {bad_draw.size} draws: {where}{more}. "
        f"Non-finite entries per parameter: {', '.join(columns)}. {hint}"
    )


# --------------------------------------------------------------------------------------
# score sources
# --------------------------------------------------------------------------------------


def _user_scores(score, draws, labels, names, chain, draw, sample_dims, *, batched, chunk_size):
    """Scores from a callable, an array, a DataArray or a Dataset (aligned on chain/draw)."""
    n_chain, n_draw, d = draws.shape
    if callable(score):
        from steindiag._validate import evaluate_score_callable

        kwargs = {} if chunk_size is None else {"chunk_size": int(chunk_size)}
        return evaluate_score_callable(score, draws, batched=batched, **kwargs), "callable"
    if isinstance(score, (xr.Dataset, xr.DataArray)):
        is_dataset = isinstance(score, xr.Dataset)
        dataset = score if is_dataset else score.to_dataset(name="__score__")
        dataset, pair = _with_sample_dims(dataset, sample_dims, "score")
        dataset = _aligned(dataset, chain, draw, pair, "score")
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


def _nutpie_stats(data, stats_group, coords, sample_dims, chain, draw):
    """nutpie's stored unconstrained draws / gradients (DataArrays), when present."""
    if stats_group is None:
        return None, None
    stats = _get_group(data, stats_group)
    if stats is None or _NUTPIE_GRADIENT not in stats.data_vars:
        return None, None
    stats = _select(stats, coords, f"group {stats_group!r}")
    stats, pair = _with_sample_dims(stats, sample_dims, f"group {stats_group!r}")
    stats = _aligned(stats, chain, draw, pair, f"group {stats_group!r}")
    out = []
    for name in (_NUTPIE_DRAW, _NUTPIE_GRADIENT):
        if name in stats.data_vars and stats[name].ndim == 3:
            out.append(stats[name].transpose(*pair, ...))
        else:
            out.append(None)
    return out[0], out[1]


# steindiag.add_scores writes nutpie's layout, plus the labels steindiag gives the value
# variables (a coordinate along the parameter dim) and its provenance (the gradient's attrs).
_STORED_LABEL = "parameter_label"
_STORED_MARK = "steindiag_add_scores"


def _written_by_add_scores(gradient):
    return gradient is not None and _STORED_MARK in gradient.attrs


def _stored_score_attrs(gradient, stats_group):
    """Provenance of scores stored by ``add_scores``, for the result's attrs."""
    kept = ("space", "log_density", "jacobian", "free_variables", "value_variables",
            "transforms", "pytensor_mode", "score_strategy", "steindiag_version")
    attrs = {key: gradient.attrs[key] for key in kept if key in gradient.attrs}
    attrs["space"] = "unconstrained"
    attrs["scores_from"] = f"{stats_group}['gradient'] (steindiag.add_scores)"
    return attrs


def _check_stored_selection(coords, var_names, sample_dims):
    """Stored unconstrained draws are one vector per draw: only chain/draw can be selected."""
    if var_names is not None:
        raise ValueError(
            f"var_names={var_names} cannot be used on a trace with stored scores "
            "(steindiag.add_scores): the score of a model involves all its free variables, "
            "so the stored vectors are used whole."
        )
    other = [dim for dim in coords or {} if dim not in sample_dims]
    if other:
        raise ValueError(
            f"coords selects along {other}, but the draws are the trace's stored "
            "unconstrained vectors (steindiag.add_scores), which can only be selected by "
            f"{list(sample_dims)}; a selection of some elements of a variable has no score of "
            "its own. Select chains and draws only, or use the trace without stored scores."
        )


def _nutpie_labels(layout):
    """nutpie's labels of the unconstrained vector: ``name`` or ``name_i.j``."""
    labels = []
    for var in layout:
        if len(var.value_shape) == 0:
            labels.append(var.value_name)
        else:
            labels.extend(
                f"{var.value_name}_{'.'.join(str(i) for i in index)}"
                for index in np.ndindex(*var.value_shape)
            )
    return labels


def _reorder_nutpie(array, expected_labels):
    """(chain, draw, d) values of a nutpie stat in ``expected_labels`` order, or None."""
    parameter_dim = array.dims[2]
    if parameter_dim not in array.coords:
        return None
    have = [str(v) for v in array[parameter_dim].values]
    if sorted(have) != sorted(expected_labels):
        return None
    position = {label: k for k, label in enumerate(have)}
    return np.asarray(array.values, dtype=np.float64)[:, :, [position[x] for x in expected_labels]]


# --------------------------------------------------------------------------------------
# PyMC models
# --------------------------------------------------------------------------------------


def _model_coordinate_check(model, var, data_array, sample_pair):
    """Put a constrained variable's dims in model order; check coordinate labels."""
    extra = [dim for dim in data_array.dims if dim not in sample_pair]
    if var.dims is None or sorted(extra) != sorted(var.dims):
        return data_array
    data_array = data_array.transpose(*sample_pair, *var.dims)
    for dim in var.dims:
        model_values = model.coords.get(dim)
        if model_values is None or dim not in data_array.coords:
            continue
        model_labels = [str(v) for v in model_values]
        trace_labels = [str(v) for v in data_array[dim].values]
        if model_labels == trace_labels:
            continue
        if sorted(model_labels) == sorted(trace_labels):
            # Same labels in another order: follow the model's order.
            data_array = data_array.isel({dim: [trace_labels.index(x) for x in model_labels]})
            continue
        raise ValueError(
            f"the trace's coordinate {dim!r} of {var.name!r} does not match the model's: "
            f"model {model_labels[:6]}{'...' if len(model_labels) > 6 else ''}, trace "
            f"{trace_labels[:6]}{'...' if len(trace_labels) > 6 else ''}. The model does not "
            "match the trace."
        )
    return data_array


def _stored_value(model, var, posterior, unconstrained, nutpie_draw, nutpie_labels, pair):
    """(kind, (chain, draw, *shape) array, source description) for one free variable."""
    candidates = []
    if var.transform_op is None:
        candidates.append((posterior, var.name, "unconstrained", f"posterior[{var.name!r}]"))
    else:
        candidates.append(
            (posterior, var.value_name, "unconstrained", f"posterior[{var.value_name!r}]")
        )
    if unconstrained is not None:
        for name in dict.fromkeys((var.value_name, var.name)):
            candidates.append(
                (unconstrained, name, "unconstrained", f"unconstrained_posterior[{name!r}]")
            )
    for dataset, name, kind, source in candidates:
        if dataset is not None and name in dataset.data_vars:
            return _checked_block(model, var, dataset[name], kind, source, pair)
    if nutpie_draw is not None:
        values = _reorder_nutpie(nutpie_draw, nutpie_labels)
        if values is not None:
            start = nutpie_labels.index(_nutpie_labels([var])[0])
            block = values[:, :, start : start + var.size]
            return "unconstrained", block.reshape(*block.shape[:2], *var.value_shape), (
                "sample_stats['unconstrained_draw'] (nutpie)"
            )
    if var.transform_op is not None and var.name in posterior.data_vars:
        return _checked_block(
            model, var, posterior[var.name], "constrained",
            f"posterior[{var.name!r}] mapped by the {var.transform} transform", pair,
        )
    return None


def _checked_block(model, var, data_array, kind, source, pair):
    what = source.split(" ")[0]
    if kind == "constrained" or var.transform_op is None:
        data_array = _model_coordinate_check(model, var, data_array, pair)
    missing = [dim for dim in pair if dim not in data_array.dims]
    if missing:
        raise ValueError(
            f"{what} has no dimension(s) {missing}; its dims are {list(data_array.dims)}."
        )
    data_array = data_array.transpose(*pair, ...)
    expected = var.value_shape if kind == "unconstrained" else var.shape
    got = tuple(data_array.shape[2:])
    if got != tuple(expected):
        label = var.value_name if kind == "unconstrained" else var.name
        raise ValueError(
            f"{what} has shape {got} per draw, but the model's {label!r} has shape "
            f"{tuple(expected)}: the model does not match the trace."
        )
    values = np.asarray(data_array.values)
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise TypeError(f"{what} must be numeric; got dtype {values.dtype}.")
    return kind, values, source


def _value_labels(model, var, posterior, pair):
    """Labels of a value variable (see ``_labels``): the model's coordinates, else the trace's.

    Coordinates apply when the value variable has the shape of its random variable
    (log, interval, ... transforms); otherwise (simplex, zero-sum) positions.
    """
    if tuple(var.value_shape) != tuple(var.shape):
        return element_labels(var.value_name, var.value_shape)
    dims = var.dims
    stored = posterior[var.name] if var.name in posterior.data_vars else None
    if dims is None and stored is not None:
        dims = tuple(dim for dim in stored.dims if dim not in pair)
    coords = {}
    for dim in dims or ():
        values = (getattr(model, "coords", None) or {}).get(dim)
        if values is None and dim in posterior.coords:
            values = posterior[dim].values
        if values is not None:
            coords[dim] = np.asarray(values)
    return element_labels(var.value_name, var.value_shape, dims, coords)


def _model_draws(data, model, posterior, pair, chain, draw, *, coords, group, sample_dims,
                 chunk_size, compile_mode):
    from steindiag.inputs import _pymc

    layout = _pymc.model_layout(model)
    unconstrained_group, stats_group = _COMPANION_GROUPS.get(group, (None, None))
    unconstrained = None
    if unconstrained_group is not None:
        unconstrained = _get_group(data, unconstrained_group)
        if unconstrained is not None:
            unconstrained = _select(unconstrained, coords, f"group {unconstrained_group!r}")
            unconstrained, upair = _with_sample_dims(
                unconstrained, sample_dims, f"group {unconstrained_group!r}"
            )
            unconstrained = _aligned(unconstrained, chain, draw, upair,
                                     f"group {unconstrained_group!r}")
    nutpie_draw, nutpie_gradient = _nutpie_stats(data, stats_group, coords, sample_dims,
                                                 chain, draw)
    nutpie_labels = _nutpie_labels(layout)

    stored = [
        _stored_value(model, var, posterior, unconstrained, nutpie_draw, nutpie_labels, pair)
        for var in layout
    ]
    missing = [var.name for var, item in zip(layout, stored) if item is None]
    if missing:
        raise ValueError(
            f"the trace's {group!r} group has no values for the model's free variable(s) "
            f"{missing} (looked for {[v.name for v in layout if v.name in missing]} and their "
            f"value variables {[v.value_name for v in layout if v.name in missing]}); it has "
            f"{list(posterior.data_vars)}. The model does not match the trace."
        )
    n_chain, n_draw = len(chain), len(draw)
    kinds = [item[0] for item in stored]
    arrays = [item[1].reshape(n_chain * n_draw, *item[1].shape[2:]) for item in stored]
    flat, outside = _pymc.unconstrained_values(
        model, layout, arrays, kinds, chunk_size=chunk_size, mode=compile_mode
    )
    labels = [label for var in layout for label in _value_labels(model, var, posterior, pair)]
    draws = flat.reshape(n_chain, n_draw, -1)
    _where_not_finite(
        draws, chain, draw, labels, "unconstrained draws",
        "A draw on the boundary of a variable's support (e.g. sigma == 0, a simplex "
        "entry equal to 0, a value outside its bounds) or a NaN in the trace has no "
        "finite unconstrained value; drop those draws with coords= or fix the trace.",
    )
    if outside:
        details = []
        for name, bad in outside.items():
            chain_idx, draw_idx = np.nonzero(bad.reshape(n_chain, n_draw))
            first = f"(chain={chain[chain_idx[0]].item()!r}, draw={draw[draw_idx[0]].item()!r})"
            transform = next(var.transform for var in layout if var.name == name)
            details.append(f"{name!r} at {int(bad.sum())} draws, first {first} "
                           f"({transform} transform)")
        raise ValueError(
            "the trace's values are not in the support of the model's variables: "
            + "; ".join(details) + ". The inverse transform does not give them back (e.g. a "
            "simplex that does not sum to 1, a zero-sum vector whose sum is not 0): the "
            "model does not match the trace."
        )
    _pymc.check_model_data(
        model,
        _get_group(data, "observed_data"),
        _get_group(data, "constant_data"),
    )
    attrs = {
        "space": "unconstrained",
        "free_variables": [var.name for var in layout],
        "value_variables": [var.value_name for var in layout],
        "transforms": [var.transform for var in layout],
        "unconstrained_from": [item[2] for item in stored],
        "log_density": "model.logp(jacobian=True)",
    }
    nutpie_scores = None
    if nutpie_gradient is not None:
        nutpie_scores = _reorder_nutpie(nutpie_gradient, nutpie_labels)
    return layout, draws, labels, attrs, nutpie_scores


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


def prepare_trace(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=("chain", "draw"),
                  chunk_size=None, compile_mode=None, space=None):
    """Draws and scores of a trace in the unconstrained space, as ``SteinInput``.

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
    space : {"unconstrained", "constrained"}, optional
        With ``score`` and no ``model``: the space of the stored draws, in which the
        score is grad log p; recorded in ``attrs["space"]`` ("as given" if None). Must be
        given for a trace written by a sampler library that transforms its variables
        (ArviZ's ``inference_library`` attribute, e.g. numpyro, Stan, PyMC; not emcee).

    Returns
    -------
    SteinInput
        ``draws`` and ``scores`` as float64 arrays of shape (chain, draw, d); ``chain``
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
    >>> from steindiag.inputs._trace import prepare_trace
    >>> rng = np.random.default_rng(0)
    >>> posterior = xr.Dataset({"x": (("chain", "draw"), rng.standard_normal((2, 100)))})
    >>> prepared = prepare_trace(posterior, score=lambda x: -x)   # N(0, 1): s(x) = -x
    >>> prepared.draws.shape, prepared.parameter
    ((2, 100, 1), ['x'])
    """
    pending = read_trace(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, chunk_size=chunk_size,
        compile_mode=compile_mode, space=space,
    )
    return pending.with_scores()


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
        _where_not_finite(
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
    """The draws of a trace (``TraceDraws``); arguments as :func:`prepare_trace`.

    Every argument is validated before anything is read; the draws are read and
    checked, but no score is evaluated and no score graph compiled (a PyMC model's
    forward transforms may be compiled to map constrained values to the value
    variables). ``need_score=False``: only the draws are wanted (no score source is
    required, and none is evaluated).
    """
    var_names, coords, sample_dims = _prepare_trace_iv(
        data, model, score, batched, group, var_names, coords, sample_dims, chunk_size,
        compile_mode,
    )
    if _container_kind(data) == "dataarray":
        data, score = _dataarray_as_dataset(data, score)
    if _container_kind(data) == "dataset":
        posterior, group_label = data, "data"
    elif _container_kind(data) == "datatree" and not data.children and data.has_data:
        # A single group's node, e.g. ``idata.posterior`` on ArviZ 1.x.
        posterior, group_label = data.to_dataset(), f"node {data.name!r}"
    else:
        posterior, group_label = _get_group(data, group), f"group {group!r}"
        if posterior is None:
            raise ValueError(
                f"data has no group {group!r}; its groups are {_group_names(data)}."
            )
    if model is not None and coords:
        _check_model_selection(model, posterior, coords, sample_dims, group_label)
    posterior = _select(posterior, coords, group_label, strict=True)
    _check_not_empty(posterior, None, coords, group_label)
    posterior, pair = _with_sample_dims(posterior, sample_dims, group_label)
    _check_not_empty(posterior, pair, coords, group_label)
    chain, draw = _coordinate(posterior, pair[0]), _coordinate(posterior, pair[1])
    stats_group = _COMPANION_GROUPS.get(group, (None, None))[1]
    if _container_kind(data) == "dataset":
        stats_group = None

    if model is not None:
        layout, draws, labels, attrs, nutpie_scores = _model_draws(
            data, model, posterior, pair, chain, draw, coords=coords, group=group,
            sample_dims=sample_dims, chunk_size=chunk_size, compile_mode=compile_mode,
        )
        nutpie_gradient = _nutpie_stats(data, stats_group, coords, sample_dims, chain,
                                        draw)[1]

        def scores():
            if score is not None:
                names = [var.value_name for var in layout]
                return _user_scores(score, draws, labels, names, chain, draw, sample_dims,
                                    batched=batched, chunk_size=chunk_size)
            if nutpie_scores is not None:
                if _written_by_add_scores(nutpie_gradient):
                    attrs.update(_stored_score_attrs(nutpie_gradient, stats_group))
                    return nutpie_scores, "stored"
                attrs["scores_from"] = "sample_stats['gradient'] (nutpie store_gradient=True)"
                return nutpie_scores, "nutpie"
            from steindiag.inputs import _pymc

            mode = _pymc.default_compile_mode() if compile_mode is None else compile_mode
            flat = _pymc.model_scores(model, layout, draws.reshape(-1, draws.shape[2]),
                                      chunk_size=chunk_size, mode=mode)
            attrs["pytensor_mode"] = mode if isinstance(mode, str) else str(mode)
            return flat.reshape(draws.shape), "pymc"
    else:
        nutpie_draw, nutpie_gradient = None, None
        if score is None and (need_score or var_names is None):
            nutpie_draw, nutpie_gradient = _nutpie_stats(data, stats_group, coords,
                                                         sample_dims, chain, draw)
            if not need_score and not _written_by_add_scores(nutpie_gradient):
                # Draws only (mmd): a nutpie trace keeps its stored constrained variables.
                nutpie_draw, nutpie_gradient = None, None
        if nutpie_draw is not None and nutpie_gradient is not None:
            if space == "constrained":
                raise ValueError(
                    "space='constrained' was given, but without score= the draws and scores "
                    "are nutpie's stored unconstrained ones."
                )
            parameter_dim = nutpie_draw.dims[2]
            labels = [str(v) for v in _coordinate(nutpie_draw.to_dataset(name="x"),
                                                  parameter_dim)]
            draws = np.asarray(nutpie_draw.values, dtype=np.float64)
            gradient = nutpie_gradient
            if parameter_dim in nutpie_gradient.coords and parameter_dim in nutpie_draw.coords:
                gradient = nutpie_gradient.sel({parameter_dim: nutpie_draw[parameter_dim].values})
            attrs = {"space": "unconstrained",
                     "scores_from": "sample_stats['gradient'] (nutpie store_gradient=True)"}
            source = "nutpie"
            if _written_by_add_scores(nutpie_gradient):
                _check_stored_selection(coords, var_names, sample_dims)
                labels = [str(v) for v in nutpie_draw[_STORED_LABEL].values]
                attrs = _stored_score_attrs(nutpie_gradient, stats_group)
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
        _where_not_finite(draws, chain, draw, labels, "draws",
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
