"""KSD of prepared draws: the engine's one pass, or the Nyström estimator; no labels here.

Data flow: ``SteinInput`` (draws and scores (chain, draw, d)) + a preconditioner fixed from
the pooled draws -> ``engine.local.stein_row_sums`` (one O(N^2 d) pass, tiled, threads) or
``methods.nystrom.nystrom_sums`` -> running sums per chain and pooled
(``stats.ksd.cumulative_sums``) -> :class:`KSDValues` (V- and U-statistics, i.i.d. floors).
"""

from dataclasses import dataclass

import numpy as np

from steindiag.engine.local import stein_row_sums
from steindiag.methods.nystrom import nystrom_sums
from steindiag.stats.ksd import cumulative_sums, ksd2_u, ksd_iid, ksd_v

__all__ = ["stein_sums", "KSDValues", "ksd_values"]


def stein_sums(prepared, pre, kernel, *, estimator="exact", n_landmarks=None, rng=None,
               path=True, method="auto", progress=None, backend=None):
    """Running sums of the Stein kernel, per chain and pooled, and the estimator's attrs.

    Returns ((per_chain (chain, n), pooled (n,), diag_chain (chain, n), diag_pooled (n,)),
    attrs): the sums of k_p over all ordered pairs of the first n draws and of its diagonal
    (``stats.ksd.cumulative_sums``). ``estimator="nystrom"`` draws its landmarks from
    ``rng``; ``path=False`` lets it skip the running sums (only the last entry is right).
    O(N^2 d) time and O(N d) memory for the exact pass; the N x N matrix is not stored.
    """
    if estimator == "nystrom":
        return nystrom_sums(prepared, pre, kernel, n_landmarks, rng, path, backend)
    sums = stein_row_sums(prepared.draws, prepared.scores, kernel=kernel, preconditioner=pre,
                          method=method, progress=progress, backend=backend)
    return cumulative_sums(sums), {"estimator": "exact"}


@dataclass(kw_only=True)
class KSDValues:
    """KSD of each chain and pooled, with the i.i.d. floors and the U-statistics.

    Attributes
    ----------
    ksd, ksd_iid, ksd2_u : ndarray (chain,)
        sqrt of the V-statistic of each chain; the floor sqrt(mean_i k_p(x_i, x_i) / N);
        the unbiased U-statistic of KSD^2 (may be negative).
    ksd_pooled, ksd_iid_pooled, ksd2_u_pooled : float
        The same for all draws together.
    """

    ksd: np.ndarray
    ksd_iid: np.ndarray
    ksd2_u: np.ndarray
    ksd_pooled: float
    ksd_iid_pooled: float
    ksd2_u_pooled: float


def ksd_values(sums, n_draw):
    """:class:`KSDValues` of all the draws from the running sums of :func:`stein_sums`."""
    per_chain, pooled, diag_chain, diag_pooled = sums
    n_total = per_chain.shape[0] * n_draw
    v_chain, v_pooled = per_chain[:, -1], pooled[-1]
    d_chain, d_pooled = diag_chain[:, -1], diag_pooled[-1]
    return KSDValues(
        ksd=ksd_v(v_chain, n_draw), ksd_iid=ksd_iid(d_chain, n_draw),
        ksd2_u=ksd2_u(v_chain, d_chain, n_draw), ksd_pooled=ksd_v(v_pooled, n_total),
        ksd_iid_pooled=ksd_iid(d_pooled, n_total), ksd2_u_pooled=ksd2_u(v_pooled, d_pooled,
                                                                        n_total))
