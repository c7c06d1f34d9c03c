"""steindiag.diagnose: verdicts that are true by construction, and its decision rules.

Sources of truth (each assertion names its own):
- samplers whose output distribution is known in closed form: exact i.i.d. draws of a
  Gaussian (NumPy), the unadjusted Langevin algorithm, whose stationary law on a Gaussian
  target is a Gaussian with a different covariance (closed form below), draws of one
  component of a two-component mixture (half of the mass never visited);
- PyMC: prior draws (``pm.draw``) are not posterior draws when the data are informative;
  NUTS on the non-centred eight-schools model samples its posterior; NUTS on the centred
  model diverges in the funnel (Betancourt & Girolami 2015), so its draws cannot be called
  a fit;
- repetition counts held to binomial tolerances (stated next to each assertion).
"""

import warnings

import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag.stats import verdict as rules

# ------------------------------------------------------------------------------------
# Correlated 2-D Gaussian and the unadjusted Langevin algorithm
# ------------------------------------------------------------------------------------

RHO = 0.5
COV = np.array([[1.0, RHO], [RHO, 1.0]])
PRECISION = np.linalg.inv(COV)


def gauss_score(x):
    return -x @ PRECISION


def gauss_log_density(x):
    return -0.5 * np.einsum("ni,ij,nj->n", x, PRECISION, x)


def ula(rng, n_chain, n_draw, step, burn=200):
    """x' = x + step * grad log p(x) + sqrt(2 step) z (no Metropolis correction)."""
    x = rng.standard_normal((n_chain, 2)) @ np.linalg.cholesky(COV).T
    out = np.empty((n_chain, n_draw, 2))
    for t in range(burn + n_draw):
        x = x + step * gauss_score(x) + np.sqrt(2.0 * step) * rng.standard_normal(x.shape)
        if t >= burn:
            out[:, t - burn] = x
    return out


def test_ula_does_not_fit():
    x = ula(np.random.default_rng(1), 4, 1000, step=0.5)
    res = steindiag.diagnose(x, score=gauss_score, log_density=gauss_log_density, rng=2)
    # Truth: along an eigenvector of the precision with eigenvalue l, ULA is an AR(1) with
    # stationary variance 1 / (l (1 - step l / 2)) instead of 1 / l: for l = 2 (step 0.5)
    # the variance is 1.0 instead of 0.5. The draws are not from p.
    assert res["verdict_pooled"].item() == "does not fit"
    assert set(res["verdict"].values) <= {"does not fit", "inconclusive"}


def test_exact_draws_fit():
    x = np.random.default_rng(3).standard_normal((4, 1000, 2)) @ np.linalg.cholesky(COV).T
    res = steindiag.diagnose(x, score=gauss_score, log_density=gauss_log_density, rng=4)
    # Truth: exact i.i.d. draws of p (Cholesky factor of the covariance); every test is
    # at the family-wise level 0.05, so "fits" is expected with probability >= 0.95.
    assert res["verdict_pooled"].item() == "fits"
    assert (res["verdict"].values == "fits").all()
    assert bool(res["missing_mass_found"]) is False


# ------------------------------------------------------------------------------------
# Two well-separated modes: 0.5 N(-4, 1) + 0.5 N(4, 1)
# ------------------------------------------------------------------------------------


def mixture_score(x):
    left, right = -0.5 * (x + 4.0) ** 2, -0.5 * (x - 4.0) ** 2
    w = np.exp(left - np.logaddexp(left, right))
    return -w * (x + 4.0) - (1.0 - w) * (x - 4.0)


def mixture_log_density(x):
    return np.logaddexp(-0.5 * (x[:, 0] + 4.0) ** 2, -0.5 * (x[:, 0] - 4.0) ** 2)


N_REPEAT = 20


def _mixture_verdicts(one_mode):
    verdicts = []
    for rep in range(N_REPEAT):
        rng = np.random.default_rng(1000 + rep)
        centre = -4.0 if one_mode else np.where(rng.random((4, 500, 1)) < 0.5, -4.0, 4.0)
        x = centre + rng.standard_normal((4, 500, 1))
        res = steindiag.diagnose(x, score=mixture_score, log_density=mixture_log_density,
                                 rng=rep)
        verdicts.append(res["verdict_pooled"].item())
    return np.array(verdicts)


def test_one_mode_of_a_mixture_does_not_fit():
    verdicts = _mixture_verdicts(one_mode=True)
    # Truth: the draws hold none of the right mode's half of the mass. Required power
    # >= 80 %: at least 16 of 20 (if the power were 0.95, P(fewer than 16) = 0.003).
    assert np.sum(verdicts == "does not fit") >= 16


def test_whole_mixture_rarely_rejected():
    verdicts = _mixture_verdicts(one_mode=False)
    # Truth: exact draws of the mixture; family-wise level 0.05, so at most 10 % "does
    # not fit": at most 2 of 20 (at a true rate of 0.05, P(3 or more) = 0.075; the
    # Bonferroni correction makes the true rate lower).
    assert np.sum(verdicts == "does not fit") <= 2


# ------------------------------------------------------------------------------------
# Inputs, report, errors
# ------------------------------------------------------------------------------------


def test_labelled_inputs_and_report():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 400, 2))
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"x": (("chain", "draw", "k"), x)}),
        "sample_stats": xr.Dataset({"diverging": (("chain", "draw"),
                                                  np.zeros((2, 400), dtype=bool))}),
    })
    tree["sample_stats"]["diverging"].values[1, :3] = True
    res = steindiag.diagnose(tree, score=lambda v: -v, rng=0)
    # Truth: the divergences written above (3 in chain 1); exact N(0, I) draws, so no test
    # should reject and chain 1 is "inconclusive" because of its divergences alone.
    np.testing.assert_array_equal(res["divergences"].values, [0, 3])
    assert res["verdict"].values[0] == "fits" and res["verdict"].values[1] == "inconclusive"
    assert res["verdict_pooled"].item() == "inconclusive"
    assert "divergent" in res["reason_pooled"].item()
    text = repr(res)
    assert text.startswith("steindiag.diagnose: INCONCLUSIVE")
    assert "next:" in text and "not run" in text
    # Truth: the same draws as a DataArray give the same verdicts (no sampler statistics).
    da = xr.DataArray(x, dims=("chain", "draw", "k"), name="x")
    res_da = steindiag.diagnose(da, score=lambda v: -v, rng=0)
    assert "divergences" not in res_da and res_da["verdict_pooled"].item() == "fits"
    # Truth: without a log density the search is not run, and a "fits" says so.
    assert "conditional" in res_da["reason_pooled"].item()


def test_one_chain_and_same_seed():
    x = np.random.default_rng(6).standard_normal((600, 1))
    first = steindiag.diagnose(x, score=-x, rng=3)
    second = steindiag.diagnose(x, score=-x, rng=3)
    # Truth: randomness only through rng=; a 2-D array is one chain, with no MMD test.
    xr.testing.assert_identical(first, second)
    assert first.sizes["chain"] == 1 and np.isnan(first["agreement_pvalue"].item())
    assert first.attrs["n_tests"] == 2


def test_estimator_is_passed_to_the_test():
    x = np.random.default_rng(10).standard_normal((2, 300, 2))
    # Truth: the estimator chosen is the one ksd_test ran with (recorded in its attrs);
    # "auto" is the exact pass.
    assert steindiag.diagnose(x, score=-x, rng=0).attrs["estimator"] == "exact"
    assert steindiag.diagnose(x, score=-x, rng=0,
                              estimator="nystrom").attrs["estimator"] == "nystrom"


def test_auto_chooses_nystrom_and_thinned_mmd_above_the_budgets(monkeypatch):
    from steindiag.methods import evidence

    x = np.random.default_rng(11).standard_normal((2, 400, 2))
    # Budgets lowered (monkeypatch) so that 800 draws count as "too many" for the exact passes.
    monkeypatch.setattr(evidence, "EXACT_BUDGET_FLOPS", 1e6)
    monkeypatch.setattr(evidence, "MMD_BUDGET_PAIRS", 1e4)
    res = steindiag.diagnose(x, score=-x, rng=0, mode_search=False)
    # Truth: the documented rule - above the budget "auto" runs ksd_test with the Nystrom
    # estimator and thins the chains for MMD by ceil(N / sqrt(budget)) = ceil(800 / 100) = 8;
    # the report says both.
    assert res.attrs["estimator"] == "nystrom"
    assert "every 8-th draw" in res.attrs["mmd_note"]
    assert "Nystrom" in repr(res) and "every 8-th draw" in repr(res)
    # print() gives the report alone (the documented behaviour); repr adds the Dataset.
    assert str(res) == res.attrs["report"] and "Data variables" not in str(res)
    assert "Data variables" in repr(res)
    assert res["verdict_pooled"].item() in rules.VERDICTS


def test_nystrom_report_shows_the_ksd_of_ksd():
    # A sample shifted by 0.3 in 50 dimensions, where the test's Stein-kernel features lose
    # about a quarter of KSD^2 (Background page, "Nystrom KSD"). Truth: the exact KSD of
    # the same draws; the report's value is ksd's Nystrom estimate (within 5 % in KSD^2,
    # issue 22's criterion), not the square root of the test's statistic over N.
    x = np.random.default_rng(13).standard_normal((2, 400, 50)) + 0.3
    res = steindiag.diagnose(x, score=-x, rng=0, mode_search=False, estimator="nystrom")
    exact = float(steindiag.ksd(x, score=-x)["ksd_pooled"])
    assert abs(float(res["ksd_pooled"]) ** 2 / exact**2 - 1) < 0.05
    test = steindiag.ksd_test(x, score=-x, rng=0, n_bootstrap=10, estimator="nystrom")
    assert float(test["statistic_pooled"]) / 800 < 0.9 * exact**2


def test_accessor_diagnose_matches_function():
    x = np.random.default_rng(12).standard_normal((2, 200, 1))
    tree = xr.DataTree.from_dict({"posterior": xr.Dataset({"x": (("chain", "draw"), x[..., 0])})})
    # Truth: the accessor is documented as a one-line wrapper of steindiag.diagnose.
    via_accessor = tree.stein.diagnose(score=lambda p: -p, rng=0, mode_search=False)
    via_function = steindiag.diagnose(tree, score=lambda p: -p, rng=0, mode_search=False)
    xr.testing.assert_identical(via_accessor, via_function)


def test_sticky_chains_are_inconclusive_not_fits():
    rng = np.random.default_rng(7)
    x = np.empty((4, 300, 1))
    x[:, 0] = rng.standard_normal((4, 1))
    for t in range(1, 300):   # exact N(0, 1) marginals, rho = 0.99
        x[:, t] = 0.99 * x[:, t - 1] + np.sqrt(1 - 0.99**2) * rng.standard_normal((4, 1))
    res = steindiag.diagnose(x, score=-x, rng=0)
    # Truth: tau = (1 + rho) / (1 - rho) = 199 (closed form) for 300 draws: too few
    # effective draws for the bootstrap, so no verdict can be "fits".
    assert "fits" not in set(res["verdict"].values) | {res["verdict_pooled"].item()}
    assert not res["pvalue_reliable"].values.any()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"alpha": 1.5}, ValueError, "alpha"),
        ({"n_bootstrap": 0}, ValueError, "n_bootstrap"),
        ({"n_bootstrap": 50}, ValueError, "n_bootstrap=50 is too small"),
        ({"n_permutations": 2.5}, TypeError, "n_permutations"),
        ({"log_density": np.zeros(10)}, TypeError, "log_density must be None or a callable"),
        ({"estimator": "fast"}, ValueError, "estimator"),
        ({"missing_mass": False}, TypeError, "missing_mass= was renamed mode_search="),
        ({"mode_search": "yes"}, ValueError, "mode_search"),
        ({"kernel": "cosine"}, ValueError, "kernel"),
        ({"preconditioner": "wide"}, ValueError, "preconditioner"),
        ({"rng": "seed"}, TypeError, "rng"),
        ({"n_landmarks": 10}, ValueError, "n_landmarks"),
        ({"compile_mode": "FAST_RUN"}, (TypeError, ValueError), "compile_mode"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    x = np.random.default_rng(8).standard_normal((2, 50, 2))
    with pytest.raises(error, match=match):
        steindiag.diagnose(x, score=-x, **kwargs)


def test_bad_inputs_as_the_other_functions():
    x = np.random.default_rng(9).standard_normal((2, 50, 2))
    # Truth: the messages of the shared input layer (as ksd_test gives them).
    with pytest.raises(TypeError, match="score is required"):
        steindiag.diagnose(x)
    with pytest.raises(TypeError, match="model can only be used with a trace"):
        steindiag.diagnose(x, object())
    with pytest.raises(ValueError):
        steindiag.diagnose(x, score=-x[:, :10])


# ------------------------------------------------------------------------------------
# Decision rules (NumPy only)
# ------------------------------------------------------------------------------------


def _evidence(**changes):
    args = dict(pvalue=np.array([0.5, 0.5]), reliable=np.array([True, True]),
                pvalue_pooled=0.5, reliable_pooled=True, kept_draws=100, thinning_lag=5,
                min_kept_draws=20, n_draw=500, effective_draws_pooled=500.0,
                agreement_pvalue=0.5, agreement_reliable=True)
    args.update(changes)
    return rules.Evidence(**args)


def _chain_rules(**changes):
    return rules.chain_verdicts(_evidence(**changes), 0.01)[0].tolist()


def test_rules_never_fits_on_unreliable_or_divergent_evidence():
    # Truth: the rules as documented in steindiag.stats.verdict, case by case.
    assert _chain_rules() == ["fits", "fits"]
    assert _chain_rules(pvalue=np.array([0.001, 0.5])) == ["does not fit", "fits"]
    assert _chain_rules(pvalue=np.array([0.001, 0.5]),
                        reliable=np.array([False, True])) == ["inconclusive", "fits"]
    assert _chain_rules(divergences=np.array([0, 4])) == ["fits", "inconclusive"]
    assert _chain_rules(agreement_pvalue=0.001) == ["inconclusive", "inconclusive"]
    assert _chain_rules(missing_found=True) == ["does not fit", "does not fit"]
    assert _chain_rules(stuck=np.array([False, True])) == ["fits", "does not fit"]
    # The chains' KSD tests (one max-T family), the pooled one, one test of agreement,
    # the search: 4 whatever the number of chains.
    assert rules.n_tests(4, True) == 4 and rules.n_tests(1, False) == 2
    assert rules.n_tests(1000, True) == 4


def test_pooled_rules():
    pooled = lambda **changes: rules.pooled_verdict(_evidence(**changes), 0.01)[0]  # noqa: E731
    # Truth: the documented pooled rule, case by case: a test of agreement that cannot be
    # trusted leaves the chains' agreement unchecked; one that rejects says they differ.
    assert pooled(missing_run=True) == "fits"
    assert pooled(agreement_reliable=False) == "inconclusive"
    assert pooled(agreement_pvalue=0.001) == "does not fit"
    assert pooled(agreement_pvalue=0.001, agreement_reliable=False) == "inconclusive"
    assert pooled(reliable_pooled=False) == "inconclusive"
    assert pooled(stuck=np.array([True, False])) == "does not fit"
    assert pooled(pvalue=np.array([0.001, 0.5])) == "does not fit"
    verdict, code, reason = rules.pooled_verdict(
        _evidence(reliable_pooled=False, kept_draws=5), 0.01)
    # kept 5 of 500 per chain, 20 needed: about 500 * 20 / 5 = 2000 draws per chain.
    assert verdict == "inconclusive" and "2000 draws per chain" in reason
    assert code == "too_few_draws"


# ------------------------------------------------------------------------------------
# PyMC: eight schools (sampling kept small and shared by module-scoped fixtures)
# ------------------------------------------------------------------------------------

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def _eight_schools(pm, centred):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        if centred:
            theta = pm.Normal("theta", mu, tau, shape=8)
        else:
            theta_tilde = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
            theta = pm.Deterministic("theta", mu + tau * theta_tilde)
        pm.Normal("y", theta, SIGMA, observed=Y)
    return model


def _sample(pm, model, seed, target_accept):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(model=model, draws=500, tune=500, chains=4, cores=1,
                         random_seed=seed, progressbar=False, compute_convergence_checks=False,
                         target_accept=target_accept)


@pytest.fixture(scope="module")
def pm():
    return pytest.importorskip("pymc")


@pytest.fixture(scope="module")
def non_centred(pm):
    return _eight_schools(pm, centred=False)


@pytest.fixture(scope="module")
def centred(pm):
    return _eight_schools(pm, centred=True)


def test_non_centred_nuts_fits(pm, non_centred):
    trace = _sample(pm, non_centred, seed=11, target_accept=0.95)
    res = steindiag.diagnose(trace, non_centred, rng=0)
    # Truth: NUTS on the non-centred model samples the posterior (no funnel; target_accept
    # 0.95 removes the few divergences the default step size leaves).
    assert res["verdict_pooled"].item() == "fits", repr(res)
    assert "missing_mass_found" in res


def test_divergent_centred_nuts_is_not_fits(pm, centred):
    trace = _sample(pm, centred, seed=12, target_accept=0.8)
    # The mode search is left out to keep the test fast: on the funnel its optimiser runs
    # are long (log p is unbounded as tau -> 0), and it cannot turn a verdict into "fits".
    res = steindiag.diagnose(trace, centred, mode_search=False, rng=0)
    # Truth: the centred model's funnel makes NUTS diverge (Betancourt & Girolami 2015);
    # the run used here has divergences, and the verdict must not be "fits".
    assert res["divergences"].values.sum() > 0
    assert res["verdict_pooled"].item() != "fits", repr(res)


def test_prior_draws_against_the_posterior_do_not_fit(pm, non_centred):
    names = ["mu", "tau", "theta_tilde"]
    values = pm.draw([non_centred[n] for n in names], draws=1000, random_seed=13)
    posterior = xr.Dataset(
        {n: (("chain", "draw") + (("theta_tilde_dim_0",) if n == "theta_tilde" else ()),
             np.asarray(v).reshape(4, 250, *np.shape(v)[1:]))
         for n, v in zip(names, values)},
        coords={"chain": np.arange(4), "draw": np.arange(250)})
    # The search is left out to keep the test fast (it can only add rejections).
    res = steindiag.diagnose(posterior, non_centred, mode_search=False, rng=0)
    # Truth: prior draws, scored against the posterior the data make different from it.
    assert res["verdict_pooled"].item() == "does not fit", repr(res)
