"""Hierarchical PyMC models for the missing-mass search (tests and benchmarks).

Each builder returns a ``pymc.Model``; the data are simulated from the model's own
generative story with a fixed seed (no data files), so the posteriors are well defined
and NUTS samples them without divergences in their non-centred form.

- ``radon_model``: varying intercepts, non-centred, in the shape of Gelman & Hill's
  Minnesota radon data (85 counties, 919 houses, one floor slope): d = 89.
- ``eight_schools_model``: non-centred eight schools (Rubin 1981 data): d = 10.
- ``logistic_model``: hierarchical logistic regression, non-centred varying intercepts
  and a common slope (``n_groups`` groups, binary outcomes): d = n_groups + 4.

Imported by tests and benchmarks only; PyMC is imported inside the builders.
"""

import warnings

import numpy as np

EIGHT_SCHOOLS_Y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])


def radon_model(n_counties=85, n_houses=919, seed=0):
    """Non-centred varying-intercept model of log radon (the radon data's shape).

    log radon_i ~ N(a[county_i] + b floor_i, sigma_y), a = mu_a + sigma_a z_a,
    z_a ~ N(0, 1), mu_a ~ N(0, 10), sigma_a ~ HalfNormal(1), b ~ N(0, 10),
    sigma_y ~ HalfNormal(1). County sizes are skewed as in the real data (a few large
    counties, many with 1-5 houses); the data are one draw of this model with
    mu_a = 1.5, sigma_a = 0.3, b = -0.7, sigma_y = 0.75.
    """
    import pymc as pm

    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 1.2, size=n_counties)
    county = rng.choice(n_counties, size=n_houses, p=weights / weights.sum())
    county[:n_counties] = np.arange(n_counties)          # every county has a house
    floor = (rng.random(n_houses) < 0.17).astype(float)
    a = 1.5 + 0.3 * rng.standard_normal(n_counties)
    y = a[county] - 0.7 * floor + 0.75 * rng.standard_normal(n_houses)
    with pm.Model(coords={"county": np.arange(n_counties)}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 10.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z_a = pm.Normal("z_a", 0.0, 1.0, dims="county")
        b = pm.Normal("b", 0.0, 10.0)
        sigma_y = pm.HalfNormal("sigma_y", 1.0)
        pm.Normal("y", mu_a + sigma_a * z_a[county] + b * floor, sigma_y, observed=y)
    return model


def eight_schools_model():
    """Non-centred eight schools: mu ~ N(0, 5), tau ~ HalfCauchy(5), z ~ N(0, 1)."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        z = pm.Normal("z", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * z, EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y)
    return model


def logistic_model(n_groups=50, n_per_group=10, seed=0):
    """Hierarchical logistic regression, non-centred intercepts, one common slope.

    y_ij ~ Bernoulli(logit^-1(mu + sigma z_j + beta x_ij)), z_j ~ N(0, 1),
    mu ~ N(0, 2.5), sigma ~ HalfNormal(1), beta ~ N(0, 2.5); data from mu = -0.5,
    sigma = 0.8, beta = 1.
    """
    import pymc as pm

    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), n_per_group)
    x = rng.standard_normal(group.size)
    intercept = -0.5 + 0.8 * rng.standard_normal(n_groups)
    y = (rng.random(group.size) < 1 / (1 + np.exp(-(intercept[group] + x)))).astype(int)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.5)
        sigma = pm.HalfNormal("sigma", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=n_groups)
        beta = pm.Normal("beta", 0.0, 2.5)
        pm.Bernoulli("y", logit_p=mu + sigma * z[group] + beta * x, observed=y)
    return model


def sample(model, seed, draws=500, tune=500, chains=4):
    """Healthy NUTS draws (one core, no progress bar, warnings silenced)."""
    import pymc as pm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                         progressbar=False, compute_convergence_checks=False, model=model)
