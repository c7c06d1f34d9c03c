"""Numba kernel sums with a vector-valued result: the SVGD direction and its relatives.

Nothing here imports xarray or PyMC, and nothing validates input: callers pass float64,
C-contiguous arrays (see ``steindiag.variational`` and ``steindiag.estimation``).

For points x_1..x_N in R^d, a base kernel that depends on the scaled squared distance

    r2_ij = sum_k a_k (x_ik - x_jk)^2,   k(x_i, x_j) = f(r2_ij),

and per-point values v_j in R^m, ``kernel_vector_sums`` returns, for every i,

    values_sum[i] = sum_j f(r2_ij) v_j                               (N, m)
    grad_sum[i]   = sum_j grad_{x_j} k(x_j, x_i)
                  = sum_j 2 f'(r2_ij) a o (x_j - x_i)                (N, d)

(the sums run over all j, the term j = i included; its gradient part is zero). With
v = s, the scores, (values_sum + grad_sum) / N is the SVGD direction of Liu & Wang (2016);
with the IMQ profile f(r) = (c^2 + r)^beta they are the sums behind the gradient of
KSD^2 with respect to the scores (see the Background page of the docs).

Profiles (``kind``): 0, Gaussian RBF f(r) = exp(-r); 1, IMQ f(r) = (c^2 + r)^beta.
The kernel's length scales are in ``a`` (for the RBF with bandwidth h: a = 1/h).

Two paths give the same numbers to rounding:

- ``vector_sums_fused``: one loop per pair from coordinate differences, points stored
  transposed (d, N) so that the inner loops run over points with unit stride.
  About 3d + 2m + 2d flops and one exp or square root per pair.
- ``vector_sums_gemm``: tiles whose dot products come from BLAS: the Gram block of the
  scaled, centred points y = sqrt(a) o (x - centre), then ``F @ V`` and ``G @ Y`` for
  the kernel tile F and its derivative tile G (2d + 2m + 2d flops a pair at BLAS speed).
  Distances from |y_i|^2 + |y_j|^2 - 2 y_i.y_j lose about eps (|y_i|^2 + |y_j|^2) to
  cancellation, which moves f by that much relative to the unit scale of r: negligible
  after centring unless points lie thousands of length scales from the centre.
- ``vector_sums_symmetric``: the SVGD numerator (values_sum + grad_sum, m = d) on the BLAS
  path for the IMQ profile: F and G are symmetric, so each unordered pair of tiles is
  computed once and feeds the rows of both (one Gram block, F and G once, three products:
  about 5d flops per unordered pair instead of 12d). Measured on 2 shared cores (N =
  4000, load 28): 1.29 KSD passes per SVGD sum at d = 89 (1.54 for both orders), 1.43 at
  d = 23 (1.76).

Each row i is computed by one task, summing over j in a fixed order (the symmetric path:
in the fixed order of its rounds), so results do not depend on the number of threads. Memory: the outputs, plus per thread a few blocks of
``_BLOCK`` doubles (fused) or tiles of ``GEMM_TILE`` x ``GEMM_TILE`` doubles (BLAS); the
N x N kernel matrix is never stored. Time O(N^2 (d + m)).
"""

import numba as nb
import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.extending import overload

from steindiag.engine.row_sums import _FAST_SUM
from steindiag.engine.progress import run_in_passes
from steindiag.engine.threads import on_threads, single_threaded_blas

__all__ = ["kernel_vector_sums", "pairwise_squared_distances", "vector_sums_fused",
           "vector_sums_gemm", "vector_sums_symmetric", "RBF", "IMQ", "GEMM_TILE", "METHODS"]

RBF = 0
IMQ = 1

# Points per inner block (the per-pair quantities of one block live in L1), as in _kernels.
_BLOCK = 256
# Rows per parallel task of the fused path.
_ROWS_PER_TASK = 8
# Points on each side of a BLAS tile: three (256 x 256) blocks per thread (1.5 MB).
GEMM_TILE = 256


# exp(-r) below this many r is under the smallest normal double; it is returned as 0.
_EXP_CUTOFF = 708.0


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _exp_negative(r2, nj, out, bits):
    """out[m] = exp(-r2[m]) for r2 >= 0, to about one ulp, in a loop that vectorises.

    Numba calls the C library's exp once per element (no SIMD here); this version
    reduces x = -r to x = k ln 2 + g with |g| <= ln(2) / 2 (Cody-Waite, ln 2 in two
    parts), takes exp(g) from its Taylor polynomial of degree 13 (truncation error
    below 4e-18 relative), and builds 2^k from its bit pattern in ``bits``
    (int64 scratch of at least nj entries). Measured: 1 ulp from numpy.exp on [0, 708],
    about 4x faster than the scalar call. r > 708 gives 0 (true value < 3.4e-308).
    """
    for m in range(nj):
        x = max(-r2[m], -_EXP_CUTOFF)
        k = np.floor(x * 1.4426950408889634 + 0.5)
        g = (x - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10
        p = 1.0 / 6227020800.0
        p = p * g + 1.0 / 479001600.0
        p = p * g + 1.0 / 39916800.0
        p = p * g + 1.0 / 3628800.0
        p = p * g + 1.0 / 362880.0
        p = p * g + 1.0 / 40320.0
        p = p * g + 1.0 / 5040.0
        p = p * g + 1.0 / 720.0
        p = p * g + 1.0 / 120.0
        p = p * g + 1.0 / 24.0
        p = p * g + 1.0 / 6.0
        p = p * g + 0.5
        p = p * g + 1.0
        p = p * g + 1.0
        # Arithmetic rather than a branch, so that the loop still vectorises.
        out[m] = p * np.float64(r2[m] <= _EXP_CUTOFF)
        bits[m] = (np.int64(k) + 1023) << 52
    scale = bits[:nj].view(np.float64)
    for m in range(nj):
        out[m] *= scale[m]


def _profile_token(kind, beta):
    """The profile as the compiled passes take it: a tuple whose Numba type names it.

    RBF ``(0,)``; IMQ ``(0, 0)``; IMQ with beta = -1/2 ``(0.0, 0.0)``. A pass is compiled
    for the profile it runs, with that profile's loop alone (the general IMQ keeps its
    run-time branch on beta, so every profile runs the loop it ran before).
    """
    if int(kind) == RBF:
        return (0,)
    return (0.0, 0.0) if float(beta) == -0.5 else (0, 0)


def _profile(r2, nj, kind, c2, beta, f, g, bits):
    """f[m] = f(r2[m]) and g[m] = 2 f'(r2[m]) for the first nj entries (compiled only).

    ``kind`` is a profile token (``_profile_token``).
    """
    raise NotImplementedError("_profile runs in compiled code only.")


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _profile_rbf(r2, nj, f, g, bits):
    _exp_negative(r2, nj, f, bits)
    for m in range(nj):
        g[m] = -2.0 * f[m]


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _profile_imq_half(r2, nj, c2, f, g):
    for m in range(nj):
        inv_q = 1.0 / (c2 + r2[m])
        value = np.sqrt(inv_q)
        f[m] = value
        g[m] = -value * inv_q


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _profile_imq(r2, nj, c2, beta, f, g):
    if beta == -0.5:
        _profile_imq_half(r2, nj, c2, f, g)
        return
    for m in range(nj):
        q = c2 + r2[m]
        value = q**beta
        f[m] = value
        g[m] = 2.0 * beta * value / q


# Not inlined: compiled once per profile and shared by both paths. The pass functions
# below call plain per-task functions (see ``engine.row_sums._lower_row_sums_task``).
@overload(_profile)
def _profile_overload(r2, nj, kind, c2, beta, f, g, bits):
    if not isinstance(kind, types.UniTuple):
        raise TypingError(f"_profile: kind must be a profile token, got {kind}.")
    if kind.count == 1:
        return lambda r2, nj, kind, c2, beta, f, g, bits: _profile_rbf(r2, nj, f, g, bits)
    if isinstance(kind.dtype, types.Float):
        return lambda r2, nj, kind, c2, beta, f, g, bits: _profile_imq_half(r2, nj, c2, f, g)
    return lambda r2, nj, kind, c2, beta, f, g, bits: _profile_imq(r2, nj, c2, beta, f, g)


def vector_sums_fused(x_t, values_t, a, kind, c2, beta, values_sum, grad_sum):
    """values_sum[i] = sum_j f(r2_ij) v_j, grad_sum[i] = sum_j 2 f'(r2_ij) a o (x_j - x_i).

    Parameters
    ----------
    x_t : float64 (d, N), C-contiguous, the points transposed
    values_t : float64 (m, N), C-contiguous, the values transposed
    a : float64 (d,), r2_ij = sum_k a_k (x_ik - x_jk)^2
    kind : int, 0 (RBF, f(r) = exp(-r)) or 1 (IMQ, f(r) = (c2 + r)^beta); the passes
        take it as a profile token (``_profile_token``)
    c2, beta : float, IMQ constants (unused for the RBF)
    values_sum : float64 (N, m), output
    grad_sum : float64 (N, d), output
    """
    d, n = x_t.shape
    n_tasks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    token, c2, beta = _profile_token(kind, beta), float(c2), float(beta)

    def compute_tasks(lo, hi):
        on_threads(_fused_tasks, x_t, values_t, a, token, c2, beta, values_sum, grad_sum,
                   np.int64(lo), np.int64(hi))

    # Calls of about engine.progress.CHUNK_SECONDS: Ctrl-C is honoured between them.
    run_in_passes(compute_tasks, np.full(n_tasks, _ROWS_PER_TASK * n),
                  7 * d + 2 * values_t.shape[0], min_units=8)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _fused_tasks(x_t, values_t, a, kind, c2, beta, values_sum, grad_sum, task_lo, task_hi, first,
                 step):
    """Tasks task_lo + first, task_lo + first + step, ... before task_hi of
    ``vector_sums_fused`` (see ``engine.threads``)."""
    for task in range(task_lo + first, task_hi, step):
        _fused_task(x_t, values_t, a, kind, c2, beta, values_sum, grad_sum, task)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy", inline="always")
def _fused_task(x_t, values_t, a, kind, c2, beta, values_sum, grad_sum, task):
    """Rows ``task * _ROWS_PER_TASK ...`` of ``vector_sums_fused``."""
    d, n = x_t.shape
    m_values = values_t.shape[0]
    r2 = np.empty(_BLOCK)
    f = np.empty(_BLOCK)
    g = np.empty(_BLOCK)
    bits = np.empty(_BLOCK, dtype=np.int64)
    i0 = task * _ROWS_PER_TASK
    rows = min(_ROWS_PER_TASK, n - i0)
    acc_values = np.zeros((rows, m_values))
    acc_grad = np.zeros((rows, d))
    # Blocks of columns outside, the task's rows inside: a block of points and
    # values stays in L1 while every row of the task uses it.
    for j0 in range(0, n, _BLOCK):
        nj = min(_BLOCK, n - j0)
        for r in range(rows):
            i = i0 + r
            for mm in range(nj):
                r2[mm] = 0.0
            for k in range(d):
                ak = a[k]
                xk = x_t[k, i]
                xs = x_t[k, j0 : j0 + nj]
                for mm in range(nj):
                    u = xk - xs[mm]
                    r2[mm] += ak * u * u
            _profile(r2, nj, kind, c2, beta, f, g, bits)
            for c in range(m_values):
                vs = values_t[c, j0 : j0 + nj]
                total = 0.0
                for mm in range(nj):
                    total += f[mm] * vs[mm]
                acc_values[r, c] += total
            for k in range(d):
                xk = x_t[k, i]
                xs = x_t[k, j0 : j0 + nj]
                total = 0.0
                for mm in range(nj):
                    total += g[mm] * (xs[mm] - xk)
                acc_grad[r, k] += a[k] * total
    for r in range(rows):
        for c in range(m_values):
            values_sum[i0 + r, c] = acc_values[r, c]
        for k in range(d):
            grad_sum[i0 + r, k] = acc_grad[r, k]


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _fill_tile(gram, norms_i, norms_j, kind, c2, beta, f_tile, g_tile):
    """Kernel tile F and derivative tile G (= 2 f') from a Gram block of scaled points."""
    ni, nj = gram.shape
    r2 = np.empty(nj)
    bits = np.empty(nj, dtype=np.int64)
    for r in range(ni):
        for mm in range(nj):
            r2[mm] = max(norms_i[r] + norms_j[mm] - 2.0 * gram[r, mm], 0.0)
        _profile(r2, nj, kind, c2, beta, f_tile[r], g_tile[r], bits)


def vector_sums_gemm(y, norms, values, kind, c2, beta, fold, values_sum, grad_sum_y):
    """As ``vector_sums_fused``, with the dot products of each tile from BLAS.

    Parameters
    ----------
    y : float64 (N, d), C-contiguous: sqrt(a) o (x - centre), so that r2_ij = |y_i - y_j|^2
    norms : float64 (N,), |y_i|^2
    values : float64 (N, m), C-contiguous
    kind, c2, beta : as in ``vector_sums_fused``
    fold : bool
        RBF only (where 2 f' = -2 f): skip the product with the derivative tile and
        return grad_sum_y[i] = 2 (sum_j f(r2_ij)) y_i. With values = v - 2 sqrt(a) o y,
        values_sum + sqrt(a) o grad_sum_y is then sum_j f v_j + grad_sum (the SVGD
        numerator) from one matrix product per tile instead of two.
    values_sum : float64 (N, m), output
    grad_sum_y : float64 (N, d), output: sum_j 2 f'(r2_ij) (y_j - y_i); multiply by
        sqrt(a) for ``grad_sum``.

    Each task owns one row tile and runs over all column tiles in order: Gram block
    y_I y_J^T, tiles F and G, then F @ V_J and G @ Y_J (BLAS; the caller limits BLAS to
    one thread). Memory per thread: three ``GEMM_TILE``^2 blocks and the row tile's sums.
    """
    n, d = y.shape
    n_tiles = (n + GEMM_TILE - 1) // GEMM_TILE
    token, c2, beta, fold = _profile_token(kind, beta), float(c2), float(beta), bool(fold)

    def compute_tiles(lo, hi):
        on_threads(_gemm_tiles, y, norms, values, token, c2, beta, fold, values_sum, grad_sum_y,
                   np.int64(lo), np.int64(hi))

    # Calls of about engine.progress.CHUNK_SECONDS: Ctrl-C is honoured between them.
    run_in_passes(compute_tiles, np.full(n_tiles, GEMM_TILE * n), 4 * d + 2 * values.shape[1],
                  min_units=4)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _gemm_tiles(y, norms, values, kind, c2, beta, fold, values_sum, grad_sum_y, tile_lo, tile_hi,
                first, step):
    """Row tiles tile_lo + first, tile_lo + first + step, ... before tile_hi of
    ``vector_sums_gemm`` (see ``engine.threads``)."""
    for tile_i in range(tile_lo + first, tile_hi, step):
        _gemm_tile(y, norms, values, kind, c2, beta, fold, values_sum, grad_sum_y, tile_i)


@nb.njit(cache=True, inline="always", error_model="numpy")
def _gemm_tile(y, norms, values, kind, c2, beta, fold, values_sum, grad_sum_y, tile_i):
    """Row tile ``tile_i`` of ``vector_sums_gemm``."""
    n, d = y.shape
    m_values = values.shape[1]
    n_tiles = (n + GEMM_TILE - 1) // GEMM_TILE
    i0 = tile_i * GEMM_TILE
    i1 = min(i0 + GEMM_TILE, n)
    ni = i1 - i0
    y_i = y[i0:i1]
    # Buffers allocated once per task (fresh large arrays on every tile cost page
    # faults); a tile of any shape is a contiguous reshape of their first entries.
    gram_buffer = np.empty(GEMM_TILE * GEMM_TILE)
    f_buffer = np.empty(GEMM_TILE * GEMM_TILE)
    g_buffer = np.empty(GEMM_TILE * GEMM_TILE)
    values_product = np.empty((ni, m_values))
    grad_product = np.empty((ni, d))
    acc_values = np.zeros((ni, m_values))
    acc_grad = np.zeros((ni, d))
    row_sums = np.zeros(ni)
    for tile_j in range(n_tiles):
        j0 = tile_j * GEMM_TILE
        j1 = min(j0 + GEMM_TILE, n)
        nj = j1 - j0
        gram = gram_buffer[: ni * nj].reshape(ni, nj)
        f_tile = f_buffer[: ni * nj].reshape(ni, nj)
        g_tile = g_buffer[: ni * nj].reshape(ni, nj)
        np.dot(y_i, y[j0:j1].T, gram)
        _fill_tile(gram, norms[i0:i1], norms[j0:j1], kind, c2, beta, f_tile, g_tile)
        np.dot(f_tile, values[j0:j1], values_product)
        # Explicit loops: an array expression would compile Numba's broadcast-error
        # message (string formatting, seconds of a first call).
        for r in range(ni):
            for c in range(m_values):
                acc_values[r, c] += values_product[r, c]
        summed = f_tile if fold else g_tile
        if not fold:
            np.dot(g_tile, y[j0:j1], grad_product)
            for r in range(ni):
                for k in range(d):
                    acc_grad[r, k] += grad_product[r, k]
        for r in range(ni):
            total = 0.0
            for mm in range(nj):
                total += summed[r, mm]
            row_sums[r] += total
    for r in range(ni):
        for c in range(m_values):
            values_sum[i0 + r, c] = acc_values[r, c]
    for r in range(ni):
        for k in range(d):
            if fold:
                grad_sum_y[i0 + r, k] = 2.0 * row_sums[r] * y_i[r, k]
            else:
                grad_sum_y[i0 + r, k] = acc_grad[r, k] - row_sums[r] * y_i[r, k]


# -- the SVGD direction over the pairs i < j only ----------------------------------------
#
# F and G are symmetric (f and f' depend on |y_i - y_j|), so each unordered pair of row
# tiles (I, J) is computed once and feeds both: rows I get F V_J + G Y_J, rows J get
# F^T V_I + G^T Y_I. The pairs run in rounds of a round-robin schedule (the circle method):
# in a round every tile appears in one pair at most, so the pairs of a round run in
# parallel without two threads writing the same rows, and every row receives its terms
# in the round order, whatever the number of threads. Round 0 holds the diagonal tiles.


def _round_pair(round_index, task, n_tiles):
    """Tiles (a, b) of ``task`` in ``round_index`` (a == b in round 0), or (-1, -1)."""
    if round_index == 0:
        return task, task
    padded = n_tiles + n_tiles % 2
    rotating = padded - 1
    r = round_index - 1
    if task == 0:
        a, b = r, rotating
    else:
        a, b = (r + task) % rotating, (r - task + rotating) % rotating
    if a >= n_tiles or b >= n_tiles:
        return -1, -1
    return a, b


_round_pair_compiled = nb.njit(cache=True, inline="always")(_round_pair)


def round_count(n_tiles):
    """Rounds of ``vector_sums_symmetric``: the diagonal round and padded - 1 more."""
    return 1 + (n_tiles + n_tiles % 2 - 1) if n_tiles > 1 else 1


def vector_sums_symmetric(y, norms, stacked, kind, c2, beta, acc):
    """``values_sum + grad_sum`` of ``vector_sums_gemm`` (m = d) over the pairs i <= j once.

    Parameters
    ----------
    y, norms, kind, c2, beta : as in ``vector_sums_gemm``
    stacked : float64 (n_tiles, 2 ``GEMM_TILE``, m + 1), C-contiguous (``stack_tiles``):
        for tile K with nk points, rows 0 .. nk - 1 hold [v_k, 0] and rows nk .. 2 nk - 1
        hold [sqrt(a) o y_k, 1]
    acc : float64 (N, m + 1), zeros on entry; on return acc[i, :m] = sum_j f(r2_ij) v_j +
        sqrt(a) o sum_j 2 f'(r2_ij) y_j and acc[i, m] = sum_j 2 f'(r2_ij). The SVGD
        numerator is acc[:, :m] - sqrt(a) o y * acc[:, m:] (``kernel_vector_sums``).

    Per unordered pair of tiles: one Gram block, F and G once, and three BLAS products
    ([F; G]^T [V_I; Y_I] for rows J; F V_J and G Y_J for rows I): 5 (m + 1) flops a pair
    of points instead of 6 d for both orders. Memory per thread: three ``GEMM_TILE``^2
    blocks.
    """
    n, d = y.shape
    n_tiles = (n + GEMM_TILE - 1) // GEMM_TILE
    token, c2, beta = _profile_token(kind, beta), float(c2), float(beta)
    n_rounds = round_count(n_tiles)
    threads = max(1, int(nb.get_num_threads()))
    workspace = np.empty((threads, 3 * GEMM_TILE * GEMM_TILE))
    products = np.empty((threads, GEMM_TILE, stacked.shape[2]))

    def compute_rounds(lo, hi):
        for round_index in range(lo, hi):
            on_threads(_symmetric_round, y, norms, stacked, token, c2, beta, acc, workspace,
                       products, np.int64(round_index))

    # Work of a round: its pairs (about n_tiles / 2, the diagonal round n_tiles halves).
    work = np.full(n_rounds, 0.5 * n_tiles * GEMM_TILE * GEMM_TILE)
    run_in_passes(compute_rounds, work, 5 * (stacked.shape[2]) + 2 * d)


def stack_tiles(values, y_scaled):
    """The ``stacked`` argument of ``vector_sums_symmetric`` from (N, m) values and the
    (N, d = m) sqrt(a) o y."""
    n, m = values.shape
    n_tiles = (n + GEMM_TILE - 1) // GEMM_TILE
    stacked = np.zeros((n_tiles, 2 * GEMM_TILE, m + 1))
    for tile in range(n_tiles):
        j0 = tile * GEMM_TILE
        nj = min(GEMM_TILE, n - j0)
        stacked[tile, :nj, :m] = values[j0 : j0 + nj]
        stacked[tile, nj : 2 * nj, :m] = y_scaled[j0 : j0 + nj]
        stacked[tile, nj : 2 * nj, m] = 1.0
    return stacked


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _symmetric_round(y, norms, stacked, kind, c2, beta, acc, workspace, products, round_index,
                     first, step):
    """Tasks first, first + step, ... of one round of ``vector_sums_symmetric``."""
    n = y.shape[0]
    n_tiles = (n + GEMM_TILE - 1) // GEMM_TILE
    n_tasks = n_tiles if round_index == 0 else (n_tiles + n_tiles % 2) // 2
    for task in range(first, n_tasks, step):
        a, b = _round_pair_compiled(round_index, task, n_tiles)
        if a >= 0:
            _symmetric_pair(y, norms, stacked, kind, c2, beta, acc, a, b, workspace[first],
                            products[first])


@nb.njit(cache=True, inline="always", error_model="numpy")
def _symmetric_pair(y, norms, stacked, kind, c2, beta, acc, a, b, workspace, product):
    """The terms of the tile pair (a, b) for rows of a and, if a != b, of b."""
    n, d = y.shape
    width = stacked.shape[2]
    i0 = a * GEMM_TILE
    ni = min(GEMM_TILE, n - i0)
    j0 = b * GEMM_TILE
    nj = min(GEMM_TILE, n - j0)
    tile = GEMM_TILE * GEMM_TILE
    gram = workspace[: ni * nj].reshape(ni, nj)
    pair = workspace[tile : tile + 2 * ni * nj].reshape(2 * ni, nj)
    np.dot(y[i0 : i0 + ni], y[j0 : j0 + nj].T, gram)
    _fill_stacked_pair(gram, norms[i0 : i0 + ni], norms[j0 : j0 + nj], kind, c2, beta, pair)
    rows = product[:ni]
    np.dot(pair[:ni], stacked[b, :nj], rows)
    for r in range(ni):
        for c in range(width):
            acc[i0 + r, c] += rows[r, c]
    np.dot(pair[ni:], stacked[b, nj : 2 * nj], rows)
    for r in range(ni):
        for c in range(width):
            acc[i0 + r, c] += rows[r, c]
    if a != b:
        columns = product[:nj]
        np.dot(pair.T, stacked[a, : 2 * ni], columns)
        for r in range(nj):
            for c in range(width):
                acc[j0 + r, c] += columns[r, c]


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _fill_stacked_pair(gram, norms_i, norms_j, kind, c2, beta, pair):
    """[F; G] in ``pair`` (2 ni, nj) from a Gram block of scaled points."""
    ni, nj = gram.shape
    r2 = np.empty(nj)
    bits = np.empty(nj, dtype=np.int64)
    for r in range(ni):
        for mm in range(nj):
            r2[mm] = max(norms_i[r] + norms_j[mm] - 2.0 * gram[r, mm], 0.0)
        _profile(r2, nj, kind, c2, beta, pair[r], pair[ni + r], bits)


def pairwise_squared_distances(x_t, out):
    """out = |x_i - x_j|^2 for all i < j, row by row (row i from offset i M - i (i + 1) / 2).

    x_t : float64 (d, M), C-contiguous; out : float64 (M (M - 1) / 2,). From the
    coordinate differences (no cancellation).
    """
    on_threads(_distance_rows, x_t, out)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _distance_rows(x_t, out, first, step):
    """Rows first, first + step, ... of ``pairwise_squared_distances``."""
    for i in range(first, x_t.shape[1] - 1, step):
        _distance_row(x_t, out, i)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _distance_row(x_t, out, i):
    """Row ``i`` of ``pairwise_squared_distances``."""
    d, m_points = x_t.shape
    offset = i * m_points - (i * (i + 1)) // 2
    length = m_points - 1 - i
    row = out[offset : offset + length]
    for mm in range(length):
        row[mm] = 0.0
    for k in range(d):
        xk = x_t[k, i]
        xs = x_t[k, i + 1 :]
        for mm in range(length):
            u = xk - xs[mm]
            row[mm] += u * u


# Above this many coordinates the BLAS-tiled path is faster (measured as in
# benchmarks/bench_svgd.py).
FUSED_MAX_D = 3
METHODS = ("fused", "gemm")


def kernel_vector_sums(x, values, a, *, kind, c2=1.0, beta=-0.5, method="auto",
                       combine=False):
    """``values_sum`` (N, m) and ``grad_sum`` (N, d) of the module docstring.

    Parameters
    ----------
    x : ndarray (N, d)
    values : ndarray (N, m)
    a : ndarray (d,) or float, positive length-scale weights
    kind : int, ``RBF`` or ``IMQ``
    c2, beta : float, IMQ constants
    method : {"auto", "fused", "gemm"}
        ``"auto"``: ``"fused"`` for d <= ``FUSED_MAX_D``, ``"gemm"`` above.
    combine : bool, default False
        Return ``values_sum + grad_sum`` alone (needs m == d), the SVGD numerator; on the
        BLAS path the RBF folds one of the three products per tile, other profiles run
        ``vector_sums_symmetric`` (each unordered pair once).

    Returns
    -------
    (values_sum, grad_sum), or their sum if ``combine``.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    a = np.ascontiguousarray(np.broadcast_to(a, (x.shape[1],)), dtype=np.float64)
    n, d = x.shape
    if combine and values.shape[1] != d:
        raise ValueError("combine=True needs values with as many columns as x.")
    values_sum = np.empty((n, values.shape[1]))
    grad_sum = np.empty((n, d))
    if method == "auto":
        method = "fused" if d <= FUSED_MAX_D else "gemm"
    if method == "fused":
        vector_sums_fused(np.ascontiguousarray(x.T), np.ascontiguousarray(values.T), a,
                          int(kind), float(c2), float(beta), values_sum, grad_sum)
    elif method == "gemm" and combine and kind != RBF:
        sqrt_a = np.sqrt(a)
        y = np.ascontiguousarray((x - x.mean(axis=0)) * sqrt_a)
        norms = np.einsum("nk,nk->n", y, y)
        acc = np.zeros((n, d + 1))
        with single_threaded_blas():
            vector_sums_symmetric(y, norms, stack_tiles(values, y * sqrt_a), int(kind),
                                  float(c2), float(beta), acc)
        return acc[:, :d] - sqrt_a * y * acc[:, d:]
    elif method == "gemm":
        sqrt_a = np.sqrt(a)
        y = np.ascontiguousarray((x - x.mean(axis=0)) * sqrt_a)
        norms = np.einsum("nk,nk->n", y, y)
        fold = bool(combine and kind == RBF)
        if fold:
            values = np.ascontiguousarray(values - 2.0 * sqrt_a * y)
        with single_threaded_blas():
            vector_sums_gemm(y, norms, values, int(kind), float(c2), float(beta), fold,
                             values_sum, grad_sum)
        grad_sum *= sqrt_a
    else:
        raise ValueError(f"method must be 'auto', 'fused' or 'gemm'; got {method!r}.")
    if combine:
        values_sum += grad_sum
        return values_sum
    return values_sum, grad_sum
