"""Numba kernels for the tests: many quadratic forms with K_p, and base-kernel block sums.

Nothing here imports xarray or PyMC, and nothing validates input: callers pass float64,
C-contiguous arrays already in the kernel's coordinates (after
``Preconditioner.to_kernel_coordinates``, so that A = diag(a)), stored transposed as
``(1, d, N)`` like ``steindiag.engine.row_sums`` (one "chain" holding all N points, the
innermost loops running over points with unit stride).

- ``stein_quadratic_forms``: w_b^T K_p w_b for every column b of an (N, B) matrix W,
  per chain and pooled, in one tiled pass. Each tile of K_p (rows of one tile, up to
  ``_COLUMN_CHUNK`` columns) is evaluated once into a small buffer and multiplied by the
  matching rows of W with a BLAS matrix product, so the B columns share every kernel
  evaluation: O(N^2 (d + B)) time and O(N B) memory (W itself) plus
  O(_TILE_ROWS * (_COLUMN_CHUNK + 3 B)) doubles per thread; neither K_p nor K_p W
  is stored.
- ``stein_matmat``: the product K_p W itself, (N, B), from the same tiles (every tile
  evaluated, both triangles: twice the products of the quadratic forms, no scatter
  between threads); O(N B) output and the same per-thread buffers.
- ``base_kernel_unit_sums``: sums of the base kernel k(x, y) = f((x-y)^T A (x-y)) (the
  IMQ f(t) = (c^2 + t)^beta, or another kernel of ``steindiag.kernels``) over all pairs
  of points between (and within) contiguous groups of points, for the
  MMD and its block-permutation test. O(N^2 d) time, O(parts * U^2) memory for U groups.
- ``base_kernel_unit_rows``: the same sums with each group's row of sums computed by one
  task, so that no thread keeps its own copy: O(U^2) memory (one U x U array), for many
  groups (many short chains).
"""

import numba as nb
import numpy as np

from steindiag.engine import progress as _progress
from steindiag.engine.progress import run_in_passes
from steindiag.engine.threads import on_threads
from steindiag.engine.row_sums import _FAST_SUM, _accumulate_block
from steindiag.kernels._stein import block_base_sum, block_stein_values, kernel_constants

__all__ = ["stein_matmat", "stein_quadratic_forms", "base_kernel_unit_sums",
           "base_kernel_unit_rows", "QUADRATIC_TILE_ROWS"]

# Points per inner block (the per-pair accumulators of one block live in L1), as in _kernels.
_BLOCK = 256
# Rows of a tile of K_p, and columns evaluated before each matrix product: the tile
# buffer is 256 x 512 doubles (1 MB) and each product is (256 x 512) @ (512 x B).
QUADRATIC_TILE_ROWS = 256
_COLUMN_CHUNK = 512
# Rows per parallel task of the base-kernel sums (tasks are paired b <-> n - 1 - b).
_ROWS_PER_TASK = 8


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _fill_tile(draws_t, scores_t, a, isotropic, kind, params, trace_a, i0, ni, j0, nj, factor,
               tile, x_i, s_i, qdist, a2dist, uads, ss):
    """tile[r * nj + m] = factor * k_p(x_(i0 + r), x_(j0 + m)): a C-ordered (ni, nj) block."""
    c2, beta = kernel_constants(kind, params)
    d = draws_t.shape[1]
    for r in range(ni):
        i = i0 + r
        for k in range(d):
            x_i[k] = draws_t[0, k, i]
            s_i[k] = scores_t[0, k, i]
        for b0 in range(0, nj, _BLOCK):
            nb_ = min(_BLOCK, nj - b0)
            _accumulate_block(draws_t, scores_t, a, isotropic, 0, j0 + b0, nb_, x_i, s_i,
                              qdist, a2dist, uads, ss)
            start = r * nj + b0
            block_stein_values(kind, c2, beta, qdist, a2dist, uads, ss, nb_, trace_a,
                               factor, tile[start : start + nb_])


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _add_product(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, i0, ni,
                 col_lo, col_hi, factor, tile, product, acc, x_i, s_i, qdist, a2dist, uads, ss):
    """acc[:ni] += factor * K_p[i0 : i0 + ni, col_lo : col_hi] @ weights[col_lo : col_hi]."""
    n_rhs = weights.shape[1]
    for j0 in range(col_lo, col_hi, _COLUMN_CHUNK):
        nj = min(_COLUMN_CHUNK, col_hi - j0)
        block = tile[: ni * nj]
        _fill_tile(draws_t, scores_t, a, isotropic, kind, params, trace_a, i0, ni, j0, nj, factor,
                   block, x_i, s_i, qdist, a2dist, uads, ss)
        result = product[: ni * n_rhs].reshape((ni, n_rhs))
        np.dot(block.reshape((ni, nj)), weights[j0 : j0 + nj], result)
        for r in range(ni):
            for b in range(n_rhs):
                acc[r, b] += result[r, b]


def stein_quadratic_forms(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights,
                          tile_start, tile_stop, tile_chain_start, cross, out, bar=None):
    """out[t, 0, b] and out[t, 1, b]: row tile t's share of w_b^T K_p w_b, same chain and cross.

    Parameters
    ----------
    draws_t, scores_t : float64 (1, d, N), C-contiguous, kernel coordinates, chains
        stored one after the other (chain-major).
    a, isotropic, kind, params, trace_a : kernel constants as in ``engine.row_sums.lower_row_sums``
    weights : float64 (N, B), C-contiguous: the B right-hand sides, each row contiguous.
    tile_start, tile_stop : int64 (n_tiles,)
        Row tiles, in increasing order, none crossing a chain boundary.
    tile_chain_start : int64 (n_tiles,)
        Index of the first point of the chain that holds each tile.
    cross : bool
        Also compute the cross-chain terms (for the pooled forms).
    out : float64 (n_tiles, 2, B), overwritten.
    bar : object with ``update(n)``, optional
        Advanced by the pairs of points evaluated (``engine.progress.run_in_passes``).

    With T the rows of tile t and C its chain,

        out[t, 0] = sum_(i in T) w_i [K_TT w_T + 2 K_(T, C before T) w_(C before T)]_i,
        out[t, 1] = sum_(i in T) w_i [2 K_(T, all points before C) w]_i    (0 unless cross),

    so the sum of ``out[:, 0]`` over the tiles of a chain is w^T K_p w on that chain
    alone, and the sum of both over all tiles is w^T K_p w on all points pooled (each
    unordered pair of points is evaluated once, on the side of its later point; the
    diagonal tiles are evaluated whole).

    Each tile's columns are cut into pieces of a fixed width (``quadratic_pieces``: about
    ``engine.progress.CHUNK_SECONDS`` of work each, from d and B alone), each piece a unit
    of work with its own share of ``out``, summed over the pieces at the end. The units
    run in calls of a few (``run_in_passes``), so Ctrl-C is honoured within about a
    piece's work whatever N; the numbers do not depend on the calls (nor on where the
    units run: the dask backend computes the same pieces). Memory: O(units * B) for the
    shares, a fraction of W's N B.
    """
    n_tiles = tile_start.shape[0]
    if n_tiles == 0:
        return
    rows = np.int64(np.max(tile_stop - tile_start))
    isotropic, trace_a, cross = bool(isotropic), float(trace_a), bool(cross)
    flops_per_pair = 8 * draws_t.shape[1] + 20 + 2 * weights.shape[1]
    unit_tile, unit_lo, unit_hi = quadratic_pieces(tile_start, tile_stop, tile_chain_start,
                                                   cross, flops_per_pair)
    shares = np.empty((unit_tile.shape[0], 2, weights.shape[1]))

    def compute_units(lo, hi):
        on_threads(_quadratic_units, draws_t, scores_t, a, isotropic, kind, params, trace_a,
                   weights, tile_start, tile_stop, tile_chain_start, unit_tile, unit_lo,
                   unit_hi, shares, rows, np.int64(lo), np.int64(hi))

    work = (tile_stop - tile_start)[unit_tile] * (unit_hi - unit_lo)
    run_in_passes(compute_units, work, flops_per_pair, min_units=2, bar=bar)
    # Units are in tile order: the first unit of each tile starts its sum.
    first_unit = np.flatnonzero(np.r_[True, unit_tile[1:] != unit_tile[:-1]])
    out[:] = np.add.reduceat(shares, first_unit, axis=0)


def quadratic_pairs(tile_start, tile_stop, tile_chain_start, cross):
    """Pairs of points ``stein_quadratic_forms`` evaluates for each tile, (n_tiles,)."""
    first_column = np.zeros_like(tile_chain_start) if cross else tile_chain_start
    return (tile_stop - tile_start) * (tile_stop - first_column)


def quadratic_pieces(tile_start, tile_stop, tile_chain_start, cross, flops_per_pair):
    """The units of ``stein_quadratic_forms``: (tile, first column, stop column), each int64.

    Tile t's columns run from its chain's start (0 if ``cross``) to its own end, cut into
    pieces of a width that depends on the flops per pair alone: a multiple of
    ``_COLUMN_CHUNK`` near ``CHUNK_SECONDS`` of work on one thread for a full tile.
    """
    # A piece runs on one thread: sized at the one-thread rate (at d = 5, B = 1000: 1024
    # columns; 4608 at the all-threads rate stopped 0.6-0.8 s after Ctrl-C at load 8).
    target = (_progress.CHUNK_SECONDS * _progress.ONE_THREAD_FLOPS
              / (QUADRATIC_TILE_ROWS * flops_per_pair))
    width = int(max(1, target // _COLUMN_CHUNK)) * _COLUMN_CHUNK
    first_column = np.zeros_like(tile_chain_start) if cross else tile_chain_start
    counts = -(-(tile_stop - first_column) // width)
    unit_tile = np.repeat(np.arange(tile_start.shape[0], dtype=np.int64), counts)
    piece = np.arange(unit_tile.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    unit_lo = first_column[unit_tile] + piece * width
    unit_hi = np.minimum(unit_lo + width, tile_stop[unit_tile])
    return unit_tile, unit_lo.astype(np.int64), unit_hi.astype(np.int64)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _quadratic_units(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, tile_start,
                     tile_stop, tile_chain_start, unit_tile, unit_lo, unit_hi, shares, rows,
                     lo, hi, first, step):
    """Units lo + first, lo + first + step, ... before hi of ``stein_quadratic_forms``
    (see ``engine.threads``)."""
    d = draws_t.shape[1]
    n_rhs = weights.shape[1]
    tile = np.empty(rows * _COLUMN_CHUNK)
    product = np.empty(rows * n_rhs)
    acc_same = np.empty((rows, n_rhs))
    acc_cross = np.empty((rows, n_rhs))
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    for unit in range(lo + first, hi, step):
        _quadratic_unit(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights,
                        tile_start, tile_stop, tile_chain_start, unit_tile[unit],
                        unit_lo[unit], unit_hi[unit], shares[unit], tile, product, acc_same,
                        acc_cross, x_i, s_i, qdist, a2dist, uads, ss)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _quadratic_unit(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, tile_start,
                    tile_stop, tile_chain_start, t, col_lo, col_hi, share, tile, product,
                    acc_same, acc_cross, x_i, s_i, qdist, a2dist, uads, ss):
    """Tile t's share over columns col_lo .. col_hi - 1 of ``stein_quadratic_forms``."""
    n_rhs = weights.shape[1]
    i0 = tile_start[t]
    ni = tile_stop[t] - i0
    c0 = tile_chain_start[t]
    acc_same[:ni] = 0.0
    acc_cross[:ni] = 0.0
    # Earlier points of the same chain (each pair counted for both orders), then the tile
    # against itself (whole, diagonal included), then earlier chains (cross terms).
    _add_product(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, i0, ni,
                 max(col_lo, c0), min(col_hi, i0), 2.0, tile, product, acc_same, x_i, s_i,
                 qdist, a2dist, uads, ss)
    _add_product(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, i0, ni,
                 max(col_lo, i0), col_hi, 1.0, tile, product, acc_same, x_i, s_i, qdist,
                 a2dist, uads, ss)
    _add_product(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, i0, ni,
                 col_lo, min(col_hi, c0), 2.0, tile, product, acc_cross, x_i, s_i, qdist,
                 a2dist, uads, ss)
    for b in range(n_rhs):
        share[0, b] = 0.0
        share[1, b] = 0.0
    for r in range(ni):
        w_row = weights[i0 + r]
        for b in range(n_rhs):
            share[0, b] += w_row[b] * acc_same[r, b]
            share[1, b] += w_row[b] * acc_cross[r, b]


def stein_matmat(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, out):
    """out = K_p @ weights for an (N, B) C-contiguous ``weights``; out (N, B) overwritten.

    Row tiles of ``QUADRATIC_TILE_ROWS`` points run in parallel; each evaluates its rows
    of K_p in tiles of ``_COLUMN_CHUNK`` columns and multiplies them by the matching rows
    of ``weights`` (BLAS). N^2 pair evaluations and 2 N^2 B flops; K_p is not stored.
    """
    n = draws_t.shape[2]
    n_tiles = (n + QUADRATIC_TILE_ROWS - 1) // QUADRATIC_TILE_ROWS
    on_threads(_matmat_tiles, draws_t, scores_t, a, bool(isotropic), kind, params,
               float(trace_a), weights, out, np.int64(n_tiles))


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _matmat_tiles(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, out, n_tiles,
                  first, step):
    """Row tiles first, first + step, ... of ``stein_matmat`` (see ``engine.threads``)."""
    for t in range(first, n_tiles, step):
        _matmat_tile(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, out, t)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _matmat_tile(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, out, t):
    """Row tile ``t`` of ``stein_matmat``."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_rhs = weights.shape[1]
    rows = QUADRATIC_TILE_ROWS
    tile = np.empty(rows * _COLUMN_CHUNK)
    product = np.empty(rows * n_rhs)
    acc = np.zeros((rows, n_rhs))
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    i0 = t * rows
    ni = min(rows, n - i0)
    _add_product(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, i0, ni,
                 np.int64(0), n, 1.0, tile, product, acc, x_i, s_i, qdist, a2dist, uads, ss)
    for r in range(ni):
        for b in range(n_rhs):
            out[i0 + r, b] = acc[r, b]


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _base_block_sum(draws_t, a, isotropic, x_i, j0, nj, qdist, kind, params):
    """sum over j = j0 .. j0 + nj - 1 of f((x_i - x_j)^T A (x_i - x_j))."""
    _block_distances(draws_t, a, isotropic, x_i, j0, nj, qdist)
    c2, beta = kernel_constants(kind, params)
    return block_base_sum(kind, c2, beta, qdist, nj)


def base_kernel_unit_sums(draws_t, a, isotropic, kind, params, unit_start, partial, bar=None):
    """Lower-triangle sums of the base kernel between contiguous groups ("units") of points.

    Parameters
    ----------
    draws_t : float64 (1, d, N), C-contiguous, kernel coordinates
    a, isotropic : A = diag(a), or a[0] I if isotropic
    kind, params : the base kernel (``steindiag.kernels._stein``)
    unit_start : int64 (U + 1,), unit u holds points unit_start[u] .. unit_start[u+1] - 1
    partial : float64 (n_parts, U, U), overwritten; n_parts parallel parts
    bar : object with ``update(n)``, optional
        Advanced by the pairs of points evaluated (``engine.progress.run_in_passes``).

    After the call, L = partial.sum(axis=0) holds, for u > v, L[u, v] = sum of
    k(x_i, x_j) over i in u, j in v, and L[u, u] = sum over pairs j < i inside u; so
    the full (symmetric, self-pairs excluded) sums are L + L^T. The partition of rows
    into parts is static and each part is summed by one thread, so for a given n_parts
    the result does not depend on the number of threads.
    Memory: O(n_parts * U^2).
    """
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_parts = partial.shape[0]
    n_blocks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    n_tasks = (n_blocks + 1) // 2
    partial[:] = 0.0
    isotropic = bool(isotropic)

    def compute_tasks(lo, hi):
        on_threads(_unit_sums_parts, draws_t, a, isotropic, kind, params, unit_start, partial,
                   np.int64(n_blocks), np.int64(lo), np.int64(hi))

    # Calls of about engine.progress.CHUNK_SECONDS (Ctrl-C is honoured between them); each
    # part takes its tasks in increasing order whatever the calls, so the sums do not change.
    # Task b evaluates about _ROWS_PER_TASK * n pairs (its two row blocks).
    run_in_passes(compute_tasks, np.full(n_tasks, _ROWS_PER_TASK * n), 3 * d + 10,
                  min_units=4 * n_parts, bar=bar)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _unit_sums_parts(draws_t, a, isotropic, kind, params, unit_start, partial, n_blocks, task_lo,
                     task_hi, first, step):
    """Parts first, first + step, ... of ``base_kernel_unit_sums`` (see ``engine.threads``)."""
    for part in range(first, partial.shape[0], step):
        _unit_sums_part(draws_t, a, isotropic, kind, params, unit_start, partial, n_blocks,
                        task_lo, task_hi, part)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _unit_sums_part(draws_t, a, isotropic, kind, params, unit_start, partial, n_blocks, task_lo,
                    task_hi, part):
    """Part ``part`` of ``base_kernel_unit_sums`` over tasks task_lo .. task_hi - 1: its row
    tasks, added to partial[part]."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_parts = partial.shape[0]
    qdist = np.empty(_BLOCK)
    x_i = np.empty(d)
    acc = partial[part]
    # The part's first task at or after task_lo: tasks part, part + n_parts, ...
    for task in range(task_lo + (part - task_lo) % n_parts, task_hi, n_parts):
        for half in range(2):
            block = task if half == 0 else n_blocks - 1 - task
            if half == 1 and block == task:
                break
            unit_i = 0
            for i in range(block * _ROWS_PER_TASK, min((block + 1) * _ROWS_PER_TASK, n)):
                while unit_start[unit_i + 1] <= i:
                    unit_i += 1
                for k in range(d):
                    x_i[k] = draws_t[0, k, i]
                for unit_j in range(unit_i + 1):
                    lo = unit_start[unit_j]
                    hi = unit_start[unit_j + 1] if unit_j < unit_i else i
                    total = 0.0
                    for j0 in range(lo, hi, _BLOCK):
                        total += _base_block_sum(draws_t, a, isotropic, x_i, j0,
                                                 min(_BLOCK, hi - j0), qdist, kind,
                                                 params)
                    acc[unit_i, unit_j] += total


def base_kernel_unit_rows(draws_t, a, isotropic, kind, params, unit_start, out, bar=None):
    """Lower-triangle sums of the base kernel between units, one task per unit's row.

    Parameters
    ----------
    draws_t, a, isotropic, kind, params, unit_start, bar : as in ``base_kernel_unit_sums``
    out : float64 (U, U), overwritten on and below the diagonal (above it: untouched)

    After the call, for u > v, out[u, v] = sum of k(x_i, x_j) over i in u, j in v, and
    out[u, u] = sum over pairs j < i inside u; so the full sums are L + L^T for L the lower
    triangle of ``out``. Row u is written by one task only (the points of unit u against
    every earlier point, in order), so no thread keeps a copy of the sums and the result
    does not depend on the number of threads: memory O(U^2) (``out``) instead of
    ``base_kernel_unit_sums``'s O(parts * U^2); the summation order differs from it, so
    the two agree to round-off only. Tasks pair unit t with unit U - 1 - t (for units of
    equal size, every task then evaluates about the same number of pairs), so the pass is
    balanced when there are many units of similar sizes (many short chains or blocks).
    """
    n_units = unit_start.shape[0] - 1
    d = draws_t.shape[1]
    n_tasks = (n_units + 1) // 2
    isotropic = bool(isotropic)
    unit_start = np.ascontiguousarray(unit_start, dtype=np.int64)
    sizes = np.diff(unit_start).astype(np.float64)
    # Pairs evaluated by the unit's row (its points against every earlier point).
    row_pairs = sizes * unit_start[:-1] + sizes * (sizes - 1.0) / 2.0
    task = np.arange(n_tasks)
    partner = n_units - 1 - task
    work = row_pairs[task] + np.where(partner != task, row_pairs[partner], 0.0)

    def compute_tasks(lo, hi):
        on_threads(_unit_rows_tasks, draws_t, a, isotropic, kind, params, unit_start, out,
                   np.int64(lo), np.int64(hi))

    run_in_passes(compute_tasks, work, 3 * d + 10, min_units=8, bar=bar)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _unit_rows_tasks(draws_t, a, isotropic, kind, params, unit_start, out, task_lo, task_hi,
                     first, step):
    """Tasks task_lo + first, task_lo + first + step, ... before task_hi of
    ``base_kernel_unit_rows`` (see ``engine.threads``): task t computes the rows of units
    t and U - 1 - t."""
    n_units = unit_start.shape[0] - 1
    d = draws_t.shape[1]
    c2, beta = kernel_constants(kind, params)
    qdist = np.empty(_BLOCK)
    x_i = np.empty(d)
    for task in range(task_lo + first, task_hi, step):
        for half in range(2):
            unit_i = task if half == 0 else n_units - 1 - task
            if half == 1 and unit_i == task:
                break
            row = out[unit_i]
            for unit_j in range(unit_i + 1):
                row[unit_j] = 0.0
            for i in range(unit_start[unit_i], unit_start[unit_i + 1]):
                for k in range(d):
                    x_i[k] = draws_t[0, k, i]
                # Distances to the earlier points in blocks of _BLOCK (across units), the
                # kernel summed over each unit's part of the block.
                unit_j = 0
                for j0 in range(0, i, _BLOCK):
                    nj = min(_BLOCK, i - j0)
                    _block_distances(draws_t, a, isotropic, x_i, j0, nj, qdist)
                    m = 0
                    while m < nj:
                        while unit_start[unit_j + 1] <= j0 + m:
                            unit_j += 1
                        stop = min(nj, unit_start[unit_j + 1] - j0)
                        row[unit_j] += block_base_sum(kind, c2, beta, qdist[m:], stop - m)
                        m = stop


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _block_distances(draws_t, a, isotropic, x_i, j0, nj, qdist):
    """qdist[m] = (x_i - x_(j0 + m))^T A (x_i - x_(j0 + m)) for m < nj."""
    d = draws_t.shape[1]
    for k in range(d):
        xk = x_i[k]
        ak = a[0] if isotropic else a[k]
        xs = draws_t[0, k, j0 : j0 + nj]
        if k == 0:  # the first coordinate writes, the others add (no zeroing pass)
            for m in range(nj):
                u = xk - xs[m]
                qdist[m] = ak * u * u
        else:
            for m in range(nj):
                u = xk - xs[m]
                qdist[m] += ak * u * u
