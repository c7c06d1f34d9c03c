"""Array layer of the engine: Stein-kernel row sums for (chain, draw, d) arrays.

Depends only on NumPy, SciPy and the Numba kernels. Two interchangeable paths
compute the same row sums (see ``steindiag._kernels``):

- ``"fused"``: one Numba loop per pair, SIMD over draws. Fastest for small d.
- ``"gemm"``: tiles whose dot products come from BLAS matrix products, then a
  Numba pass over the tile. Fastest for larger d. The draws are centred first so
  that |x_i|^2 + |x_j|^2 - 2 x_i.x_j does not lose digits to cancellation.

Both use O(N d) memory: the BLAS path holds one Gram block of
(n_blocks * ``_GEMM_TILE_ROWS``)^2 doubles per thread; the kernel matrix is never stored.
"""

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from steindiag import _kernels
from steindiag._preconditioner import Preconditioner

__all__ = ["SteinSums", "stein_row_sums", "METHODS"]

# Above this many parameters the BLAS-tiled path is faster (measured in benchmarks/).
_FUSED_MAX_D = 24
# Draws (over all chains) on each side of a BLAS tile: a Gram block of (2 * 256)^2 doubles
# = 2 MB per thread (L2-sized); 256 and 512 measured equal, 1024 twice slower.
_GEMM_TILE_ROWS = 256


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


def _row_sums_fused(draws, scores, pre, c2, beta):
    n_chain, n_draw, _ = draws.shape
    draws_t = np.ascontiguousarray(draws.transpose(0, 2, 1))
    scores_t = np.ascontiguousarray(scores.transpose(0, 2, 1))
    row_same = np.empty((n_chain, n_draw))
    row_all = np.empty((n_chain, n_draw))
    _kernels.lower_row_sums(
        draws_t, scores_t, pre.a, pre.isotropic, c2, beta, pre.trace_a, row_same, row_all
    )
    return row_same, row_all


def _row_sums_gemm(draws, scores, pre, c2, beta, tile_rows=None):
    n_chain, n_draw, d = draws.shape
    draws = draws - draws.reshape(-1, d).mean(axis=0)
    if pre.isotropic:
        # Unscaled x; the tile kernel applies A = a0 I.
        blocks = [draws, scores]
        scale_q = float(pre.a[0])
    else:
        blocks = [draws * np.sqrt(pre.a), draws * pre.a, scores]
        scale_q = 1.0
    tile = max(1, min(n_draw, (tile_rows or _GEMM_TILE_ROWS) // n_chain))
    n_tiles = -(-n_draw // tile)
    padded = n_tiles * tile
    # (n_tiles, n_blocks, chain, tile, d), zero-padded past n_draw.
    panels = np.zeros((len(blocks), n_chain, padded, d))
    for p, block in enumerate(blocks):
        panels[p, :, :n_draw] = block
    panels = np.ascontiguousarray(
        panels.reshape(len(blocks), n_chain, n_tiles, tile, d).transpose(2, 0, 1, 3, 4)
    )

    def row_wise(first, second):
        out = np.zeros((n_chain, padded))
        out[:, :n_draw] = np.einsum("ctk,ctk->ct", first, second)
        return np.ascontiguousarray(out.reshape(n_chain, n_tiles, tile).transpose(1, 0, 2))

    norm_q = row_wise(blocks[0], blocks[0])
    norm_a2 = norm_q if pre.isotropic else row_wise(blocks[1], blocks[1])
    ys = row_wise(blocks[-2], blocks[-1])
    row_same = np.empty((n_chain, padded))
    row_all = np.empty((n_chain, padded))
    with threadpool_limits(limits=1, user_api="blas"):
        _kernels.lower_row_sums_gemm(
            panels, norm_q, norm_a2, ys, n_draw, pre.isotropic, scale_q, c2, beta,
            pre.trace_a, row_same, row_all,
        )
    return row_same[:, :n_draw], row_all[:, :n_draw]


METHODS = {"fused": _row_sums_fused, "gemm": _row_sums_gemm}


def stein_row_sums(draws, scores, *, c, beta, preconditioner, method="auto", **options):
    """Stein-kernel row sums of (chain, draw, d) draws and scores.

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d)
        Finite float64 arrays (validated by the caller).
    c, beta : float
        IMQ parameters, c > 0 and -1 < beta < 0.
    preconditioner : Preconditioner
        Already resolved from the pooled draws.
    method : {"auto", "fused", "gemm"}
        ``"auto"`` uses ``"fused"`` for d <= 24, ``"gemm"`` above.
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
    draws_k, scores_k = preconditioner.to_kernel_coordinates(draws, scores)
    c2 = float(c) ** 2
    beta = float(beta)
    diagonal = _kernels.stein_kernel_diagonal(
        np.einsum("ctk,ctk->ct", scores_k, scores_k), c2, beta, preconditioner.trace_a
    )
    d = draws.shape[2]
    if method == "auto":
        method = "fused" if d <= _FUSED_MAX_D else "gemm"
    try:
        compute = METHODS[method]
    except KeyError:
        raise ValueError(
            f"method must be 'auto' or one of {sorted(METHODS)}; got {method!r}."
        ) from None
    row_same, row_all = compute(draws_k, scores_k, preconditioner, c2, beta, **options)
    return SteinSums(diagonal=diagonal, row_same=row_same, row_all=row_all)
