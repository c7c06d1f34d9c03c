"""Public KSD functions: ``ksd`` (values) and ``ksd_path`` (running curves).

Data flow: input (arrays | InferenceData | DataTree | Dataset) -> ``SteinInput``
(draws, scores as (chain, draw, d) in the unconstrained space) -> one preconditioner
fixed from the pooled draws -> ``_engine.stein_row_sums`` (one O(N^2 d) pass) ->
labelled ``xarray.Dataset``.
"""

import numpy as np
import xarray as xr

from steindiag._engine import METHODS, stein_row_sums
from steindiag._preconditioner import make_preconditioner
from steindiag._types import SteinInput
from steindiag._validate import (
    as_draws_array,
    check_finite,
    check_kernel_args,
    check_method,
    evaluate_score_callable,
)

__all__ = ["ksd", "ksd_path", "prepare_input"]

_KERNEL_DOC = "IMQ Langevin Stein kernel, k(x, y) = (c^2 + (x-y)^T A (x-y))^beta, A = Lambda^-1"


def _is_labelled(data):
    """True for xarray / ArviZ containers, which the trace layer handles."""
    module = type(data).__module__ or ""
    return module.startswith(("xarray", "arviz", "datatree"))


def _prepare_arrays(data, score, batched):
    draws = as_draws_array(data, "data")
    n_chain, n_draw, d = draws.shape
    if score is None:
        raise TypeError(
            "score is required when data is an array: pass an array of grad log p at each "
            "draw (same shape as data) or a callable mapping (n, d) draws to (n, d) scores."
        )
    check_finite(draws, "data")
    if callable(score):
        scores = evaluate_score_callable(score, draws, batched=batched)
        source = "callable"
    else:
        scores = as_draws_array(score, "score")
        if scores.shape != draws.shape:
            raise ValueError(
                f"score must have the same shape as data; got score {np.shape(score)} and "
                f"data {np.shape(data)}."
            )
        source = "arrays"
    check_finite(scores, "score")
    return SteinInput(
        draws=draws,
        scores=scores,
        chain=np.arange(n_chain),
        draw=np.arange(n_draw),
        parameter=[f"x[{k}]" for k in range(d)],
        attrs={"space": "as given", "score_source": source},
    )


def prepare_input(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=None):
    """Turn any supported ``data`` + score source into a validated ``SteinInput``."""
    if _is_labelled(data):
        from steindiag._data import prepare_trace

        prepared = prepare_trace(
            data, model, score=score, batched=batched, group=group, var_names=var_names,
            coords=coords, sample_dims=("chain", "draw") if sample_dims is None else sample_dims,
        )
        as_draws_array(prepared.draws, "data")
        check_finite(prepared.draws, "draws", prepared.chain, prepared.draw)
        check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
        return prepared
    if model is not None:
        raise TypeError(
            "model can only be used with a trace (InferenceData, DataTree or Dataset); "
            "for arrays pass score= (an array or a callable)."
        )
    for name, value in (("var_names", var_names), ("coords", coords)):
        if value is not None:
            raise TypeError(f"{name} applies to labelled traces only; data is an array.")
    return _prepare_arrays(data, score, batched)


def _compute(data, model, *, score, batched, c, beta, preconditioner, group, var_names,
             coords, sample_dims, method, progress):
    c, beta = check_kernel_args(c, beta)
    check_method(method, {"auto", *METHODS})
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")
    prepared = prepare_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims,
    )
    d = prepared.draws.shape[2]
    pre = make_preconditioner(preconditioner, prepared.draws.reshape(-1, d), prepared.parameter)
    sums = stein_row_sums(
        prepared.draws, prepared.scores, c=c, beta=beta, preconditioner=pre, method=method,
        progress=progress,
    )
    attrs = kernel_attrs(prepared, pre, c, beta)
    return prepared, sums, attrs


def kernel_attrs(prepared, pre, c, beta):
    """Attributes that reproduce a result: kernel, parameters, preconditioner, sizes, source."""
    n_chain, n_draw, d = prepared.draws.shape
    return {
        "kernel": "IMQ",
        "kernel_formula": _KERNEL_DOC,
        "stein_operator": "Langevin",
        "c": c,
        "beta": beta,
        **pre.attrs(),
        "n_chain": n_chain,
        "n_draw": n_draw,
        "n_parameter": d,
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }


def _cumulative(sums):
    """Running V-statistic numerators per chain (chain, n) and pooled (n,)."""
    per_chain = np.cumsum(2.0 * sums.row_same + sums.diagonal, axis=1)
    pooled = np.cumsum((2.0 * sums.row_all + sums.diagonal).sum(axis=0))
    diag_chain = np.cumsum(sums.diagonal, axis=1)
    diag_pooled = np.cumsum(sums.diagonal.sum(axis=0))
    return per_chain, pooled, diag_chain, diag_pooled


def _sqrt_v(total, count):
    # The V-statistic is a sum over a positive semi-definite kernel, so total >= 0 up
    # to rounding; clip only that rounding.
    return np.sqrt(np.maximum(total, 0.0)) / count


_COMMON_PARAMETERS = """\
    data : array_like, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        Draws. An array of shape (chain, draw, d), or (draw, d) for one chain; or a
        trace (``pm.sample`` output, or its posterior Dataset).
    model : pymc.Model, optional
        The model that produced the trace: scores are grad log p in its unconstrained
        space (value variables, ``model.logp(jacobian=True)``).
    score : array_like or callable, optional
        grad log p at each draw instead of ``model``: an array of the same shape as the
        draws, or a callable on the flat (unconstrained) parameter vector.
    batched : bool, default True
        Whether a ``score`` callable takes an (n, d) batch (True) or one (d,) draw.
    c : float, default 1.0
        IMQ offset, c > 0.
    beta : float, default -0.5
        IMQ exponent, -1 < beta < 0.
    preconditioner : str or array_like, default "standardize"
        ``"standardize"`` (robust per-coordinate scale; invariant to rescaling a
        parameter), ``"identity"``, ``"med"``, ``"sclmed"``, ``"smpcov"``, or Lambda as
        an array (0-d scalar, 1-D diagonal, 2-D SPD). Fixed once from the pooled draws.
    group : str, default "posterior"
        Group of a trace holding the draws.
    var_names, coords : optional
        Subset of the trace's variables (ArviZ conventions).
    sample_dims : sequence of str, default ("chain", "draw")
    method : {"auto", "fused", "gemm"}, default "auto"
        Engine path; all give the same numbers (to rounding).
    progress : bool or None, default None
        Progress bar on stderr (tqdm if installed). None: only when interactive and the
        pass is expected to take more than a few seconds. Ctrl-C stops the pass between
        chunks of about 0.25 s; no thread is left running."""


def ksd(data, model=None, *, score=None, batched=True, c=1.0, beta=-0.5,
        preconditioner="standardize", group="posterior", var_names=None, coords=None,
        sample_dims=None, method="auto", progress=None):
    """Kernel Stein discrepancy of each chain and of all chains pooled.

    Parameters
    ----------
{params}

    Returns
    -------
    xarray.Dataset
        ``ksd`` (chain): sqrt of the V-statistic of each chain alone;
        ``ksd_pooled`` (): sqrt of the V-statistic of all draws together;
        ``ksd_iid`` (chain), ``ksd_iid_pooled`` (): the floor an exact i.i.d. sample
        of the same size reaches, sqrt(mean_i k_p(x_i, x_i) / N);
        ``ksd2_u`` (chain), ``ksd2_u_pooled`` (): the unbiased U-statistic of KSD^2
        (may be negative). ``attrs`` record the kernel, c, beta, the preconditioner
        and the Lambda or scales used, and the sizes.

    Notes
    -----
    With u = x - y, q = c^2 + u^T A u and s = grad log p,

        k_p(x,y) = -4 beta (beta-1) q^(beta-2) u^T A^2 u
                   - 2 beta q^(beta-1) [tr(A) + u^T A (s(x) - s(y))] + q^beta s(x).s(y),

    KSD^2_V = N^-2 sum_ij k_p(x_i, x_j) and KSD^2_U = [N(N-1)]^-1 sum_(i != j) k_p(x_i, x_j).
    For exact draws of p, E[KSD^2_U] = 0; for N(0, I_d), A = I, E[KSD^2_V] = 2d/N.
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
        data, model, score=score, batched=batched, c=c, beta=beta,
        preconditioner=preconditioner, group=group, var_names=var_names, coords=coords,
        sample_dims=sample_dims, method=method, progress=progress,
    )
    n_chain, n_draw = sums.diagonal.shape
    n_total = n_chain * n_draw
    per_chain, pooled, diag_chain, diag_pooled = _cumulative(sums)
    v_chain, v_pooled = per_chain[:, -1], pooled[-1]
    d_chain, d_pooled = diag_chain[:, -1], diag_pooled[-1]
    chain = xr.Variable(("chain",), prepared.chain)
    data_vars = {
        "ksd": (("chain",), _sqrt_v(v_chain, n_draw),
                {"long_name": "KSD of each chain (sqrt of V-statistic)"}),
        "ksd_pooled": ((), _sqrt_v(v_pooled, n_total),
                       {"long_name": "KSD of all chains pooled (sqrt of V-statistic)"}),
        "ksd_iid": (("chain",), np.sqrt(d_chain) / n_draw,
                    {"long_name": "i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N), each chain"}),
        "ksd_iid_pooled": ((), np.sqrt(d_pooled) / n_total,
                           {"long_name": "i.i.d. floor, pooled"}),
        "ksd2_u": (("chain",), (v_chain - d_chain) / (n_draw * (n_draw - 1)),
                   {"long_name": "unbiased U-statistic of KSD^2, each chain (may be < 0)"}),
        "ksd2_u_pooled": ((), (v_pooled - d_pooled) / (n_total * (n_total - 1)),
                          {"long_name": "unbiased U-statistic of KSD^2, pooled (may be < 0)"}),
    }
    return xr.Dataset(data_vars, coords={"chain": chain}, attrs=attrs)


def _check_n_points(n_points):
    if n_points is None:
        return
    if isinstance(n_points, bool) or not isinstance(n_points, (int, np.integer)):
        raise TypeError(f"n_points must be None or an integer; got {type(n_points).__name__}.")
    if n_points < 2:
        raise ValueError(f"n_points must be None or an integer >= 2; got {n_points}.")


def _path_points(n_draw, n_points):
    if n_points is None:
        return np.arange(1, n_draw + 1)
    points = np.unique(np.round(np.geomspace(1, n_draw, int(n_points))).astype(np.int64))
    return points


def ksd_path(data, model=None, *, score=None, batched=True, c=1.0, beta=-0.5,
             preconditioner="standardize", group="posterior", var_names=None, coords=None,
             sample_dims=None, method="auto", n_points=None, progress=None):
    """Running KSD as every chain grows, per chain and pooled, from one pass.

    Parameters
    ----------
{params}
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
        data, model, score=score, batched=batched, c=c, beta=beta,
        preconditioner=preconditioner, group=group, var_names=var_names, coords=coords,
        sample_dims=sample_dims, method=method, progress=progress,
    )
    n_chain, n_draw = sums.diagonal.shape
    points = _path_points(n_draw, n_points)
    index = points - 1
    per_chain, pooled, diag_chain, diag_pooled = _cumulative(sums)
    data_vars = {
        "ksd": (("chain", "n"), _sqrt_v(per_chain[:, index], points),
                {"long_name": "running KSD of each chain"}),
        "ksd_pooled": (("n",), _sqrt_v(pooled[index], n_chain * points),
                       {"long_name": "running KSD of all chains pooled"}),
        "ksd_iid": (("chain", "n"), np.sqrt(diag_chain[:, index]) / points,
                    {"long_name": "running i.i.d. floor of each chain"}),
        "ksd_iid_pooled": (("n",), np.sqrt(diag_pooled[index]) / (n_chain * points),
                           {"long_name": "running i.i.d. floor, pooled"}),
    }
    coords = {
        "chain": ("chain", prepared.chain),
        "n": ("n", points, {"long_name": "draws per chain"}),
    }
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


ksd.__doc__ = ksd.__doc__.format(params=_COMMON_PARAMETERS)
ksd_path.__doc__ = ksd_path.__doc__.format(params=_COMMON_PARAMETERS)
