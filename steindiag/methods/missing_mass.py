"""Search for probability mass the draws never visited (NumPy and SciPy; no xarray, no PyMC).

KSD, like every score-based discrepancy, barely depends on the weights of well-separated
modes: draws that cover one mode of a two-mode target can have the KSD of exact draws.
This module checks the options and looks for the missing mode directly, step by step
(the Notes of :func:`search_missing_mass` give the details)::

    starts: widened draws, broad starts (far in every direction, not only along the
      draws' principal axes) or given ones (prior draws), plus a few draws themselves
      -> missing_mass_modes: L-BFGS on -log p from every start (gradient: the score, or
         central finite differences of log p); end points merged into distinct modes,
         each with its Hessian and Laplace mass; saddles and flat directions dropped
      -> missing_mass_visits: a mode is *visited* when it lies within the range of some
         chain, or the draws fill a tenth of what p puts in its central (50 %) Laplace
         ellipsoid; short p-invariant chains (preconditioned MALA) start at every other
         mode: if they join the draws, so does the mode (a point of high density, such
         as a funnel's neck, from which p's mass leads back to the draws); then the
         unvisited relative mass M and the binomial probability that ESS effective draws
         from p would miss those cores as badly as the chains did: the p-value
      -> missing_mass_perturbed (method="perturbed ksd"): the KSD test of the draws and
         of their p-invariant jumps between the modes
      -> missing_mass_result: the result, with one sentence for a user

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

import numpy as np
from scipy import special

from steindiag._validate import (check_callable, check_choice, check_int, check_probability,
                                 check_rng)
from steindiag.methods.missing_mass_modes import (Counted, check_at_draws, draws_spread,
                                                  find_modes, starting_points)
from steindiag.methods.missing_mass_perturbed import perturbed_ksd_test
from steindiag.methods.missing_mass_result import (FINITE_DIFFERENCES, MODE_SEARCH, PERTURBED,
                                                   SCORE, MissingMass, MissingMassDetails,
                                                   skipped_result, summary)
from steindiag.methods.missing_mass_visits import (deficit_pvalue, effective_draws,
                                                   unvisited_share, visited_modes)

__all__ = ["missing_mass_skip_reason", "search_missing_mass"]

_METHODS = ("mode search", "perturbed ksd")

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
_MAX_DIMENSION = {SCORE: 1000, FINITE_DIFFERENCES: 300}
# Short chains at each candidate mode: this many MALA chains of this many steps (the
# first half adapts the step towards acceptance 0.574, the second half is kept).
_N_SHORT_CHAINS = 4
_SHORT_STEPS = 200
# Bootstrap replicates of the perturbed KSD test.
_N_BOOTSTRAP = 500


def _default_n_starts(d):
    return _N_STARTS_BASE + _N_STARTS_PER_DOUBLING * int(np.ceil(np.log2(d + 1)))


def _search_iv(draws, scores, log_density, score, kernel, preconditioner, rng, alpha,
               starts, options):
    """Every argument and option of the search checked; returned standardised."""
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
    check_callable(log_density, "log_density",
                   "a callable (n, d) -> (n,) giving log p up to a constant", allow_none=False)
    check_callable(score, "score",
                   "a callable (n, d) -> (n, d) (None: finite differences of log_density)")
    rng = check_rng(rng)
    alpha = check_probability(alpha, "alpha")
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
    n_starts = check_int(options.get("n_starts", _default_n_starts(d)), "n_starts", minimum=1)
    n_draw_starts = check_int(options.get("n_draw_starts", _N_DRAW_STARTS), "n_draw_starts",
                              minimum=0)
    widen = np.atleast_1d(np.asarray(options.get("widen", _WIDEN), dtype=np.float64))
    if widen.ndim != 1 or widen.size == 0 or not np.all(np.isfinite(widen)) \
            or np.any(widen < 1):
        raise ValueError(f"widen must be one or more factors >= 1; got {options.get('widen')!r}.")
    max_iterations = check_int(options.get("max_iterations", _MAX_ITERATIONS),
                               "max_iterations", minimum=1)
    method = check_choice(options.get("method", "mode search"), "method", _METHODS)
    n_bootstrap = check_int(options.get("n_bootstrap", _N_BOOTSTRAP), "n_bootstrap", minimum=1)
    max_dimension = check_int(options.get("max_dimension"), "max_dimension", minimum=1,
                              allow_none=True)
    n_short = check_int(options.get("n_short_chains", _N_SHORT_CHAINS), "n_short_chains",
                        minimum=1)
    short_steps = check_int(options.get("short_steps", _SHORT_STEPS), "short_steps", minimum=2)
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
    return (draws, rng, alpha, starts, n_starts, n_draw_starts, widen,
            max_iterations, method, n_bootstrap, max_dimension, n_short, short_steps)


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
    kind = SCORE if score else FINITE_DIFFERENCES
    limit = _MAX_DIMENSION[kind] if max_dimension is None else int(max_dimension)
    if d <= limit:
        return ""
    cost = ("its Hessians, their factorisations and the chains' covariances are dense "
            "d x d (O(d^3) each)" + ("" if score else
                                       "; with finite differences a Hessian costs "
                                       "4 d^2 log p evaluations"))
    return (f"the search for unvisited mass was skipped: d = {d} is above "
            f"max_dimension = {limit} ({cost}); pass max_dimension= to run it anyway")


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
    spread = draws_spread(flat)
    counted = Counted(log_density, score, spread)
    skipped = missing_mass_skip_reason(d, score=score is not None,
                                       max_dimension=max_dimension)
    if skipped:
        return skipped_result(d, n_chain, counted.gradient_kind, skipped)
    points, starts_from = starting_points(flat, rng, starts, n_starts, n_draw_starts,
                                          widen, spread)
    check_at_draws(counted, flat, rng)
    start_distance = np.sqrt(np.mean(((points - flat.mean(axis=0)) / spread) ** 2, axis=1))
    modes, n_rejected = find_modes(counted, points, spread, max_iterations)
    log_mass = np.array([mode["log_mass"] for mode in modes])
    relative = np.exp(log_mass - special.logsumexp(log_mass)) if modes else np.zeros(0)
    visits, within, visited, joined, joined_share, n_tested, short_acceptance = \
        visited_modes(counted, draws, modes, relative, rng, n_short, short_steps)
    effective = effective_draws(draws)
    unvisited_mass, log_mass_draws = unvisited_share(counted, flat, rng, log_mass, relative,
                                                     visited)
    pvalue = deficit_pvalue(int(visits[~visited].sum()), flat.shape[0], effective,
                            unvisited_mass)
    statistic = acceptance = np.nan
    if method == "perturbed ksd":
        pvalue, statistic, acceptance = perturbed_ksd_test(
            draws, np.asarray(scores, dtype=np.float64), modes, counted, kernel,
            preconditioner, rng, n_bootstrap)
    found = bool(pvalue < alpha)

    details = MissingMassDetails(
        modes=np.array([mode["point"] for mode in modes]).reshape(-1, d),
        log_density=np.array([mode["log_density"] for mode in modes]), log_mass=log_mass,
        relative_mass=relative, visits=visits, within_chain=within, joined=joined,
        joined_share=joined_share, visited=visited, unvisited_mass=unvisited_mass,
        log_mass_draws=float(log_mass_draws), effective_draws=effective,
        n_starts=len(points), n_rejected=n_rejected, starts=starts_from,
        start_distance=start_distance, gradient=counted.gradient_kind,
        n_score=counted.n_score, n_short_chains=int(n_tested * n_short),
        short_chain_acceptance=float(short_acceptance), n_failed=counted.n_failed,
        failure=counted.failure, statistic=statistic, acceptance=acceptance)
    return MissingMass(found=found, pvalue=pvalue,
                       method=PERTURBED if method == "perturbed ksd" else MODE_SEARCH,
                       summary=summary(details, found, pvalue, method),
                       n_log_density=counted.n_log_density, details=details)
