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

__all__ = ["SteinMoments", "stein_moments", "nearly_stuck", "far_off", "chain_shifts",
           "STUCK_SPREAD", "FAR_SPREAD"]

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


def stein_moments(draws, scores, *, pooled=False, standard_errors=True):
    """:class:`SteinMoments` of each chain of the (chain, draw, d) draws and scores, or of
    all chains together (``pooled``: shape (1, d), the multi-chain MCSEs).

    ``standard_errors=False`` leaves the standard errors NaN (O(N d) instead of the
    MCSEs' O(N log N d)).
    """
    axes = (0, 1) if pooled else (1,)
    centred = draws - draws.mean(axis=axes, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        spread_terms = -centred * scores
    groups = [slice(None)] if pooled else [slice(c, c + 1) for c in range(draws.shape[0])]
    location_se = np.full((len(groups), draws.shape[2]), np.nan)
    spread_se = np.full_like(location_se, np.nan)
    if standard_errors and draws.shape[1] >= 4:
        for k, group in enumerate(groups):
            location_se[k] = mcse_mean(scores[group])
            spread_se[k] = mcse_mean(spread_terms[group])
    mean = (lambda values: values.mean(axis=(0, 1))[None]) if pooled else (
        lambda values: values.mean(axis=1))
    return SteinMoments(location=mean(scores), spread=mean(spread_terms),
                        location_se=location_se, spread_se=spread_se,
                        constant_score=np.all(scores == 0.0, axis=(0, 1)))


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
