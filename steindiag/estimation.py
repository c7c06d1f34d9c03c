"""Minimum kernel Stein discrepancy estimation for models known up to a constant.

Data flow: data (n, d) + score_fn(x, theta) -> one preconditioner fixed from the data
-> kernel coordinates (the map is linear in the scores) -> ``methods.estimation``: either

- linear scores s_theta(x) = A(x) theta + b(x): the sums Q, v of the quadratic
  KSD^2_U(theta) = theta^T Q theta + 2 v^T theta + const from one pass of
  ``engine.svgd.kernel_vector_sums`` (IMQ), and theta = -Q^-1 v; or
- scipy.optimize.minimize on KSD^2_U (``engine.local.stein_row_sums``) with its gradient
  (``kernel_vector_sums`` and the score's derivative in theta);

-> standard errors from the Hoeffding projection of the gradient (``KernelPoints``
row sums at theta +- delta) and the Hessian -> a labelled :class:`MinKSDFit`.
"""

import numpy as np

from steindiag._validate import check_bool, check_int, check_kernel_args
from steindiag.engine.progress import check_progress
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.estimation import KSDObjective, fit_theta
from steindiag.outputs.estimation import MinKSDFit, fit_result

__all__ = ["min_ksd_fit", "MinKSDFit"]


def _fit_iv(data, score_fn, theta0, linear, score_jacobian, parameter_names, bounds,
            max_iter):
    try:
        x = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"data must be an array of floats; got {type(data).__name__}.") from None
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"data must have shape (n, d) or (n,); got shape {x.shape}.")
    if x.shape[0] < 3:
        raise ValueError(f"data must have at least 3 points; got {x.shape[0]}.")
    if x.shape[1] < 1:
        raise ValueError("data must have at least one coordinate (d >= 1).")
    if not np.all(np.isfinite(x)):
        raise ValueError(
            f"data contains non-finite values in {int((~np.isfinite(x)).any(axis=1).sum())} "
            "row(s)."
        )
    if not callable(score_fn):
        raise TypeError(
            "score_fn must be a callable score_fn(x, theta) returning grad_x log p_theta(x) "
            f"as an (n, d) array; got {type(score_fn).__name__}."
        )
    try:
        theta0 = np.array(theta0, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"theta0 must be an array of floats; got {type(theta0).__name__}."
        ) from None
    theta0 = np.atleast_1d(theta0)
    if theta0.ndim != 1 or theta0.size < 1:
        raise ValueError(f"theta0 must be a 1-D array with at least one entry; got shape "
                         f"{theta0.shape}.")
    if not np.all(np.isfinite(theta0)):
        raise ValueError("theta0 must be finite.")
    check_bool(linear, "linear")
    if score_jacobian is not None and not callable(score_jacobian):
        raise TypeError("score_jacobian must be None or a callable score_jacobian(x, theta) "
                        f"returning an (n, d, k) array; got {type(score_jacobian).__name__}.")
    if linear and (score_jacobian is not None or bounds is not None):
        raise ValueError("score_jacobian and bounds apply only with linear=False (the linear "
                         "case is solved in closed form, without bounds).")
    k = theta0.size
    if parameter_names is None:
        parameter_names = [f"theta[{a}]" for a in range(k)]
    else:
        parameter_names = [str(name) for name in parameter_names]
        if len(parameter_names) != k or len(set(parameter_names)) != k:
            raise ValueError(f"parameter_names must be {k} distinct names (one per entry of "
                             f"theta0); got {parameter_names}.")
    check_int(max_iter, "max_iter", minimum=1)
    return x, theta0, parameter_names


def min_ksd_fit(data, score_fn, theta0, *, linear=False, score_jacobian=None,
                parameter_names=None, c=1.0, beta=-0.5, preconditioner="standardize",
                bounds=None, max_iter=1000, options=None, progress=None):
    """Fit a model known up to its normalising constant by minimising KSD^2_U.

    Parameters
    ----------
    data : array_like, shape (n, d) or (n,)
        Independent observations x_1..x_n.
    score_fn : callable
        ``score_fn(x, theta)``: grad_x log p_theta(x) at the (n, d) points x, as an
        (n, d) array. Only the score is needed: p_theta may have an intractable
        normalising constant.
    theta0 : array_like, shape (k,)
        Starting point of the optimiser (with ``linear=True``: any point; it sets k
        and is one of the two points where linearity is checked).
    linear : bool, default False
        Declare the score linear (affine) in theta, s_theta(x) = A(x) theta + b(x), as
        for every exponential family: KSD^2_U is then a quadratic in theta and its
        minimiser is computed exactly. A(x) and b(x) are read off ``score_fn`` at
        theta = 0 and at the unit vectors, and the claim is checked at ``theta0`` and
        ``theta0 + 1`` (ValueError if it fails).
    score_jacobian : callable, optional
        ``score_jacobian(x, theta)``: d score / d theta, an (n, d, k) array, for the
        gradient with ``linear=False``. Default: central differences of ``score_fn`` in
        theta (2 k extra score evaluations per gradient; the kernel part of the
        gradient is exact either way).
    parameter_names : list of str, optional
        Labels of the entries of theta (default ``theta[0]``, ...).
    c, beta, preconditioner
        The IMQ Stein kernel, as in :func:`steindiag.ksd`; the preconditioner is fixed
        once from the data.
    bounds : sequence of (low, high), optional
        Bounds on theta for the optimiser (``linear=False``), as in
        ``scipy.optimize.minimize``; None for no bound.
    max_iter : int, default 1000
        Optimiser iterations (``linear=False``).
    options : dict, optional
        Further options of ``scipy.optimize.minimize(method="L-BFGS-B")``; the defaults
        are ``ftol=1e-15``, ``gtol=1e-12`` (statistical error, not the optimiser, should
        limit the estimate).
    progress : bool or None, default None
        Progress on stderr (tqdm if installed), one step per O(n^2) kernel pass: a bar for
        the closed form (2 + 2 k passes for k parameters), a counter for the optimiser
        (its number of passes is not known ahead). None: only when interactive and the
        fit is expected to take more than a few seconds. Ctrl-C stops a pass within
        about a second; no thread is left running.

    Returns
    -------
    MinKSDFit
        ``estimate``, ``standard_error`` (parameter) and ``covariance`` (parameter,
        parameter_bis) as DataArrays; ``ksd2_u`` and ``ksd`` at the estimate;
        ``converged``, ``n_iterations``, ``message``; ``attrs``.

    Raises
    ------
    TypeError, ValueError
        Invalid arguments; a score function that raises, returns the wrong shape or
        non-finite values; ``linear=True`` with a score that is not linear in theta;
        a quadratic without a unique minimiser (theta not identified by the data).

    Notes
    -----
    With the IMQ Stein kernel k_p^theta built from s_theta,

        KSD^2_U(theta) = [n (n - 1)]^-1 sum_(i != j) k_p^theta(x_i, x_j),

    unbiased for KSD^2(q, p_theta), q the law of the data, and zero at theta* when the
    model is right (Barp et al. 2019). For s_theta = A theta + b it equals
    theta^T Q theta + 2 v^T theta + const with

        Q = [n (n-1)]^-1 sum_(i != j) k(x_i, x_j) A_i^T A_j,
        v = [n (n-1)]^-1 sum_i A_i^T [ sum_(j != i) k(x_i, x_j) b_j + grad_(x_j) k(x_j, x_i) ],

    k the base kernel; theta = -Q^-1 v (a d k + d column kernel sum, O(n^2 d (k + 1))).
    Otherwise L-BFGS-B with the gradient 2 [n (n-1)]^-1 sum_i J_i^T h_i, J_i = d s(x_i) /
    d theta and h_i = sum_(j != i) [k(x_i, x_j) s_j + grad_(x_j) k(x_j, x_i)].

    Standard errors: the estimate solves grad KSD^2_U = 0, a U-statistic whose Hoeffding
    projection gives Var(grad KSD^2_U) ~ 4 Sigma / n, Sigma the covariance of
    psi(x_i) = (n - 1)^-1 grad_theta sum_(j != i) k_p^theta(x_i, x_j) (central differences
    of these row sums in theta: 2 k passes of O(n^2 d)); with H the Hessian of KSD^2_U
    (exact for a linear score, central differences of the gradient otherwise),
    Cov(theta_hat) ~ H^-1 (4 Sigma / n) H^-1. This is first-order asymptotics for
    independent data; see the Background page of the docs. Memory O(n d k).

    References
    ----------
    Barp, Briol, Duncan, Girolami & Mackey (2019), Minimum Stein discrepancy estimators,
    NeurIPS.

    Examples
    --------
    A Gaussian in its natural parameters (precision lam, eta = lam mu): s(x) = -lam x + eta.

    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).normal(1.0, 2.0, size=500)   # mu = 1, sd = 2
    >>> fit = steindiag.min_ksd_fit(x, lambda x, t: -t[0] * x + t[1], [1.0, 0.0],
    ...                             linear=True, parameter_names=["lam", "eta"])
    >>> lam = fit.estimate.sel(parameter="lam")
    >>> bool(abs(lam - 0.25) < 4 * fit.standard_error.sel(parameter="lam"))   # truth 1/4
    True
    """
    c, beta = check_kernel_args(c, beta)
    x, theta0, names = _fit_iv(data, score_fn, theta0, linear, score_jacobian,
                               parameter_names, bounds, max_iter)
    check_progress(progress)
    n, d = x.shape
    pre = make_preconditioner(preconditioner, x, [f"x[{j}]" for j in range(d)])
    objective = KSDObjective(x, score_fn, score_jacobian, pre, c, beta)
    fit = fit_theta(objective, theta0, linear=linear, bounds=bounds, max_iter=max_iter,
                    options=options, progress=progress)
    attrs = {
        "kernel": "IMQ", "stein_operator": "Langevin", "c": c, "beta": beta,
        **pre.attrs(), "n_data": int(n), "n_dim": int(d),
        "method": "closed form (linear score)" if linear else "L-BFGS-B",
        "gradient": ("exact" if linear else
                     "kernel sums exact, dscore/dtheta " +
                     ("from score_jacobian" if score_jacobian is not None
                      else "by central differences")),
        "score_evaluations": int(objective.evaluations),
    }
    return fit_result(fit, names, attrs)
