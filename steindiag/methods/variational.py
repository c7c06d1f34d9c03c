"""Stein variational gradient descent's iteration (Liu & Wang 2016) on (N, d) particles.

Each step moves every particle along phi(x) = (1/N) sum_j [k(x_j, x) s(x_j) + grad_{x_j}
k(x_j, x)], the direction that decreases the KL divergence to the target fastest in the
kernel's unit ball, with AdaGrad-with-momentum step sizes and the median bandwidth. The
kernel sums are the Numba passes of ``steindiag.engine.svgd`` (O(N d) memory). See the
Background page of the docs.
"""

import contextlib
from dataclasses import dataclass

import numba as nb
import numpy as np

from steindiag.engine import svgd as _svgd_kernels
from steindiag.engine.local import stein_row_sums
from steindiag.engine.progress import CONSERVATIVE_FLOPS, make_progress
from steindiag.kernels import IMQ

__all__ = ["ADAGRAD_ALPHA", "ADAGRAD_FUDGE", "KERNELS", "median_bandwidth", "step_sizes",
           "svgd_loop", "threads_for", "SVGDRun", "run_svgd"]

# The base kernels of the SVGD update, by name.
KERNELS = {"rbf": _svgd_kernels.RBF, "imq": _svgd_kernels.IMQ}


# AdaGrad with momentum, as in Liu & Wang's reference implementation of SVGD.
ADAGRAD_ALPHA = 0.9


ADAGRAD_FUDGE = 1e-6


# The median of pairwise squared distances is taken over at most this many evenly
# spaced particles (124,750 pairs: a relative precision of the median far below what
# matters for a bandwidth, at about 2 ms a step; all pairs of N particles would need
# O(N^2) memory and time).
_MEDIAN_SUBSAMPLE = 500


# Below this many particles each step runs on one thread. A step is one short parallel
# region after Python work (score, bandwidth); on a shared machine a woken thread that
# waits for a core stalls the step: measured on 2 shared cores (load ~3), N = 1000,
# d = 2: 7 ms a step on one thread, 34 ms on two (N = 200: 0.8 vs 32 ms).
_PARALLEL_MIN_PARTICLES = 2000


def median_bandwidth(points):
    """h = med^2 / log(N + 1), med^2 the median squared distance between distinct particles.

    Over all pairs for N <= 500 particles, else over the pairs of 500 evenly spaced
    ones (1 MB instead of O(N^2) memory). Returns 0.0 if the particles coincide.
    Liu & Wang's reference code takes the median over the whole N x N matrix, its N
    zeros on the diagonal included, a slightly lower quantile (by about 1/N); the
    median over distinct pairs does not depend on that artefact.
    """
    n = points.shape[0]
    sub = points
    if n > _MEDIAN_SUBSAMPLE:
        sub = points[np.linspace(0, n - 1, _MEDIAN_SUBSAMPLE).astype(np.int64)]
    m = sub.shape[0]
    squared = np.empty(m * (m - 1) // 2)
    _svgd_kernels.pairwise_squared_distances(np.ascontiguousarray(sub.T), squared)
    # The median as numpy.median defines it (mean of the two middle values if even).
    middle = (squared.size - 1) // 2
    if squared.size % 2:
        squared.partition(middle)
        med2 = float(squared[middle])
    else:
        squared.partition([middle, middle + 1])
        med2 = 0.5 * float(squared[middle] + squared[middle + 1])
    return med2 / np.log(n + 1.0)


@contextlib.contextmanager
def threads_for(n):
    """One Numba thread for the duration of a run with fewer than 2000 particles."""
    if n >= _PARALLEL_MIN_PARTICLES:
        yield
        return
    saved = nb.get_num_threads()
    nb.set_num_threads(1)
    try:
        yield
    finally:
        nb.set_num_threads(saved)


def _check_step(values, what, step):
    bad = ~np.all(np.isfinite(values), axis=1)
    if bad.any():
        raise ValueError(
            f"{what} are not finite at {int(bad.sum())} of {bad.size} particles after "
            f"{step} SVGD step(s) (first: particle {int(np.flatnonzero(bad)[0])}). The "
            "particles left the region where the target's score is finite: reduce "
            "step_size (or check the score)."
        )


def _ksd_at(draws, scores, pre):
    """Pooled KSD (sqrt of the V-statistic) and its i.i.d. floor for (N, d) points."""
    sums = stein_row_sums(draws[None], scores[None], kernel=IMQ(), preconditioner=pre)
    n = draws.shape[0]
    diagonal = float(sums.diagonal.sum())
    total = 2.0 * float(sums.row_all.sum()) + diagonal
    return np.sqrt(max(total, 0.0)) / n, np.sqrt(diagonal) / n


def step_sizes(step_size, step_decay, n_steps):
    """epsilon_t, t = 0 .. n_steps - 1: geometric from step_size to step_size / step_decay.

    ``step_decay`` None (or 1) keeps the step size constant.
    """
    if step_decay is None or n_steps == 1:
        return np.full(n_steps, float(step_size))
    return float(step_size) * float(step_decay) ** (-np.arange(n_steps) / (n_steps - 1.0))


def svgd_loop(particles, particle_scores, score_fn, scale, ksd_pre, *, n_steps, step_size,
               kind, bandwidth, method, record, bar, pairs_per_step):
    """The SVGD iteration on (N, d) particles in the coordinates z = x / scale.

    ``step_size``: a number, or an array of n_steps step sizes (see ``step_sizes``).
    Returns the final particles, the KSD and i.i.d. floor at the steps in ``record``
    (computed on x = z * scale with the scores s = s_z / scale), the bandwidths, and the
    recorded step with the lowest KSD with its particles (a copy made when a new lowest
    value is recorded: O(N d) memory).
    """
    step_size = np.broadcast_to(np.asarray(step_size, dtype=np.float64), (n_steps,))
    n = particles.shape[0]
    ksd_values, iid_values = [], []
    bandwidths = np.empty(n_steps)
    history = None
    record = set(record)
    best_step = best_index = best_particles = None
    for step in range(n_steps + 1):
        if step in record:
            value, floor = _ksd_at(particles * scale, particle_scores / scale, ksd_pre)
            ksd_values.append(value)
            iid_values.append(floor)
            if best_step is None or value < ksd_values[best_index]:
                best_step, best_index, best_particles = step, len(ksd_values) - 1, particles
        if step == n_steps:
            break
        h = median_bandwidth(particles) if bandwidth == "median" else float(bandwidth)
        if not h > 0:
            raise ValueError(
                f"more than half of the pairs of particles coincide after {step} SVGD "
                "step(s), so the median bandwidth is 0. Start from distinct draws or pass "
                "bandwidth=."
            )
        bandwidths[step] = h
        phi = _svgd_kernels.kernel_vector_sums(
            particles, particle_scores, 1.0 / h, kind=kind, method=method, combine=True,
        )
        phi /= n
        if history is None:
            history = phi**2
        else:
            history = ADAGRAD_ALPHA * history + (1.0 - ADAGRAD_ALPHA) * phi**2
        particles = particles + step_size[step] * phi / (ADAGRAD_FUDGE + np.sqrt(history))
        _check_step(particles, "particles", step + 1)
        particle_scores = score_fn(particles * scale) * scale
        _check_step(particle_scores, "scores", step + 1)
        if bar is not None:
            bar.update(pairs_per_step)
    return particles, ksd_values, iid_values, bandwidths, best_step, best_particles


@dataclass(kw_only=True)
class SVGDRun:
    """What an SVGD run gives: ``moved`` (N, d) particles in the draws' coordinates; the
    KSD and i.i.d. floor at the ``record``ed steps; the ``bandwidths`` of every step;
    the ``returned_step`` (the recorded step with the lowest KSD with ``keep="best"``,
    else the last) and its KSD; the coordinates' ``scale``."""

    moved: np.ndarray
    ksd: list
    ksd_iid: list
    bandwidths: np.ndarray
    record: np.ndarray
    returned_step: int
    ksd_returned: float
    scale: np.ndarray


def run_svgd(draws, scores, score_fn, ksd_pre, *, standardize, n_steps, step_size, step_decay,
             kind, bandwidth, method, ksd_every, keep, progress):
    """SVGD from the (N, d) ``draws`` with their ``scores``: :class:`SVGDRun`.

    In the coordinates z = x / scale (``standardize``: the robust scales of ``ksd_pre``,
    else 1); the KSD of the particles every ``ksd_every`` steps and after the last one.
    """
    n, d = draws.shape
    scale = ksd_pre.scale if standardize else np.ones(d)
    record = sorted({*range(0, n_steps + 1, ksd_every), n_steps})
    pairs_per_step = n * n + n * n / 2 * len(record) / n_steps
    expected = n_steps * pairs_per_step * (8 * d + 30) / CONSERVATIVE_FLOPS
    bar = make_progress(progress, n_steps * pairs_per_step, expected, desc="SVGD")
    try:
        with threads_for(n):
            particles, ksd_values, iid_values, bandwidths, best_step, best = svgd_loop(
                draws / scale, scores * scale, score_fn, scale, ksd_pre, n_steps=n_steps,
                step_size=step_sizes(step_size, step_decay, n_steps), kind=kind,
                bandwidth=bandwidth, method=method, record=record, bar=bar,
                pairs_per_step=pairs_per_step,
            )
    finally:
        if bar is not None:
            bar.close()
    returned_step = best_step if keep == "best" else n_steps
    if keep == "best":
        particles = best
    return SVGDRun(moved=particles * scale, ksd=ksd_values, ksd_iid=iid_values,
                   bandwidths=bandwidths, record=np.asarray(record),
                   returned_step=int(returned_step),
                   ksd_returned=float(ksd_values[record.index(returned_step)]), scale=scale)
