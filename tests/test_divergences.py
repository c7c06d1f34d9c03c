"""Divergences in context (issue 36, point 3): where they sit, the rule that may still give
"fits", advice from what the run did, and a PyMC model's centred hierarchies.

Truth comes from: a slow reference of the location statistic (a loop over parameters with
ArviZ's own MCSE); flags placed by construction on the draws with low values of one
parameter (so that parameter, and no other, must be named); the distribution of the
statistic under flags placed at random on i.i.d. draws (mean 0, variance 1, by the
sampling of a random subset); the rules as documented in ``steindiag.stats.verdict``;
the eight schools models written centred and non-centred by hand (Rubin 1981).
"""

import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag.inputs import sampler_warnings
from steindiag.inputs._pymc_hierarchy import model_parameterisation
from steindiag.outputs.divergences import divergence_advice
from steindiag.stats import verdict as rules
from steindiag.stats.divergences import divergence_shift

# -- the location statistic ------------------------------------------------------------


def _arviz_mcse(values):
    az = pytest.importorskip("arviz")
    if int(az.__version__.split(".")[0]) >= 1:
        from arviz_stats.base import array_stats
        return float(np.asarray(array_stats.mcse(values, method="mean", chain_axis=-2,
                                                 draw_axis=-1)).ravel()[0])
    return float(np.asarray(az.mcse(values, method="mean")).ravel()[0])


def test_shift_matches_a_slow_reference():
    rng = np.random.default_rng(0)
    draws = rng.standard_normal((3, 200, 4)) * np.array([1.0, 2.0, 0.5, 3.0]) + 1.0
    diverging = rng.random((3, 200)) < 0.03
    ours = divergence_shift(draws, diverging)
    for k in range(4):
        # Truth: the documented formula, one parameter at a time, with ArviZ's MCSE.
        divergent = [draws[c, t, k] for c in range(3) for t in range(200) if diverging[c, t]]
        rest = [draws[c, t, k] for c in range(3) for t in range(200) if not diverging[c, t]]
        se = _arviz_mcse(draws[:, :, k])
        expected = ((np.mean(divergent) - np.mean(rest))
                    / np.sqrt(np.var(rest, ddof=1) / len(divergent) + se ** 2))
        assert ours[k] == pytest.approx(expected, rel=1e-10)


def test_flags_on_low_values_name_that_parameter():
    rng = np.random.default_rng(1)
    draws = rng.standard_normal((4, 1000, 10))
    # By construction: 6 divergences on draws where parameter 3 is below -1.5.
    low = np.argwhere(draws[:, :, 3] < -1.5)[:6]
    diverging = np.zeros((4, 1000), dtype=bool)
    diverging[low[:, 0], low[:, 1]] = True
    z = divergence_shift(draws, diverging)
    picked, significant = rules.named(z)
    assert significant and picked.tolist() == [3] and z[3] < -4


def test_shift_is_standard_normal_for_flags_at_random():
    rng = np.random.default_rng(2)
    values = []
    for _ in range(300):
        draws = rng.standard_normal((2, 500, 1))
        diverging = np.zeros((2, 500), dtype=bool)
        diverging.ravel()[rng.choice(1000, size=5, replace=False)] = True
        values.append(divergence_shift(draws, diverging)[0])
    values = np.array(values)
    # Truth: i.i.d. draws, 5 flags at random: the mean of 5 draws against the rest's is
    # N(0, 1) in these units; mean within 4 standard errors (1 / sqrt(300)), variance
    # within 4 of its standard errors (sqrt(2 / 299)).
    assert abs(values.mean()) < 4 / np.sqrt(300)
    assert abs(values.var(ddof=1) - 1.0) < 4 * np.sqrt(2 / 299)


def test_shift_without_divergences_or_bad_shape():
    draws = np.zeros((2, 10, 3))
    assert np.isnan(divergence_shift(draws, np.zeros((2, 10), dtype=bool))).all()
    with pytest.raises(ValueError, match="diverging must have shape"):
        divergence_shift(draws, np.zeros((2, 9), dtype=bool))


# -- the rule ------------------------------------------------------------------------------


def _evidence(**changes):
    args = dict(pvalue=np.array([0.5, 0.5]), reliable=np.array([True, True]),
                pvalue_pooled=0.5, reliable_pooled=True, kept_draws=100, thinning_lag=5,
                min_kept_draws=20, n_draw=1000, effective_draws_pooled=500.0,
                agreement_pvalue=0.5, agreement_reliable=True,
                divergences=np.array([0, 1]), divergence_shift=np.array([0.3, -1.1, 0.8]),
                parameterisation="non-centred")
    args.update(changes)
    return rules.Evidence(**args)


def _verdicts(**changes):
    e = _evidence(**changes)
    chain, chain_codes, _ = rules.chain_verdicts(e, 0.01)
    pooled, pooled_code, reason = rules.pooled_verdict(e, 0.01)
    return chain.tolist(), chain_codes.tolist(), pooled, pooled_code, reason


def test_a_few_divergences_sitting_nowhere_fit_with_a_caveat():
    chain, codes, pooled, code, reason = _verdicts()
    # Truth: the documented rule: a model read as non-centred, 1 divergence in 1000 draws
    # (<= FEW_DIVERGENCES per 1000), no parameter named (|z| <= 1.1, below Bonferroni's
    # 2.4 for 3 parameters), every test passing.
    assert chain == ["fits", "fits"] and codes == ["no_rejection", "few_divergences"]
    assert pooled == "fits" and code == "few_divergences"
    assert "1 divergent transition (0.5 per 1000 draws), which sits nowhere" in reason


def test_divergences_stay_inconclusive_outside_the_rule():
    many = int(rules.FEW_DIVERGENCES) + 1          # per 1000 draws, in one chain
    # Truth: the documented rule, one condition broken at a time.
    assert _verdicts(divergences=np.array([0, many]))[2:4] == ("inconclusive", "divergences")
    assert _verdicts(divergence_shift=np.array([0.3, -4.0, 0.8]))[2] == "inconclusive"
    assert _verdicts(divergence_shift=None)[2] == "inconclusive"     # flags not known
    assert _verdicts(divergence_shift=np.full(3, np.nan))[2] == "inconclusive"
    for state in ("centred", "unknown", ""):                  # no model read as non-centred
        assert _verdicts(parameterisation=state)[2:4] == ("inconclusive", "divergences")
    chain, codes, pooled, code, _ = _verdicts(reliable_pooled=False)
    assert pooled == "inconclusive" and code == "too_few_draws"
    # A rejection decides before the divergences are read.
    assert _verdicts(pvalue_pooled=0.001)[2] == "does not fit"
    assert _verdicts(agreement_pvalue=0.001)[2] == "does not fit"
    # Each chain on its own count: chain 0 many, chain 1 one.
    chain, codes, pooled, _, _ = _verdicts(divergences=np.array([many, 1]))
    assert chain == ["inconclusive", "fits"] and pooled == "inconclusive"
    assert not rules.divergences_in_context(_evidence(divergences=None))


# -- reading the sampler's statistics ---------------------------------------------------------


def _tree(draws, diverging, acceptance=None):
    n_chain, n_draw = diverging.shape
    stats = {"diverging": (("chain", "draw"), diverging)}
    if acceptance is not None:
        stats["acceptance_rate"] = (("chain", "draw"),
                                    np.broadcast_to(acceptance, (n_chain, n_draw)))
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset({"x": (("chain", "draw", "k"), draws)}),
        "sample_stats": xr.Dataset(stats)})


def test_flags_and_acceptance_are_read_once_with_the_counts():
    diverging = np.zeros((2, 6), dtype=bool)
    diverging[1, [2, 5]] = True
    acceptance = np.array([[0.9] * 6, [0.8, 1.0, 0.8, 1.0, 0.8, 1.0]])
    tree = _tree(np.zeros((2, 6, 1)), diverging, acceptance)
    found = sampler_warnings(tree, draw=np.arange(6))
    # Truth: the arrays written above.
    np.testing.assert_array_equal(found.diverging, diverging)
    np.testing.assert_allclose(found.acceptance, [0.9, 0.9])
    assert found.parameterisation is None                 # no model given
    found = sampler_warnings(_tree(np.zeros((2, 6, 1)), diverging))
    assert found.acceptance is None


# -- the report: where, and advice from what the run did ----------------------------------------


@pytest.fixture(scope="module")
def low_x0_divergences():
    rng = np.random.default_rng(3)
    draws = rng.standard_normal((2, 1000, 3))
    diverging = np.zeros((2, 1000), dtype=bool)
    for ch in range(2):                     # by construction: 6 per chain, where x[0] is low
        diverging[ch, np.flatnonzero(draws[ch, :, 0] < -1.8)[:6]] = True
    return draws, diverging


_RECORDED = ("the recorded mean acceptance is {:.2f} (NUTS tunes its step size to bring it "
             "near target_accept, which is not read from the trace), so raising "
             "target_accept helps little")


@pytest.mark.parametrize("acceptance, advice", [
    (0.98, _RECORDED.format(0.98) + ": reparameterise where the divergences sit (x[0])"),
    (0.81, "raise target_accept (recorded mean acceptance 0.81) or reparameterise (e.g. "
           "non-centred) where the divergences sit (x[0])"),
    (None, "raise target_accept or reparameterise (e.g. non-centred) where the divergences "
           "sit (x[0])"),
])
def test_advice_follows_the_recorded_acceptance(low_x0_divergences, acceptance, advice):
    draws, diverging = low_x0_divergences
    res = steindiag.diagnose(_tree(draws, diverging, acceptance), score=lambda x: -x,
                             mode_search=False, rng=0)
    text = str(res)
    # Truth: the flags were put on draws with low x[0] (12 of them, in both chains), the
    # acceptance written above; 12 in 2000 draws is above the rule's few per 1000.
    assert diverging.any(axis=1).all()
    assert res["reason_code_pooled"].item() == "divergences"
    assert f"next: {advice}" in text
    assert "where: 12 divergent transitions (chains 0 and 1) sit where x[0] is low (z = -" in text
    assert res["divergence_shift"].dims == ("parameter",)
    assert ("acceptance_rate" in res) == (acceptance is not None)


def _result(state, acceptance, centred=""):
    """A diagnose result reduced to what the advice reads: inconclusive on divergences
    that sit nowhere in particular, the acceptance and parameterisation given."""
    attrs = {"parameterisation": state} if state else {}
    if centred:
        attrs["centred_variables"] = centred
    return xr.Dataset(
        {"reason_code_pooled": ((), "divergences"),
         "divergences": (("chain",), [3, 9]),
         "divergence_shift": (("parameter",), [0.5, -1.0]),
         "acceptance_rate": (("chain",), [acceptance, acceptance])},
        coords={"chain": [0, 1], "parameter": ["mu", "tau_log__"]}, attrs=attrs)


def test_advice_follows_the_parameterisation():
    # Truth: the rules of divergence_advice as documented: a centred hierarchy is named
    # and non-centring advised; a model read as non-centred is never told to non-centre.
    centred = "theta (its scale depends on tau)"
    for acceptance in (0.8, 0.98):
        text = divergence_advice(_result("centred", acceptance, centred))
        assert f"model has a centred hierarchy: {centred}. Write it non-centred" in text
        assert text.startswith(_RECORDED.format(0.98)) == (acceptance == 0.98)
        text = divergence_advice(_result("non-centred", acceptance))
        assert "non-centred" not in text.replace("no centred hierarchy", "")
        assert "no centred hierarchy steindiag can see" in text
    assert "raise target_accept (recorded mean acceptance 0.80) until" in divergence_advice(
        _result("non-centred", 0.8))
    assert "(e.g. non-centred)" in divergence_advice(_result("unknown", 0.8))


@pytest.fixture(scope="module")
def one_divergence():
    rng = np.random.default_rng(4)
    draws = rng.standard_normal((2, 1000, 3))          # by construction: draws of N(0, I)
    diverging = np.zeros((2, 1000), dtype=bool)
    diverging[1, 417] = True                            # one flag, at a draw taken at random
    return _tree(draws, diverging, 0.9)


def test_one_divergence_reads_in_the_singular_and_fits(one_divergence):
    pm = pytest.importorskip("pymc")
    with pm.Model() as model:                           # its posterior is N(0, I) exactly
        pm.Normal("x", 0.0, 1.0, shape=3)
    res = steindiag.diagnose(one_divergence, model, mode_search=False, rng=0)
    text = str(res)
    # Truth: the documented rule (a model without a centred hierarchy, 1 divergence in
    # 1000 draws sitting nowhere in particular, every test passing on exact draws of p)
    # and the plural rule.
    assert res.attrs["parameterisation"] == "non-centred"
    assert res["verdict_pooled"].item() == "fits"
    assert res["reason_code_pooled"].item() == "few_divergences"
    assert "1 divergent transition (0.5 per 1000 draws), which sits nowhere" in text
    assert "where: 1 divergent transition (chain 1) sits nowhere in particular" in text
    assert "next: use the draws, and report the 1 divergent transition with them" in text
    assert "1 divergent transitions" not in text
    assert res["verdict"].values.tolist() == ["fits", "fits"]
    assert res["reason_code"].values.tolist() == ["no_rejection", "few_divergences"]


def test_one_divergence_without_a_model_stays_inconclusive(one_divergence):
    res = steindiag.diagnose(one_divergence, score=lambda x: -x, mode_search=False, rng=0)
    text = str(res)
    # Truth: without a model nothing says the run has no centred hierarchy, so the rule
    # does not apply; the wording is in the singular.
    assert res["reason_code_pooled"].item() == "divergences"
    assert "why: 1 divergent transition: the sampler could not explore" in text
    assert "where: 1 divergent transition (chain 1) sits nowhere in particular" in text
    assert "1 divergent transitions" not in text


def test_a_trace_without_sampler_statistics():
    rng = np.random.default_rng(5)
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"x": (("chain", "draw", "k"),
                                       rng.standard_normal((2, 500, 2)))})})
    res = steindiag.diagnose(tree, score=lambda x: -x, mode_search=False, rng=0)
    # Truth: no sample_stats group, so nothing about divergences can be said or stored.
    for name in ("divergences", "divergence_shift", "acceptance_rate"):
        assert name not in res
    assert "divergen" not in str(res).split("\n", 3)[3].split("each test")[0]
    assert res["reason_code_pooled"].item() != "few_divergences"


# -- the model's parameterisation (graphs only, no sampling) -----------------------------------

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def _eight_schools(pm, centred):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        if centred:
            theta = pm.Normal("theta", mu, tau, shape=8)
        else:
            theta = mu + tau * pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
        pm.Normal("y", theta, SIGMA, observed=Y)
    return model


def test_centred_and_non_centred_eight_schools():
    pm = pytest.importorskip("pymc")
    # Truth: theta ~ N(mu, tau) with tau free is centred; theta = mu + tau * theta_tilde,
    # theta_tilde ~ N(0, 1), is not (Rubin 1981; Betancourt & Girolami 2015).
    centred = model_parameterisation(_eight_schools(pm, True))
    assert centred.state == "centred" and centred.centred == [("theta", ["tau"])]
    assert model_parameterisation(_eight_schools(pm, False)).state == "non-centred"
    with pm.Model() as funnel:                   # Neal's funnel: x's scale is exp(v / 2)
        v = pm.Normal("v", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2.0), shape=3)
    assert model_parameterisation(funnel).centred == [("x", ["v"])]
    with pm.Model() as walk:                     # a random walk: its scale is not read
        step = pm.HalfNormal("step", 1.0)
        pm.GaussianRandomWalk("h", sigma=step, init_dist=pm.Normal.dist(0.0, 1.0), steps=4)
    assert model_parameterisation(walk).state == "unknown"
