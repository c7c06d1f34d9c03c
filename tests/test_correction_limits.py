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

import json
import warnings

import numpy as np
import pytest

import steindiag
from steindiag import CorrectionWarning
from steindiag.methods.corrections import SPREAD_RATIO, SPREAD_Z
from steindiag.stats.stein_moments import curvature_spread, stein_moments


def _messages(caught):
    return [str(w.message) for w in caught if issubclass(w.category, CorrectionWarning)]


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


# -- the warnings -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shrunk_draws():
    # Exact N(0, I_23) draws shrunk towards their mean by 0.8: variance 0.64 of the
    # target's in every parameter, by construction.
    return 0.8 * np.random.default_rng(6).standard_normal((4, 250, 23))


def test_shrunk_draws_warn_and_name_stein_variational(shrunk_draws):
    x = shrunk_draws
    with pytest.warns(CorrectionWarning) as caught:
        w = steindiag.stein_weights(x, score=-x)
    text = " ".join(_messages(caught))
    assert "narrower than the target" in text and "stein_variational" in text
    assert "of the variance the target's curvature implies" in text
    # Truth: by construction every parameter has 0.64 of the target's variance. In
    # d = 23 the optimal weights are nearly uniform (median Kish ESS 969 of 1000,
    # benchmarks/results/corrections_limits.md), so the weighted ratio stays near 0.64; its
    # standard error at N = 1000 is about 0.64 sqrt(2 / 1000) = 0.03, so the threshold
    # 0.75 is about 4 standard errors above it and z = (0.64 - 1) / 0.03 = -12: most
    # parameters are flagged, each with a miss probability below 1e-4.
    narrow = json.loads(w.attrs["spread_under_dispersed"])
    assert len(narrow) >= 15
    parameters = json.loads(w.attrs["parameters"])
    ratio = np.asarray(w.attrs["spread_variance_ratio"])
    assert ratio.shape == (23,)
    for name in narrow:
        k = parameters.index(name)
        assert ratio[k] <= SPREAD_RATIO and w.attrs["spread_variance_ratio_z"][k] <= -SPREAD_Z
    np.testing.assert_allclose(np.median(w.attrs["spread_variance_ratio_draws"]), 0.64,
                               atol=0.05)
    with pytest.warns(CorrectionWarning, match="narrower than the target.*stein_variational"):
        steindiag.weighted_summary(x, w)
    with pytest.warns(CorrectionWarning, match="narrower than the target.*stein_variational"):
        info = steindiag.stein_thin(x, score=-x, n_selected=300, return_info=True)
    assert json.loads(info.attrs["stein_thinning_spread_under_dispersed"])


def test_exact_and_fixable_draws_do_not_warn():
    rng = np.random.default_rng(7)
    exact = rng.standard_normal((4, 250, 10))
    wide = 1.25 * rng.standard_normal((4, 250, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorrectionWarning)
        w_exact = steindiag.stein_weights(exact, score=-exact)
        w_wide = steindiag.stein_weights(wide, score=-wide)
        steindiag.weighted_summary(exact, w_exact)
        steindiag.stein_thin(wide, score=-wide, n_selected=100)
    # Truth: exact draws (ratio 1; its standard error at N = 1000 is about
    # sqrt(2 / 1000) = 0.045, so 0.75 is 5.6 standard errors below: probability below
    # 1e-8 per parameter), and draws 1.25 times too wide in d = 2, which the weights
    # bring back (median weighted variance ratio 1.00, and no warning, over the runs of
    # benchmarks/results/corrections_limits.md).
    assert json.loads(w_exact.attrs["spread_under_dispersed"]) == []
    np.testing.assert_allclose(w_wide.attrs["spread_variance_ratio_draws"], 1.5625, rtol=0.15)
    np.testing.assert_allclose(w_wide.attrs["spread_variance_ratio"], 1.0, atol=0.1)


def test_thinning_that_loses_spread_records_it_without_warning():
    x = np.random.default_rng(8).standard_normal((4, 250, 23))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorrectionWarning)
        info = steindiag.stein_thin(x, score=-x, n_selected=100, return_info=True)
    lost = json.loads(info.attrs["stein_thinning_spread_lost"])
    assert lost and json.loads(info.attrs["stein_thinning_spread_under_dispersed"]) == []
    # Truth: the thinned points' own sample variance (the target's is 1 in every
    # parameter): greedy Stein thinning of 100 points in d = 23 keeps draws near the mode.
    # Exact draws are valid, so this is recorded, not warned about.
    parameters = json.loads(info.attrs["stein_thinning_parameters"])
    points = np.asarray(info.thinned)[0]
    for name in lost:
        assert points[:, parameters.index(name)].var() < 0.85


@pytest.mark.parametrize("scale, warns", [(0.5, True), (1.0, False)])
def test_half_width_gaussian_draws_warn_and_exact_draws_do_not(scale, warns):
    # Truth by construction: draws N(0, scale^2 I_5) scored against N(0, I_5). With
    # scale 0.5 every parameter has a quarter of the target's variance, which no
    # weighting of 1000 draws in d = 5 can restore (beyond 2 sd of the draws there are
    # about 45 of them per parameter); the ratio's standard error is about
    # 0.25 sqrt(2 / 1000) = 0.011, so z is about -60. With scale 1 the draws are exact:
    # the ratio is 1 with standard error 0.045 and the threshold 0.75 is 5.6 standard
    # errors away (probability below 1e-7 per parameter).
    x = scale * np.random.default_rng(9).standard_normal((4, 250, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = steindiag.stein_weights(x, score=-x)
        steindiag.weighted_summary(x, w)
        info = steindiag.stein_thin(x, score=-x, n_selected=100, return_info=True)
    messages = _messages(caught)
    if not warns:
        assert messages == []
        assert json.loads(w.attrs["spread_under_dispersed"]) == []
        np.testing.assert_allclose(w.attrs["spread_variance_ratio_draws"], 1.0, atol=0.2)
    else:
        assert len(messages) == 3
        assert messages[0].startswith("stein_weights cannot be trusted")
        assert messages[1].startswith("weighted_summary cannot be trusted")
        assert messages[2].startswith("stein_thin cannot be trusted")
        assert all("narrower than the target" in m and "stein_variational" in m
                   for m in messages)
        assert sorted(json.loads(w.attrs["spread_under_dispersed"])) == [f"x[{k}]"
                                                                         for k in range(5)]
        assert json.loads(info.attrs["stein_thinning_spread_under_dispersed"])
        # The unweighted ratio is the sample variance over 1 (closed form for a
        # Gaussian target): 0.25 up to its standard error.
        np.testing.assert_allclose(w.attrs["spread_variance_ratio_draws"],
                                   x.reshape(-1, 5).var(axis=0), rtol=1e-9)
