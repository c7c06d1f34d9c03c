"""PyMC models as a score source: unconstrained draws and batched grad log p.

Imported lazily by :mod:`steindiag.inputs._trace` only when a PyMC model is passed, so that
``import steindiag`` never imports PyMC, PyTensor or ArviZ.

Data flow::

    free RVs of the model -> layout (value variables, transforms, shapes)
    posterior values      -> forward transforms, one vectorised PyTensor graph -> x (N, d)
    x (N, d)              -> grad of model.logp(jacobian=True), one vectorised graph -> s (N, d)
    x (N, d)              -> model.logp(jacobian=True) itself, same function -> log p (N,)

Both graphs are built once per model on the *core* (one-draw) shapes, differentiated,
and then vectorised over a leading draw dimension with
``pytensor.graph.replace.vectorize_graph``; they are evaluated on chunks of draws.
Compiled functions are cached per model.

For some models the vectorised graph runs slower than PyTensor's one-draw graph called
once per draw (an ``LKJCholeskyCov`` whose batched Cholesky ops run as a loop inside
the graph, see benchmarks/bench_scores.py): the score pass then times a chunk both ways
and keeps the faster (``strategy="auto"``). Both are the gradient of the same core
graph, so they give the same numbers in the same layout.
"""

import time

import warnings
import weakref
from dataclasses import dataclass
from math import prod

import numpy as np

from steindiag.engine.progress import make_progress
from steindiag.engine.threads import single_threaded_blas

__all__ = [
    "FreeVariable",
    "model_layout",
    "unconstrained_values",
    "model_scores",
    "model_log_density",
    "check_model_data",
    "default_compile_mode",
    "STRATEGIES",
]

STRATEGIES = ("auto", "batched", "per-draw")

# Elements per intermediate array used to size chunks of draws (256 KB in float64):
# measured, chunks whose intermediates stay this small run 2-3x faster than one big
# call (cache-resident, no page faults on fresh allocations), see bench_scores.py.
_WORK_ELEMENTS = 2**15


@dataclass(frozen=True, kw_only=True)
class FreeVariable:
    """One free random variable of a PyMC model and its value variable.

    Attributes
    ----------
    name : str
        Name of the random variable (constrained space), e.g. ``"sigma"``.
    value_name : str
        Name of its value variable (unconstrained space), e.g. ``"sigma_log__"``.
    transform : str
        Name of the transform (``"none"`` when the variable is already on R^k).
    shape, value_shape : tuple of int
        Shapes of one draw of the random variable and of its value variable.
    dims : tuple of str or None
        Named dims of the random variable in the model, if any.
    rv, value, transform_op : object
        The PyTensor random variable, value variable and PyMC transform (or None).
    """

    name: str
    value_name: str
    transform: str
    shape: tuple
    value_shape: tuple
    dims: tuple | None
    rv: object
    value: object
    transform_op: object

    @property
    def size(self):
        """Number of unconstrained coordinates this variable contributes."""
        return int(prod(self.value_shape))


def _transform_name(transform):
    if transform is None:
        return "none"
    parts = getattr(transform, "transform_list", None)
    if parts:
        return "+".join(_transform_name(part) for part in parts)
    return str(getattr(transform, "name", type(transform).__name__))


def _is_xtensor(variable):
    return type(variable.type).__name__ == "XTensorType"


def model_layout(model):
    """Free variables of ``model`` in ``model.value_vars`` order.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    list of FreeVariable

    Raises
    ------
    TypeError
        If ``model`` is not a PyMC model.
    ValueError
        If the model has discrete free variables (they have no score), naming them,
        or no free variables at all.
    """
    import pymc as pm

    if not isinstance(model, pm.Model):
        raise TypeError(f"model must be a pymc.Model; got {type(model).__name__}.")
    discrete = [
        f"{rv.name} ({rv.type.dtype})"
        for rv in model.free_RVs
        if not str(rv.type.dtype).startswith(("float", "complex"))
    ]
    if discrete:
        continuous = [rv.name for rv in model.free_RVs
                      if str(rv.type.dtype).startswith(("float", "complex"))]
        if continuous:
            instead = (
                "or leave model= out and pass the score of the continuous variables' "
                "marginal density (the discrete ones summed out) at their stored values: "
                f"steindiag.ksd(idata, score=f, var_names={continuous!r}, "
                "space='constrained'), with f mapping an (n, d) batch of those values to "
                "grad log p (every function of steindiag takes the same arguments)."
            )
        else:
            instead = "the model has no continuous free variable for KSD to diagnose."
        raise ValueError(
            "model has discrete free variables: " + ", ".join(discrete) + ". KSD needs the "
            "score grad log p on R^d, which a discrete parameter does not have, so model= "
            "cannot be used, not even with score= (the model's draws would include them). "
            "Marginalise them out (e.g. pymc_extras.marginalize) and pass that model, "
            + instead
        )
    if not model.free_RVs:
        raise ValueError("model has no free random variables: there is nothing to diagnose.")
    shapes = {name: tuple(int(n) for n in shape) for name, shape in model.eval_rv_shapes().items()}
    named_dims = getattr(model, "named_vars_to_dims", {}) or {}
    layout = []
    for rv in model.free_RVs:
        value = model.rvs_to_values[rv]
        transform = model.rvs_to_transforms.get(rv)
        dims = named_dims.get(rv.name)
        layout.append(
            FreeVariable(
                name=rv.name,
                value_name=value.name,
                transform=_transform_name(transform),
                shape=shapes[rv.name],
                value_shape=shapes[value.name],
                dims=tuple(dims) if dims is not None else None,
                rv=rv,
                value=value,
                transform_op=transform,
            )
        )
    return layout


def default_compile_mode():
    """PyTensor mode used for the batched graphs.

    The C backend ("CVM") when a C++ compiler is configured: measured on PyTensor 2.38
    and 3.3 (benchmarks/bench_scores.py), the first call for a 10-parameter regression
    takes 6-7 s on an empty compile cache (NUMBA: 36 s on PyTensor 3) and the compiled
    score evaluates 20,000 draws in 35-40 ms. Without a compiler, "NUMBA".
    """
    import pytensor

    return "CVM" if pytensor.config.cxx else "NUMBA"


def _as_model_type(tensor, like):
    """View a core tensor placeholder as the type of ``like`` (tensor or xtensor)."""
    if _is_xtensor(like):
        from pytensor.xtensor.basic import xtensor_from_tensor

        return xtensor_from_tensor(tensor, dims=like.type.dims)
    return tensor


def _as_tensor(variable, dims=None):
    """Tensor view of a tensor or xtensor graph (xtensor transposed to ``dims``)."""
    if _is_xtensor(variable):
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

    if not any(_is_xtensor(var) for var in ancestors(outputs)):
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


def _vectorized_function(core_inputs, core_outputs, mode):
    """Compile ``core_outputs`` vectorised over a new leading draw axis of every input."""
    import pytensor
    from pytensor.graph.replace import vectorize_graph

    core_outputs = _lower_xtensor(core_outputs)
    batch_inputs = _batch_placeholders(core_inputs)
    batch_outputs = vectorize_graph(core_outputs, replace=dict(zip(core_inputs, batch_inputs)))
    return pytensor.function(batch_inputs, batch_outputs, mode=mode, on_unused_input="ignore")


def _core_placeholder(shape, dtype, name):
    import pytensor.tensor as pt

    return pt.tensor(name=name, dtype=dtype, shape=tuple(shape))


def _flat(parts):
    import pytensor.tensor as pt

    return pt.concatenate([pt.cast(part, "float64").ravel() for part in parts])


def _core_log_density(model, layout):
    """Core placeholders (one per value variable, one draw) and log p at them, a scalar.

    log p = ``model.logp(jacobian=True)``: the density of the value variables, the
    log-Jacobian of every transform included.
    """
    from pytensor.graph.replace import graph_replace

    core = [
        _core_placeholder(var.value_shape, var.value.type.dtype, var.value_name) for var in layout
    ]
    logp = model.logp(jacobian=True)
    logp = graph_replace(
        logp,
        {var.value: _as_model_type(placeholder, var.value)
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


def _build_per_draw_function(model, layout, mode, with_log_density=True):
    """Compile one draw -> [grad log p (d,), log p ()] on the model's value variables.

    PyMC's own gradient graph (``model.dlogp``, the graph ``model.compile_dlogp``
    compiles, with PyMC's rewrites), and log p as a second output unless
    ``with_log_density`` is False (then [grad log p] alone: the function
    ``compile_dlogp`` compiles; log p as an output costs 13-16 % more a draw with the
    C backend, lkj3 and lkj4-mvnormal of benchmarks/bench_scores.py, PyTensor 3.3).
    Inputs in layout order, each of its value shape. Measured on PyTensor 3.3 with the
    C backend, the same gradient written as ``pytensor.grad`` of log p at core
    placeholders ran 1.4-1.5x slower than PyMC's loop on LKJ models
    (benchmarks/results/scores.md). Models whose graph PyMC cannot differentiate this
    way (e.g. dims/xtensor models on some PyMC versions) use the core-placeholder graph
    of the batched function.
    """
    try:
        return _build_per_draw_pymc(model, layout, mode, with_log_density)
    except (TypeError, ValueError, NotImplementedError, AttributeError, KeyError):
        return _build_per_draw_core(model, layout, mode, with_log_density)


def _build_per_draw_pymc(model, layout, mode, with_log_density):
    import pymc.pytensorf as pytensorf
    import pytensor.tensor as pt

    compile_function = getattr(pytensorf, "compile", None) or pytensorf.compile_pymc
    values = [var.value for var in layout]
    free = [model.values_to_rvs[value] for value in values]  # dlogp takes the variables
    outputs = [pt.cast(model.dlogp(vars=free, jacobian=True), "float64")]
    if with_log_density:
        outputs.append(pt.cast(model.logp(jacobian=True), "float64"))
    function = compile_function(values, outputs, mode=mode, on_unused_input="ignore")
    function.trust_input = True  # inputs are built by value_inputs: right dtype and shape
    return function


def _build_per_draw_core(model, layout, mode, with_log_density):
    """Compile one draw -> [grad log p (d,), log p ()], on the core graph itself.

    The core placeholders of the batched function: value variables in layout order,
    each flattened in C order.
    """
    import pytensor
    import pytensor.tensor as pt

    core, logp = _core_log_density(model, layout)
    grads = pytensor.grad(logp, core)
    outputs = [_flat(grads)] + ([pt.cast(logp, "float64")] if with_log_density else [])
    function = pytensor.function(core, outputs, mode=mode, on_unused_input="ignore")
    function.trust_input = True  # inputs are built by value_inputs: right dtype and shape
    return function


def _build_score_function(model, layout, mode):
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


def _build_forward_function(model, layout, stored, mode):
    """Unconstrained values of every free variable from stored constrained/unconstrained ones.

    ``stored[i]`` is ``"constrained"`` or ``"unconstrained"``: which value of variable i
    is an input. Bounds that depend on other variables are evaluated at those variables'
    (constrained) values, obtained by the backward transform where only the
    unconstrained value is stored.
    """
    from pymc.logprob.utils import replace_rvs_by_values

    core, rvs_to_values, rvs_to_transforms = [], {}, {}
    for var, kind in zip(layout, stored):
        if kind == "unconstrained":
            placeholder = _core_placeholder(var.value_shape, var.value.type.dtype, var.value_name)
            rvs_to_values[var.rv] = _as_model_type(placeholder, var.value)
            if var.transform_op is not None:
                rvs_to_transforms[var.rv] = var.transform_op
        else:
            placeholder = _core_placeholder(var.shape, var.rv.type.dtype, var.name)
            rvs_to_values[var.rv] = _as_model_type(placeholder, var.rv)
        core.append(placeholder)
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
    dims = [var.value.type.dims if _is_xtensor(var.value) else None for var in layout]
    outputs = [_as_tensor(out, dim) for out, dim in zip(outputs, dims)]
    checked = [var for var, kind in zip(layout, stored)
               if kind == "constrained" and var.transform_op is not None]
    round_trips = [
        _as_tensor(out, var.rv.type.dims if _is_xtensor(var.rv) else None)
        for out, var in zip(round_trips, checked)
    ]
    flat_outputs = [_flat(outputs)] + ([_flat(round_trips)] if round_trips else [])
    return _vectorized_function(core, flat_outputs, mode)


# The forward transforms are a handful of cheap ops on whole (N, k) arrays: the Python
# linker runs each as one NumPy call and needs no C/Numba compilation (cold start).
_FORWARD_MODE = "FAST_COMPILE"

# model -> {key: compiled function}; entries die with the model.
_COMPILED = weakref.WeakKeyDictionary()


def _cached(model, key, build):
    per_model = _COMPILED.setdefault(model, {})
    if key not in per_model:
        per_model[key] = build()
    return per_model[key]


def _mode_key(mode):
    # A Mode object is keyed by identity; the cached function holds a reference to it.
    return mode if isinstance(mode, str) else ("Mode", id(mode))


def _layout_key(layout):
    return tuple((var.value_name, var.value_shape, var.shape) for var in layout)


def chunk_size_for(model, layout, n_draws):
    """Draws per evaluation so that an intermediate array holds about 32k elements."""
    per_draw = sum(var.size for var in layout)
    for rv in model.observed_RVs:
        per_draw += int(np.size(_data_value(model.rvs_to_values[rv])))
    for data in getattr(model, "data_vars", []):
        per_draw += int(np.size(_data_value(data)))
    return int(min(max(n_draws, 1), max(1, _WORK_ELEMENTS // max(per_draw, 1))))


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
    key = ("forward", _layout_key(layout), tuple(stored), _mode_key(mode))
    function = _cached(model, key, lambda: _build_forward_function(model, layout, stored, mode))
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


def value_inputs(layout, flat_draws):
    """Flat (n, d) draws -> one contiguous (n, *value_shape) array per value variable."""
    n_draws = flat_draws.shape[0]
    inputs, start = [], 0
    for var in layout:
        block = flat_draws[:, start : start + var.size].reshape((n_draws, *var.value_shape))
        inputs.append(np.ascontiguousarray(block, dtype=var.value.type.dtype))
        start += var.size
    return inputs


# The per-draw loop costs at least a Python call per draw (about 10-30 us with PyTensor's
# function overhead): a batched graph faster than this per draw is never timed against it.
_PER_DRAW_FLOOR_SECONDS = 1e-5
# Draws below which "auto" does not time the two strategies (both take well under 1 s).
_AUTO_MIN_DRAWS = 512
# Draws of the per-draw loop timed against one batched chunk.
_PROBE_DRAWS = 64


def strategy_key(layout, mode, with_log_density):
    """Key of the strategy "auto" remembered in a model's cache (``_COMPILED[model]``).

    Remembered apart with and without log p: the per-draw functions differ.
    """
    return ("strategy", _layout_key(layout), _mode_key(mode), bool(with_log_density))


class _ScorePass:
    """The score pass over N draws: chunks of the batched graph or a loop of the core one.

    ``run()`` fills ``scores`` (N, d) and, if ``with_log_density``, ``log_density``
    (N, 1) chunk by chunk (NaN otherwise); a KeyboardInterrupt between chunks
    propagates (the progress bar is closed first). Without log p the per-draw way
    compiles the gradient alone (the batched function always gives both: log p is on
    its way to the gradient there).
    """

    def __init__(self, model, layout, flat_draws, chunk_size, mode, strategy, progress,
                 with_log_density=True):
        self.model, self.layout, self.mode = model, layout, mode
        self.with_log_density = bool(with_log_density)
        self.n_draws, d = flat_draws.shape
        self.inputs = value_inputs(layout, flat_draws)
        self.chunk_size = (chunk_size_for(model, layout, self.n_draws) if chunk_size is None
                           else int(chunk_size))
        self.scores = np.empty((self.n_draws, d))
        self.log_density = np.full((self.n_draws, 1), np.nan)
        self.strategy, self.progress, self.done, self.bar = strategy, progress, 0, None

    def _function(self, kind):
        """The compiled function of ``kind``: "score" (batched), "per-draw" (the
        gradient alone) or "per-draw log p" (gradient and log p)."""
        key = (kind, _layout_key(self.layout), _mode_key(self.mode))
        if kind == "score":
            def build():
                return _build_score_function(self.model, self.layout, self.mode)
        else:
            def build():
                return _build_per_draw_function(self.model, self.layout, self.mode,
                                                with_log_density=kind == "per-draw log p")
        return _cached(self.model, key, build)

    def _strategy_key(self):
        return strategy_key(self.layout, self.mode, self.with_log_density)

    def _batched(self, stop):
        function, start = self._function("score"), self.done
        results = function(*[array[start:stop] for array in self.inputs])
        self.scores[start:stop], self.log_density[start:stop] = results
        self._advance(stop)

    def _per_draw(self, stop):
        kind = "per-draw log p" if self.with_log_density else "per-draw"
        function = self._function(kind)
        # BLAS on one thread: one draw's products are far too small to share, and each
        # multi-threaded BLAS call leaves OpenBLAS's threads spinning on the other cores
        # for a while after it, where they halve the speed of the KSD pass that follows
        # (lkj3, 4000 draws: 40 instead of 26 ms after a pass with BLAS on 2 threads).
        with single_threaded_blas():
            for row in range(self.done, stop):
                outputs = function(*[array[row, ...] for array in self.inputs])
                self.scores[row] = outputs[0]
                if self.with_log_density:
                    self.log_density[row, 0] = outputs[1]
        self._advance(stop)

    def _advance(self, stop):
        if self.bar is not None:
            self.bar.update(stop - self.done)
        self.done = stop

    def _timed(self, step, n):
        start = time.perf_counter()
        step(min(self.done + n, self.n_draws))
        return (time.perf_counter() - start) / max(n, 1)

    def _choose(self):
        """Time a batched chunk and a few per-draw calls on the first draws; keep the faster."""
        remembered = _COMPILED.get(self.model, {}).get(self._strategy_key())
        if remembered is not None:
            return remembered, None
        if self.n_draws < _AUTO_MIN_DRAWS:
            return "batched", None
        chunk = min(self.chunk_size, max(1, self.n_draws // 8))
        self._batched(min(chunk, self.n_draws))  # first call: allocations, not timed
        # Each way timed twice, the faster kept: a probe of a few milliseconds is easily
        # hit by another process on a shared machine (a wrong choice can cost 15x).
        batched = min(self._timed(self._batched, chunk), self._timed(self._batched, chunk))
        if batched < _PER_DRAW_FLOOR_SECONDS:
            chosen = "batched"
        else:
            self._per_draw(self.done + 1)
            per_draw = min(self._timed(self._per_draw, _PROBE_DRAWS),
                           self._timed(self._per_draw, _PROBE_DRAWS))
            chosen = "per-draw" if per_draw < batched else "batched"
            batched = min(batched, per_draw)
        _COMPILED.setdefault(self.model, {})[self._strategy_key()] = chosen
        return chosen, batched

    def run(self):
        chosen, seconds_per_draw = self.strategy, None
        try:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                if chosen == "auto":
                    chosen, seconds_per_draw = self._choose()
                step = self._batched if chosen == "batched" else self._per_draw
                if seconds_per_draw is None and self.progress is not False:
                    seconds_per_draw = self._timed(step, self.chunk_size)
                if self.done < self.n_draws and self.progress is not False:
                    expected = seconds_per_draw * (self.n_draws - self.done)
                    self.bar = make_progress(self.progress, self.n_draws, expected,
                                             desc=f"PyMC scores ({chosen})", unit="draw")
                    if self.bar is not None and self.done:
                        self.bar.update(self.done)
                # Per-draw chunks as long as a batched one: Ctrl-C is seen between them.
                while self.done < self.n_draws:
                    step(min(self.done + self.chunk_size, self.n_draws))
        finally:
            if self.bar is not None:
                self.bar.close()
        self.chosen = chosen
        return self


def _scores_and_log_density(model, layout, flat_draws, chunk_size, mode, strategy="auto",
                            progress=None, with_log_density=True):
    """[grad log p (N, d), log p (N, 1)] and the strategy used, from the cached graphs.

    Without ``with_log_density`` log p is NaN wherever the per-draw way ran.
    """
    mode = default_compile_mode() if mode is None else mode
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}; got {strategy!r}.")
    try:
        done = _ScorePass(model, layout, flat_draws, chunk_size, mode, strategy, progress,
                          with_log_density).run()
    except (ValueError, IndexError, AssertionError) as err:
        if not _is_shape_error(err):
            raise
        raise ValueError(_inconsistent_data_message(model, err)) from err
    return done.scores, done.log_density, done.chosen


# Words of PyTensor's (C, Python and Numba backends) errors when the shapes of a graph's
# inputs cannot be combined, looked for in the error's first line only: PyTensor appends
# "Inputs shapes: ..." to every error of an Apply node (e.g. a failed check sigma > 0).
_SHAPE_WORDS = ("dimension mismatch", "shape mismatch", "incompatible", "broadcast",
                "not aligned", "shapes")


def _is_shape_error(err):
    message = str(err).strip().lower()
    first_line = message.splitlines()[0] if message else ""
    return any(word in first_line for word in _SHAPE_WORDS)


def _data_shapes(model):
    """'name (shape)' of each observed value and pm.Data of ``model``, as it is now."""
    shapes = {}
    for rv in model.observed_RVs:
        value = _data_value(model.rvs_to_values[rv])
        if value is not None:
            shapes[rv.name] = f"{rv.name} {tuple(value.shape)} (observed)"
    for data in getattr(model, "data_vars", []):
        value = _data_value(data)
        if value is not None and data.name not in shapes:
            shapes[data.name] = f"{data.name} {tuple(value.shape)}"
    return list(shapes.values())


def _inconsistent_data_message(model, err):
    """Why the model's log p could not be evaluated when its data's shapes do not fit."""
    first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    shapes = _data_shapes(model)
    now = f" The model's data now have shapes: {', '.join(shapes)}." if shapes else ""
    return (
        f"the model's log p cannot be evaluated with its current data: PyTensor says "
        f"{first_line!r}.{now} The model itself is inconsistent, usually because "
        "pm.set_data changed the shape of some data but not of the data that must match "
        "them (e.g. the predictors but not the observed values): set them together, "
        "pm.set_data({...all of them...}), or back to the data the trace was sampled with."
    )


def model_scores(model, layout, flat_draws, *, chunk_size=None, mode=None, strategy="auto",
                 progress=None, return_strategy=False):
    """grad log p of ``model.logp(jacobian=True)`` at flat unconstrained draws.

    Parameters
    ----------
    model : pymc.Model
    layout : list of FreeVariable
    flat_draws : ndarray, shape (N, d)
        Unconstrained draws in layout order.
    chunk_size : int, optional
        Draws per evaluation of the vectorised graph (default: sized from the model so
        that an intermediate array holds about 32k elements).
    mode : str, optional
        PyTensor compile mode (default :func:`default_compile_mode`).
    strategy : {"auto", "batched", "per-draw"}, default "auto"
        ``"batched"``: the graph vectorised over draws, on chunks; ``"per-draw"``: the
        one-draw graph called once per draw (what ``model.compile_dlogp`` gives);
        ``"auto"``: for 512 draws or more, time a chunk both ways (the per-draw way only
        when the batched one costs more than 10 us a draw) and keep the faster; the
        choice is remembered per model and mode.
    progress : bool or None, default None
        Progress bar on stderr; None: only when interactive and the pass is expected to
        take more than a few seconds.
    return_strategy : bool, default False
        Also return the strategy used ("batched" or "per-draw").

    Returns
    -------
    ndarray of float64, shape (N, d)
        (and the strategy used, if ``return_strategy``).

    Notes
    -----
    One graph, grad of log p with respect to the value variables, is built for a single
    draw; the batched strategy vectorises it over a leading draw axis. Each function
    is compiled once per model and mode and cached. Ctrl-C stops the pass between
    chunks. Memory: O(chunk_size * (d + size of the observed data)).
    """
    scores, _, chosen = _scores_and_log_density(model, layout, flat_draws, chunk_size, mode,
                                                strategy, progress, with_log_density=False)
    return (scores, chosen) if return_strategy else scores


def model_log_density(model, layout, flat_draws, *, chunk_size=None, mode=None):
    """log p of ``model.logp(jacobian=True)`` at flat unconstrained draws.

    Parameters
    ----------
    model : pymc.Model
    layout : list of FreeVariable
    flat_draws : ndarray, shape (N, d)
        Unconstrained draws in layout order.
    chunk_size : int, optional
        Draws per evaluation (default: sized from the model, as for the scores).
    mode : str, optional
        PyTensor compile mode (default :func:`default_compile_mode`).

    Returns
    -------
    ndarray of float64, shape (N,)

    Notes
    -----
    The function :func:`model_scores` compiles (log p is its second output): once the
    scores were computed, log p needs no compilation of its own. Evaluated on chunks of
    draws, not a Python call per draw. Memory: O(chunk_size * (d + size of the
    observed data)).
    """
    return _scores_and_log_density(model, layout, flat_draws, chunk_size, mode)[1][:, 0]


def _data_value(variable):
    """Numeric value of a constant or shared (pm.Data) variable, else None."""
    if hasattr(variable, "get_value"):
        return np.asarray(variable.get_value())
    if hasattr(variable, "data"):
        return np.asarray(variable.data)
    return None


def _same_values(model_value, trace_value):
    if model_value.ndim == 0 and trace_value.shape == (1,):
        # ArviZ 0.x stores a scalar observation (observed=13) with shape (1,).
        trace_value = trace_value.reshape(())
    if model_value.shape != trace_value.shape:
        return False, f"shape {model_value.shape} in the model, {trace_value.shape} in the trace"
    try:
        equal = np.allclose(model_value, trace_value, rtol=1e-10, atol=0.0, equal_nan=True)
    except TypeError:
        equal = np.array_equal(model_value, trace_value)
    if equal:
        return True, ""
    return False, "same shape, different values"


def check_model_data(model, observed_data, constant_data):
    """Warn when the model's observed / pm.Data values differ from the trace's.

    Parameters
    ----------
    model : pymc.Model
    observed_data, constant_data : xarray.Dataset or None
        The trace's ``observed_data`` and ``constant_data`` groups (None if absent).

    Returns
    -------
    list of str
        Names of the variables that differ (a ``UserWarning`` is issued if any).
    """
    if observed_data is None and constant_data is None:
        return []
    in_model = {}
    for rv in model.observed_RVs:
        value = _data_value(model.rvs_to_values[rv])
        if value is not None:
            in_model[rv.name] = value
    for data in getattr(model, "data_vars", []):
        value = _data_value(data)
        if value is not None and data.name not in in_model:
            in_model[data.name] = value
    differ = []
    for name, model_value in in_model.items():
        for group in (observed_data, constant_data):
            if group is not None and name in group.data_vars:
                same, why = _same_values(model_value, np.asarray(group[name].values))
                if not same:
                    differ.append(f"{name} ({why})")
                break
    if differ:
        warnings.warn(
            "the model's observed/pm.Data values differ from the trace's observed_data/"
            "constant_data for: " + "; ".join(differ) + ". Scores are computed with the "
            "model's current data, which is not the posterior the trace was drawn from "
            "(pm.set_data back to the sampled data, or rebuild the model).",
            UserWarning,
            stacklevel=4,
        )
    return [item.split(" (")[0] for item in differ]
