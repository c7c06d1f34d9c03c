"""KSD-optimal weights for the draws (see the docs' background page) and weighted summaries.

Data flow: input -> ``steindiag.inputs.read_input`` (every argument checked, draws read)
-> one preconditioner from the pooled draws -> scores (``SteinInput``) -> ``KernelPoints`` (kernel coordinates) -> a QP solver
(``steindiag.methods.weights``: an exact active set, matrix-free pairwise Frank-Wolfe, or the optional dense interior point of
piqp) -> the same optimality certificate for all -> labelled ``xarray.DataArray``.
"""

import numbers
import warnings

import numpy as np
import xarray as xr

from steindiag.engine import products as _stein_products
from steindiag._attrs import netcdf_attrs
from steindiag._ksd import kernel_attrs
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag._corrections import (
    CorrectionWarning,
    check_correction,
    check_missing_mass_option,
)
from steindiag._validate import check_method, check_rng
from steindiag.inputs import as_trace, is_labelled, read_input
from steindiag.inputs._ecosystems import as_plain_sources
from steindiag.inputs._numpyro import as_numpyro_trace
from steindiag.kernels import make_kernel
from steindiag.methods.weights import (
    METHODS,
    SteinWeightsError,
    _SOLVERS,
    _relative,
    _solve,
    _solver_version,
    _choose_method,
)

__all__ = ["stein_weights", "weighted_summary", "SteinWeightsError", "CorrectionWarning"]

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
                  max_iter=None, memory_limit=None, progress=None, space=None,
                  log_density=None, missing_mass="auto", rng=None, compile_mode=None):
    """Weights on the draws that minimise the kernel Stein discrepancy.

    Parameters
    ----------
{params}
    method : {{"auto", "active-set", "blocks", "frank-wolfe", "dense"}}, default "auto"
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
{checks}

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
        (with ``per_chain=True``: the largest threshold, and 1 if any chain is far).

    Warns
    -----
    CorrectionWarning (a UserWarning)
        The weights cannot be trusted: the trace's ``sample_stats`` record divergent
        transitions, the missing-mass search found mass the chains never visited, or
        the weighted KSD stays far above its floor. The message names the cause.

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
    1000 NUTS draws with divergences; benchmarks/bench_corrections.py): {eight_schools}
    Hence the checks and their warnings (see ``missing_mass``).

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
    tol = _weights_iv(method, per_chain, tol, max_iter, memory_limit, progress)
    check_missing_mass_option(missing_mass)
    _check_log_density_callable(log_density)
    rng = check_rng(rng)
    check_preconditioner(preconditioner)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    data, model, score, log_density, batched = as_plain_sources(
        pending, data, model, score, log_density, batched)
    # A numpyro MCMC or a JAX log density: its trace, score and log p from here on.
    data, model, score, log_density, sample_dims = pending.resolve(
        data, model, score, log_density, sample_dims)
    n_chain, n_draw, d = pending.draws.shape
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    if per_chain:
        problems = [(prepared.draws[k], prepared.scores[k]) for k in range(n_chain)]
    else:
        problems = [(prepared.draws.reshape(-1, d), prepared.scores.reshape(-1, d))]
    chosen = _choose_method(method, d)
    solutions, methods, ksd_checks = [], [], []
    for draws, scores in problems:
        points = _stein_products.KernelPoints(draws, scores, pre, kernel)
        solution, used = _solve(points, chosen, method, tol, max_iter, memory_limit, progress)
        solution.ksd_iid = float(np.sqrt(points.diagonal.mean() / points.n))
        if not np.isfinite(solution.ksd2_uniform):
            solution.ksd2_uniform = float(points.matvec(np.full(points.n, 1.0 / points.n)).mean())
        solutions.append(solution)
        methods.append(used)
        ksd_checks.append((points, float(np.sqrt(max(solution.ksd2, 0.0))), "weighted"))
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
        "ksd_iid": [s.ksd_iid for s in solutions],
        "converged": [int(s.converged) for s in solutions],
        "iterations": [s.iterations for s in solutions],
        "solver_status": [s.status for s in solutions],
    }
    checks = check_correction(
        data=data, group=group, sample_dims=sample_dims, prepared=prepared, model=model,
        score=score, log_density=log_density, batched=batched, kernel=kernel,
        preconditioner=pre, missing_mass=missing_mass, rng=rng, compile_mode=compile_mode,
        ksd_checks=ksd_checks,
    )
    pooled = weights / weights.sum()
    attrs = {
        "long_name": "KSD-optimal weight of each draw",
        "method": "; ".join(used_methods),
        "solver": label,
        "normalised_over": "each chain" if per_chain else "all draws",
        "tol": tol,
        "kish_ess": float(1.0 / np.sum(pooled**2)),
        **kernel_attrs(prepared, pre, kernel),
        **checks.attrs(),
    }
    coords = {"chain": prepared.chain, "draw": prepared.draw}
    if per_chain:
        per_problem["kish_ess"] = [float(1.0 / np.sum(s.weights**2)) for s in solutions]
        del attrs["kish_ess"]
        for name, values in per_problem.items():
            coords[name] = ("chain", np.asarray(values))
    else:
        attrs.update({name: values[0] for name, values in per_problem.items()})
    checks.warn("stein_weights")
    return xr.DataArray(weights, dims=("chain", "draw"), coords=coords,
                        name="stein_weight", attrs=netcdf_attrs(attrs))


def _check_log_density_callable(log_density):
    if log_density is not None and not callable(log_density):
        raise TypeError(
            "log_density must be None or a callable on the flat parameter vector ((n, d) -> "
            f"(n,) if batched); got {type(log_density).__name__}."
        )


_CHECKS_PARAMETERS = """\
    log_density : callable, optional
        log p up to a constant on the flat parameter vector, (n, d) -> (n,) (or (d,) ->
        scalar if ``batched=False``), in the space of the scores; used only by the
        missing-mass search. Default: from ``model`` (a PyMC model or a numpyro
        ``MCMC``) when one is given. With no ``score``: a JAX-traceable log p of one
        position (the flat (d,) vector, or a pytree like the positions), whose
        ``jax.grad`` is the score.
    missing_mass : {"auto", True, False} or a missing-mass search result, default "auto"
        Whether to look for mass the chains never visited (a mode, a region behind
        divergences). ``"auto"``: search when log p can be evaluated at new points
        (``log_density=`` or a PyMC model) and the score too (a callable or a model);
        otherwise not, and the attrs say why. ``True``: search, or raise if it cannot
        run. ``False``: skip. A result of the search done already (an object with a
        boolean ``found`` and a ``summary``, as
        ``steindiag.methods.missing_mass.search_missing_mass`` returns) is used as it is.
        Cost: the search's log-density and score evaluations (reported in the attrs as
        ``missing_mass_n_log_density``); with a PyMC model each is one batched graph call.
    rng : numpy.random.Generator or int, optional
        Randomness of the missing-mass search (None: fresh entropy)."""

_EIGHT_SCHOOLS = (
    "weighted P(tau < 1) 0.008 against 0.051 unweighted and 0.201 in a long non-centred "
    "run, weighted mean tau 4.96 (unweighted 4.11, truth 3.59), Kish ESS 2886 of 4000, "
    "weighted KSD 0.095 below its i.i.d. floor 0.135: the weights moved away from the "
    "truth while their own KSD said the fit improved."
)

stein_weights.__doc__ = stein_weights.__doc__.format(
    params=_weights_doc_parameters(), checks=_CHECKS_PARAMETERS,
    eight_schools=_EIGHT_SCHOOLS,
)


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


def _interval_defaults(ci_prob, ci_kind):
    """ArviZ's default interval of ``arviz.summary`` (read at run time) and its column names.

    ArviZ 1.x: ``rcParams["stats.ci_kind"]`` ("eti") at ``rcParams["stats.ci_prob"]``
    (0.89), columns ``eti89_lb``, ``eti89_ub``. ArviZ 0.x: the HDI at
    ``rcParams["stats.ci_prob"]`` (0.94), columns ``hdi_3%``, ``hdi_97%``. Without ArviZ,
    the 1.x defaults.
    """
    try:
        import arviz

        rc = arviz.rcParams
        keys = set(rc.keys())
    except ImportError:
        rc, keys = {}, set()
    new_style = "stats.ci_kind" in keys or not keys
    if ci_kind is None:
        ci_kind = rc["stats.ci_kind"] if "stats.ci_kind" in keys else ("eti" if not keys else "hdi")
    if ci_kind not in ("hdi", "eti"):
        raise ValueError(f"ci_kind must be 'hdi' or 'eti'; got {ci_kind!r}.")
    if ci_prob is None:
        ci_prob = next((rc[key] for key in ("stats.ci_prob", "stats.hdi_prob") if key in keys),
                       0.89)
    if isinstance(ci_prob, bool) or not isinstance(ci_prob, numbers.Real) \
            or not 0 < ci_prob < 1:
        raise ValueError(f"ci_prob must be a number in (0, 1); got {ci_prob!r}.")
    ci_prob = float(ci_prob)
    if new_style:
        percent = int(ci_prob * 100)
        names = (f"{ci_kind}{percent}_lb", f"{ci_kind}{percent}_ub")
    else:
        alpha = 1.0 - ci_prob
        names = (f"{ci_kind}_{100 * alpha / 2:g}%", f"{ci_kind}_{100 * (1 - alpha / 2):g}%")
    return ci_prob, ci_kind, names


def _weighted_hdi(values, weights, prob):
    """Shortest interval [x_(i), x_(j)] of the weighted draws holding more than ``prob``, (2, m).

    j(i) is the first sorted draw with sum_(i <= k <= j) w_k > prob: for equal weights
    j = i + floor(prob N), ArviZ's rule for its HDI of unweighted draws.
    """
    n, m = values.shape
    out = np.empty((2, m))
    tiny = 1e-12
    for col in range(m):
        order = np.argsort(values[:, col], kind="stable")
        x = values[order, col]
        cum = np.cumsum(weights[order])
        cum = cum / cum[-1]
        before = np.concatenate([[0.0], cum[:-1]])
        last = np.searchsorted(cum, before + prob + tiny, side="right")
        valid = last < n
        if not valid.any():
            out[:, col] = x[0], x[-1]
            continue
        last = np.minimum(last, n - 1)
        width = np.where(valid, x[last] - x, np.inf)
        best = int(np.argmin(width))
        out[:, col] = x[best], x[last[best]]
    return out


def weighted_summary(data, weights, *, group="posterior", var_names=None, coords=None,
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
    coords : dict, optional
        Passed to ``Dataset.sel`` before summarising.
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
        unvisited mass or a weighted KSD far above its floor. The message names the
        cause.

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
    import pandas as pd

    probabilities = None if quantiles is None else _summary_iv(quantiles)
    ci_prob, ci_kind, interval_names = _interval_defaults(ci_prob, ci_kind)
    data = as_numpyro_trace(as_trace(data))   # a numpyro MCMC: its constrained draws
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
    if ci_kind == "hdi":
        interval = _weighted_hdi(flat, w, ci_prob)
    else:
        interval = _weighted_quantiles(flat, w, [(1 - ci_prob) / 2, (1 + ci_prob) / 2])
    table[interval_names[0]], table[interval_names[1]] = interval
    table["mcse_mean"] = np.sqrt((w * w) @ (centred * centred))
    if probabilities is not None:
        for p, row in zip(probabilities, _weighted_quantiles(flat, w, probabilities)):
            table[f"q{100 * p:g}%"] = row
    kish = 1.0 / sum_w2
    table["ess_kish"] = np.full(n_col, kish)
    frame = pd.DataFrame(table, index=labels)
    frame.attrs["kish_ess"] = kish
    frame.attrs["n_draws"] = n_chain * n_draw
    frame.attrs["ci_prob"] = ci_prob
    frame.attrs["ci_kind"] = ci_kind
    reasons = _summary_reasons(data, weights, group, sample_dims if is_labelled(data) else None,
                               chain_values, draw_values)
    frame.attrs["correction_warnings"] = " | ".join(reasons)
    if reasons:
        warnings.warn(
            "weighted_summary cannot be trusted here: " + "; ".join(reasons) + ". Weights "
            "only redistribute mass among the visited draws; they cannot put mass where "
            "the sampler never went.",
            CorrectionWarning,
            stacklevel=2,
        )
    return frame


def _summary_reasons(data, weights, group, sample_dims, chain_values, draw_values):
    """Causes not to trust a weighted summary: divergences, and what the weights recorded."""
    from steindiag.inputs import sampler_warnings

    reasons = []
    if sample_dims is not None:
        found = sampler_warnings(data, group=group, chain=chain_values, draw=draw_values,
                                 sample_dims=sample_dims)
        if found is not None and found.total > 0:
            reasons.append(
                f"the sampler reported {found.total} divergent transitions ({found.source}), "
                "so the chains missed part of the posterior"
            )
    recorded = getattr(weights, "attrs", {})
    if recorded.get("missing_mass") == "found":
        reasons.append("the weights record mass the chains never visited ("
                       f"{recorded.get('missing_mass_detail', '')})")
    if recorded.get("ksd_far_above_floor"):
        reasons.append(
            f"the weights' KSD {recorded.get('ksd_weighted', float('nan')):.3g} stays far above "
            f"its floor (threshold {recorded.get('ksd_far_threshold', float('nan')):.3g})"
        )
    return reasons
