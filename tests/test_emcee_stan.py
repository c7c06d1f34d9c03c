"""emcee's sampler, pystan fits and CmdStanPy + BridgeStan read in one call; space checks.

Sources of truth: the samplers' own stored values (emcee's ``get_chain()``, pystan's
stored draws, the fake CmdStanPy fit's columns), closed-form scores of Gaussian and
log-normal targets, and the user guide's pystan recipe, whose hand-written glue
(unconstrain_pars / grad_log_prob draw by draw) is an independent path to the same
numbers. BridgeStan is exercised through a duck-typed model that follows its documented
API (``param_names``, ``param_unc_names``, ``param_unconstrain``, ``log_density``,
``log_density_gradient``): the real library needs Stan's sources downloaded at run time;
benchmarks/check_bridgestan.py checks the same path against a compiled BridgeStan model.
"""

import warnings

import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag.inputs import read_input


# A Gaussian target with a closed-form score: precision matrix PRECISION.
PRECISION = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, 0.2], [0.0, 0.2, 0.5]])


def _log_prob(x):
    return -0.5 * np.einsum("...i,ij,...j->...", x, PRECISION, x)


def _score(x):
    return -x @ PRECISION


def _run_emcee(n_walkers=12, n_steps=1200, seed=0, log_prob=_log_prob, **options):
    emcee = pytest.importorskip("emcee")
    sampler = emcee.EnsembleSampler(n_walkers, 3, log_prob, **options)
    sampler.random_state = np.random.RandomState(seed).get_state()
    start = np.random.default_rng(seed).normal(size=(n_walkers, 3))
    sampler.run_mcmc(start, n_steps, progress=False)
    return sampler


@pytest.fixture(scope="module")
def sampler():
    return _run_emcee(vectorize=True)


# --------------------------------------------------------------------------------------
# emcee
# --------------------------------------------------------------------------------------


def test_emcee_sampler_in_one_call(sampler):
    res = steindiag.ksd(sampler, score=_score, coords={"draw": slice(200, None)})
    # Truth: emcee's own stored chain, (step, walker, d), through the array path.
    chain = sampler.get_chain(discard=200)
    expected = steindiag.ksd(chain, score=_score(chain), sample_dims=("draw", "chain"))
    np.testing.assert_allclose(res["ksd"].values, expected["ksd"].values, rtol=1e-12)
    assert float(res["ksd_pooled"]) == pytest.approx(float(expected["ksd_pooled"]), rel=1e-12)
    # az.from_emcee's names for a sampler without parameter_names.
    assert res.sizes["chain"] == 12 and res.attrs["n_draw"] == 1000
    assert "var_0" in res.attrs["parameters"] and "var_2" in res.attrs["parameters"]


def test_emcee_reads_walkers_and_parameter_names():
    # With parameter_names, emcee passes log_prob_fn a dict per walker (no vectorize).
    named = _run_emcee(n_steps=50, log_prob=lambda p: _log_prob(np.array([p["a"], *p["b"]])),
                       parameter_names={"a": 0, "b": [1, 2]})
    pending = read_input(named)
    # Truth: emcee's get_chain(), (step, walker, d), is (walker, step, d) here.
    np.testing.assert_array_equal(pending.draws, np.swapaxes(named.get_chain(), 0, 1))
    assert pending.parameter == ["a", "b[0]", "b[1]"]
    assert pending.attrs["ensemble"].endswith("12 walkers")


def test_emcee_wrong_var_names_order_is_caught(sampler):
    # The score takes log_prob_fn's order (var_0, var_1, var_2); var_names reorders the
    # draws. Truth: central differences of log_prob_fn in the order given.
    with pytest.raises(ValueError, match=r"log_prob_fn's order"):
        steindiag.ksd(sampler, score=_score, var_names=["var_1", "var_0", "var_2"])
    # A score written for that order is accepted, and gives the same KSD (the kernel
    # does not depend on the order of the coordinates).
    order = [1, 0, 2]
    res = steindiag.ksd(sampler, score=lambda x: _score(x[:, np.argsort(order)])[:, order],
                        var_names=["var_1", "var_0", "var_2"])
    same = steindiag.ksd(sampler, score=_score)
    assert float(res["ksd_pooled"]) == pytest.approx(float(same["ksd_pooled"]), rel=1e-10)


def test_emcee_wrong_gradient_is_caught(sampler):
    # 1 % off: far above the differences' error (about 1e-10 here), so it must be caught.
    with pytest.raises(ValueError, match="does not match central finite differences"):
        steindiag.ksd(sampler, score=lambda x: 1.01 * _score(x))
    # A score of one draw at a time is checked the same way.
    with pytest.raises(ValueError, match="does not match central finite differences"):
        steindiag.ksd(sampler, score=lambda z: _score(z[None])[0] + 1e-2, batched=False)
    steindiag.ksd(sampler, score=lambda z: _score(z[None])[0], batched=False)


def test_emcee_score_from_finite_differences(sampler):
    with pytest.warns(UserWarning, match="central finite differences"):
        pending = read_input(sampler, coords={"draw": slice(1000, None)})
    prepared = pending.with_scores()
    # Truth: the closed-form score of the Gaussian; central differences of a quadratic are
    # exact up to rounding, about eps^(2/3) ~ 4e-11 relative.
    np.testing.assert_allclose(prepared.scores, _score(prepared.draws), rtol=1e-7, atol=1e-8)
    assert "finite differences" in prepared.attrs["score_source"]


def test_emcee_refuses_inaccurate_differences():
    # log p in float32: rounding of about 1e-7 |log p| / h swamps the differences.
    sampler = _run_emcee(n_steps=100, vectorize=True,
                         log_prob=lambda x: _log_prob(x).astype(np.float32) + np.float32(100))
    with pytest.raises(ValueError, match="not accurate enough.*score="):
        steindiag.ksd(sampler)


def test_emcee_needs_a_run():
    emcee = pytest.importorskip("emcee")
    sampler = emcee.EnsembleSampler(8, 3, _log_prob, vectorize=True)
    with pytest.raises(ValueError, match="run_mcmc"):
        steindiag.ksd(sampler, score=_score)


def test_diagnose_reads_an_ensemble_as_one_chain(sampler):
    res = steindiag.diagnose(sampler, score=_score, coords={"draw": slice(200, None)}, rng=3)
    # One chain, the ensemble; its KSD is the pooled KSD of all walkers (truth: ksd of
    # emcee's stored chain); no test of agreement among walkers.
    assert list(res["chain"].values) == ["ensemble"]
    expected = steindiag.ksd(sampler.get_chain(discard=200), score=_score,
                             sample_dims=("draw", "chain"))
    assert float(res["ksd"][0]) == pytest.approx(float(expected["ksd_pooled"]), rel=1e-12)
    assert np.isnan(float(res["agreement_pvalue"]))
    assert "ensemble of 12 walkers" in res.attrs["ensemble_note"]
    assert "ensemble of 12 walkers" in str(res)
    # log p from log_prob_fn: the search ran.
    assert "missing_mass_found" in res
    # The same draws as emcee's array, with its layout named, are read as an ensemble.
    from_array = steindiag.diagnose(sampler.get_chain(discard=200), score=_score,
                                    sample_dims=("draw", "chain"), mode_search=False, rng=3)
    assert list(from_array["chain"].values) == ["ensemble"]
    az = pytest.importorskip("arviz")
    if hasattr(az, "from_emcee"):
        # az.from_emcee writes inference_library="emcee": an ensemble too.
        trace = az.from_emcee(sampler)
        from_trace = steindiag.diagnose(trace, score=_score, coords={"draw": slice(200, None)},
                                        mode_search=False, rng=3)
        assert list(from_trace["chain"].values) == ["ensemble"]
        assert float(from_trace["ksd"][0]) == pytest.approx(float(expected["ksd_pooled"]),
                                                             rel=1e-12)


# --------------------------------------------------------------------------------------
# pystan
# --------------------------------------------------------------------------------------


# The fixture pystan_recipe (the user guide's recipe, run once): tests/conftest.py.


def test_pystan_in_one_call(pystan_recipe):
    fit, posterior = pystan_recipe["fit"], pystan_recipe["posterior"]
    res = steindiag.ksd(fit, posterior)
    # Truth: the recipe's glue (unconstrain_pars and grad_log_prob draw by draw, the
    # chains de-interleaved by hand), an independent path through pystan's API.
    glue = pystan_recipe["res_glue"]
    np.testing.assert_allclose(res["ksd"].values, glue["ksd"].values, rtol=1e-12)
    assert float(res["ksd_pooled"]) == pytest.approx(float(glue["ksd_pooled"]), rel=1e-12)
    pending = read_input(fit, posterior)
    np.testing.assert_allclose(pending.draws, pystan_recipe["draws"], rtol=1e-12)
    # Labels as ArviZ labels Stan's parameters; sigma is stored as log sigma.
    assert pending.parameter == ["mu", "sigma"]
    assert pending.attrs["space"] == "unconstrained"
    # Divergences: pystan's own divergent__ column, per chain.
    flags = np.asarray(fit["divergent__"]).reshape(-1, fit.num_chains).T
    np.testing.assert_array_equal(pending.sampler_warnings().divergences, flags.sum(axis=1))


def test_pystan_selection_and_errors(pystan_recipe):
    fit, posterior = pystan_recipe["fit"], pystan_recipe["posterior"]
    pending = read_input(fit, posterior, coords={"chain": [1], "draw": slice(200, None)})
    # Truth: the recipe's unconstrained draws, chain 1, draws 200..249.
    np.testing.assert_allclose(pending.draws, pystan_recipe["draws"][1:2, 200:], rtol=1e-12)
    with pytest.raises(TypeError, match=r"steindiag.ksd\(fit, posterior\)"):
        steindiag.ksd(fit)
    with pytest.raises(ValueError, match="var_names"):
        steindiag.ksd(fit, posterior, var_names=["mu"])
    with pytest.raises(TypeError, match="score is given by the Stan model"):
        steindiag.ksd(fit, posterior, score=lambda x: -x)


# --------------------------------------------------------------------------------------
# CmdStanPy + BridgeStan (duck-typed: see the module docstring)
# --------------------------------------------------------------------------------------


def _as_ctypes_array(x):
    # bridgestan passes arrays to C through numpy.ctypeslib.ndpointer(float64, C_CONTIGUOUS),
    # which raises ctypes.ArgumentError on anything else
    import ctypes

    if not (isinstance(x, np.ndarray) and x.dtype == np.float64 and x.flags.c_contiguous):
        raise ctypes.ArgumentError("argument 2: TypeError: array must have data type float64 "
                                   "and flags ['C_CONTIGUOUS']")
    return x


class _FakeBridgeStanModel:
    """mu ~ N(0, 1), sigma ~ Exp(1); Stan's unconstrained space is (mu, log sigma).

    Follows bridgestan.StanModel (checked against BridgeStan 2.5.0 with a compiled model,
    benchmarks/check_bridgestan.py): the signatures, and its arrays must be float64 and
    C-contiguous. log p with the Jacobian is -mu^2 / 2 - exp(z) + z for z = log sigma.
    """

    def param_names(self, *, include_tp=False, include_gq=False):
        return ["mu", "sigma"]

    def param_unc_names(self):
        return ["mu", "sigma"]

    def param_unconstrain(self, theta, *, out=None):
        theta = _as_ctypes_array(theta)
        return np.array([theta[0], np.log(theta[1])])

    def log_density(self, theta_unc, *, propto=True, jacobian=True):
        mu, z = _as_ctypes_array(theta_unc)
        return -0.5 * mu**2 - np.exp(z) + (z if jacobian else 0.0)

    def log_density_gradient(self, theta_unc, *, propto=True, jacobian=True, out=None):
        mu, z = _as_ctypes_array(theta_unc)
        return (self.log_density(theta_unc, jacobian=jacobian),
                np.array([-mu, -np.exp(z) + (1.0 if jacobian else 0.0)]))


class _FakeCmdStanMCMC:
    """CmdStanPy's CmdStanMCMC as used: draws(concat_chains=False) and column_names."""

    def __init__(self, seed=0, n_draw=200, n_chain=3):
        rng = np.random.default_rng(seed)
        self.column_names = ("lp__", "divergent__", "mu", "sigma")
        self.chains = n_chain
        self._draws = np.stack([np.zeros((n_draw, n_chain)),
                                (rng.random((n_draw, n_chain)) < 0.02).astype(float),
                                rng.normal(size=(n_draw, n_chain)),
                                rng.exponential(size=(n_draw, n_chain))], axis=-1)

    def draws(self, *, inc_warmup=False, concat_chains=False):
        return self._draws


def test_cmdstanpy_with_bridgestan_model():
    fit, model = _FakeCmdStanMCMC(), _FakeBridgeStanModel()
    prepared = read_input(fit, model).with_scores()
    columns = np.swapaxes(fit._draws, 0, 1)        # (chain, draw, column)
    # Truth: the fit's own columns, mapped by log for sigma; the closed-form score.
    np.testing.assert_allclose(prepared.draws[..., 0], columns[..., 2], rtol=1e-15)
    np.testing.assert_allclose(prepared.draws[..., 1], np.log(columns[..., 3]), rtol=1e-15)
    np.testing.assert_allclose(prepared.scores[..., 0], -columns[..., 2], rtol=1e-15)
    np.testing.assert_allclose(prepared.scores[..., 1], 1.0 - columns[..., 3], rtol=1e-12)
    assert prepared.parameter == ["mu", "sigma"]
    pending = read_input(fit, model)
    # points of any memory layout (BridgeStan takes C-contiguous float64 only)
    points = np.asfortranarray(prepared.draws.reshape(-1, 2))
    np.testing.assert_array_equal(pending.source.score(points), prepared.scores.reshape(-1, 2))
    np.testing.assert_array_equal(pending.source.log_density(points.astype(np.float32)).shape, (600,))
    np.testing.assert_array_equal(pending.sampler_warnings().divergences,
                                  columns[..., 1].sum(axis=1))
    res = steindiag.diagnose(fit, model, mode_search=False, rng=0)
    assert "divergences" in res


class _FakeBridgeStanVector(_FakeBridgeStanModel):
    """theta ~ N(0, I_2): BridgeStan names its coordinates as Stan does, "theta.1"."""

    def param_names(self, *, include_tp=False, include_gq=False):
        return ["theta.1", "theta.2"]

    def param_unc_names(self):
        return ["theta.1", "theta.2"]

    def param_unconstrain(self, theta, *, out=None):
        return _as_ctypes_array(theta).copy()

    def log_density(self, theta_unc, *, propto=True, jacobian=True):
        return -0.5 * float(_as_ctypes_array(theta_unc) @ theta_unc)

    def log_density_gradient(self, theta_unc, *, propto=True, jacobian=True, out=None):
        return self.log_density(theta_unc), -_as_ctypes_array(theta_unc)


@pytest.mark.parametrize("columns", [("theta[1]", "theta[2]"), ("theta.1", "theta.2")])
def test_cmdstanpy_columns_of_a_vector_parameter(columns):
    # CmdStanPy's column_names are "theta[1]" (its munge of CmdStan's "theta.1"), BridgeStan's
    # param_names "theta.1": both spellings are matched (found with real CmdStanPy 1.3.2 and
    # BridgeStan 2.5.0, benchmarks/check_bridgestan.py).
    fit = _FakeCmdStanMCMC()
    fit.column_names = ("lp__", "divergent__", *columns)
    prepared = read_input(fit, _FakeBridgeStanVector()).with_scores()
    columns = np.swapaxes(fit._draws, 0, 1)
    np.testing.assert_array_equal(prepared.draws, columns[..., 2:])
    np.testing.assert_array_equal(prepared.scores, -columns[..., 2:])
    assert prepared.parameter == ["theta[0]", "theta[1]"]
    fit.column_names = ("lp__", "divergent__", "phi[1]", "phi[2]")
    with pytest.raises(ValueError, match=r"no column\(s\) \['theta\[1\]', 'theta\[2\]'\]"):
        read_input(fit, _FakeBridgeStanVector())


def test_stan_labels_of_complex_and_matrix_names():
    from steindiag.inputs._stan import _arviz_label, _cmdstanpy_column

    assert _arviz_label("Omega.2.1") == "Omega[1, 0]"
    assert _arviz_label("zc.real") == "zc[real]"
    assert _cmdstanpy_column("Omega.2.1") == "Omega[2,1]"
    assert _cmdstanpy_column("zc.imag") == "zc[imag]"
    assert _cmdstanpy_column("x:1.2") == "x.1[2]"


def test_cmdstanpy_without_model_names_what_to_install():
    # A CmdStanPy fit (its class as cmdstanpy names it) with no model.
    fit = type("CmdStanMCMC", (_FakeCmdStanMCMC,), {"__module__": "cmdstanpy.stanfit.mcmc"})()
    with pytest.raises(TypeError, match="bridgestan.StanModel") as info:
        steindiag.ksd(fit)
    from importlib.util import find_spec

    if find_spec("bridgestan") is None:
        assert "pip install bridgestan" in str(info.value)


_EVERY_FUNCTION = {
    "ksd": lambda data, model, options: steindiag.ksd(data, model, **options),
    "ksd_path": lambda data, model, options: steindiag.ksd_path(data, model, **options),
    "ksd_test": lambda data, model, options: steindiag.ksd_test(data, model, n_bootstrap=99,
                                                                rng=0, **options),
    "stein_weights": lambda data, model, options: steindiag.stein_weights(data, model,
                                                                          **options),
    "stein_thin": lambda data, model, options: steindiag.stein_thin(
        data, model, n_selected=10, regularized=True, **options),
    "mmd": lambda data, model, options: steindiag.mmd(
        data, model=model, **{k: v for k, v in options.items() if k != "score"}),
    "control_variates": lambda data, model, options: steindiag.control_variates(
        data, model, **options),
    "stein_variational": lambda data, model, options: steindiag.stein_variational(
        data, model, n_steps=2, **options),
}


@pytest.mark.parametrize("function", sorted(_EVERY_FUNCTION))
def test_every_function_takes_samplers_objects(function, sampler):
    # Each runs to the end on both readers (regularized thinning and SVGD evaluate the
    # sampler's own log p and score at new points).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _EVERY_FUNCTION[function](sampler, None, {"score": _score,
                                                  "coords": {"draw": slice(600, None)}})
        _EVERY_FUNCTION[function](_FakeCmdStanMCMC(n_draw=100), _FakeBridgeStanModel(), {})


# --------------------------------------------------------------------------------------
# space checks
# --------------------------------------------------------------------------------------


def _trace(sigma_values):
    rng = np.random.default_rng(0)
    return xr.Dataset({"mu": (("chain", "draw"), rng.normal(size=(2, 100))),
                       "sigma_a": (("chain", "draw"), sigma_values)})


def test_space_warns_for_a_positive_scale_said_unconstrained():
    sigma = np.exp(np.random.default_rng(1).normal(size=(2, 100)))   # constrained: > 0
    with pytest.warns(UserWarning, match=r"'sigma_a' is strictly positive in every draw"):
        steindiag.ksd(_trace(sigma), score=lambda x: -x, space="unconstrained")
    # Its log (negative and positive values) is not warned about, nor is a name that
    # says it is a log.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steindiag.ksd(_trace(np.log(sigma)), score=lambda x: -x, space="unconstrained")
        logged = _trace(sigma).rename({"sigma_a": "log_sigma_a"})
        steindiag.ksd(logged, score=lambda x: -x, space="unconstrained")
        # az.from_emcee's names (var_0, var_1) say nothing about a constraint.
        steindiag.ksd(_trace(sigma).rename({"sigma_a": "var_1"}), score=lambda x: -x,
                      space="unconstrained")


def test_space_warns_for_a_probability_in_an_emcee_trace():
    p = np.random.default_rng(2).uniform(0.1, 0.9, size=(2, 100))
    trace = _trace(p).rename({"sigma_a": "p"})
    trace.attrs["inference_library"] = "emcee"
    with pytest.warns(UserWarning, match=r"own coordinates.*'p' is inside \(0, 1\)"):
        steindiag.ksd(trace, score=lambda x: -x)


def test_all_variables_passed_to_a_score_say_so():
    # A deterministic quantity in the trace: the score of (mu, sigma_a) gets 2 columns
    # where it expects 1; the error says which variables were passed and what to do.
    trace = _trace(np.random.default_rng(1).normal(size=(2, 100)))
    with pytest.raises(ValueError, match=r"every variable of the trace.*var_names="):
        steindiag.ksd(trace, score=lambda x: -x[:, :1])
    steindiag.ksd(trace, score=lambda x: -x[:, :1], var_names=["mu"])
