"""``labeller=`` (issue 38, point 3): ArviZ's labellers in every function that reads draws.

Source of truth: ArviZ's own labels of the same trace and selection: on ArviZ 0.x
``az.summary(data, var_names=, filter_vars=, labeller=L).index``; on ArviZ 1.x
``arviz_base.dataset_to_dataframe(selection, labeller=L).columns`` (the labelling
``arviz_stats.summary`` does with its default labeller, checked against it for
``BaseLabeller``), the selection made by ArviZ's own ``_var_names``.
"""

import json
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

import steindiag  # noqa: E402

# These draws are N(0, I) by construction and scored as such: a premise check's warning on
# one column of this small sample (or the weights' spread check) says nothing of the labels
# tested here.
pytestmark = [pytest.mark.filterwarnings("ignore:control_variates. the draws and the score"),
              pytest.mark.filterwarnings("ignore:stein_weights cannot be trusted")]

try:                                    # ArviZ 1.x
    from arviz_base import labels as arviz_labels
    ARVIZ_1 = True
except ImportError:                     # ArviZ 0.x
    from arviz import labels as arviz_labels
    ARVIZ_1 = False

SCHOOLS = ["Choate", "Deerfield", "Phillips Andover", "Phillips Exeter", "Hotchkiss",
           "Lawrenceville", "St. Paul's", "Mt. Hermon"]


def score(z):
    return -z            # grad log N(0, I): the labels, not the numbers, are tested here


@pytest.fixture(scope="module")
def posterior():
    """Eight schools' variables (mu, tau, theta and theta_tilde by school) and a 2 x 2
    variable whose dims have no coordinate (labelled by position)."""
    rng = np.random.default_rng(0)
    shape = (2, 60)
    return xr.Dataset({
        "mu": (("chain", "draw"), rng.standard_normal(shape)),
        "tau": (("chain", "draw"), rng.standard_normal(shape)),   # log tau: see below
        "theta": (("chain", "draw", "school"), rng.standard_normal((*shape, 8))),
        "theta_tilde": (("chain", "draw", "school"), rng.standard_normal((*shape, 8))),
        "L": (("chain", "draw", "row", "col"), rng.standard_normal((*shape, 2, 2))),
    }, coords={"chain": [0, 1], "draw": np.arange(60), "school": SCHOOLS})


def arviz_flat_labels(dataset, labeller, var_names=None, filter_vars=None):
    """ArviZ's labels of the selected variables' elements (see the module docstring)."""
    if not ARVIZ_1:
        import arviz as az

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            summary = az.summary(dataset, var_names=var_names, filter_vars=filter_vars,
                                 labeller=labeller, kind="stats")
        return list(summary.index)
    from arviz_base import dataset_to_dataframe
    from arviz_base.utils import _var_names

    names = _var_names(var_names, dataset, filter_vars)
    selected = dataset if names is None else dataset[list(names)]
    return [str(label) for label in dataset_to_dataframe(
        selected, sample_dims=["chain", "draw"], labeller=labeller).columns]


def map_labeller():
    return arviz_labels.MapLabeller(var_name_map={"theta": "θ", "mu": "μ"},
                                    coord_map={"school": {"Choate": "Ch", "Hotchkiss": "Ho"}})


LABELLERS = {
    "base": arviz_labels.BaseLabeller,
    "map": map_labeller,
    "dimcoord": arviz_labels.DimCoordLabeller,
    "idx": arviz_labels.IdxLabeller,
    "map_dimcoord": lambda: arviz_labels.mix_labellers(
        (arviz_labels.MapLabeller, arviz_labels.DimCoordLabeller))(
        var_name_map={"tau": "τ"}, dim_map={"school": "s"}),
}
SELECTIONS = [(None, None), (["theta", "mu"], None), (["~theta"], None), (["theta"], "like"),
              (["^t"], "regex"), (["~_"], "like")]


def _parameters(result):
    """The parameter labels a result carries."""
    if isinstance(result, steindiag.SteinVariational):
        return list(result.attrs["parameters"])
    attrs = result.attrs
    key = "parameters" if "parameters" in attrs else "stein_thinning_parameters"
    value = attrs[key]
    return json.loads(value) if isinstance(value, str) else list(value)


def test_base_labeller_is_arviz_stats_summary(posterior):
    if not ARVIZ_1:
        pytest.skip("arviz_stats is ArviZ 1.x")
    import arviz_stats

    # truth: arviz_stats.summary's index (its labels are BaseLabeller's)
    expected = list(arviz_stats.summary(posterior, kind="stats", round_to="none").index)
    assert arviz_flat_labels(posterior, arviz_labels.BaseLabeller()) == expected
    assert _parameters(steindiag.ksd(posterior, score=score)) == expected


@pytest.mark.parametrize("var_names, filter_vars", SELECTIONS)
@pytest.mark.parametrize("name", sorted(LABELLERS))
def test_labels_are_arvizs(posterior, name, var_names, filter_vars):
    labeller = LABELLERS[name]()
    expected = arviz_flat_labels(posterior, labeller, var_names, filter_vars)
    selection = dict(var_names=var_names, filter_vars=filter_vars, labeller=labeller)
    assert _parameters(steindiag.ksd(posterior, score=score, **selection)) == expected
    weights = np.full((2, 60), 1.0 / 120)
    assert list(steindiag.weighted_summary(posterior, weights, **selection).index) == expected
    result = steindiag.control_variates(posterior, score=score, method="polynomial1",
                                        **selection)
    assert list(result["label"].values) == expected


@pytest.mark.parametrize("function, options", [
    (steindiag.ksd_path, dict(score=score, n_points=3)),
    (steindiag.ksd_test, dict(score=score, n_bootstrap=20, rng=0)),
    (steindiag.mmd, {}),
    (steindiag.stein_weights, dict(score=score)),
    (steindiag.stein_thin, dict(score=score, n_selected=5)),
    (steindiag.stein_variational, dict(score=score, n_steps=2, rng=0)),
], ids=lambda value: getattr(value, "__name__", ""))
def test_every_function_labels_as_arviz(posterior, function, options):
    labeller = map_labeller()
    var_names, filter_vars = ["~L"], None
    expected = arviz_flat_labels(posterior, labeller, var_names, filter_vars)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = function(posterior, var_names=var_names, filter_vars=filter_vars,
                          labeller=labeller, **options)
    assert _parameters(result) == expected


def test_diagnose_labels_its_parameter_coordinate(posterior):
    labeller = arviz_labels.DimCoordLabeller()
    expected = arviz_flat_labels(posterior, labeller, ["theta"], "like")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = steindiag.diagnose(posterior, score=score, var_names=["theta"],
                                   filter_vars="like", rng=0)
        result = steindiag.diagnose(posterior, score=score, var_names=["theta"],
                                    filter_vars="like", labeller=labeller, rng=0)
    assert list(result["parameter"].values) == expected
    assert _parameters(result) == expected
    # Only the labels change: every number is the same.
    for name in ("ksd", "pvalue", "score_location_z"):
        np.testing.assert_array_equal(result[name].values, plain[name].values)
    assert "theta[school: Choate]" in repr(result) or result.verdict_pooled is not None


def test_default_keeps_the_labels_and_numbers(posterior):
    plain = steindiag.ksd(posterior, score=score)
    base = steindiag.ksd(posterior, score=score, labeller=arviz_labels.BaseLabeller())
    idx = steindiag.ksd(posterior, score=score, labeller=arviz_labels.IdxLabeller())
    assert _parameters(plain) == _parameters(base)
    assert "theta[Choate]" in _parameters(plain) and "L[1, 0]" in _parameters(plain)
    for result in (base, idx):
        for name in plain.data_vars:
            np.testing.assert_array_equal(result[name].values, plain[name].values)


def test_arrays_are_labelled_as_arviz_reads_an_array():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 50, 3))
    labeller = arviz_labels.MapLabeller(var_name_map={"x": "z"})
    if ARVIZ_1:
        from arviz_base import convert_to_dataset
        dataset = convert_to_dataset(x)
    else:
        import arviz as az
        dataset = az.convert_to_dataset(x)
    # truth: ArviZ's labels of the array, read as ArviZ reads it (variable x, dim x_dim_0)
    expected = arviz_flat_labels(dataset, labeller)
    assert expected == ["z[0]", "z[1]", "z[2]"]
    assert _parameters(steindiag.ksd(x, score=-x, labeller=labeller)) == expected
    w = np.full((2, 50), 0.01)
    assert list(steindiag.weighted_summary(x, w, labeller=labeller).index) == expected
    assert list(steindiag.control_variates(x, score=-x, labeller=labeller)["label"].values) \
        == expected


def test_refusals_name_the_argument_and_the_clash(posterior):
    with pytest.raises(TypeError, match="labeller must be None or an ArviZ labeller.*"
                                        "make_label_flat.*got str"):
        steindiag.ksd(posterior, score=score, labeller="BaseLabeller")
    with pytest.raises(TypeError, match="labeller must be.*got DataFrame|labeller must be"):
        steindiag.weighted_summary(posterior, np.ones((2, 60)), labeller=object())
    # NoVarLabeller drops the name: mu and tau are both "".
    with pytest.raises(ValueError, match=r"gives mu and tau the same label ''"):
        steindiag.ksd(posterior, score=score, labeller=arviz_labels.NoVarLabeller())
    with pytest.raises(ValueError, match=r"gives theta\[Choate\] and theta_tilde\[Choate\]"):
        steindiag.ksd(posterior, score=score, labeller=arviz_labels.MapLabeller(
            var_name_map={"theta_tilde": "theta"}))
    with pytest.raises(ValueError, match="same label"):
        steindiag.weighted_summary(posterior, np.ones((2, 60)),
                                   labeller=arviz_labels.NoVarLabeller())
    # NoVarLabeller on one variable is as ArviZ labels it.
    labeller = arviz_labels.NoVarLabeller()
    assert _parameters(steindiag.ksd(posterior, score=score, var_names="theta",
                                     labeller=labeller)) == arviz_flat_labels(
        posterior, labeller, ["theta"])


def test_a_second_sample_is_matched_by_canonical_labels(posterior):
    other = posterior[["theta", "L", "tau", "theta_tilde", "mu"]]   # other order
    labeller = map_labeller()
    plain = steindiag.mmd(posterior, other)
    labelled = steindiag.mmd(posterior, other, labeller=labeller)
    # truth: the same comparison without a labeller (columns matched by steindiag's labels)
    np.testing.assert_array_equal(labelled.values, plain.values)
    assert _parameters(labelled) == arviz_flat_labels(posterior, labeller)


# -- A PyMC model: value variables' labels, stored scores, prior starts --------------------


@pytest.fixture(scope="module")
def schools_model(posterior):
    pm = pytest.importorskip("pymc")
    y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
    sigma = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
    with pm.Model(coords={"school": SCHOOLS}) as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        theta_tilde = pm.Normal("theta_tilde", 0, 1, dims="school")
        pm.Normal("y", mu + tau * theta_tilde, sigma, observed=y)
    draws = xr.Dataset({"mu": posterior["mu"], "tau": np.exp(posterior["tau"]),
                        "theta_tilde": posterior["theta_tilde"]})
    if ARVIZ_1:
        trace = xr.DataTree.from_dict({"posterior": draws})
    else:
        import arviz as az
        trace = az.InferenceData(posterior=draws)
    # ArviZ's view of the unconstrained draws the model's scores are taken at.
    unconstrained = xr.Dataset({"mu": posterior["mu"], "tau_log__": posterior["tau"],
                                "theta_tilde": posterior["theta_tilde"]})
    return model, trace, unconstrained


def test_model_value_variables_and_stored_scores(schools_model):
    model, trace, unconstrained = schools_model
    labeller = arviz_labels.MapLabeller(var_name_map={"theta_tilde": "θ̃"},
                                        coord_map={"school": {"Choate": "Ch"}})
    plain = steindiag.ksd(trace, model)
    labelled = steindiag.ksd(trace, model, labeller=labeller)
    # truth: ArviZ's labels of the unconstrained variables (tau's value variable tau_log__)
    assert _parameters(labelled) == arviz_flat_labels(unconstrained, labeller)
    np.testing.assert_array_equal(labelled["ksd"].values, plain["ksd"].values)
    stored = steindiag.add_scores(trace, model)
    # Stored scores are matched by steindiag's own labels, with or without a labeller.
    from_store = steindiag.ksd(stored, model, labeller=labeller)
    np.testing.assert_allclose(from_store["ksd"].values, plain["ksd"].values, rtol=1e-12)
    assert _parameters(from_store) == _parameters(labelled)
    # Without the model, the labels are read back from the stored flat labels: dims are
    # named <var>_dim_<k> there, so a coord_map by dim name does not apply.
    names_only = arviz_labels.MapLabeller(var_name_map={"theta_tilde": "θ̃"})
    read_back = steindiag.ksd(stored, labeller=names_only)
    np.testing.assert_allclose(read_back["ksd"].values, plain["ksd"].values, rtol=1e-12)
    assert _parameters(read_back) == arviz_flat_labels(unconstrained, names_only)
    idx = steindiag.ksd(stored, labeller=arviz_labels.IdxLabeller())
    assert _parameters(idx) == arviz_flat_labels(unconstrained, arviz_labels.IdxLabeller())


def test_mode_search_starts_from_the_prior_with_a_labeller(schools_model):
    model, trace, unconstrained = schools_model
    labeller = arviz_labels.DimCoordLabeller()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = steindiag.diagnose(trace, model, labeller=labeller, rng=0)
    # The search ran from prior draws (matched to the model's layout by canonical labels).
    assert "starts (given" in result.attrs["missing_mass_summary"]
    assert list(result["parameter"].values) == arviz_flat_labels(unconstrained, labeller)


# -- Plots ----------------------------------------------------------------------------------


def test_plots_compute_with_the_labeller_and_draw_labelled_results(posterior):
    labeller = map_labeller()
    expected = arviz_flat_labels(posterior, labeller, ["~L"])
    options = dict(score=score, method="polynomial1", var_names=["~L"])
    computed = steindiag.control_variates(posterior, labeller=labeller, **options)
    fig, ax = plt.subplots()
    steindiag.plot_control_variates(computed, ax=ax)          # a labelled result, drawn
    drawn = [t.get_text() for t in ax.get_yticklabels()]
    fig2, ax2 = plt.subplots()
    steindiag.plot_control_variates(posterior, stats={"control_variates": options},
                                    labeller=labeller, ax=ax2)  # computed with the labeller
    assert [t.get_text() for t in ax2.get_yticklabels()] == drawn
    assert sorted(drawn) == sorted(expected)
    fig3, ax3 = plt.subplots()
    w = steindiag.stein_weights(posterior, score=score, var_names=["~L"])
    steindiag.plot_weights(posterior, weights=w, pair=("mu", "theta[Choate]"),
                           labeller=labeller, ax=ax3)
    assert (ax3.get_xlabel(), ax3.get_ylabel()) == ("μ", "θ[Ch]")
    plt.close("all")



def test_plot_diagnosis_draws_the_labels_of_a_labelled_diagnosis():
    rng = np.random.default_rng(0)
    draws = xr.Dataset({"mu": (("chain", "draw"), rng.standard_normal((4, 200))),
                        "theta": (("chain", "draw", "school"), rng.standard_normal((4, 200, 2)))},
                       coords={"school": SCHOOLS[:2]})
    draws["theta"][3] += 1.5                          # chain 3 is off: evidence by parameter
    labeller = map_labeller()
    expected = arviz_flat_labels(draws, labeller)     # ["μ", "θ[Ch]", "θ[Deerfield]"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = steindiag.diagnose(draws, score=score, rng=0, labeller=labeller)
        fig = steindiag.plot_diagnosis(result, ax=plt.subplots(1, 3)[1])
        fig2, axes = plt.subplots(1, 3)
        steindiag.plot_diagnosis(draws, stats={"diagnose": {"score": score, "rng": 0}},
                                 labeller=labeller, ax=axes)
    assert [t.get_text() for t in fig.axes[2].get_xticklabels()] == expected
    assert [t.get_text() for t in axes[2].get_xticklabels()] == expected
    plt.close("all")

# -- Samplers' own objects: emcee, numpyro, JAX positions, Stan's flat names ------------------


def _convert_to_dataset(value):
    if ARVIZ_1:
        from arviz_base import convert_to_dataset
    else:
        from arviz import convert_to_dataset
    return convert_to_dataset(value)


def test_emcee_parameters_are_labelled_as_arviz():
    emcee = pytest.importorskip("emcee")
    sampler = emcee.EnsembleSampler(8, 3, lambda x: -0.5 * np.sum(x**2, axis=-1),
                                    vectorize=True)
    sampler.random_state = np.random.RandomState(0).get_state()
    sampler.run_mcmc(np.random.default_rng(0).normal(size=(8, 3)), 60, progress=False)
    labeller = arviz_labels.MapLabeller(var_name_map={"var_0": "a", "var_2": "c"})
    # truth: ArviZ's labels of the trace az.from_emcee makes (var_0, var_1, var_2)
    chain = np.swapaxes(sampler.get_chain(), 0, 1)             # (walker, step, 3)
    dataset = _convert_to_dataset({f"var_{k}": chain[..., k] for k in range(3)})
    result = steindiag.ksd(sampler, score=lambda x: -x, labeller=labeller)
    assert _parameters(result) == arviz_flat_labels(dataset, labeller) == ["a", "var_1", "c"]


def test_numpyro_sites_are_labelled_as_arviz():
    pytest.importorskip("numpyro")
    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model():
        numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("school", 3):
            numpyro.sample("theta", dist.Normal(0.0, 1.0))

    mcmc = MCMC(NUTS(model), num_warmup=50, num_samples=50, num_chains=2,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    labeller = arviz_labels.DimCoordLabeller()
    import arviz as az

    # truth: ArviZ's labels of the trace az.from_numpyro makes (plates as dims)
    dataset = az.from_numpyro(mcmc).posterior
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = steindiag.ksd(mcmc, labeller=labeller)
    assert _parameters(result) == arviz_flat_labels(dataset, labeller)


def test_jax_positions_are_labelled_as_arviz():
    pytest.importorskip("jax")
    import jax.numpy as jnp

    x = np.random.default_rng(2).standard_normal((2, 40, 3))
    labeller = arviz_labels.IdxLabeller()
    position = {"x": x, "m": x[..., 0]}
    # truth: ArviZ's labels of the same pytree read as a dict of (chain, draw, ...) arrays
    expected = arviz_flat_labels(_convert_to_dataset(position), labeller)
    result = steindiag.ksd(position, log_density=lambda p: -0.5 * (jnp.sum(p["x"] ** 2)
                                                                   + p["m"] ** 2),
                           labeller=labeller)
    assert sorted(_parameters(result)) == sorted(expected)
    flat = steindiag.ksd(x, log_density=lambda z: -0.5 * jnp.sum(z**2),
                         labeller=arviz_labels.MapLabeller(var_name_map={"x": "z"}))
    assert _parameters(flat) == ["z[0]", "z[1]", "z[2]"]


def test_stan_names_carry_arvizs_dims():
    from steindiag.inputs._labels import display_labels
    from steindiag.inputs._stan import _arviz_label

    names = ["mu", "Omega.1.1", "Omega.1.2", "Omega.2.1", "Omega.2.2"]
    labeller = arviz_labels.DimCoordLabeller()
    # truth: ArviZ's labels of the variables as az.from_cmdstanpy / from_pystan store them
    # (a matrix parameter with dims Omega_dim_0, Omega_dim_1 and positions as coordinates)
    dataset = _convert_to_dataset({"mu": np.zeros((1, 3)), "Omega": np.zeros((1, 3, 2, 2))})
    canonical, shown = display_labels([_arviz_label(name) for name in names], labeller)
    assert canonical == ["mu", "Omega[0, 0]", "Omega[0, 1]", "Omega[1, 0]", "Omega[1, 1]"]
    assert shown == arviz_flat_labels(dataset, labeller)
