"""Traces of PyMC models and nutpie: the model's unconstrained draws, stored scores.

With a PyMC model, the draws are the model's value variables: stored ones where the trace
holds them (``include_transformed=True``, an ``unconstrained_posterior`` group, nutpie's
``store_unconstrained=True``), otherwise the posterior's constrained values mapped
forward through each free variable's transform (:mod:`steindiag.inputs._pymc_values`).
A selection (``coords``) must keep every element of the model's free variables
(``check_model_selection``). nutpie's stored gradients (``store_gradient=True``), and the
scores :func:`steindiag.add_scores` stores in the same layout, are read here too, and a
PyMC ``MultiTrace`` is converted to what ``pm.sample`` returns by default (``as_trace``).
"""

import numpy as np

from steindiag._containers import (
    COMPANION_GROUPS, NUTPIE_DRAW, NUTPIE_GRADIENT, STORED_MARK, aligned, coordinate, get_group,
    picks_one, select, with_sample_dims,
)
from steindiag.inputs import _pymc
from steindiag.inputs._checks import where_not_finite
from steindiag.inputs._labels import element_labels
from steindiag.inputs._pymc_data import check_model_data
from steindiag.inputs._pymc_values import unconstrained_values

__all__ = ["as_trace", "check_model_selection", "model_draws", "nutpie_stats",
           "written_by_add_scores", "stored_score_attrs", "check_stored_selection",
           "nutpie_labels", "reorder_nutpie"]


def _is_multitrace(data):
    """True for a PyMC ``MultiTrace`` (``pm.sample(return_inferencedata=False)``)."""
    module = type(data).__module__ or ""
    return module.startswith("pymc") and type(data).__name__ == "MultiTrace"


# Draws an approximation (ADVI, full-rank ADVI) given in place of a trace is read as: one
# chain of independent draws, from a fixed seed so that a call is reproducible.
APPROXIMATION_DRAWS = 1000


def _is_approximation(data):
    """True for a PyMC variational approximation (``pm.fit``'s result)."""
    return any(cls.__name__ == "Approximation" and (cls.__module__ or "").startswith("pymc")
               for cls in type(data).__mro__)


def as_trace(data, model=None):
    """(trace, model): a PyMC ``MultiTrace`` converted as ``pm.to_inference_data`` does, a
    PyMC approximation sampled; other data as is.

    ``pm.sample(return_inferencedata=False)`` returns a MultiTrace (PyMC 5 and 6); it is
    converted with the model that sampled it (the trace keeps a reference to it), else
    with ``model``. An approximation (``pm.fit``: mean-field or full-rank ADVI) gives
    ``APPROXIMATION_DRAWS`` independent draws as one chain (``approx.sample`` with seed 0),
    and its model when ``model`` is None. The result is what ``pm.sample`` returns by
    default: an ``arviz.InferenceData`` (PyMC 5) or an ``xarray.DataTree`` (PyMC 6).
    """
    if _is_approximation(data):
        return (data.sample(APPROXIMATION_DRAWS, random_seed=0),
                data.model if model is None else model)
    if not _is_multitrace(data):
        return data, model
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
        return pm.to_inference_data(data, model=source), model
    except Exception as err:  # noqa: BLE001 - any failure of PyMC's own conversion
        raise TypeError(
            "data is a PyMC MultiTrace (pm.sample(return_inferencedata=False)) and "
            f"pm.to_inference_data could not convert it ({type(err).__name__}: {err}); "
            "convert it yourself and pass the InferenceData / DataTree."
        ) from err


def nutpie_stats(data, stats_group, coords, sample_dims, chain, draw):
    """nutpie's stored unconstrained draws / gradients (DataArrays), when present."""
    stats = None if stats_group is None else get_group(data, stats_group)
    if stats is None or NUTPIE_GRADIENT not in stats.data_vars:
        return None, None
    stats, pair = _aligned_group(stats, stats_group, coords, sample_dims, chain, draw)
    return tuple(stats[name].transpose(*pair, ...)
                 if name in stats.data_vars and stats[name].ndim == 3 else None
                 for name in (NUTPIE_DRAW, NUTPIE_GRADIENT))


def _aligned_group(dataset, name, coords, sample_dims, chain, draw):
    """A group that goes with the draws (its ``name``): selected by ``coords``, aligned on
    the draws' (chain, draw) coordinates; and its (chain, draw) dims."""
    what = f"group {name!r}"
    dataset, pair = with_sample_dims(select(dataset, coords, what), sample_dims, what)
    return aligned(dataset, chain, draw, pair, what), pair


def written_by_add_scores(gradient):
    return gradient is not None and STORED_MARK in gradient.attrs


def stored_score_attrs(gradient, stats_group):
    """Provenance of scores stored by ``add_scores``, for the result's attrs."""
    kept = ("space", "log_density", "jacobian", "free_variables", "value_variables",
            "transforms", "pytensor_mode", "score_strategy", "steindiag_version")
    attrs = {key: gradient.attrs[key] for key in kept if key in gradient.attrs}
    attrs["space"] = "unconstrained"
    attrs["scores_from"] = f"{stats_group}['gradient'] (steindiag.add_scores)"
    return attrs


def check_stored_selection(coords, var_names, sample_dims):
    """Stored unconstrained draws are one vector per draw: only chain/draw can be selected."""
    if var_names is not None:
        raise ValueError(
            f"var_names={var_names} on a trace with stored scores (unconstrained draws and "
            "grad log p: steindiag.add_scores, nutpie's store_gradient=True) needs model= as "
            "well: the stored vectors are the whole model's, and the model tells which of "
            "their columns each variable is."
        )
    other = [dim for dim in coords or {} if dim not in sample_dims]
    if other:
        raise ValueError(
            f"coords selects along {other}, but the draws are the trace's stored "
            "unconstrained vectors (steindiag.add_scores), which can only be selected by "
            f"{list(sample_dims)}; a selection of some elements of a variable has no score of "
            "its own. Select chains and draws only, or use the trace without stored scores."
        )


def nutpie_labels(layout):
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


def reorder_nutpie(array, expected_labels):
    """(chain, draw, d) values of a nutpie stat in ``expected_labels`` order, or None."""
    parameter_dim = array.dims[2]
    if parameter_dim not in array.coords:
        return None
    have = [str(v) for v in array[parameter_dim].values]
    if sorted(have) != sorted(expected_labels):
        return None
    position = {label: k for k, label in enumerate(have)}
    return np.asarray(array.values, dtype=np.float64)[:, :, [position[x] for x in expected_labels]]


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


def _stored_value(model, var, posterior, unconstrained, nutpie_draw, vector_labels, pair):
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
        values = reorder_nutpie(nutpie_draw, vector_labels)
        if values is not None:
            start = vector_labels.index(nutpie_labels([var])[0])
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


def check_model_selection(model, posterior, coords, sample_dims, what):
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


def model_draws(data, model, posterior, pair, chain, draw, *, coords, group, sample_dims,
                 chunk_size, compile_mode):
    layout = _pymc.model_layout(model)
    unconstrained_group, stats_group = COMPANION_GROUPS.get(group, (None, None))
    unconstrained = None if unconstrained_group is None else get_group(data, unconstrained_group)
    if unconstrained is not None:
        unconstrained, _ = _aligned_group(unconstrained, unconstrained_group, coords,
                                          sample_dims, chain, draw)
    nutpie_draw, nutpie_gradient = nutpie_stats(data, stats_group, coords, sample_dims,
                                                 chain, draw)
    vector_labels = nutpie_labels(layout)

    stored = [
        _stored_value(model, var, posterior, unconstrained, nutpie_draw, vector_labels, pair)
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
    flat, outside = unconstrained_values(
        model, layout, arrays, kinds, chunk_size=chunk_size, mode=compile_mode
    )
    labels = [label for var in layout for label in _value_labels(model, var, posterior, pair)]
    draws = flat.reshape(n_chain, n_draw, -1)
    where_not_finite(
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
    check_model_data(model, get_group(data, "observed_data"), get_group(data, "constant_data"))
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
        nutpie_scores = reorder_nutpie(nutpie_gradient, vector_labels)
    return layout, draws, labels, attrs, nutpie_scores
