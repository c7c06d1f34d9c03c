"""PyMC: constrained values and deterministics at unconstrained draws (the backward map).

The inverse direction of ``steindiag.inputs._pymc.unconstrained_values``: from flat draws of
the value variables (the space in which the score is defined and SVGD moves particles)
to what ``pm.sample`` stores in a posterior, each free variable in its constrained space
(``backward`` of its transform) and every deterministic. One graph, built for one draw,
vectorised over a leading draw axis and evaluated on chunks of draws; cached per model.

Imported lazily (only when a PyMC model is passed).
"""

from math import prod

import numpy as np
import xarray as xr

from steindiag.inputs import _pymc

__all__ = ["constrained_values", "model_posterior"]


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

    core, rvs_to_values, rvs_to_transforms = [], {}, {}
    for var in layout:
        placeholder = _pymc._core_placeholder(var.value_shape, var.value.type.dtype,
                                              var.value_name)
        rvs_to_values[var.rv] = _pymc._as_model_type(placeholder, var.value)
        if var.transform_op is not None:
            rvs_to_transforms[var.rv] = var.transform_op
        core.append(placeholder)
    by_name = {var.name: var.rv for var in layout}
    by_name.update({det.name: det for det in model.deterministics})
    targets = [by_name[name] for name, _ in outputs_wanted]
    replaced = replace_rvs_by_values(
        targets, rvs_to_values=rvs_to_values, rvs_to_transforms=rvs_to_transforms
    )
    tensors = [_pymc._as_tensor(_unwrap_view(out), dims)
               for out, (_, dims) in zip(replaced, outputs_wanted)]
    return _pymc._vectorized_function(core, [_pymc._flat([t]) for t in tensors], mode)


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
    mode = _pymc._FORWARD_MODE if mode is None else mode
    names = tuple((name, tuple(dims) if dims is not None else None) for name, _, dims in wanted)
    key = ("backward", _pymc._layout_key(layout), names, _pymc._mode_key(mode))
    function = _pymc._cached(
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
            if _pymc._is_xtensor(source):
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
