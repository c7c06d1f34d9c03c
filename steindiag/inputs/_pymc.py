"""PyMC models as a score source: the free variables' layout and the score pass.

PyMC and PyTensor are imported inside the functions, only when a model is passed, so that
``import steindiag`` never imports PyMC, PyTensor or ArviZ.

Data flow::

    free RVs of the model -> layout (value variables, transforms, shapes): model_layout
    stored values         -> x (N, d), forward transforms: _pymc_values
    x (N, d)              -> grad of model.logp(jacobian=True) -> s (N, d): model_scores
    x (N, d)              -> model.logp(jacobian=True) itself, same function -> log p (N,)

The compiled functions (:mod:`steindiag.inputs._pymc_graphs`) are evaluated on chunks of
draws. For some models the vectorised graph runs slower than PyTensor's one-draw graph
called once per draw (an ``LKJCholeskyCov`` whose batched Cholesky ops run as a loop
inside the graph, see benchmarks/bench_scores.py): the score pass then times a chunk both
ways and keeps the faster (``strategy="auto"``). Both are the gradient of the same core
graph, so they give the same numbers in the same layout.
"""

import time
from dataclasses import dataclass
from math import prod

import numpy as np

from steindiag._validate import check_choice
from steindiag.engine.progress import make_progress
from steindiag.engine.threads import single_threaded_blas
from steindiag.inputs._pymc_data import data_value, inconsistent_data_message, is_shape_error
from steindiag.inputs._pymc_graphs import (COMPILED, build_per_draw_function,
                                           build_score_function, cached, layout_key, mode_key)

__all__ = ["FreeVariable", "model_layout", "value_inputs", "chunk_size_for", "model_scores",
           "model_log_density", "default_compile_mode", "strategy_key", "STRATEGIES"]

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
    """PyTensor mode used for the batched graphs.

    The C backend ("CVM") when a C++ compiler is configured: measured on PyTensor 2.38
    and 3.3 (benchmarks/bench_scores.py), the first call for a 10-parameter regression
    takes 6-7 s on an empty compile cache (NUMBA: 36 s on PyTensor 3) and the compiled
    score evaluates 20,000 draws in 35-40 ms. Without a compiler, "NUMBA".
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


# The per-draw loop costs at least a Python call per draw (about 10-30 us with PyTensor's
# function overhead): a batched graph faster than this per draw is never timed against it.
_PER_DRAW_FLOOR_SECONDS = 1e-5
# Draws below which "auto" does not time the two strategies (both take well under 1 s).
_AUTO_MIN_DRAWS = 512
# Draws of the per-draw loop timed against one batched chunk.
_PROBE_DRAWS = 64


def strategy_key(layout, mode, with_log_density):
    """Key of the strategy "auto" remembered in a model's cache (``COMPILED[model]``).

    Remembered apart with and without log p: the per-draw functions differ.
    """
    return ("strategy", layout_key(layout), mode_key(mode), bool(with_log_density))


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
        key = (kind, layout_key(self.layout), mode_key(self.mode))
        if kind == "score":
            return cached(self.model, key,
                          lambda: build_score_function(self.model, self.layout, self.mode))
        return cached(self.model, key, lambda: build_per_draw_function(
            self.model, self.layout, self.mode, with_log_density=kind == "per-draw log p"))

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
        remembered = COMPILED.get(self.model, {}).get(self._strategy_key())
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
        COMPILED.setdefault(self.model, {})[self._strategy_key()] = chosen
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
    check_choice(strategy, "strategy", STRATEGIES)
    try:
        done = _ScorePass(model, layout, flat_draws, chunk_size, mode, strategy, progress,
                          with_log_density).run()
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


