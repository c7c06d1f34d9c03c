"""Nyström products: the Stein kernel between all draws and m landmarks, streamed.

Data flow (see the Background page of the docs, "Nyström KSD"):

    draws, scores (chain, draw, d), preconditioner, kernel
      -> m landmarks L drawn from the draws with the caller's rng
      -> K_mm = K_p(L, L) -> projection M = Lambda_r^(-1/2) U_r^T (eigenvalues of K_mm
         below a relative cut-off dropped), so that the features of x are
         phi(x) = M K_p(L, x) and K_p(x, y) ~ phi(x).phi(y)
      -> blocks of draw indices (every chain): K_p(L, X_block) from ``cross_stein_block``
         (Numba, parallel over draws), reduced at once into m-vectors or (m, B) products;
         no N x m array is held.

Nothing here imports xarray and nothing validates input.
"""

import numba as nb
import numpy as np

from steindiag.engine.row_sums import _FAST_SUM, _accumulate_block, stein_kernel_diagonal
from steindiag.kernels._stein import block_stein_values, kernel_constants

__all__ = ["cross_stein_block", "Landmarks", "choose_landmarks", "default_n_landmarks"]

# Draws per inner block of the cross product (per-pair temporaries live in L1).
_BLOCK = 256


@nb.njit(cache=True, parallel=True, fastmath=_FAST_SUM)
def cross_stein_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, land_x, land_s,
                      out):
    """out[r, j] = k_p(L_r, x_j): landmarks (m, d) against points (1, d, n), kernel coordinates.

    Parallel over blocks of 256 points; m n pair evaluations, no memory beyond ``out``.
    """
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_land = land_x.shape[0]
    c2, beta = kernel_constants(kind, params)
    n_chunks = (n + _BLOCK - 1) // _BLOCK
    for chunk in nb.prange(n_chunks):
        qdist = np.empty(_BLOCK)
        a2dist = np.empty(_BLOCK)
        uads = np.empty(_BLOCK)
        ss = np.empty(_BLOCK)
        x_i = np.empty(d)
        s_i = np.empty(d)
        j0 = chunk * _BLOCK
        nj = min(_BLOCK, n - j0)
        for r in range(n_land):
            for k in range(d):
                x_i[k] = land_x[r, k]
                s_i[k] = land_s[r, k]
            _accumulate_block(draws_t, scores_t, a, isotropic, 0, j0, nj, x_i, s_i, qdist,
                              a2dist, uads, ss)
            block_stein_values(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, 1.0,
                               out[r, j0 : j0 + nj])
