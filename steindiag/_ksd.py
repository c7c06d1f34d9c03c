"""Public KSD functions: ``ksd`` (values) and ``ksd_path`` (running curves).

Data flow: input (arrays | InferenceData | DataTree | Dataset) -> ``SteinInput``
(draws, scores as (chain, draw, d) in the unconstrained space) -> one preconditioner
fixed from the pooled draws -> ``_engine.stein_row_sums`` (one O(N^2 d) pass) ->
labelled ``xarray.Dataset``.
"""

import sys

import numpy as np
import xarray as xr

from steindiag._engine import METHODS, stein_row_sums
from steindiag._preconditioner import make_preconditioner
from steindiag._types import SteinInput
from steindiag._validate import (
    as_draws_array,
    check_finite,
    check_method,
    evaluate_score_callable,
    warn_if_low_precision,
    warn_user,
)
from steindiag.kernels import make_kernel

__all__ = ["ksd", "ksd_path", "prepare_input"]


def _is_labelled(data):
    """True for xarray / ArviZ containers, which the trace layer handles."""
    module = type(data).__module__ or ""
    return module.startswith(("xarray", "arviz", "datatree"))


# For arrays, sample_dims names the leading axes; the next axis (if any) is the parameter.
# value: {ndim: function giving the (chain, draw, d) view}
_ARRAY_LAYOUTS = {
    ("chain", "draw"): {3: lambda a: a, 2: lambda a: a[:, :, None]},
    ("draw", "chain"): {3: lambda a: a.transpose(1, 0, 2), 2: lambda a: a.T[:, :, None]},
    ("draw",): {2: lambda a: a[None], 1: lambda a: a[None, :, None]},
}
_ARRAY_SHAPES = {
    ("chain", "draw"): "(chain, draw, d) or (chain, draw) for d = 1",
    ("draw", "chain"): "(draw, chain, d) or (draw, chain) for d = 1",
    ("draw",): "(draw, d) or (draw,) for d = 1",
}
SPACES = ("unconstrained", "constrained")


def check_space(space, model):
    """``space`` is None, "unconstrained" or "constrained"; a PyMC model fixes it."""
    if space is None:
        return
    if not isinstance(space, str) or space not in SPACES:
        raise ValueError(f"space must be None, 'unconstrained' or 'constrained'; got {space!r}.")
    if model is not None and space != "unconstrained":
        raise ValueError(
            "with model=, draws and scores are in the model's unconstrained space (its value "
            f"variables); space={space!r} cannot be combined with a model."
        )


def _array_sample_dims(sample_dims):
    if sample_dims is None:
        return None
    if isinstance(sample_dims, str):
        sample_dims = (sample_dims,)
    try:
        sample_dims = tuple(sample_dims)
    except TypeError:
        sample_dims = None
    if sample_dims not in _ARRAY_LAYOUTS:
        raise ValueError(
            "for an array, sample_dims names its leading axes: ('chain', 'draw'), "
            "('draw', 'chain') (emcee's get_chain()) or ('draw',) (one chain); the axis "
            f"after them, if any, holds the parameters. Got sample_dims={sample_dims!r}."
        )
    return sample_dims


def array_layout(array, sample_dims, name):
    """View of a NumPy array as (chain, draw, d), as its ``sample_dims`` say.

    ``sample_dims=None``: (chain, draw, d), or (draw, d) for one chain. Refuses a 2-D
    array with no more rows than columns (it reads as fewer draws than parameters, as a
    (chain, draw) array of a one-parameter target would), and warns for more chains than
    draws per chain (emcee's get_chain() is (draw, walker, d)): explicit ``sample_dims``
    settle both.
    """
    if sample_dims is None:
        if array.ndim == 1:
            raise ValueError(
                f"{name} has shape {array.shape}: for one chain of a one-parameter target "
                "pass sample_dims=('draw',) (or a (draw, 1) array)."
            )
        if array.ndim == 2 and 0 < array.shape[0] <= array.shape[1]:
            raise ValueError(
                f"{name} has shape {array.shape}: a 2-D array is read as (draw, d), here "
                f"{array.shape[0]} draws of {array.shape[1]} parameters. If it is (chain, "
                "draw) of a one-parameter target, pass sample_dims=('chain', 'draw') (or "
                f"{name}[..., None], shape (chain, draw, 1)); if it really is (draw, d), "
                "pass sample_dims=('draw',)."
            )
        if array.ndim == 3 and array.shape[0] > array.shape[1] >= 2:
            warn_user(
                f"{name} has shape {array.shape}, read as (chain, draw, d): {array.shape[0]} "
                f"chains of {array.shape[1]} draws each. If it is (draw, chain, d), as "
                "emcee's get_chain() returns (step, walker, d), pass sample_dims=('draw', "
                "'chain') or swap the axes with np.swapaxes(x, 0, 1); if these are chains, "
                "pass sample_dims=('chain', 'draw') to say so."
            )
    elif array.ndim not in _ARRAY_LAYOUTS[sample_dims]:
        raise ValueError(
            f"{name} must have shape {_ARRAY_SHAPES[sample_dims]} with "
            f"sample_dims={sample_dims}; got shape {array.shape}."
        )
    return _apply_layout(array, sample_dims)


def _apply_layout(array, sample_dims):
    if sample_dims is None:
        return array[None] if array.ndim == 2 else array
    return _ARRAY_LAYOUTS[sample_dims][array.ndim](array)


def _raw_array(value, name):
    try:
        return np.asarray(value)
    except Exception as err:  # noqa: BLE001 - anything numpy cannot take
        raise TypeError(f"{name} must be array-like; got {type(value).__name__}.") from err


def _prepare_arrays(data, score, batched, sample_dims=None, space=None):
    sample_dims = _array_sample_dims(sample_dims)
    raw = _raw_array(data, "data")
    draws = as_draws_array(array_layout(raw, sample_dims, "data"), "data")
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
        raw_score = _raw_array(score, "score")
        if raw_score.shape != raw.shape:
            raise ValueError(
                f"score must have the same shape as data; got score {raw_score.shape} and "
                f"data {raw.shape}."
            )
        scores = as_draws_array(_apply_layout(raw_score, sample_dims), "score")
        warn_if_low_precision(raw_score.dtype, "score")
        source = "arrays"
    check_finite(scores, "score")
    return SteinInput(
        draws=draws,
        scores=scores,
        chain=np.arange(n_chain),
        draw=np.arange(n_draw),
        parameter=[f"x[{k}]" for k in range(d)],
        attrs={"space": "as given" if space is None else space, "score_source": source},
    )


def _is_placeholder_score(score):
    """``mmd``'s placeholder (zeros): it needs draws only and never reads the scores."""
    mmd_module = sys.modules.get("steindiag._mmd")
    return mmd_module is not None and score is getattr(mmd_module, "_no_score", None)


def warn_zero_score_columns(prepared):
    """Warn about parameters whose score is exactly 0 at every draw while the draws vary.

    No proper density is flat along a coordinate; such a column is almost always a
    deterministic quantity (numpyro.deterministic, a PyMC Deterministic, a Stan
    generated quantity) flattened into the draws, and it inflates KSD.
    """
    d = prepared.draws.shape[2]
    zero = np.all(prepared.scores.reshape(-1, d) == 0.0, axis=0)
    if not zero.any():
        return
    flat = prepared.draws.reshape(-1, d)
    varies = flat.max(axis=0) > flat.min(axis=0)
    columns = np.flatnonzero(zero & varies)
    if columns.size == 0:
        return
    names = [prepared.parameter[k] for k in columns[:10]]
    more = f" and {columns.size - 10} more" if columns.size > 10 else ""
    warn_user(
        f"the score is exactly 0 at every draw for {columns.size} of {d} parameter(s), "
        f"{names}{more}, while their draws vary: log p does not depend on them, so they are "
        "not parameters of the target. This is usually a deterministic quantity "
        "(numpyro.deterministic, a PyMC Deterministic, a Stan transformed parameter or "
        "generated quantity) flattened into the draws; it inflates KSD. Leave it out "
        "(var_names= for a trace; keep only the sampled sites when flattening)."
    )


def prepare_input(data, model=None, *, score=None, batched=True, group="posterior",
                  var_names=None, coords=None, sample_dims=None, space=None):
    """Turn any supported ``data`` + score source into a validated ``SteinInput``.

    ``space`` (None, "unconstrained" or "constrained") states the space of the draws and
    of the score when no model defines it; see :func:`steindiag.ksd`.
    """
    check_space(space, model)
    if _is_labelled(data):
        from steindiag._data import prepare_trace

        prepared = prepare_trace(
            data, model, score=score, batched=batched, group=group, var_names=var_names,
            coords=coords, sample_dims=("chain", "draw") if sample_dims is None else sample_dims,
            space=space,
        )
        as_draws_array(prepared.draws, "data")
        check_finite(prepared.draws, "draws", prepared.chain, prepared.draw)
        check_finite(prepared.scores, "scores", prepared.chain, prepared.draw)
    else:
        if model is not None:
            raise TypeError(
                "model can only be used with a trace (InferenceData, DataTree or Dataset); "
                "for arrays pass score= (an array or a callable)."
            )
        for name, value in (("var_names", var_names), ("coords", coords)):
            if value is not None:
                raise TypeError(f"{name} applies to labelled traces only; data is an array.")
        prepared = _prepare_arrays(data, score, batched, sample_dims, space)
    if not _is_placeholder_score(score):
        warn_zero_score_columns(prepared)
    return prepared


def _compute(data, model, *, score, batched, kernel, c, beta, preconditioner, group, var_names,
             coords, sample_dims, method, progress, space=None):
    kernel = make_kernel(kernel, c, beta)
    check_method(method, {"auto", *METHODS})
    if progress not in (None, True, False):
        raise TypeError(f"progress must be None, True or False; got {progress!r}.")
    prepared = prepare_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space,
    )
    d = prepared.draws.shape[2]
    pre = make_preconditioner(preconditioner, prepared.draws.reshape(-1, d), prepared.parameter)
    sums = stein_row_sums(
        prepared.draws, prepared.scores, kernel=kernel, preconditioner=pre, method=method,
        progress=progress,
    )
    attrs = kernel_attrs(prepared, pre, kernel)
    return prepared, sums, attrs


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
        Draws. An array of shape (chain, draw, d), or (draw, d) for one chain (other
        layouts with ``sample_dims``); or a trace (``pm.sample`` output, or its
        posterior Dataset).
    model : pymc.Model, optional
        The model that produced the trace: scores are grad log p in its unconstrained
        space (value variables, ``model.logp(jacobian=True)``).
    score : array_like or callable, optional
        grad log p at each draw instead of ``model``: an array of the same shape as the
        draws, or a callable on the flat (unconstrained) parameter vector.
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
        stored values are constrained while the usual scores are not."""


def ksd(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
        preconditioner="standardize", group="posterior", var_names=None, coords=None,
        sample_dims=None, method="auto", progress=None, space=None):
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
        (may be negative). ``attrs`` record the kernel (``kernel``, its formula, and
        for the IMQ ``c`` and ``beta``), the preconditioner and the Lambda or scales
        used, and the sizes.

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


def ksd_path(data, model=None, *, score=None, batched=True, kernel="imq", c=None, beta=None,
             preconditioner="standardize", group="posterior", var_names=None, coords=None,
             sample_dims=None, method="auto", n_points=None, progress=None, space=None):
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
        data, model, score=score, batched=batched, kernel=kernel, c=c, beta=beta,
        preconditioner=preconditioner, group=group, var_names=var_names, coords=coords,
        sample_dims=sample_dims, method=method, progress=progress, space=space,
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
