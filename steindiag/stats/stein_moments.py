"""What the score says about each parameter's location and spread (NumPy only).

For draws of p (with the integrals finite), integration by parts gives Stein's identity
with the test functions 1 and x_k:

    E[s_k(x)] = 0    and    E[(x_k - c) s_k(x)] = -1    for any constant c,

with s = grad log p. Per chain and parameter this module estimates

- the *location* moment, the mean score: 0 for draws of p; positive when p puts more mass
  at larger x_k than the draws do (the draws sit too low), negative when they sit too high;
- the *spread* moment r_k = -mean((x_k - mean x_k) s_k): 1 for draws of p, below 1 for
  draws narrower than p along x_k (for a Gaussian target and draws N(m, v): r = v / sigma^2
  with sigma^2 the target's conditional variance), above 1 for wider ones, and about 0 for a
  chain that barely moves (its spread is then tiny next to the scale the target's
  curvature sets where it sits);

each with its Monte Carlo standard error (ArviZ's MCSE of a mean, ``stats.mcse``), so that
a moment's distance from its value under p reads in standard errors. See the Background
page of the docs, "Where the evidence points".
"""

from dataclasses import dataclass

import numpy as np

from steindiag.stats.mcse import mcse_mean

__all__ = ["SteinMoments", "stein_moments", "CurvatureSpread", "curvature_spread",
           "implied_variance",
           "nearly_stuck", "far_off", "chain_shifts", "STUCK_SPREAD", "FAR_SPREAD"]

# A chain whose spread moment is at most this in every parameter barely moves: its spread
# is at most a tenth (sqrt(0.01)) of the scale the target's curvature sets where it sits. A
# stationary AR(1) chain of p with 1000 draws gets there only with rho >= 0.99999 (fewer
# than 0.01 effective draws); the valid chains of the calibration grid have r near 1.
STUCK_SPREAD = 0.01
# A chain whose spread moment reaches this (in absolute value) in some parameter is far off
# the target there: its draws spread over 100 times the variance the target's curvature
# allows (sd 10 times). For draws of p the moment is a mean of terms of mean 1 (bounded for
# Student-t targets, -chi^2-like for Gaussian ones); the valid chains of the calibration
# grid, heavy-tailed ones included, stay within a few units of 1.
FAR_SPREAD = 100.0
# A parameter whose weighted variance is at most (_ROUNDING eps)^2 times its mean square
# does not move (``curvature_spread``).
_ROUNDING = 1e3


@dataclass(kw_only=True)
class SteinMoments:
    """Location and spread moments, shape (chain, d), with their standard errors.

    ``location`` (mean score, 0 under p), ``spread`` (-mean((x - mean x) s), 1 under p),
    and ``location_se``, ``spread_se`` (NaN when not computed). ``constant_score`` (d,):
    parameters whose score is 0 at every draw (not parameters of the target).
    """

    location: np.ndarray
    spread: np.ndarray
    location_se: np.ndarray
    spread_se: np.ndarray
    constant_score: np.ndarray

    @property
    def location_z(self):
        """The mean score in standard errors (0 under p)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.location / self.location_se

    @property
    def spread_z(self):
        """The spread moment's distance from 1 in standard errors (0 under p)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.spread - 1.0) / self.spread_se


def stein_moments(draws, scores, *, pooled=False, standard_errors=True, weights=None):
    """:class:`SteinMoments` of each chain of the (chain, draw, d) draws and scores, or of
    all chains together (``pooled``: shape (1, d), the multi-chain MCSEs).

    ``weights`` (chain, draw), non-negative (e.g. KSD-optimal weights, or how often Stein
    thinning selected each draw): the moments of the weighted sample, normalised to sum 1
    within each chain, or over all draws when ``pooled``. With w the normalised weights,
    the location moment is sum_i w_i s_i and the spread moment
    -sum_i w_i (x_i - xbar_w) s_i with xbar_w = sum_i w_i x_i. Their standard errors are
    the MCSE of the mean of y_i = n w_i (t_i - m) over the n draws in their chain order
    (t_i the term, m the moment): sqrt(sum_i w_i^2 (t_i - m)^2) for independent draws
    (the self-normalised weighted mean's delta-method error, ignoring the weights'
    dependence on the draws), inflated by the terms' autocorrelation as ArviZ's MCSE is;
    with equal weights they are the unweighted MCSEs. A chain (or pool) whose weights are
    all zero gets NaN.

    ``standard_errors=False`` leaves the standard errors NaN (O(N d) instead of the
    MCSEs' O(N log N d)).
    """
    axes = (0, 1) if pooled else (1,)
    if weights is None:
        normalised = None

        def mean(values):
            return values.mean(axis=axes, keepdims=True)
    else:
        weights = np.asarray(weights, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            normalised = (weights / weights.sum(axis=axes, keepdims=True))[..., None]

        def mean(values):
            return np.sum(normalised * values, axis=axes, keepdims=True)

    with np.errstate(over="ignore", invalid="ignore"):
        spread_terms = -(draws - mean(draws)) * scores
        location, spread = mean(scores), mean(spread_terms)
    groups = [slice(None)] if pooled else [slice(c, c + 1) for c in range(draws.shape[0])]
    location_se = np.full((len(groups), draws.shape[2]), np.nan)
    spread_se = np.full_like(location_se, np.nan)
    if standard_errors and draws.shape[1] >= 4:
        location_terms = scores
        if normalised is not None:   # y_i = n w_i (t_i - m): its MCSE is the weighted one
            n = draws.shape[1] * (draws.shape[0] if pooled else 1)
            with np.errstate(over="ignore", invalid="ignore"):
                location_terms = n * normalised * (scores - location)
                spread_terms = n * normalised * (spread_terms - spread)
        for k, group in enumerate(groups):
            location_se[k] = mcse_mean(location_terms[group])
            spread_se[k] = mcse_mean(spread_terms[group])
    return SteinMoments(location=location.reshape(-1, draws.shape[2]),
                        spread=spread.reshape(-1, draws.shape[2]),
                        location_se=location_se, spread_se=spread_se,
                        constant_score=np.all(scores == 0.0, axis=(0, 1)))


@dataclass(kw_only=True)
class CurvatureSpread:
    """Each parameter's variance in the (weighted) draws against the one the target's
    curvature implies, shape (d,) (see :func:`curvature_spread`).

    ``ratio`` (1 for draws of p, below 1 for draws narrower than p), ``ratio_se`` (its
    MCSE), ``draws_variance`` (the weighted variance) and ``target_variance``
    ((M^-1 C)_kk, from all the draws); NaN where the Stein matrix is singular or the
    implied variance is not positive.
    """

    ratio: np.ndarray
    ratio_se: np.ndarray
    draws_variance: np.ndarray
    target_variance: np.ndarray

    @property
    def ratio_z(self):
        """The ratio's distance from 1 in standard errors (0 under p)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.ratio - 1.0) / self.ratio_se


def implied_variance(draws, scores):
    """The variance the target's curvature implies, T_k = (M^-1 C)_kk, from the
    (chain, draw, d) draws with equal weights, and each draw's influence on it: (T (d,),
    influence (n, d)) with n = chain * draw (see :func:`curvature_spread`). NaN (influence
    0) for parameters that do not move (variance at most (_ROUNDING eps)^2 times their
    mean square) or when M is singular. Time O(N d^2), memory O(N d + d^2)."""
    d = draws.shape[2]
    flat_x, flat_s = draws.reshape(-1, d), scores.reshape(-1, d)
    n = flat_x.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        centred_x = flat_x - flat_x.mean(axis=0)
        centred_s = flat_s - flat_s.mean(axis=0)
        covariance = centred_x.T @ centred_x / n
        mean_square = np.mean(flat_x**2, axis=0)
    target, influence = np.full(d, np.nan), np.zeros((n, d))
    moving = np.flatnonzero(np.diag(covariance) > (_ROUNDING * np.finfo(np.float64).eps) ** 2
                            * np.fmax(mean_square, np.finfo(np.float64).tiny))
    with np.errstate(over="ignore", invalid="ignore"):
        stein_matrix = -(centred_x.T @ centred_s) / n
    if not (np.all(np.isfinite(stein_matrix)) and np.all(np.isfinite(covariance))):
        return target, influence
    try:
        inverse = np.linalg.inv(stein_matrix[np.ix_(moving, moving)])
    except np.linalg.LinAlgError:
        return target, influence
    implied = inverse @ covariance[np.ix_(moving, moving)]
    target[moving] = np.diag(implied)
    x_moving = centred_x[:, moving]
    with np.errstate(over="ignore", invalid="ignore"):
        influence[:, moving] = (x_moving @ inverse.T) * (x_moving + centred_s[:, moving] @ implied)
    return target, influence


def curvature_spread(draws, scores, weights=None, *, implied=None):
    """:class:`CurvatureSpread` of the (chain, draw, d) draws, all chains pooled.

    With x~ and s~ the draws and scores centred at their means, the Stein matrix
    M = -mean_i x~_i s~_i^T is the identity for draws of p (Stein's identity with the
    test functions x_j, for each score s_k), and C = mean_i x~_i x~_i^T is the draws'
    covariance. For draws of a Gaussian q and any smooth p, Stein's lemma gives
    M = C Hbar with Hbar = E_q[-grad^2 log p], the target's curvature averaged over the
    draws, so M^-1 C = Hbar^-1 is the covariance a Gaussian of that curvature has. Its
    diagonal, T_k = (M^-1 C)_kk, estimated once from all the draws with equal weights,
    is the variance the target's curvature implies, and

        ratio_k = V_k / T_k,    V_k = sum_i w_i (x_ik - xbar_w,k)^2,

    compares with it the variance of the draws weighted by ``weights`` (normalised over
    all draws; None: equal weights, V = C_kk): 1 for draws of p, c^2 for draws of a
    Gaussian target shrunk towards their mean by c, and the marginal variance ratio
    Var_q / Var_p for a Gaussian approximation q of a Gaussian p (mean-field variational
    draws, whose diagonal M_kk is exactly 1 at the optimum, included). For a Gaussian
    target T is its variance exactly, whatever the draws. Estimating T from all the draws
    rather than from the weighted or selected ones keeps it from the distortions of a
    selection (Stein thinning picks points whose Stein matrix is no longer C Hbar).

    Standard errors: the influence of draw i on T_k is (g_k . x~_i) (x~_i + S^T s~_i)_k
    with g_k the k-th row of M^-1 and S = M^-1 C; that on V_k is
    n w_i ((x_ik - xbar_w,k)^2 - V_k); the ratio's influence follows by the quotient
    rule, and its MCSE is that of the mean of the influences in chain order (ArviZ's MCSE,
    as in :func:`stein_moments`). Parameters that do not move (variance at rounding
    level) get NaN and are left out of M for the others. ``implied``: the result of
    :func:`implied_variance` for these draws, if already computed (it does not depend on
    the weights). Time O(N d^2), memory O(N d + d^2).
    """
    n_chain, n_draw, d = draws.shape
    n = n_chain * n_draw
    flat_x = draws.reshape(-1, d)
    weights = np.ones(n) if weights is None else np.asarray(weights, float).reshape(-1)
    w = weights / weights.sum()
    with np.errstate(over="ignore", invalid="ignore"):
        weighted_centred = flat_x - w @ flat_x
        draws_variance = w @ weighted_centred**2
    target_variance, influence_target = (implied_variance(draws, scores) if implied is None
                                         else implied)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(target_variance > 0, draws_variance / target_variance, np.nan)
        influence_draws = (n * w)[:, None] * (weighted_centred**2 - draws_variance)
        terms = (influence_draws - ratio * influence_target) / target_variance
    ratio_se = np.full(d, np.nan)
    if n_draw >= 4:
        ratio_se = mcse_mean(np.where(np.isfinite(terms), terms, 0.0).reshape(n_chain, n_draw, d))
    return CurvatureSpread(ratio=ratio, ratio_se=np.where(np.isfinite(ratio), ratio_se, np.nan),
                           draws_variance=draws_variance, target_variance=target_variance)


def nearly_stuck(moments):
    """(chain,) bool: chains whose spread moment is at most ``STUCK_SPREAD`` in every
    parameter with a score (a chain whose draws are all one point has spread 0)."""
    active = ~moments.constant_score
    if not active.any():
        return np.zeros(moments.spread.shape[0], dtype=bool)
    return np.all(moments.spread[:, active] <= STUCK_SPREAD, axis=1)


def far_off(moments):
    """(chain,) bool: chains whose spread moment reaches ``FAR_SPREAD`` in absolute value in
    some parameter with a score."""
    active = ~moments.constant_score
    with np.errstate(invalid="ignore"):
        return np.any(np.abs(moments.spread[:, active]) >= FAR_SPREAD, axis=1)


def chain_shifts(draws, chains=None):
    """(chain, d): each chain's mean minus the mean of the other chains, in standard errors.

    z_ck = (mean_ck - mean_rest,k) / sqrt(mcse_ck^2 + mcse_rest,k^2), the MCSEs of the
    chain alone and of the other chains together (ArviZ's MCSE of a mean). ``chains``: the
    chains taking part (bool (chain,)); the others get NaN. One chain taking part: NaN.
    """
    n_chain, _, d = draws.shape
    chains = np.ones(n_chain, dtype=bool) if chains is None else np.asarray(chains, bool)
    out = np.full((n_chain, d), np.nan)
    members = np.flatnonzero(chains)
    if members.size < 2 or draws.shape[1] < 4:
        return out
    for c in members:
        rest = members[members != c]
        own, others = draws[c:c + 1], draws[rest]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[c] = ((own.mean(axis=(0, 1)) - others.mean(axis=(0, 1)))
                      / np.sqrt(mcse_mean(own) ** 2 + mcse_mean(others) ** 2))
    return out
