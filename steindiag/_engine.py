"""Array layer of the engine: Stein-kernel row sums for (chain, draw, d) arrays.

Depends only on NumPy, SciPy and the Numba kernels. Two interchangeable paths
compute the same row sums (see ``steindiag._kernels``):

- ``"fused"``: one Numba loop per pair, SIMD over draws. Fastest for small d.
- ``"gemm"``: tiles whose dot products come from BLAS matrix products, then a
  Numba pass over the tile. Fastest for larger d. The draws are centred first so
  that |x_i|^2 + |x_j|^2 - 2 x_i.x_j does not lose digits to cancellation.

Both use O(N d) memory: a tile is at most ``_GEMM_TILE_ROWS`` draws on each side,
the kernel matrix is never stored.
"""

from dataclasses import dataclass

import numpy as np

from steindiag import _kernels
from steindiag._preconditioner import Preconditioner

__all__ = ["SteinSums", "stein_row_sums", "METHODS"]

# Above this many parameters the BLAS-tiled path is faster (measured in benchmarks/).
_FUSED_MAX_D = 12
# Draws (over all chains) on each side of a BLAS tile: Gram blocks of (2 * 512)^2 doubles = 8 MB.
_GEMM_TILE_ROWS = 512


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


def _tile(array, start, stop):
    """Rows of draws start..stop-1 of every chain, chain by chain, as one (rows, d) block."""
    return np.ascontiguousarray(array[:, start:stop, :]).reshape(-1, array.shape[2])


def _row_sums_gemm(draws, scores, pre, c2, beta, tile_rows=None):
    n_chain, n_draw, _ = draws.shape
    draws = draws - draws.reshape(-1, draws.shape[2]).mean(axis=0)
    if pre.isotropic:
        # Unscaled x; the tile kernel applies A = a0 I.
        blocks = [draws, scores]
        scale_q = scale_uads = float(pre.a[0])
    else:
        blocks = [draws * np.sqrt(pre.a), draws * pre.a, scores]
        scale_q = scale_uads = 1.0
    # Row-wise |z|^2, |y|^2 and y.s for the "diagonal" parts of each squared distance.
    norm_q = np.einsum("ctk,ctk->ct", blocks[0], blocks[0])
    norm_a2 = norm_q if pre.isotropic else np.einsum("ctk,ctk->ct", blocks[1], blocks[1])
    ys = np.einsum("ctk,ctk->ct", blocks[-2], blocks[-1])
    n_blocks = len(blocks)

    tile_draws = max(1, (tile_rows or _GEMM_TILE_ROWS) // n_chain)
    starts = list(range(0, n_draw, tile_draws))
    row_same = np.zeros((n_chain, n_draw))
    row_all = np.zeros((n_chain, n_draw))
    for i, t0_i in enumerate(starts):
        t1_i = min(t0_i + tile_draws, n_draw)
        stacked_i = np.concatenate([_tile(b, t0_i, t1_i) for b in blocks])
        rows_i = stacked_i.shape[0] // n_blocks
        norms_i = (norm_q[:, t0_i:t1_i].ravel(), norm_a2[:, t0_i:t1_i].ravel(),
                   ys[:, t0_i:t1_i].ravel())
        for t0_j in starts[: i + 1]:
            t1_j = min(t0_j + tile_draws, n_draw)
            stacked_j = stacked_i if t0_j == t0_i else np.concatenate(
                [_tile(b, t0_j, t1_j) for b in blocks]
            )
            rows_j = stacked_j.shape[0] // n_blocks
            gram = stacked_i @ stacked_j.T

            def block(p, q):
                return gram[p * rows_i : (p + 1) * rows_i, q * rows_j : (q + 1) * rows_j]

            y, s = n_blocks - 2, n_blocks - 1
            _kernels.lower_row_sums_tile(
                block(0, 0), block(1, 1), block(y, s), block(s, y), block(s, s),
                *norms_i,
                norm_q[:, t0_j:t1_j].ravel(), norm_a2[:, t0_j:t1_j].ravel(),
                ys[:, t0_j:t1_j].ravel(),
                n_chain, t0_i, t0_j, pre.isotropic, scale_q, scale_uads,
                c2, beta, pre.trace_a, row_same, row_all,
            )
    return row_same, row_all


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
        ``"auto"`` uses ``"fused"`` for d <= 12, ``"gemm"`` above.
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
