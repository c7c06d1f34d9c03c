"""The solvers of the KSD weights QP: exact active set, Frank-Wolfe, piqp; one certificate.

Nothing here reads input or labels output (that is ``steindiag.weights``). Every solver
takes a ``KernelPoints`` (kernel coordinates of the draws, ``steindiag.engine.products``)
and returns a ``_Solution`` whose duality gap comes from one exact product K_p w
(``_certify``), whatever the solver's own records say.
"""

import time
from dataclasses import dataclass

import numba
import numpy as np

from steindiag.engine import products as _stein_products
from steindiag.engine import progress as _progress
from steindiag.engine.memory import available_memory
from steindiag.engine.progress import make_progress
from steindiag.methods.active_set import (lawson_hanson, matrix_free_kernel, pivoted_cholesky)

# "auto" uses the exact active set with at most this many parameters (K_p is then
# numerically low-rank and Frank-Wolfe needs hundreds of iterations per point: measured
# at N = 3000, d = 3 not converged after 130 N iterations; d = 4: 37 N; d = 10: 5 N),
# and pairwise Frank-Wolfe above it (the optimum is dense there, which makes the
# active set cost O(N^3)).
_LOW_D = 3
# Bytes per entry of K_p the dense paths hold at their peak. Active set: the Cholesky
# factor of the support's Gram matrix (at most N x N). piqp: K_p and its own copy, KKT
# matrix and factor (measured: about 2-3 copies of P).
_ACTIVE_SET_BYTES_PER_ENTRY = 8
_DENSE_BYTES_PER_ENTRY = 32
# Active set: a low-rank factor K_p ~ F F^T is tried first with at most this many
# columns (cheap: O(N r^2)); when K_p is not numerically of that rank, K_p is evaluated
# on demand (matrix-free). Points repriced between full pricings: _CANDIDATES.
_FACTOR_FIRST_RANK = 256
_CANDIDATES = 128
# The active set stops (with an error) rather than grow its support beyond this many
# draws: each step then costs O(k^2) on a k x k factor (measured: k = 5000 at N = 10^4,
# d = 3 takes 60 s in all; the cost grows like k^3).
_MAX_SUPPORT = 10_000
# "auto" for d <= _LOW_D on more than 2 _BLOCK_SIZE draws. The optimum there spreads
# over about half of the draws and the exact active set costs about k^3 for a support of
# k (measured at d = 3, unadjusted Langevin: N = 10^4, k = 5,059, 38 s; N = 2 10^4,
# k = 8,579, 202 s; N = 10^5 would need a 20 GB factor). So the draws are split into
# strided blocks of at most _BLOCK_SIZE (1.4 s each at d = 3), each solved exactly; the
# whole problem is solved exactly instead when the first block predicts a support of at
# most _EXACT_SUPPORT (the exact attempt stops at 1.5 times that); otherwise the block
# solutions are combined optimally and polished by Frank-Wolfe until the certified gap
# is at most _IID_TOL times the squared i.i.d. floor (mean_i k_p(x_i, x_i) / N).
_BLOCK_SIZE = 2500
_EXACT_SUPPORT = 3000
_IID_TOL = 0.05
# Rounding floor of the certificate: the duality gap computed from K_p w in float64 is
# only known to about this many eps * sqrt(N) * max_i k_p(x_i, x_i).
_FLOOR_EPS = 64.0
# Frank-Wolfe thread choice (see _run_frank_wolfe): only from this many points, each
# trial segment about this many kernel evaluations (a few ms), each working segment
# about engine.progress.CHUNK_SECONDS of work on one thread (so that Ctrl-C is honoured
# within about a second even on a loaded machine; at d = 10 that is 6.25e6 pairs,
# 16 times fewer than the 1e8 of before), and a new trial after this many segments (the
# trials' share of the work stays about 1 %).
_FW_PARALLEL_TRIAL_MIN_N = 8000
_FW_TRIAL_PAIRS = 4e6
_FW_RETRIAL_SEGMENTS = 128
# Exact K_p @ w refreshes of the running gradient before giving up on rounding drift.
_FW_MAX_REFRESH = 3
_PIQP_EPS = 1e-10
# Rows of K_p computed at a time for the exact product with sparse weights.
_ROW_CHUNK = 64

_WEIGHTS_EXTRA = "pip install 'steindiag[weights]'  (or: pip install 'piqp>=0.4')"


class SteinWeightsError(RuntimeError):
    """A weights solver failed or did not reach the requested optimality."""


# Public as steindiag.SteinWeightsError / steindiag.weights.SteinWeightsError.
SteinWeightsError.__module__ = "steindiag.weights"


@dataclass(kw_only=True)
class _Solution:
    weights: np.ndarray
    ksd2: float
    ksd2_uniform: float
    gap: float
    floor: float
    iterations: int
    converged: bool
    status: str
    ksd_iid: float = np.nan


# -- certificate ------------------------------------------------------------------------


def _rounding_floor(points):
    """What the float64 duality gap cannot resolve: 64 eps sqrt(N) max_i k_p(x_i, x_i)."""
    return _FLOOR_EPS * np.finfo(np.float64).eps * np.sqrt(points.n) * float(points.diagonal.max())


def _product(points, weights):
    """K_p @ weights, exact: from the support's rows when the weights are sparse."""
    support = np.flatnonzero(weights)
    if 2 * support.size >= points.n:
        return points.matvec(weights)
    gradient = np.zeros(points.n)
    for start in range(0, support.size, _ROW_CHUNK):
        index = support[start : start + _ROW_CHUNK]
        gradient += weights[index] @ points.rows(index)
    return gradient


def _certify(points, weights):
    """KSD^2(w), a certified bound on f(w) - f*, and K_p w, from one exact product.

    For any w on the simplex and g = K_p w, f* >= 2 min_i g_i - f(w) (Wolfe dual of the
    QP). The bound does not trust the solver.
    """
    gradient = _product(points, weights)
    objective = float(weights @ gradient)
    gap = max(2.0 * (objective - float(gradient.min())), 0.0)
    return objective, gap, gradient


def relative_gap(gap, objective):
    return gap / objective if objective > 0 else (0.0 if gap == 0 else np.inf)


def _met(gap, objective, tol, floor):
    """The stopping rule: certified gap <= tol * f(w) + the rounding floor."""
    return gap <= tol * max(objective, 0.0) + floor


# -- solvers ----------------------------------------------------------------------------


def _solve_active_set(points, *, tol, max_iter, memory_limit, support_limit=_MAX_SUPPORT,
                      try_factor=True):
    n = points.n
    # Scale to an O(1) problem (mean diagonal 1): the optimal weights do not change.
    scale = float(points.diagonal.mean())
    diagonal = points.diagonal / scale
    floor = _rounding_floor(points)
    rank_tol = 0.25 * floor / scale

    def rows(index):
        out = points.rows(index)
        out /= scale
        return out

    if try_factor:
        factor, residual = pivoted_cholesky(rows, diagonal, min(n, _FACTOR_FIRST_RANK), rank_tol)
    if try_factor and residual.max() <= rank_tol:
        representation = f"pivoted Cholesky factor of rank {factor.shape[1]}"
        F, kernel = factor, None
        gram_diagonal = np.einsum("ij,ij->i", F, F)
    else:
        # Kernel values on demand: as fast as a stored K_p (measured at N = 10^4, d = 3:
        # 63 s both), O(N d) memory plus the support's factor.
        representation = "matrix-free K_p"
        factor = None
        F, gram_diagonal = None, diagonal
        kernel = matrix_free_kernel(points, scale)
    if max_iter is None:
        max_iter = 20 * n + 1000
    limit = available_memory() if memory_limit is None else memory_limit
    max_support = int(min(n, support_limit, np.sqrt(limit / _ACTIVE_SET_BYTES_PER_ENTRY)))
    # In a worker thread, so that Ctrl-C stops it between blocks of points.
    u, iterations, finished, _ = _progress.run_stoppable(lambda stop: lawson_hanson(
        F, kernel, gram_diagonal, float(tol), float(floor / scale), int(max_iter),
        _CANDIDATES, max_support, stop,
    ))
    del F
    if not np.any(u > 0):
        raise SteinWeightsError("stein_weights: the active-set solver returned no weights.")
    weights = u / u.sum()
    objective, gap, _ = _certify(points, weights)
    status = "solved" if finished else (
        "max_iter" if iterations >= max_iter else "support_limit")
    if not _met(gap, objective, tol, floor):
        hint = (f" The optimal weights spread over more than {max_support} draws (the "
                "limit set by time and memory_limit): thin the draws first (stein_thin, "
                "e.g. to 5000 points) and weight the thinned sample."
                if status == "support_limit" else " Increase max_iter or pass a larger tol.")
        raise SteinWeightsError(
            f"stein_weights: the active-set solver ({representation}) stopped after "
            f"{iterations} iterations ({status}) with a certified relative duality gap "
            f"{relative_gap(gap, objective):.3g} > tol = {tol:g} (rounding floor "
            f"{floor:.3g}).{hint}"
        )
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=np.nan, gap=gap,
                     floor=floor, iterations=int(iterations), converged=True,
                     status=f"{status} ({representation})")


def _iid_floor2(points):
    """mean_i k_p(x_i, x_i) / N: the squared KSD an exact i.i.d. sample of size N shows."""
    return float(points.diagonal.mean()) / points.n


def _simplex_qp(matrix, tol):
    """Exact minimiser of a^T M a over the simplex for a small PSD (B, B) matrix M."""
    size = matrix.shape[0]
    scale = float(np.mean(np.diag(matrix)))
    if not scale > 0:  # every block reached K_p-norm zero: any combination is optimal
        return np.full(size, 1.0 / size)
    values, vectors = np.linalg.eigh(matrix / scale)
    factor = np.ascontiguousarray(vectors * np.sqrt(np.clip(values, 0.0, None)))
    diagonal = np.einsum("ij,ij->i", factor, factor)
    floor = _FLOOR_EPS * np.finfo(np.float64).eps * np.sqrt(size) * float(diagonal.max())
    u, _, _, _ = lawson_hanson(factor, None, diagonal, float(tol), floor,
                               20 * size + 1000, _CANDIDATES, size, np.zeros(1, np.int8))
    if not np.any(u > 0):
        return np.full(size, 1.0 / size)
    return u / u.sum()


def _solve_blocks(points, *, tol, max_iter, memory_limit, progress=None):
    """Exact solutions on strided blocks, combined optimally, polished by Frank-Wolfe.

    Returns (solution, method used): the whole problem goes to the exact active set when
    it is small or the first block predicts a small support (see _BLOCK_SIZE).
    """
    n = points.n
    n_blocks = -(-n // _BLOCK_SIZE)
    exact = {"tol": tol, "max_iter": max_iter, "memory_limit": memory_limit}
    if n_blocks < 3:
        return _solve_active_set(points, **exact), "active-set"
    # Block b holds draws b, b + B, b + 2B, ...: every chain, spread over its whole length.
    blocks = [np.arange(b, n, n_blocks) for b in range(n_blocks)]
    bar = make_progress(progress, n_blocks, 1.5 * n_blocks,
                        desc="stein_weights (exact solutions on blocks of draws)")
    try:
        solutions = []
        try_factor = True
        for index in blocks:
            part = _solve_active_set(points.subset(index), tol=tol, max_iter=None,
                                     memory_limit=memory_limit, try_factor=try_factor)
            # Blocks are alike: when the first is not of low rank, skip the others' try.
            try_factor = "Cholesky" in part.status
            solutions.append(part)
            if bar is not None:
                bar.update(1)
            if len(solutions) == 1:
                predicted = np.count_nonzero(part.weights) * n_blocks
                if predicted <= _EXACT_SUPPORT:
                    try:
                        whole = _solve_active_set(points, support_limit=int(1.5 * _EXACT_SUPPORT),
                                                  **exact)
                        return whole, "active-set"
                    except SteinWeightsError:
                        pass  # the support grew past the prediction: go on with blocks
    finally:
        if bar is not None:
            bar.close()
    # K_p W for the (N, B) block weights W, from the rows of each block's support.
    rows, columns, values = [], [], []
    for b, (index, part) in enumerate(zip(blocks, solutions)):
        support = np.flatnonzero(part.weights)
        rows.append(index[support])
        columns.append(np.full(support.size, b))
        values.append(part.weights[support])
    rows, columns, values = (np.concatenate(v) for v in (rows, columns, values))
    products = points.columns(rows, columns, values, n_blocks)
    gram = np.zeros((n_blocks, n_blocks))
    np.add.at(gram, columns, values[:, None] * products[rows])  # M = W^T K_p W
    combination = _simplex_qp(0.5 * (gram + gram.T), tol)
    weights = np.zeros(n)
    weights[rows] = values * combination[columns]
    gradient = products @ combination
    del products
    floor = max(_rounding_floor(points), _IID_TOL * _iid_floor2(points))
    if max_iter is None:
        max_iter = 50 * n + 10_000
    objective, gap, iterations = _polish(
        points, weights, gradient, tol, floor, max_iter, progress,
        "stein_weights (Frank-Wolfe polish, stops at convergence)", skip_when_met=True)
    if not _met(gap, objective, tol, floor):
        raise SteinWeightsError(
            f"stein_weights: {n_blocks} exact block solutions, combined and polished by "
            f"{iterations} Frank-Wolfe iterations (max_iter = {max_iter}), left a certified "
            f"duality gap {gap:.3g} > {_IID_TOL:g} x the squared i.i.d. floor "
            f"({_iid_floor2(points):.3g}). Increase max_iter, or thin the draws first "
            "(stein_thin) and weight the thinned sample."
        )
    status = (f"converged ({n_blocks} blocks of <= {_BLOCK_SIZE} draws solved exactly, "
              f"combined, {iterations} Frank-Wolfe iterations)")
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=np.nan, gap=gap,
                     floor=floor, iterations=iterations, converged=True,
                     status=status), "blocks"


def _import_piqp():
    try:
        import piqp
    except ImportError:
        raise ImportError(
            "stein_weights(method='dense') needs the QP solver piqp, which is not installed. "
            f"Install it with: {_WEIGHTS_EXTRA}; or use method='active-set' or "
            "'frank-wolfe' (no extra dependency)."
        ) from None
    return piqp


def _piqp_setup(solver, P, n):
    cost = np.zeros(n)
    A = np.ones((1, n))
    b = np.ones(1)
    lower = np.zeros(n)
    try:  # piqp >= 0.6: two-sided inequalities, bounds x_l / x_u
        solver.setup(P, cost, A, b, None, None, None, x_l=lower)
    except TypeError:  # piqp 0.4-0.5: setup(P, c, A, b, G, h, x_lb, x_ub)
        solver.setup(P, cost, A, b, None, None, x_lb=lower)


def _solve_dense(points, *, tol, max_iter, memory_limit):
    n = points.n
    _check_memory(n, memory_limit, _DENSE_BYTES_PER_ENTRY, "dense")
    piqp = _import_piqp()
    matrix = points.matrix()
    # Scale to an O(1) problem: P = 2 K_p / mean(diag K_p); the optimum does not change.
    scale = float(points.diagonal.mean())
    matrix *= 2.0 / scale
    solver = piqp.DenseSolver()
    options = {
        "verbose": False,
        "eps_abs": _PIQP_EPS,
        "eps_rel": 0.0,
        "eps_duality_gap_abs": _PIQP_EPS,
        "eps_duality_gap_rel": 0.0,
        "max_iter": int(max_iter) if max_iter is not None else 200,
    }
    for name, value in options.items():
        if hasattr(solver.settings, name):  # older piqp releases lack some settings
            setattr(solver.settings, name, value)
    # K_p is symmetric: its transpose is the Fortran-ordered view piqp wants (no copy).
    _piqp_setup(solver, matrix.T, n)
    status = solver.solve()
    result = solver.result
    raw = np.array(result.x, dtype=np.float64)
    iterations = int(result.info.iter)
    status_name = getattr(status, "name", str(status))
    del solver, matrix, result
    if not np.all(np.isfinite(raw)) or not np.any(raw > 0):
        raise SteinWeightsError(
            f"stein_weights: the dense QP solver piqp failed (status {status_name}) and "
            "returned no usable weights. Use method='active-set' (exact, no extra "
            "dependency) or method='frank-wolfe'."
        )
    # Interior-point iterates sit inside the bounds up to the tolerance: project.
    weights = np.maximum(raw, 0.0)
    weights /= weights.sum()
    objective, gap, _ = _certify(points, weights)
    floor = _rounding_floor(points)
    # Accepted when piqp reports success (its own, tighter, tolerances) or the rule holds.
    if not (status_name.endswith("PIQP_SOLVED") or _met(gap, objective, tol, floor)):
        raise SteinWeightsError(
            f"stein_weights: the dense QP solver piqp stopped (status {status_name} after "
            f"{iterations} iterations) with a certified relative duality gap "
            f"{relative_gap(gap, objective):.3g} > tol = {tol:g} (rounding floor {floor:.3g}). "
            "Interior-point solvers stall when K_p is nearly singular (few parameters, "
            "many draws): use method='active-set', or increase max_iter."
        )
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=np.nan, gap=gap,
                     floor=floor, iterations=iterations, converged=True, status=status_name)


def _polish(points, weights, gradient, tol, floor, max_iter, progress, desc, *,
            skip_when_met):
    """Frank-Wolfe from ``weights`` (updated in place; ``gradient`` = K_p weights), its
    gradient refreshed from exact products up to ``_FW_MAX_REFRESH`` times, until the
    certified rule holds or ``max_iter`` iterations are done (``skip_when_met``: no
    iteration while the running gap already meets the rule). Returns the certified
    (objective, gap) and the iterations. A bar over the iteration budget, closed early at
    convergence: shown when asked, or (progress=None) when interactive and the solve is
    expected to be long (~N^2 1e-8 s)."""
    bar = make_progress(progress, max_iter, 1e-8 * float(points.n) ** 2, desc=desc)
    iterations = 0
    try:
        for _ in range(_FW_MAX_REFRESH + 1):
            objective = float(weights @ gradient)
            if not skip_when_met or (2.0 * (objective - float(gradient.min()))
                                     > tol * objective + floor):
                iterations += _run_frank_wolfe(points, weights, gradient, tol, floor,
                                               max_iter - iterations, bar)
            weights /= weights.sum()
            objective, gap, gradient = _certify(points, weights)
            if _met(gap, objective, tol, floor) or iterations >= max_iter:
                break
    finally:
        if bar is not None:
            bar.close()
    return objective, gap, iterations


def _solve_frank_wolfe(points, *, tol, max_iter, progress=None):
    n = points.n
    if max_iter is None:
        max_iter = 50 * n + 10_000
    floor = _rounding_floor(points)
    weights = np.full(n, 1.0 / n)
    gradient = points.matvec(weights)
    ksd2_uniform = float(gradient.mean())
    objective, gap, iterations = _polish(
        points, weights, gradient, tol, floor, max_iter, progress,
        "stein_weights (Frank-Wolfe iterations, stops at convergence)", skip_when_met=False)
    if not _met(gap, objective, tol, floor):
        raise SteinWeightsError(
            f"stein_weights: pairwise Frank-Wolfe did not converge in {iterations} "
            f"iterations (max_iter = {max_iter}); the certified relative duality gap is "
            f"{relative_gap(gap, objective):.3g} > tol = {tol:g} (KSD "
            f"{np.sqrt(max(objective, 0.0)):.6g} reached, "
            f"{np.sqrt(max(ksd2_uniform, 0.0)):.6g} with uniform weights). K_p is badly "
            "conditioned for few parameters (d <= 3) and many draws: use "
            "method='active-set' (exact), thin the draws first (stein_thin), pass a "
            "larger tol, or increase max_iter."
        )
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=ksd2_uniform, gap=gap,
                     floor=floor, iterations=iterations, converged=True, status="converged")


def _frank_wolfe_segment(points, weights, gradient, tol, floor, count, threads, bar):
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        start = time.perf_counter()
        done, _, _ = _stein_products.pairwise_frank_wolfe(
            *points.constants, points.diagonal, weights, gradient, float(tol), float(floor),
            int(count)
        )
        elapsed = time.perf_counter() - start
    finally:
        numba.set_num_threads(saved)
    if bar is not None:
        bar.update(int(done))
    return int(done), elapsed, done < count


def _run_frank_wolfe(points, weights, gradient, tol, floor, budget, bar=None):
    """Up to ``budget`` Frank-Wolfe iterations, in segments on one thread or on all.

    Every iteration of the solver ends in two barriers: on an idle machine all threads
    are faster (measured at N = 2 * 10^4 on 2 cores: 0.15 ms vs 0.26 ms per iteration),
    but when other work holds a core, one descheduled thread stalls every step (3.3 ms
    vs 0.26 ms). So both are timed on short trial segments, the faster runs the next
    segments, and the trial is repeated every few segments as the load changes.
    Returns the number of iterations done (fewer than ``budget`` once converged).
    Between segments (about ``engine.progress.CHUNK_SECONDS`` of work) ``bar`` advances
    and Ctrl-C is honoured.
    """
    threads = numba.get_num_threads()
    modes = (1,) if threads == 1 or points.n < _FW_PARALLEL_TRIAL_MIN_N else (threads, 1)
    pairs_per_iteration = 2 * points.n
    trial = max(20, int(_FW_TRIAL_PAIRS // pairs_per_iteration))
    d = points.draws_t.shape[1]
    # Segments often run on one thread (see above): sized at its rate.
    segment_pairs = _progress.CHUNK_SECONDS * _progress.ONE_THREAD_FLOPS / (8 * d + 20)
    segment = max(trial, int(segment_pairs // pairs_per_iteration))
    seconds_per_iteration = {}
    done = 0
    segments_since_trial = _FW_RETRIAL_SEGMENTS
    while done < budget:
        if len(modes) > 1 and segments_since_trial >= _FW_RETRIAL_SEGMENTS:
            for mode in modes:
                count, elapsed, finished = _frank_wolfe_segment(
                    points, weights, gradient, tol, floor, min(trial, budget - done), mode,
                    bar
                )
                done += count
                seconds_per_iteration[mode] = elapsed / max(count, 1)
                if finished or done >= budget:
                    return done
            segments_since_trial = 0
        mode = min(seconds_per_iteration, key=seconds_per_iteration.get) if seconds_per_iteration else modes[0]
        count, elapsed, finished = _frank_wolfe_segment(
            points, weights, gradient, tol, floor, min(segment, budget - done), mode, bar
        )
        done += count
        seconds_per_iteration[mode] = elapsed / max(count, 1)
        segments_since_trial += 1
        if finished:
            break
    return done


_SOLVERS = {
    "active-set": (
        "active set (Lawson-Hanson on the NNLS form, exact; low-rank factor or matrix-free)",
        _solve_active_set,
    ),
    "frank-wolfe": (
        "pairwise Frank-Wolfe, exact line search, maximal-gain pair selection (matrix-free)",
        _solve_frank_wolfe,
    ),
    "dense": ("piqp (dense interior point)", _solve_dense),
    "blocks": (
        "exact active set on strided blocks of draws, optimal combination, Frank-Wolfe "
        "polish (certified to a fraction of the i.i.d. floor)",
        _solve_blocks,
    ),
}
METHODS = ("auto", *_SOLVERS)


# -- memory -----------------------------------------------------------------------------


def _check_memory(n, memory_limit, bytes_per_entry, method):
    limit = available_memory() if memory_limit is None else memory_limit
    need = bytes_per_entry * n * n
    if need > limit:
        raise MemoryError(
            f"stein_weights(method={method!r}) would hold the {n} x {n} kernel matrix and "
            f"the solver's factor, about {need / 2**30:.2f} GiB, more than the "
            f"{limit / 2**30:.2f} GiB available (memory_limit). Use method='frank-wolfe' "
            "or 'active-set', or thin the draws first (stein_thin)."
        )


def _choose_method(method, d):
    if method != "auto":
        return method
    return "blocks" if d <= _LOW_D else "frank-wolfe"


def _solve(points, chosen, method, tol, max_iter, memory_limit, progress):
    """One problem with the chosen solver; returns (solution, method used).

    "auto" falls back from a Frank-Wolfe that did not converge to the exact active set
    when an N x N factor fits in memory, else to the blocks.
    """
    options = {"tol": tol, "max_iter": max_iter, "memory_limit": memory_limit}
    if chosen == "frank-wolfe":
        try:
            return _solve_frank_wolfe(points, progress=progress, tol=tol,
                                      max_iter=max_iter), chosen
        except SteinWeightsError:
            if method != "auto":
                raise
        fits = (_ACTIVE_SET_BYTES_PER_ENTRY * points.n ** 2
                <= (available_memory() if memory_limit is None else memory_limit))
        if fits:
            return _solve_active_set(points, **options), "active-set"
        return _solve_blocks(points, progress=progress, **options)
    if chosen == "blocks":
        return _solve_blocks(points, progress=progress, **options)
    return _SOLVERS[chosen][1](points, **options), chosen


def _solver_version(method):
    if method != "dense":
        return ""
    try:
        from importlib.metadata import version

        return version("piqp")
    except Exception:  # noqa: BLE001 - a version string is only informative
        return ""


def solver_label(methods):
    """The solvers used, with piqp's version: e.g. "frank-wolfe; piqp 0.6.0"."""
    return "; ".join(_SOLVERS[m][0] + (f" {_solver_version(m)}" if _solver_version(m) else "")
                     for m in methods)


def optimal_weights(prepared, pre, kernel, *, per_chain, method, tol, max_iter, memory_limit,
                    progress):
    """Solve the weights QP over all draws pooled, or once per chain.

    Returns (solutions, methods used, KernelPoints of each problem); every solution
    carries its uniform KSD^2 and its i.i.d. floor (``ksd_iid``).
    """
    n_chain, n_draw, d = prepared.draws.shape
    if per_chain:
        problems = [(prepared.draws[k], prepared.scores[k]) for k in range(n_chain)]
    else:
        problems = [(prepared.draws.reshape(-1, d), prepared.scores.reshape(-1, d))]
    chosen = _choose_method(method, d)
    solutions, methods, points_used = [], [], []
    for draws, scores in problems:
        points = _stein_products.KernelPoints(draws, scores, pre, kernel)
        solution, used = _solve(points, chosen, method, tol, max_iter, memory_limit, progress)
        solution.ksd_iid = float(np.sqrt(points.diagonal.mean() / points.n))
        if not np.isfinite(solution.ksd2_uniform):
            solution.ksd2_uniform = float(points.matvec(np.full(points.n, 1.0 / points.n)).mean())
        solutions.append(solution)
        methods.append(used)
        points_used.append(points)
    return solutions, methods, points_used
