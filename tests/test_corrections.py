"""Corrections that say when they cannot help, and the result objects' edges (issues 20, 21).

Sources of truth (each assertion names its own):
- divergence counts written by hand into a trace's ``sample_stats``;
- draws placed where the target has almost no mass (N(3, 0.3^2) for a N(0, 1) target):
  no reweighting of them fits, so the weighted KSD must stay far above its floor;
- the null distribution of the KSD of exact i.i.d. draws, simulated here with the slow
  NumPy Stein kernel of tests/reference.py;
- ArviZ's own ``summary`` for the columns and values of ``weighted_summary`` with equal
  weights;
- a small centred eight-schools NUTS run (the funnel makes it diverge).
"""

import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag import CorrectionWarning
from steindiag.methods.corrections import ksd_null_threshold
from steindiag.engine.products import KernelPoints
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import make_preconditioner

sys.path.insert(0, str(Path(__file__).parent))
from reference import imq_stein_kernel_matrix  # noqa: E402


def _tree(values, diverging):
    n_chain, n_draw, d = values.shape
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw)}
    posterior = xr.Dataset({"x": (("chain", "draw", "x_dim_0"), values)}, coords=coords)
    stats = xr.Dataset({"diverging": (("chain", "draw"), diverging)}, coords=coords)
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})


def _messages(caught):
    return [str(w.message) for w in caught if issubclass(w.category, CorrectionWarning)]


@pytest.fixture(scope="module")
def exact_draws():
    return np.random.default_rng(3).standard_normal((2, 150, 2))


# -- divergences ----------------------------------------------------------------------


def test_divergences_warned_and_recorded(exact_draws):
    diverging = np.zeros(exact_draws.shape[:2], dtype=bool)
    diverging[0, [3, 70]] = diverging[1, 5] = True          # 3 written by hand
    tree = _tree(exact_draws, diverging)
    with pytest.warns(CorrectionWarning, match="3 divergent transitions"):
        w = steindiag.stein_weights(tree, score=-exact_draws)
    # Truth: the counts written above (2 in chain 0, 1 in chain 1).
    assert w.attrs["sampler_divergences"] == 3
    assert "per chain: 2, 1" in w.attrs["correction_warnings"]
    with pytest.warns(CorrectionWarning, match="divergent"):
        steindiag.weighted_summary(tree, w)
    with pytest.warns(CorrectionWarning, match="divergent"):
        info = steindiag.stein_thin(tree, score=-exact_draws, n_selected=10, return_info=True)
    assert info.attrs["stein_thinning_sampler_divergences"] == 3
    assert info.thinned.posterior.attrs["stein_thinning_sampler_divergences"] == 3


def test_no_warning_without_a_cause(exact_draws):
    tree = _tree(exact_draws, np.zeros(exact_draws.shape[:2], dtype=bool))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorrectionWarning)
        w = steindiag.stein_weights(tree, score=-exact_draws)
        steindiag.weighted_summary(tree, w)
        steindiag.stein_thin(tree, score=-exact_draws, n_selected=10)
    # Truth: no divergences written, exact draws of the target (scores -x).
    assert w.attrs["correction_warnings"] == "" and w.attrs["sampler_divergences"] == 0
    assert w.attrs["missing_mass"] == "not searched"


# -- far above the floor ----------------------------------------------------------------


def test_draws_where_the_target_has_no_mass_are_far_above_the_floor():
    y = 3.0 + 0.3 * np.random.default_rng(1).standard_normal((2, 100, 1))
    with pytest.warns(CorrectionWarning, match="far above its i.i.d. floor"):
        w = steindiag.stein_weights(y, score=-y)
    # Truth: every draw is >= 2 sd from the mode of N(0, 1), where the score ~ -3 at all
    # of them; no weights on the simplex can cancel it, so the weighted KSD stays near 3.
    assert w.attrs["ksd_far_above_floor"] == 1
    assert w.attrs["ksd_weighted"] > w.attrs["ksd_far_threshold"]
    # For thinning the level is that of as many exact draws as points selected (50 here;
    # with very few points the null is too wide to tell).
    with pytest.warns(CorrectionWarning, match="far above"):
        steindiag.stein_thin(y, score=-y, n_selected=50)


def test_far_threshold_is_exceeded_by_exact_draws_at_most_one_percent():
    # Truth: the simulated null. Exact N(0, 1) draws (n = 60) and their exact KSD from the
    # slow NumPy kernel; by construction (Cantelli) P(KSD > threshold) <= 1 %. With 300
    # samples, P(Binomial(300, 0.01) >= 9) = 0.004: more than 8 exceedances would
    # contradict the bound.
    rng = np.random.default_rng(11)
    kernel = make_kernel("imq", None, None)
    exceed = 0
    for _ in range(300):
        x = rng.standard_normal((60, 1))
        pre = make_preconditioner("identity", x, ["x"])
        points = KernelPoints(x, -x, pre, kernel)
        matrix = imq_stein_kernel_matrix(x, -x, x, -x, np.eye(1))
        exceed += np.sqrt(matrix.mean()) > ksd_null_threshold(points)
    assert exceed <= 8


def test_null_moments_match_the_full_matrix():
    # Truth: E k_p(x, y)^2 and Var k_p(x, x) from the full matrix of tests/reference.py,
    # put into the variance of the V-statistic written out here; with n_rows >= n the
    # estimate uses every row, so the thresholds agree to rounding.
    x = np.random.default_rng(2).standard_normal((80, 2))
    pre = make_preconditioner("identity", x, ["a", "b"])
    points = KernelPoints(x, -x, pre, make_kernel("imq", None, None))
    matrix = imq_stein_kernel_matrix(x, -x, x, -x, np.eye(2))
    n = 80
    off = matrix[~np.eye(n, dtype=bool)]
    variance = (2 * (n - 1) * np.mean(off**2) + np.var(np.diag(matrix))) / n**3
    expected = np.sqrt(np.mean(np.diag(matrix)) / n + np.sqrt(99.0) * np.sqrt(variance))
    assert ksd_null_threshold(points, n_rows=1000) == pytest.approx(expected, rel=1e-10)


# -- missing mass ------------------------------------------------------------------------


def test_a_given_missing_mass_result_is_warned(exact_draws):
    found = types.SimpleNamespace(found=True, summary="a mode at x=(4, 4) was never visited",
                                  method="mode search", pvalue=0.001, n_log_density=10)
    with pytest.warns(CorrectionWarning, match="never visited"):
        w = steindiag.stein_weights(exact_draws, score=-exact_draws, mode_search=found)
    assert w.attrs["missing_mass"] == "found"
    with pytest.warns(CorrectionWarning, match="never visited"):
        steindiag.weighted_summary(exact_draws, w)


def test_missing_mass_search_runs_with_a_log_density(exact_draws, monkeypatch):
    calls = {}

    def search_missing_mass(draws, scores, *, log_density, score, kernel, preconditioner,
                            rng, alpha=0.05, starts=None, **options):
        calls["log_p"] = log_density(draws.reshape(-1, draws.shape[-1])[:3])
        return types.SimpleNamespace(found=True, summary="mass near x=(5, 5)",
                                     method="fake", pvalue=0.01, n_log_density=123)

    monkeypatch.setattr(steindiag.methods.search, "search_missing_mass", search_missing_mass)

    def log_density(z):
        return -0.5 * np.sum(z * z, axis=1)

    with pytest.warns(CorrectionWarning, match="mass near"):
        w = steindiag.stein_weights(exact_draws, score=lambda z: -z, log_density=log_density,
                                    rng=1)
    # Truth: the log density passed in, at the first three draws.
    flat = exact_draws.reshape(-1, 2)[:3]
    np.testing.assert_allclose(calls["log_p"], -0.5 * np.sum(flat**2, axis=1))
    assert w.attrs["missing_mass_n_log_density"] == 123
    with pytest.warns(CorrectionWarning, match="mass near"):
        steindiag.stein_thin(exact_draws, score=lambda z: -z, log_density=log_density,
                             n_selected=5)
    # No log density: "auto" does not search, and says why.
    w = steindiag.stein_weights(exact_draws, score=-exact_draws)
    assert w.attrs["missing_mass"] == "not searched"
    assert "log_density" in w.attrs["missing_mass_detail"]


def test_missing_mass_argument_errors(exact_draws):
    with pytest.raises(ValueError, match="mode_search=True needs log p"):
        steindiag.stein_weights(exact_draws, score=-exact_draws, mode_search=True)
    with pytest.raises(ValueError, match="mode_search must be"):
        steindiag.stein_weights(exact_draws, score=-exact_draws, mode_search="yes")
    with pytest.raises(TypeError, match="mode_search must be"):
        steindiag.stein_thin(exact_draws, score=-exact_draws, n_selected=3, mode_search=3)
    with pytest.raises(TypeError, match="log_density must be"):
        steindiag.stein_weights(exact_draws, score=-exact_draws, log_density=np.zeros(3))


# -- SVGD: before and after ------------------------------------------------------------


def test_svgd_reports_and_warns_when_the_ksd_rises():
    x = np.random.default_rng(5).standard_normal((120, 2))
    # Truth: exact draws of the target with steps of 3 standard deviations: the particles
    # are thrown far from the target, so the KSD must rise at every step.
    settings = dict(score=lambda z: -z, n_steps=5, step_size=3.0, svgd_kernel="rbf",
                    step_decay=None)
    with pytest.warns(CorrectionWarning, match="raised the KSD"):
        res = steindiag.stein_variational(x, keep="last", **settings)
    assert not res.improved and res.attrs["improved"] == 0
    assert res.ksd_final > res.ksd_initial
    assert res.attrs["ksd_initial"] == res.ksd_initial == float(res.ksd[0])
    # keep="best" (the default): no step beats the draws given, so they come back as
    # they were, with a warning.
    with pytest.warns(CorrectionWarning, match="did not lower the KSD"):
        best = steindiag.stein_variational(x, **settings)
    assert best.attrs["svgd_returned_step"] == 0 and best.ksd_final == best.ksd_initial
    np.testing.assert_allclose(best.draws, x, rtol=0, atol=1e-12)


def test_svgd_improving_does_not_warn():
    rng = np.random.default_rng(0)
    x = 0.5 + 2.0 * rng.standard_normal((200, 2))   # far from the N(0, I) target
    with warnings.catch_warnings():
        warnings.simplefilter("error", CorrectionWarning)
        res = steindiag.stein_variational(x, score=lambda z: -z, n_steps=200)
    # Truth: draws of N(0.5, 4 I) against N(0, I): moving them to the target lowers the KSD.
    assert res.improved and res.ksd_final < res.ksd_initial


# -- result objects ------------------------------------------------------------------


def test_result_reprs_are_short():
    x = np.random.default_rng(0).standard_normal((300, 2))
    svgd = steindiag.stein_variational(x, score=lambda z: -z, n_steps=3)
    thin = steindiag.stein_thin(x, score=-x, n_selected=12, return_info=True)
    fit = steindiag.min_ksd_fit(x[:, :1] + 1.0, lambda z, theta: -(z - theta[0]), theta0=[0.0],
                                linear=True)
    for result, words in ((svgd, ["SteinVariational", "300 particles", "KSD"]),
                          (thin, ["SteinThinning", "12 points", "not a Markov chain"]),
                          (fit, ["MinKSDFit", "estimate"])):
        text = repr(result)
        # Truth: a summary, not the arrays (the SVGD result holds 600 numbers of draws).
        assert len(text.splitlines()) <= 6 and len(text) < 600, text
        for word in words:
            assert word in text


# -- weighted_summary as arviz.summary -------------------------------------------------


def test_weighted_summary_columns_and_values_are_arviz_summary():
    az = pytest.importorskip("arviz")
    x = np.random.default_rng(1).standard_normal((4, 101, 3)) * [1.0, 2.0, 3.0]
    posterior = xr.Dataset({"a": (("chain", "draw", "k"), x)})
    table = steindiag.weighted_summary(posterior, np.ones((4, 101)))
    kwargs = {"round_to": "none"}
    expected = az.summary(posterior, kind="stats", **kwargs)
    # Truth: ArviZ's own summary with its default interval (ArviZ 0.x: HDI 94 %,
    # ArviZ 1.x: ETI 89 %), read from the same rcParams.
    assert list(table.columns) == [*expected.columns, "mcse_mean", "ess_kish"]
    for name in expected.columns[:2]:
        np.testing.assert_allclose(table[name].to_numpy(float),
                                   expected[name].to_numpy(float), rtol=1e-10)
    lower, upper = expected.columns[2:4]
    flat = np.sort(x.reshape(-1, 3), axis=0)
    gap = np.max(np.diff(flat, axis=0), axis=0)
    # HDI: ArviZ's rule exactly; ETI: ArviZ interpolates between order statistics, the
    # weighted quantile takes one of them, so they differ by at most one gap.
    for name in (lower, upper):
        np.testing.assert_array_less(
            np.abs(table[name].to_numpy(float) - expected[name].to_numpy(float)), gap + 1e-12)
    # Truth: the standard error of the mean of N independent draws, sd_ml / sqrt(N).
    n = flat.shape[0]
    np.testing.assert_allclose(table["mcse_mean"], flat.std(axis=0) / np.sqrt(n), rtol=1e-10)


def test_weighted_summary_hdi_matches_arviz_hdi():
    az = pytest.importorskip("arviz")
    x = np.random.default_rng(2).standard_normal((2, 150, 2))
    posterior = xr.Dataset({"a": (("chain", "draw", "k"), x)})
    table = steindiag.weighted_summary(posterior, np.ones((2, 150)), ci_prob=0.8,
                                       ci_kind="hdi")
    try:
        expected = az.hdi(posterior, hdi_prob=0.8)["a"].values        # ArviZ 0.x: (k, 2)
    except TypeError:
        expected = az.hdi(posterior, prob=0.8)["a"].values.T          # ArviZ 1.x: (2, k)?
    expected = np.asarray(expected)
    if expected.shape != (2, 2):
        raise AssertionError(expected.shape)
    interval = table.iloc[:, 2:4].to_numpy(float)
    # Truth: ArviZ's HDI of the same draws (equal weights).
    assert np.allclose(interval, expected, rtol=1e-12) or np.allclose(interval, expected.T,
                                                                      rtol=1e-12)


def test_weighted_hdi_follows_the_weights():
    # Truth: half the weight on two draws at 10 and 11: any interval holding 80 % of the
    # mass must contain them, and the weighted one is the shortest.
    x = np.concatenate([np.linspace(-1, 1, 98), [10.0, 11.0]])[None, :, None]
    w = np.concatenate([np.full(98, 0.5 / 98), [0.25, 0.25]])[None, :]
    table = steindiag.weighted_summary(x, w, ci_prob=0.8, ci_kind="hdi")
    lower, upper = table.iloc[0, 2], table.iloc[0, 3]
    assert upper == 11.0 and lower > -1.0


# -- stein_thin on a trace: one "chain" of points ----------------------------------------


def test_thinned_trace_is_one_set_of_points(exact_draws):
    az = pytest.importorskip("arviz")
    tree = _tree(exact_draws, np.zeros(exact_draws.shape[:2], dtype=bool))
    thinned = steindiag.stein_thin(tree, score=-exact_draws, n_selected=20)
    note = thinned.posterior.attrs["stein_thinning_layout"]
    assert "not a Markov chain" in note
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = az.summary(thinned.posterior.to_dataset())
    # Truth: R-hat needs at least two chains; ArviZ reports NaN for one, as documented.
    assert summary["r_hat"].isna().all()


# -- one real case: divergent centred eight schools (small NUTS run) --------------------


@pytest.fixture(scope="module")
def centred_eight_schools():
    pm = pytest.importorskip("pymc")
    import logging

    logging.getLogger("pymc").setLevel(logging.ERROR)
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("y", theta, sigma, observed=y, dims="school")
        trace = pm.sample(draws=250, tune=300, chains=2, cores=1, random_seed=4,
                          target_accept=0.7, progressbar=False,
                          compute_convergence_checks=False)
    return model, trace


def test_weights_and_thinning_warn_on_divergent_centred_eight_schools(centred_eight_schools):
    model, trace = centred_eight_schools
    n_divergent = int(trace.sample_stats["diverging"].sum())
    assert n_divergent > 0   # the funnel: the test is about a trace that diverged
    with pytest.warns(CorrectionWarning, match="divergent|never visited"):
        w = steindiag.stein_weights(trace, model, rng=0)
    # Truth: the sampler's own count in sample_stats.
    assert w.attrs["sampler_divergences"] == n_divergent
    with pytest.warns(CorrectionWarning, match="divergent|never visited"):
        steindiag.weighted_summary(trace, w)
    with pytest.warns(CorrectionWarning, match="divergent|never visited"):
        steindiag.stein_thin(trace, model, n_selected=50, rng=0)


def test_svgd_defaults_lower_the_ksd_on_centred_eight_schools(centred_eight_schools):
    model, trace = centred_eight_schools
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)     # groups dropped from the trace
        warnings.simplefilter("error", CorrectionWarning)
        res = steindiag.stein_variational(trace, model, ksd_every=10, progress=False)
    # Truth: measured (benchmarks/results/svgd_tuning.md) on 1000 particles of a longer
    # centred run; the defaults must lower the KSD here too, without a warning.
    assert res.improved and res.ksd_final < res.ksd_initial
