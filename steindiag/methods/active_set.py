"""An exact active-set solver for the KSD weights QP (Lawson-Hanson on its NNLS form).

Nothing here imports xarray or PyMC, and nothing validates input.

The problem ``min w^T K w`` over the simplex (K = K_p / mean diag K_p, positive
semi-definite and numerically low-rank when there are few parameters) is solved
through an equivalent non-negative least-squares problem. With K = Phi^T Phi (Phi the
feature map), the NNLS problem

    minimise ||Phi u||^2 + (1 - sum_i u_i)^2  over  u >= 0

has the solution u* = w* / (1 + f*), with w* the optimal weights and f* = w*^T K w*
(the stationarity conditions of both problems coincide after rescaling). Its Gram
matrix is G = K + 1 1^T and its right-hand side Phi-free: A^T b = 1. So the
Lawson-Hanson active-set method (1974) runs on G alone:

- dual  r = 1 - G u = 1 - K u - sum(u); optimal when r_i <= 0 off the support;
- add the most violating point, solve G_PP s = 1 on the support P through a Cholesky
  factor updated in O(|P|^2) (append) or by Givens rotations (delete), and step back
  to the last feasible point when s has non-positive entries (removing them).

Two representations of K: a factor K ~ F F^T from pivoted Cholesky (``F`` (N, r),
8 N r bytes; ``kp`` None) when K is numerically of low rank r (one parameter: r ~ 100
at any N), else the kernel itself, evaluated on demand from the draws and scores
(``kp``; ``F`` None; O(N d)). Which one is known from the arguments' types when the
solver is compiled, so each compiles its own code only (a first call compiles one).
A point whose column is numerically in the span of the support (Cholesky pivot below
``_DEPENDENT``) is not added: it cannot lower the objective further than rounding.

Cost: one full pricing (the duals of all N points) is O(N r) (factor) or O(N |P| d)
kernel evaluations (matrix-free); between full pricings only the ``n_candidates`` most
violating points are repriced (O(n_candidates |P|) per step). Points enter in blocks
(one pass over the factor for the block); each step costs O(|P|^2) for the factor of
the support's Gram matrix, 8 |P|^2 bytes.
"""

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

from steindiag.kernels._stein import stein_pair
from steindiag.engine.products import _row_block

__all__ = ["lawson_hanson", "pivoted_cholesky", "matrix_free_kernel"]

# A Cholesky pivot rho^2 <= _DEPENDENT * G_jj means column j is numerically in the
# span of the support's columns (G = K + 1 1^T has G_jj ~ 2 after scaling).
_DEPENDENT = 1e-15
# Points repriced between full pricings.
_CANDIDATES = 128
# Points added at once (at most; about 1/8 of the support).
_BLOCK_MAX = 64
# Points per block of the matrix-free pricing (as in steindiag.engine.products).
_ROW_BLOCK = 256


# The pricing passes run on one thread: a full pricing is a few percent of the solver's
# time (measured at d = 3, N = 5000: 0.7 of 8.1 s; doubling it changed nothing measurable
# at N = 2000 or 8000, d = 2), while parallel=True cost about 2 s of compilation on every
# first call (Numba links the parallel body into each caller again).
@nb.njit(cache=True)
def _price_factor(F, support, z, k, out):
    """out[i] = F[i] . v with v = sum_t z[t] F[support[t]] (K ~ F F^T)."""
    n, r = F.shape
    v = np.zeros(r)
    for t in range(k):
        row = F[support[t]]
        for m in range(r):
            v[m] += z[t] * row[m]
    for i in range(n):
        total = 0.0
        row = F[i]
        for m in range(r):
            total += row[m] * v[m]
        out[i] = total


@nb.njit(cache=True, inline="always")
def _pair(X, S, a, isotropic, kind, params, trace_a, i, j):
    """k_p(x_i, x_j) from kernel coordinates X, S (N, d) (the formula of _kernels)."""
    qdist = 0.0
    a2dist = 0.0
    uads = 0.0
    ss = 0.0
    for m in range(X.shape[1]):
        am = a[0] if isotropic else a[m]
        u = X[i, m] - X[j, m]
        au = am * u
        qdist += au * u
        a2dist += au * au
        uads += au * (S[i, m] - S[j, m])
        ss += S[i, m] * S[j, m]
    return stein_pair(kind, params, qdist, a2dist, uads, ss, trace_a)


@nb.njit(cache=True)
def _price_matrix_free(draws_t, scores_t, a, isotropic, kind, params, trace_a, scale, support,
                       z, k, out):
    """out[i] = sum_t z[t] k_p(x_support[t], x_i) / scale, tiled like kernel_rows."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    n_chunks = (n + _ROW_BLOCK - 1) // _ROW_BLOCK
    for chunk in range(n_chunks):
        _price_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, scale, support, z,
                     k, out, np.int64(chunk))


@nb.njit(cache=True)
def _price_chunk(draws_t, scores_t, a, isotropic, kind, params, trace_a, scale, support, z, k,
                 out, chunk):
    """Points ``chunk * _ROW_BLOCK ...`` of ``_price_matrix_free``."""
    n = draws_t.shape[2]
    d = draws_t.shape[1]
    qdist = np.empty(_ROW_BLOCK)
    a2dist = np.empty(_ROW_BLOCK)
    uads = np.empty(_ROW_BLOCK)
    ss = np.empty(_ROW_BLOCK)
    values = np.empty(_ROW_BLOCK)
    x_i = np.empty(d)
    s_i = np.empty(d)
    j0 = chunk * _ROW_BLOCK
    nj = min(_ROW_BLOCK, n - j0)
    for m in range(nj):
        out[j0 + m] = 0.0
    for t in range(k):
        _row_block(draws_t, scores_t, a, isotropic, kind, params, trace_a, support[t], j0,
                   nj, x_i, s_i, qdist, a2dist, uads, ss, values)
        weight = z[t] / scale
        for m in range(nj):
            out[j0 + m] += weight * values[m]


@nb.njit(cache=True)
def _cross_factor(F, support, k, j, out):
    """out[t] = K[support[t], j] for t < k, K ~ F F^T."""
    r = F.shape[1]
    fj = F[j]
    for t in range(k):
        fp = F[support[t]]
        total = 0.0
        for m in range(r):
            total += fp[m] * fj[m]
        out[t] = total


@nb.njit(cache=True)
def _cross_matrix_free(kp, support, k, j, out):
    """out[t] = K[support[t], j] for t < k, kernel values on demand."""
    draws_t, scores_t, a, isotropic, kind, params, trace_a, X, S, scale = kp
    for t in range(k):
        out[t] = _pair(X, S, a, isotropic, kind, params, trace_a, support[t], j) / scale


def _cross(F, kp, support, k, j, out):
    """out[t] = K[support[t], j] for t < k (compiled code only)."""
    raise NotImplementedError("_cross runs in compiled code only.")


# The representation is chosen from the arguments' types (``F`` or ``kp`` is None) when
# the caller is typed: the other representation's code is not compiled.
@overload(_cross)
def _cross_overload(F, kp, support, k, j, out):
    if isinstance(F, types.NoneType):
        return lambda F, kp, support, k, j, out: _cross_matrix_free(kp, support, k, j, out)
    return lambda F, kp, support, k, j, out: _cross_factor(F, support, k, j, out)


@nb.njit(cache=True)
def _price_one(F, kp, support, z, k, j, scratch):
    """sum_t z[t] K[support[t], j]."""
    _cross(F, kp, support, k, j, scratch)
    total = 0.0
    for t in range(k):
        total += z[t] * scratch[t]
    return total


@nb.njit(cache=True)
def _backward(L, k, y, out, work):
    """Solve L[:k, :k]^T out = y[:k], column-oriented (contiguous rows of L)."""
    for i in range(k):
        work[i] = y[i]
    for i in range(k - 1, -1, -1):
        value = work[i] / L[i, i]
        out[i] = value
        row = L[i]
        for m in range(i):
            work[m] -= value * row[m]


@nb.njit(cache=True)
def _delete(L, k, p, work, y):
    """Remove row and column p from the factor L[:k, :k] of G_PP (Givens rotations).

    After the rows below p move up, each holds one entry right of its diagonal; the
    rotations of column pairs (i, i + 1), i = p .. k - 2, remove them. They are applied
    row by row (row r receives rotations p .. r), so every access is within a row.

    ``y`` = L^-1 1 is updated in O(k) rather than solved again: the remaining rows
    of L y = 1 still hold, and with the new factor L' = (L without row p) Q, where Q
    is the product of the rotations and the last column of L' is zero, the vector
    Q^T y solves L' y' = 1 in its first k - 1 entries.
    """
    for i in range(p, k - 1):
        for m in range(i + 2):
            L[i, m] = L[i + 1, m]
    cos = work[:k]
    sin = np.empty(k)
    for r in range(p, k - 1):
        row = L[r]
        for i in range(p, r):
            x = row[i]
            w = row[i + 1]
            row[i] = cos[i] * x + sin[i] * w
            row[i + 1] = -sin[i] * x + cos[i] * w
        a = row[r]
        b = row[r + 1]
        radius = np.hypot(a, b)
        if radius == 0.0:
            cos[r] = 1.0
            sin[r] = 0.0
        else:
            cos[r] = a / radius
            sin[r] = b / radius
        row[r] = radius
        row[r + 1] = 0.0
    for m in range(k):
        L[k - 1, m] = 0.0
    for i in range(p, k - 1):
        x = y[i]
        w = y[i + 1]
        y[i] = cos[i] * x + sin[i] * w
        y[i + 1] = -sin[i] * x + cos[i] * w


@nb.njit(cache=True)
def _forward_block(L, k, rhs, out):
    """Solve L[:k, :k] out = rhs for a (k, b) block, one pass over L (row-major)."""
    nb_cols = rhs.shape[1]
    for i in range(k):
        row = L[i]
        acc = out[i]
        for c in range(nb_cols):
            acc[c] = rhs[i, c]
        for m in range(i):
            value = row[m]
            other = out[m]
            for c in range(nb_cols):
                acc[c] -= value * other[c]
        inv = 1.0 / row[i]
        for c in range(nb_cols):
            acc[c] *= inv


def _kernel_value(F, kp, i, j):
    """K[i, j] (compiled code only)."""
    raise NotImplementedError("_kernel_value runs in compiled code only.")


@overload(_kernel_value)
def _kernel_value_overload(F, kp, i, j):
    if isinstance(F, types.NoneType):
        def matrix_free(F, kp, i, j):
            draws_t, scores_t, a, isotropic, kind, params, trace_a, X, S, scale = kp
            return _pair(X, S, a, isotropic, kind, params, trace_a, i, j) / scale
        return matrix_free

    def factor(F, kp, i, j):
        total = 0.0
        for m in range(F.shape[1]):
            total += F[i, m] * F[j, m]
        return total
    return factor


def _price_all(F, kp, support, z, k, out):
    """out[i] = sum_t z[t] K[support[t], i] for every point (compiled code only)."""
    raise NotImplementedError("_price_all runs in compiled code only.")


@overload(_price_all)
def _price_all_overload(F, kp, support, z, k, out):
    if isinstance(F, types.NoneType):
        def matrix_free(F, kp, support, z, k, out):
            draws_t, scores_t, a, isotropic, kind, params, trace_a, X, S, scale = kp
            _price_matrix_free(draws_t, scores_t, a, isotropic, kind, params, trace_a, scale,
                               support, z, k, out)
        return matrix_free
    return lambda F, kp, support, z, k, out: _price_factor(F, support, z, k, out)


@nb.njit(cache=True)
def _remove(L, k, t, support, z, in_support, work, y):
    """Delete position t of the support (factor, L^-1 1, support list, values); k - 1."""
    in_support[support[t]] = False
    _delete(L, k, t, work, y)
    for m in range(t, k - 1):
        support[m] = support[m + 1]
        z[m] = z[m + 1]
    return k - 1


@nb.njit(cache=True, nogil=True)
def lawson_hanson(F, kp, diagonal, tol, floor, max_iter, n_candidates, max_support, stop):
    """Lawson-Hanson on the NNLS form of min w^T K w over the simplex.

    Parameters
    ----------
    F : float64 (N, r), the factor K ~ F F^T; or None (matrix-free: ``kp``)
    kp : None (factor ``F``), or the kernel, evaluated on demand: (draws_t, scores_t, a,
        isotropic, kind, params, trace_a, X, S, scale) as in ``steindiag.engine.products``
        plus X, S (N, d) the kernel coordinates row-major and the scale K = K_p / scale
        (``matrix_free_kernel``). Exactly one of ``F`` and ``kp`` is None: the other
        representation's code is left out when the solver is compiled.
    diagonal : float64 (N,), K_ii (of the representation used)
    tol, floor : stop when every dual r_i <= (tol * f + floor) / 4, f = 1 / sum(u) - 1
        the current objective (2 r_i ~ f - (K w)_i: half the Wolfe gap; the margin of
        2 leaves room for the rounding of the caller's exact certificate)
    max_iter : int, additions of a point
    n_candidates : int, points repriced between full pricings
    max_support : int, stop (not converged) rather than let the support's factor grow
        beyond this many points (8 max_support^2 bytes)
    stop : int8 (1,), read before every block of points: nonzero, return at once (not
        converged). Set by another thread (the solver releases the GIL): Ctrl-C
        (``steindiag.engine.progress.run_stoppable``).

    Returns
    -------
    (u, iterations, converged, max_dual) : float64 (N,), int, bool, float

    Notes
    -----
    Points are added in blocks of up to ``_BLOCK_MAX`` (about 1/8 of the support), all
    solved through one pass over the factor; a new point whose least-squares value is
    not positive is dropped before the step (so every step lowers the objective).
    """
    n = diagonal.shape[0]
    cap = min(n, 256)
    L = np.zeros((cap, cap))
    support = np.empty(n, dtype=np.int64)
    z = np.zeros(n)
    s = np.empty(n)
    y = np.empty(n)
    work = np.empty(n)
    column = np.empty(n)
    in_support = np.zeros(n, dtype=np.bool_)
    excluded = np.zeros(n, dtype=np.bool_)
    dual = np.ones(n)
    priced = np.empty(n)
    candidates = np.empty(n_candidates, dtype=np.int64)
    block = np.empty(_BLOCK_MAX, dtype=np.int64)
    # np.int64, not 0: a literal 0 would be typed Literal[int](0) at first and every
    # function called with k compiled twice (once for that literal type).
    k = np.int64(0)
    sum_z = 0.0
    iterations = 0
    converged = False
    max_dual = np.inf
    first = True
    single = False  # after a block that could not enter: one point at a time
    while iterations < max_iter:
        # Full pricing (all duals), then candidates = the most violating points.
        if k > 0:
            _price_all(F, kp, support, z, k, priced)
            for i in range(n):
                dual[i] = 1.0 - priced[i] - sum_z
        f = 1.0 / sum_z - 1.0 if sum_z > 0.0 else np.inf
        threshold = 0.25 * (tol * max(f, 0.0) + floor) if sum_z > 0.0 else 0.0
        max_dual = -np.inf
        for i in range(n):
            if not in_support[i] and dual[i] > max_dual:
                max_dual = dual[i]
        order = np.argsort(-dual)
        n_cand = 0
        for i in order:
            if n_cand == n_candidates or dual[i] <= threshold:
                break
            if not in_support[i] and not excluded[i]:
                candidates[n_cand] = i
                n_cand += 1
        if first:
            # Start from the point of smallest K_ii (all duals are 1 at u = 0).
            candidates[0] = np.argmin(diagonal)
            n_cand = 1
            first = False
        if n_cand == 0:
            converged = True
            break
        while iterations < max_iter:
            if stop[0]:
                return _scatter(support, z, k, n), iterations, False, max_dual
            # The block: the most violating candidates still eligible, best first.
            limit = min(_BLOCK_MAX, max(1, k // 8), max_iter - iterations)
            if single:
                limit = 1
            eligible = np.empty(n_cand, dtype=np.int64)
            n_eligible = 0
            for c in range(n_cand):
                j = candidates[c]
                if in_support[j] or excluded[j] or not (dual[j] > threshold or k == 0):
                    continue
                eligible[n_eligible] = j
                n_eligible += 1
            eligible = eligible[:n_eligible]
            ranked = eligible[np.argsort(-dual[eligible])]
            size = min(limit, n_eligible)
            for b in range(size):
                block[b] = ranked[b]
            if size == 0:
                break
            if k + size > max_support:
                return _scatter(support, z, k, n), iterations, False, max_dual
            if k + size > cap:
                new_cap = min(n, max(2 * cap, k + size))
                grown = np.zeros((new_cap, new_cap))
                for i in range(k):
                    for m in range(i + 1):
                        grown[i, m] = L[i, m]
                L = grown
                cap = new_cap
            # Columns of G = K + 1 1^T for the block against the support: one pass over L.
            rhs = np.empty((k, size))
            for b in range(size):
                _cross(F, kp, support, k, block[b], column)
                for t in range(k):
                    rhs[t, b] = column[t] + 1.0
            solved = np.empty((k, size))
            _forward_block(L, k, rhs, solved)
            k_old = k
            for b in range(size):
                j = block[b]
                t = k
                row = L[t]
                for m in range(k_old):
                    row[m] = solved[m, b]
                for a in range(k_old, t):
                    value = _kernel_value(F, kp, j, support[a]) + 1.0
                    other = L[a]
                    for m in range(a):
                        value -= row[m] * other[m]
                    row[a] = value / other[a]
                rho2 = diagonal[j] + 1.0
                for m in range(t):
                    rho2 -= row[m] * row[m]
                if rho2 <= _DEPENDENT * (diagonal[j] + 1.0):
                    excluded[j] = True  # numerically in the span of the support
                    for m in range(t):
                        row[m] = 0.0
                    continue
                row[t] = np.sqrt(rho2)
                total = 1.0
                for m in range(t):
                    total -= row[m] * y[m]
                y[t] = total / row[t]
                support[t] = j
                z[t] = 0.0
                in_support[j] = True
                k += 1
            added = k - k_old
            iterations += added
            if added == 0:
                continue
            # New points whose value on the enlarged support is not positive leave first.
            while True:
                _backward(L, k, y, s, work)
                first_drop = -1
                for t in range(k - 1, k_old - 1, -1):
                    if s[t] <= 0.0:
                        if size == 1:
                            excluded[support[t]] = True  # rounding: it cannot enter
                        k = _remove(L, k, t, support, z, in_support, work, y)
                        added -= 1
                        first_drop = t
                if first_drop < 0 or added == 0:
                    break
            if added == 0:
                single = True
                continue
            single = False
            deleted = False
            while True:
                alpha = 2.0
                for t in range(k):
                    if s[t] <= 0.0:
                        ratio = z[t] / (z[t] - s[t])
                        if ratio < alpha:
                            alpha = ratio
                if alpha == 2.0:
                    for t in range(k):
                        z[t] = s[t]
                    break
                for t in range(k):
                    z[t] += alpha * (s[t] - z[t])
                # Remove every point that reached zero (the blocking one at least).
                blocking = 0
                smallest = np.inf
                for t in range(k):
                    if z[t] < smallest:
                        smallest = z[t]
                        blocking = t
                for t in range(k - 1, -1, -1):
                    if z[t] <= 0.0 or t == blocking:
                        k = _remove(L, k, t, support, z, in_support, work, y)
                        deleted = True
                if k == 0:
                    break
                _backward(L, k, y, s, work)
            sum_z = 0.0
            for t in range(k):
                sum_z += z[t]
            if deleted:
                # The support lost a column: points found dependent may no longer be.
                for i in range(n):
                    excluded[i] = False
            f = 1.0 / sum_z - 1.0 if sum_z > 0.0 else np.inf
            threshold = 0.25 * (tol * max(f, 0.0) + floor)
            # Reprice the candidates only.
            for c in range(n_cand):
                i = candidates[c]
                if not in_support[i]:
                    dual[i] = 1.0 - _price_one(F, kp, support, z, k, i, column) - sum_z
    return _scatter(support, z, k, n), iterations, converged, max_dual


@nb.njit(cache=True)
def _scatter(support, z, k, n):
    u = np.zeros(n)
    for t in range(k):
        u[support[t]] = z[t]
    return u


def matrix_free_kernel(points, scale):
    """The ``kp`` tuple of ``lawson_hanson`` for a ``KernelPoints`` (matrix-free)."""
    X = np.ascontiguousarray(points.draws_t[0].T)
    S = np.ascontiguousarray(points.scores_t[0].T)
    return (*points.constants, X, S, float(scale))


def pivoted_cholesky(rows, diagonal, max_rank, tol):
    """K ~ F F^T by greedy pivoted Cholesky, matrix-free.

    ``rows(index)`` returns the rows K[index, :]. Each step takes the point of largest
    residual diagonal as the pivot. Stops when that residual is <= ``tol`` or at
    ``max_rank`` columns. F F^T <= K (a Nystrom approximation), and the residual
    diagonal's maximum bounds w^T (K - F F^T) w on the simplex. Returns F (N, r) and the
    residual diagonal. Cost: r kernel rows and O(N r^2) flops; memory 8 N r bytes.
    """
    n = diagonal.shape[0]
    max_rank = max(1, min(max_rank, n))
    factor_t = np.zeros((max_rank, n))  # F^T: each new column of F is a contiguous row
    residual = diagonal.astype(np.float64).copy()
    rank = 0
    while rank < max_rank:
        pivot = int(np.argmax(residual))
        if residual[pivot] <= tol:
            break
        row = rows(np.array([pivot]))[0]
        if rank:
            row -= factor_t[:rank, pivot] @ factor_t[:rank]
        row /= np.sqrt(residual[pivot])
        factor_t[rank] = row
        residual -= row * row
        residual[pivot] = 0.0
        np.maximum(residual, 0.0, out=residual)
        rank += 1
    return np.ascontiguousarray(factor_t[:rank].T), residual
