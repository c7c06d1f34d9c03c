"""KSD-optimal weights for the draws (see the docs' background page) and weighted summaries.

Data flow: input -> ``steindiag.inputs.read_input`` (every argument checked, draws read)
-> one preconditioner from the pooled draws -> scores (``SteinInput``) -> ``KernelPoints`` (kernel coordinates) -> a QP solver (an exact
active set, matrix-free pairwise Frank-Wolfe, or the optional dense interior point of
piqp) -> the same optimality certificate for all -> labelled ``xarray.DataArray``.
"""

import numbers
import os
import time
from dataclasses import dataclass

import numba
import numpy as np
import xarray as xr

from steindiag.engine import products as _stein_products
from steindiag.methods.active_set import (
    dummy_kernel,
    lawson_hanson,
    matrix_free_kernel,
    pivoted_cholesky,
)
from steindiag._ksd import kernel_attrs
from steindiag.engine.progress import make_progress
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag._validate import check_method
from steindiag.inputs import is_labelled, read_input
from steindiag.kernels import make_kernel

__all__ = ["stein_weights", "weighted_summary", "SteinWeightsError"]

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
# Rounding floor of the certificate: the duality gap computed from K_p w in float64 is
# only known to about this many eps * sqrt(N) * max_i k_p(x_i, x_i).
_FLOOR_EPS = 64.0
# Frank-Wolfe thread choice (see _run_frank_wolfe): only from this many points, each
# trial segment about this many kernel evaluations (a few ms), each working segment
# about this many (about 0.5 s), and a new trial after this many segments.
_FW_PARALLEL_TRIAL_MIN_N = 8000
_FW_TRIAL_PAIRS = 4e6
_FW_SEGMENT_PAIRS = 1e8
_FW_RETRIAL_SEGMENTS = 8
# Exact K_p @ w refreshes of the running gradient before giving up on rounding drift.
_FW_MAX_REFRESH = 3
_PIQP_EPS = 1e-10
# Rows of K_p computed at a time for the exact product with sparse weights.
_ROW_CHUNK = 64

_WEIGHTS_EXTRA = "pip install 'steindiag[weights]'  (or: pip install 'piqp>=0.4')"


class SteinWeightsError(RuntimeError):
    """A weights solver failed or did not reach the requested optimality."""


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


def _relative(gap, objective):
    return gap / objective if objective > 0 else (0.0 if gap == 0 else np.inf)


def _met(gap, objective, tol, floor):
    """The stopping rule: certified gap <= tol * f(w) + the rounding floor."""
    return gap <= tol * max(objective, 0.0) + floor


# -- solvers ----------------------------------------------------------------------------


def _solve_active_set(points, *, tol, max_iter, memory_limit):
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

    dummy = np.zeros((1, 1))
    kernel = dummy_kernel()
    factor, residual = pivoted_cholesky(rows, diagonal, min(n, _FACTOR_FIRST_RANK), rank_tol)
    if residual.max() <= rank_tol:
        representation = f"pivoted Cholesky factor of rank {factor.shape[1]}"
        mode, F = 1, factor
        gram_diagonal = np.einsum("ij,ij->i", F, F)
    else:
        # Kernel values on demand: as fast as a stored K_p (measured at N = 10^4, d = 3:
        # 63 s both), O(N d) memory plus the support's factor.
        representation = "matrix-free K_p"
        del factor
        mode, F, gram_diagonal = 2, dummy, diagonal
        kernel = matrix_free_kernel(points, scale)
    if max_iter is None:
        max_iter = 20 * n + 1000
    limit = _available_memory() if memory_limit is None else memory_limit
    max_support = int(min(n, _MAX_SUPPORT, np.sqrt(limit / _ACTIVE_SET_BYTES_PER_ENTRY)))
    u, iterations, finished, _ = lawson_hanson(
        mode, F, kernel, gram_diagonal, float(tol), float(floor / scale), int(max_iter),
        _CANDIDATES, max_support,
    )
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
            f"{_relative(gap, objective):.3g} > tol = {tol:g} (rounding floor "
            f"{floor:.3g}).{hint}"
        )
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=np.nan, gap=gap,
                     floor=floor, iterations=int(iterations), converged=True,
                     status=f"{status} ({representation})")


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
            f"{_relative(gap, objective):.3g} > tol = {tol:g} (rounding floor {floor:.3g}). "
            "Interior-point solvers stall when K_p is nearly singular (few parameters, "
            "many draws): use method='active-set', or increase max_iter."
        )
    return _Solution(weights=weights, ksd2=objective, ksd2_uniform=np.nan, gap=gap,
                     floor=floor, iterations=iterations, converged=True, status=status_name)


def _solve_frank_wolfe(points, *, tol, max_iter, progress=None):
    n = points.n
    if max_iter is None:
        max_iter = 50 * n + 10_000
    # A bar over the iteration budget; it closes early at convergence. Shown when asked, or
    # (progress=None) when interactive and the solve is expected to be long (~N^2 1e-8 s).
    bar = make_progress(progress, max_iter, 1e-8 * float(n) ** 2,
                        desc="stein_weights (Frank-Wolfe iterations, stops at convergence)")
    try:
        return _frank_wolfe_iterations(points, tol, max_iter, bar)
    finally:
        if bar is not None:
            bar.close()


def _frank_wolfe_iterations(points, tol, max_iter, bar):
    n = points.n
    floor = _rounding_floor(points)
    weights = np.full(n, 1.0 / n)
    gradient = points.matvec(weights)
    ksd2_uniform = float(gradient.mean())
    iterations = 0
    objective, gap = ksd2_uniform, np.inf
    for _ in range(_FW_MAX_REFRESH + 1):
        remaining = max_iter - iterations
        if remaining > 0:
            iterations += _run_frank_wolfe(points, weights, gradient, tol, floor, remaining,
                                           bar)
        weights /= weights.sum()
        objective, gap, gradient = _certify(points, weights)
        if _met(gap, objective, tol, floor) or iterations >= max_iter:
            break
    if not _met(gap, objective, tol, floor):
        raise SteinWeightsError(
            f"stein_weights: pairwise Frank-Wolfe did not converge in {iterations} "
            f"iterations (max_iter = {max_iter}); the certified relative duality gap is "
            f"{_relative(gap, objective):.3g} > tol = {tol:g} (KSD "
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
    Between segments (about 0.5 s) ``bar`` advances and Ctrl-C is honoured.
    """
    threads = numba.get_num_threads()
    modes = (1,) if threads == 1 or points.n < _FW_PARALLEL_TRIAL_MIN_N else (threads, 1)
    pairs_per_iteration = 2 * points.n
    trial = max(20, int(_FW_TRIAL_PAIRS // pairs_per_iteration))
    segment = max(trial, int(_FW_SEGMENT_PAIRS // pairs_per_iteration))
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
}
METHODS = ("auto", *_SOLVERS)


# -- memory -----------------------------------------------------------------------------


def _available_memory():
    """Bytes of memory available now (Linux MemAvailable, else free pages, else 4 GiB)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def _check_memory(n, memory_limit, bytes_per_entry, method):
    limit = _available_memory() if memory_limit is None else memory_limit
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
    return "active-set" if d <= _LOW_D else "frank-wolfe"


# -- validation -------------------------------------------------------------------------


def _weights_iv(method, per_chain, tol, max_iter, memory_limit, progress):
    check_method(method, set(METHODS))
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")
    if not isinstance(per_chain, (bool, np.bool_)):
        raise TypeError(f"per_chain must be True or False; got {per_chain!r}.")
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real):
        raise TypeError(f"tol must be a real number; got {type(tol).__name__}.")
    if not 0.0 < float(tol) < 1.0:
        raise ValueError(f"tol must be in the open interval (0, 1); got tol={tol}.")
    if max_iter is not None:
        if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)):
            raise TypeError(f"max_iter must be None or an integer; got {type(max_iter).__name__}.")
        if max_iter < 1:
            raise ValueError(f"max_iter must be None or an integer >= 1; got {max_iter}.")
    if memory_limit is not None:
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, numbers.Real):
            raise TypeError(
                f"memory_limit must be None or a number of bytes; got {type(memory_limit).__name__}."
            )
        if not memory_limit > 0:
            raise ValueError(f"memory_limit must be > 0 bytes; got {memory_limit}.")
    return float(tol)


def _weights_doc_parameters():
    from steindiag._ksd import _COMMON_PARAMETERS

    head, _, _ = _COMMON_PARAMETERS.partition("    method : {")
    # space= applies; client= does not (the weights' solvers run on this machine).
    space = "    space :" + _COMMON_PARAMETERS.split("    space :")[1].split("    client :")[0]
    return head.rstrip("\n") + "\n" + space.rstrip()


def stein_weights(data, model=None, *, score=None, batched=True, kernel="imq", c=None,
                  beta=None, preconditioner="standardize", group="posterior", var_names=None,
                  coords=None, sample_dims=None, method="auto", per_chain=False, tol=1e-6,
                  max_iter=None, memory_limit=None, progress=None, space=None):
    """Weights on the draws that minimise the kernel Stein discrepancy.

    Parameters
    ----------
{params}
    method : {{"auto", "active-set", "frank-wolfe", "dense"}}, default "auto"
        ``"active-set"``: exact (Lawson-Hanson on an equivalent non-negative least
        squares problem). It works on a low-rank factor K_p ~ F F^T (pivoted
        Cholesky, 8 N r bytes) when K_p is numerically of low rank r (one parameter:
        r ~ 100 at any N), else matrix-free (kernel values on demand; O(N d) plus the
        Cholesky factor of the support, 8 k^2 bytes for k draws with positive weight).
        Fast when the optimal weights are sparse (few parameters); it stops with an
        error (advising to thin first) if more than 10,000 draws would carry weight.
        ``"frank-wolfe"``: matrix-free pairwise Frank-Wolfe; O(N d) memory, K_p is
        never stored; fast when K_p is well conditioned (d >= 4: 5-40 N iterations),
        very slow for d <= 3 and many draws. ``"dense"``: the interior-point solver
        piqp (optional extra ``steindiag[weights]``; 32 N^2 bytes; stalls when K_p is
        nearly singular). ``"auto"``: ``"active-set"`` for d <= 3, else
        ``"frank-wolfe"``, then ``"active-set"`` if Frank-Wolfe does not converge and
        an N x N factor fits in ``memory_limit``. No optional dependency is needed.
    per_chain : bool, default False
        Solve one problem per chain (weights sum to 1 within each chain) instead of
        one over all draws pooled (weights sum to 1 over all draws).
    tol : float, default 1e-6
        Stopping rule, the same for every method: the certified duality gap (below)
        must satisfy gap <= tol * f(w) + floor, with ``floor`` the rounding floor of
        the certificate in float64 (64 eps sqrt(N) max_i k_p(x_i, x_i)). So a
        near-zero optimum (few parameters, many draws) is certified to rounding
        rather than to an unreachable relative accuracy.
    max_iter : int, optional
        Iteration limit (default: 20 N + 1000 active-set additions; 50 N + 10^4
        Frank-Wolfe iterations; 200 interior-point iterations).
    memory_limit : float, optional
        Bytes the matrix-holding paths may use (default: the memory available now):
        piqp's matrices, and the active set's factor of the support.
    progress : bool or None, default None
        Progress bar for Frank-Wolfe (None: only when interactive and the solve is
        expected to be long). Ctrl-C stops Frank-Wolfe between segments of about 0.5 s.

    Returns
    -------
    xarray.DataArray
        ``stein_weight`` with dims (``chain``, ``draw``) and the trace's coordinates;
        non-negative, summing to 1 over all draws (or within each chain). ``attrs``:
        ``ksd_uniform`` and ``ksd_weighted`` (sqrt of w^T K_p w for uniform and optimal
        w), ``duality_gap`` and ``relative_duality_gap`` (the certificate),
        ``rounding_floor``, ``converged`` (1; otherwise an error is raised),
        ``iterations``, ``solver``, ``solver_status``, ``method``, ``tol``,
        ``kish_ess`` (1 / sum w^2 of the normalised weights), ``normalised_over``, and
        the kernel and preconditioner as in :func:`steindiag.ksd`. With
        ``per_chain=True`` the per-problem values (all of the above from
        ``ksd_uniform`` to ``solver_status``, and ``kish_ess``) are coordinates
        along ``chain`` instead, labelled by chain (e.g. ``w.ksd_weighted.sel(chain=2)``).

    Raises
    ------
    MemoryError
        ``method="dense"`` and the matrix would not fit in ``memory_limit``.
    ImportError
        ``method="dense"`` and piqp is not installed.
    SteinWeightsError (a RuntimeError)
        The solver failed or did not meet the stopping rule within ``max_iter``.

    Notes
    -----
    Solves the convex QP (Liu & Lee 2017)

        minimise  f(w) = w^T K_p w   subject to  w >= 0,  sum_i w_i = 1,

    with K_p the Langevin Stein kernel matrix of the chosen base kernel (see the
    background page of the docs), in the kernel coordinates of one preconditioner fixed
    from all pooled draws. f(w) is the squared KSD of the weighted sample; the uniform
    value is the V-statistic of :func:`steindiag.ksd`. The weights make biased samplers (unadjusted
    Langevin, too large a step, variational draws) consistent again under mild
    conditions (Hodgkinson et al. 2020).

    Certificate: with g = K_p w, the Wolfe dual gives f* >= 2 min_i g_i - f(w), so
    ``duality_gap`` = 2 (f(w) - min_i g_i) bounds f(w) - f* whichever solver ran; it is
    computed from an exact product, not from the solver's own records.

    Active set: with K_p = Phi^T Phi, the non-negative least squares problem
    min ||Phi u||^2 + (1 - sum u)^2, u >= 0, has the solution u* = w* / (1 + f*).
    Lawson & Hanson's method (1974) solves it exactly through the Gram matrix
    K_p + 1 1^T: it adds the most violating draw, re-solves on the support with an
    updated Cholesky factor, and steps back when a weight would turn negative. Its
    cost grows with the support (the draws with positive weight): 0.01-1 s at
    N = 2000 for d <= 3, seconds to minutes at N = 10^4 (see the benchmarks in the
    docs). It runs in compiled code and cannot be interrupted.

    Frank-Wolfe: each iteration moves mass from the support point with the largest
    gradient to the point of largest second-order gain (SMO pair selection) with an
    exact line search, keeping g = K_p w up to date with two kernel rows: 2 N kernel
    evaluations and O(N) memory per iteration.

    Memory: ``"frank-wolfe"`` O(N d); ``"active-set"`` 8 N r (low-rank factor of rank
    r) or O(N d) + 8 k^2 (k the support size, at most N); ``"dense"`` about 32 N^2
    bytes.

    References
    ----------
    Liu & Lee (2017), Black-box importance sampling, AISTATS.
    Hodgkinson, Salomone & Roosta (2020), The reproducing Stein kernel approach for
    post-hoc corrected sampling.
    Lawson & Hanson (1974), Solving Least Squares Problems, Prentice-Hall, ch. 23.
    Lacoste-Julien & Jaggi (2015), On the global linear convergence of Frank-Wolfe
    optimization variants, NeurIPS.
    Fan, Chen & Lin (2005), Working set selection using second order information for
    training support vector machines, JMLR.
    Schwan, Jiang, Kuhn & Jones (2023), PIQP: a proximal interior-point quadratic
    programming solver, IEEE CDC.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 4)) + 0.3  # biased draws
    >>> w = steindiag.stein_weights(x, score=-x)
    >>> w.dims, bool(abs(float(w.sum()) - 1) < 1e-12)
    (('chain', 'draw'), True)
    >>> bool(w.attrs["ksd_weighted"] < w.attrs["ksd_uniform"])
    True
    """
    kernel = make_kernel(kernel, c, beta)
    tol = _weights_iv(method, per_chain, tol, max_iter, memory_limit, progress)
    check_preconditioner(preconditioner)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space,
    )
    n_chain, n_draw, d = pending.draws.shape
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    if per_chain:
        problems = [(prepared.draws[k], prepared.scores[k]) for k in range(n_chain)]
    else:
        problems = [(prepared.draws.reshape(-1, d), prepared.scores.reshape(-1, d))]
    chosen = _choose_method(method, d)
    solutions, methods = [], []
    for draws, scores in problems:
        points = _stein_products.KernelPoints(draws, scores, pre, kernel)
        solution, used = _solve(points, chosen, method, tol, max_iter, memory_limit, progress)
        if not np.isfinite(solution.ksd2_uniform):
            solution.ksd2_uniform = float(points.matvec(np.full(points.n, 1.0 / points.n)).mean())
        solutions.append(solution)
        methods.append(used)
    weights = np.stack([s.weights for s in solutions]).reshape(n_chain, n_draw)
    used_methods = sorted(set(methods), key=methods.index)
    label = "; ".join(_SOLVERS[m][0] + (f" {_solver_version(m)}" if _solver_version(m) else "")
                      for m in used_methods)
    per_problem = {
        "ksd_uniform": [np.sqrt(max(s.ksd2_uniform, 0.0)) for s in solutions],
        "ksd_weighted": [np.sqrt(max(s.ksd2, 0.0)) for s in solutions],
        "duality_gap": [s.gap for s in solutions],
        "relative_duality_gap": [_relative(s.gap, s.ksd2) for s in solutions],
        "rounding_floor": [s.floor for s in solutions],
        "converged": [int(s.converged) for s in solutions],
        "iterations": [s.iterations for s in solutions],
        "solver_status": [s.status for s in solutions],
    }
    pooled = weights / weights.sum()
    attrs = {
        "long_name": "KSD-optimal weight of each draw",
        "method": "; ".join(used_methods),
        "solver": label,
        "normalised_over": "each chain" if per_chain else "all draws",
        "tol": tol,
        "kish_ess": float(1.0 / np.sum(pooled**2)),
        **kernel_attrs(prepared, pre, kernel),
    }
    coords = {"chain": prepared.chain, "draw": prepared.draw}
    if per_chain:
        per_problem["kish_ess"] = [float(1.0 / np.sum(s.weights**2)) for s in solutions]
        del attrs["kish_ess"]
        for name, values in per_problem.items():
            coords[name] = ("chain", np.asarray(values))
    else:
        attrs.update({name: values[0] for name, values in per_problem.items()})
    return xr.DataArray(weights, dims=("chain", "draw"), coords=coords,
                        name="stein_weight", attrs=attrs)


def _solve(points, chosen, method, tol, max_iter, memory_limit, progress):
    """One problem with the chosen solver; "auto" falls back to the active set."""
    options = {"tol": tol, "max_iter": max_iter}
    if chosen == "frank-wolfe":
        try:
            return _solve_frank_wolfe(points, progress=progress, **options), chosen
        except SteinWeightsError:
            fits = (_ACTIVE_SET_BYTES_PER_ENTRY * points.n ** 2
                    <= (_available_memory() if memory_limit is None else memory_limit))
            if method != "auto" or not fits:
                raise
        return _solve_active_set(points, memory_limit=memory_limit, **options), "active-set"
    return _SOLVERS[chosen][1](points, memory_limit=memory_limit, **options), chosen


def _solver_version(method):
    if method != "dense":
        return ""
    try:
        from importlib.metadata import version

        return version("piqp")
    except Exception:  # noqa: BLE001 - a version string is only informative
        return ""


stein_weights.__doc__ = stein_weights.__doc__.format(params=_weights_doc_parameters())


# -- weighted summary -------------------------------------------------------------------


def _posterior_dataset(data, group):
    """The ``group`` of an InferenceData / DataTree (read with xarray), or a Dataset itself."""
    from steindiag.inputs._trace import _container_kind, _get_group, _group_names

    if isinstance(data, xr.DataArray):
        return data.to_dataset(name=data.name if data.name is not None else "x")
    kind = _container_kind(data)
    if kind == "dataset":
        return data
    if kind == "datatree" and not data.children and data.has_data:
        return data.to_dataset()   # a single group's node, e.g. ``idata.posterior``
    if kind is None:
        raise TypeError(
            "data must be an array, an xarray.Dataset, an xarray.DataTree or an "
            f"arviz.InferenceData; got {type(data).__name__}."
        )
    dataset = _get_group(data, group)
    if dataset is None:
        raise ValueError(f"data has no group {group!r}; its groups are {_group_names(data)}.")
    return dataset


def _select_vars(dataset, var_names, coords):
    if var_names is not None:
        names = [var_names] if isinstance(var_names, str) else list(var_names)
        missing = [name for name in names if name not in dataset.data_vars]
        if missing:
            raise ValueError(
                f"var_names {missing} are not variables of the trace; it has "
                f"{list(dataset.data_vars)}."
            )
        dataset = dataset[names]
    if coords is not None:
        from steindiag.inputs._trace import _select

        if not isinstance(coords, dict):
            raise TypeError(f"coords must be a dict; got {type(coords).__name__}.")
        dataset = _select(dataset, coords, "the trace")
    return dataset


def _trace_columns(data, group, var_names, coords, sample_dims):
    from steindiag.inputs._labels import variable_labels

    """(labels, values (chain, draw, n_columns)) of every posterior variable element."""
    dataset = _select_vars(_posterior_dataset(data, group), var_names, coords)
    chain_dim, draw_dim = sample_dims
    labels = []
    columns = []
    for name, variable in dataset.data_vars.items():
        if chain_dim not in variable.dims or draw_dim not in variable.dims:
            continue
        if not (np.issubdtype(variable.dtype, np.number) or variable.dtype == bool):
            continue
        other = [dim for dim in variable.dims if dim not in (chain_dim, draw_dim)]
        values = variable.transpose(chain_dim, draw_dim, *other).values
        values = values.reshape(values.shape[0], values.shape[1], -1).astype(np.float64)
        labels.extend(variable_labels(name, variable, sample_dims))
        columns.append(values)
    if not columns:
        raise ValueError(
            f"no numeric variable with dims {sample_dims} in the trace's group {group!r}."
        )
    return labels, np.concatenate(columns, axis=2), dataset


def _summary_weights(weights, shape, chain_values=None, draw_values=None):
    n_chain, n_draw = shape
    if isinstance(weights, xr.DataArray):
        if set(weights.dims) != {"chain", "draw"}:
            raise ValueError(f"weights must have dims ('chain', 'draw'); got {weights.dims}.")
        if chain_values is not None and "chain" in weights.coords and "draw" in weights.coords:
            if (weights.sizes["chain"] != n_chain or weights.sizes["draw"] != n_draw
                    or not np.array_equal(weights["chain"].values, chain_values)
                    or not np.array_equal(weights["draw"].values, draw_values)):
                raise ValueError(
                    f"weights do not match the trace: weights have chain {weights.sizes['chain']}"
                    f" x draw {weights.sizes['draw']} (coordinates must match too), the trace "
                    f"has chain {n_chain} x draw {n_draw}."
                )
        values = weights.transpose("chain", "draw").values
    else:
        try:
            values = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"weights must be an array or a DataArray of numbers; got {type(weights).__name__}."
            ) from None
        if values.ndim == 1 and n_chain == 1:
            values = values[None, :]
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (n_chain, n_draw):
        raise ValueError(
            f"weights do not match the trace: weights have shape {values.shape}, the draws "
            f"have (chain, draw) = ({n_chain}, {n_draw})."
        )
    if not np.all(np.isfinite(values)):
        raise ValueError("weights must be finite.")
    if np.any(values < 0):
        raise ValueError(f"weights must be >= 0; the smallest is {values.min():.3g}.")
    total = values.sum()
    if not total > 0:
        raise ValueError("weights must not all be zero.")
    return values / total


def _weighted_quantiles(values, weights, probabilities):
    """Inverse of the weighted empirical CDF: the smallest x with F_w(x) >= p.

    values (N, m), weights (N,) summing to 1 -> (len(probabilities), m).
    """
    order = np.argsort(values, axis=0, kind="stable")
    sorted_values = np.take_along_axis(values, order, axis=0)
    cumulative = np.cumsum(weights[order], axis=0)
    out = np.empty((len(probabilities), values.shape[1]))
    n = values.shape[0]
    for col in range(values.shape[1]):
        cum = cumulative[:, col]
        # Guard the last step against the rounding of the cumulative sum.
        cum = cum / cum[-1]
        index = np.searchsorted(cum, probabilities, side="left")
        out[:, col] = sorted_values[np.minimum(index, n - 1), col]
    return out


def _summary_iv(probabilities):
    try:
        probabilities = np.atleast_1d(np.asarray(probabilities, dtype=np.float64))
    except (TypeError, ValueError):
        raise TypeError("quantiles must be a sequence of numbers in [0, 1].") from None
    if probabilities.ndim != 1 or probabilities.size == 0:
        raise ValueError("quantiles must be a non-empty 1-D sequence of numbers in [0, 1].")
    if not np.all((probabilities >= 0) & (probabilities <= 1)):
        raise ValueError(f"quantiles must be in [0, 1]; got {probabilities.tolist()}.")
    return probabilities


def weighted_summary(data, weights, *, group="posterior", var_names=None, coords=None,
                     sample_dims=None, quantiles=(0.05, 0.5, 0.95)):
    """Weighted mean, sd and quantiles of every posterior variable, like ``arviz.summary``.

    Parameters
    ----------
    data : array_like, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        The trace: its ``group`` is summarised in its own (constrained) space, every
        variable with both sample dims (deterministics included). An array of shape
        (chain, draw, d) or (draw, d) is summarised column by column (``x[k]``).
    weights : xarray.DataArray or array_like
        Non-negative weights of the draws with dims / shape (chain, draw), e.g. the
        output of :func:`stein_weights`; normalised here to sum to 1 over all draws
        (per-chain weights then count every chain equally).
    group : str, default "posterior"
    var_names : str or list of str, optional
    coords : dict, optional
        Passed to ``Dataset.sel`` before summarising.
    sample_dims : sequence of str, optional
        For a trace, its (chain, draw) dims (default ("chain", "draw")); for an array,
        the meaning of its leading axes, as in :func:`stein_weights`.
    quantiles : sequence of float, default (0.05, 0.5, 0.95)
        Probabilities of the weighted quantiles.

    Returns
    -------
    pandas.DataFrame
        One row per scalar element, labelled like ``arviz.summary`` (``mu``,
        ``theta[0]``, ``Sigma[0, 1]``, or coordinate values). Columns: ``mean``, ``sd``,
        one per quantile (``q5%``, ``q50%``, ``q95%``) and ``ess_kish``, the Kish
        effective sample size of the weights (the same for every row). ``attrs``
        holds ``kish_ess`` and ``n_draws``.

    Notes
    -----
    With weights w normalised to sum 1: mean m = sum_i w_i x_i; sd = sqrt(sum_i w_i
    (x_i - m)^2 / (1 - sum_i w_i^2)) (unbiased for reliability weights; the usual
    sample sd when w is uniform); the p-quantile is the smallest draw x with
    sum_(x_i <= x) w_i >= p (inverse of the weighted empirical CDF, numpy's
    ``method="inverted_cdf"``). Kish ESS = 1 / sum_i w_i^2 (= N for uniform weights).
    Memory: one (N, number of scalar elements) float64 array.

    References
    ----------
    Kish (1965), Survey Sampling, Wiley.
    Liu & Lee (2017), Black-box importance sampling, AISTATS.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 300, 2))
    >>> w = steindiag.stein_weights(x, score=-x)
    >>> table = steindiag.weighted_summary(x, w)
    >>> list(table.columns)
    ['mean', 'sd', 'q5%', 'q50%', 'q95%', 'ess_kish']
    """
    import pandas as pd

    probabilities = _summary_iv(quantiles)
    array_dims = sample_dims
    sample_dims = ("chain", "draw") if sample_dims is None else tuple(sample_dims)
    if is_labelled(data) and len(sample_dims) != 2:
        raise ValueError(f"sample_dims must name two dims (chain, draw); got {sample_dims}.")
    if is_labelled(data):
        labels, values, dataset = _trace_columns(data, group, var_names, coords, sample_dims)
        chain_dim, draw_dim = sample_dims
        chain_values = dataset[chain_dim].values if chain_dim in dataset.coords else None
        draw_values = dataset[draw_dim].values if draw_dim in dataset.coords else None
    else:
        for name, value in (("var_names", var_names), ("coords", coords)):
            if value is not None:
                raise TypeError(f"{name} applies to labelled traces only; data is an array.")
        from steindiag.inputs._arrays import read_array_draws

        # The same reading of an array's axes as stein_weights (sample_dims for arrays).
        _, _, values, labels = read_array_draws(data, array_dims)
        chain_values = draw_values = None
    n_chain, n_draw, n_col = values.shape
    w = _summary_weights(weights, (n_chain, n_draw), chain_values, draw_values).reshape(-1)
    flat = values.reshape(-1, n_col)
    mean = w @ flat
    sum_w2 = float(np.sum(w**2))
    centred = flat - mean
    variance = (w @ (centred * centred)) / (1.0 - sum_w2) if sum_w2 < 1 else np.full(n_col, np.nan)
    table = {"mean": mean, "sd": np.sqrt(variance)}
    q_values = _weighted_quantiles(flat, w, probabilities)
    for p, row in zip(probabilities, q_values):
        table[f"q{100 * p:g}%"] = row
    kish = 1.0 / sum_w2
    table["ess_kish"] = np.full(n_col, kish)
    frame = pd.DataFrame(table, index=labels)
    frame.attrs["kish_ess"] = kish
    frame.attrs["n_draws"] = n_chain * n_draw
    return frame
