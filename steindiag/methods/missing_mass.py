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
      -> a mode is *visited* when draws fall in its 99 % Laplace ellipsoid
      -> unvisited relative mass M and the probability (1 - M)^ESS that ESS effective draws
         from p would all have missed it: the p-value.

See the background page of the docs ("Mass the draws never visited").
"""

import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from steindiag.stats.autocorrelation import integrated_autocorrelation_time

__all__ = ["MissingMass", "MissingMassDetails", "search_missing_mass"]

_METHOD = "mode search"

# Defaults (see ``search_missing_mass``).
_N_STARTS = 32
_N_DRAW_STARTS = 8
# Starts are the draws pushed out from their mean by these factors, in turn: a mode 8
# standard deviations away from draws confined to one mode is reached from a start pushed
# out by 4-16 in about a third of the starts that point its way.
_WIDEN = (2.0, 4.0, 8.0, 16.0)
_MAX_ITERATIONS = 200
# Draws inside this quantile of the chi-square ellipsoid of a mode's Laplace
# approximation count as visits of that mode.
_VISIT_QUANTILE = 0.99
# End points closer than this (Mahalanobis distance in the Hessian's metric) are one mode.
_MERGE_DISTANCE = 1.0
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
        Draws of each chain inside each mode's 99 % Laplace ellipsoid.
    visited : ndarray of bool (mode,)
        Whether any draw of any chain is inside the ellipsoid.
    unvisited_mass : float
        Sum of ``relative_mass`` over the modes not visited.
    effective_draws : float
        Effective number of draws, sum over chains of draw / tau (tau: integrated
        autocorrelation time, largest over the coordinates).
    n_starts : int
        Optimiser runs.
    n_rejected : int
        Runs whose end point was not a local maximum (Hessian not negative definite,
        non-finite log p, or an optimiser failure).
    starts : str
        Where the overdispersed starts came from ("given" or "widened draws").
    n_score : int
        Score evaluations made (points).
    """

    modes: np.ndarray
    log_density: np.ndarray
    log_mass: np.ndarray
    relative_mass: np.ndarray
    visits: np.ndarray
    visited: np.ndarray
    unvisited_mass: float
    effective_draws: float
    n_starts: int
    n_rejected: int
    starts: str
    n_score: int


@dataclass(kw_only=True)
class MissingMass:
    """Result of :func:`search_missing_mass`.

    Attributes
    ----------
    found : bool
        Mass the draws never visited was detected at level ``alpha``.
    pvalue : float
        Approximate p-value: the probability that ``effective_draws`` draws from p
        would all miss the unvisited modes, (1 - unvisited_mass)^effective_draws.
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


def _search_iv(draws, scores, log_density, score, rng, alpha, starts, options):
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
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
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
    allowed = {"n_starts", "n_draw_starts", "widen", "max_iterations"}
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
    return draws, rng, float(alpha), starts, n_starts, int(n_draw_starts), widen, max_iterations


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

    with np.errstate(all="ignore"):
        result = optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                   options={"maxiter": max_iterations})
    if not np.isfinite(result.fun) or not np.all(np.isfinite(result.x)):
        return None
    return result.x, -float(result.fun)


def _hessian(counted, point, scale):
    """-Hessian of log p at ``point`` by central differences of the score (2 d scores)."""
    d = point.shape[0]
    steps = _FD_STEP * scale
    shifts = np.diag(steps)
    plus = counted.score(point + shifts)
    minus = counted.score(point - shifts)
    jacobian = (plus - minus) / (2.0 * steps[:, None])  # row k: d s / d x_k
    return -0.5 * (jacobian + jacobian.T)


def _as_mode(counted, point, scale):
    """(precision H, log det H) at a local maximum, or None (saddle, flat, not finite)."""
    precision = _hessian(counted, point, scale)
    if not np.all(np.isfinite(precision)):
        return None
    try:
        factor = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        return None
    log_det = 2.0 * np.sum(np.log(np.diag(factor)))
    return precision, log_det


def _mahalanobis_sq(points, centre, precision):
    diff = points - centre
    return np.einsum("ij,jk,ik->i", diff, precision, diff)


def _effective_draws(draws):
    n_chain, n_draw, _ = draws.shape
    return float(sum(n_draw / integrated_autocorrelation_time(draws[ch]).max()
                     for ch in range(n_chain)))


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
        space for a PyMC model). ``scores`` is only checked for its shape (kept for the
        methods that test the draws with KSD).
    log_density : callable
        (n, d) -> (n,): log p up to a constant, batched.
    score : callable
        (n, d) -> (n, d): grad log p, batched.
    kernel, preconditioner : objects
        The kernel and preconditioner of the caller's KSD (as in
        :mod:`steindiag.kernels`); the mode search does not use them.
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
        ``n_starts`` (default 32): widened starts, when ``starts`` is None;
        ``n_draw_starts`` (default 8): draws used as starts as well, so that the modes
        the chains did visit are found and weighed; ``widen`` (default (2, 4, 8, 16)):
        the widening factors; ``max_iterations`` (default 200): L-BFGS iterations per
        start.

    Returns
    -------
    MissingMass
        ``found``, ``pvalue``, ``method`` ("mode search"), ``summary`` (one sentence),
        ``n_log_density`` (points at which log p was evaluated) and ``details``
        (:class:`MissingMassDetails`: the modes, their Laplace masses, visits per chain).

    Notes
    -----
    From every start, L-BFGS maximises log p (the score is the gradient). End points
    closer than 1 in the Mahalanobis distance of their Hessians are merged; end points
    where -Hessian (central differences of the score) is not positive definite are not
    modes and are dropped. Each mode m gets the Laplace mass
    ``exp(log p(m)) (2 pi)^(d/2) det(H)^(-1/2)``, normalised over the modes found. A mode
    is visited when at least one draw lies in its Laplace ellipsoid
    ``(x - m)^T H (x - m) <= chi2_d(0.99)``. With M the relative mass of the unvisited
    modes and ESS the draws' effective number (sum over chains of draw / tau), the
    p-value is ``(1 - 0.99 M)^ESS``: the chance that ESS independent draws from p all
    miss the unvisited ellipsoids. It is approximate twice over: the Laplace masses are
    exact only for Gaussian modes, and the mass of modes no start reached is not
    counted (the search can miss a mode; it never invents one). Draws that cover every
    mode give M = 0 and p = 1, whatever their mixing proportions: this search answers
    "was some mode never visited", not "are the proportions right".

    Cost: each start costs one L-BFGS run, typically 10-60 evaluations of log p and the
    score at one point; each distinct end point costs 2 d score evaluations for the
    Hessian. ``n_log_density`` counts them (``details.n_score`` the scores). The draws
    are only compared with the modes: O(N d^2) per mode, no kernel matrix.

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
    (draws, rng, alpha, starts, n_starts, n_draw_starts, widen,
     max_iterations) = _search_iv(draws, scores, log_density, score, rng, alpha, starts,
                                  options)
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
    for point, value in ends:
        same = False
        for mode in modes:
            if _mahalanobis_sq(point[None], mode["point"], mode["precision"])[0] \
                    < _MERGE_DISTANCE ** 2:
                same = True
                break
        if same:
            continue
        local = _as_mode(counted, point, spread)
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
    visited = visits.sum(axis=1) > 0
    log_mass = np.array([mode["log_mass"] for mode in modes])
    relative = np.exp(log_mass - special.logsumexp(log_mass)) if modes else np.zeros(0)
    unvisited_mass = float(relative[~visited].sum()) if modes else 0.0
    effective = _effective_draws(draws)
    pvalue = float(np.exp(effective * np.log1p(-_VISIT_QUANTILE * min(unvisited_mass, 1.0))))
    found = bool(pvalue < alpha)

    details = MissingMassDetails(
        modes=np.array([mode["point"] for mode in modes]).reshape(len(modes), d),
        log_density=np.array([mode["log_density"] for mode in modes]),
        log_mass=log_mass,
        relative_mass=relative,
        visits=visits,
        visited=visited,
        unvisited_mass=unvisited_mass,
        effective_draws=effective,
        n_starts=len(points),
        n_rejected=n_rejected,
        starts=starts_from,
        n_score=counted.n_score,
    )
    return MissingMass(found=found, pvalue=pvalue, method=_METHOD,
                       summary=_summary(details, found, pvalue),
                       n_log_density=counted.n_log_density, details=details)


def _summary(details, found, pvalue):
    n_modes = details.modes.shape[0]
    if n_modes == 0:
        return (f"the mode search from {details.n_starts} starts found no local maximum of "
                "log p (every run failed or ended on a saddle); nothing can be said about "
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
