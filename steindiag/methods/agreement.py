"""The test that all chains agree, streamed for many blocks: O(N d + U^2) memory, U <= 2048.

``methods.mmd`` holds the kernel sums between every pair of blocks of every chain (U x U,
one copy per parallel part) and relabels the blocks with a pass over all U^2 pairs. With
many short chains U grows with the draws (1000 chains of 60 draws in blocks of 5: U =
12,000, and 8.6 GiB of partial sums). Here, used by ``methods.mmd`` above
``DENSE_MAX_UNITS`` blocks:

every other block of each chain (the blocks the test reads) -> merged into at most
``MAX_UNITS / C`` units per chain, at least 2 (:func:`plan_units`) -> the used draws only,
one pass of kernel sums between units with each unit's row computed by one task
(``engine.multi_products.base_kernel_unit_rows``: one U x U array, no copy per thread)
-> relabellings of the units among the chains, each costing only its same-chain pairs
(``engine.permutations.grouped_label_sums``) -> the statistic and its p-value
(:func:`streamed_agreement`).

The statistic is ``stats.mmd.agreement_statistic`` over the pairs of draws in different
units; with no merging (units = used blocks) that is the statistic of ``methods.mmd``.
Merging leaves out the pairs of blocks merged into one unit: they are in the same chain
under every relabelling, so they say nothing about which chain a unit belongs to.
"""

from dataclasses import dataclass

import numpy as np

from steindiag.engine.memory import check_memory
from steindiag.engine.multi_products import base_kernel_unit_rows
from steindiag.engine.permutations import grouped_within_sums
from steindiag.engine.progress import CONSERVATIVE_FLOPS, progress_bar
from steindiag.stats.mmd import agreement_statistic

__all__ = ["MAX_UNITS", "Units", "plan_units", "unit_row_sums", "streamed_agreement"]

# At most this many units in all (more only when 2 per chain exceed it): the U x U sums
# take 8 U^2 bytes, 32 MiB at 2048.
MAX_UNITS = 2048
# Relabellings drawn at a time (bounds the (chunk, U) labels).
_RELABEL_CHUNK = 256


@dataclass(kw_only=True)
class Units:
    """The units of the streamed test: every other block of each chain, merged.

    Attributes
    ----------
    rows : ndarray of int64 (n_used,)
        The pooled rows the test reads, unit after unit.
    unit_start : ndarray of int64 (U + 1,)
        Unit u holds ``rows[unit_start[u]:unit_start[u + 1]]``.
    unit_chain : ndarray of int64 (U,)
        The chain of each unit.
    per_chain : int
        Units per chain.
    blocks_per_unit : int
        Used blocks merged into each unit (1: none merged).
    left_out : int
        Used blocks left out at the end of each chain (fewer than ``blocks_per_unit``).
    """

    rows: np.ndarray
    unit_start: np.ndarray
    unit_chain: np.ndarray
    per_chain: int
    blocks_per_unit: int
    left_out: int


def _merge(used, most):
    """(units per chain m, blocks per unit b): m = min(used // b, most) equal units of b
    consecutive used blocks, b chosen to leave out the fewest used blocks (m b of the
    ``used`` are kept; the smallest such b), with m >= 2."""
    best = None
    for b in range(1, used // 2 + 1):
        m = min(used // b, most)
        if m >= 2 and (best is None or used - m * b < used - best[0] * best[1]):
            best = (m, b)
    return best


def plan_units(block_start, n_chain, n_blocks, max_units):
    """:class:`Units` from blocks (``block_start`` (C n_blocks + 1,), ``n_blocks`` per chain).

    The blocks used are 0, 2, 4, ... of each chain (as in ``methods.mmd``): k = ceil(n_blocks
    / 2) of them. With C k <= ``max_units`` each is a unit. Otherwise each chain's used
    blocks are merged into m >= 2 units of b consecutive used blocks each, m at most
    max(2, max_units // C), b chosen to leave out the fewest used blocks (the last k - m b
    of each chain, fewer than b); the same in every chain, so that units at the same
    place have the same size. Needs n_blocks >= 3.
    """
    used = (n_blocks + 1) // 2
    per_chain, per_unit = _merge(used, max(2, max_units // n_chain))
    kept = per_chain * per_unit
    # Used block j of chain c is block c * n_blocks + 2 j, in unit c * per_chain + j // b.
    block = (np.arange(n_chain)[:, None] * n_blocks + 2 * np.arange(kept)[None, :]).ravel()
    first = block_start[block]
    sizes = block_start[block + 1] - first
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.repeat(first - offsets[:-1], sizes) + np.arange(offsets[-1])
    unit_start = offsets[::per_unit].astype(np.int64)
    return Units(rows=rows.astype(np.int64), unit_start=unit_start,
                 unit_chain=np.repeat(np.arange(n_chain, dtype=np.int64), per_chain),
                 per_chain=int(per_chain), blocks_per_unit=int(per_unit),
                 left_out=int(used - kept))


def unit_row_sums(points, unit_start, preconditioner, kernel, progress=False, desc=None):
    """L (U, U): L[u, v] for u > v is the sum of k(x_i, x_j) over i in unit u, j in unit v;
    L[u, u] the sum over pairs i > j inside u; above the diagonal, zeros.

    One pass over all pairs of ``points`` (N, d), units stored one after the other: O(N^2
    d) time, O(N d + U^2) memory (``engine.multi_products.base_kernel_unit_rows``).
    """
    draws_k, _ = preconditioner.to_kernel_coordinates(points, np.zeros_like(points))
    draws_t = np.ascontiguousarray(draws_k.T[None, :, :])
    n_units = unit_start.shape[0] - 1
    lower = np.zeros((n_units, n_units))
    n, d = points.shape
    pairs = n * (n - 1) // 2
    with progress_bar(progress, pairs, pairs * (3 * d + 10) / CONSERVATIVE_FLOPS,
                      desc=desc or "mmd (kernel sums)") as bar:
        base_kernel_unit_rows(draws_t, preconditioner.a, preconditioner.isotropic,
                              kernel.numba_kind, kernel.numba_params,
                              np.ascontiguousarray(unit_start, dtype=np.int64), lower, bar=bar)
    return lower


def _pvalue(lower, sizes, unit_chain, n_chain, n_permutations, rng, bar):
    """(observed statistic, p-value) from the strict lower triangle of the unit sums."""
    total = float(lower.sum() - np.trace(lower))
    total_pairs = float((sizes.sum() ** 2 - np.sum(sizes**2)) / 2.0)
    observed = agreement_statistic(*grouped_within_sums(lower, sizes, unit_chain[None, :],
                                                        n_chain), total, total_pairs)[0]
    exceed = 0
    for start in range(0, n_permutations, _RELABEL_CHUNK):
        count = min(_RELABEL_CHUNK, n_permutations - start)
        labels = rng.permuted(np.tile(unit_chain, (count, 1)), axis=1)
        permuted = agreement_statistic(*grouped_within_sums(lower, sizes, labels, n_chain),
                                       total, total_pairs)
        exceed += int(np.sum(permuted >= observed))
        if bar is not None:
            bar.update(count)
    return float(observed), (1.0 + exceed) / (1.0 + n_permutations)


def streamed_agreement(pooled, block_start, n_chain, n_blocks, preconditioner, kernel,
                       n_permutations, rng, progress=False, max_units=None, what="mmd"):
    """(statistic, p-value, :class:`Units`) of the test that all chains agree.

    ``pooled`` (C T, d): the draws, chain after chain; ``block_start``: the blocks of
    ``methods.mmd.plan_blocks`` (``n_blocks`` per chain, at least 3). Each relabelling is a
    uniformly random permutation of the units' chains (every chain keeps its number of
    units); p = (1 + #{relabelled >= observed}) / (1 + n_permutations).

    Cost: one pass over the pairs of the used draws (about half of them: a quarter of the
    pairs of all draws), O(N^2 d); O(n_permutations (U + U^2 / C)) for the relabellings;
    memory O(N d + U^2), refused up front (``MemoryError``, naming ``what``) when the
    U x U sums do not fit in the memory available. ``max_units``: default ``MAX_UNITS``.
    """
    units = plan_units(block_start, n_chain, n_blocks,
                       MAX_UNITS if max_units is None else max_units)
    n_units, d = units.unit_chain.shape[0], pooled.shape[1]
    check_memory(
        8.0 * n_units**2 + 16.0 * units.rows.shape[0] * d,
        f"{what}: the test that all {n_chain} chains agree (kernel sums between "
        f"{n_units} units of draws, 2 per chain at least)",
        "Pass a subset of the chains (the test compares every chain with every other).")
    points = np.ascontiguousarray(pooled[units.rows])
    lower = unit_row_sums(points, units.unit_start, preconditioner, kernel, progress)
    sizes = np.diff(units.unit_start).astype(np.float64)
    # About U / C + 2 flops per unit and relabelling, at a conservative 0.1 GFLOP/s.
    with progress_bar(progress, n_permutations,
                      n_permutations * n_units * (n_units / n_chain + 2) / 1e8,
                      desc="mmd (permutations)", unit="permutation") as bar:
        statistic, pvalue = _pvalue(lower, sizes, units.unit_chain, n_chain, n_permutations,
                                    rng, bar)
    return statistic, pvalue, units
