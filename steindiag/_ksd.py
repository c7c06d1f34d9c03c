"""Public KSD functions: ``ksd`` (values) and ``ksd_path`` (running curves).

Data flow: input (arrays | DataArray | InferenceData | DataTree | Dataset | a sampler's
object) -> ``inputs.read_input`` (every argument checked, draws read once) -> one
preconditioner fixed from the pooled draws -> scores (``SteinInput``) ->
``methods.ksd.stein_sums`` (one O(N^2 d) pass, or the Nyström estimator) ->
``outputs.ksd`` (labelled ``xarray.Dataset``).
"""

from steindiag._docs import fill_doc
from steindiag._validate import check_int, check_method
from steindiag.engine.dask import resolve_backend
from steindiag.engine.local import METHODS
from steindiag.engine.progress import check_progress
from steindiag.inputs import read_input
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.methods.ksd import ksd_values, stein_sums
from steindiag.methods.nystrom import check_estimator
from steindiag.outputs.ksd import kernel_attrs, ksd_dataset, ksd_path_dataset

__all__ = ["ksd", "ksd_path"]


def _ksd_pass(data, model, inputs, *, kernel, c, beta, preconditioner, method, progress,
              client, estimator, n_landmarks, rng, path):
    """validate -> read once -> the engine's sums: (prepared input, sums, attrs)."""
    kernel = make_kernel(kernel, c, beta)
    rng = check_estimator(estimator, n_landmarks, rng)
    check_method(method, {"auto", *METHODS})
    check_progress(progress)
    check_preconditioner(preconditioner)
    backend = resolve_backend(client)
    pending = read_input(data, model, **inputs)
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, pending.draws.shape[2]),
                              pending.parameter)
    prepared = pending.with_scores()
    sums, estimator_attrs = stein_sums(prepared, pre, kernel, estimator=estimator,
                                       n_landmarks=n_landmarks, rng=rng, path=path,
                                       method=method, progress=progress, backend=backend)
    return prepared, sums, {**kernel_attrs(prepared, pre, kernel), **estimator_attrs}


@fill_doc
def ksd(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
        preconditioner="standardize", group="posterior", var_names=None, coords=None,
        filter_vars=None, labeller=None,
        sample_dims=None, method="auto", progress=None, space=None, client=None,
        estimator="exact", n_landmarks=None, rng=None, compile_mode=None, log_density=None):
    """Kernel Stein discrepancy of each chain and of all chains pooled.

    Parameters
    ----------
    {input_entries}
    {kernel_entries}
    {trace_entries}
    {method}
    {progress}
    {space}
    {client}
    {estimator}
    {n_landmarks}
    {rng}
    {log_density_jax}

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
    prepared, sums, attrs = _ksd_pass(
        data, model, dict(score=score, batched=batched, group=group, var_names=var_names,
                          filter_vars=filter_vars, coords=coords, sample_dims=sample_dims,
                          space=space, labeller=labeller,
                          compile_mode=compile_mode, log_density=log_density),
        kernel=kernel, c=c, beta=beta, preconditioner=preconditioner, method=method,
        progress=progress, client=client, estimator=estimator, n_landmarks=n_landmarks,
        rng=rng, path=False)
    return ksd_dataset(ksd_values(sums, prepared.draws.shape[1]), prepared.chain, attrs)


@fill_doc
def ksd_path(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
             preconditioner="standardize", group="posterior", var_names=None, coords=None,
             filter_vars=None, labeller=None,
             sample_dims=None, method="auto", n_points=None, progress=None, space=None,
             client=None, estimator="exact", n_landmarks=None, rng=None, compile_mode=None,
             log_density=None):
    """Running KSD as every chain grows, per chain and pooled, from one pass.

    Parameters
    ----------
    {input_entries}
    {kernel_entries}
    {trace_entries}
    {method}
    {progress}
    {space}
    {client}
    {estimator}
    {n_landmarks}
    {rng}
    {log_density_jax}
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
    check_int(n_points, "n_points", minimum=2, allow_none=True)
    prepared, sums, attrs = _ksd_pass(
        data, model, dict(score=score, batched=batched, group=group, var_names=var_names,
                          filter_vars=filter_vars, coords=coords, sample_dims=sample_dims,
                          space=space, labeller=labeller,
                          compile_mode=compile_mode, log_density=log_density),
        kernel=kernel, c=c, beta=beta, preconditioner=preconditioner, method=method,
        progress=progress, client=client, estimator=estimator, n_landmarks=n_landmarks,
        rng=rng, path=True)
    return ksd_path_dataset(sums, prepared.chain, prepared.draws.shape[1], n_points, attrs)
