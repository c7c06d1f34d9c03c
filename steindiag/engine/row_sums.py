"""Numba row-sum passes of the Langevin Stein kernel (see the Background page of the docs).

Nothing here imports xarray, PyMC or matplotlib, and nothing validates input:
callers pass float64, C-contiguous arrays that are already in the kernel's
coordinates (see ``steindiag.engine.local``).

Coordinates. Every preconditioner is reduced to a *diagonal* matrix
``A = diag(a)`` by an orthogonal rotation of draws and scores (which leaves
dot products unchanged). With ``u = x - y``,

    qdist   = u^T A u            a2dist = u^T A^2 u
    uads    = u^T A (s(x) - s(y))  ss   = s(x) . s(y)
    k_p     = -4 f''(qdist) a2dist - 2 f'(qdist) (tr A + uads) + f(qdist) ss

for the base kernel k(x, y) = f(u^T A u) given by a kind token ``kind`` and a float64
``params`` array (IMQ: f = (c^2 + t)^beta, params = [c^2, beta]). The formulas of every
kernel are in ``steindiag.kernels._stein``; each kernel's token has its own Numba type,
so each pass below is compiled once per kernel, with the other kernels' code removed.

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
from numba.extending import overload

from steindiag.engine.threads import on_threads as _on_threads
from steindiag.kernels._stein import (  # noqa: F401  (_q_powers, stein_combine: re-exported)
    FAST_SUM as _FAST_SUM,
    IMQ,
    GAUSSIAN,
    MATERN32,
    MATERN52,
    _IMQ_SQRT,
    _imq_half,
    _q_powers,
    _token_kind,
    block_stein_sum,
    kernel_constants,
    profile_at_zero,
    stein_combine,
    stein_pair,
    stein_value,
)

__all__ = [
    "lower_row_sums",
    "lower_row_sums_gemm",
    "same_chain_row_sums",
    "stein_kernel_diagonal",
]

# Draws per inner block: the per-pair accumulators of one block live in L1.
_BLOCK = 256


@nb.njit(cache=True)
def stein_kernel_diagonal(scores_sq, kind, params, trace_a):
    """k_p(x, x) = -2 f'(0) tr(A) + f(0) |s(x)|^2.

    IMQ: f(0) = c^(2 beta), f'(0) = beta c^(2 beta - 2).
    """
    f0, df0 = profile_at_zero(kind, params)
    return -2.0 * df0 * trace_a + f0 * scores_sq


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _accumulate_block(
    draws_t, scores_t, a, isotropic, chain_j, j0, nj, x_i, s_i, qdist, a2dist, uads, ss
):
    """Fill the four per-pair quantities between draw i and draws j0..j0+nj of chain_j.

    d >= 1. The first coordinate writes the sums and the others add to them, so there is
    no zeroing pass (at d = 2 that pass and the separate isotropic scaling cost 25 % of
    the row-sum pass).
    """
    d = draws_t.shape[1]
    if isotropic:
        # A = a I: accumulate |u|^2 and u.(s_i - s_j) (8 flops per dim); the last
        # coordinate scales by a.
        a0 = a[0]
        for k in range(d):
            xk = x_i[k]
            sk = s_i[k]
            xs = draws_t[chain_j, k, j0 : j0 + nj]
            ssj = scores_t[chain_j, k, j0 : j0 + nj]
            if k == 0 and d == 1:
                for m in range(nj):
                    u = xk - xs[m]
                    q = u * u
                    qdist[m] = a0 * q
                    a2dist[m] = a0 * a0 * q
                    uads[m] = a0 * (u * (sk - ssj[m]))
                    ss[m] = sk * ssj[m]
            elif k == 0:
                for m in range(nj):
                    u = xk - xs[m]
                    qdist[m] = u * u
                    uads[m] = u * (sk - ssj[m])
                    ss[m] = sk * ssj[m]
            elif k < d - 1:
                for m in range(nj):
                    u = xk - xs[m]
                    qdist[m] += u * u
                    uads[m] += u * (sk - ssj[m])
                    ss[m] += sk * ssj[m]
            else:
                for m in range(nj):
                    u = xk - xs[m]
                    q = qdist[m] + u * u
                    qdist[m] = a0 * q
                    a2dist[m] = a0 * a0 * q
                    uads[m] = a0 * (uads[m] + u * (sk - ssj[m]))
                    ss[m] += sk * ssj[m]
    else:
        for k in range(d):
            xk = x_i[k]
            sk = s_i[k]
            ak = a[k]
            xs = draws_t[chain_j, k, j0 : j0 + nj]
            ssj = scores_t[chain_j, k, j0 : j0 + nj]
            if k == 0:
                for m in range(nj):
                    u = xk - xs[m]
                    au = ak * u
                    qdist[m] = au * u
                    a2dist[m] = au * au
                    uads[m] = au * (sk - ssj[m])
                    ss[m] = sk * ssj[m]
            else:
                for m in range(nj):
                    u = xk - xs[m]
                    au = ak * u
                    qdist[m] += au * u
                    a2dist[m] += au * au
                    uads[m] += au * (sk - ssj[m])
                    ss[m] += sk * ssj[m]


def lower_row_sums(
    draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same, row_all, t_begin, t_end
):
    """Row sums of k_p over earlier draws, for every draw (fused per-pair loop).

    Parameters
    ----------
    draws_t, scores_t : float64 (chain, d, draw), C-contiguous
    a : float64 (d,) diagonal of A in these coordinates (only a[0] used if isotropic)
    isotropic : bool, A = a[0] I
    kind, params : the base kernel: kind token and parameters (``steindiag.kernels._stein``)
    trace_a : tr A
    row_same, row_all : float64 (chain, draw) outputs; entries t_begin..t_end-1 are written.
    t_begin, t_end : int
        Rows (draw indices) to compute, so that a caller can run the pass in chunks
        (progress, interruption).

    Uses O(chain * draw) memory besides its inputs; the kernel matrix is not stored.
    Work is split over draw indices t in a balanced way (block b paired with
    block n - 1 - b) because row t costs O(t).
    """
    rows_per_task = 8
    n_blocks = (t_end - t_begin + rows_per_task - 1) // rows_per_task
    _on_threads(_lower_row_sums_tasks, draws_t, scores_t, a, bool(isotropic), kind, params,
                float(trace_a), row_same, row_all, np.int64(t_begin), np.int64(t_end),
                np.int64(rows_per_task), np.int64(n_blocks))


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _lower_row_sums_tasks(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same,
                          row_all, t_begin, t_end, rows_per_task, n_blocks, first, step):
    """Tasks first, first + step, ... of ``lower_row_sums`` (see ``engine.threads``).

    Task b holds the rows of blocks b and n_blocks - 1 - b.
    """
    n_tasks = (n_blocks + 1) // 2
    for task in range(first, n_tasks, step):
        _lower_row_sums_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same,
                             row_all, t_begin, t_end, rows_per_task, n_blocks, task)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _lower_row_sums_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same,
                         row_all, t_begin, t_end, rows_per_task, n_blocks, task):
    """Rows of blocks ``task`` and ``n_blocks - 1 - task`` of ``lower_row_sums``."""
    c2, beta = kernel_constants(kind, params)
    n_chain = draws_t.shape[0]
    d = draws_t.shape[1]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    for half in range(2):
        block = np.int64(task) if half == 0 else np.int64(n_blocks - 1 - task)
        if half == 1 and block == task:
            break
        t_start = t_begin + block * rows_per_task
        t_stop = min(t_start + rows_per_task, t_end)
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
                        total += block_stein_sum(
                            kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a
                        )
                    total_all += total
                    if c_j == c:
                        total_same = total
                row_all[c, t] = total_all
                row_same[c, t] = total_same


def same_chain_row_sums(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same,
                        c_begin, c_end):
    """Row sums of k_p over the earlier draws of the same chain only (fused per-pair loop).

    Same layout and constants as ``lower_row_sums``; rows of chains c_begin..c_end-1 of
    ``row_same`` (chain, draw) are written. Chains are split over threads, so this is the
    pass to use when there are many chains: its work, n_chain n_draw^2 / 2 pairs, is
    1/n_chain of the pooled pass.
    """
    _on_threads(_same_chain_tasks, draws_t, scores_t, a, bool(isotropic), kind, params,
                float(trace_a), row_same, np.int64(c_begin), np.int64(c_end))


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _same_chain_tasks(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same, c_begin,
                      c_end, first, step):
    """Chains c_begin + first, c_begin + first + step, ... of ``same_chain_row_sums``."""
    for c in range(c_begin + first, c_end, step):
        _same_chain_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same, c)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _same_chain_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, row_same, c):
    """Chain ``c`` of ``same_chain_row_sums``."""
    c2, beta = kernel_constants(kind, params)
    d = draws_t.shape[1]
    n_draw = draws_t.shape[2]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    for t in range(n_draw):
        for k in range(d):
            x_i[k] = draws_t[c, k, t]
            s_i[k] = scores_t[c, k, t]
        total = 0.0
        for j0 in range(0, t, _BLOCK):
            nj = min(_BLOCK, t - j0)
            _accumulate_block(
                draws_t, scores_t, a, isotropic, c, j0, nj, x_i, s_i, qdist, a2dist,
                uads, ss,
            )
            total += block_stein_sum(kind, c2, beta, qdist, a2dist, uads, ss, nj,
                                     trace_a)
        row_same[c, t] = total


# A pair's |z_i - z_j|^2 from |z_i|^2 + |z_j|^2 - 2 z_i.z_j is off by about
# eps (|z_i|^2 + |z_j|^2), which matters only relative to q = c^2 + |z_i - z_j|^2. Where
# the norms exceed this many times q (repeated draws far from the centre, as after a
# Metropolis rejection on a large scale), the pair is recomputed from its differences:
# the relative error of q then stays below about 1e3 eps.
_CANCELLATION_RATIO = 1e3


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _tile_pair_loop(
    g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj, limit,
    isotropic, scale_q, c2, beta, trace_a, kept, variant,
):
    """The loop of ``_tile_pair_sum`` for one kernel ``variant`` (a constant after inlining).

    c2 is the kernel's t_scale (c^2 for the IMQ, see ``kernel_constants``): a pair is
    exact enough when the norms are below ``_CANCELLATION_RATIO`` (c2 + qdist). For the
    Matern 3/2 kernel, whose k_p changes like sqrt(t) near t = 0 (so that an error e in
    t costs sqrt(e)), the bound is ``_CANCELLATION_RATIO`` sqrt(qdist) instead: pairs
    closer than about norms / 1e3 (repeated draws) are recomputed from differences.
    """
    total = 0.0
    c1 = -4.0 * beta * (beta - 1.0)
    c0 = -2.0 * beta
    for m in range(limit):
        norms_q = scale_q * (nq_i + nq_j[m])
        qdist = max(norms_q - 2.0 * scale_q * g_q[m], 0.0)
        if variant == MATERN32:
            q = np.sqrt(qdist)
        else:
            q = c2 + qdist
        if isotropic:
            a2dist = scale_q * qdist
            exact = norms_q <= _CANCELLATION_RATIO * q
        else:
            norms_a2 = na2_i + na2_j[m]
            a2dist = max(norms_a2 - 2.0 * g_a2[m], 0.0)
            # a2dist enters next to q tr(A): the same test on that scale.
            exact = (norms_q <= _CANCELLATION_RATIO * q) & (
                norms_a2 <= _CANCELLATION_RATIO * q * trace_a)
        uads = scale_q * (ys_ii + ys_jj[m] - g_ys[m] - g_sy[m])
        value = stein_value(variant, qdist, a2dist, uads, g_ss[m], c2, beta, trace_a, c1, c0)
        # Arithmetic rather than a branch, so that the loop still vectorises.
        keep = np.float64(exact)
        kept[m] = keep
        total += value * keep
    return total


def _tile_pair_sum(
    g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj, limit,
    isotropic, scale_q, kind, params, trace_a, kept,
):
    """sum_m k_p over pairs (i, m), m < limit, of one tile row, from Gram-row slices.

    ``g_*`` are the row of draw i in the Gram blocks z.z', y.y', y.s', s.y' and s.s',
    restricted to the columns of one chain; ``nq_j``, ``na2_j`` and ``ys_jj`` are that
    chain's row norms. Pairs whose distances lose too many digits to cancellation (see
    ``_CANCELLATION_RATIO``) are left out of the sum, with ``kept[m] = 0`` (1 otherwise),
    for the caller to recompute.

    The loop vectorises (SIMD division and square root, about 0.5 ns a pair on one
    core) only if: each kernel, and the IMQ's beta = -1/2 case, is a loop of its own (a
    constant ``variant`` after inlining; otherwise LLVM may if-convert and call pow on
    every lane, 17x slower);
    ``error_model="numpy"``, here and in the caller that inlines this (Python's error
    model checks every division for zero, q >= c^2 > 0 never is, and that check alone
    kept the loop scalar, 8x slower); and no second reduction, such as a count of the
    pairs left out (hence the ``kept`` flags).

    Compiled code only: an overload that compiles the loop of the token's kernel alone.
    """
    raise NotImplementedError("_tile_pair_sum runs in compiled code only.")


@overload(_tile_pair_sum, inline="always")
def _tile_pair_sum_overload(
    g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj, limit,
    isotropic, scale_q, kind, params, trace_a, kept,
):
    value = _token_kind(kind)
    if _imq_half(kind):
        def imq_sqrt(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj, limit,
                     isotropic, scale_q, kind, params, trace_a, kept):
            c2, beta = kernel_constants(kind, params)
            return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii,
                                   ys_jj, limit, isotropic, scale_q, c2, beta, trace_a, kept,
                                   _IMQ_SQRT)
        return imq_sqrt
    if value == IMQ:
        def imq(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj, limit,
                isotropic, scale_q, kind, params, trace_a, kept):
            c2, beta = kernel_constants(kind, params)
            if beta == -0.5:
                return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j,
                                       ys_ii, ys_jj, limit, isotropic, scale_q, c2, beta,
                                       trace_a, kept, _IMQ_SQRT)
            return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii,
                                   ys_jj, limit, isotropic, scale_q, c2, beta, trace_a, kept,
                                   IMQ)
        return imq
    if value == GAUSSIAN:
        def gaussian(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj,
                     limit, isotropic, scale_q, kind, params, trace_a, kept):
            c2, beta = kernel_constants(kind, params)
            return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii,
                                   ys_jj, limit, isotropic, scale_q, c2, beta, trace_a, kept,
                                   GAUSSIAN)
        return gaussian
    if value == MATERN32:
        def matern32(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj,
                     limit, isotropic, scale_q, kind, params, trace_a, kept):
            c2, beta = kernel_constants(kind, params)
            return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii,
                                   ys_jj, limit, isotropic, scale_q, c2, beta, trace_a, kept,
                                   MATERN32)
        return matern32

    def matern52(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii, ys_jj,
                 limit, isotropic, scale_q, kind, params, trace_a, kept):
        c2, beta = kernel_constants(kind, params)
        return _tile_pair_loop(g_q, g_a2, g_ys, g_sy, g_ss, nq_i, nq_j, na2_i, na2_j, ys_ii,
                               ys_jj, limit, isotropic, scale_q, c2, beta, trace_a, kept,
                               MATERN52)
    return matern52


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _pair_from_differences(z_i, z_j, y_i, y_j, s_i, s_j, ss, isotropic, scale_q, kind, params,
                           trace_a):
    """k_p of one pair from its coordinate differences (no cancellation), O(d)."""
    qdist = 0.0
    a2dist = 0.0
    uads = 0.0
    for k in range(z_i.shape[0]):
        dz = z_i[k] - z_j[k]
        dy = y_i[k] - y_j[k]
        qdist += dz * dz
        a2dist += dy * dy
        uads += dy * (s_i[k] - s_j[k])
    qdist *= scale_q
    if isotropic:
        a2dist = scale_q * qdist
    return stein_pair(kind, params, qdist, a2dist, scale_q * uads, ss, trace_a)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _tile_row_sums(
    gram, gram_q, panel_i, panel_j, valid_i, valid_j, diagonal_tile,
    norm_q_i, norm_a2_i, ys_i, norm_q_j, norm_a2_j, ys_j,
    isotropic, scale_q, kind, params, trace_a, kept, out_same, out_all,
):
    """Add one tile's k_p row sums to ``out_same``/``out_all`` (chain, tile), serially.

    ``gram`` is the Gram matrix of the stacked panels [Y; S] of the row tile and the
    column tile (y = a x, or x if isotropic): block (p, q) starts at row p * chain * tile,
    column q * chain * tile, and row ``c * tile + t`` of a block is draw t of chain c.
    ``gram_q`` holds the z.z' products (z = sqrt(a) x): ``gram`` itself if isotropic.
    ``panel_i``, ``panel_j`` (n_blocks, chain, tile, d) are the tiles themselves, for
    the pairs recomputed from differences; ``kept`` is (tile,) float64 scratch.
    """
    n_blocks, n_chain, tile, _ = panel_i.shape
    rows = n_chain * tile
    t_scale = kernel_constants(kind, params)[0]
    y = n_blocks - 2
    s = n_blocks - 1
    # Largest column norms per chain: pairs can be left out only if these allow it.
    max_q_j = np.empty(n_chain)
    max_a2_j = np.empty(n_chain)
    for c_j in range(n_chain):
        max_q_j[c_j] = norm_q_j[c_j, :valid_j].max()
        max_a2_j[c_j] = norm_a2_j[c_j, :valid_j].max()
    for c_i in range(n_chain):
        for tl in range(valid_i):
            r = c_i * tile + tl
            total_all = 0.0
            for c_j in range(n_chain):
                if diagonal_tile:
                    limit = tl + 1 if c_j < c_i else tl
                else:
                    limit = valid_j
                col = c_j * tile
                g_ss = gram[rows + r, rows + col : rows + col + limit]
                # Row slices of the Gram blocks: z.z', y.y', y.s', s.y' and s.s'.
                total = _tile_pair_sum(
                    gram_q[r, col : col + limit],
                    gram[r, col : col + limit],
                    gram[r, rows + col : rows + col + limit],
                    gram[rows + r, col : col + limit],
                    g_ss,
                    norm_q_i[c_i, tl], norm_q_j[c_j], norm_a2_i[c_i, tl], norm_a2_j[c_j],
                    ys_i[c_i, tl], ys_j[c_j], limit, isotropic, scale_q, kind, params, trace_a,
                    kept,
                )
                # t_scale + qdist >= t_scale, so no pair was left out unless the norms
                # reach this bound.
                may_lose = scale_q * (norm_q_i[c_i, tl] + max_q_j[c_j]) > (
                    _CANCELLATION_RATIO * t_scale)
                if not isotropic:
                    may_lose = may_lose or norm_a2_i[c_i, tl] + max_a2_j[c_j] > (
                        _CANCELLATION_RATIO * t_scale * trace_a)
                if may_lose:
                    for m in range(limit):
                        if kept[m] == 0.0:
                            total += _pair_from_differences(
                                panel_i[0, c_i, tl], panel_j[0, c_j, m],
                                panel_i[y, c_i, tl], panel_j[y, c_j, m],
                                panel_i[s, c_i, tl], panel_j[s, c_j, m],
                                g_ss[m], isotropic, scale_q, kind, params, trace_a,
                            )
                total_all += total
                if c_j == c_i:
                    out_same[c_i, tl] += total
            out_all[c_i, tl] += total_all


def lower_row_sums_gemm(
    panels, norm_q, norm_a2, ys, n_draw, isotropic, scale_q, kind, params, trace_a,
    row_same, row_all, tile_begin, tile_end,
):
    """Row sums of k_p over earlier draws, with dot products from BLAS (tiled).

    Parameters
    ----------
    panels : float64 (n_tiles, n_blocks, chain, tile, d)
        Draw tile I of every chain, zero-padded past ``n_draw``, for each stacked
        block: [Z, Y, S] (z = sqrt(a) x, y = a x) or, if isotropic, [X, S].
    norm_q, norm_a2, ys : float64 (n_tiles, chain, tile)
        Row-wise |z|^2, |y|^2 and y.s.
    isotropic, scale_q : A = scale_q * I if isotropic (scale_q = 1 otherwise).
    row_same, row_all : float64 (chain, n_tiles * tile) outputs; the rows of row tiles
        tile_begin..tile_end-1 are overwritten (a caller may run the pass in chunks).

    Each parallel task owns the rows of two row tiles (the k-th and the k-th from last
    of the range, for balance) and, for every earlier column tile, takes from BLAS the
    Gram matrix of [Y; S] (all four blocks are used) and, unless isotropic, of Z:
    8 d flops a pair (10 d unless isotropic). Call with BLAS limited to one thread (the
    caller does): nested thread pools are several times slower. Memory per thread:
    (2 chain tile)^2 doubles, plus (chain tile)^2 unless isotropic.
    """
    tile = panels.shape[3]
    n_range = tile_end - tile_begin
    row_same[:, tile_begin * tile : tile_end * tile] = 0.0
    row_all[:, tile_begin * tile : tile_end * tile] = 0.0
    _on_threads(_gemm_tasks, panels, norm_q, norm_a2, ys, np.int64(n_draw), bool(isotropic),
                float(scale_q), kind, params, float(trace_a), row_same, row_all,
                np.int64(tile_begin), np.int64(n_range))


# error_model="numpy": _tile_row_sums is inlined here, and its pair loops vectorise only
# without Python's division checks (see _tile_pair_sum).
@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _gemm_tasks(panels, norm_q, norm_a2, ys, n_draw, isotropic, scale_q, kind, params, trace_a,
                row_same, row_all, tile_begin, n_range, first, step):
    """Tasks first, first + step, ... of ``lower_row_sums_gemm`` (see ``engine.threads``)."""
    n_tasks = (n_range + 1) // 2
    for task in range(first, n_tasks, step):
        _gemm_task(panels, norm_q, norm_a2, ys, n_draw, isotropic, scale_q, kind, params,
                   trace_a, row_same, row_all, tile_begin, n_range, task)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _gemm_task(panels, norm_q, norm_a2, ys, n_draw, isotropic, scale_q, kind, params, trace_a,
               row_same, row_all, tile_begin, n_range, task):
    """Row tiles ``task`` and ``n_range - 1 - task`` (from ``tile_begin``) of ``lower_row_sums_gemm``."""
    n_tiles, n_blocks, n_chain, tile, d = panels.shape
    rows = n_chain * tile
    kept = np.empty(tile)
    # The Gram blocks are allocated once per task: where malloc hands large blocks
    # back to the OS at once (dask's worker processes set MALLOC_TRIM_THRESHOLD_), an
    # allocation per tile pair page-faults 2 MB each time, 5-7x the tile's own cost.
    gram = np.empty((2 * rows, 2 * rows))
    gram_q = gram if isotropic else np.empty((rows, rows))
    for half in range(2):
        offset = np.int64(task) if half == 0 else np.int64(n_range - 1 - task)
        if half == 1 and offset == task:
            break
        tile_i = tile_begin + offset
        yi_si = panels[tile_i, n_blocks - 2 :].reshape(2 * rows, d)
        z_i = panels[tile_i, 0].reshape(rows, d)
        valid_i = min(tile, n_draw - tile_i * tile)
        out_same = row_same[:, tile_i * tile : (tile_i + 1) * tile]
        out_all = row_all[:, tile_i * tile : (tile_i + 1) * tile]
        for tile_j in range(tile_i + 1):
            np.dot(yi_si, panels[tile_j, n_blocks - 2 :].reshape(2 * rows, d).T, gram)
            if not isotropic:
                np.dot(z_i, panels[tile_j, 0].reshape(rows, d).T, gram_q)
            _tile_row_sums(
                gram, gram_q, panels[tile_i], panels[tile_j], valid_i, tile,
                tile_i == tile_j, norm_q[tile_i], norm_a2[tile_i], ys[tile_i],
                norm_q[tile_j], norm_a2[tile_j], ys[tile_j],
                isotropic, scale_q, kind, params, trace_a, kept, out_same, out_all,
            )
