"""KSD-optimal weights for the draws and weighted summaries: ``stein_weights``,
``weighted_summary``.

Data flow of ``stein_weights``: input -> ``inputs.read_input`` (read once) -> one
preconditioner from the pooled draws -> scores -> ``methods.weights.optimal_weights`` (a QP
solver: an exact active set, matrix-free pairwise Frank-Wolfe, or the optional dense
interior point of piqp; the same optimality certificate for all) ->
``methods.corrections.check_correction`` (divergences, unvisited mass, a KSD far above its
floor, draws narrower than the target) -> ``outputs.weights`` (a labelled
``xarray.DataArray``).

``weighted_summary`` reads the trace's own variables (``inputs._columns.read_columns``), computes
``stats.weighted`` statistics and labels them like ``arviz.summary``.
"""

import numpy as np

from steindiag._docs import fill_doc
from steindiag._types import CorrectionWarning
from steindiag._validate import (check_bool, check_callable, check_choice, check_int,
                                 check_real, check_rng, renamed_arguments, warn_user)
from steindiag.engine.progress import check_progress
from steindiag.inputs import read_input
from steindiag.inputs._columns import read_columns, read_weights
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.methods.corrections import (MODE_SEARCH_TAKES, check_correction,
                                           check_mode_search, summary_message,
                                           summary_reasons)
from steindiag.methods.weights import METHODS, SteinWeightsError, optimal_weights
from steindiag.outputs.weights import interval_defaults, summary_frame, weights_dataarray
from steindiag.stats.weighted import weighted_summary as weighted_statistics

__all__ = ["stein_weights", "weighted_summary", "SteinWeightsError", "CorrectionWarning"]


def _weights_iv(method, per_chain, tol, max_iter, memory_limit, progress, log_density):
    check_choice(method, "method", sorted(METHODS))
    check_progress(progress)
    check_bool(per_chain, "per_chain")
    tol = check_real(tol, "tol", low=0.0, high=1.0, low_open=True, high_open=True)
    check_int(max_iter, "max_iter", minimum=1, allow_none=True)
    check_real(memory_limit, "memory_limit", low=0.0, low_open=True, allow_none=True)
    check_callable(log_density, "log_density", "a callable on the flat parameter vector "
                   "((n, d) -> (n,) if batched)")
    return tol


@fill_doc
@renamed_arguments(missing_mass=("mode_search", MODE_SEARCH_TAKES))
def stein_weights(data, model=None, *, score=None, batched=True, kernel="imq", c=None,
                  beta=None, preconditioner="standardize", group="posterior", var_names=None,
                  filter_vars=None, labeller=None,
                  coords=None, sample_dims=None, method="auto", per_chain=False, tol=1e-6,
                  max_iter=None, memory_limit=None, progress=None, space=None,
                  log_density=None, mode_search="auto", rng=None, compile_mode=None):
    """Weights on the draws that minimise the kernel Stein discrepancy.

    Parameters
    ----------
    {input_entries}
    {kernel_entries}
    {trace_entries}
    {space}
    method : {"auto", "active-set", "blocks", "frank-wolfe", "dense"}, default "auto"
        ``"active-set"``: exact (Lawson-Hanson on an equivalent non-negative least
        squares problem). It works on a low-rank factor K_p ~ F F^T (pivoted
        Cholesky, 8 N r bytes) when K_p is numerically of low rank r (one parameter:
        r ~ 100 at any N), else matrix-free (kernel values on demand; O(N d) plus the
        Cholesky factor of the support, 8 k^2 bytes for k draws with positive weight).
        Fast when the optimal weights are sparse (few parameters); it stops with an
        error (advising to thin first) if more than 10,000 draws would carry weight.
        ``"blocks"``: for many draws and few parameters, where the exact optimum
        spreads over about half of the draws (d = 3: 5,000 of 10^4, costing the
        active set 40 s; 10^5 draws would need a 20 GB factor). The draws are split
        into strided blocks of at most 2,500 (every chain, over its whole length), each
        block is solved exactly, the block solutions are combined optimally, and
        Frank-Wolfe polishes the result over all draws until the certified gap is at
        most 5 % of the squared i.i.d. floor (see ``tol``). Memory O(N d) plus 8 N B
        bytes for B blocks (32 MB at N = 10^5). When N <= 5,000, or when the first
        block predicts at most 3,000 draws with positive weight overall, the whole
        problem is solved exactly instead.
        ``"frank-wolfe"``: matrix-free pairwise Frank-Wolfe; O(N d) memory, K_p is
        never stored; fast when K_p is well conditioned (d >= 4: 5-40 N iterations),
        very slow for d <= 3 and many draws. ``"dense"``: the interior-point solver
        piqp (optional extra ``steindiag[weights]``; 32 N^2 bytes; stalls when K_p is
        nearly singular). ``"auto"``: ``"blocks"`` for d <= 3 (so exact up to 5,000
        draws), else ``"frank-wolfe"``, then, if Frank-Wolfe does not converge,
        ``"active-set"`` when an N x N factor fits in ``memory_limit`` and
        ``"blocks"`` otherwise. No optional dependency is needed.
    per_chain : bool, default False
        Solve one problem per chain (weights sum to 1 within each chain) instead of
        one over all draws pooled (weights sum to 1 over all draws).
    tol : float, default 1e-6
        Stopping rule, the same for every method: the certified duality gap (below)
        must satisfy gap <= tol * f(w) + floor, with ``floor`` the rounding floor of
        the certificate in float64 (64 eps sqrt(N) max_i k_p(x_i, x_i)). So a
        near-zero optimum (few parameters, many draws) is certified to rounding
        rather than to an unreachable relative accuracy. ``"blocks"`` (when it does
        not solve the whole problem exactly) uses a statistical floor instead,
        ``floor = 0.05 * ksd_iid^2`` with ``ksd_iid^2 = mean_i k_p(x_i, x_i) / N``
        the squared KSD an exact i.i.d. sample of N draws shows: the weights' KSD^2
        is then certified within 5 % of that level from the optimum (at d = 3 the
        optimum itself is about 10^-3 of it, far below what any sample of N draws
        can resolve).
    max_iter : int, optional
        Iteration limit (default: 20 N + 1000 active-set additions; 50 N + 10^4
        Frank-Wolfe iterations, also for the polish of ``"blocks"``; 200
        interior-point iterations).
    memory_limit : float, optional
        Bytes the matrix-holding paths may use (default: the memory available now):
        piqp's matrices, and the active set's factor of the support.
    progress : bool or None, default None
        Progress bar for Frank-Wolfe and the blocks (None: only when interactive and the
        solve is expected to be long). Ctrl-C stops the products K_p w and the
        Frank-Wolfe iterations within about a second (calls of about 0.25 s of work),
        and the exact active-set solver (``method="active-set"``, and each block of
        ``"blocks"``) between blocks of points (it runs in a worker thread).
    {log_density_checks}
    {mode_search_checks}
    {rng_checks}

    Returns
    -------
    xarray.DataArray
        ``stein_weight`` with dims (``chain``, ``draw``) and the trace's coordinates;
        non-negative, summing to 1 over all draws (or within each chain). ``attrs``:
        ``ksd_uniform`` and ``ksd_weighted`` (sqrt of w^T K_p w for uniform and optimal
        w), ``duality_gap`` and ``relative_duality_gap`` (the certificate),
        ``rounding_floor`` (the floor of the stopping rule used), ``ksd_iid`` (sqrt of
        mean_i k_p(x_i, x_i) / N, the KSD of an exact i.i.d. sample of that size, as in
        :func:`steindiag.ksd`), ``converged`` (1; otherwise an error is raised),
        ``iterations``, ``solver``, ``solver_status``, ``method``, ``tol``,
        ``kish_ess`` (1 / sum w^2 of the normalised weights), ``normalised_over``, and
        the kernel and preconditioner as in :func:`steindiag.ksd`. With
        ``per_chain=True`` the per-problem values (all of the above from
        ``ksd_uniform`` to ``solver_status``, and ``kish_ess``) are coordinates
        along ``chain`` instead, labelled by chain (e.g. ``w.ksd_weighted.sel(chain=2)``).
        The checks below add ``correction_warnings`` (the causes found, " | "-separated;
        empty if none), ``sampler_divergences`` (-1 when the input records none),
        ``missing_mass`` ("found", "not found", "not searched"), ``missing_mass_detail``,
        ``missing_mass_n_log_density``, ``ksd_far_threshold`` and ``ksd_far_above_floor``
        (with ``per_chain=True``: the largest threshold, and 1 if any chain is far). Per
        parameter, aligned with ``parameters`` (the weighted draws normalised over all
        draws): ``spread_variance_ratio`` and its ``_z`` (the weighted variance over the
        one the target's curvature implies, 1 for draws of the target, and its distance
        from 1 in standard errors), ``spread_variance_ratio_draws`` and its ``_z`` (the
        same for the draws unweighted), ``spread_moment`` and ``spread_moment_z`` (the
        weighted Stein spread moment), and the names in ``spread_under_dispersed`` (the
        draws are narrower than the target there, weighted or not) and ``spread_lost``
        (narrower only once weighted).

    Warns
    -----
    CorrectionWarning (a UserWarning)
        The weights cannot be trusted: the trace's ``sample_stats`` record divergent
        transitions, the missing-mass search found mass the chains never visited, the
        weighted KSD stays far above its floor, or the draws are narrower than the
        target in some parameter, before and after weighting (weights cannot add spread
        the draws lack: the message names :func:`stein_variational`, which moves the
        draws). The message names the cause and the parameters.

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

    What weights cannot do: they only redistribute mass among the draws. A region the
    sampler never visited gets no weight, so where the chains missed mass (a funnel
    behind divergences, a mode never found) the weighted estimate can move further from
    the truth while the weighted KSD falls below its floor. Centred eight schools (4 x
    1000 NUTS draws with divergences; benchmarks/bench_corrections.py): weighted P(tau < 1) 0.008 against 0.051 unweighted and 0.201 in a long non-centred run, weighted mean tau 4.96 (unweighted 4.11, truth 3.59), Kish ESS 2886 of 4000, weighted KSD 0.095 below its i.i.d. floor 0.135: the weights moved away from the truth while their own KSD said the fit improved.
    Hence the checks and their warnings (see ``mode_search``).

    Nor can weights add spread the draws lack. For each parameter k the target's
    curvature implies a variance T_k = (M^-1 C)_kk, with C the draws' covariance and
    M = -mean_i (x_i - xbar)(s_i - sbar)^T the Stein matrix (the identity for draws of
    p; for Gaussian draws M = C E[-grad^2 log p], so M^-1 C is the covariance a Gaussian
    of the target's average curvature has, and T_k the target's variance when the target
    is Gaussian). The weighted variance over T_k is 1 for draws of p; the warning fires
    where it is at most 0.75 and 4 standard errors (influence functions, ArviZ's MCSE)
    below 1, both weighted and unweighted. Measured (benchmarks/results/
    corrections_limits.md): no warning in 1138 runs valid by construction (exact,
    autocorrelated and heavy-tailed draws, 106 runs of healthy NUTS, unadjusted Langevin
    and over-dispersed draws that the weights fix), a warning in all 448 runs on draws
    shrunk 0.8 towards their mean in d = 10 and 23, exact mean-field Gaussian
    approximations and mean-field ADVI. The diagonal Stein spread moment
    -sum_i w_i (x_ik - xbar_k) s_ik alone misses mean-field ADVI: at its optimum it is
    exactly 1.

    "Far above the floor": for N exact independent draws of p the squared KSD has mean
    floor^2 = mean_i k_p(x_i, x_i) / N and a variance that follows from E k_p(x, y)^2
    and Var k_p(x, x) (estimated at the draws, the off-diagonal moment from 256 evenly
    spaced rows of K_p); by Cantelli's inequality it exceeds floor^2 + 9.95 sd with
    probability at most 1 % whatever the null's shape. Optimal weights never do worse
    than uniform ones, so a weighted KSD above that level says that no reweighting of
    these draws looks like a sample of p. The level is computed at the draws, as the
    floor: it checks the weights, not the draws (use :func:`steindiag.ksd_test` for
    those).

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

    Blocks: with B strided blocks of draws, w_b the exact optimum on block b (zero
    elsewhere), the combination a on the B-simplex minimises a^T M a with
    M_bc = w_b^T K_p w_c (a small exact QP), and Frank-Wolfe starts from sum_b a_b w_b
    with g = K_p w known exactly. Block optima are sparse (about 60 % of a block at
    d = 3), so the B products cost about 0.6 N^2 kernel evaluations. Measured at
    d = 3 (unadjusted Langevin): N = 10^4 in 6 s instead of 38 s exactly, KSD 1.3e-3
    against the optimum's 0.9e-3 (the i.i.d. floor is 1.7e-2), and the weighted
    variance 0.9996 against 0.9997 (uniform: 1.34; target: 1).

    Frank-Wolfe: each iteration moves mass from the support point with the largest
    gradient to the point of largest second-order gain (SMO pair selection) with an
    exact line search, keeping g = K_p w up to date with two kernel rows: 2 N kernel
    evaluations and O(N) memory per iteration.

    Memory: ``"frank-wolfe"`` O(N d); ``"active-set"`` 8 N r (low-rank factor of rank
    r) or O(N d) + 8 k^2 (k the support size, at most N); ``"blocks"`` O(N d) +
    8 N B (B = N / 2500 blocks) + 8 k^2 for a block's support k <= 2500;
    ``"dense"`` about 32 N^2 bytes.

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
    tol = _weights_iv(method, per_chain, tol, max_iter, memory_limit, progress, log_density)
    check_mode_search(mode_search)
    rng = check_rng(rng)
    check_preconditioner(preconditioner)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        filter_vars=filter_vars, labeller=labeller,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    d = pending.draws.shape[2]
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    solutions, methods, points = optimal_weights(
        prepared, pre, kernel, per_chain=per_chain, method=method, tol=tol, max_iter=max_iter,
        memory_limit=memory_limit, progress=progress)
    checks = check_correction(
        pending=pending, prepared=prepared, kernel=kernel, preconditioner=pre,
        mode_search=mode_search, rng=rng,
        ksd_checks=[(p, float(np.sqrt(max(s.ksd2, 0.0))), "weighted")
                    for p, s in zip(points, solutions)],
        spread_weights=np.stack([s.weights for s in solutions]).reshape(
            prepared.draws.shape[:2]))
    checks.warn("stein_weights")
    return weights_dataarray(solutions, methods, prepared, pre, kernel, per_chain=per_chain,
                             tol=tol, checks=checks)


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


@fill_doc
def weighted_summary(data, weights, *, group="posterior", var_names=None, coords=None,
                     filter_vars=None, labeller=None,
                     sample_dims=None, quantiles=None, ci_prob=None, ci_kind=None):
    """Weighted mean, sd, credible interval and MCSE of every variable, like ``arviz.summary``.

    Parameters
    ----------
    data : array_like, xarray.DataTree, arviz.InferenceData, xarray.Dataset or numpyro MCMC
        The trace: its ``group`` is summarised in its own (constrained) space, every
        variable with both sample dims (deterministics included); a run numpyro ``MCMC``
        is read as that trace of its samples. An array of shape (chain, draw, d) or
        (draw, d) is summarised column by column (``x[k]``).
    weights : xarray.DataArray or array_like
        Non-negative weights of the draws with dims / shape (chain, draw), e.g. the
        output of :func:`stein_weights`; normalised here to sum to 1 over all draws
        (per-chain weights then count every chain equally).
    group : str, default "posterior"
    var_names : str or list of str, optional
        The variables to summarise (default all); as in ArviZ, ``~name`` excludes one.
    filter_vars : {None, "like", "regex"}, default None
        As in ArviZ (and :func:`steindiag.ksd`): ``var_names`` as names, substrings or
        regular expressions.
    coords : dict, optional
        Passed to ``Dataset.sel`` before summarising.
    {labeller}
    sample_dims : sequence of str, optional
        For a trace, its (chain, draw) dims (default ("chain", "draw")); for an array,
        the meaning of its leading axes, as in :func:`stein_weights`.
    quantiles : sequence of float, optional
        Probabilities of extra weighted quantiles (columns ``q5%``, ...); none by default.
    ci_prob : float, optional
        Probability of the credible interval; default ArviZ's, read at run time
        (``arviz.rcParams["stats.ci_prob"]``: 0.89 in ArviZ 1.x, 0.94 in ArviZ 0.x).
    ci_kind : {"hdi", "eti"}, optional
        Kind of interval; default ArviZ's (``rcParams["stats.ci_kind"]``, "eti", in
        ArviZ 1.x; the HDI in ArviZ 0.x).

    Returns
    -------
    pandas.DataFrame
        One row per scalar element, labelled like ``arviz.summary`` (``mu``,
        ``theta[0]``, ``Sigma[0, 1]``, or coordinate values). The columns of
        ``arviz.summary(kind="stats")`` with their weighted meaning and ArviZ's names:
        ``mean``, ``sd``, the interval (ArviZ 1.x: ``eti89_lb``, ``eti89_ub``; ArviZ
        0.x: ``hdi_3%``, ``hdi_97%``), then ``mcse_mean``, any ``quantiles``, and
        ``ess_kish``, the Kish effective sample size of the weights (the same for every
        row). ArviZ's ``ess_bulk``, ``ess_tail``, ``r_hat`` and ``mcse_sd`` have no
        weighted counterpart and are left out. ``attrs`` holds ``kish_ess``,
        ``n_draws``, ``ci_prob``, ``ci_kind`` and the checks (``correction_warnings``,
        ``sampler_divergences``).

    Warns
    -----
    CorrectionWarning (a UserWarning)
        The weighted summary cannot be trusted: the trace's ``sample_stats`` record
        divergent transitions, or the weights (from :func:`stein_weights`) record
        unvisited mass, a weighted KSD far above its floor, or weighted draws narrower
        than the target (``spread_under_dispersed``: weights cannot add spread the draws
        lack; the message names :func:`stein_variational`). The message names the cause.

    Notes
    -----
    With weights w normalised to sum 1: mean m = sum_i w_i x_i; sd = sqrt(sum_i w_i
    (x_i - m)^2 / (1 - sum_i w_i^2)) (unbiased for reliability weights; the usual
    sample sd when w is uniform); the p-quantile is the smallest draw x with
    sum_(x_i <= x) w_i >= p (inverse of the weighted empirical CDF, numpy's
    ``method="inverted_cdf"``); the equal-tailed interval is made of the quantiles
    (1 - ci_prob) / 2 and (1 + ci_prob) / 2; the HDI is the shortest interval between
    sorted draws x_(i) <= x_(j) whose draws carry more than ci_prob of the weight
    (ArviZ's rule, floor(ci_prob N) + 1 draws, for equal weights). ``mcse_mean`` = sqrt(sum_i w_i^2
    (x_i - m)^2), the standard error of a self-normalised weighted mean of independent
    draws (sd / sqrt(N) up to the factor sqrt((N - 1) / N) for equal weights); it
    ignores the draws' autocorrelation, which ArviZ's ``mcse_mean`` accounts for, and
    the weights' dependence on the draws. Kish ESS = 1 / sum_i w_i^2 (= N for uniform
    weights). Memory: one (N, number of scalar elements) float64 array.

    Weights redistribute mass among the draws; they cannot restore mass the sampler
    never visited (see :func:`stein_weights`, Notes).

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
    >>> list(table.columns[:2]), list(table.columns[-2:])   # the interval's names: ArviZ's
    (['mean', 'sd'], ['mcse_mean', 'ess_kish'])
    """
    probabilities = None if quantiles is None else _summary_iv(quantiles)
    ci_prob, ci_kind, interval_names = interval_defaults(ci_prob, ci_kind)
    columns = read_columns(data, group=group, var_names=var_names, coords=coords,
                           filter_vars=filter_vars, sample_dims=sample_dims,
                           labeller=labeller)
    n_chain, n_draw, n_col = columns.values.shape
    w = read_weights(weights, (n_chain, n_draw), columns.chain, columns.draw).reshape(-1)
    summary = weighted_statistics(columns.values.reshape(-1, n_col), w, ci_prob=ci_prob,
                                  ci_kind=ci_kind, probabilities=probabilities)
    reasons = summary_reasons(columns.sampler_warnings(), getattr(weights, "attrs", {}))
    if reasons:
        warn_user(summary_message(reasons, getattr(weights, "attrs", {})), CorrectionWarning)
    return summary_frame(summary, columns.labels, interval_names, probabilities,
                         n_draws=n_chain * n_draw, ci_prob=ci_prob, ci_kind=ci_kind,
                         reasons=reasons)
