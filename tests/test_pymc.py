"""PyMC models as score source: unconstrained draws, batched scores, KSD on real traces.

Sources of truth (each assertion names its own):
- ``model.compile_dlogp(jacobian=True)`` evaluated draw by draw, and central finite
  differences of ``model.compile_logp(jacobian=True)``;
- the value variables PyMC itself stores with ``include_transformed=True``;
- exact draws (``pm.draw`` of prior-only models, NumPy's Exp(1) sampler) with the Stein
  identity E_p[k_p(X, Y)] = 0 and the variance of a degenerate U-statistic;
- the docs' background page (Exp(1): about 0 in log space with the Jacobian, 0.66 without it,
  1.00 in the constrained space), and the population KSD^2 estimated from independent
  pairs with the kernel written out below from the docs' background page.
"""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402
import steindiag.accessors  # noqa: E402,F401  (registers DataTree.stein)
from trace_reading import prepare_trace  # noqa: E402

# PyMC's own functions (pm.draw, pm.sample, the compile_logp/compile_dlogp used as truth)
# run on the Python linker: no C/Numba compilation on a cold machine.
FAST = {"mode": "FAST_COMPILE"}


def _dims_for(name, array, n_sample_dims=2):
    return ("chain", "draw")[:n_sample_dims] + tuple(
        f"{name}_dim_{i}" for i in range(array.ndim - n_sample_dims)
    )


def _prior_posterior(model, n_chain, n_draw, seed):
    """Exact draws of the free variables (pm.draw), laid out as a posterior Dataset."""
    values = pm.draw(model.free_RVs, draws=n_chain * n_draw, random_seed=seed, **FAST)
    data = {}
    for rv, value in zip(model.free_RVs, values):
        value = np.asarray(value).reshape(n_chain, n_draw, *np.shape(value)[1:])
        dims = model.named_vars_to_dims.get(rv.name)
        dims = ("chain", "draw") + tuple(dims) if dims else _dims_for(rv.name, value)
        data[rv.name] = (dims, value)
    return xr.Dataset(data, coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw)})


def _posterior_dataset(idata):
    posterior = idata["posterior"] if not hasattr(idata, "posterior") else idata.posterior
    return posterior.to_dataset() if hasattr(posterior, "to_dataset") else posterior


_SHAPES = {}


def _point(model, flat_row):
    """Split a flat unconstrained vector into PyMC's point dict (value_vars order)."""
    if id(model) not in _SHAPES:
        shapes = model.eval_rv_shapes()
        _SHAPES[id(model)] = [(v.name, tuple(shapes[v.name])) for v in model.value_vars]
    point, start = {}, 0
    for name, shape in _SHAPES[id(model)]:
        size = int(np.prod(shape))
        point[name] = flat_row[start : start + size].reshape(shape)
        start += size
    return point


def _stein_kernel_pairs(x, sx, y, sy, c=1.0, beta=-0.5):
    """k_p(x_i, y_i) for paired rows, A = I (the docs' background page, written out here)."""
    u = x - y
    r2 = np.sum(u * u, axis=-1)
    q = c**2 + r2
    d = x.shape[-1]
    return (
        -4 * beta * (beta - 1) * q ** (beta - 2) * r2
        - 2 * beta * q ** (beta - 1) * (d + np.sum(u * (sx - sy), axis=-1))
        + q**beta * np.sum(sx * sy, axis=-1)
    )


def _null_sd_u(draws, scores):
    """SD of the U-statistic under exact sampling: sqrt(2 E[h^2] / (N (N-1))).

    Degenerate U-statistic (E[h(x, Y)] = 0 for every x under p): Var(U) = 2 zeta_2 /
    (N (N-1)) with zeta_2 = E[h(X, Y)^2], estimated on independent pairs of draws.
    """
    x, s = draws.reshape(-1, draws.shape[-1]), scores.reshape(-1, scores.shape[-1])
    half = x.shape[0] // 2
    h = _stein_kernel_pairs(x[:half], s[:half], x[half : 2 * half], s[half : 2 * half])
    n = x.shape[0]
    return float(np.sqrt(2 * np.mean(h**2) / (n * (n - 1))))


# ------------------------------------------------------------------------------------
# a model with every transform PyMC uses, a Potential, pm.Data and dims
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transforms_model():
    with pm.Model(coords={"k": ["a", "b", "c"], "obs": np.arange(4)}) as model:
        a = pm.Normal("a", 0, 1)
        pm.Uniform("b", lower=a, upper=a + 2)  # interval with bounds from another RV
        sigma = pm.HalfNormal("sigma", 1)  # log
        pm.Beta("p", 2, 3)  # logodds
        w = pm.Dirichlet("w", np.array([2.0, 3.0, 4.0]), dims="k")  # simplex
        pm.Normal("o", mu=[-1.0, 0.0, 1.0], sigma=1, transform=pm.distributions.transforms.ordered)
        pm.ZeroSumNormal("z", sigma=1, shape=4)  # zerosum
        pm.LKJCholeskyCov("L", n=3, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=False)
        pm.Potential("shrink", -0.5 * a**2)
        x = pm.Data("x", np.linspace(-1, 1, 4), dims="obs")
        pm.Normal("y", mu=a + w[0] * x, sigma=sigma, observed=[0.1, -0.3, 0.5, 0.2], dims="obs")
        pm.Deterministic("twice_a", 2 * a)
    return model


@pytest.fixture(scope="module")
def transforms_prior_trace(transforms_model):
    posterior = _prior_posterior(transforms_model, 2, 25, seed=11)
    # The ordered transform's support is sorted vectors: sort the prior draws into it.
    posterior["o"] = posterior["o"].copy(data=np.sort(posterior["o"].values, axis=-1))
    return posterior


@pytest.fixture(scope="module")
def sampled(transforms_model):
    """One short real pm.sample run storing the value variables."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            model=transforms_model, draws=15, tune=15, chains=2, cores=1, random_seed=3,
            progressbar=False, compute_convergence_checks=False,
            idata_kwargs={"include_transformed": True}, compile_kwargs=FAST,
        )


def test_unconstrained_draws_match_include_transformed(transforms_model, sampled):
    posterior = _posterior_dataset(sampled)
    value_names = [v.name for v in transforms_model.value_vars]
    stored_names = [n for n in value_names if n in posterior and n not in
                    [rv.name for rv in transforms_model.free_RVs]]
    assert len(stored_names) == 7  # every transformed variable is stored by PyMC
    constrained_only = posterior.drop_vars(stored_names)
    prepared = prepare_trace(constrained_only, transforms_model)
    # Truth: the value variables PyMC stored with include_transformed=True.
    expected = np.concatenate(
        [posterior[name].values.reshape(2, 15, -1) for name in value_names], axis=2
    )
    np.testing.assert_allclose(prepared.draws, expected, rtol=1e-9, atol=1e-9)
    assert all("mapped by" in source for source, name in
               zip(prepared.attrs["unconstrained_from"], value_names) if name in stored_names)
    # With the stored value variables present, they are used as they are.
    stored = prepare_trace(sampled, transforms_model)
    np.testing.assert_array_equal(stored.draws, expected)  # Truth: PyMC's stored values
    assert stored.attrs["unconstrained_from"][2] == "posterior['sigma_log__']"


def test_scores_match_per_draw_dlogp(transforms_model, transforms_prior_trace):
    prepared = prepare_trace(transforms_prior_trace, transforms_model)
    dlogp = transforms_model.compile_dlogp(jacobian=True, **FAST)
    flat_draws = prepared.draws.reshape(-1, prepared.draws.shape[2])
    flat_scores = prepared.scores.reshape(flat_draws.shape)
    for i in range(flat_draws.shape[0]):
        # Truth: PyMC's own gradient function, evaluated one draw at a time.
        np.testing.assert_allclose(
            flat_scores[i], dlogp(_point(transforms_model, flat_draws[i])), rtol=1e-9, atol=1e-9
        )


def test_scores_match_finite_differences(transforms_model, transforms_prior_trace):
    prepared = prepare_trace(transforms_prior_trace, transforms_model)
    logp = transforms_model.compile_logp(jacobian=True, **FAST)
    flat_draws = prepared.draws.reshape(-1, prepared.draws.shape[2])
    flat_scores = prepared.scores.reshape(flat_draws.shape)
    step = 1e-5
    for i in (0, 17, 49):
        x = flat_draws[i]
        numeric = np.empty_like(x)
        for k in range(x.size):
            plus, minus = x.copy(), x.copy()
            plus[k] += step
            minus[k] -= step
            numeric[k] = (logp(_point(transforms_model, plus))
                          - logp(_point(transforms_model, minus))) / (2 * step)
        # Truth: central differences of model.logp(jacobian=True); error O(step^2).
        np.testing.assert_allclose(flat_scores[i], numeric, rtol=1e-5, atol=1e-5)


def test_labels_attrs_and_chunking(transforms_model, transforms_prior_trace):
    prepared = prepare_trace(transforms_prior_trace, transforms_model)
    # Truth: PyMC's value-variable names and shapes (model.value_vars, eval_rv_shapes).
    assert prepared.parameter[:6] == ["a", "b_interval__", "sigma_log__", "p_logodds__",
                                      "w_simplex__[0]", "w_simplex__[1]"]
    assert len(prepared.parameter) == 1 + 1 + 1 + 1 + 2 + 3 + 3 + 6
    assert prepared.attrs["space"] == "unconstrained"
    assert prepared.attrs["score_source"] == "pymc"
    assert prepared.attrs["value_variables"] == [v.name for v in transforms_model.value_vars]
    assert prepared.attrs["transforms"] == ["none", "interval", "log", "logodds", "simplex",
                                            "ordered", "zerosum", "cholesky-cov-packed"]
    assert "twice_a" not in "".join(prepared.parameter)  # the background page: no Deterministics
    chunked = prepare_trace(transforms_prior_trace, transforms_model, chunk_size=7)
    # Truth: draws do not interact, so the chunk size cannot change any number.
    np.testing.assert_array_equal(chunked.scores, prepared.scores)


def test_model_with_score_callable(transforms_model, transforms_prior_trace):
    dlogp = transforms_model.compile_dlogp(jacobian=True, **FAST)
    prepared = prepare_trace(
        transforms_prior_trace, transforms_model, batched=False,
        score=lambda row: dlogp(_point(transforms_model, row)),
    )
    reference = prepare_trace(transforms_prior_trace, transforms_model)
    # Truth: the model defines the draws; the callable is PyMC's per-draw gradient.
    np.testing.assert_allclose(prepared.scores, reference.scores, rtol=1e-9, atol=1e-9)
    assert prepared.attrs["score_source"] == "callable"


def test_nutpie_layout_with_model(transforms_model, transforms_prior_trace):
    reference = prepare_trace(transforms_prior_trace, transforms_model)
    # nutpie labels the unconstrained vector "name" / "name_i.j" and may order it freely.
    labels = []
    for value in transforms_model.value_vars:
        shape = transforms_model.initial_point()[value.name].shape
        labels += [value.name] if not shape else [
            f"{value.name}_{'.'.join(map(str, idx))}" for idx in np.ndindex(*shape)
        ]
    order = np.random.default_rng(0).permutation(len(labels))
    stored_gradient = 3.0 * reference.scores  # deliberately not the model's: must be used as is
    stats = xr.Dataset(
        {
            "gradient": (("chain", "draw", "unconstrained_parameter"), stored_gradient[..., order]),
            "unconstrained_draw": (("chain", "draw", "unconstrained_parameter"),
                                   reference.draws[..., order]),
        },
        coords={"chain": [0, 1], "draw": np.arange(25),
                "unconstrained_parameter": [labels[i] for i in order]},
    )
    tree = xr.DataTree.from_dict({"posterior": transforms_prior_trace.drop_vars(["o", "w"]),
                                  "sample_stats": stats})
    prepared = prepare_trace(tree, transforms_model)
    # Truth: the stored arrays, put back in value_vars order by their labels.
    np.testing.assert_allclose(prepared.draws, reference.draws, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(prepared.scores, stored_gradient)
    assert prepared.attrs["score_source"] == "nutpie"


# ------------------------------------------------------------------------------------
# exact draws: KSD agrees with the i.i.d. floor; the background page's Exp(1) example
# ------------------------------------------------------------------------------------


def test_exact_prior_draws_reach_iid_floor():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        pm.HalfNormal("s", 1)
        pm.Uniform("b", lower=a, upper=a + 2)
        pm.Beta("p", 2, 3)
        pm.Dirichlet("w", np.array([2.0, 3.0, 4.0]))
        pm.ZeroSumNormal("z", sigma=1, shape=3)
        # Standard deviations kept away from 0: with sd_dist=HalfNormal the score of the
        # off-diagonal Cholesky entry is heavy-tailed (about L10 / L11^2), the Stein
        # kernel's variance is then not finite in practice and no tolerance from the
        # variance holds (the background page: heavy tails are outside the theory).
        pm.LKJCholeskyCov("L", n=3, eta=6.0, sd_dist=pm.Gamma.dist(20.0, 20.0),
                          compute_corr=False)
    posterior = _prior_posterior(model, 4, 400, seed=2024)
    result = steindiag.ksd(posterior, model, preconditioner="identity")
    prepared = prepare_trace(posterior, model)
    sd_u = _null_sd_u(prepared.draws, prepared.scores)
    # Truth: Stein identity, E[KSD^2_U] = 0 for exact draws of p in the unconstrained
    # space with the Jacobian; tolerance 5 SD of the degenerate U-statistic.
    assert abs(float(result["ksd2_u_pooled"])) < 5 * sd_u
    # V = (N-1)/N U + iid floor^2 (the background page): KSD agrees with the i.i.d. floor.
    assert float(result["ksd_pooled"]) ** 2 < float(result["ksd_iid_pooled"]) ** 2 + 5 * sd_u


def _exp1_population(score, to_space, seed):
    """Population KSD^2 = E[k_p(X, Y)] over independent Exp(1) pairs, and sd of k_p."""
    rng = np.random.default_rng(seed)
    x, y = to_space(rng.exponential(size=200_000)), to_space(rng.exponential(size=200_000))
    h = _stein_kernel_pairs(x[:, None], score(x)[:, None], y[:, None], score(y)[:, None])
    return float(h.mean()), float(h.std()), h.size


@pytest.mark.parametrize(
    "case, math_md_value",
    [("log space with Jacobian", 0.0), ("log space without Jacobian", 0.66),
     ("constrained space", 1.00)],
)
def test_exp1_example_from_math_md(case, math_md_value):
    with pm.Model() as model:
        pm.Exponential("x", 1.0)
    x = pm.draw(model["x"], draws=4000, random_seed=7, **FAST).reshape(4, 1000)
    n = x.size
    if case == "log space with Jacobian":
        data, kwargs = xr.Dataset({"x": (("chain", "draw"), x)}), {"model": model}
        score, to_space = (lambda u: 1.0 - np.exp(u)), np.log
    elif case == "log space without Jacobian":
        score, to_space = (lambda u: -np.exp(u)), np.log
        data, kwargs = xr.Dataset({"x_log__": (("chain", "draw"), np.log(x))}), {"score": score}
    else:
        score, to_space = (lambda v: -np.ones_like(v)), (lambda v: v)
        data, kwargs = xr.Dataset({"x": (("chain", "draw"), x)}), {"score": score}
    result = steindiag.ksd(data, preconditioner="identity", **kwargs)
    prepared = prepare_trace(data, **kwargs)
    # Truth: closed-form score of the space (d/du [u - e^u] = 1 - e^u with the Jacobian).
    np.testing.assert_allclose(prepared.scores[..., 0], score(prepared.draws[..., 0]),
                               rtol=1e-12, atol=1e-12)
    population, sd_h, m = _exp1_population(score, to_space, seed=8)
    if case == "log space with Jacobian":
        # Truth: Stein identity (smooth positive density on R with vanishing tails).
        assert abs(population) < 5 * sd_h / np.sqrt(m)
        tolerance = 5 * _null_sd_u(prepared.draws, prepared.scores)
    else:
        # Var(U) <= 4 Var(h) / N for an order-2 U-statistic (zeta_1 <= zeta_2).
        tolerance = 5 * 2 * sd_h / np.sqrt(n) + 5 * sd_h / np.sqrt(m)
    # Truth: the population value from independent pairs (kernel from the background page).
    assert abs(float(result["ksd2_u_pooled"]) - population) < tolerance
    # Truth: the docs' background page's figures (about 0 / 0.66 / 1.00, two decimals).
    assert abs(population - math_md_value) < 0.01 + 5 * sd_h / np.sqrt(m)


# ------------------------------------------------------------------------------------
# real traces end to end (InferenceData on ArviZ 0.x, DataTree on ArviZ 1.x)
# ------------------------------------------------------------------------------------


def test_ksd_on_sampled_trace(transforms_model, sampled):
    result = steindiag.ksd(sampled, transforms_model)
    path = steindiag.ksd_path(sampled, transforms_model)
    chains = _posterior_dataset(sampled)["chain"].values
    # Truth: the trace's own chain coordinate.
    np.testing.assert_array_equal(result["chain"].values, chains)
    np.testing.assert_array_equal(path["chain"].values, chains)
    assert result.attrs["space"] == "unconstrained"
    # Lists of labels are stored as JSON strings (netCDF holds no list of strings).
    assert json.loads(result.attrs["value_variables"]) == [
        v.name for v in transforms_model.value_vars]
    assert np.all(np.isfinite(result["ksd"].values)) and float(result["ksd_pooled"]) > 0
    if isinstance(sampled, xr.DataTree):
        # Truth: the accessor is a one-line wrapper of steindiag.ksd.
        xr.testing.assert_identical(sampled.stein.ksd(transforms_model), result)


def test_pymc_dims_model():
    pmd = pytest.importorskip("pymc.dims")
    from pytensor.xtensor import as_xtensor

    with pm.Model(coords={"k": ["a", "b", "c"], "obs": np.arange(5)}) as model:
        x = pmd.Data("x", np.arange(5.0), dims="obs")
        mu = pmd.Normal("mu", dims="k")
        sigma = pmd.HalfNormal("sigma")
        w = pmd.Dirichlet("w", as_xtensor(np.array([2.0, 3.0, 4.0]), dims=("k",)), core_dims="k")
        z = pmd.ZeroSumNormal("z", core_dims="k")
        pmd.Normal("y", mu=mu.sum() + 0.1 * x + (w * z).sum(), sigma=sigma,
                   observed=as_xtensor(np.linspace(0, 1, 5), dims=("obs",)), dims="obs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(model=model, draws=15, tune=15, chains=2, cores=1, random_seed=5,
                          progressbar=False, compute_convergence_checks=False,
                          idata_kwargs={"include_transformed": True}, compile_kwargs=FAST)
    posterior = _posterior_dataset(idata)
    prepared = prepare_trace(posterior[["mu", "sigma", "w", "z"]], model)
    names = [v.name for v in model.value_vars]
    # Truth: the value variables PyMC stored with include_transformed=True.
    expected = np.concatenate([posterior[n].values.reshape(2, 15, -1) for n in names], axis=2)
    np.testing.assert_allclose(prepared.draws, expected, rtol=1e-9, atol=1e-9)
    dlogp = model.compile_dlogp(jacobian=True, **FAST)
    flat = prepared.draws.reshape(-1, expected.shape[2])
    for i in (0, 13, 29):
        # Truth: PyMC's per-draw gradient.
        np.testing.assert_allclose(prepared.scores.reshape(flat.shape)[i],
                                   dlogp(_point(model, flat[i])), rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------
# bad input (issue 3): clear errors, nothing silently wrong
# ------------------------------------------------------------------------------------


def test_discrete_free_variable_is_named():
    with pm.Model() as model:
        pm.Normal("mu")
        pm.Poisson("count", 3.0)
    posterior = xr.Dataset({"mu": (("chain", "draw"), np.zeros((1, 5))),
                            "count": (("chain", "draw"), np.ones((1, 5), dtype=int))})
    with pytest.raises(ValueError, match=r"discrete free variables: count \(int64\)"):
        prepare_trace(posterior, model)


@pytest.fixture(scope="module")
def small_model():
    with pm.Model(coords={"group": ["g1", "g2", "g3"]}) as model:
        mu = pm.Normal("mu", 0, 1, dims="group")
        sigma = pm.HalfNormal("sigma", 1)
        data = pm.Data("x", np.array([1.0, 2.0]))
        pm.Normal("y", mu=mu[0] + data, sigma=sigma, observed=np.array([0.5, 1.5]))
    return model


def _small_trace(rng, n_draw=10, group=("g1", "g2", "g3")):
    return xr.Dataset(
        {"mu": (("chain", "draw", "group"), rng.standard_normal((2, n_draw, 3))),
         "sigma": (("chain", "draw"), rng.uniform(0.5, 2.0, (2, n_draw)))},
        coords={"chain": [0, 1], "draw": np.arange(n_draw), "group": list(group)},
    )


def _minus_x(x):
    return -x


def test_missing_free_variable_and_shape_mismatch(small_model):
    trace = _small_trace(np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"free variable\(s\) \['sigma'\].*sigma_log__"):
        prepare_trace(trace.drop_vars("sigma"), small_model, score=_minus_x)
    wrong = trace.isel(group=[0, 1])
    with pytest.raises(ValueError, match=r"has shape \(2,\) per draw, but the model's 'mu' "
                                         r"has shape \(3,\)"):
        prepare_trace(wrong.rename({"group": "other"}), small_model, score=_minus_x)
    # A selection with a model checks the selected coordinates (tests/test_selection_model.py);
    # a name that is no variable of the trace nor of the model is refused.
    with pytest.raises(ValueError, match=r"var_names \['nu'\] are not variables"):
        prepare_trace(trace, small_model, var_names=["nu"])


def test_coordinates_checked_and_reordered(small_model):
    trace = _small_trace(np.random.default_rng(1))
    with pytest.raises(ValueError, match="coordinate 'group' of 'mu' does not match"):
        prepare_trace(trace.assign_coords(group=["x", "y", "z"]), small_model, score=_minus_x)
    shuffled = trace.isel(group=[2, 0, 1])
    prepared = prepare_trace(shuffled, small_model, score=_minus_x)
    # Truth: labels identify entries; the model's order is ("g1", "g2", "g3").
    np.testing.assert_array_equal(prepared.draws[..., :3], trace["mu"].values)


def test_boundary_draw_is_reported(small_model):
    trace = _small_trace(np.random.default_rng(2))
    trace["sigma"][1, 4] = 0.0  # on the boundary: log(0) = -inf
    trace["sigma"][0, 7] = -1.0  # outside the support: log(-1) = nan
    with pytest.raises(ValueError, match=r"unconstrained draws are not finite at 2 of 20 draws: "
                                         r"\(chain=0, draw=7\), \(chain=1, draw=4\).*"
                                         r"sigma_log__: 2.*boundary"):
        prepare_trace(trace, small_model, score=_minus_x)


def test_model_data_differing_from_trace_warns(small_model):
    trace = _small_trace(np.random.default_rng(3))
    tree = xr.DataTree.from_dict({
        "posterior": trace,
        "observed_data": xr.Dataset({"y": ("y_dim_0", np.array([0.5, 1.5]))}),
        "constant_data": xr.Dataset({"x": ("x_dim_0", np.array([1.0, 2.0]))}),
    })
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_trace(tree, small_model, score=_minus_x)  # same data: no warning
    tree["observed_data"] = xr.Dataset({"y": ("y_dim_0", np.array([0.5, 9.9]))})
    tree["constant_data"] = xr.Dataset({"x": ("x_dim_0", np.array([1.0, 2.0, 3.0]))})
    with pytest.warns(UserWarning, match=r"differ .* y \(same shape, different values\); "
                                         r"x \(shape \(2,\) in the model, \(3,\) in the trace\)"):
        prepare_trace(tree, small_model, score=_minus_x)


def test_missing_group_with_model(small_model):
    tree = xr.DataTree.from_dict({"posterior": _small_trace(np.random.default_rng(4))})
    with pytest.raises(ValueError, match="no group 'warmup_posterior'"):
        prepare_trace(tree, small_model, group="warmup_posterior")


def test_unconstrained_posterior_group_is_used(small_model):
    trace = _small_trace(np.random.default_rng(5))
    log_sigma = np.log(trace["sigma"].values) + 0.25  # deliberately not log(sigma)
    tree = xr.DataTree.from_dict({
        "posterior": trace,
        "unconstrained_posterior": xr.Dataset(
            {"sigma_log__": (("chain", "draw"), log_sigma)},
            coords={"chain": [0, 1], "draw": np.arange(10)},
        ),
    })
    prepared = prepare_trace(tree, small_model, score=_minus_x)
    # Truth: the stored unconstrained values are used as they are, not recomputed.
    np.testing.assert_array_equal(prepared.draws[..., 3], log_sigma)
    assert prepared.attrs["unconstrained_from"][1] == "unconstrained_posterior['sigma_log__']"


def test_values_off_the_support_are_reported():
    with pm.Model() as model:
        pm.Dirichlet("w", np.ones(3))
        pm.ZeroSumNormal("z", shape=3)
    rng = np.random.default_rng(6)
    w = rng.dirichlet(np.ones(3), size=(2, 10))
    z = rng.standard_normal((2, 10, 3))
    z -= z.mean(axis=-1, keepdims=True)
    trace = xr.Dataset({"w": (("chain", "draw", "k"), w), "z": (("chain", "draw", "j"), z)})
    prepare_trace(trace, model, score=_minus_x)  # on the support: no error
    w_bad = w.copy()
    w_bad[1, 3] *= 1.1  # no longer sums to 1
    z_bad = z.copy()
    z_bad[0, 2] += 0.5  # no longer sums to 0
    # Truth: a simplex sums to 1 and a zero-sum vector to 0; off-support values have no
    # unconstrained counterpart (the forward transform silently projects them).
    with pytest.raises(ValueError, match=r"not in the support.*'w' at 1 draws, first "
                                         r"\(chain=1, draw=3\) \(simplex transform\); 'z' at "
                                         r"1 draws, first \(chain=0, draw=2\)"):
        prepare_trace(trace.assign(w=(("chain", "draw", "k"), w_bad),
                                   z=(("chain", "draw", "j"), z_bad)), model, score=_minus_x)
