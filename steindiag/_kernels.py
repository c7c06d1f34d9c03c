"""Numba kernels for the IMQ Langevin Stein kernel (MATH.md section 2).

Nothing here imports xarray, PyMC or matplotlib, and nothing validates input:
callers pass float64, C-contiguous arrays that are already in the kernel's
coordinates (see ``steindiag._engine``).

Coordinates. Every preconditioner is reduced to a *diagonal* matrix
``A = diag(a)`` by an orthogonal rotation of draws and scores (which leaves
dot products unchanged). With ``u = x - y``,

    qdist   = u^T A u            a2dist = u^T A^2 u
    uads    = u^T A (s(x) - s(y))  ss   = s(x) . s(y)
    k_p     = -4 beta (beta - 1) q^(beta-2) a2dist
              - 2 beta q^(beta-1) (tr A + uads) + q^beta ss,   q = c^2 + qdist.

Layout. Draws and scores are stored chain by chain and transposed,
``(chain, d, draw)``, so that the innermost loop runs over draws with unit
stride and vectorises (SIMD) whatever ``d`` is.

Row sums. For a draw i = (c, t) the *earlier* draws are, in time-major order,
all (c', t') with t' < t, plus (c', t) with c' < c. ``lower_row_sums`` returns,
for every draw, the sum of k_p over earlier draws of its own chain and over
earlier draws of all chains. The V-statistic of every chain, of the pool, and
of every prefix (the running curve) are cumulative sums of these two arrays,
so one O(N^2 d) pass with O(N) extra memory gives all of them.
"""

import numba as nb
import numpy as np

__all__ = [
    "lower_row_sums",
    "lower_row_sums_tile",
    "stein_kernel_diagonal",
    "stein_kernel_value",
]

# Draws per inner block: the per-pair accumulators of one block live in L1.
_BLOCK = 256


@nb.njit(cache=True, inline="always")
def stein_kernel_value(qdist, a2dist, uads, ss, c2, beta, trace_a):
    """k_p for one pair from its four reduced quantities (MATH.md section 2)."""
    q = c2 + qdist
    if beta == -0.5:
        inv_q = 1.0 / q
        q_beta = np.sqrt(inv_q)
    else:
        inv_q = 1.0 / q
        q_beta = q**beta
    q_beta1 = q_beta * inv_q
    q_beta2 = q_beta1 * inv_q
    return (
        -4.0 * beta * (beta - 1.0) * q_beta2 * a2dist
        - 2.0 * beta * q_beta1 * (trace_a + uads)
        + q_beta * ss
    )


@nb.njit(cache=True)
def stein_kernel_diagonal(scores_sq, c2, beta, trace_a):
    """k_p(x, x) = -2 beta c^(2 beta - 2) tr(A) + c^(2 beta) |s(x)|^2."""
    c_beta = c2**beta
    return -2.0 * beta * (c_beta / c2) * trace_a + c_beta * scores_sq


@nb.njit(cache=True, inline="always")
def _accumulate_block(
    draws_t, scores_t, a, isotropic, chain_j, j0, nj, x_i, s_i, qdist, a2dist, uads, ss
):
    """Fill the four per-pair quantities between draw i and draws j0..j0+nj of chain_j."""
    d = draws_t.shape[1]
    for m in range(nj):
        qdist[m] = 0.0
        a2dist[m] = 0.0
        uads[m] = 0.0
        ss[m] = 0.0
    if isotropic:
        # A = a I: accumulate |u|^2 and u.(s_i - s_j), scale afterwards (8 flops per dim).
        for k in range(d):
            xk = x_i[k]
            sk = s_i[k]
            xs = draws_t[chain_j, k, j0 : j0 + nj]
            ssj = scores_t[chain_j, k, j0 : j0 + nj]
            for m in range(nj):
                u = xk - xs[m]
                qdist[m] += u * u
                uads[m] += u * (sk - ssj[m])
                ss[m] += sk * ssj[m]
        a0 = a[0]
        for m in range(nj):
            a2dist[m] = a0 * a0 * qdist[m]
            qdist[m] = a0 * qdist[m]
            uads[m] = a0 * uads[m]
    else:
        for k in range(d):
            xk = x_i[k]
            sk = s_i[k]
            ak = a[k]
            xs = draws_t[chain_j, k, j0 : j0 + nj]
            ssj = scores_t[chain_j, k, j0 : j0 + nj]
            for m in range(nj):
                au = ak * (xk - xs[m])
                qdist[m] += au * (xk - xs[m])
                a2dist[m] += au * au
                uads[m] += au * (sk - ssj[m])
                ss[m] += sk * ssj[m]


@nb.njit(cache=True, parallel=True)
def lower_row_sums(draws_t, scores_t, a, isotropic, c2, beta, trace_a, row_same, row_all):
    """Row sums of k_p over earlier draws, for every draw (fused per-pair loop).

    Parameters
    ----------
    draws_t, scores_t : float64 (chain, d, draw), C-contiguous
    a : float64 (d,) diagonal of A in these coordinates (only a[0] used if isotropic)
    isotropic : bool, A = a[0] I
    c2, beta, trace_a : kernel constants (c^2, beta, tr A)
    row_same, row_all : float64 (chain, draw) outputs, overwritten.

    Uses O(chain * draw) memory besides its inputs; the kernel matrix is not stored.
    Work is split over draw indices t in a balanced way (block b paired with
    block n - 1 - b) because row t costs O(t).
    """
    n_chain = draws_t.shape[0]
    d = draws_t.shape[1]
    n_draw = draws_t.shape[2]
    rows_per_task = 8
    n_blocks = (n_draw + rows_per_task - 1) // rows_per_task
    n_tasks = (n_blocks + 1) // 2
    for task in nb.prange(n_tasks):
        qdist = np.empty(_BLOCK)
        a2dist = np.empty(_BLOCK)
        uads = np.empty(_BLOCK)
        ss = np.empty(_BLOCK)
        x_i = np.empty(d)
        s_i = np.empty(d)
        for half in range(2):
            block = task if half == 0 else n_blocks - 1 - task
            if half == 1 and block == task:
                break
            t_start = block * rows_per_task
            t_stop = min(t_start + rows_per_task, n_draw)
            for t in range(t_start, t_stop):
                for c in range(n_chain):
                    for k in range(d):
                        x_i[k] = draws_t[c, k, t]
                        s_i[k] = scores_t[c, k, t]
                    total_all = 0.0
                    total_same = 0.0
                    for c_j in range(n_chain):
                        limit = t + 1 if c_j < c else t
                        total = 0.0
                        for j0 in range(0, limit, _BLOCK):
                            nj = min(_BLOCK, limit - j0)
                            _accumulate_block(
                                draws_t, scores_t, a, isotropic, c_j, j0, nj,
                                x_i, s_i, qdist, a2dist, uads, ss,
                            )
                            for m in range(nj):
                                total += stein_kernel_value(
                                    qdist[m], a2dist[m], uads[m], ss[m], c2, beta, trace_a
                                )
                        total_all += total
                        if c_j == c:
                            total_same = total
                    row_all[c, t] = total_all
                    row_same[c, t] = total_same


@nb.njit(cache=True, parallel=True)
def lower_row_sums_tile(
    gram_q, gram_a2, gram_ys, gram_sy, gram_ss,
    norm_q_i, norm_a2_i, ys_i, norm_q_j, norm_a2_j, ys_j,
    n_chain, t0_i, t0_j, isotropic, scale_q, scale_uads, c2, beta, trace_a, row_same, row_all,
):
    """Add one tile's contribution to the row sums, from precomputed Gram blocks.

    The tile's rows are draws t0_i .. t0_i + b_i - 1 of every chain, ordered
    chain by chain (row ``c * b_i + tl``); its columns likewise from ``t0_j``
    (``t0_j <= t0_i``; ``t0_j == t0_i`` is the diagonal tile, where only
    earlier draws count). The dot products come from BLAS matrix products
    (``steindiag._engine``): with z = sqrt(a) x, y = a x and s the scores,
    ``gram_q = Z_i Z_j^T``, ``gram_a2 = Y_i Y_j^T``, ``gram_ys = Y_i S_j^T``,
    ``gram_sy = S_i Y_j^T``, ``gram_ss = S_i S_j^T``; ``norm_*`` and ``ys_*``
    are the row-wise |z|^2, |y|^2 and y.s. If ``isotropic`` (A = a0 I), z = y = x
    unscaled, ``gram_a2`` is unused and the factors ``scale_q = scale_uads = a0``
    are applied here (qdist = a0 |u|^2, a2dist = a0 qdist, uads = a0 u.ds);
    otherwise both factors are 1. ``row_same``/``row_all`` are (chain, draw)
    accumulators.
    """
    n_rows = gram_q.shape[0]
    b_i = n_rows // n_chain
    b_j = gram_q.shape[1] // n_chain
    diagonal_tile = t0_i == t0_j
    for r in nb.prange(n_rows):
        c_i = r // b_i
        tl = r - c_i * b_i
        total_all = 0.0
        total_same = 0.0
        for c_j in range(n_chain):
            if diagonal_tile:
                limit = tl + 1 if c_j < c_i else tl
            else:
                limit = b_j
            total = 0.0
            for col in range(c_j * b_j, c_j * b_j + limit):
                qdist = scale_q * max(norm_q_i[r] + norm_q_j[col] - 2.0 * gram_q[r, col], 0.0)
                if isotropic:
                    a2dist = scale_q * qdist
                else:
                    a2dist = max(norm_a2_i[r] + norm_a2_j[col] - 2.0 * gram_a2[r, col], 0.0)
                uads = scale_uads * (ys_i[r] + ys_j[col] - gram_ys[r, col] - gram_sy[r, col])
                total += stein_kernel_value(
                    qdist, a2dist, uads, gram_ss[r, col], c2, beta, trace_a
                )
            total_all += total
            if c_j == c_i:
                total_same = total
        row_all[c_i, t0_i + tl] += total_all
        row_same[c_i, t0_i + tl] += total_same
