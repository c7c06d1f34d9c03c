"""Integrated autocorrelation time of chains (array layer, NumPy and scipy.special).

Used by the tests on MCMC output to size what must stay together: the blocks of the
thinned and wild bootstraps (``steindiag.gof``) and the blocks of the permutation tests
(``steindiag.mmd``).
"""

import numpy as np
from scipy.special import ndtri

__all__ = ["alternated", "average_ranks", "chains_autocorrelation_time", "folded_ranks",
           "integrated_autocorrelation_time", "memory_time"]

# Columns transformed at a time: the FFT buffers are about 3 * size * _COLUMNS doubles
# (size = the next power of two above 2 n), so long chains with many columns stay small.
_MAX_BUFFER = 1 << 22


def _autocorrelations(columns, size):
    """rho (n, k) of the columns (n, k) at lags 0..n-1 (FFT), and which are not constant."""
    n = columns.shape[0]
    centred = columns - columns.mean(axis=0)
    spectrum = np.fft.rfft(centred, n=size, axis=0)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), n=size, axis=0)[:n]
    varying = acov[0] > 0
    rho = np.zeros_like(acov)
    rho[:, varying] = acov[:, varying] / acov[0, varying]
    return rho, varying


def _geyer(rho):
    """tau = -1 + 2 sum of Geyer's initial monotone sequence of each column of rho (n, k).

    Pairs Gamma_m = rho_(2m) + rho_(2m+1) are summed while positive, forced
    non-increasing; at least 1.
    """
    n_pairs = rho.shape[0] // 2
    gamma = rho[0 : 2 * n_pairs : 2] + rho[1 : 2 * n_pairs : 2]
    if n_pairs == 0:
        return np.ones(rho.shape[1])
    positive = gamma > 0
    # Number of leading positive pairs of each column.
    stop = np.where(positive.all(axis=0), n_pairs, np.argmin(positive, axis=0))
    gamma = np.minimum.accumulate(gamma, axis=0)
    keep = np.arange(n_pairs)[:, None] < stop[None, :]
    return np.maximum(1.0, -1.0 + 2.0 * np.where(keep, gamma, 0.0).sum(axis=0))


def _chunks(n_columns, size):
    step = max(1, _MAX_BUFFER // max(size, 1))
    for start in range(0, n_columns, step):
        yield slice(start, min(start + step, n_columns))


def chains_autocorrelation_time(x):
    """tau of each column of chains x (chain, draw, k), from their mean autocorrelation.

    The autocorrelation of each column is averaged over the chains (each chain's own,
    about its own mean) before Geyer's initial monotone sequence is summed, so the
    estimate has about 1 / chain the variance of one chain's. Chains of one sampler on one
    target share their autocorrelation; a chain that mixes much more slowly than the
    others raises the mean in proportion. Constant columns of a chain are left out of
    its mean (tau = 1 where every chain is constant).
    """
    x = np.asarray(x, dtype=np.float64)
    n_chain, n, k = x.shape
    size = 1 << int(np.ceil(np.log2(2 * n)))
    tau = np.ones(k)
    for cols in _chunks(k, size * n_chain):
        total = 0.0
        count = 0
        for ch in range(n_chain):
            rho, varying = _autocorrelations(x[ch][:, cols], size)
            total = total + rho
            count = count + varying
        found = count > 0
        if found.any():
            mean = total[:, found] / count[found]
            tau_cols = tau[cols]
            tau_cols[found] = _geyer(mean)
            tau[cols] = tau_cols
    return tau


def alternated(x):
    """(-1)^t x_t of chains x (chain, draw, k): an antithetic chain's memory made positive.

    Where draws alternate in sign (HMC, NUTS), rho_k of x is about (-1)^k |rho_k|, so
    Geyer's tau of x is at most 1 however long the alternation lasts, while the
    alternated series has rho_k = (-1)^k rho_k = |rho_k|: its tau measures how long the
    antithetic dependence lasts, as tau of x does for a positively correlated chain (a
    Gaussian AR(1) chain with coefficient -r gives the tau of one with +r).
    """
    x = np.asarray(x, dtype=np.float64)
    return x * np.where(np.arange(x.shape[1]) % 2 == 1, -1.0, 1.0)[None, :, None]


def average_ranks(a):
    """Ranks 1..S of each column of ``a`` (S, k), ties given their average rank (as
    ``scipy.stats.rankdata``'s "average", without importing scipy.stats at import time)."""
    a = np.asarray(a, dtype=np.float64)
    ranks = np.empty_like(a)
    for j in range(a.shape[1]):
        order = np.argsort(a[:, j], kind="mergesort")
        ordered = a[order, j]
        first = np.r_[True, ordered[1:] != ordered[:-1]]
        group = np.cumsum(first)                       # 1-based tie group of each value
        bounds = np.r_[np.flatnonzero(first), ordered.size]
        ranks[order, j] = 0.5 * (bounds[group] + bounds[group - 1] + 1)
    return ranks


def folded_ranks(x):
    """Folded, rank-normalised columns of chains x (chain, draw, k): a second-order feature.

    z = Phi^-1((r - 3/8) / (S + 1/4)), r the rank (ties averaged) of |x - median| among
    all S = chain * draw values of the column (Vehtari et al. 2021's folded rank
    normalisation). Even in x and bounded in effect whatever x's tails: where the draws
    are antithetic their squares, and the Stein kernel's second-order terms, can stay
    positively autocorrelated, and this feature's autocorrelation shows it, also for
    heavy-tailed draws whose squares have no variance.
    """
    x = np.asarray(x, dtype=np.float64)
    n_chain, n, k = x.shape
    flat = x.reshape(-1, k)
    ranks = average_ranks(np.abs(flat - np.median(flat, axis=0)))
    return ndtri((ranks - 0.375) / (flat.shape[0] + 0.25)).reshape(n_chain, n, k)


def memory_time(draws, scores):
    """The largest tau (``chains_autocorrelation_time``) of the chains' draws and scores
    (chain, draw, d), of the same alternated in sign (:func:`alternated`) and of the
    draws' folded ranks (:func:`folded_ranks`): how far apart draws must be for every
    term of the Stein kernel to be nearly uncorrelated, whether its dependence is
    positive (tau of x), alternating (antithetic chains: tau of (-1)^t x) or only in
    second-order terms (tau of the folded ranks). At least 1.
    """
    first = np.concatenate([draws, scores], axis=2)
    return float(max(chains_autocorrelation_time(first).max(),
                     chains_autocorrelation_time(alternated(first)).max(),
                     chains_autocorrelation_time(folded_ranks(draws)).max()))


def integrated_autocorrelation_time(x):
    """tau = 1 + 2 sum_(k >= 1) rho_k of each column of x (draw, k), Geyer's estimator.

    Parameters
    ----------
    x : ndarray (T, k)
        One chain, T >= 2 draws of k scalar summaries.

    Returns
    -------
    ndarray (k,)
        tau of each column, at least 1 (an antithetic chain is treated as independent);
        a constant column has tau = 1. The effective sample size is T / tau.

    Notes
    -----
    Autocorrelations from the FFT (O(T log T)), a block of columns at a time (the
    buffers stay a few tens of MB for long chains with many columns); the sum is
    Geyer's (1992) initial monotone sequence: pairs Gamma_m = rho_(2m) + rho_(2m+1) are
    summed while positive and forced non-increasing, tau = -1 + 2 sum_m Gamma_m.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    tau = np.ones(x.shape[1])
    for cols in _chunks(x.shape[1], size):
        rho, varying = _autocorrelations(x[:, cols], size)
        tau_cols = tau[cols]
        tau_cols[varying] = _geyer(rho[:, varying])
        tau[cols] = tau_cols
    return tau
