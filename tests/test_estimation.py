"""Tests of ``min_ksd_fit`` (minimum kernel Stein discrepancy estimation).

Sources of truth (each assertion names its own):
- tests/reference_svgd.py: the minimiser of the quadratic KSD^2_U(theta) read off the
  slow explicit-matrix KSD of tests/reference.py at a few theta;
- known parameters of simulated Gaussians (mean and precision), with tolerances from
  the standard error, and the sampling sd of the estimate over independent seeds
  for the calibration of that standard error (binomial and chi-square spreads below);
- the closed form and the numerical optimiser, two separate code paths, must agree.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import steindiag
from steindiag.estimation import MinKSDFit, min_ksd_fit

sys.path.insert(0, str(Path(__file__).parent))
from reference import ksd_u2, ksd_v2, standardize_reference  # noqa: E402
from reference_svgd import quadratic_min_ksd_reference  # noqa: E402


def gaussian_1d_score(x, theta):
    """N(mu, 1/lam) in natural parameters theta = (lam, eta = lam mu): s = -lam x + eta."""
    return -theta[0] * x + theta[1]


def gaussian_1d_jacobian(x, theta):
    return np.stack([-x, np.ones_like(x)], axis=-1)


def gaussian_2d_score(x, theta):
    """theta = (L11, L12, L22, eta1, eta2): s(x) = -L x + eta, L the precision matrix."""
    precision = np.array([[theta[0], theta[1]], [theta[1], theta[2]]])
    return -x @ precision + theta[3:]


@pytest.mark.parametrize("preconditioner", ["identity", "standardize", "med"])
@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (0.8, -0.3)])
def test_closed_form_matches_reference_quadratic(preconditioner, c, beta):
    rng = np.random.default_rng(1)
    x = rng.multivariate_normal([0.5, -1.0], [[1.0, 0.6], [0.6, 2.0]], size=120)
    fit = min_ksd_fit(x, gaussian_2d_score, np.ones(5), linear=True, c=c, beta=beta,
                      preconditioner=preconditioner)
    if preconditioner == "standardize":
        def kernel_space_score(z, theta):
            # Scores in the standardised coordinates: s_z = s(x) * scale.
            return standardize_reference(x, x, gaussian_2d_score(x, theta))[1]
        z, _ = standardize_reference(x, x, x)
        A = np.eye(2)
    else:
        def kernel_space_score(z, theta):
            return gaussian_2d_score(z, theta)
        z = x
        lam = (np.eye(2) if preconditioner == "identity"
               else np.median(np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))[
                   np.triu_indices(len(x), 1)]) ** 2 * np.eye(2))
        A = np.linalg.inv(lam)
    expected, _ = quadratic_min_ksd_reference(z, kernel_space_score, 5, A, c, beta)
    # Truth: the minimiser of the slow reference KSD^2_U, a quadratic in theta read off
    # at 21 values of theta.
    np.testing.assert_allclose(fit.estimate.values, expected, rtol=1e-7, atol=1e-9)
    assert fit.converged and fit.message == "closed form"
    # Truth: the slow reference KSD^2_U and V-statistic at the estimate.
    scores = kernel_space_score(z, fit.estimate.values)
    assert fit.ksd2_u == pytest.approx(ksd_u2(z, scores, A, c, beta), rel=1e-9, abs=1e-14)
    assert fit.ksd == pytest.approx(np.sqrt(ksd_v2(z, scores, A, c, beta)), rel=1e-9)


def test_numerical_optimiser_agrees_with_closed_form():
    x = np.random.default_rng(2).normal(1.0, 2.0, size=400)
    closed = min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], linear=True)
    for jacobian in (None, gaussian_1d_jacobian):
        numeric = min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], score_jacobian=jacobian)
        assert numeric.converged
        # Truth: two code paths (closed form; L-BFGS-B on the KSD pass with the gradient
        # from the vector kernel sums) minimise the same function.
        np.testing.assert_allclose(numeric.estimate.values, closed.estimate.values,
                                   rtol=0, atol=1e-4 * closed.standard_error.values.min())
        np.testing.assert_allclose(numeric.standard_error.values,
                                   closed.standard_error.values, rtol=1e-3)
        assert numeric.ksd2_u == pytest.approx(closed.ksd2_u, rel=1e-8, abs=1e-12)


def test_gaussian_mean_and_precision_recovered():
    rng = np.random.default_rng(3)
    mean = np.array([0.5, -1.0])
    covariance = np.array([[1.0, 0.6], [0.6, 2.0]])
    precision = np.linalg.inv(covariance)
    truth = np.array([precision[0, 0], precision[0, 1], precision[1, 1],
                      *(precision @ mean)])
    x = rng.multivariate_normal(mean, covariance, size=2000)
    names = ["L11", "L12", "L22", "eta1", "eta2"]
    fit = min_ksd_fit(x, gaussian_2d_score, np.ones(5), linear=True, parameter_names=names)
    assert isinstance(fit, MinKSDFit)
    assert list(fit.estimate["parameter"].values) == names
    assert fit.covariance.dims == ("parameter", "parameter_bis")
    # Truth: the parameters that generated the data; 4 standard errors (each a 1-in-16000
    # event for a calibrated normal estimate; calibration is tested below).
    z = (fit.estimate.values - truth) / fit.standard_error.values
    np.testing.assert_array_less(np.abs(z), 4.0)
    # Consistency: the standard errors shrink like n^-1/2 (4x the data, half the error).
    small = min_ksd_fit(x[:500], gaussian_2d_score, np.ones(5), linear=True)
    np.testing.assert_allclose(small.standard_error.values / fit.standard_error.values,
                               2.0, rtol=0.25)
    # Mean = L^-1 eta, as a derived check on the estimate.
    L = np.array([[fit.estimate[0], fit.estimate[1]], [fit.estimate[1], fit.estimate[2]]])
    np.testing.assert_allclose(np.linalg.solve(L, fit.estimate.values[3:]), mean, atol=0.15)


def test_standard_error_is_calibrated_by_simulation():
    truth = np.array([0.25, 0.25])  # mu = 1, sd = 2
    n, replicates = 300, 200
    estimates, errors = [], []
    for seed in range(replicates):
        x = np.random.default_rng(1000 + seed).normal(1.0, 2.0, size=n)
        fit = min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], linear=True)
        estimates.append(fit.estimate.values)
        errors.append(fit.standard_error.values)
    estimates, errors = np.array(estimates), np.array(errors)
    ratio = errors.mean(axis=0) / estimates.std(axis=0, ddof=1)
    # Truth: the sampling sd of the estimate over independent data sets. The sd of 200
    # replicates is itself uncertain by 1/sqrt(2 * 199) = 5%: [0.8, 1.25] is 4 of those.
    np.testing.assert_array_less(np.abs(np.log(ratio)), np.log(1.25))
    coverage = np.mean(np.abs(estimates - truth) < 1.96 * errors, axis=0)
    # Truth: nominal 95%; binomial sd over 200 replicates 1.5%: [0.89, 0.99] is 4 sd
    # (minus a little for the O(1/n) bias of the estimator, about 0.3 sd at n = 300).
    np.testing.assert_array_less(0.89, coverage)
    np.testing.assert_array_less(coverage, 0.99)


def test_bounds_and_nonlinear_parametrisation():
    x = np.random.default_rng(4).normal(1.0, 2.0, size=300)

    def log_scale_score(x, theta):  # theta = (log sd, mu): not linear in log sd
        return -(x - theta[1]) * np.exp(-2 * theta[0])

    fit = min_ksd_fit(x, log_scale_score, [0.0, 0.0], bounds=[(-3, 3), (None, None)])
    closed = min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], linear=True)
    lam, eta = closed.estimate.values
    # Truth: the same family in another parametrisation has the same minimiser,
    # log sd = -log(lam) / 2 and mu = eta / lam (the invariance of an M-estimator).
    np.testing.assert_allclose(fit.estimate.values, [-0.5 * np.log(lam), eta / lam],
                               atol=1e-5)
    with pytest.raises(ValueError, match="not linear"):
        min_ksd_fit(x, log_scale_score, [0.0, 0.0], linear=True)


def test_errors():
    x = np.random.default_rng(5).normal(size=(50, 1))
    with pytest.raises(ValueError, match="not a strictly convex"):
        # theta0 and theta1 enter only through their sum: not identified.
        min_ksd_fit(x, lambda x, t: -(t[0] + t[1]) * x, [1.0, 1.0], linear=True)
    with pytest.raises(ValueError, match="returned shape"):
        min_ksd_fit(x, lambda x, t: np.zeros((3, 1)), [1.0], linear=True)
    with pytest.raises(ValueError, match="non-finite"):
        min_ksd_fit(x, lambda x, t: np.full_like(x, np.nan), [1.0], linear=True)
    with pytest.raises(ValueError, match="score_fn raised ZeroDivisionError"):
        min_ksd_fit(x, lambda x, t: 1 / 0, [1.0])
    with pytest.raises(TypeError, match="score_fn must be a callable"):
        min_ksd_fit(x, -x, [1.0])
    with pytest.raises(ValueError, match="at least 3 points"):
        min_ksd_fit(x[:2], gaussian_1d_score, [1.0, 0.0])
    with pytest.raises(ValueError, match="shape"):
        min_ksd_fit(np.zeros((2, 3, 4)), gaussian_1d_score, [1.0, 0.0])
    with pytest.raises(ValueError, match="non-finite"):
        min_ksd_fit(np.array([1.0, np.nan, 2.0, 3.0]), gaussian_1d_score, [1.0, 0.0])
    with pytest.raises(ValueError, match="parameter_names"):
        min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], parameter_names=["a"])
    with pytest.raises(ValueError, match="only with linear=False"):
        min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], linear=True, bounds=[(0, 1)] * 2)
    with pytest.raises(ValueError, match="theta0"):
        min_ksd_fit(x, gaussian_1d_score, [[1.0, 0.0]])
    with pytest.raises(ValueError, match="beta"):
        min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0], beta=0.5)
    with pytest.raises(ValueError, match="score_jacobian returned shape"):
        min_ksd_fit(x, gaussian_1d_score, [1.0, 0.0],
                    score_jacobian=lambda x, t: np.zeros((50, 1, 3)))


def test_exported():
    assert steindiag.min_ksd_fit is min_ksd_fit
    assert steindiag.MinKSDFit is MinKSDFit
