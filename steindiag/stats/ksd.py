"""KSD estimators from the engine's row sums (NumPy only): V, U, the i.i.d. floor, the path.

The engine returns, for every draw i of chain c, the sums of the Stein kernel k_p over
the earlier draws of the same chain (``row_same``), over the earlier draws of all chains
(``row_all``), and k_p(x_i, x_i) (``diagonal``). Every estimate of ``ksd`` and
``ksd_path`` is a cumulative sum of these and a square root; see the Background page of
the docs for the estimators.
"""

import numpy as np

__all__ = ["cumulative_sums", "ksd2_u", "ksd_iid", "ksd_v", "path_points"]


def cumulative_sums(sums):
    """Running numerators of the V-statistic and of the floor.

    Returns ``per_chain`` (chain, n): the sum of k_p over all ordered pairs of the first n
    draws of each chain; ``pooled`` (n,): the same over the first n draws of every chain;
    ``diag_chain`` (chain, n) and ``diag_pooled`` (n,): the sums of k_p(x_i, x_i) over them.
    """
    per_chain = np.cumsum(2.0 * sums.row_same + sums.diagonal, axis=1)
    pooled = np.cumsum((2.0 * sums.row_all + sums.diagonal).sum(axis=0))
    diag_chain = np.cumsum(sums.diagonal, axis=1)
    diag_pooled = np.cumsum(sums.diagonal.sum(axis=0))
    return per_chain, pooled, diag_chain, diag_pooled


def ksd_v(total, count):
    """sqrt(V-statistic) from the sum of k_p over all ``count``^2 ordered pairs.

    The V-statistic sums a positive semi-definite kernel, so ``total >= 0`` up to
    rounding; only that rounding is clipped.
    """
    return np.sqrt(np.maximum(total, 0.0)) / count


def ksd_iid(diag_total, count):
    """The i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / count) from the diagonal's sum."""
    return np.sqrt(diag_total) / count


def ksd2_u(total, diag_total, count):
    """Unbiased U-statistic of KSD^2: the mean of k_p over pairs of distinct draws (may be < 0)."""
    return (total - diag_total) / (count * (count - 1.0))


def path_points(n_draw, n_points):
    """Draw counts n of the running KSD: all of 1..n_draw, or ``n_points`` log-spaced ones."""
    if n_points is None:
        return np.arange(1, n_draw + 1)
    return np.unique(np.round(np.geomspace(1, n_draw, int(n_points))).astype(np.int64))
