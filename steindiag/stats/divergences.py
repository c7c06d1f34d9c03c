"""Where the sampler's divergent transitions sit among the draws (NumPy only).

A divergent transition is flagged on the draw the sampler returned at that iteration, a
point of the trajectory built before the integrator blew up: near the region the sampler
could not explore (the neck of a funnel, where a hierarchy's scale is small). Per
parameter, :func:`divergence_shift` measures how far the divergent draws sit from the
others, as a standardised difference of means; a parameter far out (named at a
Bonferroni level by ``stats.verdict.named``) says where the sampler struggled, and
divergences that sit nowhere in particular are the ones :func:`steindiag.diagnose` can
read in context. See the Background page of the docs, "Divergences in context".
"""

import numpy as np

from steindiag.stats.mcse import mcse_mean

__all__ = ["divergence_shift", "per_thousand"]


def divergence_shift(draws, diverging):
    """(d,): the divergent draws' mean minus the other draws' mean, in standard errors.

    Parameters
    ----------
    draws : ndarray (chain, draw, d)
        The draws, in the space they were sampled in (a PyMC model's unconstrained space).
    diverging : ndarray of bool (chain, draw)
        The sampler's divergence flag of each draw.

    Returns
    -------
    ndarray (d,)
        z_k = (mean_div,k - mean_rest,k) / sqrt(var_rest,k / m + mcse_k^2), for the m
        divergent draws and the rest: the divergent draws' mean read as a mean of m
        independent draws of the rest's marginal (var_rest,k, ddof = 1), and the rest's
        mean with the MCSE of the mean of all draws (``stats.mcse.mcse_mean``). About
        N(0, 1) when the divergent draws are a random subset; divergences clustered in
        time (a chain stuck in a funnel's neck) make it larger in absolute value, the
        cautious direction. NaN with no divergent draw, or with fewer than two others; a
        parameter constant over the other draws: NaN.
    """
    draws = np.asarray(draws, dtype=np.float64)
    diverging = np.asarray(diverging, dtype=bool)
    n_chain, n_draw, d = draws.shape
    if diverging.shape != (n_chain, n_draw):
        raise ValueError(f"diverging must have shape (chain, draw) = ({n_chain}, {n_draw}); "
                         f"got {diverging.shape}.")
    m = int(diverging.sum())
    if m == 0 or diverging.size - m < 2:
        return np.full(d, np.nan)
    divergent, rest = draws[diverging], draws[~diverging]
    se_rest = mcse_mean(draws) if n_draw >= 4 else np.sqrt(rest.var(axis=0, ddof=1)
                                                           / rest.shape[0])
    variance = rest.var(axis=0, ddof=1) / m + se_rest ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (divergent.mean(axis=0) - rest.mean(axis=0)) / np.sqrt(variance)
    return np.where(rest.var(axis=0) > 0.0, z, np.nan)


def per_thousand(divergences, n_draw):
    """Divergent transitions per 1000 draws: 1000 * divergences / n_draw."""
    return 1000.0 * np.asarray(divergences, dtype=np.float64) / float(n_draw)
