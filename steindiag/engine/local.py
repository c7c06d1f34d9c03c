"""Array layer of the engine: Stein-kernel row sums for (chain, draw, d) arrays.

Depends only on NumPy, SciPy and the Numba kernels. Two interchangeable paths
compute the same row sums (see ``steindiag.engine.row_sums``):

- ``"fused"``: one Numba loop per pair, SIMD over draws. Fastest for d <= 3.
- ``"gemm"``: tiles whose dot products come from BLAS matrix products, then a
  SIMD Numba pass over the tile. Fastest from d = 4. The draws are centred first so
  that |x_i|^2 + |x_j|^2 - 2 x_i.x_j does not lose digits to cancellation; pairs that
  still would (repeated draws far from the centre) are recomputed from differences.

Memory: each path holds one copy of draws and scores in its own layout (2 N d
doubles for the fused path, 2-3 N d for the BLAS path's panels), O(N) row sums, and
the BLAS path a Gram block of (2 * ``_GEMM_TILE_ROWS``)^2 doubles per thread (plus
``_GEMM_TILE_ROWS``^2 for a non-isotropic A); the N x N kernel matrix is never stored.
With many chains (``_MANY_CHAINS``) the pooled sums run over the draws as one time-major
sequence and the same-chain sums in a second, cheaper pass: 4 N d more doubles.
"""

from dataclasses import dataclass

import numpy as np

from steindiag.engine import row_sums as _kernels
from steindiag.kernels.preconditioner import Preconditioner
from steindiag.engine.progress import CONSERVATIVE_FLOPS as _CONSERVATIVE_FLOPS
from steindiag.engine.progress import make_progress, run_in_passes
from steindiag.engine.threads import single_threaded_blas
from steindiag.kernels import BaseKernel

__all__ = ["SteinSums", "stein_row_sums", "METHODS"]

# Above this many parameters the BLAS-tiled path is faster: at d = 4 by 1.0-1.2x, at d = 10
# by 2x (1 and 4 chains, N = 5k-20k; measured as in benchmarks/bench_engine.py).
_FUSED_MAX_D = 3
# Draws (over all chains) on each side of a BLAS tile: a Gram block of (2 * 256)^2 doubles
# = 2 MB per thread (L2-sized); 256 and 512 measured equal, 1024 twice slower.
_GEMM_TILE_ROWS = 256
# Draws per chunk when mapping to kernel coordinates (bounds the temporaries).
_CHUNK = 4096
# Each pass runs in calls of about ``engine.progress.CHUNK_SECONDS`` (``run_in_passes``).
# Fewest units in the smallest chunk, so every thread gets balanced work in each chunk:
# rows (draw indices) for the fused path, row tiles for the BLAS path.
_MIN_CHUNK_ROWS = 128
_MIN_CHUNK_TILES = 8
_MIN_CHUNK_CHAINS = 16
# Above this many chains the pooled sums run over the draws as one time-major sequence
# and the same-chain sums in a separate pass (``_row_sums_many_chains``): with many short
# chains the per-chain inner loops and BLAS tiles (256 draws over all chains) get too
# short. Measured (N = 24,000, 2 shared cores; benchmarks/results/chains.md): the fused
# path is as fast either way up to 64-250 chains and 2.9x faster at 2,000 chains of 12
# draws; the BLAS path is 1.3x faster at 32 chains, 1.9x at 64 and 7.3x at 2,000; at 8-16
# chains both ways are within the noise (5%). Many chains now take the time of one.
_MANY_CHAINS = {"fused": 64, "gemm": 16}


def _run_in_chunks(compute_rows, n_units, pairs_before, n_pairs_total, d, progress, min_units):
    """Call ``compute_rows(lo, hi)`` over row ranges of about equal work, with a bar.

    ``pairs_before(u)`` is the number of pairs in rows before unit u (work grows like
    u^2 because row t has t earlier draws). See ``engine.progress.run_in_passes``: Ctrl-C
    is honoured between ranges, and the partial result is discarded.
    """
    expected = n_pairs_total * (8 * d + 20) / _CONSERVATIVE_FLOPS
    bar = make_progress(progress, n_pairs_total, expected)
    work = np.diff(pairs_before(np.arange(n_units + 1, dtype=np.int64)))
    try:
        run_in_passes(compute_rows, work, 8 * d + 20, min_units=min_units, bar=bar)
    finally:
        if bar is not None:
            bar.close()


@dataclass(kw_only=True)
class SteinSums:
    """Per-draw Stein-kernel sums from one pass over the lower triangle.

    Attributes
    ----------
    diagonal : ndarray (chain, draw)
        k_p(x_i, x_i).
    row_same : ndarray (chain, draw)
        sum of k_p(x_i, x_j) over the earlier draws j of the same chain.
    row_all : ndarray (chain, draw)
        sum of k_p(x_i, x_j) over the earlier draws j of every chain, earlier meaning
        before i in time-major order (draw index first, then chain index).
    """

    diagonal: np.ndarray
    row_same: np.ndarray
    row_all: np.ndarray


def _kernel_chunks(pre, draws, scores, chunk):
    """Yield (chain, start, stop, draws, scores) in kernel coordinates, ``chunk`` draws at a time.

    Temporaries stay O(chunk * d), so each path can build its own layout with no
    full-size intermediate copies.
    """
    n_chain, n_draw, _ = draws.shape
    for c in range(n_chain):
        for start in range(0, n_draw, chunk):
            stop = min(start + chunk, n_draw)
            yield (c, start, stop,
                   *pre.to_kernel_coordinates(draws[c, start:stop], scores[c, start:stop]))


def _transposed(pre, draws, scores):
    """Draws and scores in kernel coordinates as (chain, d, draw) arrays.

    The innermost loops of the fused kernels run over draws with unit stride.
    """
    n_chain, n_draw, d = draws.shape
    draws_t = np.empty((n_chain, d, n_draw))
    scores_t = np.empty((n_chain, d, n_draw))
    for c, start, stop, x_k, s_k in _kernel_chunks(pre, draws, scores, _CHUNK):
        draws_t[c, :, start:stop] = x_k.T
        scores_t[c, :, start:stop] = s_k.T
    return draws_t, scores_t


def _row_sums_fused(draws, scores, pre, kernel, progress=None):
    n_chain, n_draw, d = draws.shape
    draws_t, scores_t = _transposed(pre, draws, scores)
    row_same = np.empty((n_chain, n_draw))
    row_all = np.empty((n_chain, n_draw))
    kind, params = kernel.numba_kind, kernel.numba_params

    def compute_rows(t_begin, t_end):
        _kernels.lower_row_sums(draws_t, scores_t, pre.a, pre.isotropic, kind, params,
                                pre.trace_a, row_same, row_all, t_begin, t_end)

    def pairs_before(t):
        return (n_chain * t) * (n_chain * t - 1) // 2

    _run_in_chunks(compute_rows, n_draw, pairs_before, pairs_before(n_draw), d, progress,
                   min_units=_MIN_CHUNK_ROWS)
    return row_same, row_all


@dataclass(kw_only=True)
class GemmPanels:
    """The BLAS path's layout of draws and scores (see ``engine.row_sums.lower_row_sums_gemm``).

    Attributes
    ----------
    panels : ndarray (n_tiles, n_blocks, chain, tile, d)
        Stacked blocks [X, S] (isotropic) or [Z, Y, S], z = sqrt(a) x, y = a x, of the
        centred draws in kernel coordinates, zero-padded past ``n_draw``.
    norm_q, norm_a2, ys : ndarray (n_tiles, chain, tile)
        Row-wise |z|^2, |y|^2 (``norm_q`` itself if isotropic) and y.s.
    tile, n_tiles, n_draw : int
    scale_q : float
        A = scale_q I if isotropic, 1 otherwise.
    """

    panels: np.ndarray
    norm_q: np.ndarray
    norm_a2: np.ndarray
    ys: np.ndarray
    tile: int
    n_tiles: int
    n_draw: int
    scale_q: float


def gemm_panels(draws, scores, pre, tile_rows=None):
    """Centre draws and scores in kernel coordinates and lay them out in BLAS tiles.

    ``tile_rows`` draws (over all chains) on each side of a tile (default
    ``_GEMM_TILE_ROWS``). Memory: 2 N d doubles (3 N d unless isotropic) and 2-3 N.
    """
    n_chain, n_draw, d = draws.shape
    # Centre (in kernel coordinates; the map is linear) so that
    # |z_i|^2 + |z_j|^2 - 2 z_i.z_j does not lose digits to cancellation.
    centre, _ = pre.to_kernel_coordinates(draws.reshape(-1, d).mean(axis=0)[None], np.zeros((1, d)))
    tile = max(1, min(n_draw, (tile_rows or _GEMM_TILE_ROWS) // n_chain))
    n_tiles = -(-n_draw // tile)
    n_blocks = 2 if pre.isotropic else 3
    # Panels (n_tiles, n_blocks, chain, tile, d), zero-padded past n_draw: stacked blocks
    # [X, S] (isotropic; the tile kernel applies A = a0 I) or [Z, Y, S], z = sqrt(a) x, y = a x.
    panels = np.zeros((n_tiles, n_blocks, n_chain, tile, d))
    norm_q = np.zeros((n_tiles, n_chain, tile))
    norm_a2 = norm_q if pre.isotropic else np.zeros((n_tiles, n_chain, tile))
    ys = np.zeros((n_tiles, n_chain, tile))
    sqrt_a = np.sqrt(pre.a)
    for c, start, stop, x_k, s_k in _kernel_chunks(pre, draws, scores, tile):
        x_k -= centre
        blocks = [x_k, s_k] if pre.isotropic else [x_k * sqrt_a, x_k * pre.a, s_k]
        index = start // tile
        for p, block in enumerate(blocks):
            panels[index, p, c, : stop - start] = block
        norm_q[index, c, : stop - start] = np.einsum("tk,tk->t", blocks[0], blocks[0])
        if not pre.isotropic:
            norm_a2[index, c, : stop - start] = np.einsum("tk,tk->t", blocks[1], blocks[1])
        ys[index, c, : stop - start] = np.einsum("tk,tk->t", blocks[-2], blocks[-1])
    scale_q = float(pre.a[0]) if pre.isotropic else 1.0
    return GemmPanels(panels=panels, norm_q=norm_q, norm_a2=norm_a2, ys=ys, tile=tile,
                      n_tiles=n_tiles, n_draw=n_draw, scale_q=scale_q)


def _row_sums_gemm(draws, scores, pre, kernel, progress=None, tile_rows=None):
    n_chain, n_draw, d = draws.shape
    layout = gemm_panels(draws, scores, pre, tile_rows)
    panels, norm_q, norm_a2, ys = layout.panels, layout.norm_q, layout.norm_a2, layout.ys
    tile, n_tiles, scale_q = layout.tile, layout.n_tiles, layout.scale_q
    row_same = np.empty((n_chain, n_tiles * tile))
    row_all = np.empty((n_chain, n_tiles * tile))
    kind, params = kernel.numba_kind, kernel.numba_params

    def compute_rows(tile_begin, tile_end):
        _kernels.lower_row_sums_gemm(panels, norm_q, norm_a2, ys, n_draw, pre.isotropic,
                                     scale_q, kind, params, pre.trace_a, row_same,
                                     row_all, tile_begin, tile_end)

    def pairs_before(tile_index):
        rows = n_chain * np.minimum(tile_index * tile, n_draw)
        return rows * (rows - 1) // 2

    with single_threaded_blas():
        _run_in_chunks(compute_rows, n_tiles, pairs_before, pairs_before(n_tiles), d,
                       progress, min_units=_MIN_CHUNK_TILES)
    return row_same[:, :n_draw], row_all[:, :n_draw]


METHODS = {"fused": _row_sums_fused, "gemm": _row_sums_gemm}


def _same_chain_sums(draws, scores, pre, kernel):
    """Row sums over earlier draws of the same chain only, (chain, draw).

    Runs in calls over ranges of chains (``run_in_passes``), so that Ctrl-C is honoured
    between them.
    """
    n_chain, n_draw, d = draws.shape
    draws_t, scores_t = _transposed(pre, draws, scores)
    row_same = np.empty((n_chain, n_draw))

    def compute_chains(lo, hi):
        _kernels.same_chain_row_sums(draws_t, scores_t, pre.a, pre.isotropic, kernel.numba_kind,
                                     kernel.numba_params, pre.trace_a, row_same, lo, hi)

    run_in_passes(compute_chains, np.full(n_chain, n_draw * (n_draw - 1) / 2), 8 * d + 20,
                  min_units=_MIN_CHUNK_CHAINS // 2)
    return row_same


def _row_sums_many_chains(compute, draws, scores, pre, kernel, progress,
                          same_chain_sums=_same_chain_sums, **options):
    """Row sums for many short chains: the pooled sums as one time-major sequence.

    "Earlier" for the pooled sums is time-major order (draw index, then chain), so the
    draws laid out in that order as one chain of N draws have exactly the pooled row
    sums as their own, and every path then works on full-size tiles and long inner
    loops. The same-chain sums, 1/n_chain of the pairs, come from a pass parallel over
    chains. Adds 2 N d doubles (the time-major copy) to the path's own memory.
    """
    n_chain, n_draw, d = draws.shape

    def time_major(array):
        return np.ascontiguousarray(array.transpose(1, 0, 2)).reshape(1, n_chain * n_draw, d)

    _, row_all = compute(time_major(draws), time_major(scores), pre, kernel,
                         progress=progress, **options)
    row_all = np.ascontiguousarray(row_all.reshape(n_draw, n_chain).T)
    return same_chain_sums(draws, scores, pre, kernel), row_all


def stein_row_sums(draws, scores, *, kernel, preconditioner, method="auto", progress=False,
                   backend=None, **options):
    """Stein-kernel row sums of (chain, draw, d) draws and scores.

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d)
        Finite float64 arrays (validated by the caller).
    kernel : steindiag.kernels.BaseKernel
        The base kernel, already validated (``steindiag.kernels.make_kernel``).
    preconditioner : Preconditioner
        Already resolved from the pooled draws.
    method : {"auto", "fused", "gemm"}
        ``"auto"`` uses ``"fused"`` for d <= 3, ``"gemm"`` above.
    progress : bool or None, default False
        Show a progress bar (None: only when interactive and the pass is long).
    backend : object, optional
        Where the passes run: None for this process (Numba threads), or an object with
        a ``methods`` dict (``"fused"``, ``"gemm"``: functions with the signature of
        ``METHODS``' values) and a ``same_chain_sums`` function (that of
        ``_same_chain_sums``), such as ``steindiag.engine.dask.DaskBackend``.
    **options
        ``tile_rows`` for ``"gemm"`` (draws per tile side, over all chains).

    Returns
    -------
    SteinSums

    Notes
    -----
    O(N^2 d) time, O(N d) memory; the N x N kernel matrix is never formed.
    """
    if not isinstance(preconditioner, Preconditioner):
        raise TypeError("preconditioner must be a resolved Preconditioner.")
    if not isinstance(kernel, BaseKernel):
        raise TypeError("kernel must be a steindiag.kernels kernel object.")
    scores_sq = np.empty(draws.shape[:2])
    for ch, start, stop, _, s_k in _kernel_chunks(preconditioner, draws, scores, _CHUNK):
        scores_sq[ch, start:stop] = np.einsum("tk,tk->t", s_k, s_k)
    diagonal = _kernels.stein_kernel_diagonal(scores_sq, kernel.numba_kind, kernel.numba_params,
                                              preconditioner.trace_a)
    d = draws.shape[2]
    if method == "auto":
        method = "fused" if d <= _FUSED_MAX_D else "gemm"
    methods = METHODS if backend is None else backend.methods
    try:
        compute = methods[method]
    except KeyError:
        raise ValueError(
            f"method must be 'auto' or one of {sorted(METHODS)}; got {method!r}."
        ) from None
    if draws.shape[0] > _MANY_CHAINS[method]:
        same_chain = _same_chain_sums if backend is None else backend.same_chain_sums
        row_same, row_all = _row_sums_many_chains(compute, draws, scores, preconditioner,
                                                  kernel, progress,
                                                  same_chain_sums=same_chain, **options)
    else:
        row_same, row_all = compute(draws, scores, preconditioner, kernel,
                                    progress=progress, **options)
    return SteinSums(diagonal=diagonal, row_same=row_same, row_all=row_all)
