"""Numba products with the Langevin Stein kernel matrix K_p (docs: background page).

Nothing here imports xarray or PyMC, and nothing validates input: callers pass
float64, C-contiguous arrays already in the kernel's coordinates (draws and scores
after ``Preconditioner.to_kernel_coordinates``, so that A = diag(a)), stored
transposed as ``(1, d, N)`` like ``steindiag.engine.row_sums`` (one "chain" holding all N
points, the innermost loops running over points with unit stride).

What each function costs (N points, d parameters, ~8d + 20 flops per pair):

- ``kernel_matvec``: K_p @ w, N (N + 1) / 2 pair evaluations (the lower triangle,
  each pair used for both of its entries), O(N * threads) extra memory.
- ``kernel_rows``: k_p(x_i, x_j) for a few i and all j: N per row, O(rows * N) output.
- ``kernel_matrix``: the dense N x N matrix (8 N^2 bytes), only for the dense QP.
- ``pairwise_frank_wolfe``: the matrix-free weights solver, 2 N pair evaluations
  per iteration and O(N) memory; K_p is never stored.
- ``greedy_thinning``: Stein thinning, N pair evaluations per selected point, O(N)
  memory.

The two sequential solvers synchronise their threads twice per step; callers decide
how many threads they get (``threads_for``; ``methods.weights._run_frank_wolfe`` times both).
"""

import numba as nb
import numpy as np

from steindiag.engine.progress import run_in_passes
from steindiag.engine.threads import on_threads
from steindiag.engine.row_sums import _FAST_SUM, _accumulate_block, stein_kernel_diagonal
from steindiag.kernels._stein import block_stein_values, kernel_constants

__all__ = [
    "kernel_matvec",
    "kernel_rows",
    "kernel_columns",
    "kernel_matrix",
    "pairwise_frank_wolfe",
    "greedy_thinning",
    "KernelPoints",
]

# Points per inner block (the per-pair accumulators of one block live in L1), as in _kernels.
_BLOCK = 256
# Rows per parallel task of the symmetric product (tasks are paired b <-> n - 1 - b).
_ROWS_PER_TASK = 8
# Parts of the symmetric product (at least): a fixed static partition, so that K_p @ w
# is bitwise the same whatever the number of threads up to this many.
_MATVEC_PARTS = 8


# Every function below evaluates kernel rows through ``_row_block``, a function of its own
# (not inlined): it is compiled once per kernel and process, and every pass calls it. The
# parallel passes keep only their prange loops and call plain per-task functions (see
# ``engine.row_sums._lower_row_sums_task``): parallel compilation of a large loop body
# costs seconds.
@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, i, j0, nj,
               x_i, s_i, qdist, a2dist, uads, ss, out):
    """out[:nj] = k_p(x_i, x_j) for j = j0 .. j0 + nj - 1."""
    d = draws_t.shape[1]
    for k in range(d):
        x_i[k] = draws_t[0, k, i]
        s_i[k] = scores_t[0, k, i]
    _accumulate_block(draws_t, scores_t, a, isotropic, 0, j0, nj, x_i, s_i, qdist, a2dist, uads, ss)
    c2, beta = kernel_constants(kind, params)
    block_stein_values(kind, c2, beta, qdist, a2dist, uads, ss, nj, trace_a, 1.0, out)


def kernel_matvec(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, weights,
                  out, scatter):
    """out = K_p @ weights, from the lower triangle (each pair evaluated once).

    Parameters
    ----------
    draws_t, scores_t : float64 (1, d, N), C-contiguous, kernel coordinates
    a, isotropic, kind, params, trace_a : kernel constants as in ``engine.row_sums.lower_row_sums``
    diagonal : float64 (N,), k_p(x_i, x_i)
    weights : float64 (N,)
    out : float64 (N,), overwritten
    scatter : float64 (n_parts, N) workspace, overwritten; n_parts parallel parts

    Part p owns the row tasks p, p + n_parts, ... (task b holds row blocks b and
    n_blocks - 1 - b, which cost the same); row i gathers sum_(j<i) k_ij w_j into
    out[i] and scatters k_ij w_i into scatter[p, j]. The partition is static, so the
    result is the same on every call with the same n_parts. The tasks run in calls of
    about ``engine.progress.CHUNK_SECONDS`` (Ctrl-C is honoured between them); each part
    takes its tasks in increasing order whatever the calls, so the sums do not change.
    Memory: O(n_parts * N).
    """
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_blocks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    n_tasks = (n_blocks + 1) // 2
    scatter[:] = 0.0
    isotropic, trace_a = bool(isotropic), float(trace_a)

    def compute_tasks(lo, hi):
        on_threads(_matvec_parts, draws_t, scores_t, a, isotropic, kind, params, trace_a,
                   diagonal, weights, out, scatter, np.int64(lo), np.int64(hi),
                   np.int64(n_blocks))

    # Task b evaluates about _ROWS_PER_TASK * n pairs (its two row blocks).
    run_in_passes(compute_tasks, np.full(n_tasks, _ROWS_PER_TASK * n), 8 * d + 22,
                  min_units=4 * scatter.shape[0])
    for part in range(scatter.shape[0]):
        out += scatter[part]


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _matvec_parts(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, weights, out,
                  scatter, task_lo, task_hi, n_blocks, first, step):
    """Parts first, first + step, ... of ``kernel_matvec`` (see ``engine.threads``)."""
    for part in range(first, scatter.shape[0], step):
        _matvec_part(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, weights,
                     out, scatter, task_lo, task_hi, n_blocks, part)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _matvec_part(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, weights, out,
                 scatter, task_lo, task_hi, n_blocks, part):
    """Part ``part`` of ``kernel_matvec`` over tasks task_lo .. task_hi - 1: its rows into
    ``out``, its scatter added to ``scatter[part]``."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_parts = scatter.shape[0]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    values = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    acc = scatter[part]
    # The part's first task at or after task_lo: tasks part, part + n_parts, ...
    first_task = task_lo + (part - task_lo) % n_parts
    for task in range(first_task, task_hi, n_parts):
        for half in range(2):
            block = task if half == 0 else n_blocks - 1 - task
            if half == 1 and block == task:
                break
            for i in range(block * _ROWS_PER_TASK, min((block + 1) * _ROWS_PER_TASK, n)):
                w_i = weights[i]
                total = diagonal[i] * w_i
                for j0 in range(0, i, _BLOCK):
                    nj = min(_BLOCK, i - j0)
                    _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, i, j0,
                               nj, x_i, s_i, qdist, a2dist, uads, ss, values)
                    for m in range(nj):
                        total += values[m] * weights[j0 + m]
                        acc[j0 + m] += values[m] * w_i
                out[i] = total


def kernel_rows(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, out):
    """out[r, j] = k_p(x_index[r], x_j) for all j (parallel over blocks of j).

    Memory: the (len(index), N) output only.
    """
    n = draws_t.shape[2]
    n_chunks = (n + _BLOCK - 1) // _BLOCK
    on_threads(_rows_chunks, draws_t, scores_t, a, bool(isotropic), kind, params, float(trace_a),
               index, out, np.int64(n_chunks))


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _rows_chunks(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, out, n_chunks,
                 first, step):
    """Chunks first, first + step, ... of ``kernel_rows`` (see ``engine.threads``)."""
    for chunk in range(first, n_chunks, step):
        _rows_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, out, chunk)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _rows_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, out, chunk):
    """Columns ``chunk * _BLOCK ...`` of ``kernel_rows``."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    values = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    j0 = chunk * _BLOCK
    nj = min(_BLOCK, n - j0)
    for r in range(index.shape[0]):
        _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, index[r], j0, nj,
                   x_i, s_i, qdist, a2dist, uads, ss, values)
        for m in range(nj):
            out[r, j0 + m] = values[m]


def kernel_columns(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, values, column,
                   out):
    """out = K_p @ W for a sparse (N, B) W with one non-zero per listed row.

    Row ``index[t]`` of W holds ``values[t]`` in column ``column[t]`` (all other entries
    are zero): out[j, b] = sum over t with column[t] = b of values[t] k_p(x_index[t], x_j).
    len(index) N kernel evaluations, each used once (parallel over blocks of j); memory:
    the (N, B) output only.
    """
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_chunks = (n + _BLOCK - 1) // _BLOCK
    isotropic, trace_a = bool(isotropic), float(trace_a)

    def compute_chunks(lo, hi):
        on_threads(_columns_chunks, draws_t, scores_t, a, isotropic, kind, params, trace_a,
                   index, values, column, out, np.int64(lo), np.int64(hi))

    # Calls of about engine.progress.CHUNK_SECONDS: Ctrl-C is honoured between them.
    run_in_passes(compute_chunks, np.full(n_chunks, index.shape[0] * _BLOCK), 8 * d + 22,
                  min_units=8)


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _columns_chunks(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, values, column,
                    out, chunk_lo, chunk_hi, first, step):
    """Chunks chunk_lo + first, chunk_lo + first + step, ... before chunk_hi of
    ``kernel_columns`` (see ``engine.threads``)."""
    for chunk in range(chunk_lo + first, chunk_hi, step):
        _columns_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, values,
                       column, out, chunk)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _columns_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, index, values, column,
                   out, chunk):
    """Rows ``chunk * _BLOCK ...`` of ``kernel_columns``."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_columns = out.shape[1]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    row = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    j0 = chunk * _BLOCK
    nj = min(_BLOCK, n - j0)
    for m in range(nj):
        for b in range(n_columns):
            out[j0 + m, b] = 0.0
    for t in range(index.shape[0]):
        _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, index[t], j0, nj,
                   x_i, s_i, qdist, a2dist, uads, ss, row)
        value = values[t]
        b = column[t]
        for m in range(nj):
            out[j0 + m, b] += value * row[m]


def kernel_matrix(draws_t, scores_t, a, isotropic, kind, params, trace_a, out):
    """out = K_p, the dense symmetric (N, N) matrix (8 N^2 bytes): lower triangle, mirrored."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_blocks = (n + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK
    n_tasks = (n_blocks + 1) // 2
    isotropic, trace_a = bool(isotropic), float(trace_a)

    def compute_tasks(lo, hi):
        on_threads(_matrix_tasks, draws_t, scores_t, a, isotropic, kind, params, trace_a, out,
                   np.int64(n_blocks), np.int64(lo), np.int64(hi))

    # Calls of about engine.progress.CHUNK_SECONDS: Ctrl-C is honoured between them.
    run_in_passes(compute_tasks, np.full(n_tasks, _ROWS_PER_TASK * n), 8 * d + 22,
                  min_units=8)
    on_threads(_mirror_rows, out)


@nb.njit(cache=True, nogil=True, error_model="numpy")
def _mirror_rows(out, first, step):
    """out[j, i] = out[i, j] for j < i, rows i = first, first + step, ..."""
    for i in range(first, out.shape[0], step):
        for j in range(i):
            out[j, i] = out[i, j]


@nb.njit(cache=True, nogil=True, fastmath=_FAST_SUM, error_model="numpy")
def _matrix_tasks(draws_t, scores_t, a, isotropic, kind, params, trace_a, out, n_blocks, task_lo,
                  task_hi, first, step):
    """Tasks task_lo + first, task_lo + first + step, ... before task_hi of ``kernel_matrix``
    (see ``engine.threads``)."""
    for task in range(task_lo + first, task_hi, step):
        _matrix_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, out, n_blocks, task)


@nb.njit(cache=True, fastmath=_FAST_SUM, inline="always", error_model="numpy")
def _matrix_task(draws_t, scores_t, a, isotropic, kind, params, trace_a, out, n_blocks, task):
    """Row blocks ``task`` and ``n_blocks - 1 - task`` of ``kernel_matrix`` (lower triangle)."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    values = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    for half in range(2):
        block = task if half == 0 else n_blocks - 1 - task
        if half == 1 and block == task:
            break
        for i in range(block * _ROWS_PER_TASK, min((block + 1) * _ROWS_PER_TASK, n)):
            for j0 in range(0, i + 1, _BLOCK):
                nj = min(_BLOCK, i + 1 - j0)
                _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, i, j0, nj,
                           x_i, s_i, qdist, a2dist, uads, ss, values)
                for m in range(nj):
                    out[i, j0 + m] = values[m]


# Floor of the curvature |phi_v - phi_s|^2 along a pairwise direction (duplicate draws
# have zero curvature; then the step is the whole weight of v), as tau in LIBSVM.
_TAU = 1e-12


def pairwise_frank_wolfe(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal,
                         weights, gradient, tol, floor, max_iter):
    """Pairwise Frank-Wolfe for min w^T K_p w on the simplex; updates weights in place.

    Parameters
    ----------
    draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal : as in ``kernel_matvec``
    weights : float64 (N,), a point of the simplex, updated in place
    gradient : float64 (N,), K_p @ weights on entry (half the gradient), kept in step
    tol, floor : float, stop when the Frank-Wolfe gap 2 (f - min_i g_i) <= tol * f + floor
    max_iter : int

    Returns
    -------
    (iterations, f, min_g) : int, float, float
        f = w^T g and min_i g_i from the running gradient at exit.

    Notes
    -----
    Each iteration moves mass gamma from an "away" point v (largest g on the support)
    to a point s, picked among those with g_s < g_v by the largest second-order
    decrease (g_v - g_s)^2 / (k_vv + k_ss - 2 k_vs) (the maximal-gain pair selection of
    Fan, Chen & Lin 2005, i.e. SMO; plain pairwise Frank-Wolfe would take s = argmin g).
    The exact line search is gamma = min(w_v, (g_v - g_s) / (k_vv + k_ss - 2 k_vs)), and
    g += gamma (K_p[:, s] - K_p[:, v]). Two kernel rows per iteration: 2 N pairs,
    O(N) memory. The running g drifts by rounding only; the caller recomputes it
    exactly with ``kernel_matvec`` before certifying.
    """
    solver = _frank_wolfe_serial if nb.get_num_threads() == 1 else _frank_wolfe_parallel
    return solver(draws_t, scores_t, a, bool(isotropic), kind, params, float(trace_a), diagonal,
                  weights, gradient, float(tol), float(floor), np.int64(max_iter))


def _make_frank_wolfe(parallel):
    """The loop of ``pairwise_frank_wolfe``, compiled with or without ``parallel=True``.

    On one thread (the solver's choice below ``PARALLEL_MIN_N`` points and on loaded
    machines) the serial version runs: it compiles in a fraction of the parallel one's
    time (see ``engine.threads``). ``parallel`` is a closure variable, so Numba's cache
    keeps the two versions apart.
    """

    @nb.njit(cache=True, parallel=parallel, fastmath=_FAST_SUM, error_model="numpy")
    def frank_wolfe(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, weights, gradient, tol,
                    floor, max_iter):
        # Reading ``parallel`` makes it a closure variable, whose value is part of Numba's
        # cache key: the serial and parallel versions keep separate cache entries.
        assert parallel in (False, True)
        n = draws_t.shape[2]
        d = draws_t.shape[1]
        n_chunks = (n + _BLOCK - 1) // _BLOCK
        row_v = np.empty(n)
        chunk_best = np.empty(n_chunks)
        chunk_arg = np.empty(n_chunks, dtype=np.int64)
        chunk_max = np.empty(n_chunks)
        chunk_argmax = np.empty(n_chunks, dtype=np.int64)
        chunk_min = np.empty(n_chunks)
        chunk_f = np.empty(n_chunks)
        # Per-chunk scratch, allocated once (an allocation per chunk and step costs as much
        # as the kernel evaluations of a 256-point chunk).
        scratch = np.empty((n_chunks, 5, _BLOCK))
        point = np.empty((n_chunks, 2, d))

        # Initial away point, min g and f.
        v = np.int64(-1)
        g_max = -np.inf
        g_min = np.inf
        f = 0.0
        for j in range(n):
            f += weights[j] * gradient[j]
            if gradient[j] < g_min:
                g_min = gradient[j]
            if weights[j] > 0.0 and gradient[j] > g_max:
                g_max = gradient[j]
                v = j
        iteration = 0
        while iteration < max_iter:
            if 2.0 * (f - g_min) <= tol * f + floor:
                break
            iteration += 1
            g_v = gradient[v]
            k_vv = diagonal[v]
            # Pass 1: row v and the best partner s in each chunk.
            for chunk in nb.prange(n_chunks):
                _fw_row_v(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, gradient,
                          v, g_v, k_vv, row_v, scratch, point, chunk_best, chunk_arg,
                          np.int64(chunk))
            s = np.int64(-1)
            best = 0.0
            for chunk in range(n_chunks):
                if chunk_arg[chunk] >= 0 and chunk_best[chunk] > best:
                    best = chunk_best[chunk]
                    s = chunk_arg[chunk]
            if s < 0:
                # No point has a smaller gradient than v: the running g says optimal.
                break
            curvature = max(k_vv + diagonal[s] - 2.0 * row_v[s], _TAU)
            gamma = (g_v - gradient[s]) / curvature
            if gamma >= weights[v]:
                gamma = weights[v]
                weights[v] = 0.0
            else:
                weights[v] -= gamma
            weights[s] += gamma
            # Pass 2: row s, the gradient update, the next away point, min g and f.
            for chunk in nb.prange(n_chunks):
                _fw_row_s(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, gradient,
                          s, gamma, row_v, scratch, point, chunk_max, chunk_argmax, chunk_min,
                          chunk_f, np.int64(chunk))
            g_max = -np.inf
            g_min = np.inf
            f = 0.0
            for chunk in range(n_chunks):
                f += chunk_f[chunk]
                if chunk_min[chunk] < g_min:
                    g_min = chunk_min[chunk]
                if chunk_argmax[chunk] >= 0 and chunk_max[chunk] > g_max:
                    g_max = chunk_max[chunk]
                    v = chunk_argmax[chunk]
        return iteration, f, g_min

    return frank_wolfe


_frank_wolfe_serial = _make_frank_wolfe(False)
_frank_wolfe_parallel = _make_frank_wolfe(True)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _fw_row_v(draws_t, scores_t, a, isotropic, kind, params, trace_a, diagonal, gradient, v, g_v,
              k_vv, row_v, scratch, point, chunk_best, chunk_arg, chunk):
    """Pass 1 of a Frank-Wolfe step on one chunk: row v and the chunk's best partner s."""
    n = draws_t.shape[2]
    qdist = scratch[chunk, 0]
    a2dist = scratch[chunk, 1]
    uads = scratch[chunk, 2]
    ss = scratch[chunk, 3]
    x_i = point[chunk, 0]
    s_i = point[chunk, 1]
    j0 = chunk * _BLOCK
    nj = min(_BLOCK, n - j0)
    values = scratch[chunk, 4]
    _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, v, j0, nj,
               x_i, s_i, qdist, a2dist, uads, ss, values)
    # gain^2 / curvature > best_gain2 / best_curvature, without a division per point.
    best_gain2 = 0.0
    best_curvature = 1.0
    arg = -1
    for m in range(nj):
        j = j0 + m
        row_v[j] = values[m]
        gain = g_v - gradient[j]
        if gain > 0.0:
            curvature = max(k_vv + diagonal[j] - 2.0 * values[m], _TAU)
            if gain * gain * best_curvature > best_gain2 * curvature:
                best_gain2 = gain * gain
                best_curvature = curvature
                arg = j
    chunk_best[chunk] = best_gain2 / best_curvature
    chunk_arg[chunk] = arg


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _fw_row_s(draws_t, scores_t, a, isotropic, kind, params, trace_a, weights, gradient, s, gamma,
              row_v, scratch, point, chunk_max, chunk_argmax, chunk_min, chunk_f, chunk):
    """Pass 2 of a Frank-Wolfe step on one chunk: row s, the gradient update, the chunk's
    away point, min g and its share of f."""
    n = draws_t.shape[2]
    qdist = scratch[chunk, 0]
    a2dist = scratch[chunk, 1]
    uads = scratch[chunk, 2]
    ss = scratch[chunk, 3]
    row_s = scratch[chunk, 4]
    x_i = point[chunk, 0]
    s_i = point[chunk, 1]
    j0 = chunk * _BLOCK
    nj = min(_BLOCK, n - j0)
    _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, s, j0, nj,
               x_i, s_i, qdist, a2dist, uads, ss, row_s)
    local_max = -np.inf
    local_arg = -1
    local_min = np.inf
    local_f = 0.0
    for m in range(nj):
        j = j0 + m
        g_j = gradient[j] + gamma * (row_s[m] - row_v[j])
        gradient[j] = g_j
        local_f += weights[j] * g_j
        if g_j < local_min:
            local_min = g_j
        if weights[j] > 0.0 and g_j > local_max:
            local_max = g_j
            local_arg = j
    chunk_max[chunk] = local_max
    chunk_argmax[chunk] = local_arg
    chunk_min[chunk] = local_min
    chunk_f[chunk] = local_f


def greedy_thinning(draws_t, scores_t, a, isotropic, kind, params, trace_a, objective,
                    step_penalty, n_points, selected, bar=None):
    """Greedy Stein thinning: selected[t] = argmin_i objective_t(i), t = 0 .. n_points - 1.

    Parameters
    ----------
    objective : float64 (N,), on entry the first step's objective (k_p(x_i, x_i), plus
        any regularisation); updated in place to the running objective.
    step_penalty : float64 (N,), added to the objective after every step (zeros for
        plain Stein thinning, -lambda log p(x_i) for the regularised rule).
    selected : int64 (n_points,), output.

    After selecting pi_t the objective gains 2 k_p(x_pi_t, x_i) + step_penalty_i, so at
    step t it is k_p(x_i, x_i) + 2 sum_(j<t) k_p(x_pi_j, x_i) (+ regularisation), the
    rule of Riabiz et al. (2022). Ties go to the smallest index (as numpy.argmin).
    One kernel row per step: O(N n_points) pairs, O(N) memory. The steps run in calls of
    about ``engine.progress.CHUNK_SECONDS`` (Ctrl-C is honoured between them; ``bar``, if
    given, advances by the steps done); each call leaves the objective updated for its
    last selection, so the next call's first argmin is the step the loop would take.
    """
    run = _greedy_serial if nb.get_num_threads() == 1 else _greedy_parallel
    n = draws_t.shape[2]
    isotropic, trace_a = bool(isotropic), float(trace_a)

    def compute_steps(lo, hi):
        run(draws_t, scores_t, a, isotropic, kind, params, trace_a, objective, step_penalty,
            selected[lo:hi], hi < n_points)

    run_in_passes(compute_steps, np.full(int(n_points), n), 8 * draws_t.shape[1] + 22,
                  bar=bar, serial=run is _greedy_serial)


def _make_greedy(parallel):
    """The loop of ``greedy_thinning``, with or without ``parallel=True`` (as
    ``_make_frank_wolfe``; ``threads_for`` runs it on one thread below ``PARALLEL_MIN_N``)."""

    @nb.njit(cache=True, parallel=parallel, fastmath=_FAST_SUM, error_model="numpy")
    def greedy(draws_t, scores_t, a, isotropic, kind, params, trace_a, objective, step_penalty,
               selected, update_last):
        # selected[t] for t < len(selected); the objective is updated after every step but
        # the last, and after the last too if update_last (a later call goes on from it).
        # Reading ``parallel`` makes it a closure variable, whose value is part of Numba's
        # cache key: the serial and parallel versions keep separate cache entries.
        assert parallel in (False, True)
        n = draws_t.shape[2]
        n_chunks = (n + _BLOCK - 1) // _BLOCK
        chunk_min = np.empty(n_chunks)
        chunk_arg = np.empty(n_chunks, dtype=np.int64)
        # One part per thread, each with its scratch allocated once a step (a call per
        # chunk allocated seven arrays and paid their reference counts 80 times a step).
        n_parts = min(n_chunks, nb.get_num_threads()) if parallel else 1
        best = objective[0]
        arg = np.int64(0)
        for j in range(1, n):
            if objective[j] < best:
                best = objective[j]
                arg = j
        n_points = selected.shape[0]
        for t in range(n_points):
            selected[t] = arg
            if t == n_points - 1 and not update_last:
                break
            for part in nb.prange(n_parts):
                _greedy_part(draws_t, scores_t, a, isotropic, kind, params, trace_a, objective,
                             step_penalty, arg, chunk_min, chunk_arg, np.int64(part),
                             np.int64(n_parts))
            best = np.inf
            arg = -1
            for chunk in range(n_chunks):
                if chunk_min[chunk] < best:
                    best = chunk_min[chunk]
                    arg = chunk_arg[chunk]
            if arg < 0:
                # Every objective is NaN: cannot happen with finite inputs; keep the last point.
                arg = selected[t]

    return greedy


_greedy_serial = _make_greedy(False)
_greedy_parallel = _make_greedy(True)


@nb.njit(cache=True, fastmath=_FAST_SUM, error_model="numpy")
def _greedy_part(draws_t, scores_t, a, isotropic, kind, params, trace_a, objective, step_penalty,
                 arg, chunk_min, chunk_arg, part, n_parts):
    """Chunks part, part + n_parts, ... of a greedy-thinning step: the objective update and
    each chunk's minimum."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    qdist = np.empty(_BLOCK)
    a2dist = np.empty(_BLOCK)
    uads = np.empty(_BLOCK)
    ss = np.empty(_BLOCK)
    row = np.empty(_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    for chunk in range(part, chunk_min.shape[0], n_parts):
        j0 = chunk * _BLOCK
        nj = min(_BLOCK, n - j0)
        _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, arg, j0, nj,
                   x_i, s_i, qdist, a2dist, uads, ss, row)
        local_min = np.inf
        local_arg = -1
        for m in range(nj):
            j = j0 + m
            value = objective[j] + 2.0 * row[m] + step_penalty[j]
            objective[j] = value
            if value < local_min:
                local_min = value
                local_arg = j
        chunk_min[chunk] = local_min
        chunk_arg[chunk] = local_arg


class KernelPoints:
    """N points in kernel coordinates, laid out for the kernels above (O(N d) memory).

    Parameters
    ----------
    draws, scores : ndarray (N, d)
        Draws and scores in the sampler's space.
    preconditioner : steindiag.kernels.preconditioner.Preconditioner
        Resolved once from the pooled draws.
    kernel : steindiag.kernels.BaseKernel
        The base kernel (validated by the caller).
    """

    def __init__(self, draws, scores, preconditioner, kernel):
        draws_k, scores_k = preconditioner.to_kernel_coordinates(draws, scores)
        self.draws_t = np.ascontiguousarray(draws_k.T[None, :, :])
        self.scores_t = np.ascontiguousarray(scores_k.T[None, :, :])
        self.a = preconditioner.a
        self.isotropic = bool(preconditioner.isotropic)
        self.kernel = kernel
        self.kind = kernel.numba_kind
        self.params = kernel.numba_params
        self.trace_a = preconditioner.trace_a
        self.n = draws_k.shape[0]
        self.diagonal = stein_kernel_diagonal(
            np.einsum("nk,nk->n", scores_k, scores_k), self.kind, self.params, self.trace_a
        )

    @property
    def constants(self):
        """The positional kernel arguments shared by every function of this module."""
        return (self.draws_t, self.scores_t, self.a, self.isotropic, self.kind, self.params,
                self.trace_a)

    def matvec(self, weights):
        """K_p @ weights, (N,) -> (N,); O(N^2 d) time, O(N * parts) memory."""
        out = np.empty(self.n)
        scatter = np.empty((max(_MATVEC_PARTS, nb.get_num_threads()), self.n))
        kernel_matvec(*self.constants, self.diagonal, np.ascontiguousarray(weights, dtype=float),
                      out, scatter)
        return out

    def rows(self, index):
        """k_p(x_index[r], x_j), shape (len(index), N)."""
        index = np.ascontiguousarray(index, dtype=np.int64)
        out = np.empty((index.shape[0], self.n))
        kernel_rows(*self.constants, index, out)
        return out

    def columns(self, rows, columns, values, n_columns):
        """K_p @ W, (N, n_columns), for a sparse W with one non-zero per listed row.

        W[rows[t], columns[t]] = values[t] (``rows`` without repeats), all else zero:
        len(rows) N kernel evaluations (not n_columns N^2).
        """
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if np.unique(rows).size != rows.size:
            raise ValueError("columns(): each row of W may hold one non-zero only.")
        out = np.empty((self.n, int(n_columns)))
        kernel_columns(*self.constants, rows, np.ascontiguousarray(values, dtype=np.float64),
                       np.ascontiguousarray(columns, dtype=np.int64), out)
        return out

    def subset(self, index):
        """The points ``index`` (same preconditioner and kernel): O(len(index) d) memory."""
        index = np.asarray(index, dtype=np.int64)
        out = object.__new__(KernelPoints)
        out.__dict__.update(self.__dict__)
        out.draws_t = np.ascontiguousarray(self.draws_t[:, :, index])
        out.scores_t = np.ascontiguousarray(self.scores_t[:, :, index])
        out.n = int(index.shape[0])
        out.diagonal = self.diagonal[index].copy()
        return out

    def matrix(self):
        """The dense K_p, (N, N), 8 N^2 bytes."""
        out = np.empty((self.n, self.n))
        kernel_matrix(*self.constants, out)
        return out


# Below this many points greedy thinning runs on one thread. Each step ends in a barrier,
# and on a machine shared with other work one descheduled thread stalls every step:
# measured on 2 shared cores (load ~1.5), one Frank-Wolfe iteration (the same kind of
# step) took 0.25 ms on 1 thread and 3.3 ms on 2 at N = 2 * 10^4 (idle: 0.26 vs 0.15 ms).
# Thinning is cheap (N = 10^5, 1000 points: 0.4 s on one thread), so it stays serial;
# Frank-Wolfe picks by timing. The products (K_p w, the dense K_p) are single large
# parallel regions and always use every thread.
PARALLEL_MIN_N = 1_000_000


class threads_for:
    """Context manager: Numba threads for a sequential solver over ``n`` points."""

    def __init__(self, n):
        self.serial = n < PARALLEL_MIN_N
        self.saved = None

    def __enter__(self):
        if self.serial:
            self.saved = nb.get_num_threads()
            nb.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            nb.set_num_threads(self.saved)
        return False
