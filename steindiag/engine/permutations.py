"""Numba kernel of the test of agreement among chains: within-group sums under relabellings.

Nothing here imports xarray or PyMC, and nothing validates input. The caller has the
U x U sums of the base kernel between blocks of draws (``multi_products.
base_kernel_unit_sums``) and the matching numbers of pairs; a relabelling assigns each
block to a chain, and the test's statistic needs only the sums over pairs of blocks
that the relabelling puts in the same chain. ``same_label_sums`` visits every pair of
blocks: O(P U^2) time for P relabellings, no memory beyond the (P,) results.
``grouped_label_sums`` visits only the pairs that share a label (a counting sort of each
relabelling first): O(P (U + U^2 / C)) time for C labels, and it reads the pair counts
from the blocks' sizes instead of a U x U matrix (the streamed test of many chains).
"""

import numba as nb
import numpy as np

__all__ = ["same_label_sums", "grouped_label_sums", "within_sums", "grouped_within_sums"]


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


@nb.njit(cache=True, nogil=True)
def grouped_label_sums(lower, sizes, labels, n_labels, out_sums, out_counts):
    """out[p] <- sums over pairs u != v of blocks with labels[p, u] == labels[p, v].

    lower : float64 (U, U); lower[u, v] for u > v is the kernel sum between blocks u and
        v (only the strict lower triangle is read)
    sizes : float64 (U,), draws per block (pairs between u and v: sizes[u] * sizes[v])
    labels : int64 (P, U), values in 0 .. n_labels - 1
    out_sums, out_counts : float64 (P,)

    Each relabelling's blocks are sorted by label (a stable counting sort), then the pairs
    inside each label are summed in order.
    """
    n_perm, n_units = labels.shape
    count = np.empty(n_labels + 1, dtype=np.int64)
    fill = np.empty(n_labels, dtype=np.int64)
    order = np.empty(n_units, dtype=np.int64)
    for p in range(n_perm):
        count[:] = 0
        for u in range(n_units):
            count[labels[p, u] + 1] += 1
        for c in range(n_labels):
            count[c + 1] += count[c]
        fill[:] = count[:-1]
        for u in range(n_units):
            label = labels[p, u]
            order[fill[label]] = u
            fill[label] += 1
        total = 0.0
        pairs = 0.0
        for c in range(n_labels):
            for a in range(count[c], count[c + 1]):
                u = order[a]
                for b in range(count[c], a):
                    v = order[b]     # v < u: blocks are placed in increasing order
                    total += lower[u, v]
                    pairs += sizes[u] * sizes[v]
        out_sums[p] = total
        out_counts[p] = pairs


def grouped_within_sums(lower, sizes, labels, n_labels):
    """(sums, counts) over same-label pairs for every row of ``labels`` (P, U), from the
    strict lower triangle of the block sums and the blocks' sizes."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    out_sums = np.empty(labels.shape[0])
    out_counts = np.empty(labels.shape[0])
    grouped_label_sums(lower, np.ascontiguousarray(sizes, dtype=np.float64), labels,
                       np.int64(n_labels), out_sums, out_counts)
    return out_sums, out_counts
