"""Gallery-like PyMC models on simulated data, for calibration runs and tests.

Each builder takes ``rng`` (a ``numpy.random.Generator``, used only to simulate the data)
and returns a :class:`GalleryModel`: the model, its number of unconstrained parameters
and the keyword arguments for ``pm.sample`` (e.g. ``target_accept``). PyMC is imported
inside the builders.

The models (all parameterised so that NUTS samples them without divergences at the given
``target_accept``):

- ``radon``: non-centred varying intercepts, 85 groups (counties) of uneven sizes, 919
  observations, one group-level-constant slope (the floor), as in the radon example of
  Gelman & Hill (2007) and PyMC's "A Primer on Bayesian Methods for Multilevel Modeling";
- ``logistic``: logistic regression with 20 standardised predictors and an intercept;
- ``gp``: GP regression with ``pm.gp.Marginal`` (exponentiated quadratic kernel) on 40
  points, its length scale, amplitude and noise unknown;
- ``lkj``: 3-dimensional MvNormal with ``pm.LKJCholeskyCov`` (eta = 2, exponential
  scales) and unknown mean, 100 observations;
- ``eight_schools``: the non-centred eight schools (Rubin 1981; data as published),
  target_accept 0.95;
- ``robust_regression``: linear regression with a Student-t likelihood whose degrees of
  freedom are unknown (d = 7), on data with t3 noise: a heavy-tailed likelihood, NUTS
  draws antithetic in the coefficients;
- ``t_schools``: the non-centred eight schools with Student-t (3 degrees of freedom)
  school effects, target_accept 0.95 (d = 10): a posterior with t3-like tails in the
  weakly informed schools' effects.
"""

from dataclasses import dataclass, field

import numpy as np

EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


@dataclass(kw_only=True)
class GalleryModel:
    """A PyMC model and how to sample it.

    Attributes
    ----------
    name : str
    model : pymc.Model
    dim : int
        Number of unconstrained parameters.
    sample_kwargs : dict
        Extra keyword arguments for ``pm.sample`` (e.g. ``target_accept``).
    note : str
        What the model is, in words.
    """

    name: str
    model: object
    dim: int
    sample_kwargs: dict = field(default_factory=dict)
    note: str = ""


def _dim(model):
    return int(sum(np.size(value) for value in model.initial_point().values()))


def radon(rng, n_group=85, n_obs=919):
    """Non-centred varying-intercept model, radon-style (simulated data).

    y_i ~ N(a[g_i] + b floor_i, sigma_y), a = mu_a + sigma_a z, z ~ N(0, 1) per group;
    group sizes uneven (Dirichlet(0.5) weights, each group at least one observation).
    """
    import pymc as pm

    weights = rng.dirichlet(np.full(n_group, 0.5))
    group = np.concatenate([np.arange(n_group),
                            rng.choice(n_group, size=n_obs - n_group, p=weights)])
    floor = rng.binomial(1, 0.2, size=n_obs).astype(float)
    true_intercepts = 1.5 + 0.3 * rng.standard_normal(n_group)
    y = true_intercepts[group] - 0.7 * floor + 0.75 * rng.standard_normal(n_obs)
    with pm.Model() as model:
        mu_a = pm.Normal("mu_a", 0.0, 10.0)
        sigma_a = pm.HalfNormal("sigma_a", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=n_group)
        slope = pm.Normal("b", 0.0, 10.0)
        sigma_y = pm.HalfNormal("sigma_y", 1.0)
        intercepts = mu_a + sigma_a * z
        pm.Normal("y", intercepts[group] + slope * floor, sigma_y, observed=y)
    return GalleryModel(name="radon", model=model, dim=_dim(model),
                        note=f"non-centred varying intercepts, {n_group} groups, {n_obs} obs.")


def logistic(rng, n_obs=300, n_predictor=20):
    """Logistic regression, beta ~ N(0, 2.5), standardised Gaussian predictors."""
    import pymc as pm

    predictors = rng.standard_normal((n_obs, n_predictor))
    true_beta = 0.5 * rng.standard_normal(n_predictor)
    outcome = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + predictors @ true_beta))))
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 2.5)
        beta = pm.Normal("beta", 0.0, 2.5, shape=n_predictor)
        pm.Bernoulli("y", logit_p=intercept + pm.math.dot(predictors, beta), observed=outcome)
    return GalleryModel(name="logistic", model=model, dim=_dim(model),
                        note=f"logistic regression, {n_predictor} predictors, {n_obs} obs.")


def gp(rng, n_obs=40):
    """GP regression with ``pm.gp.Marginal``: y = f(x) + noise on 40 points of [0, 10]."""
    import pymc as pm

    x = np.sort(rng.uniform(0.0, 10.0, n_obs))
    y = np.sin(x) + 0.5 * np.cos(2.3 * x) + 0.3 * rng.standard_normal(n_obs)
    with pm.Model() as model:
        lengthscale = pm.Gamma("lengthscale", alpha=2.0, beta=1.0)
        amplitude = pm.HalfNormal("amplitude", 2.0)
        noise = pm.HalfNormal("noise", 1.0)
        covariance = amplitude ** 2 * pm.gp.cov.ExpQuad(1, ls=lengthscale)
        process = pm.gp.Marginal(cov_func=covariance)
        process.marginal_likelihood("y", X=x[:, None], y=y, sigma=noise)
    return GalleryModel(name="gp", model=model, dim=_dim(model),
                        note=f"pm.gp.Marginal, ExpQuad, {n_obs} points")


def lkj(rng, n_obs=100, n_dim=3):
    """MvNormal with ``pm.LKJCholeskyCov`` (eta = 2, Exponential(1) scales), mean unknown."""
    import pymc as pm

    true_sd = np.array([1.0, 2.0, 0.5])[:n_dim]
    true_corr = np.array([[1.0, 0.6, -0.3], [0.6, 1.0, 0.2], [-0.3, 0.2, 1.0]])[:n_dim, :n_dim]
    covariance = np.outer(true_sd, true_sd) * true_corr
    data = rng.multivariate_normal(np.arange(n_dim, dtype=float), covariance, size=n_obs)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=n_dim, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0, shape=n_dim),
                                       compute_corr=True)
        mu = pm.Normal("mu", 0.0, 5.0, shape=n_dim)
        pm.MvNormal("y", mu=mu, chol=chol, observed=data)
    return GalleryModel(name="lkj", model=model, dim=_dim(model),
                        note=f"LKJCholeskyCov + MvNormal, {n_dim} dimensions, {n_obs} obs.")


def eight_schools(rng=None):
    """Non-centred eight schools (published data; ``rng`` unused), target_accept 0.95."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta_tilde = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * theta_tilde, EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y)
    return GalleryModel(name="eight_schools", model=model, dim=_dim(model),
                        sample_kwargs={"target_accept": 0.95},
                        note="non-centred eight schools, target_accept 0.95")


def robust_regression(rng, n_obs=100, n_predictor=4):
    """Robust regression: y ~ StudentT(nu, a + X b, sigma) with nu unknown (simulated data).

    X standard Gaussian (n_obs x n_predictor), true b = (1, -0.5, 0.25, 0), a = 1, noise
    0.5 t_3. Priors a ~ N(0, 5), b ~ N(0, 2.5), sigma ~ HalfNormal(2), nu ~ Gamma(2, 0.1)
    (the prior of Juarez & Steel 2010): d = n_predictor + 3.
    """
    import pymc as pm

    predictors = rng.standard_normal((n_obs, n_predictor))
    true_beta = np.array([1.0, -0.5, 0.25, 0.0, 0.5, -1.0])[:n_predictor]
    y = 1.0 + predictors @ true_beta + 0.5 * rng.standard_t(3.0, size=n_obs)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 5.0)
        beta = pm.Normal("beta", 0.0, 2.5, shape=n_predictor)
        sigma = pm.HalfNormal("sigma", 2.0)
        nu = pm.Gamma("nu", alpha=2.0, beta=0.1)
        pm.StudentT("y", nu=nu, mu=intercept + pm.math.dot(predictors, beta), sigma=sigma,
                    observed=y)
    return GalleryModel(name="robust_regression", model=model, dim=_dim(model),
                        note=f"Student-t likelihood, nu unknown, {n_predictor} predictors, "
                             f"{n_obs} obs. (t3 noise)")


def t_schools(rng=None):
    """Eight schools, non-centred, with Student-t (nu = 3) school effects (``rng`` unused).

    theta_j = mu + tau z_j, z_j ~ StudentT(3, 0, 1); data as published; target_accept 0.95.
    """
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        z = pm.StudentT("z", nu=3.0, mu=0.0, sigma=1.0, shape=8)
        pm.Normal("y", mu + tau * z, EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y)
    return GalleryModel(name="t_schools", model=model, dim=_dim(model),
                        sample_kwargs={"target_accept": 0.95},
                        note="non-centred eight schools with t3 school effects, "
                             "target_accept 0.95")


MODELS = {"radon": radon, "logistic": logistic, "gp": gp, "lkj": lkj,
          "eight_schools": eight_schools, "robust_regression": robust_regression,
          "t_schools": t_schools}
