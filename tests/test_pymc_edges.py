"""The PyMC path's rough edges, each met as a new user meets it (issue 21, part 3).

Every fixture is a small real ``pm.sample`` run (2 chains, few draws, one core, the
Python linker) shared by the module. Sources of truth, named next to each assertion:
PyMC's own ``pm.to_inference_data`` (the conversion of a MultiTrace), the trace's own
groups and coordinates (what a selection keeps), exact arithmetic on the stored values
(a constant coordinate contributes 0 to every kernel distance), matplotlib's colour
cycle (the colour of each chain's curve).
"""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402

# pm.sample on the Python linker: no C/Numba compilation on a cold machine.
FAST = {"mode": "FAST_COMPILE"}
SAMPLE = dict(draws=60, tune=60, chains=2, cores=1, progressbar=False,
              compute_convergence_checks=False, compile_kwargs=FAST)


def _sample(model, seed, **kwargs):
    with warnings.catch_warnings():
        # PyMC 6 deprecates return_inferencedata=False; PyMC's own sampling notes.
        warnings.simplefilter("ignore")
        with model:
            return pm.sample(random_seed=seed, **SAMPLE, **kwargs)


def _group(trace, name):
    group = trace[name] if not hasattr(trace, name) else getattr(trace, name)
    return group.to_dataset() if hasattr(group, "to_dataset") else group


def _no_steindiag_warnings(record):
    return [str(w.message) for w in record if "steindiag" in (w.filename or "")
            or "observed/pm.Data" in str(w.message)]


# --------------------------------------------------------------------------------------
# fixtures: small models, sampled once per module
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def binomial():
    """p ~ Beta(2, 2), 13 successes of 20: a scalar observation (ArviZ 0.x stores (1,))."""
    with pm.Model() as model:
        p = pm.Beta("p", 2.0, 2.0)
        pm.Binomial("y", n=20, p=p, observed=13)
    return model, _sample(model, 1)


@pytest.fixture(scope="module")
def binomial_multitrace(binomial):
    model, _ = binomial
    return _sample(model, 2, return_inferencedata=False)


# --------------------------------------------------------------------------------------
# a MultiTrace is read as pm.to_inference_data reads it
# --------------------------------------------------------------------------------------


def _converted(multitrace, model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return pm.to_inference_data(multitrace, model=model)


def test_multitrace_is_a_multitrace(binomial_multitrace):
    # What pm.sample(return_inferencedata=False) returns, on PyMC 5 and on PyMC 6.
    assert type(binomial_multitrace).__name__ == "MultiTrace"


@pytest.mark.parametrize("function", ["ksd", "ksd_path", "ksd_test", "stein_weights"])
def test_multitrace_with_model_same_as_converted(binomial, binomial_multitrace, function):
    # Truth: PyMC's own conversion, pm.to_inference_data, of the same MultiTrace.
    model, _ = binomial
    extra = {"n_bootstrap": 50, "rng": 0} if function == "ksd_test" else {}
    call = getattr(steindiag, function)
    got = call(binomial_multitrace, model, **extra)
    expected = call(_converted(binomial_multitrace, model), model, **extra)
    xr.testing.assert_allclose(got, expected, rtol=1e-12, atol=0.0)


def test_multitrace_mmd_without_and_with_model(binomial, binomial_multitrace):
    # Truth: pm.to_inference_data; with two MultiTraces, parameters are matched by name.
    model, _ = binomial
    converted = _converted(binomial_multitrace, model)
    xr.testing.assert_allclose(steindiag.mmd(binomial_multitrace),
                               steindiag.mmd(converted), rtol=1e-12, atol=0.0)
    xr.testing.assert_allclose(steindiag.mmd(binomial_multitrace, model=model),
                               steindiag.mmd(converted, model=model), rtol=1e-12, atol=0.0)
    between = steindiag.mmd(binomial_multitrace, binomial_multitrace)
    assert json.loads(between.attrs["parameters"]) == ["p"]


def test_multitrace_add_scores_and_diagnose(binomial, binomial_multitrace):
    # Truth: the same calls on pm.to_inference_data's conversion of the MultiTrace.
    model, _ = binomial
    converted = _converted(binomial_multitrace, model)
    scored = steindiag.add_scores(binomial_multitrace, model)
    assert type(scored) is type(converted)
    xr.testing.assert_allclose(steindiag.ksd(scored), steindiag.ksd(converted, model),
                               rtol=1e-12, atol=0.0)
    options = {"mode_search": False, "n_bootstrap": 100, "n_permutations": 100, "rng": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # short chains: unreliable p-values
        got = steindiag.diagnose(binomial_multitrace, model, **options)
        expected = steindiag.diagnose(converted, model, **options)
    xr.testing.assert_allclose(got, expected, rtol=1e-12, atol=0.0)


def test_multitrace_thin_weighted_summary_variational(binomial, binomial_multitrace):
    # Truth: the same calls on pm.to_inference_data's conversion; the outputs are the
    # converted type (InferenceData on PyMC 5, DataTree on PyMC 6).
    model, _ = binomial
    converted = _converted(binomial_multitrace, model)
    thinned = steindiag.stein_thin(binomial_multitrace, model, n_selected=5)
    expected = steindiag.stein_thin(converted, model, n_selected=5)
    assert type(thinned) is type(expected)
    xr.testing.assert_allclose(_group(thinned, "posterior"), _group(expected, "posterior"))
    weights = steindiag.stein_weights(converted, model)
    table = steindiag.weighted_summary(binomial_multitrace, weights)
    assert list(table.index) == list(steindiag.weighted_summary(converted, weights).index)
    moved = steindiag.stein_variational(binomial_multitrace, model, n_steps=3, ksd_every=3)
    assert moved.ksd.shape == (2,)


# --------------------------------------------------------------------------------------
# a scalar observation is no false "data differ" warning; a different one still warns
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("function", ["ksd", "ksd_test", "stein_weights"])
def test_scalar_observation_matched_model_does_not_warn(binomial, function):
    # Truth: the model that sampled the trace has the trace's observed value, 13.
    model, idata = binomial
    assert np.asarray(_group(idata, "observed_data")["y"].values).ravel().tolist() == [13]
    extra = {"n_bootstrap": 20, "rng": 0} if function == "ksd_test" else {}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        getattr(steindiag, function)(idata, model, **extra)
    assert not [m for m in _no_steindiag_warnings(record) if "observed/pm.Data" in m]


def test_scalar_observation_different_value_warns(binomial):
    # Truth: this model observed 14 successes, the trace was drawn with 13.
    _, idata = binomial
    with pm.Model() as other:
        p = pm.Beta("p", 2.0, 2.0)
        pm.Binomial("y", n=20, p=p, observed=14)
    with pytest.warns(UserWarning, match=r"differ from the trace.*y \(same shape, different"):
        steindiag.ksd(idata, other)


# --------------------------------------------------------------------------------------
# coords: a selection is named for what it did, not blamed on the model
# --------------------------------------------------------------------------------------

SCHOOLS = ["Choate", "Deerfield", "Exeter"]


@pytest.fixture(scope="module")
def schools():
    """Three of the eight schools, non-centred, with the dim ``school``."""
    with pm.Model(coords={"school": SCHOOLS}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, dims="school")
        pm.Normal("y", mu + tau * eta, 10.0, observed=[28.0, 8.0, -3.0], dims="school")
    return model, _sample(model, 3)


@pytest.mark.parametrize("selection, did", [
    ("Choate", "picks one of the 3 values of 'school' and drops the dimension"),
    (["Choate"], "keeps 1 of the 3 values of 'school'"),
    (["Exeter", "Choate"], "keeps 2 of the 3 values of 'school'"),
])
def test_coords_on_a_free_variable_dim_says_what_it_did(schools, selection, did):
    # Truth: the trace's 'school' coordinate has the 3 values SCHOOLS; eta has that dim.
    model, idata = schools
    with pytest.raises(ValueError, match="coords=") as info:
        steindiag.ksd(idata, model, coords={"school": selection})
    message = str(info.value)
    assert did in message and "['eta']" in message
    assert "does not match the trace" not in message


def test_coords_keeping_every_school_in_order_is_no_selection(schools):
    # Truth: selecting all of SCHOOLS in order leaves the trace as it is.
    model, idata = schools
    xr.testing.assert_identical(steindiag.ksd(idata, model, coords={"school": SCHOOLS}),
                                steindiag.ksd(idata, model))


@pytest.mark.parametrize("dim, value", [("chain", 0), ("draw", 5), ("chain", np.int64(1))])
def test_scalar_selection_of_a_sample_dim_says_pass_a_list(schools, dim, value):
    # Truth: xarray's .sel with a scalar drops the dimension; a list keeps it.
    model, idata = schools
    plain = value.item() if isinstance(value, np.generic) else value
    with pytest.raises(ValueError, match=rf"selects a single {dim}") as info:
        steindiag.ksd(idata, model, coords={dim: value})
    assert f"coords={{{dim!r}: [{plain!r}]}}" in str(info.value)
    assert "sample_dims=" not in str(info.value)
    result = steindiag.ksd(idata, model, coords={"chain": [0]})
    assert result["ksd"].sizes["chain"] == 1


# --------------------------------------------------------------------------------------
# a discrete model: the advice in the error is a call that works
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def discrete():
    """k ~ Poisson(3), x | k ~ N(k, 1): one discrete and one continuous free variable."""
    with pm.Model() as model:
        k = pm.Poisson("k", 3.0)
        pm.Normal("x", k, 1.0)
    return model, _sample(model, 4)


def _mixture_score(x):
    """grad log p(x) of the marginal sum_k Poisson(k; 3) N(x; k, 1) (k summed to 40)."""
    from scipy.stats import poisson

    k = np.arange(41.0)
    log_w = poisson.logpmf(k, 3.0) - 0.5 * (x - k) ** 2          # (n, 41)
    w = np.exp(log_w - log_w.max(axis=1, keepdims=True))
    return (w * (k - x)).sum(axis=1, keepdims=True) / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("with_score", [False, True])
def test_discrete_model_error_gives_the_working_call(discrete, with_score):
    # Truth: the call quoted in the message runs, on the continuous variable x.
    model, idata = discrete
    kwargs = {"score": _mixture_score} if with_score else {}
    with pytest.raises(ValueError, match="discrete free variables: k") as info:
        steindiag.ksd(idata, model, **kwargs)
    call = "steindiag.ksd(idata, score=f, var_names=['x'], space='constrained')"
    assert call in str(info.value)
    result = steindiag.ksd(idata, score=_mixture_score, var_names=["x"], space="constrained")
    assert json.loads(result.attrs["parameters"]) == ["x"]


# --------------------------------------------------------------------------------------
# group= is recorded in every result
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def binomial_with_prior(binomial):
    """The binomial trace with a 'prior' group (pm.sample_prior_predictive), 2 chains."""
    model, idata = binomial
    with model:
        prior = pm.sample_prior_predictive(draws=120, random_seed=5, compile_kwargs=FAST)
    prior_set = _group(prior, "prior")
    values = prior_set["p"].values.reshape(2, 60)
    prior_set = xr.Dataset({"p": (("chain", "draw"), values)},
                           coords={"chain": [0, 1], "draw": np.arange(60)},
                           attrs=prior_set.attrs)
    if isinstance(idata, xr.DataTree):
        trace = idata.copy()
        trace["prior"] = xr.DataTree(prior_set)
        return model, trace
    trace = idata.copy()
    trace.add_groups({"prior": prior_set})
    return model, trace


def test_group_is_recorded_in_every_result(binomial_with_prior):
    # Truth: the group the draws were read from, as passed.
    model, trace = binomial_with_prior
    for group in ("prior", "posterior"):
        results = {
            "ksd": steindiag.ksd(trace, model, group=group),
            "ksd_path": steindiag.ksd_path(trace, model, group=group, n_points=5),
            "ksd_test": steindiag.ksd_test(trace, model, group=group, n_bootstrap=20, rng=0),
            "stein_weights": steindiag.stein_weights(trace, model, group=group),
            "mmd": steindiag.mmd(trace, group=group),
            "mmd model": steindiag.mmd(trace, model=model, group=group),
            "stein_thin": steindiag.stein_thin(trace, model, n_selected=4, group=group,
                                               return_info=True),
            "stein_variational": steindiag.stein_variational(trace, model, group=group,
                                                             n_steps=2, ksd_every=2),
        }
        for name, result in results.items():
            key = "stein_thinning_group" if name == "stein_thin" else "group"
            assert result.attrs[key] == group, name
        thinned = steindiag.stein_thin(trace, model, n_selected=4, group=group)
        assert _group(thinned, group).attrs["stein_thinning_group"] == group


# --------------------------------------------------------------------------------------
# plot_ksd: each chain's floor in its chain's colour
# --------------------------------------------------------------------------------------


def test_plot_ksd_floor_has_its_chains_colour(binomial):
    # Truth: each chain's curve and floor are the same Line2D colour, and chains differ.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    model, idata = binomial
    path = steindiag.ksd_path(idata, model, n_points=8)
    fig, ax = plt.subplots()
    try:
        steindiag.plot_ksd(path, ax=ax)
        lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
        colours = []
        for chain in path["chain"].values:
            curve, floor = lines[f"ksd[{chain}]"], lines[f"ksd_iid[{chain}]"]
            assert to_rgba(floor.get_color()) == to_rgba(curve.get_color())
            assert floor.get_linestyle() == "--"
            colours.append(to_rgba(floor.get_color()))
        assert len(set(colours)) == path.sizes["chain"]
        # The legend's one entry for all floors is neutral (grey), not chain 0's colour.
        legend = ax.get_legend()
        [entry] = [h for h, t in zip(legend.legend_handles, legend.get_texts())
                   if t.get_text() == "i.i.d. floor, each chain"]
        assert to_rgba(entry.get_color()) == to_rgba("0.55")
    finally:
        plt.close(fig)


def test_plot_ksd_collection_floor_has_its_chains_colour(binomial):
    # Truth: arviz-plots' chain aesthetic gives the curve and the floor of a chain one
    # colour, and different chains different colours.
    pytest.importorskip("arviz_plots")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    model, idata = binomial
    path = steindiag.ksd_path(idata, model, n_points=8)
    pc = steindiag.plot_ksd(path, backend="matplotlib")
    try:
        curves, floors = pc.viz["ksd"]["ksd"], pc.viz["ksd_iid"]["ksd_iid"]
        colours = [to_rgba(floors.sel(chain=c).item().get_color()) for c in path["chain"].values]
        for chain, colour in zip(path["chain"].values, colours):
            assert colour == to_rgba(curves.sel(chain=chain).item().get_color())
        assert len(set(colours)) == path.sizes["chain"]
    finally:
        plt.close("all")


# --------------------------------------------------------------------------------------
# mmd without a model: constant deterministics (LKJ's unit diagonal) are left out
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lkj():
    """A 2-d LKJCholeskyCov + MvNormal model: chol_corr has a constant unit diagonal."""
    observed = np.random.default_rng(0).standard_normal((20, 2))
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0), compute_corr=True)
        pm.MvNormal("obs", mu=np.zeros(2), chol=chol, observed=observed)
    return model, _sample(model, 6)


def _flat_posterior(trace):
    """(chain, draw, d) of every posterior variable, in the trace's order, with labels."""
    posterior = _group(trace, "posterior")
    blocks, labels = [], []
    for name, variable in posterior.data_vars.items():
        other = [dim for dim in variable.dims if dim not in ("chain", "draw")]
        values = variable.transpose("chain", "draw", *other).values
        blocks.append(values.reshape(*values.shape[:2], -1))
        labels.extend(f"{name}[{i}]" for i in range(blocks[-1].shape[2]))
    return np.concatenate(blocks, axis=2), labels


def test_mmd_without_model_leaves_out_constant_coordinates(lkj):
    # Truth: the trace's own values: chol_corr[0, 0] and chol_corr[1, 1] are 1 at every
    # draw up to round-off (a few ulp); MMD of the array with those columns removed by hand.
    _, idata = lkj
    corr = _group(idata, "posterior")["chol_corr"].values
    np.testing.assert_allclose(corr[:, :, [0, 1], [0, 1]], 1.0, rtol=0, atol=1e-14)
    with pytest.warns(UserWarning, match=r"mmd: 2 coordinate\(s\) have one value") as record:
        result = steindiag.mmd(idata)
    assert not any("KSD" in str(w.message) for w in record)
    assert json.loads(result.attrs["constant_parameters_left_out"]) == ["chol_corr[0, 0]",
                                                            "chol_corr[1, 1]"]
    assert result.attrs["n_parameter"] == len(json.loads(result.attrs["parameters"]))
    flat, labels = _flat_posterior(idata)
    unit = [labels.index("chol_corr[0]"), labels.index("chol_corr[3]")]  # (0, 0), (1, 1)
    varying = np.delete(flat, unit, axis=2)
    expected = steindiag.mmd(varying)
    np.testing.assert_allclose(result.values, expected.values, rtol=1e-12, atol=1e-15)


def test_mmd_constant_coordinates_change_nothing(lkj):
    # Truth: a coordinate equal in every draw adds 0 to every (x - y), so with Lambda = I
    # given as an array (nothing left out) MMD is the same as with them left out.
    _, idata = lkj
    flat, _ = _flat_posterior(idata)
    with pytest.warns(UserWarning, match="left out"):
        identity = steindiag.mmd(idata, preconditioner="identity")
    kept_all = steindiag.mmd(flat, preconditioner=np.ones(flat.shape[2]))
    np.testing.assert_allclose(identity.values, kept_all.values, rtol=1e-12, atol=1e-15)


def test_mmd_with_model_compares_the_free_variables(lkj):
    # Truth: the model's value variables (here 'chol_cholesky-cov-packed__', 3 entries)
    # vary, so nothing is left out and nothing warns.
    model, idata = lkj
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        result = steindiag.mmd(idata, model=model)
    assert json.loads(result.attrs["constant_parameters_left_out"]) == []
    assert result.attrs["n_parameter"] == 3


def test_mmd_all_constant_names_mmd():
    # Truth: equal samples; the message names MMD, not KSD.
    with pytest.raises(ValueError, match="mmd: every coordinate") as info:
        steindiag.mmd(np.ones((2, 30, 2)))
    assert "KSD" not in str(info.value)


# --------------------------------------------------------------------------------------
# pm.set_data that leaves the model inconsistent: a clear error
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def regression():
    """obs ~ N(b * x, 1) with x and y as pm.Data (5 points)."""
    with pm.Model() as model:
        x = pm.Data("x", np.arange(5.0))
        y = pm.Data("y", np.array([0.1, 1.2, 1.9, 3.2, 3.9]))
        b = pm.Normal("b", 0.0, 2.0)
        pm.Normal("obs", b * x, 1.0, observed=y)
    return model, _sample(model, 7)


@pytest.mark.parametrize("function", ["ksd", "stein_weights"])
def test_set_data_of_some_shapes_gives_a_clear_error(regression, function):
    # Truth: after pm.set_data({"x": 7 values}) the mean has 7 entries and the observed
    # y still 5: the model's own log p has no value.
    model, idata = regression
    try:
        with model:
            pm.set_data({"x": np.arange(7.0)})
        with pytest.raises(ValueError, match="cannot be evaluated with its current data") \
                as info, pytest.warns(UserWarning, match="differ from the trace"):
            getattr(steindiag, function)(idata, model)
        message = str(info.value)
        assert "x (7,)" in message and "y (5,)" in message and "pm.set_data" in message
    finally:
        with model:
            pm.set_data({"x": np.arange(5.0)})


def test_set_data_consistent_is_not_an_error(regression):
    # Truth: x and y set together (7 points each) make a consistent model: scores exist,
    # and the data-differ warning still says the trace was drawn with other data.
    model, idata = regression
    try:
        with model:
            pm.set_data({"x": np.arange(7.0), "y": np.arange(7.0)})
        with pytest.warns(UserWarning, match="differ from the trace"):
            result = steindiag.ksd(idata, model)
        assert np.isfinite(result["ksd_pooled"].item())
    finally:
        with model:
            pm.set_data({"x": np.arange(5.0), "y": np.array([0.1, 1.2, 1.9, 3.2, 3.9])})


# A variational approximation (pm.fit) passed in place of a trace (issue 35, point 5).
# Truth: the same call on the approximation's own draws, approx.sample(1000, random_seed=0)
# with the model (the documented reading), and the draws' count and chain layout.
@pytest.fixture(scope="module")
def binomial_approximation(binomial):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with binomial[0]:
            return pm.fit(300, method="advi", progressbar=False, random_seed=3)


@pytest.mark.parametrize("function", ["ksd", "ksd_test"])
def test_approximation_is_read_as_its_draws(binomial, binomial_approximation, function):
    direct = getattr(steindiag, function)(binomial_approximation, rng=0) \
        if function == "ksd_test" else steindiag.ksd(binomial_approximation)
    draws = binomial_approximation.sample(1000, random_seed=0)
    options = {"rng": 0} if function == "ksd_test" else {}
    by_hand = getattr(steindiag, function)(draws, binomial[0], **options)
    assert direct.sizes["chain"] == 1
    name = "ksd_pooled" if function == "ksd" else "pvalue_pooled"
    np.testing.assert_array_equal(direct[name].values, by_hand[name].values)


def test_approximation_add_scores_and_control_variates(binomial, binomial_approximation):
    scored = steindiag.add_scores(binomial_approximation)
    stats = _group(scored, "sample_stats")
    assert stats.sizes["chain"] == 1 and stats.sizes["draw"] == 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a short ADVI run: the premise check may warn
        cv = steindiag.control_variates(binomial_approximation)
    assert np.all(np.isfinite(cv["mean"].values))
