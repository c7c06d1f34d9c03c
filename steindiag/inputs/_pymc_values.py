"""PyMC: a model's free variables between their constrained and unconstrained values.

Forward (``unconstrained_values``): the values a trace stores, constrained or not, of
every free variable -> the flat vector of value variables (the space in which the score
is defined), with the draws off a transform's support flagged. Backward
(``constrained_values``, ``model_posterior``): flat draws of the value variables (e.g.
particles SVGD moved) -> what ``pm.sample`` stores in a posterior, each free variable in
its constrained space and every deterministic. Each map is one graph, built for one
draw, vectorised over a leading draw axis and evaluated on chunks of draws; cached per
model.

Imported lazily (only when a PyMC model is passed).
"""

from math import prod

import numpy as np
import xarray as xr

from steindiag.inputs import _pymc
from steindiag.inputs._pymc_graphs import (as_model_type, as_tensor, cached, core_placeholder,
                                           flat_vector, is_xtensor, layout_key, mode_key,
                                           vectorized_function)

__all__ = ["unconstrained_values", "constrained_values", "model_posterior"]

# The forward transforms are a handful of cheap ops on whole (N, k) arrays: the Python
# linker runs each as one NumPy call and needs no C/Numba compilation (cold start).
_FORWARD_MODE = "FAST_COMPILE"


def _placeholders(layout, stored):
    """Core placeholders of the stored values (``stored[i]``: "constrained" or
    "unconstrained"), and the maps of ``replace_rvs_by_values`` to them."""
    core, rvs_to_values, rvs_to_transforms = [], {}, {}
    for var, kind in zip(layout, stored):
        if kind == "unconstrained":
            placeholder = core_placeholder(var.value_shape, var.value.type.dtype, var.value_name)
            rvs_to_values[var.rv] = as_model_type(placeholder, var.value)
            if var.transform_op is not None:
                rvs_to_transforms[var.rv] = var.transform_op
        else:
            placeholder = core_placeholder(var.shape, var.rv.type.dtype, var.name)
            rvs_to_values[var.rv] = as_model_type(placeholder, var.rv)
        core.append(placeholder)
    return core, rvs_to_values, rvs_to_transforms


def _build_forward_function(model, layout, stored, mode):
    """Unconstrained values of every free variable from stored constrained/unconstrained ones.

    ``stored[i]`` is ``"constrained"`` or ``"unconstrained"``: which value of variable i
    is an input. Bounds that depend on other variables are evaluated at those variables'
    (constrained) values, obtained by the backward transform where only the
    unconstrained value is stored.
    """
    from pymc.logprob.utils import replace_rvs_by_values

    core, rvs_to_values, rvs_to_transforms = _placeholders(layout, stored)
    outputs, round_trips = [], []
    for var, kind in zip(layout, stored):
        value = rvs_to_values[var.rv]
        if kind == "constrained" and var.transform_op is not None:
            value = var.transform_op.forward(value, *var.rv.owner.inputs)
            # backward(forward(x)) == x exactly when x is in the variable's support.
            round_trips.append(var.transform_op.backward(value, *var.rv.owner.inputs))
        outputs.append(value)
    replaced = replace_rvs_by_values(
        outputs + round_trips, rvs_to_values=rvs_to_values, rvs_to_transforms=rvs_to_transforms
    )
    outputs, round_trips = replaced[: len(outputs)], replaced[len(outputs) :]
    dims = [var.value.type.dims if is_xtensor(var.value) else None for var in layout]
    outputs = [as_tensor(out, dim) for out, dim in zip(outputs, dims)]
    checked = [var for var, kind in zip(layout, stored)
               if kind == "constrained" and var.transform_op is not None]
    round_trips = [
        as_tensor(out, var.rv.type.dims if is_xtensor(var.rv) else None)
        for out, var in zip(round_trips, checked)
    ]
    flat_outputs = [flat_vector(outputs)] + ([flat_vector(round_trips)] if round_trips else [])
    return vectorized_function(core, flat_outputs, mode)


def _evaluate_in_chunks(function, inputs, n_draws, widths, chunk_size):
    """Run ``function`` on row chunks; its outputs are (rows, width) arrays."""
    outs = [np.empty((n_draws, width), dtype=np.float64) for width in widths]
    for start in range(0, n_draws, chunk_size):
        stop = min(start + chunk_size, n_draws)
        results = function(*[array[start:stop] for array in inputs])
        for out, result in zip(outs, results):
            out[start:stop] = result
    return outs


def unconstrained_values(model, layout, arrays, stored, *, chunk_size=None, mode=None):
    """Map stored values of every free variable to the flat unconstrained vector.

    Parameters
    ----------
    model : pymc.Model
    layout : list of FreeVariable
    arrays : list of ndarray
        One array per free variable, shape (N, *shape) for constrained values or
        (N, *value_shape) for unconstrained ones.
    stored : list of {"constrained", "unconstrained"}
        Which kind each array holds.
    chunk_size : int, optional
        Draws per evaluation (default: all at once).
    mode : str, optional
        PyTensor compile mode (default "FAST_COMPILE": a few cheap ops on whole arrays,
        no compilation).

    Returns
    -------
    draws : ndarray of float64, shape (N, d)
        Value variables flattened in C order and concatenated in layout order.
    outside : dict of str to ndarray of bool, shape (N,)
        For each constrained input with a transform: the draws where
        backward(forward(x)) differs from x although forward(x) is finite, i.e. x is not
        in the variable's support (a simplex that does not sum to 1, a zero-sum vector
        whose sum is not 0, ...). Empty when every draw round-trips.
    """
    n_draws = arrays[0].shape[0]
    d = sum(var.size for var in layout)
    if all(kind == "unconstrained" for kind in stored):
        flat = np.concatenate(
            [np.asarray(a, dtype=np.float64).reshape(n_draws, -1) for a in arrays], axis=1
        )
        return flat, {}
    mode = _FORWARD_MODE if mode is None else mode
    key = ("forward", layout_key(layout), tuple(stored), mode_key(mode))
    function = cached(model, key, lambda: _build_forward_function(model, layout, stored, mode))
    dtypes = [
        (var.value.type.dtype if kind == "unconstrained" else var.rv.type.dtype)
        for var, kind in zip(layout, stored)
    ]
    inputs = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(arrays, dtypes)]
    checked = [(var, array) for var, kind, array in zip(layout, stored, arrays)
               if kind == "constrained" and var.transform_op is not None]
    widths = [d] + ([sum(int(prod(var.shape)) for var, _ in checked)] if checked else [])
    chunk_size = n_draws if chunk_size is None else chunk_size
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        flat, *rest = _evaluate_in_chunks(function, inputs, n_draws, widths, chunk_size)
    outside, start = {}, 0
    for var, array in checked:
        width = int(prod(var.shape))
        original = np.asarray(array).reshape(n_draws, width)
        back = rest[0][:, start : start + width]
        start += width
        # Round-off of forward/backward is a few ulp; sqrt(eps) of the stored dtype
        # separates it from a value off the support.
        dtype = original.dtype if np.issubdtype(original.dtype, np.floating) else np.float64
        tolerance = np.sqrt(np.finfo(dtype).eps)
        with np.errstate(invalid="ignore"):
            off = np.abs(back - original) > tolerance * np.maximum(1.0, np.abs(original))
        bad = off.any(axis=1) & np.isfinite(back).all(axis=1)
        if bad.any():
            outside[var.name] = bad
    return flat, outside



def _unwrap_view(variable):
    """The input of a ViewOp (how pm.Deterministic wraps its graph), else the variable.

    Between TensorFromXTensor and XTensorFromTensor (a ``pymc.dims`` deterministic) the
    view would stop the xtensor lowering from cancelling the pair, and the graph could
    not be vectorised.
    """
    from pytensor.compile.ops import ViewOp

    if variable.owner is not None and isinstance(variable.owner.op, ViewOp):
        return variable.owner.inputs[0]
    return variable


def _build_backward_function(model, layout, outputs_wanted, mode):
    """Compile flat value variables -> [constrained free variables..., deterministics...]."""
    from pymc.logprob.utils import replace_rvs_by_values

    core, rvs_to_values, rvs_to_transforms = _placeholders(layout,
                                                           ["unconstrained"] * len(layout))
    by_name = {var.name: var.rv for var in layout}
    by_name.update({det.name: det for det in model.deterministics})
    targets = [by_name[name] for name, _ in outputs_wanted]
    replaced = replace_rvs_by_values(
        targets, rvs_to_values=rvs_to_values, rvs_to_transforms=rvs_to_transforms
    )
    tensors = [as_tensor(_unwrap_view(out), dims)
               for out, (_, dims) in zip(replaced, outputs_wanted)]
    return vectorized_function(core, [flat_vector([t]) for t in tensors], mode)


def constrained_values(model, layout, flat_draws, wanted, *, chunk_size=None, mode=None):
    """Constrained free variables and deterministics of ``model`` at flat unconstrained draws.

    Parameters
    ----------
    model : pymc.Model
    layout : list of FreeVariable
        ``steindiag.inputs._pymc.model_layout(model)``.
    flat_draws : ndarray (N, d)
        Value variables flattened in C order and concatenated in layout order.
    wanted : list of (name, shape, dims)
        Free variables (by the random variable's name) and deterministics to compute,
        with the per-draw shape expected and, for ``pymc.dims`` (xtensor) variables,
        the order of their dims (else None).
    chunk_size : int, optional
        Draws per evaluation (default: sized from the model, as for the scores).
    mode : str, optional
        PyTensor compile mode (default "FAST_COMPILE": cheap elementwise graphs).

    Returns
    -------
    dict of str to ndarray of float64, shape (N, *shape)

    Raises
    ------
    ValueError
        If a computed variable does not have the expected number of entries per draw
        (the model does not match the trace).
    """
    mode = _FORWARD_MODE if mode is None else mode
    names = tuple((name, tuple(dims) if dims is not None else None) for name, _, dims in wanted)
    key = ("backward", layout_key(layout), names, mode_key(mode))
    function = cached(
        model, key, lambda: _build_backward_function(model, layout, list(names), mode)
    )
    n_draws = flat_draws.shape[0]
    inputs = _pymc.value_inputs(layout, flat_draws)
    if chunk_size is None:
        chunk_size = _pymc.chunk_size_for(model, layout, n_draws)
    out = {}
    for start in range(0, n_draws, chunk_size):
        stop = min(start + chunk_size, n_draws)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            results = function(*[array[start:stop] for array in inputs])
        for (name, shape, _), result in zip(wanted, results):
            result = np.asarray(result, dtype=np.float64)
            width = int(prod(shape))
            if result.shape[1:] != (width,):
                raise ValueError(
                    f"the model's {name!r} has {result.shape[1:]} entries per draw but the "
                    f"trace's has shape {tuple(shape)}: the model does not match the trace."
                )
            if name not in out:
                out[name] = np.empty((n_draws, width))
            out[name][start:stop] = result
    return {name: out[name].reshape(n_draws, *shape) for name, shape, _ in wanted}


def model_posterior(model, posterior, pair, moved):
    """Constrained free variables, deterministics and value variables at the moved draws."""
    layout = _pymc.model_layout(model)
    n_chain, n_draw, d = moved.shape
    flat = moved.reshape(-1, d)
    free = {var.name: var for var in layout}
    deterministics = {det.name for det in model.deterministics}
    wanted, kept, dropped = [], {}, []
    for name in posterior.data_vars:
        array = posterior[name].transpose(*pair, ...)
        if name in free or name in deterministics:
            dims = None
            source = free[name].rv if name in free else next(
                det for det in model.deterministics if det.name == name)
            if is_xtensor(source):
                dims = tuple(array.dims[2:])
            wanted.append((name, tuple(array.shape[2:]), dims))
            kept[name] = array
        elif name not in {var.value_name for var in layout}:
            dropped.append(name)
    values = constrained_values(model, layout, flat, wanted)
    out = {}
    for name, array in kept.items():
        out[name] = array.copy(data=values[name].reshape(n_chain, n_draw, *array.shape[2:]))
    # The value variables: the draws SVGD moved, as pm.sample(include_transformed=True)
    # stores them; steindiag.ksd reads them from here.
    start = 0
    for var in layout:
        block = flat[:, start : start + var.size].reshape(n_chain, n_draw, *var.value_shape)
        start += var.size
        if var.transform_op is None and var.name in out:
            continue
        if var.name in out and tuple(out[var.name].shape[2:]) == tuple(var.value_shape):
            dims = out[var.name].dims
            coords = {dim: out[var.name][dim] for dim in dims if dim in out[var.name].coords}
        else:
            dims = (*pair, *[f"{var.value_name}_dim_{i}" for i in range(len(var.value_shape))])
            coords = {dim: posterior[dim] for dim in pair if dim in posterior.coords}
        out[var.value_name] = xr.DataArray(block, dims=dims, coords=coords)
    return out, dropped
