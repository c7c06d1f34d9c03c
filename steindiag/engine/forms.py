"""Stein-kernel products with many right-hand sides, scheduled here or on a cluster.

- ``quadratic_forms``: w_b^T K_p w_b for every column of an (N, B) matrix W, per chain
  and pooled (the KSD test's observed statistic and bootstrap replicates in one pass);
- ``stein_matrix_product``: K_p W.

Both run the tiled Numba kernels of ``steindiag.engine.multi_products``, with BLAS
limited to one thread inside them (the Numba threads already share the tiles); the
quadratic forms can run as tasks on a dask cluster. K_p is never stored.
"""

import numpy as np

from steindiag.engine.multi_products import (
    QUADRATIC_TILE_ROWS,
    quadratic_pairs,
    quadratic_pieces,
    stein_matmat,
    stein_quadratic_forms,
)
from steindiag.engine.threads import single_threaded_blas

__all__ = ["forms_pairs", "forms_memory", "quadratic_forms", "row_tiles",
           "stein_matrix_product"]


def row_tiles(n_chain, n_draw):
    """Row tiles of at most QUADRATIC_TILE_ROWS points, none crossing a chain boundary."""
    starts = [c * n_draw + t for c in range(n_chain)
              for t in range(0, n_draw, QUADRATIC_TILE_ROWS)]
    starts = np.asarray(starts, dtype=np.int64)
    chain_start = (starts // n_draw) * n_draw
    stops = np.minimum(starts + QUADRATIC_TILE_ROWS, chain_start + n_draw)
    return starts, stops, chain_start


def forms_pairs(n_chain, n_draw, pooled):
    """Pairs of points ``quadratic_forms`` evaluates (for a progress bar's total)."""
    starts, stops, chain_start = row_tiles(n_chain, n_draw)
    return int(quadratic_pairs(starts, stops, chain_start, pooled).sum())


def forms_memory(n_chain, n_draw, d, n_columns, pooled):
    """Bytes ``quadratic_forms`` holds beyond W and the draws, for W with ``n_columns``
    columns: each unit of work's share of the forms (units x 2 x columns), their sum per
    row tile and per chain (this process; a cluster's workers hold their own)."""
    starts, stops, chain_start = row_tiles(n_chain, n_draw)
    units = quadratic_pieces(starts, stops, chain_start, pooled,
                             8 * d + 20 + 2 * n_columns)[0].shape[0]
    return 8.0 * n_columns * (2 * units + 4 * starts.shape[0] + n_chain + 1)


def quadratic_forms(draws, scores, preconditioner, kernel, weights, pooled, backend=None,
                    bar=None):
    """w_b^T K_p w_b for every column of W, per chain and (optionally) pooled.

    Parameters
    ----------
    draws, scores : ndarray (chain, draw, d), finite float64
    preconditioner : Preconditioner, resolved from the pooled draws
    kernel : steindiag.kernels.BaseKernel
    weights : ndarray (chain * draw, B), C-contiguous, rows in chain-major order
    pooled : bool, also the forms on all chains together (cross-chain pairs included)
    backend : None (this process) or a cluster backend (``steindiag.engine``)
    bar : object with ``update(n)``, optional
        Advanced by the pairs of points evaluated (this process only).

    Returns
    -------
    per_chain : ndarray (chain, B)
        w_b^T K_p w_b on each chain alone (its rows of W).
    pooled : ndarray (B,) or None

    O(N^2 (d + B)) time for N = chain * draw if pooled (chain * draw^2 (d + B) if not),
    O(N B) memory (W); K_p and K_p W are never stored. Ctrl-C is honoured within about
    ``engine.progress.CHUNK_SECONDS`` of work (this process).
    """
    n_chain, n_draw, d = draws.shape
    draws_k, scores_k = preconditioner.to_kernel_coordinates(
        draws.reshape(-1, d), scores.reshape(-1, d))
    draws_t = np.ascontiguousarray(draws_k.T[None, :, :])
    scores_t = np.ascontiguousarray(scores_k.T[None, :, :])
    starts, stops, chain_start = row_tiles(n_chain, n_draw)
    if backend is not None:
        out = backend.quadratic_form_tiles(draws_t, scores_t, preconditioner, kernel,
                                           weights, starts, stops, chain_start,
                                           pooled)
    else:
        out = np.empty((starts.shape[0], 2, weights.shape[1]))
        with single_threaded_blas():
            stein_quadratic_forms(draws_t, scores_t, preconditioner.a,
                                  preconditioner.isotropic, kernel.numba_kind,
                                  kernel.numba_params,
                                  preconditioner.trace_a, weights, starts, stops, chain_start,
                                  pooled, out, bar=bar)
    tile_chain = starts // n_draw
    per_chain = np.zeros((n_chain, weights.shape[1]))
    np.add.at(per_chain, tile_chain, out[:, 0])
    return per_chain, (out.sum(axis=(0, 1)) if pooled else None)


def stein_matrix_product(points, scores, preconditioner, kernel, weights):
    """K_p @ W for (N, d) points and scores and an (N, B) matrix W, in one tiled pass.

    O(N^2 (d + B)) time; memory O(N B) for W and the result, K_p is never stored. The
    bootstrap itself needs only diag(W^T K_p W), which ``quadratic_forms`` computes with
    half the products and without the (N, B) result.
    """
    draws_k, scores_k = preconditioner.to_kernel_coordinates(points, scores)
    draws_t = np.ascontiguousarray(draws_k.T[None, :, :])
    scores_t = np.ascontiguousarray(scores_k.T[None, :, :])
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    out = np.empty(weights.shape)
    with single_threaded_blas():
        stein_matmat(draws_t, scores_t, preconditioner.a, preconditioner.isotropic,
                     kernel.numba_kind, kernel.numba_params, preconditioner.trace_a, weights,
                     out)
    return out
