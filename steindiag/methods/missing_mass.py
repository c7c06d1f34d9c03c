"""Search for probability mass the draws never visited (NumPy and SciPy; no xarray, no PyMC).

KSD, like every score-based discrepancy, barely depends on the weights of well-separated
modes: draws that cover one mode of a two-mode target can have the KSD of exact draws.
This module looks for the missing mode directly:

    starts: widened draws (x -> mean + f (x - mean)) and broad starts (the mean plus
      f times a Gaussian vector scaled per coordinate by the draws' spread, floored at
      its median over coordinates: far in every direction, not only along the draws'
      principal axes), or given starts (prior draws), plus a few draws themselves
      -> L-BFGS on -log p from every start (gradient: the score, or central finite
         differences of log p when no score callable is given)   [scipy.optimize]
      -> end points merged into distinct modes; Hessian of -log p at each mode by central
         differences; saddles and flat directions dropped
      -> Laplace mass of each mode, relative to the sum over all modes found
      -> a mode is *visited* when it lies within the range of some chain, or the draws
         fill a tenth of what p puts in its central (50 %) Laplace ellipsoid
      -> a mode not visited by these rules is a *candidate*: short chains of a
         p-invariant kernel (preconditioned MALA, step adapted in a warm-up, then
         fixed) start at it; if their later points fall within the draws' range
         (whitened distance from the draws' mean at most the draws' own 99th
         percentile), the mode is joined to the draws: it is a point of high density
         (a funnel's neck) from which p's mass leads back to where the chains were,
         not mass they missed. Only candidates whose chains stay away are unvisited.
      -> unvisited relative mass M and the binomial probability that ESS effective draws
         from p would miss those cores as badly as the chains did: the p-value.

A mode alone is not evidence of mass: in d dimensions the typical set lies far from
every mode, and the joint mode of a hierarchical posterior sits in the funnel's neck,
where the density is high but the mass small; a Laplace approximation there says
nothing about the mass nearby. The short chains ask the question of mass by sampling.

log p (and the score) raising inside the model at a point (a parameter outside its
support, a failed solver) counts as log p = -inf there; a batch that raises is retried
point by point. The search's dense d x d work (Hessians, covariances) limits it to
d <= 1000 with a score callable and d <= 300 with finite differences; above that it is
skipped with the reason in the result (see :func:`missing_mass_skip_reason`).

See the background page of the docs ("Mass the draws never visited").
"""

import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg, optimize, special, stats

from steindiag._validate import check_rng
from steindiag.engine.forms import quadratic_forms
from steindiag.engine.threads import single_threaded_blas
from steindiag.stats.autocorrelation import integrated_autocorrelation_time
from steindiag.stats.bootstrap import bootstrap_pvalue, bootstrap_weights, flip_probability

__all__ = ["MissingMass", "MissingMassDetails", "missing_mass_skip_reason",
           "search_missing_mass"]

_MODE_SEARCH = "mode search"
_PERTURBED = "perturbed KSD test (Liu, Duncan & Gandy 2023)"
_METHODS = ("mode search", "perturbed ksd")
_SCORE = "score"
_FINITE_DIFFERENCES = "finite differences of log_density"

# Perturbed KSD test: T - 1 = 9 Metropolis-Hastings steps (their T = 10) with mode-jump
# proposals of jump scales theta (their spKSD sums over a grid in [0.5, 1.5]; theta = 1
# is left out: exact jumps between equal modes move a one-mode sample straight to p).
_PERTURB_STEPS = 9
_JUMP_SCALES = (0.5, 0.75, 1.25, 1.5)
_N_BOOTSTRAP = 500

# Defaults (see ``search_missing_mass``).
# Starts: 24 + 8 ceil(log2(d + 1)) (32 at d = 1, 80 at d = 89, 104 at d = 1000), half
# widened draws, half broad starts.
_N_STARTS_BASE = 24
_N_STARTS_PER_DOUBLING = 8
_N_DRAW_STARTS = 8
# Widened draws are pushed out from the mean by these factors, in turn: a mode 8
# standard deviations away from draws confined to one mode is reached from a start pushed
# out by 4-16 in about a third of the starts that point its way. Broad starts use the
# same factors times the per-coordinate spread floored at its median.
_WIDEN = (2.0, 4.0, 8.0, 16.0)
_MAX_ITERATIONS = 200
# Largest d searched: the Hessians, their Cholesky factors and the chains' covariances
# are dense d x d (O(d^3) each); with finite differences a Hessian costs 4 d^2 + 2 d
# log p evaluations.
_MAX_DIMENSION = {_SCORE: 1000, _FINITE_DIFFERENCES: 300}
# Draws inside this quantile of the chi-square ellipsoid of a mode's Laplace
# approximation count as visits of that mode: its half-mass core, which the tails of a
# neighbouring mode rarely reach (0.99 let 8 % of the draws of N(0, 1) count as visits
# of a mode at 4).
_VISIT_QUANTILE = 0.5
# A mode counts as visited when its ellipsoid holds at least this share of the draws p
# would put there (its relative mass x N / 2): a few draws straying from a
# neighbouring mode do not make a mode visited, and a Laplace mass wrong by a factor of
# several does not make a visited mode look empty.
_VISITED_SHARE = 0.1
# A mode within this quantile of a chain's own Mahalanobis distances (from the chain's
# mean, in the chain's covariance) lies within the range the chain explored: visited,
# whatever the Laplace approximation says (a skewed or banana-shaped posterior's
# Laplace core can hold few draws although the chains sample it well).
_RANGE_QUANTILE = 0.99
# End points closer than this (Mahalanobis distance in the Hessian's metric) are one mode.
_MERGE_DISTANCE = 1.0
# An end point is a mode only if a Newton step from it would raise log p by less than
# this (it is stationary up to the optimiser's tolerance).
_MAX_RISE = 0.05
# Central-difference steps, relative to the draws' spread per coordinate: for the
# Hessian (differences of the gradient) and for the gradient (differences of log p).
_FD_STEP = 1e-4
_FD_GRADIENT_STEP = 1e-5
# Short chains at each candidate mode: this many MALA chains of this many steps (the
# first half adapts the step towards acceptance 0.574, the second half is kept), at most
# this many candidates (largest Laplace mass first; the others are not counted).
_N_SHORT_CHAINS = 4
_SHORT_STEPS = 200
_MAX_CANDIDATES = 16
_TARGET_ACCEPTANCE = 0.574
# A candidate is joined to the draws when at least this share of its chains' kept
# points lies within the draws' range (whitened distance from the draws' mean at most
# the _RANGE_QUANTILE quantile of the draws' own distances).
_JOIN_SHARE = 0.5
# Points per call of log_density when many are needed at once (finite-difference
# Hessians): at most this many float64 numbers (16 MB) per batch.
_MAX_BATCH_NUMBERS = 2 ** 21


@dataclass(kw_only=True)
class MissingMassDetails:
    """What the mode search found.

    Attributes
    ----------
    modes : ndarray (mode, d)
        Distinct local maxima of log p found, highest log p first.
    log_density : ndarray (mode,)
        log p at each mode (up to the same constant as ``log_density``).
    log_mass : ndarray (mode,)
        Laplace approximation of the log mass near each mode:
        log p(m) + (d/2) log(2 pi) - (1/2) log det H, with H = -Hessian of log p at m.
    relative_mass : ndarray (mode,)
        exp(log_mass) normalised over the modes found (sums to 1).
    visits : ndarray of int (mode, chain)
        Draws of each chain inside each mode's central (50 %) Laplace ellipsoid.
    within_chain : ndarray of bool (mode, chain)
        Whether the mode lies within the range of each chain's draws: its Mahalanobis
        distance from the chain's mean, in the chain's own covariance, is at most the
        99th percentile of the chain's draws' distances.
    joined : ndarray of bool (mode,)
        Whether short p-invariant chains started at the mode joined the draws (see
        Notes of :func:`search_missing_mass`); False for modes visited by the other
        rules (no chains run) and for candidates beyond the first 16.
    joined_share : ndarray (mode,)
        Share of the short chains' kept points within the draws' range; NaN where no
        chains ran.
    visited : ndarray of bool (mode,)
        Whether the mode lies within the range of some chain, or the chains together
        put at least a tenth of the draws p would put in its central ellipsoid
        (relative mass x number of draws / 2) there, or short chains started at it
        joined the draws.
    unvisited_mass : float
        Share of p's mass in the modes not visited: the smaller of the sum of
        ``relative_mass`` over them and their Laplace mass against the mass of the
        region the draws cover plus theirs (``log_mass_draws``).
    log_mass_draws : float
        Reciprocal importance sampling estimate of the log of p's unnormalised mass
        over the region the draws cover (same constant as ``log_mass``); NaN when not
        needed (every mode visited).
    effective_draws : float
        Effective number of draws, sum over chains of draw / tau (tau: integrated
        autocorrelation time, largest over the coordinates).
    n_starts : int
        Optimiser runs.
    n_rejected : int
        Distinct end points that were not local maxima (Hessian not negative definite,
        not stationary, non-finite log p) and runs that failed.
    starts : str
        Where the starts came from ("given" or "widened draws and broad starts").
    start_distance : ndarray (start,)
        Distance of each start from the draws' mean in draw standard deviations (root
        mean square over coordinates of (x_k - mean_k) / sd_k).
    gradient : str
        What the optimiser and the short chains used as the gradient of log p:
        "score" or "finite differences of log_density".
    n_score : int
        Score evaluations made (points); 0 with finite differences.
    n_short_chains : int
        Short chains run (all candidate modes together).
    short_chain_acceptance : float
        Share of accepted MALA proposals after the warm-up; NaN when no chain ran.
    n_failed : int
        Points at which log_density (or the score) raised inside the model; counted as
        log p = -inf there.
    failure : str
        The first such error, "Type: message" ("" when none).
    skipped : str
        Why the search was not run ("" when it ran).
    statistic : float
        Perturbed KSD test only: the statistic, sum over jump scales (and the
        unperturbed draws) of N KSD^2_V, pooled over chains; NaN for the mode search.
    acceptance : float
        Perturbed KSD test only: the share of accepted mode jumps; NaN otherwise.
    """

    modes: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    relative_mass: np.ndarray
    visits: np.ndarray
    within_chain: np.ndarray
    visited: np.ndarray
    unvisited_mass: float
    effective_draws: float
    n_starts: int
    n_rejected: int
    starts: str
    n_score: int
    log_mass_draws: float = np.nan
    joined: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    joined_share: np.ndarray = field(default_factory=lambda: np.zeros(0))
    start_distance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gradient: str = _SCORE
    n_short_chains: int = 0
    short_chain_acceptance: float = np.nan
    n_failed: int = 0
    failure: str = ""
    skipped: str = ""
    statistic: float = np.nan
    acceptance: float = np.nan


@dataclass(kw_only=True)
class MissingMass:
    """Result of :func:`search_missing_mass`.

    Attributes
    ----------
    found : bool
        Mass the draws never visited was detected at level ``alpha``.
    pvalue : float
        Approximate p-value: the probability that ``effective_draws`` draws from p
        would miss the unvisited modes as badly as the chains did,
        (1 - unvisited_mass / 2)^effective_draws when no draw is near them.
        1 when every mode found was visited; NaN when the search was skipped.
    method : str
        The method used ("mode search").
    summary : str
        One sentence for a user (what was searched, what was found, and notes: the
        gradient used, points where log p raised, why the search was skipped).
    n_log_density : int
        log p evaluations made (points), for the cost accounting.
    skipped : str
        Why the search was not run ("" when it ran); ``found`` is then False.
    details : MissingMassDetails
    """

    found: bool
    pvalue: float
    method: str
    summary: str
    n_log_density: int
    skipped: str = ""
    details: MissingMassDetails = field(repr=False)


# Errors that are never "log p failed at this point": the user or the machine stopping.
_FATAL = (MemoryError, KeyboardInterrupt, SystemExit, GeneratorExit)


class _Counted:
    """log p and its gradient at batches of points: counted, guarded, shape-checked.

    An exception inside ``log_density`` or ``score`` (other than MemoryError and the
    like) is the model failing at a point: the batch is retried point by point and the
    points that still raise get log p = -inf and a NaN gradient; ``n_failed`` counts
    them and ``failure`` keeps the first error. Without a score callable, the gradient
    is the central difference of log p (one batched call on the 2 d shifted points of
    every point, with the points themselves).
    """

    def __init__(self, log_density, score, d, steps):
        self._log_density = log_density
        self._score = score
        self.d = d
        self.steps = steps                  # finite-difference steps per coordinate
        self.n_log_density = 0
        self.n_score = 0
        self.n_failed = 0
        self.failure = ""
        self.gradient_kind = _SCORE if score is not None else _FINITE_DIFFERENCES

    def _note(self, err):
        self.n_failed += 1
        if not self.failure:
            message = str(err).strip().splitlines()
            self.failure = f"{type(err).__name__}: {message[0] if message else ''}".strip()

    def _call(self, function, name, points, shapes):
        """``function(points)`` checked against ``shapes``; raising batches point by point."""
        try:
            values = function(points.copy())
        except _FATAL:
            raise
        except Exception as err:  # noqa: BLE001  (the model's error at some point)
            if points.shape[0] == 1:
                self._note(err)
                return None
            rows = [self._call(function, name, row[None], shapes) for row in points]
            return rows
        values = np.asarray(values, dtype=np.float64)
        n = points.shape[0]
        if values.shape not in shapes(n):
            raise ValueError(
                f"{name} returned an array of shape {values.shape} for a batch of points "
                f"of shape {points.shape}; expected {shapes(n)[0]}: {name} must be batched, "
                f"(n, d) -> {'(n,)' if name == 'log_density' else '(n, d)'}."
            )
        return values

    def log_density(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        n, out = points.shape[0], np.empty(points.shape[0])
        chunk = max(1, _MAX_BATCH_NUMBERS // self.d)
        for begin in range(0, n, chunk):
            block = points[begin:begin + chunk]
            self.n_log_density += block.shape[0]
            values = self._call(self._log_density, "log_density", block,
                                lambda k: ((k,), (k, 1)) if k > 1 else ((1,), (1, 1), ()))
            if isinstance(values, list):
                values = np.array([-np.inf if v is None else float(np.ravel(v)[0])
                                   for v in values])
            elif values is None:
                values = np.array([-np.inf])
            out[begin:begin + block.shape[0]] = values.reshape(-1)
        out[np.isnan(out)] = -np.inf
        return out

    def score(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        self.n_score += points.shape[0]
        values = self._call(self._score, "score", points,
                            lambda k: ((k, self.d),) if k > 1 else ((1, self.d), (self.d,)))
        if isinstance(values, list):
            values = np.array([np.full(self.d, np.nan) if v is None else np.ravel(v)
                               for v in values])
        elif values is None:
            values = np.full((1, self.d), np.nan)
        return values.reshape(points.shape)

    def value_and_gradient(self, points):
        """(log p (n,), gradient (n, d)) at ``points``."""
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        if self._score is not None:
            return self.log_density(points), self.score(points)
        n, d = points.shape
        shifts = np.diag(self.steps)
        shifted = np.concatenate([points[:, None, :], points[:, None, :] + shifts,
                                  points[:, None, :] - shifts], axis=1)   # (n, 2d + 1, d)
        values = self.log_density(shifted.reshape(-1, d)).reshape(n, 2 * d + 1)
        with np.errstate(invalid="ignore"):
            gradient = (values[:, 1:d + 1] - values[:, d + 1:]) / (2.0 * self.steps)
        gradient[~np.isfinite(gradient)] = np.nan
        return values[:, 0], gradient

    def gradient(self, points):
        return self.value_and_gradient(points)[1]


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer; got {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value}.")
    return int(value)


def _default_n_starts(d):
    return _N_STARTS_BASE + _N_STARTS_PER_DOUBLING * int(np.ceil(np.log2(d + 1)))


def missing_mass_skip_reason(d, *, score=True, max_dimension=None):
    """Why :func:`search_missing_mass` would skip draws of dimension ``d`` ("" if it runs).

    Parameters
    ----------
    d : int
        Number of parameters (the draws' last axis).
    score : bool, default True
        Whether a score callable will be given (False: finite differences of log p).
    max_dimension : int, optional
        The search's ``max_dimension`` option (default 1000 with a score, 300 with
        finite differences).

    Returns
    -------
    str
        "" when the search would run; otherwise the reason, one sentence.

    Examples
    --------
    >>> from steindiag.methods.missing_mass import missing_mass_skip_reason
    >>> missing_mass_skip_reason(89)
    ''
    >>> missing_mass_skip_reason(5000)[:40]
    'the search for unvisited mass was skippe'
    """
    kind = _SCORE if score else _FINITE_DIFFERENCES
    limit = _MAX_DIMENSION[kind] if max_dimension is None else int(max_dimension)
    if d <= limit:
        return ""
    cost = ("its Hessians, their factorisations and the chains' covariances are dense "
            f"d x d (O(d^3) each)" + ("" if score else
                                       "; with finite differences a Hessian costs "
                                       "4 d^2 log p evaluations"))
    return (f"the search for unvisited mass was skipped: d = {d} is above "
            f"max_dimension = {limit} ({cost}); pass max_dimension= to run it anyway")


def _search_iv(draws, scores, log_density, score, kernel, preconditioner, rng, alpha,
               starts, options):
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 3 or draws.shape[1] < 2 or draws.shape[2] < 1:
        raise ValueError(
            f"draws must be a (chain, draw, d) array with at least 2 draws; got shape "
            f"{draws.shape}."
        )
    if not np.all(np.isfinite(draws)):
        raise ValueError("draws must be finite.")
    if scores is not None and np.shape(scores) != draws.shape:
        raise ValueError(
            f"scores must have the shape of draws {draws.shape}; got {np.shape(scores)}."
        )
    if not callable(log_density):
        raise TypeError(
            "log_density must be a callable (n, d) -> (n,) giving log p up to a constant; "
            f"got {type(log_density).__name__}."
        )
    if score is not None and not callable(score):
        raise TypeError(
            "score must be a callable (n, d) -> (n, d), or None (finite differences of "
            f"log_density); got {type(score).__name__}."
        )
    rng = check_rng(rng)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1); got {alpha!r}.")
    d = draws.shape[2]
    if starts is not None:
        starts = np.asarray(starts, dtype=np.float64)
        if starts.ndim != 2 or starts.shape[1] != d or starts.shape[0] < 1:
            raise ValueError(
                f"starts must be an (n_starts, d) array with d = {d}; got shape {starts.shape}."
            )
        if not np.all(np.isfinite(starts)):
            raise ValueError("starts must be finite.")
    allowed = {"method", "n_starts", "n_draw_starts", "widen", "max_iterations",
               "n_bootstrap", "max_dimension", "n_short_chains", "short_steps"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"unknown option(s) {unknown} for the mode search; allowed: {sorted(allowed)}."
        )
    n_starts = _positive_int(options.get("n_starts", _default_n_starts(d)), "n_starts")
    n_draw_starts = options.get("n_draw_starts", _N_DRAW_STARTS)
    if isinstance(n_draw_starts, bool) or not isinstance(n_draw_starts, numbers.Integral) \
            or n_draw_starts < 0:
        raise ValueError(f"n_draw_starts must be an integer >= 0; got {n_draw_starts!r}.")
    widen = np.atleast_1d(np.asarray(options.get("widen", _WIDEN), dtype=np.float64))
    if widen.ndim != 1 or widen.size == 0 or not np.all(np.isfinite(widen)) \
            or np.any(widen < 1):
        raise ValueError(f"widen must be one or more factors >= 1; got {options.get('widen')!r}.")
    max_iterations = _positive_int(options.get("max_iterations", _MAX_ITERATIONS),
                                   "max_iterations")
    method = options.get("method", "mode search")
    if not isinstance(method, str) or method not in _METHODS:
        raise ValueError(f"method must be one of {list(_METHODS)}; got {method!r}.")
    n_bootstrap = _positive_int(options.get("n_bootstrap", _N_BOOTSTRAP), "n_bootstrap")
    max_dimension = options.get("max_dimension")
    if max_dimension is not None:
        max_dimension = _positive_int(max_dimension, "max_dimension")
    n_short = _positive_int(options.get("n_short_chains", _N_SHORT_CHAINS), "n_short_chains")
    short_steps = _positive_int(options.get("short_steps", _SHORT_STEPS), "short_steps")
    if short_steps < 2:
        raise ValueError(f"short_steps must be at least 2; got {short_steps}.")
    if method == "perturbed ksd":
        if scores is None:
            raise ValueError("method='perturbed ksd' needs the scores of the draws.")
        if not np.all(np.isfinite(np.asarray(scores, dtype=np.float64))):
            raise ValueError("scores must be finite.")
        if score is None:
            raise ValueError("method='perturbed ksd' needs score, a callable: it "
                             "evaluates the score at the moved draws.")
        if not hasattr(kernel, "numba_kind"):
            raise TypeError("method='perturbed ksd' needs kernel, a steindiag.kernels kernel "
                            f"object; got {type(kernel).__name__}.")
        if not hasattr(preconditioner, "to_kernel_coordinates"):
            raise TypeError("method='perturbed ksd' needs preconditioner, resolved from the "
                            "draws (steindiag.kernels.preconditioner.make_preconditioner); "
                            f"got {type(preconditioner).__name__}.")
    return (draws, rng, float(alpha), starts, n_starts, int(n_draw_starts), widen,
            max_iterations, method, n_bootstrap, max_dimension, n_short, short_steps)


def _spread(flat):
    """Per-coordinate sd of the draws, zeros and NaNs replaced by the median (or 1)."""
    spread = flat.std(axis=0)
    good = spread > 0
    spread[~good] = np.median(spread[good]) if good.any() else 1.0
    return spread


def _starting_points(flat, rng, starts, n_starts, n_draw_starts, widen, spread):
    """Overdispersed starts plus a few draws (so the visited modes are found too).

    Half the overdispersed starts are widened draws, mean + f (x - mean); the other
    half are broad, mean + f * max(sd_k, median sd) * z_k with z standard normal: far in
    every direction, also those along which the draws barely vary.
    """
    picks = flat[rng.choice(flat.shape[0], size=min(n_draw_starts, flat.shape[0]),
                            replace=False)]
    if starts is not None:
        return np.concatenate([starts, picks]), "given"
    centre = flat.mean(axis=0)
    n_widened = n_starts // 2
    n_broad = n_starts - n_widened
    chosen = flat[rng.choice(flat.shape[0], size=n_widened,
                             replace=n_widened > flat.shape[0])]
    factors = np.resize(widen, n_widened)[:, None]
    widened = centre + factors * (chosen - centre)
    floored = np.maximum(spread, np.median(spread))
    broad = centre + np.resize(widen, n_broad)[:, None] * floored \
        * rng.standard_normal((n_broad, flat.shape[1]))
    return (np.concatenate([widened, broad, picks]), "widened draws and broad starts")


def _maximise(counted, start, max_iterations):
    """L-BFGS on -log p from ``start``: end point, or None if log p is not finite there."""

    def objective(x):
        value, gradient = counted.value_and_gradient(x[None])
        value, gradient = value[0], gradient[0]
        if not np.isfinite(value) or not np.all(np.isfinite(gradient)):
            # Outside where log p is finite: a large value the line search backs off from.
            return np.inf, np.zeros_like(x)
        return -value, -gradient

    # One BLAS thread: L-BFGS-B's small dense products only lose time to thread start-up.
    with np.errstate(all="ignore"), single_threaded_blas():
        result = optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                   options={"maxiter": max_iterations})
    if not np.isfinite(result.fun) or not np.all(np.isfinite(result.x)):
        return None
    return result.x, -float(result.fun), -np.asarray(result.jac, dtype=np.float64)


def _hessian(counted, point, scale):
    """-Hessian of log p at ``point`` by central differences of the gradient.

    2 d gradients: 2 d scores, or 2 d (2 d + 1) log p values with finite differences.
    """
    d = point.shape[0]
    steps = _FD_STEP * scale
    shifts = np.diag(steps)
    gradients = counted.gradient(np.concatenate([point + shifts, point - shifts]))
    jacobian = (gradients[:d] - gradients[d:]) / (2.0 * steps[:, None])  # row k: d s / d x_k
    return -0.5 * (jacobian + jacobian.T)


def _as_mode(counted, point, gradient, scale):
    """(precision H, log det H) at a local maximum, or None.

    None for a saddle or a flat direction (H not positive definite), non-finite values,
    or a point that is not stationary: half the Newton decrement, s^T H^-1 s / 2 (the
    rise of log p a Newton step would still make), above ``_MAX_RISE`` (an optimiser
    that ran out of iterations, or climbs a density that grows without bound, as in
    the neck of a funnel).
    """
    precision = _hessian(counted, point, scale)
    if not np.all(np.isfinite(precision)) or not np.all(np.isfinite(gradient)):
        return None
    try:
        factor = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return None
    whitened = np.linalg.solve(factor, gradient)
    if 0.5 * whitened @ whitened > _MAX_RISE:
        return None
    log_det = 2.0 * np.sum(np.log(np.diag(factor)))
    return precision, log_det


def _mahalanobis_sq(points, centre, precision):
    diff = points - centre
    return np.einsum("ij,jk,ik->i", diff, precision, diff)


def _within_chains(draws, points):
    """(point, chain): point within the chain's range (Mahalanobis depth, own covariance).

    Within when its distance from the chain's mean is at most the ``_RANGE_QUANTILE``
    quantile of the chain's own draws' distances; the covariance's eigenvalues are
    floored at 1e-12 of the largest variance of all draws (a chain stuck in a subspace,
    or at one point: then only that point is within).
    """
    n_chain, _, d = draws.shape
    floor = 1e-12 * max(float(np.var(draws.reshape(-1, d), axis=0).max()), 1e-300)
    within = np.zeros((points.shape[0], n_chain), dtype=bool)
    for ch in range(n_chain):
        centred = draws[ch] - draws[ch].mean(axis=0)
        values, vectors = np.linalg.eigh(np.atleast_2d(np.cov(centred, rowvar=False)))
        whiten = vectors / np.sqrt(np.maximum(values, floor))
        with np.errstate(over="ignore"):   # inf: far outside a chain that never moved
            radius = np.quantile(np.linalg.norm(centred @ whiten, axis=1), _RANGE_QUANTILE)
            distance = np.linalg.norm((points - draws[ch].mean(axis=0)) @ whiten, axis=1)
        within[:, ch] = distance <= radius
    return within


def _effective_draws(draws):
    n_chain, n_draw, _ = draws.shape
    return float(sum(n_draw / integrated_autocorrelation_time(draws[ch]).max()
                     for ch in range(n_chain)))


def _deficit_pvalue(count, n_total, effective, mass):
    """P(at most ``count`` of ``effective`` draws from p land in the unvisited cores).

    The cores hold ``_VISIT_QUANTILE * mass`` of p. The observed count is scaled to the
    effective number of draws (count * ESS / N); a binomial tail, (1 - mass / 2)^ESS
    when no draw landed there.
    """
    if mass <= 0.0:
        return 1.0
    n_eff = max(int(np.floor(effective)), 1)
    scaled = int(np.floor(count * effective / n_total))
    return float(stats.binom.cdf(scaled, n_eff, min(_VISIT_QUANTILE * mass, 1.0)))


def _format_point(point, digits=3):
    shown = ", ".join(f"{value:.{digits}g}" for value in point[:6])
    return f"({shown}{', ...' if point.shape[0] > 6 else ''})"


def _draws_metric(flat):
    """Pooled mean, Cholesky factor of the pooled covariance (shrunk towards its diagonal
    by d / (N + d), so that it is positive definite when N <= d) and the draws' own
    _RANGE_QUANTILE quantile of whitened distances from the mean."""
    n, d = flat.shape
    centre = flat.mean(axis=0)
    centred = flat - centre
    covariance = np.atleast_2d(centred.T @ centred / max(n - 1, 1))
    diagonal = np.diag(covariance).copy()
    diagonal[~(diagonal > 0)] = max(float(np.max(diagonal, initial=0.0)), 1.0)
    shrink = d / (n + d)
    covariance = (1.0 - shrink) * covariance
    covariance[np.diag_indices(d)] += shrink * diagonal
    covariance[np.diag_indices(d)] += 1e-12 * diagonal
    factor = np.linalg.cholesky(covariance)
    radius = np.quantile(_whitened_norm(flat, centre, factor), _RANGE_QUANTILE)
    return centre, factor, float(radius)


def _whitened_norm(points, centre, factor):
    return np.linalg.norm(linalg.solve_triangular(factor, (points - centre).T, lower=True),
                          axis=0)


def _short_chains(counted, centres, factor, rng, n_per_mode, n_steps):
    """Preconditioned MALA chains, ``n_per_mode`` from each centre, all in one batch.

    Proposal in the draws' whitened coordinates u = L^-1 x (L: ``factor``):
    u' = u + (h / 2) L^T g(x) + sqrt(h) xi, accepted with the Metropolis-Hastings
    probability of MALA, so each chain leaves p invariant once its step h is fixed.
    During the first half h adapts per chain towards acceptance 0.574 (Robbins-Monro on
    log h); the second half keeps h and its points are returned. A proposal where log p
    or its gradient is not finite is rejected. One batched evaluation of log p and its
    gradient per step.

    Returns the kept points, shape (centre, chain, step, d), and the acceptance of the
    kept steps.
    """
    n_centres, d = centres.shape
    x = np.repeat(centres, n_per_mode, axis=0)
    n = x.shape[0]
    logp, grad = counted.value_and_gradient(x)
    grad_u = grad @ factor
    step = np.full(n, 2.0 * d ** (-1.0 / 3.0))
    warm = n_steps // 2
    kept = np.empty((n_steps - warm, n, d))
    accepted = 0
    for t in range(n_steps):
        noise = rng.standard_normal((n, d))
        with np.errstate(all="ignore"):
            move_u = 0.5 * step[:, None] * grad_u + np.sqrt(step)[:, None] * noise
            proposal = x + move_u @ factor.T
            logp_new, grad_new = counted.value_and_gradient(proposal)
            grad_u_new = grad_new @ factor
            back = -move_u - 0.5 * step[:, None] * grad_u_new
            log_ratio = (logp_new - logp - 0.5 * np.sum(back ** 2, axis=1) / step
                         + 0.5 * np.sum(noise ** 2, axis=1))
        good = np.isfinite(log_ratio) & np.all(np.isfinite(grad_u_new), axis=1)
        log_ratio = np.where(good, log_ratio, -np.inf)
        accept_prob = np.exp(np.minimum(log_ratio, 0.0))
        accept = rng.random(n) < accept_prob
        x[accept], logp[accept], grad_u[accept] = (proposal[accept], logp_new[accept],
                                                   grad_u_new[accept])
        if t < warm:
            step *= np.exp((accept_prob - _TARGET_ACCEPTANCE) * 2.0 / (t + 1) ** 0.6)
        else:
            kept[t - warm] = x
            accepted += int(accept.sum())
    points = kept.transpose(1, 0, 2).reshape(n_centres, n_per_mode, n_steps - warm, d)
    return points, accepted / (n * (n_steps - warm))


# Draws used for the reciprocal importance sampling estimate of the draws' mass.
_N_MASS_DRAWS = 1000


def _log_mass_of_draws(counted, flat, rng):
    """log of p's unnormalised mass over the region the draws cover.

    Reciprocal importance sampling (Gelfand & Dey 1994): for draws x_i from p (here:
    from the part of p the chains visited) and a normalised density g on that region,
    1 / Z = E_p[g(x) / p~(x)]. g is the Gaussian with the draws' mean and (shrunk)
    covariance; at most 1000 draws are used. NaN if log p is not finite at any of them.
    """
    n, d = flat.shape
    rows = flat if n <= _N_MASS_DRAWS else flat[rng.choice(n, _N_MASS_DRAWS, replace=False)]
    centre, factor, _ = _draws_metric(flat)
    log_p = counted.log_density(rows)
    good = np.isfinite(log_p)
    if not good.any():
        return np.nan
    log_g = (-0.5 * _whitened_norm(rows[good], centre, factor) ** 2
             - 0.5 * d * np.log(2 * np.pi) - np.sum(np.log(np.diag(factor))))
    return float(np.log(good.sum()) - special.logsumexp(log_g - log_p[good]))


def _joined(counted, candidates, flat, rng, n_per_mode, n_steps):
    """(joined share per candidate, acceptance): short chains from each candidate mode.

    The share is that of the chains' kept points whose whitened distance from the draws'
    mean is at most the draws' own 99th percentile: near 1 when the chains joined the
    draws, near 0 when they stayed apart.
    """
    centre, factor, radius = _draws_metric(flat)
    points, acceptance = _short_chains(counted, candidates, factor, rng, n_per_mode, n_steps)
    d = flat.shape[1]
    inside = _whitened_norm(points.reshape(-1, d), centre, factor) <= radius
    return inside.reshape(points.shape[:-1]).mean(axis=(1, 2)), acceptance


def search_missing_mass(draws, scores, *, log_density, score, kernel, preconditioner, rng,
                        alpha=0.05, starts=None, **options):
    """Look for regions of p's mass that the draws never visited.

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d)
        The draws and their scores, in the space the score lives in (the unconstrained
        space for a PyMC model). The mode search only checks the shape of ``scores``
        (it may be None); the perturbed KSD test uses them.
    log_density : callable
        (n, d) -> (n,): log p up to a constant, batched. An exception it raises at a
        point (a parameter outside its support, a failed solver) counts as log p = -inf
        there (a batch that raises is retried point by point); a result of another
        shape (one number for the whole batch) is a ValueError.
    score : callable or None
        (n, d) -> (n, d): grad log p, batched. None: the gradient is taken by central
        finite differences of ``log_density`` (one batched call on the 2 d shifted points
        and the point itself, steps 1e-5 of the draws' sd per coordinate).
    kernel, preconditioner : objects
        The kernel (:mod:`steindiag.kernels`) and resolved preconditioner of the
        caller's KSD; only the perturbed KSD test uses them.
    rng : int, numpy.random.Generator or None
        Source of the starts and of the short chains.
    alpha : float, default 0.05
        Level: ``found`` is ``pvalue < alpha``.
    starts : ndarray (n_starts, d), optional
        Overdispersed starting points (for a PyMC model, prior draws mapped to the
        unconstrained space: ``steindiag.inputs._pymc_prior.prior_starts``). Default:
        half widened draws, x -> mean + f (x - mean), half broad starts,
        mean + f max(sd_k, median sd) z_k with z standard normal, f cycling through
        ``widen``.
    **options
        ``method``: ``"mode search"`` (default) or ``"perturbed ksd"`` (see Notes);
        ``n_bootstrap`` (default 500): bootstrap replicates of the perturbed KSD test;
        ``n_starts`` (default 24 + 8 ceil(log2(d + 1)): 32 at d = 1, 80 at d = 89):
        overdispersed starts, when ``starts`` is None; ``n_draw_starts`` (default 8):
        draws used as starts as well, so that the modes the chains did visit are found
        and weighed; ``widen`` (default (2, 4, 8, 16)): the widening factors;
        ``max_iterations`` (default 200): L-BFGS iterations per start;
        ``n_short_chains`` (default 4) and ``short_steps`` (default 200): the short
        chains run at each candidate mode; ``max_dimension`` (default 1000 with a score,
        300 with finite differences): above it the search is skipped.

    Returns
    -------
    MissingMass
        ``found``, ``pvalue``, ``method`` ("mode search" or "perturbed KSD test (Liu,
        Duncan & Gandy 2023)"), ``summary`` (one sentence, with what was searched and
        notes), ``n_log_density`` (points at which log p was evaluated), ``skipped``
        (why the search did not run, "" when it ran) and ``details``
        (:class:`MissingMassDetails`: the modes, their Laplace masses, visits per chain,
        the short chains' verdicts).

    Notes
    -----
    From every start, L-BFGS maximises log p. End points closer than 1 in the
    Mahalanobis distance of their Hessians are merged; end points where -Hessian
    (central differences of the gradient) is not positive definite, or where a Newton
    step would still raise log p by more than 0.05 (not stationary: the optimiser
    stopped early, or log p grows without bound, as in a funnel's neck), are not modes
    and are dropped. Each mode m gets the Laplace mass
    ``exp(log p(m)) (2 pi)^(d/2) det(H)^(-1/2)``, normalised over the modes found (its
    relative mass w). Under p, a share w / 2 of the N draws would fall in the mode's
    central Laplace ellipsoid ``(x - m)^T H (x - m) <= chi2_d(0.5)`` (its half-mass
    core). The mode counts as visited when it lies within the range of some chain (its
    Mahalanobis distance from the chain's mean, in the chain's covariance, is at most
    the 99th percentile of the chain's own draws' distances), or when the chains put at
    least a tenth of the expected share in its core.

    A mode is not mass. In d dimensions the typical set lies far from every mode, and
    the joint mode of a hierarchical posterior sits in the funnel's neck, where the
    density is high and the mass small: such a mode fails both rules above although the
    chains sampled everything. So every mode the rules leave unvisited (the 16 with the
    largest Laplace mass) is tested by sampling: 4 chains of preconditioned MALA (the
    draws' covariance, shrunk towards its diagonal by d / (N + d), as the proposal's
    metric) start at it and make 200 steps, the first 100 adapting the step size
    towards acceptance 0.574, the last 100 with the step fixed (p-invariant
    Metropolis-Hastings). If at least half of their last 100 points lie within the
    draws' range (whitened distance from the draws' mean at most the 99th percentile
    of the draws' own distances), the mode is *joined*: p's mass leads from it to where
    the chains were, and it counts as visited. Only modes whose chains stay apart
    count as unvisited: a separated mode holds its chains, a funnel's neck releases
    them into the typical set. A neck too deep for the short chains to leave is caught
    by a second check: the unvisited share is also the unvisited modes' Laplace mass
    against the mass of the region the draws cover (reciprocal importance sampling,
    Gelfand & Dey 1994), and the smaller of the two shares counts. (Measured: no false
    alarm in 70 searches on healthy NUTS runs of three non-centred hierarchical models,
    and power 19-20 of 20 on separated modes; see ``benchmarks/results/missing_mass.md``.)

    With M the relative mass of the unvisited modes, C the draws in their cores and ESS
    the draws' effective number (sum over chains of draw / tau), the p-value is the
    binomial probability P(Bin(ESS, M / 2) <= C ESS / N), which is ``(1 - M / 2)^ESS``
    when C = 0. It is approximate twice over: the Laplace masses are exact only for
    Gaussian modes, and the mass of modes no start reached is not counted (the search
    can miss a mode). Draws that cover every mode give M = 0 and p = 1, whatever their
    mixing proportions: this search answers "was some region of mass never visited",
    not "are the proportions right".

    ``method="perturbed ksd"`` (Liu, Duncan & Gandy 2023, their spKSD): with the modes
    found as above, each draw makes 9 Metropolis-Hastings steps whose proposal jumps
    from a mode m_i to another m_j, x' = theta m_j + S_j^-1 S_i (x - theta m_i) with
    S = H^(1/2), accepted with probability min(1, p(x') det S_i / (p(x) det S_j)): a move
    that leaves p invariant, so draws from p stay draws from p. For theta in (0.5,
    0.75, 1.25, 1.5) the moved samples land off-centre in the modes the chains missed,
    where KSD sees the wrong shape. The statistic, N KSD^2_V of the draws plus that of
    each moved sample (pooled over chains), is tested with one wild bootstrap whose
    weight of draw i also weighs its moved copies (as in :func:`steindiag.ksd_test`).
    Unlike the mode search it also reacts to visited modes held in the wrong
    proportions; with fewer than two modes found it is the plain KSD test.

    Errors of the model: log p raising at a point counts as -inf there (the optimiser
    backs off, the short chains reject the proposal); the summary says at how many
    points and with which error. If log p raises at every draw tried at the start, the
    error is raised (a log density that fails where the draws are is a bug, not a
    region of the model).

    Cost: each start costs one L-BFGS run, typically 10-60 evaluations of log p and its
    gradient at one point (with finite differences, each gradient is one call of
    ``log_density`` on 2 d + 1 points); each distinct end point costs 2 d gradients for
    the Hessian and an O(d^3) Cholesky factorisation; the short chains cost 200 batched
    evaluations at (candidates x 4) points; the chains' range, one d x d
    eigendecomposition per chain. ``n_log_density`` counts the log p points
    (``details.n_score`` the scores). No kernel matrix; memory O(N d + d^2). Above
    ``max_dimension`` (1000 with a score, 300 with finite differences) the search is
    skipped and ``skipped`` says why (:func:`missing_mass_skip_reason` asks in
    advance). The perturbed KSD test adds N + 4 x 9 N log p evaluations, 4 N scores and
    5 tiled passes of the bootstrap's quadratic forms, O(N^2 (d + B)) time each, O(N B)
    memory.

    References
    ----------
    Wenliang & Kanagawa (2020), Blindness of score-based methods to isolated components
    and mixing proportions.
    Liu, Duncan & Gandy (2023), Using perturbation to improve goodness-of-fit tests based
    on kernelized Stein discrepancy, ICML (mode finding from dispersed starts).
    Roberts & Tweedie (1996), Exponential convergence of Langevin distributions and their
    discrete approximations, Bernoulli (MALA).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.special import logsumexp
    >>> from steindiag.methods.missing_mass import search_missing_mass
    >>> def log_p(x):  # 0.5 N(-4, 1) + 0.5 N(4, 1)
    ...     return logsumexp([-0.5 * (x[:, 0] + 4) ** 2, -0.5 * (x[:, 0] - 4) ** 2], axis=0)
    >>> def score(x):
    ...     w = 1 / (1 + np.exp(-8 * x))  # posterior weight of the right mode
    ...     return -(x + 4) + 8 * w
    >>> rng = np.random.default_rng(0)
    >>> left = rng.normal(-4, 1, size=(4, 500, 1))   # only the left mode
    >>> res = search_missing_mass(left, None, log_density=log_p, score=score,
    ...                           kernel=None, preconditioner=None, rng=1)
    >>> res.found, np.sort(res.details.modes.round(1).ravel()).tolist()
    (True, [-4.0, 4.0])
    >>> search_missing_mass(left, None, log_density=log_p, score=None, kernel=None,
    ...                     preconditioner=None, rng=1).details.gradient
    'finite differences of log_density'
    """
    (draws, rng, alpha, starts, n_starts, n_draw_starts, widen, max_iterations, method,
     n_bootstrap, max_dimension, n_short, short_steps) = _search_iv(
        draws, scores, log_density, score, kernel, preconditioner, rng, alpha, starts,
        options)
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    spread = _spread(flat)
    counted = _Counted(log_density, score, d, _FD_GRADIENT_STEP * spread)
    skipped = missing_mass_skip_reason(d, score=score is not None,
                                       max_dimension=max_dimension)
    if skipped:
        return _skipped_result(d, n_chain, counted, skipped)
    points, starts_from = _starting_points(flat, rng, starts, n_starts, n_draw_starts,
                                           widen, spread)
    _check_at_draws(counted, flat, rng)
    start_distance = np.sqrt(np.mean(((points - flat.mean(axis=0)) / spread) ** 2, axis=1))

    ends = []
    for start in points:
        end = _maximise(counted, start, max_iterations)
        if end is not None:
            ends.append(end)
    ends.sort(key=lambda item: -item[1])
    modes, n_rejected = [], len(points) - len(ends)
    for point, value, gradient in ends:
        same = False
        for mode in modes:
            if _mahalanobis_sq(point[None], mode["point"], mode["precision"])[0] \
                    < _MERGE_DISTANCE ** 2:
                same = True
                break
        if same:
            continue
        local = _as_mode(counted, point, gradient, spread)
        if local is None:
            n_rejected += 1
            continue
        precision, log_det = local
        modes.append({"point": point, "log_density": value, "precision": precision,
                      "log_mass": value + 0.5 * d * np.log(2 * np.pi) - 0.5 * log_det})

    radius_sq = stats.chi2.ppf(_VISIT_QUANTILE, d)
    visits = np.zeros((len(modes), n_chain), dtype=np.int64)
    for k, mode in enumerate(modes):
        inside = _mahalanobis_sq(flat, mode["point"], mode["precision"]) <= radius_sq
        visits[k] = inside.reshape(n_chain, n_draw).sum(axis=1)
    log_mass = np.array([mode["log_mass"] for mode in modes])
    relative = np.exp(log_mass - special.logsumexp(log_mass)) if modes else np.zeros(0)
    mode_points = np.array([mode["point"] for mode in modes]).reshape(-1, d)
    # Visited: within some chain's range, or at least _VISITED_SHARE of the draws p
    # would put in the mode's core.
    within = _within_chains(draws, mode_points)
    expected = _VISIT_QUANTILE * relative * flat.shape[0]
    visited = within.any(axis=1) | (visits.sum(axis=1) >= _VISITED_SHARE * expected)
    # The candidates left: short p-invariant chains from each; joined ones are visited.
    joined = np.zeros(len(modes), dtype=bool)
    joined_share = np.full(len(modes), np.nan)
    candidates = np.flatnonzero(~visited)
    candidates = candidates[np.argsort(-relative[candidates], kind="stable")]
    untested = candidates[_MAX_CANDIDATES:]
    candidates = candidates[:_MAX_CANDIDATES]
    short_acceptance = np.nan
    if candidates.size:
        share, short_acceptance = _joined(counted, mode_points[candidates], flat, rng,
                                          n_short, short_steps)
        joined_share[candidates] = share
        joined[candidates] = share >= _JOIN_SHARE
    # Candidates beyond the first _MAX_CANDIDATES were not tested: no evidence of mass.
    visited = visited | joined
    visited[untested] = True
    effective = _effective_draws(draws)
    unvisited_mass = float(relative[~visited].sum()) if modes else 0.0
    log_mass_draws = np.nan
    if unvisited_mass > 0.0:
        # The unvisited modes' Laplace mass against the mass of the region the draws
        # cover (reciprocal importance sampling), not only against the other modes
        # found: the smaller share of the two.
        log_mass_draws = _log_mass_of_draws(counted, flat, rng)
        if np.isfinite(log_mass_draws):
            log_unvisited = special.logsumexp(log_mass[~visited])
            against_draws = float(np.exp(log_unvisited - np.logaddexp(log_unvisited,
                                                                      log_mass_draws)))
            unvisited_mass = min(unvisited_mass, against_draws)
    pvalue = _deficit_pvalue(int(visits[~visited].sum()), flat.shape[0], effective,
                             unvisited_mass)
    statistic = acceptance = np.nan
    if method == "perturbed ksd":
        pvalue, statistic, acceptance = _perturbed_ksd_test(
            draws, np.asarray(scores, dtype=np.float64), modes, counted, kernel,
            preconditioner, rng, n_bootstrap)
    found = bool(pvalue < alpha)

    details = MissingMassDetails(
        modes=mode_points,
        log_density=np.array([mode["log_density"] for mode in modes]),
        log_mass=log_mass,
        relative_mass=relative,
        visits=visits,
        within_chain=within,
        joined=joined,
        joined_share=joined_share,
        visited=visited,
        unvisited_mass=unvisited_mass,
        log_mass_draws=float(log_mass_draws),
        effective_draws=effective,
        n_starts=len(points),
        n_rejected=n_rejected,
        starts=starts_from,
        start_distance=start_distance,
        gradient=counted.gradient_kind,
        n_score=counted.n_score,
        n_short_chains=int(candidates.size * n_short),
        short_chain_acceptance=float(short_acceptance),
        n_failed=counted.n_failed,
        failure=counted.failure,
        statistic=statistic,
        acceptance=acceptance,
    )
    summary = _summary(details, found, pvalue)
    if method == "perturbed ksd":
        summary = _perturbed_summary(details, found, pvalue)
    summary = summary + _notes(details)
    return MissingMass(found=found, pvalue=pvalue,
                       method=_PERTURBED if method == "perturbed ksd" else _MODE_SEARCH,
                       summary=summary,
                       n_log_density=counted.n_log_density, details=details)


def _check_at_draws(counted, flat, rng):
    """log p (and the gradient) at a few draws: a batch of 2 or more points, so a
    log_density that returns one number per batch is caught, and a log_density that
    raises at every draw is a bug, raised here."""
    picks = flat[rng.choice(flat.shape[0], size=min(4, flat.shape[0]), replace=False)]
    if picks.shape[0] < 2:
        picks = np.concatenate([picks, picks])
    failed_before = counted.n_failed
    values = counted.log_density(picks)
    if counted.n_failed - failed_before == picks.shape[0]:
        raise ValueError(f"log_density raised at every draw tried ({counted.failure}); "
                         "a log density must be finite where the draws are.")
    if not np.any(np.isfinite(values)):
        raise ValueError("log_density is not finite at any of the draws tried; it must be "
                         "finite where the draws are.")
    if counted.gradient_kind == _SCORE:
        counted.score(picks)


def _skipped_result(d, n_chain, counted, reason):
    details = MissingMassDetails(
        modes=np.zeros((0, d)), log_density=np.zeros(0), log_mass=np.zeros(0),
        relative_mass=np.zeros(0), visits=np.zeros((0, n_chain), dtype=np.int64),
        within_chain=np.zeros((0, n_chain), dtype=bool), visited=np.zeros(0, dtype=bool),
        unvisited_mass=0.0, effective_draws=np.nan, n_starts=0, n_rejected=0, starts="",
        n_score=0, gradient=counted.gradient_kind, skipped=reason)
    return MissingMass(found=False, pvalue=np.nan, method=_MODE_SEARCH,
                       summary=reason + ".", n_log_density=0, skipped=reason,
                       details=details)


def _symmetric_sqrt(precision):
    values, vectors = np.linalg.eigh(precision)
    return (vectors * np.sqrt(values)) @ vectors.T


def _perturb(flat, log_p, modes, theta, counted, rng):
    """``_PERTURB_STEPS`` Metropolis-Hastings steps with mode-jump proposals (p-invariant).

    Each step picks an ordered pair (i, j) of distinct modes uniformly and proposes
    x' = theta m_j + S_j^-1 S_i (x - theta m_i), S = H^(1/2); the pair (j, i) maps x' back
    to x and is picked with the same probability, so accepting with probability
    min(1, p(x') |det S_i| / (p(x) |det S_j|)) leaves p invariant (Liu, Duncan & Gandy
    2023). Returns the moved points, their log p and the number of accepted moves.
    """
    roots = [_symmetric_sqrt(mode["precision"]) for mode in modes]
    log_dets = [0.5 * np.linalg.slogdet(mode["precision"])[1] for mode in modes]
    pairs = [(i, j) for i in range(len(modes)) for j in range(len(modes)) if i != j]
    maps = [(np.linalg.solve(roots[j], roots[i]), theta * modes[j]["point"],
             theta * modes[i]["point"], log_dets[i] - log_dets[j]) for i, j in pairs]
    x, logp, accepted = flat.copy(), log_p.copy(), 0
    for _ in range(_PERTURB_STEPS):
        which = rng.integers(len(pairs), size=x.shape[0])
        proposal = np.empty_like(x)
        log_jacobian = np.empty(x.shape[0])
        for k, (matrix, to_centre, from_centre, log_det) in enumerate(maps):
            rows = which == k
            proposal[rows] = to_centre + (x[rows] - from_centre) @ matrix.T
            log_jacobian[rows] = log_det
        with np.errstate(invalid="ignore", over="ignore"):
            proposal_logp = counted.log_density(proposal)
            log_ratio = np.where(np.isfinite(proposal_logp),
                                 proposal_logp + log_jacobian - logp, -np.inf)
        accept = np.log(rng.random(x.shape[0])) < log_ratio
        x[accept], logp[accept] = proposal[accept], proposal_logp[accept]
        accepted += int(accept.sum())
    return x, logp, accepted


def _perturbed_ksd_test(draws, scores, modes, counted, kernel, preconditioner, rng,
                        n_bootstrap):
    """spKSD: sum over the draws and their perturbations of N KSD^2_V, wild bootstrap.

    The same bootstrap weight vector multiplies draw i and every perturbation of draw
    i, so the replicates keep the dependence between them; each chain's weights are a
    sign chain with the flip probability ``ksd_test`` uses for it.
    """
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    tau = np.array([integrated_autocorrelation_time(
        np.concatenate([draws[ch], scores[ch]], axis=1)).max() for ch in range(n_chain)])
    weights = bootstrap_weights("wild", rng, n_chain, n_draw, n_bootstrap,
                                flip_probability(tau))
    total = quadratic_forms(draws, scores, preconditioner, kernel, weights, True)[1]
    accepted = proposed = 0
    if len(modes) >= 2:
        log_p = counted.log_density(flat)
        for theta in _JUMP_SCALES:
            moved, _, n_accepted = _perturb(flat, log_p, modes, theta, counted, rng)
            accepted += n_accepted
            proposed += _PERTURB_STEPS * flat.shape[0]
            moved_scores = counted.score(moved)
            if not (np.all(np.isfinite(moved)) and np.all(np.isfinite(moved_scores))):
                raise ValueError("the score is not finite at a perturbed draw.")
            total = total + quadratic_forms(moved.reshape(draws.shape),
                                            moved_scores.reshape(draws.shape),
                                            preconditioner, kernel, weights, True)[1]
    total = total / (n_chain * n_draw)
    pvalue = float(bootstrap_pvalue(total[1:], np.asarray(total[0])))
    return pvalue, float(total[0]), (accepted / proposed if proposed else np.nan)


def _perturbed_summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    if n_modes < 2:
        return (f"the perturbed KSD test found {n_modes} mode(s), so it had no jumps to make "
                f"and is the plain KSD test (p = {pvalue:.2g}).")
    if found:
        return (f"draws moved between the {n_modes} modes found by p-invariant jumps no "
                f"longer fit p (perturbed KSD test, p = {pvalue:.2g}): the chains hold the "
                "modes in the wrong proportions or miss one.")
    return (f"draws moved between the {n_modes} modes found by p-invariant jumps still fit "
            f"p (perturbed KSD test, p = {pvalue:.2g}).")


def _searched(details):
    """What was searched, one clause."""
    if details.start_distance.size:
        far = (f", at a median of {np.median(details.start_distance):.2g} and up to "
               f"{np.max(details.start_distance):.2g} draw standard deviations from the "
               "draws' mean")
    else:
        far = ""
    return f"{details.n_starts} starts ({details.starts}{far})"


def _summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    searched = _searched(details)
    if n_modes == 0:
        return (f"the mode search from {searched} found no local maximum of log p (every "
                "run ended on a saddle, a flat direction or a density that grows without "
                "bound, as in a funnel's neck); nothing can be said about unvisited mass.")
    unvisited = np.flatnonzero(~details.visited)
    n_joined = int(details.joined.sum())
    joined = (f"; short chains started at {n_joined} of them that the chains' range did "
              "not cover joined the draws" if n_joined else "")
    if unvisited.size == 0:
        return (f"every mode found ({n_modes} from {searched}) was visited by the chains"
                f"{joined}.")
    largest = unvisited[np.argmax(details.relative_mass[unvisited])]
    where = _format_point(details.modes[largest])
    share = details.relative_mass[largest]
    stayed = (f"; short p-invariant chains started there stayed apart from the draws "
              f"({details.joined_share[largest]:.0%} of their points within the draws' "
              "range)" if np.isfinite(details.joined_share[largest]) else "")
    if found:
        return (f"a mode at x = {where} with log p = {details.log_density[largest]:.4g} and "
                f"about {share:.0%} of the mass (Laplace approximation) was never visited by "
                f"the chains (p = {pvalue:.2g}){stayed}; the draws miss part of the target "
                f"(searched from {searched}).")
    return (f"{unvisited.size} mode(s) were not visited, the largest at x = {where}, but "
            f"with about {share:.2g} of the mass, which {details.effective_draws:.0f} "
            f"effective draws can miss by chance (p = {pvalue:.2g}; searched from "
            f"{searched}).")


def _notes(details):
    notes = []
    if details.gradient == _FINITE_DIFFERENCES:
        notes.append("gradient of log p by central finite differences of log_density "
                     "(no score callable)")
    if details.n_failed:
        notes.append(f"log p raised at {details.n_failed} point(s) ({details.failure}); "
                     "counted as -inf")
    return "".join(f" Note: {note}." for note in notes)
