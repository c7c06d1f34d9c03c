"""Weighted summaries of draws (NumPy only): moments, quantiles, intervals, Kish ESS.

The statistics of ``steindiag.weighted_summary``; see its Notes for the formulas.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["weighted_quantiles", "weighted_hdi", "WeightedSummary", "weighted_summary"]


def weighted_quantiles(values, weights, probabilities):
    """Inverse of the weighted empirical CDF: the smallest x with F_w(x) >= p.

    values (N, m), weights (N,) summing to 1 -> (len(probabilities), m).
    """
    order = np.argsort(values, axis=0, kind="stable")
    sorted_values = np.take_along_axis(values, order, axis=0)
    cumulative = np.cumsum(weights[order], axis=0)
    out = np.empty((len(probabilities), values.shape[1]))
    n = values.shape[0]
    for col in range(values.shape[1]):
        cum = cumulative[:, col]
        # Guard the last step against the rounding of the cumulative sum.
        cum = cum / cum[-1]
        index = np.searchsorted(cum, probabilities, side="left")
        out[:, col] = sorted_values[np.minimum(index, n - 1), col]
    return out


def weighted_hdi(values, weights, prob):
    """Shortest interval [x_(i), x_(j)] of the weighted draws holding more than ``prob``, (2, m).

    j(i) is the first sorted draw with sum_(i <= k <= j) w_k > prob: for equal weights
    j = i + floor(prob N), ArviZ's rule for its HDI of unweighted draws.
    """
    n, m = values.shape
    out = np.empty((2, m))
    tiny = 1e-12
    for col in range(m):
        order = np.argsort(values[:, col], kind="stable")
        x = values[order, col]
        cum = np.cumsum(weights[order])
        cum = cum / cum[-1]
        before = np.concatenate([[0.0], cum[:-1]])
        last = np.searchsorted(cum, before + prob + tiny, side="right")
        valid = last < n
        if not valid.any():
            out[:, col] = x[0], x[-1]
            continue
        last = np.minimum(last, n - 1)
        width = np.where(valid, x[last] - x, np.inf)
        best = int(np.argmin(width))
        out[:, col] = x[best], x[last[best]]
    return out


@dataclass
class WeightedSummary:
    """The weighted statistics of every column (``weighted_summary`` returns one).

    Attributes: ``mean``, ``sd`` (m,), ``interval`` (2, m), ``mcse_mean`` (m,),
    ``quantiles`` (len(probabilities), m) or None, ``kish_ess`` (float).
    """

    mean: np.ndarray
    sd: np.ndarray
    interval: np.ndarray
    mcse_mean: np.ndarray
    quantiles: np.ndarray
    kish_ess: float


def weighted_summary(flat, weights, *, ci_prob, ci_kind, probabilities=None):
    """:class:`WeightedSummary` of the (N, m) values ``flat`` with weights (N,) summing to 1.

    sd is unbiased for reliability weights (the usual sample sd when w is uniform);
    ``mcse_mean`` is the standard error of a self-normalised weighted mean of independent
    draws; ``ci_kind`` "hdi" or "eti" at ``ci_prob``.
    """
    mean = weights @ flat
    sum_w2 = float(np.sum(weights**2))
    centred = flat - mean
    variance = ((weights @ (centred * centred)) / (1.0 - sum_w2) if sum_w2 < 1
                else np.full(flat.shape[1], np.nan))
    if ci_kind == "hdi":
        interval = weighted_hdi(flat, weights, ci_prob)
    else:
        interval = weighted_quantiles(flat, weights, [(1 - ci_prob) / 2, (1 + ci_prob) / 2])
    quantiles = (None if probabilities is None
                 else weighted_quantiles(flat, weights, probabilities))
    return WeightedSummary(mean, np.sqrt(variance), interval,
                           np.sqrt((weights * weights) @ (centred * centred)), quantiles,
                           1.0 / sum_w2)
