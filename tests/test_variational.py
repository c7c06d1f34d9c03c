"""Tests of ``stein_variational`` (SVGD) and its kernel sums.

Sources of truth (each assertion names its own):
- tests/reference_svgd.py: SVGD written from Liu & Wang (2016) with explicit N x N
  matrices of kernel values and gradients (steps match to 1e-10), with the reference
  implementation's AdaGrad step and with the default rule (Hessian-whitened coordinates,
  Adam, backtracking and stopping on the recorded KSD);
- closed-form moments of the targets: a correlated 2-D Gaussian, and a banana (twisted
  Gaussian) x1 = z1, x2 = z2 + b (z1^2 - 1), z ~ N(0, I), whose moments follow from
  those of z1 (E z^4 = 3, E z^6 = 15, E z^8 = 105); tolerances are Monte Carlo standard
  errors of N exact i.i.d. draws, computed from the same closed forms;
- tests/reference.py: the slow IMQ KSD for the KSD curve;
- hand-written scores of a PyMC model in its unconstrained space.
"""

import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag.engine import svgd as _svgd_kernels
from steindiag.methods.variational import average_hessian, converged, median_bandwidth
from steindiag.variational import SteinVariational, stein_variational

sys.path.insert(0, str(Path(__file__).parent))
from reference import ksd_v2, standardize_reference  # noqa: E402
from reference_svgd import (median_bandwidth_reference, svgd_adam_reference,  # noqa: E402
                            svgd_reference)

MAD_TO_SD = 1.482602218505602


def robust_scale(x):
    """1.4826 * MAD per coordinate, written out here (the ``standardize`` scale)."""
    return MAD_TO_SD * np.median(np.abs(x - np.median(x, axis=0)), axis=0)


# -- targets with closed-form moments ---------------------------------------------------

MU = np.array([1.0, -1.0])
SD = np.array([1.0, 2.0])
RHO = 0.7
SIGMA = np.array([[SD[0] ** 2, RHO * SD[0] * SD[1]], [RHO * SD[0] * SD[1], SD[1] ** 2]])
PRECISION = np.linalg.inv(SIGMA)


def gaussian_score(x):
    return -(x - MU) @ PRECISION


BANANA_B = 0.5


def banana_score(x):
    """grad log of N(x1; 0, 1) N(x2 - b (x1^2 - 1); 0, 1)."""
    x1, x2 = x[:, 0], x[:, 1]
    residual = x2 - BANANA_B * (x1**2 - 1.0)
    return np.stack([-x1 + 2.0 * BANANA_B * x1 * residual, -residual], axis=1)


def correlated_start(seed, n=60, d=2):
    rng = np.random.default_rng(seed)
    mixing = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    return rng.standard_normal((n, d)) @ mixing + 0.5


def linear_score(x):
    """Score of N(0.2, Sigma) with a fixed non-diagonal precision (any dimension)."""
    d = x.shape[1]
    precision = np.eye(d) + 0.3 * (np.ones((d, d)) - np.eye(d)) / d
    return -(x - 0.2) @ precision


# -- the kernel sums ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", [_svgd_kernels.RBF, _svgd_kernels.IMQ])
@pytest.mark.parametrize("d", [1, 3, 6])
def test_kernel_sums_match_explicit_matrices(kind, d):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((300, d)) * 2.0 + 3.0
    values = rng.standard_normal((300, 4))
    a = rng.uniform(0.3, 2.0, d)
    c2, beta = (1.0, -0.5) if kind == _svgd_kernels.RBF else (0.7, -0.3)
    u = x[:, None, :] - x[None, :, :]  # u[i, j] = x_i - x_j
    r2 = np.einsum("ijk,k,ijk->ij", u, a, u)
    if kind == _svgd_kernels.RBF:
        f, fprime = np.exp(-r2), -np.exp(-r2)
    else:
        f, fprime = (c2 + r2) ** beta, beta * (c2 + r2) ** (beta - 1)
    # Truth: sum_j f v_j and sum_j 2 f' a o (x_j - x_i), from the explicit matrices.
    expected_values = f @ values
    expected_grad = np.einsum("ij,ijk->ik", 2 * fprime, -u) * a
    for method in ("fused", "gemm"):
        got_values, got_grad = _svgd_kernels.kernel_vector_sums(
            x, values, a, kind=kind, c2=c2, beta=beta, method=method)
        np.testing.assert_allclose(got_values, expected_values, rtol=1e-12,
                                   atol=1e-12 * np.abs(expected_values).max())
        np.testing.assert_allclose(got_grad, expected_grad, rtol=1e-11,
                                   atol=1e-12 * np.abs(expected_grad).max())
    # The SVGD numerator (values = scores, m = d): the RBF's folded products and the
    # IMQ's pass over pairs i <= j, against the same explicit matrices.
    scores = rng.standard_normal((300, d))
    expected = f @ scores + expected_grad
    for method in ("fused", "gemm"):
        got = _svgd_kernels.kernel_vector_sums(x, scores, a, kind=kind, c2=c2, beta=beta,
                                               method=method, combine=True)
        np.testing.assert_allclose(got, expected, rtol=1e-11,
                                   atol=1e-12 * np.abs(expected).max())


def test_kernel_sums_do_not_depend_on_the_number_of_threads():
    rng = np.random.default_rng(3)
    saved = numba.get_num_threads()
    for d, method, kind in ((2, "fused", _svgd_kernels.RBF), (7, "gemm", _svgd_kernels.RBF),
                            (7, "gemm", _svgd_kernels.IMQ)):
        # 1300 points: 6 tiles, so the IMQ's round-robin rounds hold several pairs.
        x = rng.standard_normal((1300, d))
        v = rng.standard_normal((1300, d))
        results = []
        for threads in (1, max(2, saved), 3):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            try:
                results.append(_svgd_kernels.kernel_vector_sums(
                    x, v, 0.7, kind=kind, method=method, combine=True))
            finally:
                numba.set_num_threads(saved)
        # Truth: each row sums its terms in a fixed order (one task per row, or the
        # rounds' order), so bitwise equality.
        for other in results[1:]:
            np.testing.assert_array_equal(other, results[0])


@pytest.mark.parametrize("n", [2, 3, 60, 501])
def test_median_bandwidth(n):
    x = np.random.default_rng(n).standard_normal((n, 3))
    if n <= 500:
        # Truth: median over the explicit matrix of squared distances, pairs i < j.
        assert median_bandwidth(x) == pytest.approx(median_bandwidth_reference(x), rel=1e-13)
    else:
        sub = x[np.linspace(0, n - 1, 500).astype(int)]
        # Truth: the documented subsample of 500 evenly spaced particles, log(N + 1) of all.
        expected = median_bandwidth_reference(sub) * np.log(501) / np.log(n + 1)
        assert median_bandwidth(x) == pytest.approx(expected, rel=1e-13)


# -- SVGD against the slow reference ------------------------------------------------------


@pytest.mark.parametrize("kernel", ["rbf", "imq"])
@pytest.mark.parametrize("standardize", [True, False])
@pytest.mark.parametrize("d, method", [(2, "auto"), (5, "auto"), (5, "fused"), (2, "gemm")])
def test_matches_reference_step_by_step(kernel, standardize, d, method):
    x0 = correlated_start(d, n=60, d=d)
    # The reference implementation's options: AdaGrad with momentum, step size annealed
    # geometrically (step_decay=10), per-coordinate scales or none, no stopping rule.
    res = stein_variational(x0, score=linear_score, n_steps=40, step_size=0.05,
                            step_rule="adagrad", step_decay=10.0, svgd_kernel=kernel,
                            svgd_preconditioner="standardize" if standardize else "identity",
                            tol=None, method=method, keep="last")
    scale = robust_scale(x0) if standardize else None
    expected, bandwidths = svgd_reference(x0, linear_score, 40, 0.05, kernel=kernel,
                                          scale=scale, step_decay=10.0)
    # Truth: the explicit-matrix reference; the bandwidth of every step depends on the
    # particles of that step, so matching all 40 checks the path step by step.
    np.testing.assert_allclose(res.bandwidth.values, bandwidths, rtol=1e-10)
    np.testing.assert_allclose(res.draws, expected, rtol=0, atol=1e-10)
    assert not np.allclose(res.draws, x0, atol=0.1)  # the particles did move


def test_fixed_bandwidth_and_nonlinear_score_match_reference():
    x0 = correlated_start(7, n=50)
    res = stein_variational(x0, score=banana_score, n_steps=30, step_size=0.02,
                            bandwidth=0.8, svgd_preconditioner="identity", svgd_kernel="rbf",
                            step_rule="adagrad", step_decay=None, keep="last")
    expected, _ = svgd_reference(x0, banana_score, 30, 0.02, bandwidth=0.8)
    # Truth: the explicit-matrix reference with h fixed.
    np.testing.assert_allclose(res.draws, expected, rtol=0, atol=1e-10)
    assert np.all(res.bandwidth.values == 0.8)


@pytest.mark.parametrize("target, n, step_size, n_steps, whiten, expected", [
    ("banana", 60, 0.5, 200, True, ("converged", True)),    # backtracks, then stops
    ("linear", 80, 0.03, 150, True, ("max_steps", False)),  # still improving at the end
    ("banana", 60, 0.1, 200, False, None),
])
def test_default_rule_matches_reference_step_by_step(target, n, step_size, n_steps, whiten,
                                                     expected):
    score = banana_score if target == "banana" else linear_score
    x0 = correlated_start(4, n=n)
    res = stein_variational(x0, score=score, n_steps=n_steps, step_size=step_size,
                            svgd_preconditioner="hessian" if whiten else "standardize",
                            keep="last")
    x, steps, ksd_values, floors, backtracks, stopped = svgd_adam_reference(
        x0, score, n_steps, step_size, whiten=whiten)
    # Truth: the slow reference of the documented rule (explicit matrices, least-squares
    # Hessian, slow KSD): the same record, the same decisions, the same particles.
    np.testing.assert_array_equal(res.ksd["step"].values, steps)
    np.testing.assert_allclose(res.ksd.values, ksd_values, rtol=1e-10)
    np.testing.assert_allclose(res.ksd_iid.values, floors, rtol=1e-10)
    np.testing.assert_allclose(res.draws, x, rtol=0, atol=1e-10)
    assert res.attrs["svgd_backtracks"] == backtracks
    assert res.attrs["svgd_stop_reason"] == ("converged" if stopped else "max_steps")
    assert res.attrs["svgd_steps_run"] == steps[-1] == res.bandwidth.sizes["step"]
    assert res.attrs["svgd_preconditioner_used"] == ("hessian" if whiten else "standardize")
    if expected is not None:
        reason, backtracked = expected
        assert res.attrs["svgd_stop_reason"] == reason
        assert (backtracks > 0) == backtracked


def _check_stopping_rule(res, tol=0.01, patience=50):
    """The documented rule, read off the recorded curve: at the last recorded step t the
    lowest KSD is above (1 - tol) times the lowest up to t - patience; at no earlier record
    from step patience on was it."""
    steps, values = res.ksd["step"].values, res.ksd.values

    def stops_at(i):
        earlier = values[: i + 1][steps[: i + 1] <= steps[i] - patience]
        return steps[i] >= patience and values[: i + 1].min() > (1 - tol) * earlier.min()

    assert stops_at(len(steps) - 1)
    assert not any(stops_at(i) for i in range(len(steps) - 1))


def test_stopping_rule_stops_a_converged_run():
    # Exact draws of the target: SVGD has little to do, so the KSD soon stops falling.
    x = np.random.default_rng(12).standard_normal((300, 3))
    res = stein_variational(x, score=lambda z: -z, n_steps=500)
    assert res.attrs["svgd_stop_reason"] == "converged"
    assert res.attrs["svgd_steps_run"] < 500
    assert res.ksd["step"].values[-1] == res.attrs["svgd_steps_run"]
    assert res.bandwidth.sizes["step"] == res.attrs["svgd_steps_run"]
    # Truth: the rule as documented, applied to the recorded curve.
    _check_stopping_rule(res)
    assert "converged" in repr(res)


def test_runs_to_n_steps_without_a_tolerance_or_while_improving():
    x = 0.5 + 2.0 * np.random.default_rng(13).standard_normal((200, 2))
    res = stein_variational(x, score=lambda z: -z, n_steps=120, tol=None)
    assert res.attrs["svgd_stop_reason"] == "max_steps"
    assert res.attrs["svgd_steps_run"] == 120 and res.ksd["step"].values[-1] == 120
    # Far from the target (N(0.5, 4 I) against N(0, I)) and stopped after 60 steps,
    # still improving: the rule has not fired.
    short = stein_variational(x, score=lambda z: -z, n_steps=60)
    assert short.attrs["svgd_stop_reason"] == "max_steps"
    assert short.attrs["svgd_steps_run"] == 60
    # Truth: n_steps and tol only decide when to stop, not the steps before.
    np.testing.assert_array_equal(short.ksd.values, res.ksd.values[: short.ksd.size])


def test_stopping_rule_on_constructed_curves():
    steps = np.arange(0, 201, 10)

    def first_stop(values, tol=0.01, patience=50):
        for i in range(steps.size):
            if converged(steps[: i + 1], values[: i + 1], tol, patience):
                return int(steps[i])
        return None

    # Truth by construction, from the rule's definition (the lowest KSD fell by less than
    # tol over the last patience steps):
    # - falling by 2 % per record (10 steps), i.e. far more than 1 % per 50 steps: never;
    assert first_stop(0.98 ** np.arange(steps.size)) is None
    # - flat from the start: at the first record at least patience steps in;
    assert first_stop(np.ones(steps.size)) == 50
    # - falling 5 % per record to step 100, then rising (steps too large): the lowest is
    #   at step 100, so the rule fires 50 steps later, not before;
    falling_then_rising = np.where(steps <= 100, 0.95 ** (steps / 10),
                                   0.95 ** 10 * 1.1 ** ((steps - 100) / 10))
    assert first_stop(falling_then_rising) == 150
    # - falling 0.5 % per record (2.5 % per 50 steps) stops with tol=0.05, not 0.01;
    slow = 0.995 ** np.arange(steps.size)
    assert first_stop(slow, tol=0.05) == 50 and first_stop(slow) is None
    # - tol=None never stops.
    assert first_stop(np.ones(steps.size), tol=None) is None


def test_average_hessian_is_the_precision_of_a_gaussian_target():
    rng = np.random.default_rng(21)
    d = 6
    a = rng.standard_normal((d, d))
    precision = a @ a.T + 0.1 * np.eye(d)
    mean = rng.standard_normal(d)
    # Any non-degenerate draws (here uniform, not Gaussian, and far from the target).
    z = rng.uniform(-3.0, 5.0, size=(50, d))
    # Truth: for s(z) = -P (z - m) the least-squares fit of s on z is exact, so
    # -Cov(s, z) Cov(z)^-1 = P whatever the draws (closed form).
    np.testing.assert_allclose(average_hessian(z, -(z - mean) @ precision), precision,
                               rtol=1e-9, atol=1e-9 * np.abs(precision).max())


def test_adam_first_step_moves_every_coordinate_by_the_step_size():
    x0 = correlated_start(22, n=40, d=3)
    res = stein_variational(x0, score=linear_score, n_steps=1, step_size=0.07,
                            svgd_preconditioner="identity", tol=None, keep="last")
    # Truth by construction: after one step Adam's bias-corrected averages are phi and
    # phi^2, so the move is step_size * phi / (1e-8 + |phi|) = step_size * sign(phi) in
    # every coordinate of every particle (|phi| >> 1e-8 here).
    np.testing.assert_allclose(np.abs(res.draws - x0), 0.07, rtol=1e-6)


@pytest.mark.parametrize("step_size", [0.3, 3.0])
def test_step_sizes_far_above_the_default_need_no_tuning(step_size):
    rng = np.random.default_rng(23)
    n, d = 300, 3
    x0 = 0.5 + 0.5 * rng.standard_normal((n, d))   # N(0.5, 0.25 I) against N(0, I)
    res = stein_variational(x0, score=lambda z: -z, step_size=step_size)
    x = res.draws
    # 10 and 100 times the default: Adam's steps shrink as phi falls, so the run still
    # settles and stops by the rule. Truth: N(0, I)'s moments (closed form); tolerances
    # 3 Monte Carlo standard errors of n exact draws (mean 1/sqrt(n), variance
    # sqrt(2/(n-1))). Measured: means within 0.001, variances 0.96.
    assert res.attrs["svgd_stop_reason"] == "converged"
    assert np.all(np.abs(x.mean(axis=0)) < 3 / np.sqrt(n))
    assert np.all(np.abs(np.var(x, axis=0, ddof=1) - 1) < 3 * np.sqrt(2 / (n - 1)))
    assert res.ksd_final < 0.2 * res.ksd_initial


def _scaled_gaussian(seed, d=5, n=400, condition=1e3):
    """A correlated Gaussian in units from 1e-3 to 1e3 (condition number 1e3 in its own
    correlations) and a mean-field start: N(m, diag(1 / diag(P))), as ADVI's fixed point."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((d, d)))
    units = np.logspace(-3, 3, d)
    covariance = ((rotation * np.logspace(0, np.log10(condition), d)) @ rotation.T
                  * np.outer(units, units))
    precision = np.linalg.inv(covariance)
    mean = units * rng.standard_normal(d)
    start = mean + rng.standard_normal((n, d)) / np.sqrt(np.diag(precision))
    return start, mean, covariance, precision


@pytest.mark.parametrize("seed", [0, 1])
def test_default_step_needs_no_tuning_across_scales(seed):
    x0, mean, covariance, precision = _scaled_gaussian(seed)
    res = stein_variational(x0, score=lambda x: -(x - mean) @ precision)
    x, n = res.draws, x0.shape[0]
    sd = np.sqrt(np.diag(covariance))
    correlation = covariance / np.outer(sd, sd)
    # The start is far off: variances 1 % - 25 % of the target's (not vacuous).
    assert np.all(np.var(x0, axis=0) < 0.3 * np.diag(covariance))
    # Truth: E x = m, Var x_k = S_kk, Corr = S_kl / (sd_k sd_l) (the target's closed form);
    # tolerances: 3 Monte Carlo standard errors of n exact draws (mean sd/sqrt(n), variance
    # ratio sqrt(2/(n-1)), correlation (1 - rho^2)/sqrt(n) <= 1/sqrt(n)). Measured on
    # seeds 0-3: variances 6-7 % low (SVGD's bias at n = 400, d = 5, within one standard
    # error), correlations within 0.007; with svgd_preconditioner="standardize" the same
    # runs leave variances 14-87 % low.
    assert np.all(np.abs(x.mean(axis=0) - mean) < 3 * sd / np.sqrt(n))
    assert np.all(np.abs(np.var(x, axis=0, ddof=1) / np.diag(covariance) - 1)
                  < 3 * np.sqrt(2 / (n - 1)))
    assert np.abs(np.corrcoef(x.T) - correlation).max() < 3 / np.sqrt(n)
    assert res.attrs["svgd_stop_reason"] == "converged"


def test_svgd_is_equivariant_to_rescaling_coordinates():
    x0, mean, covariance, precision = _scaled_gaussian(3, d=3, n=150)
    units = np.array([1e-4, 1.0, 1e4])

    def score(x):
        return -(x - mean) @ precision

    res = stein_variational(x0, score=score, n_steps=120)
    scaled = stein_variational(x0 * units, score=lambda y: score(y / units) / units,
                               n_steps=120)
    # Truth: y = units * x is a change of variables that the robust scales undo exactly,
    # so the same particles (to rounding), the same KSD curve and the same decisions.
    np.testing.assert_allclose(scaled.draws / units, res.draws, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(scaled.ksd.values, res.ksd.values, rtol=1e-8)
    assert scaled.attrs["svgd_steps_run"] == res.attrs["svgd_steps_run"]


def test_results_are_deterministic_and_do_not_depend_on_threads():
    rng = np.random.default_rng(14)
    x = 0.3 + 1.5 * rng.standard_normal((2100, 3))   # N >= 2000: the steps use all threads
    saved = numba.get_num_threads()
    results = []
    for threads in (saved, 1, saved):
        numba.set_num_threads(threads)
        try:
            results.append(stein_variational(x, score=linear_score, n_steps=12, ksd_every=4))
        finally:
            numba.set_num_threads(saved)
    # Truth: every sum runs in a fixed order (one task per row), so bit-for-bit equality.
    for other in results[1:]:
        np.testing.assert_array_equal(other.draws, results[0].draws)
        np.testing.assert_array_equal(other.ksd.values, results[0].ksd.values)


def test_hessian_preconditioner_falls_back_with_few_particles():
    x = correlated_start(5, n=12, d=5)   # 12 <= 2 (d + 1): too few for the regression
    res = stein_variational(x, score=linear_score, n_steps=3)
    assert res.attrs["svgd_preconditioner"] == "hessian"
    assert res.attrs["svgd_preconditioner_used"] == "standardize"


def test_ksd_curve_matches_reference_ksd():
    x0 = correlated_start(11, n=80)
    res = stein_variational(x0, score=linear_score, n_steps=20, step_size=0.05, ksd_every=7,
                            step_decay=None, keep="last")
    assert list(res.ksd["step"].values) == [0, 7, 14, 20]
    scale_from = x0  # the KSD preconditioner is fixed from the initial draws
    for step, x in ((0, x0), (20, res.draws)):
        z, sz = standardize_reference(scale_from, x, linear_score(x))
        # Truth: the slow V-statistic of tests/reference.py, standardised by the
        # initial draws' robust scale, A = I.
        expected = np.sqrt(ksd_v2(z, sz, np.eye(2)))
        assert float(res.ksd.sel(step=step)) == pytest.approx(expected, rel=1e-10)
        floor = np.sqrt(np.mean(2.0 + np.sum(sz**2, axis=1)) / len(z))  # k_p(x,x) = d + |s|^2
        assert float(res.ksd_iid.sel(step=step)) == pytest.approx(floor, rel=1e-10)
    assert float(res.ksd[-1]) < 0.5 * float(res.ksd[0])


# -- moments against closed forms ---------------------------------------------------------

N_PARTICLES = 200


def test_gaussian_moments_after_svgd():
    rng = np.random.default_rng(20)
    # A mean-field, under-dispersed start (as ADVI gives): sd 0.6 of the truth, no correlation.
    x0 = MU + 0.6 * SD * rng.standard_normal((N_PARTICLES, 2))
    res = stein_variational(x0, score=gaussian_score, n_steps=1000, ksd_every=100)
    x = res.draws
    n = N_PARTICLES
    # Monte Carlo standard errors of n exact draws (closed forms for a Gaussian).
    se_mean = SD / np.sqrt(n)
    se_var = SD**2 * np.sqrt(2.0 / (n - 1))
    se_cov = np.sqrt((SIGMA[0, 0] * SIGMA[1, 1] + SIGMA[0, 1] ** 2) / n)
    start_cov = np.cov(x0.T)[0, 1]
    assert abs(start_cov - SIGMA[0, 1]) > 5 * se_cov  # the start is far off: not vacuous
    # Truth: E x = MU, Cov x = SIGMA; the particles do at least as well as 200 exact
    # draws at the 2-sigma level (measured with the reference SVGD on 8 seeds: largest
    # error 0.44 standard errors, variances low by about 4%, the known SVGD bias).
    np.testing.assert_array_less(np.abs(x.mean(axis=0) - MU), 2 * se_mean)
    np.testing.assert_array_less(np.abs(np.var(x, axis=0, ddof=1) - SD**2), 2 * se_var)
    assert abs(np.cov(x.T)[0, 1] - SIGMA[0, 1]) < 2 * se_cov


def test_banana_moments_after_svgd():
    rng = np.random.default_rng(21)
    # Start: the moment-matched Gaussian N(0, diag(1, 1 + 2 b^2)), which has no twist.
    var2 = 1.0 + 2.0 * BANANA_B**2
    x0 = np.stack([rng.standard_normal(N_PARTICLES),
                   np.sqrt(var2) * rng.standard_normal(N_PARTICLES)], axis=1)
    res = stein_variational(x0, score=banana_score, n_steps=1000, ksd_every=100)
    x = res.draws
    n = N_PARTICLES

    def twist(points):
        # Regression slope of x2 on w = x1^2 - 1: Cov(x2, w) / Var(w) = 2 b / 2 = b.
        w = points[:, 0] ** 2 - 1.0
        return np.cov(points[:, 1], w)[0, 1] / np.var(w, ddof=1)

    # Monte Carlo standard errors of n exact draws, from E z^4 = 3, E z^8 = 105:
    # mean: sd/sqrt(n); Var x1: sqrt(2/n); Var x2: sqrt((E x2^4 - var2^2)/n) with
    # E x2^4 = 3 + 12 b^2 + 60 b^4; slope: residual sd 1 over sd(w) sqrt(n) = 1/sqrt(2n).
    fourth = 3.0 + 12.0 * BANANA_B**2 + 60.0 * BANANA_B**4
    se_mean = np.sqrt([1.0, var2] / np.array(n))
    se_var1 = np.sqrt(2.0 / (n - 1))
    se_var2 = np.sqrt((fourth - var2**2) / n)
    se_twist = 1.0 / np.sqrt(2.0 * n)
    assert abs(twist(x0) - BANANA_B) > 5 * se_twist  # the start is far off: not vacuous
    # Truth: E x = 0, Var x1 = 1, Var x2 = 1 + 2 b^2, twist b (closed forms); 2 MC
    # standard errors (the reference SVGD on 8 seeds: largest error 0.77 of them).
    np.testing.assert_array_less(np.abs(x.mean(axis=0)), 2 * se_mean)
    assert abs(np.var(x[:, 0], ddof=1) - 1.0) < 2 * se_var1
    assert abs(np.var(x[:, 1], ddof=1) - var2) < 2 * se_var2
    assert abs(twist(x) - BANANA_B) < 2 * se_twist
    assert float(res.ksd[-1]) < 0.3 * float(res.ksd[0])


# -- input and output types ---------------------------------------------------------------


def test_array_shapes_round_trip(capsys):
    x3 = correlated_start(1, n=40).reshape(2, 20, 2)
    res = stein_variational(x3, score=linear_score, n_steps=3)
    shown = stein_variational(x3, score=linear_score, n_steps=3, progress=True)
    capsys.readouterr()
    np.testing.assert_array_equal(shown.draws, res.draws)  # a progress bar changes nothing
    assert isinstance(res, SteinVariational)
    assert res.draws.shape == (2, 20, 2)
    res2 = stein_variational(x3.reshape(40, 2), score=linear_score, n_steps=3)
    # Truth: chains are only labels; the 40 particles are the same set either way.
    np.testing.assert_allclose(res2.draws, res.draws.reshape(40, 2), rtol=0, atol=1e-12)
    assert res.ksd.dims == ("step",) and res.bandwidth.sizes["step"] == 3
    assert res.attrs["svgd_n_particles"] == 40


def test_dataset_and_datatree_with_callable():
    rng = np.random.default_rng(5)
    posterior = xr.Dataset(
        {"a": (("chain", "draw"), rng.standard_normal((2, 30))),
         "b": (("chain", "draw", "b_dim"), rng.standard_normal((2, 30, 2)) + 1.0)},
        coords={"chain": [0, 1], "draw": np.arange(100, 130), "b_dim": ["p", "q"]},
    )
    flat = np.concatenate([posterior["a"].values[..., None], posterior["b"].values], axis=2)
    res = stein_variational(posterior, score=linear_score, n_steps=5)
    expected = stein_variational(flat, score=linear_score, n_steps=5).draws
    assert isinstance(res.draws, xr.Dataset)
    # Truth: the same particles as the array path, written back in each variable's shape.
    np.testing.assert_allclose(res.draws["a"].values, expected[..., 0], atol=1e-12)
    np.testing.assert_allclose(res.draws["b"].values, expected[..., 1:], atol=1e-12)
    assert list(res.draws["b_dim"].values) == ["p", "q"]
    assert list(res.draws["draw"].values) == list(range(100, 130))
    assert res.draws.attrs["stein_variational_n_steps"] == 5

    tree = xr.DataTree.from_dict({
        "posterior": posterior,
        "sample_stats": xr.Dataset({"lp": (("chain", "draw"), np.zeros((2, 30)))}),
        "observed_data": xr.Dataset({"y": ("obs", np.arange(3.0))}),
    })
    with pytest.warns(UserWarning, match=r"\['b'\] were not moved"):
        out = stein_variational(tree, score=lambda z: -z, var_names=["a"], n_steps=3,
                                coords={"draw": slice(100, 119)}).draws
    assert isinstance(out, xr.DataTree)
    assert set(out.children) == {"posterior", "observed_data"}
    assert list(out["posterior"].data_vars) == ["a"]
    assert out["posterior"].sizes["draw"] == 20
    assert out["posterior"].attrs["stein_variational_dropped_groups"] == ["sample_stats"]


def test_errors():
    x = correlated_start(2, n=30)
    with pytest.raises(TypeError, match="array of scores"):
        stein_variational(x, score=-x)
    with pytest.raises(TypeError, match="score="):
        stein_variational(x)
    with pytest.raises(TypeError, match="score="):
        stein_variational(xr.Dataset({"a": (("chain", "draw"), x[:, :1].T)}))
    for kwargs, error, match in [
        ({"n_steps": 0}, ValueError, "n_steps must be a positive integer; got 0"),
        ({"n_steps": 2.0}, TypeError, "n_steps must be a positive integer; got float"),
        ({"step_size": -1.0}, ValueError, "step_size"),
        ({"svgd_kernel": "gauss"}, ValueError, "svgd_kernel must be one of"),
        ({"kernel": "rbf"}, TypeError, "kernel= was renamed svgd_kernel="),
        ({"bandwidth": "silverman"}, ValueError, "bandwidth"),
        ({"bandwidth": 0.0}, ValueError, "bandwidth"),
        ({"ksd_every": 0}, ValueError, "ksd_every"),
        ({"method": "blas"}, ValueError, "method"),
        ({"standardize": True}, TypeError, "standardize= was renamed svgd_preconditioner="),
        ({"svgd_preconditioner": "diagonal"}, ValueError, "svgd_preconditioner must be one"),
        ({"step_rule": "sgd"}, ValueError, "step_rule must be one of"),
        ({"tol": -0.1}, ValueError, "tol must be None or a finite number >= 0"),
        ({"tol": "0.01"}, TypeError, "tol must be None or a real number"),
        ({"patience": 0}, ValueError, "patience must be a positive integer"),
        ({"progress": "yes"}, TypeError, "progress"),
    ]:
        with pytest.raises(error, match=match):
            stein_variational(x, score=linear_score, **kwargs)


def test_divergence_and_coincident_particles_are_reported():
    x = correlated_start(3, n=30)

    def score_until_three(z):
        out = linear_score(z)
        out[np.abs(z).max(axis=1) > 6.0] = np.nan
        return out

    # A target whose score is finite only for |x| <= 6, and steps far too large.
    with pytest.raises(ValueError, match="reduce step_size"):
        stein_variational(x, score=score_until_three, n_steps=50, step_size=5.0,
                          svgd_preconditioner="identity")
    constant = np.tile([[0.5, 0.5]], (10, 1))
    constant[:, 0] += np.arange(10)
    with pytest.raises(ValueError, match="vary in every coordinate"):
        stein_variational(constant, score=linear_score, n_steps=2)
    mostly_one_point = np.tile([[0.5, 0.5]], (10, 1))
    mostly_one_point[:2] = [[1.0, 2.0], [-1.0, 0.0]]  # 28 of 45 pairs at distance 0
    with pytest.raises(ValueError, match="median bandwidth is 0"):
        stein_variational(mostly_one_point, score=linear_score, n_steps=2)


# -- PyMC ---------------------------------------------------------------------------------


def _normal_model(pm, y):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Deterministic("sigma2", sigma**2)
        pm.Normal("y", mu, sigma, observed=y)
    return model


def _normal_model_score(z, y):
    """grad log p(mu, t = log sigma) of the model above, Jacobian included, by hand.

    log p = -mu^2/2 - e^(2t)/2 + t + sum_i [-t - (y_i - mu)^2 e^(-2t) / 2] + const.
    """
    mu, t = z[:, 0], z[:, 1]
    resid = y[None, :] - mu[:, None]
    d_mu = -mu + resid.sum(axis=1) * np.exp(-2 * t)
    d_t = -np.exp(2 * t) + 1.0 - y.size + (resid**2).sum(axis=1) * np.exp(-2 * t)
    return np.stack([d_mu, d_t], axis=1)


def test_pymc_model_moves_unconstrained_draws_and_maps_back():
    pm = pytest.importorskip("pymc")
    rng = np.random.default_rng(8)
    y = rng.normal(0.5, 0.8, size=20)
    model = _normal_model(pm, y)
    mu = 0.4 + 0.3 * rng.standard_normal((2, 25))
    sigma = np.exp(np.log(0.8) + 0.2 * rng.standard_normal((2, 25)))
    posterior = xr.Dataset({"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma),
                            "sigma2": (("chain", "draw"), sigma**2)},
                           coords={"chain": [0, 1], "draw": np.arange(25)})
    groups = {"posterior": posterior,
              "sample_stats": xr.Dataset({"diverging": (("chain", "draw"),
                                                        np.zeros((2, 25), bool))}),
              "observed_data": xr.Dataset({"y": ("y_dim_0", y)})}
    containers = [xr.DataTree.from_dict(groups)]
    import arviz as az

    if int(az.__version__.split(".")[0]) < 1:  # ArviZ 0.x: InferenceData as well
        containers.append(az.InferenceData(**groups))
    flat = np.stack([mu, np.log(sigma)], axis=2)
    expected = stein_variational(flat, score=lambda z: _normal_model_score(z, y),
                                 n_steps=30, step_size=0.05).draws
    for trace in containers:
        res = stein_variational(trace, model, n_steps=30, step_size=0.05)
        out = res.draws
        assert type(out) is type(trace)
        post = out["posterior"] if isinstance(out, xr.DataTree) else out.posterior
        # Truth: SVGD on arrays with the hand-written unconstrained score.
        np.testing.assert_allclose(post["mu"].values, expected[..., 0], atol=1e-10)
        np.testing.assert_allclose(post["sigma_log__"].values, expected[..., 1], atol=1e-10)
        # Truth: sigma = exp(sigma_log__), the deterministic sigma2 = sigma^2.
        np.testing.assert_allclose(post["sigma"].values, np.exp(expected[..., 1]), rtol=1e-12)
        np.testing.assert_allclose(post["sigma2"].values, np.exp(2 * expected[..., 1]),
                                   rtol=1e-12)
        groups_out = set(out.children) if isinstance(out, xr.DataTree) else set(out.groups())
        assert groups_out == {"posterior", "observed_data"}
        assert post.attrs["stein_variational_space"] == "unconstrained"
        after = steindiag.ksd(out, model)
        # steindiag.ksd reads the moved unconstrained values back (no forward map).
        assert "posterior['sigma_log__']" in after.attrs["unconstrained_from"]
        assert float(res.ksd[-1]) < float(res.ksd[0])


def _prior_trace(pm, model, n_chain, n_draw, seed):
    """Exact prior draws of the free variables and deterministics, as a posterior DataTree."""
    variables = model.free_RVs + model.deterministics
    values = pm.draw(variables, draws=n_chain * n_draw, random_seed=seed, mode="FAST_COMPILE")
    data = {}
    for rv, value in zip(variables, values):
        value = np.asarray(value).reshape(n_chain, n_draw, *np.shape(value)[1:])
        dims = model.named_vars_to_dims.get(rv.name)
        dims = tuple(dims) if dims else tuple(f"{rv.name}_dim_{i}" for i in range(value.ndim - 2))
        data[rv.name] = (("chain", "draw", *dims), value)
    posterior = xr.Dataset(data, coords={"chain": np.arange(n_chain),
                                         "draw": np.arange(n_draw),
                                         **{k: list(v) for k, v in model.coords.items()}})
    return xr.DataTree.from_dict({"posterior": posterior})


@pytest.mark.parametrize("use_dims_module", [False, True])
def test_pymc_transforms_and_dims_round_trip(use_dims_module):
    pm = pytest.importorskip("pymc")
    coords = {"k": ["a", "b", "c"], "obs": np.arange(6)}
    y = np.linspace(-1.0, 1.0, 6)
    if use_dims_module:
        pmd = pytest.importorskip("pymc.dims")
        from pytensor.xtensor import as_xtensor

        with pm.Model(coords=coords) as model:
            mu = pmd.Normal("mu", dims="k")
            sigma = pmd.HalfNormal("sigma")
            w = pmd.Dirichlet("w", as_xtensor(np.array([2.0, 3.0, 4.0]), dims=("k",)),
                              core_dims="k")
            pmd.Deterministic("wmu", w * mu)
            pmd.Normal("y", mu=(w * mu).sum(), sigma=sigma,
                       observed=as_xtensor(y, dims=("obs",)), dims="obs")
    else:
        with pm.Model(coords=coords) as model:
            mu = pm.Normal("mu", dims="k")
            sigma = pm.HalfNormal("sigma")
            w = pm.Dirichlet("w", np.array([2.0, 3.0, 4.0]), dims="k")
            pm.Deterministic("wmu", w * mu, dims="k")
            pm.Normal("y", mu=(w * mu).sum(), sigma=sigma, observed=y, dims="obs")
    trace = _prior_trace(pm, model, 2, 20, seed=3)
    res = stein_variational(trace, model, n_steps=15, step_size=0.02)
    post = res.draws["posterior"].to_dataset()
    assert post["mu"].dims == ("chain", "draw", "k")
    assert list(post["k"].values) == ["a", "b", "c"]
    # Truth: a simplex sums to 1; the deterministic is w * mu at the moved draws.
    np.testing.assert_allclose(post["w"].sum("k").values, 1.0, rtol=1e-12)
    np.testing.assert_allclose(post["wmu"].values, (post["w"] * post["mu"]).values, rtol=1e-12)
    # Truth: mapping the constrained values forward again (steindiag's forward transform,
    # a separate graph) gives back the unconstrained draws SVGD moved.
    constrained_only = post[["mu", "sigma", "w"]]
    again = steindiag.ksd(constrained_only, model)
    stored = steindiag.ksd(res.draws, model)
    assert float(again["ksd_pooled"]) == pytest.approx(float(stored["ksd_pooled"]), rel=1e-8)
    assert "mapped by" in str(again.attrs["unconstrained_from"])
    assert "posterior['w_simplex__']" in str(stored.attrs["unconstrained_from"])
