"""Self-checks of the generators in tests/valid_chains.py (fast: well under 5 s).

Sources of truth (each assertion names its own):
- closed forms: the AR(1) chain's N(0, 1) marginal and lag-1 correlation rho; the
  banana's and mixture's moments; ULA's stationary covariance on a Gaussian, also
  solved independently as a discrete Lyapunov equation (scipy);
- finite differences of the log densities for the scores;
- Kolmogorov-Smirnov against exact distributions (scipy.stats) for the Metropolis chains'
  draws at a fixed step across many independent chains (each an exact draw of p);
- tolerances: 5 standard errors of the estimate (stated next to each assertion).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import linalg, stats

sys.path.insert(0, str(Path(__file__).parent))
import valid_chains as vc  # noqa: E402


def test_rho_for_tau_inverts_tau_for_rho():
    # Closed form: tau = (1 + rho) / (1 - rho).
    taus = np.array([1.0, 3.0, 5.7, 9.0, 19.0, 30.0])
    np.testing.assert_allclose(vc.tau_for_rho(vc.rho_for_tau(taus)), taus)
    assert vc.rho_for_tau(3.0) == pytest.approx(0.5)
    assert vc.rho_for_tau(19.0) == pytest.approx(0.9)


def test_ar1_marginal_and_lag1_correlation():
    rho = 0.7
    draws = vc.ar1_chains(4000, 20, 2, rho, rng=np.random.default_rng(0)).draws
    # Across 4000 independent chains each draw x_t is an exact N(0, 1) draw: the
    # variance at t = 0 and t = 19 is 1 within 5 standard errors (sd of a sample
    # variance of n normals: sqrt(2 / n)).
    for t in (0, 19):
        assert abs(draws[:, t].var() - 1.0) < 5 * np.sqrt(2 / draws[:, t].size)
    # Lag-1 correlation rho: sd of the sample correlation ~ (1 - rho^2) / sqrt(n).
    pairs = draws[:, 9:11, 0]
    corr = np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]
    assert abs(corr - rho) < 5 * (1 - rho ** 2) / np.sqrt(pairs.shape[0])


def test_var1_marginal_covariance():
    covariance = vc.correlated_covariance(3, correlation=0.8, sds=[1.0, 2.0, 5.0])
    chains = vc.var1_chains(20000, 3, covariance, np.array([0.0, 0.5, 0.95]),
                            rng=np.random.default_rng(1))
    last = chains.draws[:, -1]
    # x_t = L z_t with z_t ~ N(0, I): the covariance at any t is Sigma; entries of a
    # sample covariance of n Gaussians have sd <= sqrt(2 / n) S_ii S_jj-scaled, so
    # compare the correlation-scaled matrices within 5 / sqrt(n).
    scale = np.sqrt(np.diag(covariance))
    np.testing.assert_allclose(np.cov(last.T) / np.outer(scale, scale),
                               covariance / np.outer(scale, scale),
                               atol=5 * np.sqrt(2 / last.shape[0]))
    # The score is -Sigma^-1 x (closed form).
    x = last[:5]
    np.testing.assert_allclose(chains.score(x), -np.linalg.solve(covariance, x.T).T)


@pytest.mark.parametrize("target", [
    vc.banana_target(0.03),
    vc.student_t_target(2, 5.0),
    vc.gaussian_mixture_target([[-1.5, 0.0], [1.5, 0.0]]),
    vc.gaussian_target([1.0, -2.0], [[1.0, 0.8], [0.8, 2.0]]),
    vc.standard_normal_target(3),
], ids=lambda t: t.name)
def test_scores_are_gradients_of_log_densities(target):
    # Truth: central finite differences of log p (step 1e-5, error O(1e-10)).
    x = target.sample(np.random.default_rng(2), 6)
    step = 1e-5
    numeric = np.stack([(target.log_density(x + step * e) - target.log_density(x - step * e))
                        / (2 * step) for e in np.eye(target.dim)], axis=1)
    np.testing.assert_allclose(target.score(x), numeric, rtol=1e-5, atol=1e-6)


def test_banana_exact_draws_moments():
    draws = vc.banana_target(0.03).sample(np.random.default_rng(3), 20000)
    # Closed form: x1 ~ N(0, 100), E[x2] = b (E[x1^2] - 100) = 0, x2 - b(x1^2 - 100) ~ N(0, 1).
    assert abs(draws[:, 0].var() - 100.0) < 5 * 100 * np.sqrt(2 / 20000)
    residual = draws[:, 1] - 0.03 * (draws[:, 0] ** 2 - 100)
    assert stats.kstest(residual, "norm").pvalue > 1e-3


@pytest.mark.parametrize("sampler", [vc.random_walk_metropolis, vc.mala])
def test_metropolis_chains_keep_student_t(sampler):
    target = vc.student_t_target(1, 5.0)
    step = 2.5 if sampler is vc.random_walk_metropolis else 1.0
    chains = sampler(target, 2000, 15, step=step, rng=np.random.default_rng(4))
    # Acceptance neither ~0 nor ~1 (a sampler that moves).
    assert 0.2 < chains.acceptance.mean() < 0.95
    # Invariance: started at exact draws, the 15th draw of 2000 independent chains is
    # 2000 exact t5 draws (KS test; a fixed seed, p > 1e-3).
    assert stats.kstest(chains.draws[:, -1, 0], "t", args=(5,)).pvalue > 1e-3


def test_rwm_crosses_between_close_modes():
    target = vc.gaussian_mixture_target([[-1.5], [1.5]])
    chains = vc.random_walk_metropolis(target, 4, 2000, step=2.4, rng=np.random.default_rng(5))
    signs = np.sign(chains.draws[..., 0])
    crossings = (np.diff(signs, axis=1) != 0).sum(axis=1)
    # Modes 3 sd apart with a 2.4-sd proposal: every chain changes side many times.
    assert crossings.min() > 50
    # Each chain's last draws: the mixture is symmetric, the fraction on the right is 1/2
    # (over 4 x 2000 dependent draws: a loose bound).
    assert abs((signs > 0).mean() - 0.5) < 0.15


def test_mala_on_banana_keeps_the_first_marginal():
    target = vc.banana_target(0.03)
    chains = vc.mala(target, 2000, 10, step=0.3, rng=np.random.default_rng(6),
                     proposal_scale=[10.0, 1.0])
    assert 0.2 < chains.acceptance.mean() < 0.99
    # Exact: the last draw of each chain is a banana draw, x1 ~ N(0, 100).
    assert stats.kstest(chains.draws[:, -1, 0] / 10.0, "norm").pvalue > 1e-3


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_ula_gaussian_stationary_covariance(noise):
    mean = np.array([1.0, -2.0])
    covariance = np.array([[1.0, 0.8], [0.8, 2.0]])
    step = 0.5
    stationary_mean, stationary = vc.ula_gaussian_stationary(mean, covariance, step, noise)
    # Independent route: the discrete Lyapunov equation V = A V A^T + Q (scipy).
    transition = np.eye(2) - step * np.linalg.inv(covariance)
    lyapunov = linalg.solve_discrete_lyapunov(
        transition, (2 * step + step ** 2 * noise ** 2) * np.eye(2))
    np.testing.assert_allclose(stationary, lyapunov, rtol=1e-10)
    if noise == 0.0:
        # Closed form: S (I - h P / 2)^-1.
        shrinkage = np.eye(2) - step / 2 * np.linalg.inv(covariance)
        np.testing.assert_allclose(stationary, covariance @ np.linalg.inv(shrinkage))
    # Simulation: 4000 independent chains after 100 steps (contraction |1 - h l| <= 0.9
    # per step, so the start is forgotten to 0.9^100 ~ 3e-5).
    target = vc.gaussian_target(mean, covariance)
    chains = vc.ula_chains(target, 4000, 1, step=step, burn_in=100,
                           rng=np.random.default_rng(7), gradient_noise=noise)
    last = chains.draws[:, 0]
    n = last.shape[0]
    sd = np.sqrt(np.diag(stationary))
    # Mean within 5 standard errors; covariance entries within 5 sqrt(2 / n) V_ii V_jj-scaled.
    np.testing.assert_array_less(np.abs(last.mean(axis=0) - stationary_mean), 5 * sd / np.sqrt(n))
    np.testing.assert_allclose(np.cov(last.T) / np.outer(sd, sd), stationary / np.outer(sd, sd),
                               atol=5 * np.sqrt(2 / n))
    assert not chains.valid


def test_antithetic_heavy_tailed_chains_are_exact_and_antithetic():
    # Truth: the probability integral transform of an exact N(0, 1) draw is an exact t_nu
    # draw; KS at one time t across 2000 independent chains (fixed seed, p > 1e-3).
    rng = np.random.default_rng(9)
    chains = vc.student_t_ar1_chains(2000, 6, 1, 3.0, -0.5, rng=rng)
    assert stats.kstest(chains.draws[:, -1, 0], "t", args=(3,)).pvalue > 1e-3
    # Antithetic: the copula's Spearman correlation at lag 1 is (6 / pi) asin(rho / 2)
    # = -0.48 for rho = -0.5 (closed form for a Gaussian copula); 2000 pairs: se 0.02.
    spearman = stats.spearmanr(chains.draws[:, -1, 0], chains.draws[:, -2, 0])[0]
    assert spearman == pytest.approx(6 / np.pi * np.arcsin(-0.25), abs=0.1)
    # Multivariate t: (x^T S^-1 x) / d of an exact draw is F(d, nu) (closed form).
    scale = vc.equicorrelated_covariance(3, 0.9)
    chains = vc.multivariate_t_ar1_chains(2000, 6, scale, 4.0, -0.5, 0.5, rng=rng)
    x = chains.draws[:, -1]
    quadratic = np.einsum("ni,ij,nj->n", x, np.linalg.inv(scale), x) / 3
    assert stats.kstest(quadratic, "f", args=(3, 4)).pvalue > 1e-3
    assert stats.spearmanr(x[:, 0], chains.draws[:, -2, 0])[0] < -0.3


def test_biased_generators_shapes_and_flags():
    rng = np.random.default_rng(8)
    shrunk = vc.shrunk_draws(vc.standard_normal_target(3), 2, 50, rng=rng)
    one_mode = vc.one_mode_draws(2, 50, 2, rng=rng)
    wrong = vc.wrong_score_banana(2, 50, rng=rng)
    stuck = vc.stuck_chain(3, 50, 2, rng=rng, rho=0.5)
    for chains in (shrunk, one_mode, wrong, stuck):
        assert chains.draws.ndim == 3 and not chains.valid
    assert np.all(one_mode.draws[..., 0].mean() > 2)  # all in the right mode (mean +4)
    assert np.ptp(stuck.draws[-1], axis=0).max() == 0.0  # constant chain
    assert np.ptp(stuck.draws[0], axis=0).min() > 0.0
    covariance = vc.ill_conditioned_covariance(5, 100.0, rng=rng)
    eigenvalues = np.linalg.eigvalsh(covariance)
    assert eigenvalues.max() / eigenvalues.min() == pytest.approx(100.0)
