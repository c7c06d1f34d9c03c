"""Numba kernel of the test of agreement among chains: within-group sums under relabellings.

Nothing here imports xarray or PyMC, and nothing validates input. The caller has the
U x U sums of the base kernel between blocks of draws (``multi_products.
base_kernel_unit_sums``) and the matching numbers of pairs; a relabelling assigns each
block to a chain, and the test's statistic needs only the sums over pairs of blocks
that the relabelling puts in the same chain. O(P U^2) time for P relabellings, no
memory beyond the (P,) results.
"""

import numba as nb
import numpy as np

__all__ = ["same_label_sums"]


@nb.njit(cache=True, parallel=True, nogil=True)
def same_label_sums(sums, counts, labels, out_sums, out_counts):
    """out[p] <- sum of sums[u, v] (and counts[u, v]) over u < v with labels[p, u] == labels[p, v].

    sums, counts : float64 (U, U), symmetric (only the upper triangle is read)
    labels : int64 (P, U)
    out_sums, out_counts : float64 (P,)
    """
    n_perm, n_units = labels.shape
    for p in nb.prange(n_perm):
        total = 0.0
        pairs = 0.0
        for u in range(n_units):
            label = labels[p, u]
            for v in range(u + 1, n_units):
                if labels[p, v] == label:
                    total += sums[u, v]
                    pairs += counts[u, v]
        out_sums[p] = total
        out_counts[p] = pairs


def within_sums(sums, counts, labels):
    """(sums, counts) over same-label pairs for every row of ``labels`` (P, U)."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    out_sums = np.empty(labels.shape[0])
    out_counts = np.empty(labels.shape[0])
    same_label_sums(np.ascontiguousarray(sums, dtype=np.float64),
                    np.ascontiguousarray(counts, dtype=np.float64), labels, out_sums,
                    out_counts)
    return out_sums, out_counts
