"""PyMC: the PyTensor graphs of a model's log p and score, compiled once per model.

log p is ``model.logp(jacobian=True)`` on *core* (one-draw) placeholders of the value
variables (``pymc.dims`` graphs lowered to plain tensors); the batched score function
vectorises it over a leading draw axis, sums and differentiates it; the per-draw one is
the function ``pm.sample`` compiles (``model.logp_dlogp_function``). Compiled functions are cached per model (``cached``). PyTensor
and PyMC are imported inside the functions, only when a model is given.
"""

import weakref

__all__ = ["COMPILED", "cached", "mode_key", "layout_key", "is_xtensor", "as_model_type",
           "as_tensor", "core_placeholder", "flat_vector", "vectorized_function",
           "build_per_draw_function", "build_score_function"]

# model -> {key: compiled function}; entries die with the model.
COMPILED = weakref.WeakKeyDictionary()


def cached(model, key, build):
    """``build()``, once per model and ``key``."""
    per_model = COMPILED.setdefault(model, {})
    if key not in per_model:
        per_model[key] = build()
    return per_model[key]


def mode_key(mode):
    # A Mode object is keyed by identity; the cached function holds a reference to it.
    return mode if isinstance(mode, str) else ("Mode", id(mode))


def layout_key(layout):
    return tuple((var.value_name, var.value_shape, var.shape) for var in layout)


def is_xtensor(variable):
    return type(variable.type).__name__ == "XTensorType"


def as_model_type(tensor, like):
    """View a core tensor placeholder as the type of ``like`` (tensor or xtensor)."""
    if is_xtensor(like):
        from pytensor.xtensor.basic import xtensor_from_tensor

        return xtensor_from_tensor(tensor, dims=like.type.dims)
    return tensor


def as_tensor(variable, dims=None):
    """Tensor view of a tensor or xtensor graph (xtensor transposed to ``dims``)."""
    if is_xtensor(variable):
        from pytensor.xtensor.basic import tensor_from_xtensor

        if dims is not None and tuple(variable.type.dims) != tuple(dims):
            variable = variable.transpose(*dims)
        return tensor_from_xtensor(variable)
    return variable


def _lower_xtensor(outputs):
    """Rewrite xtensor ops (``pymc.dims`` models) into plain tensor ops."""
    try:
        from pytensor.graph.traversal import ancestors
    except ImportError:  # PyTensor < 2.31
        from pytensor.graph.basic import ancestors

    if not any(is_xtensor(var) for var in ancestors(outputs)):
        return outputs
    from pytensor.graph.replace import clone_replace
    from pytensor.graph.rewriting.utils import rewrite_graph

    # Copy the nodes but keep the graph inputs (the core placeholders), so that the
    # lowered graph can still be vectorised with respect to them; rewrite_graph's own
    # clone=True also copies the inputs (PyTensor 2.x).
    outputs = clone_replace(list(outputs))
    return rewrite_graph(outputs, include=("lower_xtensor",), clone=False)


def _inline_op_from_graph(outputs):
    """Replace OpFromGraph nodes (e.g. PyTensor 3's LogSumExp) by their inner graphs.

    Vectorising an OpFromGraph wraps it in a Blockwise, which the C backend runs as a
    Python loop over draws; its inner graph of elementary ops vectorises natively.
    """
    from pytensor.compile.builders import OpFromGraph
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.replace import clone_replace
    from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter

    try:
        from pytensor.graph.traversal import applys_between, graph_inputs
    except ImportError:  # PyTensor < 2.31
        from pytensor.graph.basic import applys_between, graph_inputs

    outputs = list(outputs)
    if not any(isinstance(node.op, OpFromGraph)
               for node in applys_between(list(graph_inputs(outputs)), outputs)):
        return outputs

    @node_rewriter([OpFromGraph])
    def inline(fgraph, node):
        op = node.op
        inner = getattr(op, "fgraph", None)
        if hasattr(inner, "bind"):  # PyTensor 3: a frozen inner FunctionGraph
            return inner.bind(dict(zip(inner.inputs, node.inputs)))
        return clone_replace(op.inner_outputs, dict(zip(op.inner_inputs, node.inputs)))

    fgraph = FunctionGraph(outputs=clone_replace(outputs), clone=False)
    dfs_rewriter(inline).rewrite(fgraph)
    return list(fgraph.outputs)


def _batch_placeholders(core_inputs):
    import pytensor.tensor as pt

    return [
        pt.tensor(name=f"{var.name}_draws", dtype=var.type.dtype, shape=(None, *var.type.shape))
        for var in core_inputs
    ]


def vectorized_function(core_inputs, core_outputs, mode):
    """Compile ``core_outputs`` vectorised over a new leading draw axis of every input."""
    import pytensor
    from pytensor.graph.replace import vectorize_graph

    core_outputs = _lower_xtensor(core_outputs)
    batch_inputs = _batch_placeholders(core_inputs)
    batch_outputs = vectorize_graph(core_outputs, replace=dict(zip(core_inputs, batch_inputs)))
    return pytensor.function(batch_inputs, batch_outputs, mode=mode, on_unused_input="ignore")


def core_placeholder(shape, dtype, name):
    import pytensor.tensor as pt

    return pt.tensor(name=name, dtype=dtype, shape=tuple(shape))


def flat_vector(parts):
    import pytensor.tensor as pt

    return pt.concatenate([pt.cast(part, "float64").ravel() for part in parts])


def _core_log_density(model, layout):
    """Core placeholders (one per value variable, one draw) and log p at them, a scalar.

    log p = ``model.logp(jacobian=True)``: the density of the value variables, the
    log-Jacobian of every transform included.
    """
    from pytensor.graph.replace import graph_replace

    core = [
        core_placeholder(var.value_shape, var.value.type.dtype, var.value_name) for var in layout
    ]
    logp = model.logp(jacobian=True)
    logp = graph_replace(
        logp,
        {var.value: as_model_type(placeholder, var.value)
         for var, placeholder in zip(layout, core)},
        strict=False,
    )
    [logp] = _inline_op_from_graph(_lower_xtensor([logp]))
    return core, logp


def _batched_log_density(model, layout):
    """Batch placeholders (one per value variable) and log p of each draw, (n,).

    The core graph of :func:`_core_log_density`, vectorised over a leading draw axis.
    """
    from pytensor.graph.replace import vectorize_graph

    core, logp = _core_log_density(model, layout)
    batch = _batch_placeholders(core)
    return batch, vectorize_graph(logp, replace=dict(zip(core, batch)))


def build_per_draw_function(model, layout, mode):
    """Compile one flat draw (d,) -> (grad log p (d,), log p): the function pm.sample runs.

    ``model.logp_dlogp_function(ravel_inputs=True)``, the very graph PyMC's NUTS compiles
    to sample (one raveled vector of the value variables, in ``model.value_vars`` order
    and C order within each: the layout's flat order), with log p and its gradient as
    one function. After ``pm.sample`` PyTensor's compile cache holds its C code, so it
    compiles in well under a second where the batched graph takes 7-60 s on an empty
    cache (benchmarks/results/first_call.md). Models whose graph PyMC cannot compile this
    way (e.g. dims/xtensor models on some PyMC versions, value variables that are not all
    float64) use the core-placeholder graph of the batched function, evaluated the same
    way.
    """
    try:
        return _build_sampling_function(model, layout, mode)
    except (TypeError, ValueError, NotImplementedError, AttributeError, KeyError):
        return _build_per_draw_core(model, layout, mode)


def _build_sampling_function(model, layout, mode):
    import numpy as np

    values = [var.value for var in layout]
    if list(model.continuous_value_vars) != values or any(
            value.type.dtype != "float64" for value in values):
        raise ValueError("the sampling function's inputs are not the layout's")
    value_grad = model.logp_dlogp_function(
        ravel_inputs=True, **({} if mode is None else {"mode": mode}))
    value_grad.set_extra_values({})  # every value variable is a gradient variable

    def evaluate(row):
        log_p, grad = value_grad(row)
        return np.asarray(grad, dtype=np.float64), float(log_p)

    return evaluate


def _build_per_draw_core(model, layout, mode):
    """Compile one flat draw (d,) -> (grad log p (d,), log p), on the core graph itself.

    The core placeholders of the batched function: value variables in layout order,
    each flattened in C order.
    """
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    core, logp = _core_log_density(model, layout)
    grads = pytensor.grad(logp, core)
    function = pytensor.function(core, [flat_vector(grads), pt.cast(logp, "float64")],
                                 mode=mode, on_unused_input="ignore")
    function.trust_input = True  # inputs built below: right dtype and shape
    bounds = np.cumsum([0] + [var.size for var in layout])

    def evaluate(row):
        parts = [np.ascontiguousarray(row[start:stop].reshape(var.value_shape),
                                      dtype=var.value.type.dtype)
                 for var, start, stop in zip(layout, bounds[:-1], bounds[1:])]
        grad, log_p = function(*parts)
        return grad, float(log_p)

    return evaluate


def build_score_function(model, layout, mode):
    """Compile draws -> [grad log p (n, d), log p (n, 1)], vectorised over a leading draw axis.

    log p is built for one draw, vectorised over draws, summed, and differentiated with
    respect to the batched value variables: since draws do not interact, the gradient
    of the sum is the per-draw score. (Vectorising the log p graph and then taking the
    gradient compiled faster on an empty cache than vectorising the gradient graph,
    with the same run time; see benchmarks/bench_scores.py.) log p itself is a second
    output of the same function: computed on the way to the gradient, it costs no
    compilation of its own (regularised thinning needs both).
    """
    import pytensor
    import pytensor.tensor as pt

    batch, logp_per_draw = _batched_log_density(model, layout)
    grads = pytensor.grad(logp_per_draw.sum(), batch)
    n_draws = batch[0].shape[0]
    scores = pt.concatenate(
        [pt.cast(grad, "float64").reshape((n_draws, -1)) for grad in grads], axis=1
    )
    logp = pt.cast(logp_per_draw, "float64").reshape((n_draws, 1))
    return pytensor.function(batch, [scores, logp], mode=mode, on_unused_input="ignore")
