"""Search for probability mass the draws never visited (NumPy and SciPy; no xarray, no PyMC).

KSD, like every score-based discrepancy, barely depends on the weights of well-separated
modes: draws that cover one mode of a two-mode target can have the KSD of exact draws.
This module looks for the missing mode directly:

    overdispersed starts (prior draws, or draws pushed out from their mean)
      + a few draws themselves
      -> L-BFGS on -log p from every start (the score as gradient)   [scipy.optimize]
      -> end points merged into distinct modes; Hessian of -log p at each mode by central
         differences of the score; saddles and flat directions dropped
      -> Laplace mass of each mode, relative to the sum over all modes found
      -> a mode is *visited* when it lies within the range of some chain, or the draws
         fill a tenth of what p puts in its central (50 %) Laplace ellipsoid
      -> unvisited relative mass M and the binomial probability that ESS effective draws
         from p would miss those cores as badly as the chains did: the p-value.

See the background page of the docs ("Mass the draws never visited").
"""

import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from steindiag._validate import check_rng
from steindiag.engine.forms import quadratic_forms
from steindiag.engine.threads import single_threaded_blas
from steindiag.stats.autocorrelation import integrated_autocorrelation_time
from steindiag.stats.bootstrap import bootstrap_pvalue, bootstrap_weights, flip_probability

__all__ = ["MissingMass", "MissingMassDetails", "search_missing_mass"]

_MODE_SEARCH = "mode search"
_PERTURBED = "perturbed KSD test (Liu, Duncan & Gandy 2023)"
_METHODS = ("mode search", "perturbed ksd")

# Perturbed KSD test: T - 1 = 9 Metropolis-Hastings steps (their T = 10) with mode-jump
# proposals of jump scales theta (their spKSD sums over a grid in [0.5, 1.5]; theta = 1
# is left out: exact jumps between equal modes move a one-mode sample straight to p).
_PERTURB_STEPS = 9
_JUMP_SCALES = (0.5, 0.75, 1.25, 1.5)
_N_BOOTSTRAP = 500

# Defaults (see ``search_missing_mass``).
_N_STARTS = 32
_N_DRAW_STARTS = 8
# Starts are the draws pushed out from their mean by these factors, in turn: a mode 8
# standard deviations away from draws confined to one mode is reached from a start pushed
# out by 4-16 in about a third of the starts that point its way.
_WIDEN = (2.0, 4.0, 8.0, 16.0)
_MAX_ITERATIONS = 200
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
# Central-difference step for the Hessian, relative to the mode's scale.
_FD_STEP = 1e-4


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
    visited : ndarray of bool (mode,)
        Whether the mode lies within the range of some chain, or the chains together
        put at least a tenth of the draws p would put in its central ellipsoid
        (relative mass x number of draws / 2) there.
    unvisited_mass : float
        Sum of ``relative_mass`` over the modes not visited.
    effective_draws : float
        Effective number of draws, sum over chains of draw / tau (tau: integrated
        autocorrelation time, largest over the coordinates).
    n_starts : int
        Optimiser runs.
    n_rejected : int
        Distinct end points that were not local maxima (Hessian not negative definite,
        not stationary, non-finite log p) and runs that failed.
    starts : str
        Where the overdispersed starts came from ("given" or "widened draws").
    n_score : int
        Score evaluations made (points).
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
        1 when every mode found was visited.
    method : str
        The method used ("mode search").
    summary : str
        One sentence for a user.
    n_log_density : int
        log p evaluations made (points), for the cost accounting.
    details : MissingMassDetails
    """

    found: bool
    pvalue: float
    method: str
    summary: str
    n_log_density: int
    details: MissingMassDetails = field(repr=False)


class _Counted:
    """log p and score callables that count the points they are evaluated at."""

    def __init__(self, log_density, score, d):
        self._log_density = log_density
        self._score = score
        self.d = d
        self.n_log_density = 0
        self.n_score = 0

    def log_density(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        self.n_log_density += points.shape[0]
        values = np.asarray(self._log_density(points.copy()), dtype=np.float64)
        if values.shape not in ((points.shape[0],), (points.shape[0], 1)):
            raise ValueError(
                f"log_density returned shape {values.shape} for {points.shape[0]} points; "
                f"expected ({points.shape[0]},)."
            )
        return values.reshape(-1)

    def score(self, points):
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, self.d)
        self.n_score += points.shape[0]
        values = np.asarray(self._score(points.copy()), dtype=np.float64)
        if values.shape != points.shape:
            raise ValueError(
                f"score returned shape {values.shape} for points of shape {points.shape}."
            )
        return values


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer; got {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value}.")
    return int(value)


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
    if not callable(score):
        raise TypeError(
            f"score must be a callable (n, d) -> (n, d); got {type(score).__name__}."
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
               "n_bootstrap"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"unknown option(s) {unknown} for the mode search; allowed: {sorted(allowed)}."
        )
    n_starts = _positive_int(options.get("n_starts", _N_STARTS), "n_starts")
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
    if method == "perturbed ksd":
        if scores is None:
            raise ValueError("method='perturbed ksd' needs the scores of the draws.")
        if not np.all(np.isfinite(np.asarray(scores, dtype=np.float64))):
            raise ValueError("scores must be finite.")
        if not hasattr(kernel, "numba_kind"):
            raise TypeError("method='perturbed ksd' needs kernel, a steindiag.kernels kernel "
                            f"object; got {type(kernel).__name__}.")
        if not hasattr(preconditioner, "to_kernel_coordinates"):
            raise TypeError("method='perturbed ksd' needs preconditioner, resolved from the "
                            "draws (steindiag.kernels.preconditioner.make_preconditioner); "
                            f"got {type(preconditioner).__name__}.")
    return (draws, rng, float(alpha), starts, n_starts, int(n_draw_starts), widen,
            max_iterations, method, n_bootstrap)


def _starting_points(flat, rng, starts, n_starts, n_draw_starts, widen):
    """Overdispersed starts plus a few draws (so the visited modes are found too)."""
    picks = flat[rng.choice(flat.shape[0], size=min(n_draw_starts, flat.shape[0]),
                            replace=False)]
    if starts is not None:
        return np.concatenate([starts, picks]), "given"
    centre = flat.mean(axis=0)
    chosen = flat[rng.choice(flat.shape[0], size=n_starts, replace=n_starts > flat.shape[0])]
    factors = np.resize(widen, n_starts)[:, None]
    return np.concatenate([centre + factors * (chosen - centre), picks]), "widened draws"


def _maximise(counted, start, max_iterations):
    """L-BFGS on -log p from ``start``: end point, or None if log p is not finite there."""

    def objective(x):
        value = counted.log_density(x)[0]
        gradient = counted.score(x)[0]
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
    """-Hessian of log p at ``point`` by central differences of the score (2 d scores)."""
    d = point.shape[0]
    steps = _FD_STEP * scale
    shifts = np.diag(steps)
    plus = counted.score(point + shifts)
    minus = counted.score(point - shifts)
    jacobian = (plus - minus) / (2.0 * steps[:, None])  # row k: d s / d x_k
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
    floored at 1e-12 of the largest (a chain stuck in a subspace).
    """
    n_chain, _, d = draws.shape
    within = np.zeros((points.shape[0], n_chain), dtype=bool)
    for ch in range(n_chain):
        centred = draws[ch] - draws[ch].mean(axis=0)
        values, vectors = np.linalg.eigh(np.atleast_2d(np.cov(centred, rowvar=False)))
        values = np.maximum(values, 1e-12 * max(values.max(), 1e-300))
        whiten = vectors / np.sqrt(values)
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


def search_missing_mass(draws, scores, *, log_density, score, kernel, preconditioner, rng,
                        alpha=0.05, starts=None, **options):
    """Look for modes of p that the draws never visited.

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d)
        The draws and their scores, in the space the score lives in (the unconstrained
        space for a PyMC model). The mode search only checks the shape of ``scores``
        (it may be None); the perturbed KSD test uses them.
    log_density : callable
        (n, d) -> (n,): log p up to a constant, batched.
    score : callable
        (n, d) -> (n, d): grad log p, batched.
    kernel, preconditioner : objects
        The kernel (:mod:`steindiag.kernels`) and resolved preconditioner of the
        caller's KSD; only the perturbed KSD test uses them.
    rng : int, numpy.random.Generator or None
        Source of the starts (which draws are widened or used as starts).
    alpha : float, default 0.05
        Level: ``found`` is ``pvalue < alpha``.
    starts : ndarray (n_starts, d), optional
        Overdispersed starting points (for a PyMC model, prior draws mapped to the
        unconstrained space: ``steindiag.inputs._pymc_prior.prior_starts``). Default: draws
        pushed out from the pooled mean, x -> mean + f (x - mean), with f cycling through
        ``widen``.
    **options
        ``method``: ``"mode search"`` (default) or ``"perturbed ksd"`` (see Notes);
        ``n_bootstrap`` (default 500): bootstrap replicates of the perturbed KSD test;
        ``n_starts`` (default 32): widened starts, when ``starts`` is None;
        ``n_draw_starts`` (default 8): draws used as starts as well, so that the modes
        the chains did visit are found and weighed; ``widen`` (default (2, 4, 8, 16)):
        the widening factors; ``max_iterations`` (default 200): L-BFGS iterations per
        start.

    Returns
    -------
    MissingMass
        ``found``, ``pvalue``, ``method`` ("mode search" or "perturbed KSD test (Liu,
        Duncan & Gandy 2023)"), ``summary`` (one sentence),
        ``n_log_density`` (points at which log p was evaluated) and ``details``
        (:class:`MissingMassDetails`: the modes, their Laplace masses, visits per chain).

    Notes
    -----
    From every start, L-BFGS maximises log p (the score is the gradient). End points
    closer than 1 in the Mahalanobis distance of their Hessians are merged; end points
    where -Hessian (central differences of the score) is not positive definite, or
    where a Newton step would still raise log p by more than 0.05 (not stationary: the
    optimiser stopped early, or log p grows without bound, as in a funnel's neck), are
    not modes and are dropped. Each mode m gets the Laplace mass
    ``exp(log p(m)) (2 pi)^(d/2) det(H)^(-1/2)``, normalised over the modes found (its
    relative mass w). Under p, a share w / 2 of the N draws would fall in the mode's
    central Laplace ellipsoid ``(x - m)^T H (x - m) <= chi2_d(0.5)`` (its half-mass
    core: the tails of a neighbouring mode rarely reach it). The mode counts as visited
    when it lies within the range of some chain (its Mahalanobis distance from the
    chain's mean, in the chain's covariance, is at most the 99th percentile of the
    chain's own draws' distances: a skewed or banana-shaped posterior can have a thin
    Laplace core that few draws fall in although the chains sample it well), or when
    the chains put at least a tenth of the expected share in its core (a few draws
    straying in from a neighbouring mode do not count). With M the relative mass of the
    unvisited modes, C the draws in their cores and ESS the draws' effective number
    (sum over chains of draw / tau), the p-value is the binomial probability
    P(Bin(ESS, M / 2) <= C ESS / N), which is ``(1 - M / 2)^ESS`` when C = 0: the chance
    that draws from p would miss the unvisited modes' cores as badly. It is
    approximate twice over: the Laplace masses are
    exact only for Gaussian modes, and the mass of modes no start reached is not
    counted (the search can miss a mode; it never invents one). Draws that cover every
    mode give M = 0 and p = 1, whatever their mixing proportions: this search answers
    "was some mode never visited", not "are the proportions right".

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

    Cost: each start costs one L-BFGS run, typically 10-60 evaluations of log p and the
    score at one point; each distinct end point costs 2 d score evaluations for the
    Hessian. ``n_log_density`` counts them (``details.n_score`` the scores). The mode
    search only compares the draws with the modes: O(N d^2) per mode, no kernel matrix.
    The perturbed KSD test adds N + 4 x 9 N log p evaluations, 4 N scores and 5 tiled
    passes of the bootstrap's quadratic forms, O(N^2 (d + B)) time each, O(N B) memory.

    References
    ----------
    Wenliang & Kanagawa (2020), Blindness of score-based methods to isolated components
    and mixing proportions.
    Liu, Duncan & Gandy (2023), Using perturbation to improve goodness-of-fit tests based
    on kernelized Stein discrepancy, ICML (mode finding from dispersed starts).

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
    """
    (draws, rng, alpha, starts, n_starts, n_draw_starts, widen, max_iterations, method,
     n_bootstrap) = _search_iv(draws, scores, log_density, score, kernel, preconditioner, rng,
                               alpha, starts, options)
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    counted = _Counted(log_density, score, d)
    points, starts_from = _starting_points(flat, rng, starts, n_starts, n_draw_starts, widen)
    spread = flat.std(axis=0)
    spread[~(spread > 0)] = 1.0

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
    # Visited: within some chain's range, or at least _VISITED_SHARE of the draws p
    # would put in the mode's core.
    within = _within_chains(draws, np.array([mode["point"] for mode in modes]).reshape(-1, d))
    expected = _VISIT_QUANTILE * relative * flat.shape[0]
    visited = within.any(axis=1) | (visits.sum(axis=1) >= _VISITED_SHARE * expected)
    effective = _effective_draws(draws)
    unvisited_mass = float(relative[~visited].sum()) if modes else 0.0
    pvalue = _deficit_pvalue(int(visits[~visited].sum()), flat.shape[0], effective,
                             unvisited_mass)
    statistic = acceptance = np.nan
    if method == "perturbed ksd":
        pvalue, statistic, acceptance = _perturbed_ksd_test(
            draws, np.asarray(scores, dtype=np.float64), modes, counted, kernel,
            preconditioner, rng, n_bootstrap)
    found = bool(pvalue < alpha)

    details = MissingMassDetails(
        modes=np.array([mode["point"] for mode in modes]).reshape(len(modes), d),
        log_density=np.array([mode["log_density"] for mode in modes]),
        log_mass=log_mass,
        relative_mass=relative,
        visits=visits,
        within_chain=within,
        visited=visited,
        unvisited_mass=unvisited_mass,
        effective_draws=effective,
        n_starts=len(points),
        n_rejected=n_rejected,
        starts=starts_from,
        n_score=counted.n_score,
        statistic=statistic,
        acceptance=acceptance,
    )
    summary = _summary(details, found, pvalue)
    if method == "perturbed ksd":
        summary = _perturbed_summary(details, found, pvalue)
    return MissingMass(found=found, pvalue=pvalue,
                       method=_PERTURBED if method == "perturbed ksd" else _MODE_SEARCH,
                       summary=summary,
                       n_log_density=counted.n_log_density, details=details)


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


def _summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    if n_modes == 0:
        return (f"the mode search from {details.n_starts} starts found no local maximum of "
                "log p (every run ended on a saddle, a flat direction or a density that "
                "grows without bound, as in a funnel's neck); nothing can be said about "
                "unvisited mass.")
    unvisited = np.flatnonzero(~details.visited)
    if unvisited.size == 0:
        return (f"every mode found ({n_modes} from {details.n_starts} starts) was visited by "
                "the chains.")
    largest = unvisited[np.argmax(details.relative_mass[unvisited])]
    where = _format_point(details.modes[largest])
    share = details.relative_mass[largest]
    if found:
        return (f"a mode at x = {where} with log p = {details.log_density[largest]:.4g} and "
                f"about {share:.0%} of the mass (Laplace approximation) was never visited by "
                f"the chains (p = {pvalue:.2g}); the draws miss part of the target.")
    return (f"{unvisited.size} mode(s) were not visited, the largest at x = {where}, but "
            f"with about {share:.2g} of the mass, which {details.effective_draws:.0f} "
            f"effective draws can miss by chance (p = {pvalue:.2g}).")
