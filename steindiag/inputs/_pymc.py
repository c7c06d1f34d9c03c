"""PyMC models as a score source: the free variables' layout and the score pass.

PyMC and PyTensor are imported inside the functions, only when a model is passed, so that
``import steindiag`` never imports PyMC, PyTensor or ArviZ.

Data flow::

    free RVs of the model -> layout (value variables, transforms, shapes): model_layout
    stored values         -> x (N, d), forward transforms: _pymc_values
    x (N, d)              -> grad of model.logp(jacobian=True) -> s (N, d): model_scores
    x (N, d)              -> model.logp(jacobian=True) itself, same function -> log p (N,)

The compiled functions (:mod:`steindiag.inputs._pymc_graphs`) are of two kinds: the
per-draw function, the very one ``pm.sample`` compiles (``model.logp_dlogp_function``,
log p and its gradient at one flat draw), which PyTensor's compile cache already holds
after sampling; and the batched graph (log p vectorised over draws, and its gradient),
evaluated on chunks of draws, faster a draw on most models but 7-60 s to compile on an
empty cache. ``strategy="auto"`` runs the per-draw loop and compiles the batched graph
only when the loop would take longer than that, then keeps the faster (an
``LKJCholeskyCov``'s batched Cholesky ops run as a loop inside the graph, slower than the
per-draw function: benchmarks/bench_scores.py). Both give the gradient of the same log p
in the same layout, equal to rounding.
"""

import time
from dataclasses import dataclass
from math import prod

import numpy as np

from steindiag._validate import check_choice
from steindiag.engine.progress import compile_notice, make_progress
from steindiag.engine.threads import single_threaded_blas
from steindiag.inputs._pymc_data import data_value, inconsistent_data_message, is_shape_error
from steindiag.inputs._pymc_graphs import (COMPILED, build_per_draw_function,
                                           build_score_function, cached, layout_key, mode_key)

__all__ = ["FreeVariable", "model_layout", "value_inputs", "chunk_size_for", "model_scores",
           "model_log_density", "default_compile_mode", "timing_key", "STRATEGIES"]

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
        layout.append(FreeVariable(
            name=rv.name, value_name=value.name, transform=_transform_name(transform),
            shape=shapes[rv.name], value_shape=shapes[value.name],
            dims=tuple(dims) if dims is not None else None, rv=rv, value=value,
            transform_op=transform))
    return layout


def default_compile_mode():
    """PyTensor mode used for the model's functions.

    The C backend ("CVM") when a C++ compiler is configured: the backend of PyMC's
    default mode, so the per-draw function is the one ``pm.sample`` compiled and found in
    PyTensor's compile cache. Measured on PyTensor 2.38 and 3.3 (benchmarks/bench_scores.py),
    the batched graph of a 10-parameter regression compiles in 6-7 s on an empty cache
    (NUMBA: 36 s on PyTensor 3) and evaluates 20,000 draws in 35-40 ms. Without a
    compiler, "NUMBA".
    """
    import pytensor

    return "CVM" if pytensor.config.cxx else "NUMBA"


def chunk_size_for(model, layout, n_draws):
    """Draws per evaluation so that an intermediate array holds about 32k elements."""
    per_draw = sum(var.size for var in layout)
    for rv in model.observed_RVs:
        per_draw += int(np.size(data_value(model.rvs_to_values[rv])))
    for data in getattr(model, "data_vars", []):
        per_draw += int(np.size(data_value(data)))
    return int(min(max(n_draws, 1), max(1, _WORK_ELEMENTS // max(per_draw, 1))))


def value_inputs(layout, flat_draws):
    """Flat (n, d) draws -> one contiguous (n, *value_shape) array per value variable."""
    n_draws = flat_draws.shape[0]
    inputs, start = [], 0
    for var in layout:
        block = flat_draws[:, start : start + var.size].reshape((n_draws, *var.value_shape))
        inputs.append(np.ascontiguousarray(block, dtype=var.value.type.dtype))
        start += var.size
    return inputs


# "auto" compiles the batched graph only when the per-draw loop (the function pm.sample
# compiled, found in PyTensor's cache) would take longer than this for the draws left:
# compiling the batched graph on an empty cache took 7-60 s for d = 7 to 89 on this
# machine (benchmarks/results/first_call.md), the per-draw loop 20-200 us a draw.
_BATCHED_PAYS_SECONDS = 10.0
# Draws of the per-draw loop timed (twice) to decide; the batched graph is timed on a
# chunk of draws (twice).
_PROBE_DRAWS = 64


def timing_key(layout, mode):
    """Key of the seconds per draw measured by "auto", remembered in ``COMPILED[model]``."""
    return ("seconds per draw", layout_key(layout), mode_key(mode))


class _ScorePass:
    """The score pass over N draws: a loop of the per-draw function or chunks of the batched
    graph.

    ``run()`` fills ``scores`` (N, d) and ``log_density`` (N, 1) chunk by chunk: both
    functions give log p on the way to its gradient. A KeyboardInterrupt between chunks
    propagates (the progress bar is closed first).
    """

    def __init__(self, model, layout, flat_draws, chunk_size, mode, strategy, progress):
        self.model, self.layout, self.mode = model, layout, mode
        self.n_draws, d = flat_draws.shape
        self.flat = np.ascontiguousarray(flat_draws, dtype=np.float64)
        self.inputs = None  # the batched graph's inputs, made when it runs
        self.chunk_size = (chunk_size_for(model, layout, self.n_draws) if chunk_size is None
                           else int(chunk_size))
        self.scores = np.empty((self.n_draws, d))
        self.log_density = np.full((self.n_draws, 1), np.nan)
        self.strategy, self.progress, self.done, self.bar = strategy, progress, 0, None

    def _function(self, kind):
        """The compiled function of ``kind``: "batched" or "per-draw"."""
        key = (kind, layout_key(self.layout), mode_key(self.mode))
        if kind == "batched":
            what, build = "the model's batched score graph (PyTensor)", build_score_function
        else:
            what, build = "the model's score (PyTensor)", build_per_draw_function

        def compiled():
            with compile_notice(self.progress, what):
                return build(self.model, self.layout, self.mode)

        return cached(self.model, key, compiled)

    def _batched(self, stop):
        function, start = self._function("batched"), self.done
        if self.inputs is None:
            self.inputs = value_inputs(self.layout, self.flat)
        results = function(*[array[start:stop] for array in self.inputs])
        self.scores[start:stop], self.log_density[start:stop] = results
        self._advance(stop)

    def _per_draw(self, stop):
        function = self._function("per-draw")
        # BLAS on one thread: one draw's products are far too small to share, and each
        # multi-threaded BLAS call leaves OpenBLAS's threads spinning on the other cores
        # for a while after it, where they halve the speed of the KSD pass that follows
        # (lkj3, 4000 draws: 40 instead of 26 ms after a pass with BLAS on 2 threads).
        with single_threaded_blas():
            for row in range(self.done, stop):
                self.scores[row], self.log_density[row, 0] = function(self.flat[row])
        self._advance(stop)

    def _advance(self, stop):
        if self.bar is not None:
            self.bar.update(stop - self.done)
        self.done = stop

    def _timed(self, step, n):
        """Seconds per draw of ``step`` over the next ``n`` draws (None: none left)."""
        stop = min(self.done + n, self.n_draws)
        if stop <= self.done:
            return None
        start, first = time.perf_counter(), self.done
        step(stop)
        return (time.perf_counter() - start) / (stop - first)

    def _probe(self, step, n):
        """The faster of two timings of ``n`` draws, after one untimed call (compilation,
        allocations). A probe of a few milliseconds is easily hit by another process on
        a shared machine (a wrong choice can cost 15x), hence two."""
        step(min(self.done + (1 if step == self._per_draw else n), self.n_draws))
        times = [t for t in (self._timed(step, n), self._timed(step, n)) if t is not None]
        return min(times) if times else None

    def _choose(self):
        """The per-draw loop first (pm.sample compiled it); the batched graph only if the
        loop would take longer than compiling it, then the faster of the two. Seconds per
        draw are remembered per model and mode."""
        timings = COMPILED.setdefault(self.model, {}).setdefault(
            timing_key(self.layout, self.mode), {})
        if "per-draw" not in timings:
            seconds = self._probe(self._per_draw, _PROBE_DRAWS)
            if seconds is None:  # every draw done
                return "per-draw", None
            timings["per-draw"] = seconds
        left = self.n_draws - self.done
        if "batched" not in timings and timings["per-draw"] * left > _BATCHED_PAYS_SECONDS:
            seconds = self._probe(self._batched, min(self.chunk_size, max(1, left // 8)))
            if seconds is not None:
                timings["batched"] = seconds
        chosen = min(timings, key=timings.get)
        return chosen, timings[chosen]

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
                            progress=None):
    """[grad log p (N, d), log p (N, 1)] and the strategy used, from the cached functions."""
    mode = default_compile_mode() if mode is None else mode
    check_choice(strategy, "strategy", STRATEGIES)
    try:
        done = _ScorePass(model, layout, flat_draws, chunk_size, mode, strategy,
                          progress).run()
    except (ValueError, IndexError, AssertionError) as err:
        if not is_shape_error(err):
            raise
        raise ValueError(inconsistent_data_message(model, err)) from err
    return done.scores, done.log_density, done.chosen


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
        function ``pm.sample`` compiles (``model.logp_dlogp_function``) called once
        per draw; ``"auto"``: the per-draw way, timed on its first draws; the batched
        graph is compiled and timed only if the per-draw way would take more than 10 s
        for the draws left, and then the faster is kept. The seconds per draw are
        remembered per model and mode.
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
    The per-draw function is PyMC's own (found in PyTensor's compile cache after
    ``pm.sample``); the batched strategy vectorises log p over a leading draw axis and
    differentiates it. Each function is compiled once per model and mode and cached. Ctrl-C stops the pass between
    chunks. Memory: O(chunk_size * (d + size of the observed data)).
    """
    scores, _, chosen = _scores_and_log_density(model, layout, flat_draws, chunk_size, mode,
                                                strategy, progress)
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
    The function :func:`model_scores` compiles (log p and its gradient are one
    function): once the scores were computed, log p needs no compilation of its own.
    Memory: O(chunk_size * (d + size of the
    observed data)).
    """
    return _scores_and_log_density(model, layout, flat_draws, chunk_size, mode)[1][:, 0]


