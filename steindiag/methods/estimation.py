"""Minimum-KSD estimation's numerical core: the objective, its gradient, the two solvers.

KSD^2_U(theta), the U-statistic of the squared KSD between the data and the model with
parameter theta, is minimised over theta. For a score linear (affine) in theta it is a
quadratic, minimised in closed form; otherwise L-BFGS-B runs on it with the gradient
from one kernel-sum pass per evaluation. See the Background page of the docs.
"""

from dataclasses import dataclass

import numpy as np

from steindiag.engine import svgd as _svgd_kernels
from steindiag.engine.local import stein_row_sums
from steindiag.engine.products import KernelPoints
from steindiag.engine.progress import CONSERVATIVE_FLOPS, progress_bar
from steindiag.kernels import IMQ

__all__ = ["KSDObjective", "closed_form_fit", "linear_pieces", "numerical_fit", "ThetaFit", "fit_theta"]


# Central-difference step in theta (relative to max(1, |theta_a|)): about eps^(1/3),
# the step that balances truncation and rounding for a smooth function. For a linear
# score the differenced quantities are quadratic in theta and the differences exact.
_FD_STEP = 1e-5


# A declared-linear score must reproduce A(x) theta + b(x) to this relative accuracy.
_LINEARITY_RTOL = 1e-8


def _central_differences(function, theta):
    """d function / d theta_a by central differences, stacked along a last axis a."""
    columns = []
    for a in range(theta.size):
        step = _FD_STEP * max(1.0, abs(theta[a]))
        plus, minus = theta.copy(), theta.copy()
        plus[a] += step
        minus[a] -= step
        columns.append((function(plus) - function(minus)) / (2.0 * step))
    return np.stack(columns, axis=-1)


class KSDObjective:
    """KSD^2_U(theta), its gradient and the pieces of its standard error.

    Everything is in the kernel coordinates of the fixed preconditioner: z = V^T (x /
    scale), s_z = V^T (scale * s), a linear map of the scores (``to_kernel``), so a
    score linear in theta stays linear.
    """

    def __init__(self, x, score_fn, score_jacobian, pre, c, beta):
        self.x = x
        self.n, self.d = x.shape
        self.score_fn = score_fn
        self.score_jacobian = score_jacobian
        self.pre = pre
        self.c, self.beta = c, beta
        self.c2 = c * c
        self.z, _ = pre.to_kernel_coordinates(x, np.zeros_like(x))
        self.pairs = self.n * (self.n - 1)
        self.evaluations = 0
        # A progress bar (``update(n)``) advanced by every O(n^2) kernel pass, or None.
        self.bar = None

    def passed(self):
        """One kernel pass done: advance the bar."""
        if self.bar is not None:
            self.bar.update(1)

    def to_kernel(self, scores):
        """Map (n, d) scores to kernel coordinates."""
        return self.pre.to_kernel_coordinates(self.x, scores)[1]

    def scores(self, theta):
        self.evaluations += 1
        try:
            value = self.score_fn(self.x.copy(), theta.copy())
        except Exception as err:
            raise ValueError(
                f"score_fn raised {type(err).__name__} at theta={theta.tolist()}: {err}"
            ) from err
        value = np.asarray(value, dtype=np.float64)
        if value.shape == (self.n,) and self.d == 1:
            value = value[:, None]
        if value.shape != (self.n, self.d):
            raise ValueError(f"score_fn returned shape {value.shape}; expected (n, d) = "
                             f"({self.n}, {self.d}).")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"score_fn returned non-finite values at theta={theta.tolist()}.")
        return value

    def value(self, scores):
        """KSD^2_U and KSD (sqrt of the V-statistic) for (n, d) scores in x-space."""
        sums = stein_row_sums(self.x[None], scores[None], kernel=IMQ(c=self.c, beta=self.beta),
                              preconditioner=self.pre)
        self.passed()
        off = 2.0 * float(sums.row_all.sum())
        diagonal = float(sums.diagonal.sum())
        return off / self.pairs, np.sqrt(max(off + diagonal, 0.0)) / self.n

    def value_at_estimate(self, scores):
        """KSD^2_U and KSD as ``value``, from the symmetric product K_p 1.

        The pass of the standard errors (``row_sum_gradients``): a fit compiles no
        row-sum pass of its own for its value (the closed form needs none otherwise).
        """
        points = KernelPoints(self.x, scores, self.pre, IMQ(c=self.c, beta=self.beta))
        off = float((points.matvec(np.ones(self.n)) - points.diagonal).sum())
        self.passed()
        diagonal = float(points.diagonal.sum())
        return off / self.pairs, np.sqrt(max(off + diagonal, 0.0)) / self.n

    def stein_sums(self, scores_k):
        """h_i = sum_(j != i) [k(z_i, z_j) s_j + grad_(z_j) k(z_j, z_i)], kernel coords.

        d KSD^2_U / d s_i = 2 h_i / (n (n - 1)) (see the Background page of the docs).
        """
        values_sum, grad_sum = _svgd_kernels.kernel_vector_sums(
            self.z, scores_k, self.pre.a, kind=_svgd_kernels.IMQ, c2=self.c2, beta=self.beta)
        self.passed()
        return values_sum - self.c2**self.beta * scores_k + grad_sum

    def jacobian(self, theta, k):
        """d s(x_i) / d theta, (n, d, k), in kernel coordinates."""
        if self.score_jacobian is not None:
            try:
                jac = np.asarray(self.score_jacobian(self.x.copy(), theta.copy()),
                                 dtype=np.float64)
            except Exception as err:
                raise ValueError(f"score_jacobian raised {type(err).__name__}: {err}") from err
            if jac.shape != (self.n, self.d, k):
                raise ValueError(f"score_jacobian returned shape {jac.shape}; expected "
                                 f"(n, d, k) = ({self.n}, {self.d}, {k}).")
            if not np.all(np.isfinite(jac)):
                raise ValueError("score_jacobian returned non-finite values.")
        else:
            jac = _central_differences(self.scores, theta)
        return np.stack([self.to_kernel(jac[:, :, a]) for a in range(k)], axis=2)

    def value_and_gradient(self, theta):
        scores = self.scores(theta)
        value, _ = self.value(scores)
        h = self.stein_sums(self.to_kernel(scores))
        jac = self.jacobian(theta, theta.size)
        gradient = 2.0 * np.einsum("ida,id->a", jac, h) / self.pairs
        return value, gradient

    def row_sum_gradients(self, theta):
        """d/d theta of r_i = sum_(j != i) k_p(x_i, x_j), (n, k), by central differences."""
        def row_sums(shifted):
            points = KernelPoints(self.x, self.scores(shifted), self.pre,
                                  IMQ(c=self.c, beta=self.beta))
            sums = points.matvec(np.ones(self.n)) - points.diagonal
            self.passed()
            return sums

        return _central_differences(row_sums, theta)


def linear_pieces(objective, theta0):
    """A(x) (n, d, k) and b(x) (n, d) of a score declared linear, checked at two points."""
    k = theta0.size
    b = objective.scores(np.zeros(k))
    eye = np.eye(k)
    A = np.stack([objective.scores(eye[a]) - b for a in range(k)], axis=2)
    for theta in (theta0, theta0 + 1.0):
        direct = objective.scores(theta)
        combined = np.einsum("nda,a->nd", A, theta) + b
        # The size of the terms being added: rounding is relative to it.
        size = (np.abs(direct).max() + np.abs(b).max()
                + np.einsum("nda,a->nd", np.abs(A), np.abs(theta)).max())
        if np.abs(direct - combined).max() > _LINEARITY_RTOL * max(size, 1e-300):
            raise ValueError(
                "linear=True but score_fn is not linear (affine) in theta: at "
                f"theta={theta.tolist()} it differs from A(x) theta + b(x) (read off at "
                "theta = 0 and the unit vectors) by "
                f"{np.abs(direct - combined).max():.3g}. Use linear=False."
            )
    return A, b


def closed_form_fit(objective, theta0):
    """theta = -Q^-1 v for KSD^2_U = theta^T Q theta + 2 v^T theta + const."""
    A, b = linear_pieces(objective, theta0)
    n, d, k = A.shape
    A_k = np.stack([objective.to_kernel(A[:, :, a]) for a in range(k)], axis=2)
    b_k = objective.to_kernel(b)
    # One pass for every column: base-kernel sums of A's columns and of b, and the
    # gradient sums g_i = sum_j grad_(z_j) k(z_j, z_i).
    values = np.concatenate([A_k.reshape(n, d * k), b_k], axis=1)
    values_sum, g = _svgd_kernels.kernel_vector_sums(
        objective.z, values, objective.pre.a, kind=_svgd_kernels.IMQ, c2=objective.c2,
        beta=objective.beta)
    objective.passed()
    values_sum -= objective.c2**objective.beta * values  # leave out j = i
    KA = values_sum[:, : d * k].reshape(n, d, k)
    Kb = values_sum[:, d * k :]
    Q = np.einsum("nda,ndb->ab", A_k, KA) / objective.pairs
    Q = 0.5 * (Q + Q.T)
    v = np.einsum("nda,nd->a", A_k, g + Kb) / objective.pairs
    try:
        cholesky = np.linalg.cholesky(Q)
    except np.linalg.LinAlgError:
        raise ValueError(
            "KSD^2_U is not a strictly convex quadratic in theta for this data (its matrix "
            f"Q has eigenvalues {np.round(np.linalg.eigvalsh(Q), 6).tolist()}): the "
            "parameters are not identified by the score, or there are too few data points."
        ) from None
    theta = -np.linalg.solve(cholesky.T, np.linalg.solve(cholesky, v))
    return theta, 2.0 * Q


def numerical_fit(objective, theta0, bounds, max_iter, options):
    from scipy.optimize import minimize

    settings = {"maxiter": int(max_iter), "ftol": 1e-15, "gtol": 1e-12}
    settings.update(options or {})
    result = minimize(objective.value_and_gradient, theta0, jac=True, method="L-BFGS-B",
                      bounds=bounds, options=settings)
    theta = np.asarray(result.x, dtype=np.float64)
    hessian = _central_differences(lambda t: objective.value_and_gradient(t)[1], theta)
    return theta, 0.5 * (hessian + hessian.T), result


@dataclass(kw_only=True)
class ThetaFit:
    """The minimum-KSD estimate ``theta`` with its sandwich ``covariance``, KSD^2_U and KSD
    at it, and the solver's ``converged``, ``n_iterations`` and ``message``."""

    theta: np.ndarray
    covariance: np.ndarray
    ksd2_u: float
    ksd: float
    converged: bool
    n_iterations: int
    message: str


def fit_theta(objective, theta0, *, linear, bounds, max_iter, options, progress):
    """Minimise KSD^2_U (closed form for a linear score, else L-BFGS-B), with the asymptotic
    covariance H^-1 (4 Sigma / n) H^-1 of the estimate (Sigma: the covariance of the
    Hoeffding projections of the gradient, H the Hessian)."""
    n, d = objective.x.shape
    k = theta0.size
    # Kernel passes: the closed form needs 2 + 2 k; the optimiser an unknown number (a
    # counter then, expected at about 30 iterations of 2 passes).
    n_passes = 2 + 2 * k if linear else None
    seconds_per_pass = n * n * (8 * d + 20) / CONSERVATIVE_FLOPS
    with progress_bar(progress, n_passes, (n_passes or 60 + 6 * k) * seconds_per_pass,
                      desc="min_ksd_fit (kernel passes)", unit="pass") as objective.bar:
        if linear:
            theta, hessian = closed_form_fit(objective, theta0)
            converged, n_iterations, message = True, 0, "closed form"
        else:
            theta, hessian, result = numerical_fit(objective, theta0, bounds, max_iter,
                                                   options)
            converged, n_iterations = bool(result.success), int(result.nit)
            message = str(result.message)
        ksd2_u, ksd = objective.value_at_estimate(objective.scores(theta))
        psi = objective.row_sum_gradients(theta) / (n - 1)
    objective.bar = None
    sigma = np.atleast_2d(np.cov(psi, rowvar=False))
    try:
        inverse = np.linalg.inv(hessian)
    except np.linalg.LinAlgError:
        inverse = np.full_like(hessian, np.nan)
    covariance = inverse @ (4.0 * sigma / n) @ inverse.T
    return ThetaFit(theta=theta, covariance=0.5 * (covariance + covariance.T),
                    ksd2_u=ksd2_u, ksd=ksd, converged=converged, n_iterations=n_iterations,
                    message=message)
