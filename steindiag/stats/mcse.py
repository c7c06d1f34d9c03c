"""Monte Carlo standard error of a mean of autocorrelated draws, as ArviZ computes it (NumPy only).

``mcse_mean`` is ``arviz.mcse(method="mean")`` (ArviZ 0.x ``stats.diagnostics._mcse_mean``
and arviz-stats 1.x ``base.diagnostics._mcse_mean``, the same algorithm): split every chain
in halves, estimate the effective sample size of the mean with Geyer's initial monotone
sequence of the multi-chain autocorrelations (Vehtari et al. 2021), and return
sd / sqrt(ESS) with the sd of all draws (ddof = 1). Vectorised over trailing axes: new
axes go last, as in arviz-stats' array layer.
"""

import numpy as np
from scipy.fft import next_fast_len

__all__ = ["ess_mean", "mcse_mean"]


# Columns whose FFTs are computed together (bounds the memory of the batched transform).
_BATCH_ELEMENTS = 1 << 20


def _autocovariance(values):
    """Autocovariance of each row at every lag (FFT), divided by n as ArviZ does: (..., draw)."""
    n = values.shape[-1]
    size = next_fast_len(2 * n)
    centred = values - values.mean(axis=-1, keepdims=True)
    transform = np.fft.rfft(centred, n=size, axis=-1)
    transform *= np.conjugate(transform)
    return np.fft.irfft(transform, n=size, axis=-1)[..., :n] / n


def _ess(values, acov=None):
    """ESS of one (chain, draw) array: ArviZ's ``_ess`` (Geyer's initial monotone sequence);
    ``acov``: its autocovariances when computed already."""
    if np.max(values) - np.min(values) < np.finfo(float).resolution:
        return float(values.size)
    n_chain, n_draw = values.shape
    if acov is None:
        acov = _autocovariance(values)
    chain_mean = values.mean(axis=1)
    mean_var = np.mean(acov[:, 0]) * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus += np.var(chain_mean, ddof=1)
    mean_acov = acov.mean(axis=0)
    rho = np.zeros(n_draw)
    rho_even = 1.0
    rho[0] = rho_even
    rho_odd = 1.0 - (mean_var - mean_acov[1]) / var_plus
    rho[1] = rho_odd
    t = 1
    while t < n_draw - 3 and rho_even + rho_odd > 0.0:
        rho_even = 1.0 - (mean_var - mean_acov[t + 1]) / var_plus
        rho_odd = 1.0 - (mean_var - mean_acov[t + 2]) / var_plus
        if rho_even + rho_odd >= 0:
            rho[t + 1] = rho_even
            rho[t + 2] = rho_odd
        t += 2
    max_t = t - 2
    if rho_even > 0:
        rho[max_t + 1] = rho_even
    t = 1
    while t <= max_t - 2:
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = (rho[t - 1] + rho[t]) / 2.0
            rho[t + 2] = rho[t + 1]
        t += 2
    total = n_chain * n_draw
    tau = -1.0 + 2.0 * np.sum(rho[: max_t + 1]) + np.sum(rho[max_t + 1: max_t + 2])
    tau = max(tau, 1.0 / np.log10(total))
    if np.isnan(rho).any():
        return np.nan
    return total / tau


def _split_chains(values):
    """(..., chain, draw) -> (..., 2 chain, draw // 2): each chain's first and last halves."""
    half = values.shape[-1] // 2
    return np.concatenate([values[..., :half], values[..., values.shape[-1] - half:]],
                          axis=-2)


def ess_mean(values):
    """Effective sample size of the mean of each column, as ``arviz.ess(method="mean")``.

    Parameters
    ----------
    values : array_like, shape (chain, draw, ...)

    Returns
    -------
    ndarray, shape (...)
        NaN for a column with a non-finite value, or fewer than 4 draws per chain.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim < 2:
        raise ValueError(f"values must have shape (chain, draw, ...); got shape {values.shape}.")
    n_chain, n_draw = values.shape[:2]
    rest = values.shape[2:]
    flat = values.reshape(n_chain, n_draw, -1)
    out = np.full(flat.shape[2], np.nan)
    if n_draw >= 4:
        # Column by column as ArviZ does, with the split chains laid out contiguously and
        # their FFTs batched (the same numbers as one column at a time).
        finite = np.flatnonzero(np.all(np.isfinite(flat), axis=(0, 1)))
        batch = max(1, _BATCH_ELEMENTS // (2 * n_chain * next_fast_len(n_draw)))
        for start in range(0, finite.size, batch):
            columns = finite[start:start + batch]
            split = _split_chains(np.ascontiguousarray(np.moveaxis(flat[:, :, columns], 2, 0)))
            acov = _autocovariance(split)
            for j, k in enumerate(columns):
                out[k] = _ess(split[j], acov[j])
    return out.reshape(rest)


def mcse_mean(values):
    """Monte Carlo standard error of the mean of each column, as ``arviz.mcse(method="mean")``.

    Parameters
    ----------
    values : array_like, shape (chain, draw, ...)

    Returns
    -------
    ndarray, shape (...)
        sd / sqrt(ESS_mean), sd over all draws with ddof = 1.

    Notes
    -----
    ESS_mean = N / tau with tau = -1 + 2 sum_t rho_t, rho_t the multi-chain
    autocorrelation of the split chains truncated by Geyer's initial monotone sequence
    (Vehtari, Gelman, Simpson, Carpenter & Buerkner 2021, Bayesian Anal.). Time
    O(N log N) per column (FFT), memory O(N).
    """
    values = np.asarray(values, dtype=np.float64)
    ess = ess_mean(values)
    n_chain, n_draw = values.shape[:2]
    flat = values.reshape(n_chain * n_draw, *values.shape[2:])
    sd = np.std(flat, axis=0, ddof=1)
    return sd / np.sqrt(ess)
