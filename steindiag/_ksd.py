"""Public KSD functions: ``ksd`` (values) and ``ksd_path`` (running curves).

Data flow: input (arrays | DataArray | InferenceData | DataTree | Dataset) ->
``steindiag.inputs`` (every argument checked, draws read) -> one preconditioner fixed
from the pooled draws -> scores -> ``SteinInput`` (draws, scores as (chain, draw, d)
in the unconstrained space) -> ``engine.local.stein_row_sums`` (one O(N^2 d) pass) ->
``stats.ksd`` (V- and U-statistics, i.i.d. floor, path) ->
labelled ``xarray.Dataset``.
"""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag.engine.local import METHODS, stein_row_sums
from steindiag.engine.progress import check_progress
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag._validate import check_method
from steindiag.engine import resolve_backend
from steindiag.inputs import read_input
from steindiag.kernels import make_kernel
from steindiag.stats.ksd import cumulative_sums, ksd2_u, ksd_iid, ksd_v, path_points
from steindiag._nystrom import check_estimator, nystrom_sums

__all__ = ["ksd", "ksd_path"]


def _compute(data, model, *, score, batched, kernel, c, beta, preconditioner, group,
             var_names, coords, sample_dims, method, progress, space=None, client=None,
             estimator="exact", n_landmarks=None, rng=None, path=True, compile_mode=None,
             log_density=None):
    kernel = make_kernel(kernel, c, beta)
    rng = check_estimator(estimator, n_landmarks, rng)
    check_method(method, {"auto", *METHODS})
    check_progress(progress)
    check_preconditioner(preconditioner)
    backend = resolve_backend(client)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    d = pending.draws.shape[2]
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    attrs = kernel_attrs(prepared, pre, kernel)
    if estimator == "nystrom":
        sums, nystrom_attrs = nystrom_sums(prepared, pre, kernel, n_landmarks, rng, path, backend)
        return prepared, sums, {**attrs, **nystrom_attrs}
    sums = stein_row_sums(
        prepared.draws, prepared.scores, kernel=kernel, preconditioner=pre, method=method,
        progress=progress, backend=backend,
    )
    return prepared, cumulative_sums(sums), {**attrs, "estimator": "exact"}


def kernel_attrs(prepared, pre, kernel):
    """Attributes that reproduce a result: kernel, parameters, preconditioner, sizes, source.

    ``kernel`` is the kernel's label (accepted back as ``kernel=``); the IMQ adds ``c`` and
    ``beta``.
    """
    n_chain, n_draw, d = prepared.draws.shape
    return {
        **kernel.attrs(),
        "stein_operator": "Langevin",
        **pre.attrs(),
        "n_chain": n_chain,
        "n_draw": n_draw,
        "n_parameter": d,
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }


_COMMON_PARAMETERS = """\
    data : array_like, xarray or ArviZ container, numpyro MCMC or pytree of positions
        Draws. An array of shape (chain, draw, d), or (draw, d) for one chain (other
        layouts with ``sample_dims``); a DataArray of one variable with the sample dims
        and any parameter dims (e.g. (chain, draw, school)); or a trace
        (``arviz.InferenceData``, ``xarray.DataTree``: ``pm.sample`` output; or its
        posterior ``xarray.Dataset``). Parameters are labelled as ArviZ labels them:
        ``theta[a]`` by coordinate value where the dim has a coordinate, ``theta[0]``
        by position otherwise, ``x[0]``, ``x[1]``, ... for arrays. Samplers' own
        objects too (see the user guide's recipes): a numpyro ``MCMC`` after
        ``.run(...)`` (its latent sites in numpyro's unconstrained space, scores from its
        potential energy: no ``score`` needed); positions as a JAX pytree (a dict of
        (chain, draw, ...) arrays, or a blackjax state history with
        ``sample_dims=("draw", "chain")``) with a JAX ``log_density``; an
        ``emcee.EnsembleSampler`` after ``run_mcmc`` (walkers as chains, steps as draws;
        log p is its ``log_prob_fn``, which checks ``score`` at a few draws, or gives the
        score by central differences when none is passed); a pystan 3 fit with its
        ``stan.build`` object as ``model``; a CmdStanPy fit with a
        ``bridgestan.StanModel`` as ``model`` (Stan's unconstrained space, scores and
        divergences from the model and fit).
    model : pymc.Model, numpyro MCMC or Stan model, optional
        The model that produced the trace: scores are grad log p in its unconstrained
        space (value variables, ``model.logp(jacobian=True)``). Not needed for a trace
        that stores them (:func:`steindiag.add_scores`, nutpie's ``store_gradient``).
        A numpyro ``MCMC`` with its trace (``az.from_numpyro(mcmc)``): the trace's
        latent sites, mapped to numpyro's unconstrained space. For a Stan fit, the Stan
        model (pystan's ``stan.build(...)`` result, or a ``bridgestan.StanModel`` for a
        CmdStanPy fit).
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: how PyTensor compiles the model's graphs (the score, and the
        map of stored constrained values to the unconstrained space): a mode name,
        e.g. ``"CVM"`` (the C backend), ``"NUMBA"``, ``"JAX"``, ``"FAST_RUN"``,
        ``"FAST_COMPILE"``, or a ``Mode`` object. Default: ``"CVM"`` when a C++
        compiler is available, else ``"NUMBA"``. The numbers do not depend on it (to
        rounding); the compile and run times do. An error without ``model``.
    score : array_like, xarray.DataArray or callable, optional
        grad log p at each draw instead of ``model``: an array of the same shape as the
        draws (for a DataArray ``data``: its shape, or a DataArray with its dims), or a
        callable on the flat (unconstrained) parameter vector.
    batched : bool, default True
        Whether a ``score`` callable takes an (n, d) batch (True) or one (d,) draw.
    kernel : {"imq", "gaussian", "matern32", "matern52"} or kernel object, default "imq"
        Base kernel k(x, y) = f(t), t = (x-y)^T A (x-y), A = Lambda^-1:
        ``"imq"`` (c^2 + t)^beta; ``"gaussian"`` exp(-t/2); ``"matern32"``
        (1 + sqrt(3t)) exp(-sqrt(3t)); ``"matern52"`` (1 + sqrt(5t) + 5t/3)
        exp(-sqrt(5t)); or an object of :mod:`steindiag.kernels`. The length scale of
        every kernel is the preconditioner's. Only the IMQ (beta in (-1, 0)) detects
        non-convergence in every dimension: with the Gaussian or a Matern kernel, KSD
        can go to 0 for draws that drift away in d >= 3 (Gorham & Mackey 2017; see the
        Background page).
    c : float, optional
        IMQ offset, c > 0 (default 1.0). Only with ``kernel="imq"``.
    beta : float, optional
        IMQ exponent, -1 < beta < 0 (default -0.5). Only with ``kernel="imq"``.
    preconditioner : str or array_like, default "standardize"
        ``"standardize"`` (robust per-coordinate scale; invariant to rescaling a
        parameter), ``"identity"``, ``"med"``, ``"sclmed"``, ``"smpcov"``, or Lambda as
        an array (0-d scalar, 1-D diagonal, 2-D SPD). Fixed once from the pooled draws.
    group : str, default "posterior"
        Group of a trace holding the draws.
    var_names, coords : optional
        Subset of the trace's variables (ArviZ conventions).
    sample_dims : sequence of str, optional
        For a trace, the names of the chain and draw dimensions (default ("chain",
        "draw")). For an array, the meaning of its leading axes: ("chain", "draw"),
        ("draw", "chain") (emcee's ``get_chain()``) or ("draw",) (one chain); the axis
        after them, if any, holds the parameters, so a 2-D array with
        ``sample_dims=("chain", "draw")`` is (chain, draw) of a one-parameter target.
        Without it an array is (chain, draw, d) or (draw, d); a 2-D array with no more
        rows than columns is refused and a 3-D one with more chains than draws warns
        (both are often another layout): pass ``sample_dims`` to settle it.
    method : {"auto", "fused", "gemm"}, default "auto"
        Engine path; all give the same numbers (to rounding).
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        pass is expected to take more than a few seconds. Ctrl-C stops the pass between
        chunks of about 0.25 s; no thread is left running.
    space : {"unconstrained", "constrained"}, optional
        With ``score`` and no ``model``: the space the draws are in, in which ``score``
        is grad log p. ``"unconstrained"``: coordinates on all of R^d (a sampler's
        unconstrained space, log-Jacobian included in log p); ``"constrained"``: the
        model's own variables (the Stein identity then needs a density that is smooth
        and positive on all of R^d; a bounded variable biases KSD, see the Background
        page). Recorded in ``attrs["space"]`` ("as given" when None). Required for a
        trace written by a library that transforms its variables (ArviZ's
        ``inference_library`` attribute: numpyro, Stan, PyMC without ``model``, ...), whose
        stored values are constrained while the usual scores are not.
    client : distributed.Client, optional
        Run the O(N^2 d) pass on the workers of a dask.distributed cluster (optional
        dependency: ``pip install 'steindiag[dask]'``); None (default) runs it on this
        machine's cores. The prepared draws and scores are sent once to every worker and
        blocks of rows run there as single-threaded tasks with the same kernels, so the
        numbers are the same (to rounding); only O(N) sums come back. Start workers with
        one thread each, as many as cores. See the user guide, "Beyond one machine".
    estimator : {"exact", "nystrom"}, default "exact"
        ``"exact"``: every pair of draws, O(N^2 d) time. ``"nystrom"``: the Stein
        features projected onto the base kernel at m landmarks (m d functions), time
        linear in N, with k_p(x_i, x_i) and the pairs of draws of one chain at most L
        apart kept exact (L about twice the autocorrelation time, at most 50; ``attrs
        ["n_exact_lags"]``); for 10^5 draws and more (measured error and cost: user
        guide, "Many draws: the Nyström estimator"; the maths: Background page,
        "Nyström KSD"). It can miss a small part of a discrepancy that the landmarks
        do not resolve. ``ksd_test`` projects onto the Stein kernel at the landmarks
        (m functions, the short features its bootstrap needs) and keeps only the
        diagonal exact: its statistic can be lower than N times the KSD^2 of ``ksd``.
    n_landmarks : int, optional
        Landmarks m for ``estimator="nystrom"`` (1 <= m <= N): default 4 sqrt(N) clipped
        to [200, 500] (and to N). More landmarks: closer to the exact value, cost
        growing as N m d (and N m^2 for ``ksd_path`` and ``ksd_test``).
    rng : int, numpy.random.Generator or None
        Source of the landmarks (``numpy.random.default_rng(rng)``), drawn uniformly
        without replacement from the pooled draws (``attrs["landmark_index"]`` records
        them), and of the windows of draws sampled for the exact pairs' projected
        values when N is large. Unused by ``estimator="exact"``."""


def ksd(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
        preconditioner="standardize", group="posterior", var_names=None, coords=None,
        sample_dims=None, method="auto", progress=None, space=None, client=None,
        estimator="exact", n_landmarks=None, rng=None, compile_mode=None, log_density=None):
    """Kernel Stein discrepancy of each chain and of all chains pooled.

    Parameters
    ----------
{params}
{log_density}

    Returns
    -------
    xarray.Dataset
        ``ksd`` (chain): sqrt of the V-statistic of each chain alone;
        ``ksd_pooled`` (): sqrt of the V-statistic of all draws together;
        ``ksd_iid`` (chain), ``ksd_iid_pooled`` (): the floor an exact i.i.d. sample
        of the same size reaches, sqrt(mean_i k_p(x_i, x_i) / N);
        ``ksd2_u`` (chain), ``ksd2_u_pooled`` (): the unbiased U-statistic of KSD^2
        (may be negative). ``attrs`` record the kernel (``kernel``, its formula, and
        for the IMQ ``c`` and ``beta``), the preconditioner and the Lambda or scales
        used, the sizes, and ``estimator``; with ``estimator="nystrom"`` also
        ``n_landmarks``, ``nystrom_rank`` (eigenvalues of K_mm kept), ``landmark_rule``,
        ``landmark_index`` (chain * n_draw + draw of each landmark),
        ``eigenvalue_cutoff``, ``n_exact_lags`` (L), ``exact_lag_rule``,
        ``nystrom_features``, and ``near_pair_draws_sampled`` with its rule (the
        draws on which the projected values of the exact pairs were computed).

    Notes
    -----
    With u = x - y, t = u^T A u, s = grad log p and the base kernel k(x, y) = f(t),

        k_p(x,y) = -4 f''(t) u^T A^2 u - 2 f'(t) [tr(A) + u^T A (s(x) - s(y))]
                   + f(t) s(x).s(y);

    for the IMQ, f(t) = q^beta with q = c^2 + t:

        k_p(x,y) = -4 beta (beta-1) q^(beta-2) u^T A^2 u
                   - 2 beta q^(beta-1) [tr(A) + u^T A (s(x) - s(y))] + q^beta s(x).s(y),

    KSD^2_V = N^-2 sum_ij k_p(x_i, x_j) and KSD^2_U = [N(N-1)]^-1 sum_(i != j) k_p(x_i, x_j).
    For exact draws of p, E[KSD^2_U] = 0; for N(0, I_d), A = I and the default IMQ (or the
    Gaussian), E[KSD^2_V] = 2d/N.
    Costs O(N^2 d) time and O(N d) memory: the N x N kernel matrix is not stored.

    References
    ----------
    Gorham & Mackey (2017), Measuring sample quality with kernels, ICML.
    Liu, Lee & Jordan (2016), A kernelized Stein discrepancy for goodness-of-fit tests, ICML.
    Riabiz et al. (2022), Optimal thinning of MCMC output, JRSS-B.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((4, 500, 2))      # 4 chains of exact N(0, I) draws
    >>> res = steindiag.ksd(x, score=-x)            # grad log N(0, I) is -x
    >>> res["ksd"].sizes["chain"], bool(res["ksd_pooled"] > 0)
    (4, True)
    """
    prepared, sums, attrs = _compute(
        data, model, score=score, batched=batched, kernel=kernel, c=c, beta=beta,
        preconditioner=preconditioner, group=group, var_names=var_names, coords=coords,
        sample_dims=sample_dims, method=method, progress=progress, space=space,
        client=client, estimator=estimator, n_landmarks=n_landmarks, rng=rng, path=False,
        compile_mode=compile_mode, log_density=log_density,
    )
    n_chain, n_draw = prepared.draws.shape[:2]
    n_total = n_chain * n_draw
    per_chain, pooled, diag_chain, diag_pooled = sums
    v_chain, v_pooled = per_chain[:, -1], pooled[-1]
    d_chain, d_pooled = diag_chain[:, -1], diag_pooled[-1]
    chain = xr.Variable(("chain",), prepared.chain)
    data_vars = {
        "ksd": (("chain",), ksd_v(v_chain, n_draw),
                {"long_name": "KSD of each chain (sqrt of V-statistic)"}),
        "ksd_pooled": ((), ksd_v(v_pooled, n_total),
                       {"long_name": "KSD of all chains pooled (sqrt of V-statistic)"}),
        "ksd_iid": (("chain",), ksd_iid(d_chain, n_draw),
                    {"long_name": "i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N), each chain"}),
        "ksd_iid_pooled": ((), ksd_iid(d_pooled, n_total),
                           {"long_name": "i.i.d. floor, pooled"}),
        "ksd2_u": (("chain",), ksd2_u(v_chain, d_chain, n_draw),
                   {"long_name": "unbiased U-statistic of KSD^2, each chain (may be < 0)"}),
        "ksd2_u_pooled": ((), ksd2_u(v_pooled, d_pooled, n_total),
                          {"long_name": "unbiased U-statistic of KSD^2, pooled (may be < 0)"}),
    }
    return xr.Dataset(data_vars, coords={"chain": chain}, attrs=netcdf_attrs(attrs))


# The log_density entry of the functions whose other use of log p is none: it is only a
# score source there (diagnose, stein_weights and stein_thin describe it themselves).
_JAX_LOG_DENSITY = """\
    log_density : callable, optional
        With no ``score``: a JAX-traceable log p (up to a constant) of one position,
        the flat (d,) vector for an array, a pytree like the positions for a pytree;
        the score is ``jax.grad`` of it (``jax.jit(jax.vmap(...))``, float64, on chunks
        of 1024 draws). An error if JAX cannot trace it."""


def _check_n_points(n_points):
    if n_points is None:
        return
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)):
        raise TypeError(f"n_points must be None or an integer; got {type(n_points).__name__}.")
    if n_points < 2:
        raise ValueError(f"n_points must be None or an integer >= 2; got {n_points}.")


def ksd_path(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
             preconditioner="standardize", group="posterior", var_names=None, coords=None,
             sample_dims=None, method="auto", n_points=None, progress=None, space=None,
             client=None, estimator="exact", n_landmarks=None, rng=None, compile_mode=None,
             log_density=None):
    """Running KSD as every chain grows, per chain and pooled, from one pass.

    Parameters
    ----------
{params}
{log_density}
    n_points : int, optional
        Report about this many log-spaced values of n (always including 1 and the
        number of draws) instead of every n.

    Returns
    -------
    xarray.Dataset
        Coordinate ``n`` is the number of draws per chain used.
        ``ksd`` (chain, n): KSD of the first n draws of each chain;
        ``ksd_pooled`` (n): KSD of the first n draws of every chain together;
        ``ksd_iid`` (chain, n) and ``ksd_iid_pooled`` (n): the i.i.d. floors
        sqrt(mean_i k_p(x_i, x_i) / N) of the same prefixes. ``attrs`` as ``ksd``.

    Notes
    -----
    With row sums r_i = sum over earlier draws j of k_p(x_i, x_j), the running
    numerator is S_n = S_(n-1) + 2 r_n + k_p(x_n, x_n) and KSD_V(n) = sqrt(S_n) / n
    (see the Background page of the docs), so the whole curve costs the same O(N^2 d) as one value.
    The preconditioner is fixed from all pooled draws and used for every prefix.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(1).standard_normal((2, 1000, 3))
    >>> path = steindiag.ksd_path(x, score=-x, n_points=20)
    >>> path["ksd"].dims
    ('chain', 'n')
    """
    _check_n_points(n_points)
    prepared, sums, attrs = _compute(
        data, model, score=score, batched=batched, kernel=kernel, c=c, beta=beta,
        preconditioner=preconditioner, group=group, var_names=var_names, coords=coords,
        sample_dims=sample_dims, method=method, progress=progress, space=space,
        client=client, estimator=estimator, n_landmarks=n_landmarks, rng=rng,
        compile_mode=compile_mode, log_density=log_density,
    )
    n_chain, n_draw = prepared.draws.shape[:2]
    points = path_points(n_draw, n_points)
    index = points - 1
    per_chain, pooled, diag_chain, diag_pooled = sums
    data_vars = {
        "ksd": (("chain", "n"), ksd_v(per_chain[:, index], points),
                {"long_name": "running KSD of each chain"}),
        "ksd_pooled": (("n",), ksd_v(pooled[index], n_chain * points),
                       {"long_name": "running KSD of all chains pooled"}),
        "ksd_iid": (("chain", "n"), ksd_iid(diag_chain[:, index], points),
                    {"long_name": "running i.i.d. floor of each chain"}),
        "ksd_iid_pooled": (("n",), ksd_iid(diag_pooled[index], n_chain * points),
                           {"long_name": "running i.i.d. floor, pooled"}),
    }
    coords = {
        "chain": ("chain", prepared.chain),
        "n": ("n", points, {"long_name": "draws per chain"}),
    }
    return xr.Dataset(data_vars, coords=coords, attrs=netcdf_attrs(attrs))


ksd.__doc__ = ksd.__doc__.format(params=_COMMON_PARAMETERS, log_density=_JAX_LOG_DENSITY)
ksd_path.__doc__ = ksd_path.__doc__.format(params=_COMMON_PARAMETERS,
                                           log_density=_JAX_LOG_DENSITY)
