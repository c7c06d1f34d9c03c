"""Snapshot cases: each one public call of steindiag on fixed inputs.

Every case is a function of no argument returning the result of ONE public call. All
randomness goes through ``rng=`` integer seeds; inputs are built with
``np.random.default_rng(<fixed seed>)`` (emcee's and numpyro's own sampling in the
fixtures is seeded through their own APIs). Inputs are built once per process
(``functools.cache``) and never modified by a case.

Keep clear of the library's timing-based choices, whose numbers agree only to rounding:
``add_scores`` (and every call with a PyMC ``model``) compiles and times a batched score
graph against the per-draw function only when the per-draw loop would take more than 10 s,
so the PyMC trace has 240 draws (per-draw); ``stein_weights(method=
"frank-wolfe")`` times one thread against all from 8000 draws on, so its case has 120.
Results were checked to be the same bits with NUMBA_NUM_THREADS = 1, 2, 3 and 8.

``CASES`` maps a case name to ``(function, requires, inputs)``: ``requires`` names the
optional modules the case needs (the test skips the case without them), ``inputs`` the
cached input builders to run (warnings not recorded) before the case itself.
"""

from __future__ import annotations

import functools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import steindiag  # noqa: E402

CASES = {}

# Small everywhere: the whole set runs in well under a minute once Numba's cache is warm.
N_BOOT = 99          # bootstrap replicates / permutations where the function allows it
N_BOOT_DIAGNOSE = 199  # diagnose refuses fewer than the level needs (alpha / 4 tests)


def case(*requires, inputs=()):
    """Register a case. ``inputs``: the cached input builders it reads, built before the
    call whose warnings are recorded (so a case's warnings do not depend on which case
    happened to build a shared input first)."""
    def register(function):
        name = function.__name__
        assert name not in CASES, name
        CASES[name] = (function, tuple(requires), tuple(inputs))
        return function
    return register


# ------------------------------------------------------------------------------ inputs


@functools.cache
def exact():
    """4 chains x 200 draws of exact N(0, I_2) draws, and their score -x."""
    x = np.random.default_rng(20240601).standard_normal((4, 200, 2))
    return x, -x


@functools.cache
def biased():
    """The exact draws scaled by 1.3 (too wide for N(0, I)), scored against N(0, I)."""
    x = 1.3 * exact()[0]
    return x, -x


@functools.cache
def bad_chain():
    """Exact draws whose chain 2 is shrunk and shifted: chains that disagree."""
    x = exact()[0].copy()
    x[2] = 0.7 * x[2] + 0.8
    return x, -x


def gaussian_score(z):
    return -z


def gaussian_log_density(z):
    return -0.5 * np.sum(z * z, axis=-1)


SCHOOLS = ["Choate", "Deerfield", "Phillips Andover"]


@functools.cache
def labelled():
    """theta (chain, draw, school) with a school coordinate, N(mean, I) with its score."""
    rng = np.random.default_rng(20240602)
    mean = np.array([1.0, -0.5, 0.3])
    theta = mean + rng.standard_normal((3, 150, 3))
    coords = {"chain": [0, 1, 2], "draw": np.arange(150), "school": SCHOOLS}
    theta_da = xr.DataArray(theta, dims=("chain", "draw", "school"), coords=coords,
                            name="theta")
    score_da = xr.DataArray(mean - theta, dims=("chain", "draw", "school"), coords=coords)
    mu = rng.standard_normal((3, 150)) * 1.1 + 2.0
    dataset = xr.Dataset({"mu": (("chain", "draw"), mu), "theta": theta_da},
                         coords={"chain": [0, 1, 2], "draw": np.arange(150)})
    return theta_da, score_da, dataset


def labelled_flat_score(z):
    """Score of the Dataset ``labelled()[2]``: flat columns mu, theta[Choate..]."""
    target = np.array([2.0, 1.0, -0.5, 0.3])
    scale2 = np.array([1.0, 1.0, 1.0, 1.0])
    return (target - z) / scale2


@functools.cache
def pymc_model():
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.5)
        pm.Normal("y", mu, sigma, observed=[0.3, -1.2, 0.8, 2.0])
    return model


@functools.cache
def pymc_trace():
    """Posterior (4 x 60 draws, fixed random arrays, not sampled) and sample_stats with
    some divergences, as a DataTree (works with ArviZ 0.x and 1.x)."""
    rng = np.random.default_rng(20240603)
    coords = {"chain": np.arange(4), "draw": np.arange(60)}
    posterior = xr.Dataset(
        {"mu": (("chain", "draw"), 0.45 + 0.6 * rng.standard_normal((4, 60))),
         "sigma": (("chain", "draw"), rng.gamma(6.0, 0.22, size=(4, 60)))},
        coords=coords)
    diverging = np.zeros((4, 60), dtype=bool)
    diverging[0, [5, 17]] = True
    diverging[3, 40] = True
    stats = xr.Dataset({"diverging": (("chain", "draw"), diverging)}, coords=coords)
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})


@functools.cache
def pymc_trace_with_scores():
    return steindiag.add_scores(pymc_trace(), pymc_model())


@functools.cache
def pymc_inference_data():
    import arviz as az

    tree = pymc_trace()
    return az.InferenceData(posterior=tree["posterior"].to_dataset(),
                            sample_stats=tree["sample_stats"].to_dataset())


@functools.cache
def numpyro_mcmc():
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.5))
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=100, num_chains=2,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y=jnp.asarray([0.3, -1.2, 0.8, 2.0]))
    return mcmc


EMCEE_PRECISION = np.array([[2.0, 0.6], [0.6, 1.0]])


def emcee_log_prob(x):
    return -0.5 * np.einsum("...i,ij,...j->...", x, EMCEE_PRECISION, x)


def emcee_score(x):
    return -x @ EMCEE_PRECISION


@functools.cache
def emcee_sampler():
    import emcee

    sampler = emcee.EnsembleSampler(8, 2, emcee_log_prob, vectorize=True)
    sampler.random_state = np.random.RandomState(0).get_state()
    start = np.random.default_rng(20240604).normal(size=(8, 2))
    sampler.run_mcmc(start, 150, progress=False)
    return sampler


PYMC = (pymc_model, pymc_trace)


@functools.cache
def biased_weights():
    x, s = biased()
    return steindiag.stein_weights(x, score=s)


@functools.cache
def pymc_weights():
    return steindiag.stein_weights(pymc_trace(), pymc_model(), mode_search=False)


@functools.cache
def bad_chain_path():
    x, s = bad_chain()
    return steindiag.ksd_path(x, score=s, n_points=12)


@functools.cache
def bad_chain_ksd():
    x, s = bad_chain()
    return steindiag.ksd(x, score=s)


@functools.cache
def bad_chain_mmd():
    x, _ = bad_chain()
    return steindiag.mmd(x, n_permutations=N_BOOT, rng=0)


@functools.cache
def bad_chain_diagnosis_file():
    """A diagnose result written to netCDF3 bytes (what a user saves)."""
    x, s = bad_chain()
    result = steindiag.diagnose(x, score=s, rng=10, n_bootstrap=N_BOOT_DIAGNOSE,
                                n_permutations=N_BOOT_DIAGNOSE)
    return result.to_netcdf(engine="scipy")


def new_axes():
    fig, ax = plt.subplots(figsize=(4, 3))
    return ax


# ------------------------------------------------------------------------------- ksd


@case()
def ksd_array():
    x, s = exact()
    return steindiag.ksd(x, score=s)


@case()
def ksd_array_biased():
    x, s = biased()
    return steindiag.ksd(x, score=s)


@case()
def ksd_gaussian_kernel_identity():
    x, s = biased()
    return steindiag.ksd(x, score=s, kernel="gaussian", preconditioner="identity")


@case()
def ksd_imq_options_med():
    x, s = biased()
    return steindiag.ksd(x, score=s, c=2.0, beta=-0.3, preconditioner="med")


@case()
def ksd_matern32_smpcov():
    x, s = bad_chain()
    return steindiag.ksd(x, score=s, kernel="matern32", preconditioner="smpcov")


@case()
def ksd_kernel_object_sclmed():
    x, s = biased()
    return steindiag.ksd(x, score=s, kernel=steindiag.kernels.Matern52(),
                         preconditioner="sclmed")


@case()
def ksd_preconditioner_array():
    x, s = biased()
    return steindiag.ksd(x, score=s, kernel=steindiag.kernels.IMQ(c=1.5, beta=-0.6),
                         preconditioner=np.array([[1.5, 0.2], [0.2, 0.8]]))


@case()
def ksd_one_chain():
    x, s = exact()
    return steindiag.ksd(x[0], score=s[0])


@case()
def ksd_emcee_layout():
    x, s = biased()
    return steindiag.ksd(x.transpose(1, 0, 2), score=s.transpose(1, 0, 2),
                         sample_dims=("draw", "chain"))


@case()
def ksd_score_callable_unbatched():
    x, _ = biased()
    return steindiag.ksd(x[:, :60], score=gaussian_score, batched=False)


@case()
def ksd_nystrom():
    x, s = biased()
    return steindiag.ksd(x, score=s, estimator="nystrom", n_landmarks=40, rng=1)


@case()
def ksd_dataarray():
    theta, score, _ = labelled()
    return steindiag.ksd(theta, score=score)


@case()
def ksd_dataset_coords():
    _, _, dataset = labelled()
    return steindiag.ksd(dataset, score=labelled_flat_score,
                         coords={"draw": slice(20, None)})


@case("pymc", inputs=PYMC)
def ksd_pymc():
    return steindiag.ksd(pymc_trace(), pymc_model())


@case("pymc", inputs=PYMC)
def ksd_pymc_var_names():
    return steindiag.ksd(pymc_trace(), pymc_model(), kernel="gaussian",
                         coords={"chain": [0, 2]})


@case("pymc", "arviz", inputs=PYMC)
def ksd_pymc_inference_data():
    import arviz as az
    import pytest

    if int(az.__version__.split(".")[0]) >= 1:
        pytest.skip("ArviZ 1.x: InferenceData is the DataTree (case ksd_pymc)")
    return steindiag.ksd(pymc_inference_data(), pymc_model())


@case("pymc", inputs=PYMC)
def add_scores_pymc():
    return steindiag.add_scores(pymc_trace(), pymc_model())


@case("pymc", inputs=PYMC + (pymc_trace_with_scores,))
def ksd_stored_scores():
    return steindiag.ksd(pymc_trace_with_scores())


@case()
def ksd_path_array():
    x, s = exact()
    return steindiag.ksd_path(x, score=s, n_points=15)


@case()
def ksd_path_every_n():
    x, s = biased()
    return steindiag.ksd_path(x[:, :40], score=s[:, :40])


@case()
def ksd_path_nystrom():
    x, s = bad_chain()
    return steindiag.ksd_path(x, score=s, n_points=10, estimator="nystrom", n_landmarks=30,
                              rng=2)


@case("pymc", inputs=PYMC)
def ksd_path_pymc():
    return steindiag.ksd_path(pymc_trace(), pymc_model(), n_points=8)


# --------------------------------------------------------------------------- ksd_test


@case()
def ksd_test_iid_damped():
    x, s = biased()
    return steindiag.ksd_test(x, score=s, bootstrap="iid", damped=True, n_bootstrap=N_BOOT,
                              rng=0)


@case()
def ksd_test_wild_unpooled():
    x, s = exact()
    return steindiag.ksd_test(x, score=s, bootstrap="wild", pooled=False,
                              n_bootstrap=N_BOOT, rng=1)


@case()
def ksd_test_wild_pooled():
    x, s = bad_chain()
    return steindiag.ksd_test(x, score=s, bootstrap="wild", pooled=True,
                              n_bootstrap=N_BOOT, rng=2)


@case()
def ksd_test_thinned_damped():
    x, s = biased()
    return steindiag.ksd_test(x, score=s, bootstrap="thinned", damped=True,
                              n_bootstrap=N_BOOT, rng=3)


@case()
def ksd_test_thinned_unpooled():
    x, s = exact()
    return steindiag.ksd_test(x, score=s, bootstrap="thinned", pooled=False,
                              n_bootstrap=N_BOOT, rng=4)


@case()
def ksd_test_multinomial():
    x, s = exact()
    return steindiag.ksd_test(x, score=s, bootstrap="multinomial", n_bootstrap=N_BOOT,
                              rng=5)


@case()
def ksd_test_nystrom():
    x, s = biased()
    return steindiag.ksd_test(x, score=s, estimator="nystrom", n_landmarks=30,
                              n_bootstrap=N_BOOT, rng=6)


@case()
def ksd_test_auto_one_chain():
    x, s = biased()
    return steindiag.ksd_test(x[1], score=s[1], n_bootstrap=N_BOOT, rng=7)


@case()
def ksd_test_short_chains_warn():
    x, s = exact()
    return steindiag.ksd_test(x[:, :15], score=s[:, :15], bootstrap="thinned",
                              n_bootstrap=N_BOOT, rng=8)


@case()
def ksd_test_dataarray():
    theta, score, _ = labelled()
    return steindiag.ksd_test(theta, score=score, n_bootstrap=N_BOOT, rng=9)


@case("pymc", inputs=PYMC)
def ksd_test_pymc():
    return steindiag.ksd_test(pymc_trace(), pymc_model(), bootstrap="thinned", damped=True,
                              n_bootstrap=N_BOOT, rng=10)


# -------------------------------------------------------------------------------- mmd


@case()
def mmd_pairs():
    x, _ = bad_chain()
    return steindiag.mmd(x, n_permutations=N_BOOT, rng=0)


@case()
def mmd_pairs_no_pvalue():
    x, _ = bad_chain()
    return steindiag.mmd(x, kernel="gaussian", preconditioner="identity")


@case()
def mmd_all():
    x, _ = bad_chain()
    return steindiag.mmd(x, test="all", n_permutations=N_BOOT, rng=1)


@case()
def mmd_all_block_length():
    x, _ = exact()
    return steindiag.mmd(x, test="all", n_permutations=N_BOOT, block_length=5, rng=2)


@case()
def mmd_other():
    x, _ = exact()
    xb, _ = biased()
    return steindiag.mmd(x, other=xb[:, :100], n_permutations=N_BOOT, rng=3)


@case()
def mmd_dataset():
    _, _, dataset = labelled()
    return steindiag.mmd(dataset, n_permutations=N_BOOT, rng=4)


@case("pymc", inputs=PYMC)
def mmd_pymc_model():
    return steindiag.mmd(pymc_trace(), model=pymc_model(), n_permutations=N_BOOT, rng=5)


# --------------------------------------------------------------------------- diagnose


@case()
def diagnose_array_log_density():
    x, s = exact()
    return steindiag.diagnose(x, score=s, log_density=gaussian_log_density, rng=0,
                              n_bootstrap=N_BOOT_DIAGNOSE, n_permutations=N_BOOT_DIAGNOSE)


@case()
def diagnose_array_biased():
    x, s = biased()
    return steindiag.diagnose(x, score=s, rng=1, n_bootstrap=N_BOOT_DIAGNOSE,
                              n_permutations=N_BOOT_DIAGNOSE)


@case()
def diagnose_bad_chain_log_density():
    x, s = bad_chain()
    return steindiag.diagnose(x, score=s, log_density=gaussian_log_density, rng=2,
                              n_bootstrap=N_BOOT_DIAGNOSE, n_permutations=N_BOOT_DIAGNOSE)


@case()
def diagnose_no_missing_mass():
    x, s = exact()
    return steindiag.diagnose(x, score=s, log_density=gaussian_log_density, rng=3,
                              mode_search=False, n_bootstrap=N_BOOT_DIAGNOSE,
                              n_permutations=N_BOOT_DIAGNOSE)


@case()
def diagnose_nystrom():
    x, s = biased()
    return steindiag.diagnose(x, score=s, estimator="nystrom", n_landmarks=40, rng=4,
                              n_bootstrap=N_BOOT_DIAGNOSE, n_permutations=N_BOOT_DIAGNOSE)


@case()
def diagnose_one_chain():
    x, s = exact()
    return steindiag.diagnose(x[0], score=s[0], rng=5, n_bootstrap=N_BOOT_DIAGNOSE)


@case()
def diagnose_emcee_layout():
    x, s = exact()
    return steindiag.diagnose(x.transpose(1, 0, 2), score=s.transpose(1, 0, 2),
                              sample_dims=("draw", "chain"), rng=6,
                              n_bootstrap=N_BOOT_DIAGNOSE)


@case()
def diagnose_dataarray():
    theta, score, _ = labelled()
    return steindiag.diagnose(theta, score=score, rng=7, n_bootstrap=N_BOOT_DIAGNOSE,
                              n_permutations=N_BOOT_DIAGNOSE)


@case("pymc", inputs=PYMC)
def diagnose_pymc():
    return steindiag.diagnose(pymc_trace(), pymc_model(), rng=8,
                              n_bootstrap=N_BOOT_DIAGNOSE, n_permutations=N_BOOT_DIAGNOSE)


@case("pymc", inputs=PYMC + (pymc_trace_with_scores,))
def diagnose_stored_scores():
    return steindiag.diagnose(pymc_trace_with_scores(), rng=9, n_bootstrap=N_BOOT_DIAGNOSE,
                              n_permutations=N_BOOT_DIAGNOSE)


@case(inputs=(bad_chain_diagnosis_file,))
def diagnosis_from_dataset():
    import io

    with xr.open_dataset(io.BytesIO(bad_chain_diagnosis_file()), engine="scipy") as saved:
        return steindiag.Diagnosis.from_dataset(saved.load())


# ---------------------------------------------------------------------- stein_weights


@case()
def stein_weights_auto():
    x, s = biased()
    return steindiag.stein_weights(x, score=s)


@case()
def stein_weights_active_set_per_chain():
    x, s = biased()
    return steindiag.stein_weights(x, score=s, method="active-set", per_chain=True)


@case()
def stein_weights_dense():
    x, s = bad_chain()
    return steindiag.stein_weights(x[:, :80], score=s[:, :80], method="dense")


@functools.cache
def five_d():
    """2 chains x 60 draws of 1.2 N(0, I_5) (Frank-Wolfe converges on d = 5, not d = 2)."""
    x = 1.2 * np.random.default_rng(20240606).standard_normal((2, 60, 5))
    return x, -x


@case()
def stein_weights_frank_wolfe():
    x, s = five_d()
    return steindiag.stein_weights(x, score=s, method="frank-wolfe", tol=1e-4)


@case()
def stein_weights_blocks_per_chain():
    x, s = biased()
    return steindiag.stein_weights(x, score=s, method="blocks", per_chain=True)


@case()
def stein_weights_log_density():
    x, s = bad_chain()
    return steindiag.stein_weights(x, score=s, log_density=gaussian_log_density, rng=0)


@case("pymc", inputs=PYMC)
def stein_weights_pymc():
    return steindiag.stein_weights(pymc_trace(), pymc_model(), rng=1)


@case(inputs=(biased_weights,))
def weighted_summary_array():
    x, _ = biased()
    return steindiag.weighted_summary(x, biased_weights(), quantiles=[0.05, 0.5, 0.95],
                                      ci_prob=0.9, ci_kind="eti")


@case()
def weighted_summary_dataset_hdi():
    _, _, dataset = labelled()
    weights = np.linspace(0.5, 1.5, 3 * 150).reshape(3, 150)
    return steindiag.weighted_summary(dataset, weights, ci_prob=0.8, ci_kind="hdi")


@case("pymc", inputs=PYMC + (pymc_weights,))
def weighted_summary_pymc():
    return steindiag.weighted_summary(pymc_trace(), pymc_weights(), ci_prob=0.9, ci_kind="eti")


# ------------------------------------------------------------------------- stein_thin


@case()
def stein_thin_array():
    x, s = biased()
    return steindiag.stein_thin(x, score=s, n_selected=20)


@case()
def stein_thin_array_info():
    x, s = bad_chain()
    return steindiag.stein_thin(x, score=s, n_selected=25, return_info=True, kernel="gaussian")


@case()
def stein_thin_one_chain():
    x, s = exact()
    return steindiag.stein_thin(x[2], score=s[2], n_selected=12)


@case()
def stein_thin_regularized():
    x, _ = biased()
    return steindiag.stein_thin(x, score=gaussian_score, log_density=gaussian_log_density,
                                n_selected=20, regularized=True, return_info=True, rng=0)


@case()
def stein_thin_dataarray():
    theta, score, _ = labelled()
    return steindiag.stein_thin(theta, score=score, n_selected=10)


@case("pymc", inputs=PYMC)
def stein_thin_pymc():
    return steindiag.stein_thin(pymc_trace(), pymc_model(), n_selected=15, rng=1)


@case("pymc", inputs=PYMC)
def stein_thin_pymc_regularized_info():
    return steindiag.stein_thin(pymc_trace(), pymc_model(), n_selected=15, regularized=True,
                                strength=0.5, return_info=True, mode_search=False)


# ------------------------------------------------------------------ stein_variational


@case()
def stein_variational_array():
    x, _ = biased()
    return steindiag.stein_variational(x[:, :25], score=gaussian_score, n_steps=20,
                                       step_size=0.05)


@case()
def stein_variational_last_every():
    x, _ = bad_chain()
    return steindiag.stein_variational(x[:, :20], score=gaussian_score, n_steps=15,
                                       step_size=0.05, ksd_every=4, keep="last",
                                       svgd_preconditioner="identity")


@case()
def stein_variational_adagrad():
    # The reference implementation's algorithm (the defaults before issue 37), to the end.
    x, _ = biased()
    return steindiag.stein_variational(x[:, :25], score=gaussian_score, n_steps=20,
                                       step_size=0.05, step_rule="adagrad", step_decay=10.0,
                                       svgd_preconditioner="standardize", ksd_every=1,
                                       tol=None)


@case()
def stein_variational_stops():
    # Long enough for the stopping rule (converged) and backtracking to act.
    x, _ = biased()
    return steindiag.stein_variational(x[:, :30], score=gaussian_score, n_steps=400,
                                       step_size=0.3)


@case("pymc", inputs=PYMC)
def stein_variational_pymc():
    return steindiag.stein_variational(pymc_trace(), pymc_model(),
                                       coords={"draw": slice(0, 15)}, n_steps=10,
                                       step_size=0.05)


# ------------------------------------------------------------------- control_variates


@case()
def control_variates_auto():
    x, s = biased()
    return steindiag.control_variates(x[:, :100], score=s[:, :100])


@case()
def control_variates_polynomial2_functions():
    x, s = biased()
    return steindiag.control_variates(
        x, score=s, method="polynomial2",
        functions={"x0 x1": lambda draws: draws[..., 0] * draws[..., 1]})


@case()
def control_variates_kernel():
    x, s = exact()
    return steindiag.control_variates(x[:, :60], score=s[:, :60], method="kernel")


@case()
def control_variates_regularised():
    x, s = bad_chain()
    return steindiag.control_variates(x, score=s, method="regularised")


@case("pymc", inputs=PYMC)
def control_variates_pymc():
    return steindiag.control_variates(pymc_trace(), pymc_model())


# ------------------------------------------------------------------------ min_ksd_fit


@functools.cache
def fit_data():
    return np.random.default_rng(20240605).normal(1.5, 0.7, size=(300, 1))


def gaussian_1d_score(x, theta):
    # theta = (precision, precision * mean): linear in theta
    return theta[1] - theta[0] * x


def gaussian_1d_score_log(x, theta):
    # theta = (mean, log sd): not linear in theta
    return -(x - theta[0]) * np.exp(-2.0 * theta[1])


@case()
def min_ksd_fit_linear():
    return steindiag.min_ksd_fit(fit_data(), gaussian_1d_score, [1.0, 0.0], linear=True,
                                 parameter_names=["precision", "precision_mean"])


@case()
def min_ksd_fit_optimiser():
    return steindiag.min_ksd_fit(fit_data(), gaussian_1d_score_log, [0.0, 0.0],
                                 bounds=[(-5, 5), (-3, 3)], max_iter=200)


# ------------------------------------------------------------------------------ plots


@case(inputs=(bad_chain_path,))
def plot_ksd_matplotlib():
    return steindiag.plot_ksd(bad_chain_path(), ax=new_axes())


@case(inputs=(bad_chain_ksd,))
def plot_ksd_chains_matplotlib():
    return steindiag.plot_ksd_chains(bad_chain_ksd(), ax=new_axes())


@case(inputs=(bad_chain_mmd,))
def plot_mmd_matplotlib():
    return steindiag.plot_mmd(bad_chain_mmd(), ax=new_axes())


@case()
def plot_stein_kernel_matplotlib():
    ax = new_axes()
    return steindiag.plot_stein_kernel(gaussian_score, y=0.5, lengthscale=1.2, ax=ax)


# ------------------------------------------------------------------- samplers' objects


@case("numpyro", "jax", inputs=(numpyro_mcmc,))
def ksd_numpyro():
    return steindiag.ksd(numpyro_mcmc())


@case("numpyro", "jax", inputs=(numpyro_mcmc,))
def diagnose_numpyro():
    return steindiag.diagnose(numpyro_mcmc(), rng=0, n_bootstrap=N_BOOT_DIAGNOSE,
                              n_permutations=N_BOOT_DIAGNOSE)


@case("numpyro", "jax", inputs=(numpyro_mcmc,))
def ksd_test_numpyro():
    return steindiag.ksd_test(numpyro_mcmc(), bootstrap="thinned", n_bootstrap=N_BOOT, rng=1)


@case("emcee", inputs=(emcee_sampler,))
def ksd_emcee():
    return steindiag.ksd(emcee_sampler(), score=emcee_score, coords={"draw": slice(50, None)})


@case("emcee", inputs=(emcee_sampler,))
def diagnose_emcee():
    return steindiag.diagnose(emcee_sampler(), score=emcee_score,
                              coords={"draw": slice(50, None)}, rng=0,
                              n_bootstrap=N_BOOT_DIAGNOSE)
