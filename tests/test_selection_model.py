"""A selection of the parameters with a score that covers them all (issue 38, point 3b).

``var_names``/``filter_vars`` leaving out free variables of a PyMC model: the whole score is
evaluated at the whole unconstrained point and its selected components kept. Sources of
truth: Stein's identity (integration by parts in the selected coordinates: the selected
Stein kernel has mean zero under p), the conditional score of a Gaussian and of a
hierarchical model written by hand (grad_{x_S} log p(x_S | x_-S), computed without
PyMC), the slow plain-NumPy KSD of ``tests/reference.py``, and ArviZ's own ``var_names``
selection on the same trace.
"""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import steindiag
from reference import imq_stein_kernel_matrix, ksd_u2, ksd_v2
from steindiag.inputs import read_input

pm = pytest.importorskip("pymc")

# A linear Gaussian model a -> b -> c (each scalar): x = B x + D e, e ~ N(0, I).
_B = np.array([[0.0, 0.0, 0.0], [0.8, 0.0, 0.0], [-0.3, 0.5, 0.0]])
_D = np.diag([1.0, 0.6, 0.7])
_L = np.linalg.solve(np.eye(3) - _B, _D)
_SIGMA = _L @ _L.T


def _gaussian_model():
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Normal("b", 0.8 * a, 0.6)
        pm.Normal("c", -0.3 * a + 0.5 * b, 0.7)
    return model


def _listed(result, name):
    """A list attr of a result (stored as JSON text, netCDF-friendly, or as a list)."""
    value = result.attrs[name]
    return json.loads(value) if isinstance(value, str) else list(value)


def _posterior(draws, names):
    return xr.Dataset({name: (("chain", "draw"), draws[..., k])
                       for k, name in enumerate(names)})


def _conditional_score(x, selected):
    """grad_{x_S} log p(x_S | x_-S) for N(0, Sigma), from the conditional law
    N(m, C), m = S_{S,-S} S_{-S}^-1 x_-S, C = S_SS - S_{S,-S} S_{-S}^-1 S_{-S,S}."""
    rest = [k for k in range(_SIGMA.shape[0]) if k not in selected]
    coefficient = _SIGMA[np.ix_(selected, rest)] @ np.linalg.inv(_SIGMA[np.ix_(rest, rest)])
    conditional = _SIGMA[np.ix_(selected, selected)] - coefficient @ _SIGMA[np.ix_(rest,
                                                                                   selected)]
    mean = x[:, rest] @ coefficient.T
    return -(x[:, selected] - mean) @ np.linalg.inv(conditional)


def test_selected_stein_kernel_has_mean_zero_on_exact_draws():
    # Truth: Stein's identity in x_S, E_p[k_p(x, y)] = 0 for independent x, y ~ p, with the
    # conditional score; the pairs (x_2i, x_2i+1) are independent, so the mean of the
    # kernel over them is within a few standard errors of 0.
    rng = np.random.default_rng(38)
    x = rng.standard_normal((8000, 3)) @ _L.T
    selected = [0, 2]
    scores = _conditional_score(x, selected)

    def pair_kernel(score):
        return np.array([imq_stein_kernel_matrix(
            x[i:i + 1, selected], score[i:i + 1], x[i + 1:i + 2, selected],
            score[i + 1:i + 2], np.eye(2))[0, 0] for i in range(0, x.shape[0], 2)])

    h = pair_kernel(scores)
    assert abs(h.mean()) < 4.0 * h.std(ddof=1) / np.sqrt(h.size)
    # The kernel's mean depends on the score only through E[s_S | x_S], the score of p's
    # marginal of x_S (-Sigma_SS^-1 x_S): with it, the same mean zero.
    marginal = -x[:, selected] @ np.linalg.inv(_SIGMA[np.ix_(selected, selected)])
    h_marginal = pair_kernel(marginal)
    assert abs(h_marginal.mean()) < 4.0 * h_marginal.std(ddof=1) / np.sqrt(h_marginal.size)
    # A score that is not p's (shifted by 0.5): far from 0, so the check can fail.
    h_wrong = pair_kernel(scores + 0.5)
    assert abs(h_wrong.mean()) > 4.0 * h_wrong.std(ddof=1) / np.sqrt(h_wrong.size)


def test_selected_ksd_is_the_conditional_score_ksd():
    rng = np.random.default_rng(3)
    draws = (rng.standard_normal((2 * 150, 3)) @ _L.T).reshape(2, 150, 3)
    model = _gaussian_model()
    result = steindiag.ksd(_posterior(draws, "abc"), model, var_names=["~b"],
                           preconditioner="identity")
    assert _listed(result, "parameters") == ["a", "c"]
    assert result.attrs["stein_coordinates"] == "selected 2 of 3"
    assert _listed(result, "left_out_variables") == ["b"]
    flat = draws.reshape(-1, 3)
    scores = _conditional_score(flat, [0, 2])
    # Truth: the slow plain-NumPy V- and U-statistics with the conditional score.
    np.testing.assert_allclose(float(result["ksd_pooled"]) ** 2,
                               ksd_v2(flat[:, [0, 2]], scores, np.eye(2)), rtol=1e-9)
    u_statistic = float(result["ksd2_u_pooled"])
    np.testing.assert_allclose(u_statistic, ksd_u2(flat[:, [0, 2]], scores, np.eye(2)),
                               rtol=1e-8, atol=1e-12)
    # On exact draws the U-statistic has mean 0; its sd for a degenerate kernel is about
    # sqrt(2 E[h^2] / (n (n - 1))) (Serfling 1980, 5.5.2).
    matrix = imq_stein_kernel_matrix(flat[:, [0, 2]], scores, flat[:, [0, 2]], scores,
                                     np.eye(2))
    n = flat.shape[0]
    off = matrix[~np.eye(n, dtype=bool)]
    assert abs(u_statistic) < 5.0 * np.sqrt(2.0 * np.mean(off ** 2) / (n * (n - 1)))


def _hierarchy():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        pm.Normal("theta", mu, tau, shape=3)
    return model


def test_selection_with_a_transformed_left_in_variable():
    # Truth: log p(mu, t, theta) with t = log tau, by hand (HalfNormal(1) and the Jacobian
    # e^t): -mu^2/2 - e^{2t}/2 + t - 3 t - sum_j (theta_j - mu)^2 e^{-2t} / 2, so
    # d/dmu = -mu + e^{-2t} sum_j (theta_j - mu),
    # d/dt  = -e^{2t} - 2 + e^{-2t} sum_j (theta_j - mu)^2.
    rng = np.random.default_rng(5)
    mu = rng.standard_normal((2, 60))
    tau = np.exp(0.3 * rng.standard_normal((2, 60)))
    theta = mu[..., None] + tau[..., None] * rng.standard_normal((2, 60, 3))
    posterior = xr.Dataset({"mu": (("chain", "draw"), mu), "tau": (("chain", "draw"), tau),
                            "theta": (("chain", "draw", "j"), theta)})
    result = steindiag.ksd(posterior, _hierarchy(), var_names=["~theta"],
                           preconditioner="identity")
    assert _listed(result, "parameters") == ["mu", "tau_log__"]
    t = np.log(tau)
    residual = theta - mu[..., None]
    scores = np.stack([-mu + np.exp(-2 * t) * residual.sum(-1),
                       -np.exp(2 * t) - 2.0 + np.exp(-2 * t) * (residual ** 2).sum(-1)], -1)
    draws = np.stack([mu, t], -1)
    np.testing.assert_allclose(float(result["ksd_pooled"]) ** 2,
                               ksd_v2(draws.reshape(-1, 2), scores.reshape(-1, 2), np.eye(2)),
                               rtol=1e-8)


def test_selection_errors():
    rng = np.random.default_rng(6)
    posterior = _posterior((rng.standard_normal((300, 3)) @ _L.T).reshape(2, 150, 3), "abc")
    posterior["d"] = posterior["a"] + posterior["b"]    # a deterministic, say
    model = _gaussian_model()
    with pytest.raises(ValueError, match=r"selects no free variable of the model"):
        steindiag.ksd(posterior, model, var_names=["d"])
    with pytest.raises(ValueError, match=r"var_names \['e'\] are not variables"):
        steindiag.ksd(posterior, model, var_names=["e"])
    # Every free variable selected (the deterministic passed over): the whole vector,
    # the same numbers as without a selection, and no mark.
    whole = steindiag.ksd(posterior, model)
    every = steindiag.ksd(posterior, model, var_names=["~d"])
    assert float(every["ksd_pooled"]) == float(whole["ksd_pooled"])
    assert "stein_coordinates" not in every.attrs
    # Methods that move the draws need the selected score at new points: refused.
    with pytest.raises(ValueError, match="cannot run on a selection of the parameters"):
        steindiag.stein_variational(posterior, model, var_names=["a"], n_steps=2, rng=0)
    with pytest.raises(ValueError, match="cannot run on a selection of the parameters"):
        steindiag.stein_thin(posterior, model, var_names=["a"], n_selected=5,
                             regularized=True)


# -- Eight schools (centred: theta is a free variable), on both stacks --------------------

_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
_SIGMA_Y = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


@pytest.fixture(scope="module")
def eight_schools():
    with pm.Model(coords={"school": [f"s{k}" for k in range(8)]}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Deterministic("theta_shift", theta - mu, dims="school")
        pm.Normal("y", theta, _SIGMA_Y, observed=_Y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(draws=150, tune=150, chains=2, cores=1, random_seed=8,
                              progressbar=False, compute_convergence_checks=False)
    return model, idata


def _posterior_group(idata):
    posterior = idata["posterior"]
    return posterior.to_dataset() if hasattr(posterior, "to_dataset") else posterior


def _arviz_var_names():
    try:
        from arviz_base.utils import _var_names
    except ImportError:
        from arviz.utils import _var_names
    return _var_names


def test_diagnose_eight_schools_without_theta(eight_schools):
    model, idata = eight_schools
    result = steindiag.diagnose(idata, model, var_names=["~theta"], rng=1)
    # Truth: the model's free variables but theta, as value variables.
    assert result["parameter"].values.tolist() == ["mu", "tau_log__"]
    assert _listed(result, "selected_variables") == ["mu", "tau"]
    assert _listed(result, "left_out_variables") == ["theta"]
    assert result.attrs["stein_coordinates"] == "selected 2 of 10"
    report = str(result.attrs["report"])
    assert "the check covers only the selected parameters mu, tau" in report
    assert "given the others (theta)" in report
    if "missing_mass_found" in result:   # the search ran on the whole vector
        assert "ran on every coordinate" in report


@pytest.mark.parametrize("var_names, filter_vars", [
    (["~theta"], None), (["~theta"], "like"), (["~^theta$"], "regex"), (["mu"], None),
    (["tau", "mu"], None), (["~mu"], None), (["t"], "like")])
def test_selection_is_arviz_selection_with_a_model(eight_schools, var_names, filter_vars):
    model, idata = eight_schools
    posterior = _posterior_group(idata)
    # Truth: ArviZ's own selection of the trace's variables, restricted to the model's
    # free variables (deterministics such as theta_shift are not parameters).
    chosen = _arviz_var_names()(var_names, posterior, filter_vars=filter_vars)
    expected = [rv.name for rv in model.free_RVs if rv.name in chosen]
    result = steindiag.ksd(idata, model, var_names=var_names, filter_vars=filter_vars)
    if len(expected) == len(model.free_RVs):
        assert "stein_coordinates" not in result.attrs
    else:
        assert _listed(result, "selected_variables") == expected
    # Truth: the whole vector's draws and scores, read without a selection, with the
    # columns of the expected variables kept (the score at the whole point).
    whole = read_input(idata, model).with_scores()
    columns = [k for k, label in enumerate(whole.parameter)
               if label.split("[")[0].removesuffix("_log__") in expected]
    reference = steindiag.ksd(whole.draws[..., columns], score=whole.scores[..., columns])
    np.testing.assert_allclose(result["ksd"].values, reference["ksd"].values, rtol=1e-12)
    assert _listed(result, "parameters") == [whole.parameter[k] for k in columns]


def test_functions_that_read_draws_take_the_selection(eight_schools):
    model, idata = eight_schools
    options = {"var_names": ["~theta"]}
    mark = "selected 2 of 10"
    test = steindiag.ksd_test(idata, model, rng=0, n_bootstrap=99, **options)
    assert test.attrs["stein_coordinates"] == mark
    path = steindiag.ksd_path(idata, model, n_points=5, **options)
    assert path.attrs["stein_coordinates"] == mark
    # mmd reads the draws only: the selected columns of the unconstrained draws.
    agreement = steindiag.mmd(idata, model=model, **options)
    assert _listed(agreement, "parameters") == ["mu", "tau_log__"]
    weights = steindiag.stein_weights(idata, model, **options)
    assert weights.attrs["stein_coordinates"] == mark
    assert np.isclose(float(weights.sum()), 1.0)   # on the simplex
    thinned = steindiag.stein_thin(idata, model, n_selected=20, **options)
    posterior = _posterior_group(thinned)
    assert posterior.sizes["draw"] == 20 and "theta" in posterior   # whole draws kept
    assert posterior.attrs["stein_thinning_stein_coordinates"] == mark
    # control_variates: var_names picks the rows summarised (ArviZ's selection, as
    # az.summary); the control variates use the whole score, as without var_names.
    cv = steindiag.control_variates(idata, model, method="polynomial1", **options)
    assert [str(v).split("[")[0] for v in cv["label"].values] == (
        ["mu", "tau"] + ["theta_shift"] * 8)
