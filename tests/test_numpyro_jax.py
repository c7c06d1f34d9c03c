"""numpyro MCMC objects and JAX log densities (BlackJAX) read in one call.

Sources of truth, each named next to its assertion: the user guide's former numpyro and
blackjax recipes (their glue, re-typed here: latent-site filter, ``unconstrain_fn``,
``ravel_pytree``, ``jax.vmap(jax.grad(...))``); numpyro's own stored constrained values and
divergence flags; central finite differences of log p in float64; closed-form scores of
Gaussian targets. Skipped cleanly where jax, numpyro or blackjax is not installed.
"""

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)   # as the former recipes do
numpyro = pytest.importorskip("numpyro")

import jax.numpy as jnp  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from numpyro.handlers import seed, trace  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from numpyro.infer.util import potential_energy, unconstrain_fn  # noqa: E402

import steindiag  # noqa: E402
from steindiag.inputs import read_input  # noqa: E402

# Rubin (1981): the eight schools' effects and standard errors.
Y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
SIGMA = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
SCHOOLS = ["Choate", "Deerfield", "Phillips Andover", "Phillips Exeter", "Hotchkiss",
           "Lawrenceville", "St. Paul's", "Mt. Hermon"]


def non_centred(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", len(sigma)):
        theta_tilde = numpyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        theta = numpyro.deterministic("theta", mu + tau * theta_tilde)   # not a parameter
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def centred(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", len(sigma)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def _run(model, seed_value):
    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=300, num_chains=4,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed_value), jnp.asarray(SIGMA), y=jnp.asarray(Y))
    return mcmc


@pytest.fixture(scope="module")
def non_centred_mcmc():
    return _run(non_centred, 0)


@pytest.fixture(scope="module")
def centred_mcmc():
    return _run(centred, 1)


def _recipe_glue(mcmc):
    """The former recipe (examples/recipes/recipe_numpyro.py before this change), verbatim
    in substance: (draws (chain, draw, d), batched score, log p, sorted latent names)."""
    model, model_args, model_kwargs = mcmc.sampler.model, mcmc._args, mcmc._kwargs
    samples = mcmc.get_samples(group_by_chain=True)
    sites = trace(seed(model, 0)).get_trace(*model_args, **model_kwargs)
    latent = [name for name, site in sites.items()
              if site["type"] == "sample" and not site["is_observed"]]
    samples = {name: samples[name] for name in latent}

    def flat_unconstrained(params):
        return ravel_pytree(unconstrain_fn(model, model_args, model_kwargs, params))[0]

    draws = np.asarray(jax.vmap(jax.vmap(flat_unconstrained))(samples))
    _, unravel = ravel_pytree(unconstrain_fn(model, model_args, model_kwargs,
                                             {name: v[0, 0] for name, v in samples.items()}))

    def log_density(z):
        return -potential_energy(model, model_args, model_kwargs, unravel(z))

    batched_grad = jax.jit(jax.vmap(jax.grad(log_density)))
    return draws, (lambda z: np.asarray(batched_grad(z))), log_density, sorted(latent)


@pytest.mark.parametrize("name", ["non_centred", "centred"])
def test_numpyro_mcmc_equals_the_recipe(name, request):
    mcmc = request.getfixturevalue(f"{name}_mcmc")
    draws, score, _, latent = _recipe_glue(mcmc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no glue, no input warning
        got = steindiag.ksd(mcmc)
    expected = steindiag.ksd(draws, score=score)
    # Truth: the recipe's glue on the same MCMC, to 1e-12 (the criterion).
    for key in ("ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled", "ksd2_u_pooled"):
        np.testing.assert_allclose(got[key].values, expected[key].values, rtol=1e-12)
    # Truth: the model's latent sites, no deterministic or observed one; ArviZ's labels
    # (``theta[0]``: plate without coordinates), sites in the recipe's (sorted) order.
    site = "theta_tilde" if name == "non_centred" else "theta"
    assert latent == ["mu", "tau", site]
    assert got.attrs["parameters"] == str(["mu", "tau", *[f"{site}[{k}]" for k in range(8)]]
                                          ).replace("'", '"')
    assert got.attrs["space"] == "unconstrained" and got.attrs["score_source"] == "numpyro"


def test_numpyro_draws_and_scores_from_independent_sources(non_centred_mcmc):
    prepared = read_input(non_centred_mcmc).with_scores()
    samples = non_centred_mcmc.get_samples(group_by_chain=True)
    # Truth: numpyro's own stored constrained values; tau > 0 is stored as log tau.
    np.testing.assert_allclose(prepared.draws[..., 0], np.asarray(samples["mu"]), rtol=1e-14)
    np.testing.assert_allclose(np.exp(prepared.draws[..., 1]), np.asarray(samples["tau"]),
                               rtol=1e-12)
    np.testing.assert_allclose(prepared.draws[..., 2:], np.asarray(samples["theta_tilde"]),
                               rtol=1e-14)
    # Truth: central differences of the recipe's log p, in float64 (error below 1e-8).
    _, _, log_density, _ = _recipe_glue(non_centred_mcmc)
    flat_draws = prepared.draws.reshape(-1, 10)
    flat_scores = prepared.scores.reshape(-1, 10)
    for row in np.linspace(0, len(flat_draws) - 1, 4).astype(int):
        z = flat_draws[row]
        expected = np.empty(10)
        for k in range(10):
            h = 1e-5 * max(1.0, abs(z[k]))
            step = np.zeros(10)
            step[k] = h
            expected[k] = (float(log_density(z + step)) - float(log_density(z - step))) / (2 * h)
        np.testing.assert_allclose(flat_scores[row], expected, rtol=1e-6, atol=1e-6)


def test_numpyro_divergences_reach_diagnose(centred_mcmc):
    diverging = np.asarray(centred_mcmc.get_extra_fields(group_by_chain=True)["diverging"])
    assert diverging.sum() > 0      # the centred funnel diverges (the premise of the test)
    res = steindiag.diagnose(centred_mcmc, rng=0, n_bootstrap=400, n_permutations=400)
    # Truth: numpyro's own divergence flags, counted per chain.
    np.testing.assert_array_equal(res["divergences"].values, diverging.sum(axis=1))
    assert str(res["verdict_pooled"].values) != "fits"
    # log p came from the potential energy: the missing-mass search ran.
    assert "mode search" in str(res) and "no log density" not in str(res)


def test_numpyro_trace_with_model_keeps_its_coordinates(centred_mcmc):
    az = pytest.importorskip("arviz")
    if not hasattr(az, "from_numpyro"):
        pytest.skip("this ArviZ has no from_numpyro")
    idata = az.from_numpyro(centred_mcmc, coords={"school": SCHOOLS},
                            dims={"theta": ["school"]})
    got = steindiag.ksd(idata, model=centred_mcmc, coords={"draw": slice(100, None)})
    draws, score, _, _ = _recipe_glue(centred_mcmc)
    expected = steindiag.ksd(draws[:, 100:], score=score)
    # Truth: the recipe's glue on the same draws (the trace's constrained values mapped by
    # numpyro's transforms), to 1e-12; labels are the trace's coordinates, as ArviZ's.
    np.testing.assert_allclose(got["ksd"].values, expected["ksd"].values, rtol=1e-12)
    assert '"theta[Choate]"' in got.attrs["parameters"]
    res = steindiag.diagnose(idata, model=centred_mcmc, rng=0, mode_search=False,
                             n_bootstrap=400, n_permutations=400)
    diverging = np.asarray(centred_mcmc.get_extra_fields(group_by_chain=True)["diverging"])
    np.testing.assert_array_equal(res["divergences"].values, diverging.sum(axis=1))


def test_numpyro_every_function_takes_the_mcmc(non_centred_mcmc):
    weights = steindiag.stein_weights(non_centred_mcmc, mode_search=False)
    assert weights.dims == ("chain", "draw")
    table = steindiag.weighted_summary(non_centred_mcmc, weights)
    # Truth: the sites numpyro stored (constrained), the deterministic theta included.
    assert {"mu", "tau", "theta[0]", "theta_tilde[7]"} <= set(table.index)
    thinned = steindiag.stein_thin(non_centred_mcmc, n_selected=10, mode_search=False,
                                   regularized=True)
    # Truth: thinned points are draws of the run, read back in its constrained space.
    tau = np.asarray(non_centred_mcmc.get_samples(group_by_chain=True)["tau"])
    assert np.isin(thinned["posterior"]["tau"].values.ravel(), tau.ravel()).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # 300 draws: the wild bootstrap says they are few
        assert steindiag.ksd_test(non_centred_mcmc, rng=0, n_bootstrap=100)["pvalue"].size == 4
    assert steindiag.mmd(non_centred_mcmc).sizes["chain"] == 4
    summary = steindiag.control_variates(non_centred_mcmc, var_names=["mu", "theta"])
    # Rows are the run's constrained sites, the deterministic theta included.
    assert "theta[0]" in [str(v) for v in summary["label"].values]
    assert steindiag.ksd_path(non_centred_mcmc, n_points=4).sizes["n"] >= 2


def test_numpyro_bad_input():
    mcmc = MCMC(NUTS(centred), num_warmup=10, num_samples=10, progress_bar=False)
    with pytest.raises(ValueError, match="has not been run"):
        steindiag.ksd(mcmc)


def test_numpyro_var_names_and_score_refused(non_centred_mcmc):
    with pytest.raises(ValueError, match="var_names cannot be used with a numpyro MCMC"):
        steindiag.ksd(non_centred_mcmc, var_names=["mu"])
    with pytest.raises(TypeError, match="score= and log_density= must be None"):
        steindiag.ksd(non_centred_mcmc, score=lambda z: -z)


def test_float32_jax_is_computed_in_float64(tmp_path):
    """Without jax_enable_x64 (JAX's float32 default), scores still come in float64."""
    script = tmp_path / "float32.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, jax, numpyro, numpyro.distributions as dist, sys
        from numpyro.infer import MCMC, NUTS
        import steindiag
        assert not jax.config.jax_enable_x64
        def model():
            numpyro.sample("x", dist.Normal(0.5, 2.0))
        mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=200, num_chains=2,
                    chain_method="sequential", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0))
        x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], dtype=np.float64)
        got = float(steindiag.ksd(mcmc)["ksd_pooled"])
        exact = float(steindiag.ksd(x[..., None], score=-(x[..., None] - 0.5) / 4.0)
                      ["ksd_pooled"])
        print(abs(got - exact) / exact)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True)
    # Truth: the closed-form score of N(0.5, 2^2) at the same (float32-stored) draws; a
    # float32 score would differ by about 1e-7.
    assert float(out.stdout.strip().splitlines()[-1]) < 1e-12


def test_jax_not_imported_for_other_input(tmp_path):
    script = tmp_path / "lazy.py"
    script.write_text(textwrap.dedent("""
        import sys, numpy as np, steindiag
        x = np.random.default_rng(0).standard_normal((2, 100, 2))
        steindiag.ksd(x, score=-x)
        print("jax" in sys.modules)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


# --------------------------------------------------------------------------------------
# BlackJAX and any JAX log density
# --------------------------------------------------------------------------------------

SCALES = np.linspace(0.5, 2.0, 10)


def gaussian_log_density(position):
    """N(0, diag(SCALES^2)) of a position {"x": (10,)}: score -x / SCALES^2."""
    return -0.5 * jnp.sum((position["x"] / SCALES) ** 2)


@pytest.fixture(scope="module")
def mala_states():
    """200 MALA chains x 30 draws, d = 10, vmapped inside lax.scan: (draw, chain, 10)."""
    blackjax = pytest.importorskip("blackjax")
    n_chain, n_draw = 200, 30
    mala = blackjax.mala(gaussian_log_density, step_size=0.2)
    keys = jax.random.split(jax.random.PRNGKey(0), n_chain)
    init = jax.vmap(lambda k: mala.init({"x": jax.random.normal(k, (10,)) * SCALES}))(keys)
    step = jax.vmap(mala.step)

    def one_step(state, key):
        state, _ = step(jax.random.split(key, n_chain), state)
        return state, state

    _, states = jax.lax.scan(one_step, init, jax.random.split(jax.random.PRNGKey(1), n_draw))
    return states


def test_many_chain_mala_with_log_density_only(mala_states):
    x = np.swapaxes(np.asarray(mala_states.position["x"]), 0, 1)    # (chain, draw, 10)
    got = steindiag.ksd(mala_states, log_density=gaussian_log_density,
                        sample_dims=("draw", "chain"))
    # Truth: the closed-form score -x / s^2 at the same draws.
    expected = steindiag.ksd(x, score=-x / SCALES**2, sample_dims=("chain", "draw"))
    np.testing.assert_allclose(got["ksd"].values, expected["ksd"].values, rtol=1e-12)
    assert got.sizes["chain"] == 200
    assert got.attrs["parameters"] == str([f"x[{k}]" for k in range(10)]).replace("'", '"')
    # The same positions as a dict of (chain, draw, ...) arrays, the default layout.
    again = steindiag.ksd({"x": x}, log_density=gaussian_log_density)
    np.testing.assert_allclose(again["ksd_pooled"], expected["ksd_pooled"], rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # 30 draws: the tests say they are short
        res = steindiag.diagnose(mala_states, log_density=gaussian_log_density,
                                 sample_dims=("draw", "chain"), rng=0)
    assert res.sizes["chain"] == 200 and "mode search" in str(res)


def test_flat_log_density_of_an_array():
    x = np.random.default_rng(0).standard_normal((2, 300, 3)) * SCALES[:3]
    got = steindiag.ksd(x, log_density=lambda z: -0.5 * jnp.sum((z / SCALES[:3]) ** 2))
    # Truth: the closed-form score.
    expected = steindiag.ksd(x, score=-x / SCALES[:3] ** 2)
    np.testing.assert_allclose(got["ksd"].values, expected["ksd"].values, rtol=1e-12)
    thinned = steindiag.stein_thin(x, n_selected=5, regularized=True, mode_search=False,
                                   log_density=lambda z: -0.5 * jnp.sum((z / SCALES[:3]) ** 2))
    assert thinned.shape == (1, 5, 3)


def test_blackjax_nuts_with_log_density_only():
    blackjax = pytest.importorskip("blackjax")
    y = jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, size=20))

    def logdensity(position):   # mu ~ N(0, 5^2), sigma ~ Exp(1), in (mu, log sigma)
        mu, log_sigma = position["mu"], position["log_sigma"]
        sigma = jnp.exp(log_sigma)
        return (jax.scipy.stats.norm.logpdf(mu, 0.0, 5.0)
                + jax.scipy.stats.expon.logpdf(sigma) + log_sigma
                + jax.scipy.stats.norm.logpdf(y, mu, sigma).sum())

    def run_chain(key):
        warmup_key, sample_key = jax.random.split(key)
        warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
        (state, parameters), _ = warmup.run(warmup_key, {"mu": 0.0, "log_sigma": 0.0}, 200)
        step = jax.jit(blackjax.nuts(logdensity, **parameters).step)

        def one_step(state, key):
            state, _ = step(key, state)
            return state, state.position

        return jax.lax.scan(one_step, state, jax.random.split(sample_key, 300))[1]

    chains = [run_chain(key) for key in jax.random.split(jax.random.PRNGKey(0), 2)]
    positions = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *chains)
    got = steindiag.ksd(positions, log_density=logdensity)
    # Truth: the former blackjax recipe's glue (ravel_pytree, jax.vmap(jax.grad)).
    _, unravel = ravel_pytree(jax.tree_util.tree_map(lambda leaf: leaf[0, 0], positions))
    draws = np.asarray(jax.vmap(jax.vmap(lambda p: ravel_pytree(p)[0]))(positions))
    grad = jax.jit(jax.vmap(jax.grad(lambda z: logdensity(unravel(z)))))
    expected = steindiag.ksd(draws, score=lambda z: np.asarray(grad(z)))
    np.testing.assert_allclose(got["ksd"].values, expected["ksd"].values, rtol=1e-12)
    assert got.attrs["parameters"] == '["log_sigma", "mu"]'     # leaf names, JAX's order
    res = steindiag.diagnose(positions, log_density=logdensity, rng=0, n_bootstrap=400,
                             n_permutations=400)
    assert str(res["verdict_pooled"].values) in ("fits", "inconclusive")


def test_jax_bad_input():
    x = np.random.default_rng(0).standard_normal((2, 50, 2))
    with pytest.raises(TypeError, match="not JAX-traceable"):
        steindiag.ksd(x, log_density=lambda z: -0.5 * float(np.sum(np.asarray(z) ** 2)))
    with pytest.raises(ValueError, match="to a scalar"):
        steindiag.ksd(x, log_density=lambda z: -0.5 * z**2)
    with pytest.raises(ValueError, match="disagree"):
        steindiag.ksd({"a": np.zeros((2, 50)), "b": np.zeros((2, 40))},
                      log_density=lambda p: p["a"] + p["b"])
    with pytest.raises(TypeError, match="score= must be None"):
        steindiag.ksd({"a": x}, score=-x, log_density=lambda p: -jnp.sum(p["a"] ** 2))
    with pytest.raises(TypeError, match="need log_density"):
        steindiag.ksd({"a": x})
    with pytest.raises(TypeError, match="need log_density"):
        steindiag.stein_variational({"a": x})
    with pytest.raises(TypeError, match="reads log_density= only to derive the score"):
        steindiag.stein_variational(x, score=lambda z: -z,
                                    log_density=lambda z: -0.5 * jnp.sum(z**2))
    for bad in (("chain",), ("draw", "walker"), 3):
        with pytest.raises(ValueError, match="for positions given as a pytree, sample_dims"):
            steindiag.ksd({"a": x}, sample_dims=bad, log_density=lambda p: -jnp.sum(p["a"] ** 2))


def test_stein_variational_with_a_jax_log_density():
    x = 0.5 + 1.5 * np.random.default_rng(3).standard_normal((2, 100, 2))
    options = dict(n_steps=30, step_size=0.05, keep="last")
    # Truth: the same run with the score of N(0, I) written out (-z), which jax.grad of
    # -|z|^2 / 2 gives exactly.
    expected = np.asarray(steindiag.stein_variational(x, score=lambda z: -z, **options).draws)
    flat = steindiag.stein_variational(x, log_density=lambda z: -0.5 * jnp.sum(z**2), **options)
    np.testing.assert_allclose(np.asarray(flat.draws), expected, rtol=1e-12, atol=1e-14)
    tree = steindiag.stein_variational(
        {"a": x[..., 0], "b": x[..., 1]},
        log_density=lambda p: -0.5 * (p["a"] ** 2 + p["b"] ** 2), **options)
    assert list(tree.draws.data_vars) == ["a", "b"]
    np.testing.assert_allclose(tree.draws["a"].values, expected[..., 0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tree.draws["b"].values, expected[..., 1], rtol=1e-12, atol=1e-14)


def test_stein_variational_moves_a_numpyro_mcmc_and_returns_its_sites(non_centred_mcmc):
    draws, score, _, _ = _recipe_glue(non_centred_mcmc)
    options = dict(n_steps=20, step_size=0.02, keep="last")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", steindiag.CorrectionWarning)
        # Truth: the former recipe's unconstrained arrays and score, moved by SVGD.
        moved = np.asarray(steindiag.stein_variational(draws, score=score, **options).draws)
        result = steindiag.stein_variational(non_centred_mcmc, **options)
    posterior = result.draws.posterior
    # The sites come back constrained, by numpyro's transforms: tau = exp(its unconstrained
    # value); the deterministic theta is recomputed from the moved sites.
    np.testing.assert_allclose(posterior["mu"].values, moved[..., 0], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(posterior["tau"].values, np.exp(moved[..., 1]), rtol=1e-8)
    np.testing.assert_allclose(posterior["theta_tilde"].values, moved[..., 2:], rtol=1e-8,
                               atol=1e-10)
    np.testing.assert_allclose(
        posterior["theta"].values,
        posterior["mu"].values[..., None]
        + posterior["tau"].values[..., None] * posterior["theta_tilde"].values, rtol=1e-12)


def test_add_scores_stores_a_numpyro_run(centred_mcmc):
    draws, score, _, _ = _recipe_glue(centred_mcmc)
    diverging = np.asarray(centred_mcmc.get_extra_fields(group_by_chain=True)["diverging"])
    import arviz as az

    for scored in (steindiag.add_scores(centred_mcmc),
                   steindiag.add_scores(az.from_numpyro(centred_mcmc), centred_mcmc)):
        stats = scored["sample_stats"]
        # Truth: the former recipe's unconstrained draws and its batched jax.grad.
        np.testing.assert_allclose(stats["unconstrained_draw"].values, draws, rtol=1e-12,
                                   atol=1e-14)
        expected = score(draws.reshape(-1, draws.shape[2])).reshape(draws.shape)
        np.testing.assert_allclose(stats["gradient"].values, expected, rtol=1e-10, atol=1e-12)
        # Read back with no model: the stored numbers, the sites' labels, numpyro's
        # divergences.
        res = steindiag.diagnose(scored, rng=0, n_bootstrap=200, n_permutations=200)
        assert res.attrs["score_source"] == "stored"
        assert json.loads(res.attrs["parameters"])[:3] == ["mu", "tau", "theta[0]"]
        np.testing.assert_array_equal(res["divergences"].values, diverging.sum(axis=1))
    with pytest.raises(TypeError, match="strategy applies to PyMC models only"):
        steindiag.add_scores(centred_mcmc, strategy="batched")
    with pytest.raises(ValueError, match="group must be 'posterior'"):
        steindiag.add_scores(centred_mcmc, group="warmup_posterior")
    with pytest.raises(TypeError, match="model must be None"):
        steindiag.add_scores(centred_mcmc, centred_mcmc)
