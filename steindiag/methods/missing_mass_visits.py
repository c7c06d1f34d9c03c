"""The search's third step: which modes the draws visited, and the p-value of the others.

Two rules, then short p-invariant chains from each mode they leave (``visited_modes``);
the unvisited modes' share of p's mass (``unvisited_share``) and its binomial p-value.
"""
import numpy as np
from scipy import linalg, special

from steindiag.methods.missing_mass_modes import mahalanobis_sq
from steindiag.stats.autocorrelation import integrated_autocorrelation_time

__all__ = ["visited_modes", "unvisited_share", "effective_draws", "deficit_pvalue"]

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
# Short chains run at most at this many candidates (largest Laplace mass first; the
# others are not counted), the first half of their steps adapting the step size towards
# this acceptance.
_MAX_CANDIDATES = 16
_TARGET_ACCEPTANCE = 0.574
# A candidate is joined to the draws when at least this share of its chains' kept
# points lies within the draws' range (whitened distance from the draws' mean at most
# the _RANGE_QUANTILE quantile of the draws' own distances).
_JOIN_SHARE = 0.5
# Draws used for the reciprocal importance sampling estimate of the draws' mass.
_N_MASS_DRAWS = 1000


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


def effective_draws(draws):
    n_chain, n_draw, _ = draws.shape
    return float(sum(n_draw / integrated_autocorrelation_time(draws[ch]).max()
                     for ch in range(n_chain)))


def deficit_pvalue(count, n_total, effective, mass):
    """P(at most ``count`` of ``effective`` draws from p land in the unvisited cores).

    The cores hold ``_VISIT_QUANTILE * mass`` of p. The observed count is scaled to the
    effective number of draws (count * ESS / N); a binomial tail, (1 - mass / 2)^ESS
    when no draw landed there.
    """
    if mass <= 0.0:
        return 1.0
    n_eff = max(int(np.floor(effective)), 1)
    scaled = int(np.floor(count * effective / n_total))
    return float(special.bdtr(scaled, n_eff, min(_VISIT_QUANTILE * mass, 1.0)))  # binomial cdf


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



def visited_modes(counted, draws, modes, relative, rng, n_short, short_steps):
    """Which ``modes`` the draws visited: by the two rules, then by short chains.

    Returns visits and within_chain (mode, chain), visited, joined and joined_share
    (mode,), the number of candidates tested and the short chains' acceptance.
    """
    n_chain, n_draw, d = draws.shape
    flat = draws.reshape(-1, d)
    radius_sq = special.chdtri(d, 1.0 - _VISIT_QUANTILE)   # the chi^2_d quantile
    visits = np.zeros((len(modes), n_chain), dtype=np.int64)
    for k, mode in enumerate(modes):
        inside = mahalanobis_sq(flat, mode["point"], mode["precision"]) <= radius_sq
        visits[k] = inside.reshape(n_chain, n_draw).sum(axis=1)
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
    return visits, within, visited, joined, joined_share, candidates.size, short_acceptance


def unvisited_share(counted, flat, rng, log_mass, relative, visited):
    """(share of p's mass in the unvisited modes, log mass of the draws' region or NaN).

    The smaller of their relative mass and their Laplace mass against the mass of the
    region the draws cover (reciprocal importance sampling), not only the modes found.
    """
    unvisited_mass = float(relative[~visited].sum()) if relative.size else 0.0
    log_mass_draws = np.nan
    if unvisited_mass > 0.0:
        log_mass_draws = _log_mass_of_draws(counted, flat, rng)
        if np.isfinite(log_mass_draws):
            log_unvisited = special.logsumexp(log_mass[~visited])
            against_draws = float(np.exp(log_unvisited - np.logaddexp(log_unvisited,
                                                                      log_mass_draws)))
            unvisited_mass = min(unvisited_mass, against_draws)
    return unvisited_mass, log_mass_draws
