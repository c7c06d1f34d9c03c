"""Stein variational gradient descent's iteration (Liu & Wang 2016) on (N, d) particles.

Each step moves every particle along phi(x) = (1/N) sum_j [k(x_j, x) s(x_j) + grad_{x_j}
k(x_j, x)], the direction that decreases the KL divergence to the target fastest in the
kernel's unit ball, with the median bandwidth, in coordinates fixed from the initial draws
(``svgd_coordinates``: per-coordinate scales, optionally whitened by an estimate of the
target's average Hessian) and an adaptive step (Adam, or the reference implementation's
AdaGrad with momentum). The KSD of the particles is recorded every few steps; the run stops
when its excess over the i.i.d. floor has stopped falling (``converged``). The kernel sums
are the Numba passes of ``steindiag.engine.svgd`` (O(N d) memory). See the Background page
of the docs.
"""

import contextlib
from dataclasses import dataclass

import numba as nb
import numpy as np

from steindiag.engine import svgd as _svgd_kernels
from steindiag.engine.local import stein_row_sums
from steindiag.engine.progress import CONSERVATIVE_FLOPS, make_progress
from steindiag.engine.threads import single_threaded_blas
from steindiag.kernels import IMQ

__all__ = ["ADAGRAD_ALPHA", "ADAGRAD_FUDGE", "ADAM_BETA1", "ADAM_BETA2", "ADAM_FUDGE",
           "HESSIAN_EIGEN_FLOOR", "KERNELS", "PRECONDITIONERS", "STEP_RULES",
           "SVGDCoordinates", "average_hessian", "converged", "median_bandwidth",
           "step_sizes", "svgd_coordinates", "svgd_loop", "threads_for", "SVGDRun",
           "run_svgd"]

# The base kernels of the SVGD update, by name.
KERNELS = {"rbf": _svgd_kernels.RBF, "imq": _svgd_kernels.IMQ}

STEP_RULES = ("adam", "adagrad")
PRECONDITIONERS = ("hessian", "standardize", "identity")

# AdaGrad with momentum, as in Liu & Wang's reference implementation of SVGD.
ADAGRAD_ALPHA = 0.9
ADAGRAD_FUDGE = 1e-6

# Adam (Kingma & Ba 2015), with their default constants.
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_FUDGE = 1e-8

# The eigenvalues of the estimated average Hessian are taken in absolute value and
# floored at this fraction of the largest: the whitened coordinates then stretch no
# direction by more than 100 times the stiffest one.
HESSIAN_EIGEN_FLOOR = 1e-4
# The Hessian is estimated only from more than this many particles per parameter (a
# regression with d + 1 coefficients per score component); with fewer, "standardize".
_HESSIAN_PARTICLES_PER_PARAMETER = 2


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


def average_hessian(z, scores):
    """-Cov(s, z) Cov(z)^-1, symmetrised: the average Hessian of -log p over the points.

    The least-squares fit s(z) ~ b - H (z - mean z) of the scores on the points: exact
    for a Gaussian target (s = -P (z - m) gives H = P whatever the points), and for
    Gaussian points the average Hessian over them (Stein's lemma). (N, d) arrays in;
    (d, d) out. Raises numpy.linalg.LinAlgError when the points are collinear.
    """
    n = z.shape[0]
    centred = z - z.mean(axis=0)
    scores_centred = scores - scores.mean(axis=0)
    covariance = centred.T @ centred / n
    cross = scores_centred.T @ centred / n  # cross[a, b] = Cov(s_a, z_b) = -(H Cov)[a, b]
    hessian = -np.linalg.solve(covariance, cross.T).T
    return 0.5 * (hessian + hessian.T)


@dataclass(frozen=True)
class SVGDCoordinates:
    """The fixed linear map x -> w in which SVGD runs: z = x / scale, then w = z @ basis *
    root (``basis`` orthogonal, ``root`` the square roots of the clipped eigenvalues of the
    average Hessian in z) when whitened, else w = z. ``kind``: the preconditioner used."""

    kind: str
    scale: np.ndarray
    basis: np.ndarray | None = None
    root: np.ndarray | None = None

    # The (N, d) x (d, d) products run on one BLAS thread: on 2 shared cores BLAS's own
    # threads made them 2-9 times slower (N = 4000, d = 23-89, load 20).

    def to_svgd(self, x):
        z = x / self.scale
        if self.basis is None:
            return z
        with single_threaded_blas():
            return (z @ self.basis) * self.root

    def from_svgd(self, w):
        if self.basis is None:
            return w * self.scale
        with single_threaded_blas():
            return ((w / self.root) @ self.basis.T) * self.scale

    def scores_to_svgd(self, scores):
        """grad_w log p from grad_x log p."""
        scores_z = scores * self.scale
        if self.basis is None:
            return scores_z
        with single_threaded_blas():
            return (scores_z @ self.basis) / self.root


def svgd_coordinates(preconditioner, draws, scores, scale):
    """:class:`SVGDCoordinates` for ``preconditioner`` ("hessian", "standardize",
    "identity") from the initial (N, d) draws and scores; ``scale`` the draws' robust
    per-coordinate scale. "hessian" falls back to "standardize" with fewer than 2 d + 2
    draws, collinear draws, or no positive curvature estimated."""
    n, d = draws.shape
    if preconditioner == "identity":
        return SVGDCoordinates(kind="identity", scale=np.ones(d))
    standardized = SVGDCoordinates(kind="standardize", scale=np.asarray(scale, dtype=float))
    if preconditioner == "standardize" or n <= _HESSIAN_PARTICLES_PER_PARAMETER * (d + 1):
        return standardized
    try:
        # One BLAS thread: the same bits whatever the thread count (and faster, see above).
        with single_threaded_blas():
            hessian = average_hessian(draws / scale, scores * scale)
            eigenvalues, basis = np.linalg.eigh(hessian)
    except np.linalg.LinAlgError:
        return standardized
    eigenvalues = np.abs(eigenvalues)
    largest = float(eigenvalues.max())
    if not (np.isfinite(largest) and largest > 0.0):
        return standardized
    root = np.sqrt(np.maximum(eigenvalues, HESSIAN_EIGEN_FLOOR * largest))
    return SVGDCoordinates(kind="hessian", scale=standardized.scale, basis=basis, root=root)


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


def converged(steps, ksd_values, tol, patience):
    """The stopping rule, checked at the last recorded step t: True when the lowest KSD
    recorded up to t is above (1 - ``tol``) times the lowest recorded up to t - ``patience``
    (it fell by less than a fraction ``tol`` over the last ``patience`` steps). Never before
    step ``patience``; never with ``tol`` None."""
    if tol is None or steps[-1] < patience:
        return False
    steps = np.asarray(steps)
    ksd_values = np.asarray(ksd_values)
    before = ksd_values[steps <= steps[-1] - patience].min()
    return bool(ksd_values.min() > (1.0 - tol) * before)


class _Adam:
    """Adam's step: eps m_t / (1 - b1^t) / (fudge + sqrt(v_t / (1 - b2^t))), elementwise,
    m and v the running means of phi and phi^2 (decays ADAM_BETA1, ADAM_BETA2)."""

    def __init__(self):
        self.first = self.second = None
        self.t = 0

    def move(self, phi, epsilon):
        self.t += 1
        if self.first is None:
            self.first, self.second = np.zeros_like(phi), np.zeros_like(phi)
        self.first = ADAM_BETA1 * self.first + (1.0 - ADAM_BETA1) * phi
        self.second = ADAM_BETA2 * self.second + (1.0 - ADAM_BETA2) * phi**2
        first = self.first / (1.0 - ADAM_BETA1**self.t)
        second = self.second / (1.0 - ADAM_BETA2**self.t)
        return epsilon * first / (ADAM_FUDGE + np.sqrt(second))


class _AdaGrad:
    """The reference implementation's step: G_0 = phi_0^2, G_t = alpha G_(t-1) + (1 - alpha)
    phi_t^2, eps phi_t / (fudge + sqrt(G_t)) elementwise."""

    def __init__(self):
        self.history = None

    def move(self, phi, epsilon):
        if self.history is None:
            self.history = phi**2
        else:
            self.history = ADAGRAD_ALPHA * self.history + (1.0 - ADAGRAD_ALPHA) * phi**2
        return epsilon * phi / (ADAGRAD_FUDGE + np.sqrt(self.history))


_STEPPERS = {"adam": _Adam, "adagrad": _AdaGrad}


@dataclass
class _Record:
    """The KSD curve so far, and the recorded step with the lowest KSD, with its particles
    and their scores."""

    steps: list
    ksd: list
    iid: list
    best_step: int = -1
    best_particles: np.ndarray | None = None
    best_scores: np.ndarray | None = None

    def add(self, step, value, floor, particles, scores):
        """Record a step; True if its KSD is the lowest so far."""
        self.steps.append(step)
        self.ksd.append(value)
        self.iid.append(floor)
        if self.best_step < 0 or value < min(self.ksd[:-1]):
            self.best_step, self.best_particles, self.best_scores = step, particles, scores
            return True
        return False


def svgd_loop(draws, draw_scores, score_fn, coordinates, ksd_pre, *, n_steps, step_size,
              step_rule, kind, bandwidth, method, ksd_every, tol, patience, backtrack, bar,
              pairs_per_step):
    """The SVGD iteration on (N, d) draws in the coordinates w of ``coordinates``.

    ``step_size``: an array of n_steps step sizes (see ``step_sizes``). The KSD and i.i.d.
    floor are recorded (on the particles x with their scores s) at step 0, every
    ``ksd_every`` steps and at the last step. After each record the run stops if
    ``converged``; with ``backtrack``, a recorded KSD above the lowest one sends the
    particles back to those of the lowest, restarts the step rule's averages and halves
    the step sizes from there on. Returns the final particles x, the ``_Record`` (the
    lowest-KSD particles kept as a copy: O(N d) memory), the bandwidths of the steps run,
    whether it stopped by the rule, and the number of backtracks.
    """
    n = draws.shape[0]
    particles, scores = draws, draw_scores
    w = coordinates.to_svgd(particles)
    stepper = _STEPPERS[step_rule]()
    record = _Record(steps=[], ksd=[], iid=[])
    bandwidths = []
    stopped = False
    shrink, backtracks = 1.0, 0
    for step in range(n_steps + 1):
        if step % ksd_every == 0 or step == n_steps:
            value, floor = _ksd_at(particles, scores, ksd_pre)
            lowest = record.add(step, value, floor, particles, scores)
            stopped = step < n_steps and converged(record.steps, record.ksd, tol, patience)
            if backtrack and not lowest and not stopped and step < n_steps:
                particles, scores = record.best_particles, record.best_scores
                w = coordinates.to_svgd(particles)
                stepper = _STEPPERS[step_rule]()
                shrink, backtracks = 0.5 * shrink, backtracks + 1
        if step == n_steps or stopped:
            break
        h = median_bandwidth(w) if bandwidth == "median" else float(bandwidth)
        if not h > 0:
            raise ValueError(
                f"more than half of the pairs of particles coincide after {step} SVGD "
                "step(s), so the median bandwidth is 0. Start from distinct draws or pass "
                "bandwidth=."
            )
        bandwidths.append(h)
        phi = _svgd_kernels.kernel_vector_sums(
            w, coordinates.scores_to_svgd(scores), 1.0 / h, kind=kind, method=method,
            combine=True,
        )
        phi /= n
        w = w + stepper.move(phi, shrink * step_size[step])
        _check_step(w, "particles", step + 1)
        particles = coordinates.from_svgd(w)
        scores = score_fn(particles)
        _check_step(scores, "scores", step + 1)
        if bar is not None:
            bar.update(pairs_per_step)
    return particles, record, np.asarray(bandwidths), stopped, backtracks


@dataclass(kw_only=True)
class SVGDRun:
    """What an SVGD run gives: ``moved`` (N, d) particles in the draws' coordinates; the
    KSD and i.i.d. floor at the ``record``ed steps; the ``bandwidths`` of every step run;
    ``steps_run`` and ``stop_reason`` ("converged" or "max_steps"); the ``returned_step``
    (the recorded step with the lowest KSD with ``keep="best"``, else the last) and its
    KSD; the ``coordinates`` SVGD ran in."""

    moved: np.ndarray
    ksd: list
    ksd_iid: list
    bandwidths: np.ndarray
    record: np.ndarray
    steps_run: int
    stop_reason: str
    backtracks: int
    returned_step: int
    ksd_returned: float
    coordinates: SVGDCoordinates


def run_svgd(draws, scores, score_fn, ksd_pre, *, preconditioner, n_steps, step_size,
             step_rule, step_decay, kind, bandwidth, method, ksd_every, tol, patience, keep,
             progress):
    """SVGD from the (N, d) ``draws`` with their ``scores``: :class:`SVGDRun`.

    In the coordinates of ``svgd_coordinates(preconditioner, ...)`` (the robust scales
    of ``ksd_pre``); the KSD of the particles every ``ksd_every`` steps and at the last.
    """
    n, d = draws.shape
    coordinates = svgd_coordinates(preconditioner, draws, scores, ksd_pre.scale)
    pairs_per_step = n * n + n * n / 2 / ksd_every
    expected = n_steps * pairs_per_step * (8 * d + 30) / CONSERVATIVE_FLOPS
    bar = make_progress(progress, n_steps * pairs_per_step, expected, desc="SVGD")
    try:
        with threads_for(n):
            particles, record, bandwidths, stopped, backtracks = svgd_loop(
                draws, scores, score_fn, coordinates, ksd_pre, n_steps=n_steps,
                step_size=step_sizes(step_size, step_decay, n_steps), step_rule=step_rule,
                kind=kind, bandwidth=bandwidth, method=method, ksd_every=ksd_every, tol=tol,
                patience=patience, backtrack=step_rule == "adam", bar=bar,
                pairs_per_step=pairs_per_step,
            )
    finally:
        if bar is not None:
            bar.close()
    last = record.steps[-1]
    returned_step = record.best_step if keep == "best" else last
    if keep == "best":
        particles = record.best_particles
    return SVGDRun(moved=particles, ksd=record.ksd, ksd_iid=record.iid, bandwidths=bandwidths,
                   record=np.asarray(record.steps), steps_run=int(last),
                   stop_reason="converged" if stopped else "max_steps", backtracks=backtracks,
                   returned_step=int(returned_step),
                   ksd_returned=float(record.ksd[record.steps.index(returned_step)]),
                   coordinates=coordinates)
