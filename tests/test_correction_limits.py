"""Corrections that know their limits (issue 36, point 5): weights and thinning say when
the draws are narrower than the target, which no reweighting can fix.

Sources of truth (each assertion names its own):
- closed forms: for draws N(0, c^2) scored against N(0, 1), the Stein spread moment is c^2;
  for any draws scored against a Gaussian N(0, Sigma), the Stein matrix
  M = -sum_i w_i x~_i s~_i^T equals C Sigma^-1 (C the draws' weighted covariance), so the
  variance the curvature implies, (M^-1 C)_kk, is Sigma_kk exactly;
- a slow plain-NumPy loop over the draws for the weighted moments;
- the spread of the estimates over independent replicates, for the standard errors;
- draws made narrower (or wider) than the target by construction, and the sample variance
  of the thinned points computed directly.
"""

import numpy as np
import pytest

from steindiag.stats.stein_moments import curvature_spread, stein_moments


# -- the weighted spread moment ---------------------------------------------------------


def test_weighted_spread_moment_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 40, 2)) * [1.0, 2.0]
    s = -x + 0.3 * np.sin(x)
    w = rng.exponential(size=(3, 40))
    m = stein_moments(x, s, pooled=True, weights=w)
    # Truth: the definition written out draw by draw, -sum_i w_i (x_i - xbar_w) s_i with
    # w normalised over all draws, and sum_i w_i s_i.
    flat_x, flat_s, flat_w = x.reshape(-1, 2), s.reshape(-1, 2), w.reshape(-1) / w.sum()
    xbar = sum(flat_w[i] * flat_x[i] for i in range(120))
    spread = -sum(flat_w[i] * (flat_x[i] - xbar) * flat_s[i] for i in range(120))
    location = sum(flat_w[i] * flat_s[i] for i in range(120))
    np.testing.assert_allclose(m.spread[0], spread, rtol=1e-12)
    np.testing.assert_allclose(m.location[0], location, rtol=1e-12, atol=1e-15)
    # Per chain: each chain's weights normalised within the chain.
    per_chain = stein_moments(x, s, weights=w)
    wc = w[1] / w[1].sum()
    expected = -np.sum(wc[:, None] * (x[1] - wc @ x[1]) * s[1], axis=0)
    np.testing.assert_allclose(per_chain.spread[1], expected, rtol=1e-12)
    # Equal weights: the unweighted moments and their standard errors.
    equal = stein_moments(x, s, pooled=True, weights=np.ones((3, 40)))
    plain = stein_moments(x, s, pooled=True)
    np.testing.assert_allclose(equal.spread, plain.spread, rtol=1e-12)
    np.testing.assert_allclose(equal.spread_se, plain.spread_se, rtol=1e-10)


@pytest.mark.parametrize("c", [0.8, 1.0, 1.3])
def test_weighted_spread_moment_of_scaled_gaussian_draws_is_c_squared(c):
    rng = np.random.default_rng(1)
    x = c * rng.standard_normal((4, 500, 3))
    w = rng.uniform(0.5, 1.5, size=(4, 500))     # weights unrelated to the draws
    m = stein_moments(x, -x, pooled=True, weights=w)
    # Truth: closed form. For x ~ N(0, c^2) and the score -x of N(0, 1),
    # -E[(x - Ex) s] = Var x = c^2; the weights are independent of the draws, so the
    # weighted estimate is consistent. Its error is about c^2 sqrt(2 / ESS) with
    # ESS ~ 2000 (0.03 c^2); 5 standard errors: a miss has probability below 1e-6.
    np.testing.assert_array_less(np.abs(m.spread[0] - c**2), 5 * m.spread_se[0])
    np.testing.assert_allclose(m.spread_se[0], c**2 * np.sqrt(2 / 2000), rtol=0.35)


def test_weighted_standard_errors_match_the_spread_over_replicates():
    # Truth: the sd of the estimates over 300 independent replicates (independent draws
    # of a non-Gaussian q, random weights): the standard errors must match it. With 300
    # replicates the sd is known to about 1 / sqrt(600) = 4 %; tolerance 20 %.
    rng = np.random.default_rng(2)
    rho = 0.6
    precision = np.linalg.inv((1 - rho) * np.eye(3) + rho)
    moments, moment_se, ratios, ratio_se = [], [], [], []
    for _ in range(300):
        z = rng.standard_normal((1, 600, 3))
        x = z / np.sqrt(np.diag(precision)) + 0.3 * (z**2 - 1)
        s = -x @ precision
        w = rng.exponential(size=(1, 600))
        m = stein_moments(x, s, pooled=True, weights=w)
        c = curvature_spread(x, s, w)
        moments.append(m.spread[0]), moment_se.append(m.spread_se[0])
        ratios.append(c.ratio), ratio_se.append(c.ratio_se)
    np.testing.assert_allclose(np.mean(moment_se, axis=0), np.std(moments, axis=0), rtol=0.2)
    np.testing.assert_allclose(np.mean(ratio_se, axis=0), np.std(ratios, axis=0), rtol=0.2)


# -- the variance the target's curvature implies ----------------------------------------


def test_curvature_implies_the_gaussian_targets_variance_for_any_draws():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4))
    cov = a @ a.T + np.eye(4)
    precision = np.linalg.inv(cov)
    x = rng.standard_t(4, size=(2, 150, 4)) * [0.5, 1.0, 2.0, 1.0] + 0.7   # anything
    w = rng.exponential(size=(2, 150))
    c = curvature_spread(x, -(x - 0.1) @ precision, w)
    # Truth: closed form. For s = -P (x - mu), M = C P, so M^-1 C = P^-1 = Sigma exactly,
    # and the ratio is the weighted sample variance over Sigma_kk.
    flat, flat_w = x.reshape(-1, 4), w.reshape(-1) / w.sum()
    variance = flat_w @ (flat - flat_w @ flat) ** 2
    np.testing.assert_allclose(c.target_variance, np.diag(cov), rtol=1e-9)
    np.testing.assert_allclose(c.ratio, variance / np.diag(cov), rtol=1e-9)


def test_mean_field_draws_have_the_marginal_variance_ratio():
    rng = np.random.default_rng(4)
    d, rho = 6, 0.5
    cov = (1 - rho) * np.eye(d) + rho
    precision = np.linalg.inv(cov)
    x = rng.standard_normal((4, 500, d)) / np.sqrt(np.diag(precision))
    s = -x @ precision
    c = curvature_spread(x, s)
    m = stein_moments(x, s, pooled=True)
    # Truth: closed form. The mean-field Gaussian approximation of N(0, Sigma) has
    # variances 1 / P_kk: its diagonal spread moment is exactly 1 in expectation (blind),
    # while its marginal variance ratio is 1 / (P_kk Sigma_kk) = 0.54 here. The ratio's
    # standard error is about 0.54 sqrt(2 / 2000) = 0.017: 6 standard errors.
    truth = 1.0 / (np.diag(precision) * np.diag(cov))
    np.testing.assert_array_less(np.abs(c.ratio - truth), 6 * c.ratio_se)
    np.testing.assert_array_less(np.abs(m.spread[0] - 1.0), 6 * m.spread_se[0])


def test_a_parameter_that_never_moves_gets_nan_and_the_others_their_ratio():
    x = np.random.default_rng(5).standard_normal((2, 50, 2))
    x[..., 1] = 3.0                        # a parameter that never moves
    c = curvature_spread(x, -x)
    # Truth: M's second row and column are 0 (no spread): no implied variance there; the
    # first parameter's target is N(0, 1), so its ratio is its sample variance (closed
    # form above, Sigma = 1).
    assert np.isnan(c.ratio[1]) and np.isnan(c.ratio_se[1])
    np.testing.assert_allclose(c.ratio[0], x[..., 0].var(), rtol=1e-9)
    # A stuck parameter is still caught by the diagonal moment: 0 up to rounding.
    m = stein_moments(x, -x, pooled=True, weights=np.ones((2, 50)))
    assert abs(m.spread[0, 1]) < 1e-12
