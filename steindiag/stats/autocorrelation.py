"""Integrated autocorrelation time of chains (array layer, NumPy only).

Used by the tests on MCMC output to size what must stay together: the sign chain of
the wild bootstrap (``steindiag.gof``) and the blocks of the permutation test
(``steindiag.mmd``).
"""

import numpy as np

__all__ = ["chains_autocorrelation_time", "integrated_autocorrelation_time"]


def _autocorrelation(column, size):
    """Autocorrelation of one column at lags 0..n-1 (FFT), or None for a constant column."""
    n = column.shape[0]
    centred = column - column.mean()
    spectrum = np.fft.rfft(centred, n=size)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), n=size)[:n]
    if not acov[0] > 0:
        return None
    return acov / acov[0]


def _geyer(rho):
    """tau = -1 + 2 sum of Geyer's initial monotone sequence of rho (at least 1)."""
    n_pairs = rho.shape[0] // 2
    gamma = rho[0 : 2 * n_pairs : 2] + rho[1 : 2 * n_pairs : 2]
    positive = gamma > 0
    stop = n_pairs if positive.all() else int(np.argmin(positive))
    gamma = np.minimum.accumulate(gamma[:stop])
    return max(1.0, -1.0 + 2.0 * gamma.sum())


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
    for col in range(k):
        found = [_autocorrelation(x[ch, :, col], size) for ch in range(n_chain)]
        found = [rho for rho in found if rho is not None]
        if found:
            tau[col] = _geyer(np.mean(found, axis=0))
    return tau


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
    Autocorrelations from the FFT (O(T log T)); the sum is Geyer's (1992) initial
    monotone sequence: pairs Gamma_m = rho_(2m) + rho_(2m+1) are summed while positive
    and forced non-increasing, tau = -1 + 2 sum_m Gamma_m.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    tau = np.ones(x.shape[1])
    for col in range(x.shape[1]):
        # One column at a time: the FFT's buffers (about 6 size doubles) stay small next
        # to x for long chains with many columns (10^6 draws: 50 MB, not 50 MB a column).
        centred = x[:, col] - x[:, col].mean()
        spectrum = np.fft.rfft(centred, n=size)
        acov = np.fft.irfft(spectrum * np.conj(spectrum), n=size)[:n]
        if not acov[0] > 0:
            continue
        rho = acov / acov[0]
        n_pairs = n // 2
        gamma = rho[0 : 2 * n_pairs : 2] + rho[1 : 2 * n_pairs : 2]
        positive = gamma > 0
        stop = n_pairs if positive.all() else int(np.argmin(positive))
        gamma = np.minimum.accumulate(gamma[:stop])
        tau[col] = max(1.0, -1.0 + 2.0 * gamma.sum())
    return tau
