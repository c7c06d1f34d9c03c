"""PyMC models for the divergence benchmark (``bench_divergences.py``): biased by
construction (centred hierarchies, Neal's funnel) and healthy ones whose NUTS runs
diverge now and then (non-centred eight schools at the default target_accept, a latent
GP, a robust regression with a Student-t likelihood). PyMC is imported inside the
builders; every data set is simulated with a fixed seed or published (eight schools).

Each builder returns the PyMC model; a run and its reference are compared on the
unconstrained parameters they share by name.
"""

import numpy as np

EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools(centred):
    """Eight schools (Rubin 1981): mu ~ N(0, 5), tau ~ HalfCauchy(5), theta ~ N(mu, tau)
    (centred) or theta = mu + tau z, z ~ N(0, 1) (non-centred)."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        if centred:
            theta = pm.Normal("theta", mu, tau, shape=8)
        else:
            theta = mu + tau * pm.Normal("z", 0.0, 1.0, shape=8)
        pm.Normal("y", theta, EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y)
    return model


def funnel(n_x=9):
    """Neal's funnel: v ~ N(0, 3), x_i ~ N(0, exp(v / 2)), i = 1..9 (no data): the
    marginal of v is N(0, 3) exactly."""
    import pymc as pm

    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2.0), shape=n_x)
    return model


def _logistic_data(n_groups=20, n_per_group=5, seed=0):
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), n_per_group)
    x = rng.standard_normal(group.size)
    intercept = -0.5 + 0.8 * rng.standard_normal(n_groups)
    y = (rng.random(group.size) < 1 / (1 + np.exp(-(intercept[group] + x)))).astype(int)
    return group, x, y


def hierarchical_logistic(centred, n_groups=20, n_per_group=5):
    """Varying-intercept logistic regression, few observations per group: a ~ N(mu, sigma)
    (centred) or a = mu + sigma z (non-centred); mu, beta ~ N(0, 2.5), sigma ~
    HalfNormal(1). Data simulated with mu = -0.5, sigma = 0.8, beta = 1."""
    import pymc as pm

    group, x, y = _logistic_data(n_groups, n_per_group)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.5)
        sigma = pm.HalfNormal("sigma", 1.0)
        if centred:
            a = pm.Normal("a", mu, sigma, shape=n_groups)
        else:
            a = mu + sigma * pm.Normal("z", 0.0, 1.0, shape=n_groups)
        beta = pm.Normal("beta", 0.0, 2.5)
        pm.Bernoulli("y", logit_p=a[group] + beta * x, observed=y)
    return model


def latent_gp(n_obs=30, seed=1):
    """Latent GP regression (``pm.gp.Latent``, its default rotated, non-centred
    parameterisation): f ~ GP(0, eta^2 ExpQuad(ls)), y ~ N(f, sigma) on 30 points;
    ls ~ Gamma(2, 1), eta ~ HalfNormal(1), sigma ~ HalfNormal(1). d = 33."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 10.0, n_obs))
    y = np.sin(x) + 0.3 * rng.standard_normal(n_obs)
    with pm.Model() as model:
        ls = pm.Gamma("ls", alpha=2.0, beta=1.0)
        eta = pm.HalfNormal("eta", 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        process = pm.gp.Latent(cov_func=eta ** 2 * pm.gp.cov.ExpQuad(1, ls=ls))
        f = process.prior("f", X=x[:, None])
        pm.Normal("y", f, sigma, observed=y)
    return model


def robust_regression(n_obs=100, n_predictor=4, seed=2):
    """Linear regression with a Student-t likelihood, its degrees of freedom unknown:
    y ~ t_nu(a + X b, sigma), a, b ~ N(0, 5), sigma ~ HalfNormal(2), nu ~ Gamma(2, 0.1).
    Data with nu = 3. d = 7."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    predictors = rng.standard_normal((n_obs, n_predictor))
    y = 1.0 + predictors @ np.array([0.5, -1.0, 0.0, 2.0]) + rng.standard_t(3, n_obs)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 5.0)
        b = pm.Normal("b", 0.0, 5.0, shape=n_predictor)
        sigma = pm.HalfNormal("sigma", 2.0)
        nu = pm.Gamma("nu", alpha=2.0, beta=0.1)
        pm.StudentT("y", nu=nu, mu=a + pm.math.dot(predictors, b), sigma=sigma, observed=y)
    return model
