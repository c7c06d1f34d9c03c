"""Tests of ``stein_thin``.

Sources of truth: a brute-force argmin over the explicit kernel matrix of
tests/reference.py (the docs' background page), the ``stein_thinning`` package of
Riabiz et al. (PyPI) where installed, closed-form log densities, scores and second
derivatives (Student-t), and the trace that was thinned.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steindiag.thinning import SteinThinning, stein_thin

sys.path.insert(0, str(Path(__file__).parent))
from reference import (  # noqa: E402
    imq_stein_kernel_matrix,
    ksd_v2,
    lambda_for,
    standardize_reference,
)


def brute_force(K, n_points, first=None, step=None):
    """Greedy by explicit argmin: objective_t(i) = first_i + 2 sum_(j<t) K[pi_j, i] + t step_i."""
    first = np.diag(K).copy() if first is None else first.copy()
    step = np.zeros(K.shape[0]) if step is None else step
    objective, selected = first, []
    for _ in range(n_points):
        i = int(np.argmin(objective))
        selected.append(i)
        objective = objective + 2 * K[i] + step
    return np.array(selected)


def correlated_draws(seed, n_chain=2, n_draw=150):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_chain, n_draw, 3)) @ np.array(
        [[1.0, 0.4, 0.0], [0.0, 1.5, 0.2], [0.0, 0.0, 0.7]]
    ) + 0.3
    s = -x + 0.2 * rng.standard_normal(x.shape)  # scores of some nearby target
    return x, s


@pytest.mark.parametrize("preconditioner", ["identity", "standardize", "med", "smpcov"])
@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (0.7, -0.3)])
def test_greedy_selects_the_brute_force_argmin(preconditioner, c, beta):
    x, s = correlated_draws(1)
    flat_x, flat_s = x.reshape(-1, 3), s.reshape(-1, 3)
    info = stein_thin(x, score=s, n_selected=40, preconditioner=preconditioner, c=c, beta=beta,
                      return_info=True)
    kx, ks = (standardize_reference(flat_x, flat_x, flat_s) if preconditioner == "standardize"
              else (flat_x, flat_s))
    A = np.linalg.inv(lambda_for(preconditioner, kx))
    K = imq_stein_kernel_matrix(kx, ks, kx, ks, A, c, beta)
    # Truth: Riabiz et al. (2022) greedy rule by explicit argmin over the reference K_p.
    np.testing.assert_array_equal(info.index, brute_force(K, 40))
    # Truth: KSD of every prefix of the selection from the reference V-statistic.
    for t in (1, 7, 40):
        chosen = info.index[:t]
        expected = np.sqrt(ksd_v2(kx[chosen], ks[chosen], A, c, beta))
        assert info.ksd_path[t - 1] == pytest.approx(expected, rel=1e-9)
    assert info.ksd == info.ksd_path[-1]


def test_agrees_with_the_stein_thinning_package():
    thinning = pytest.importorskip("stein_thinning.thinning")
    rng = np.random.default_rng(2)
    # Pre-standardised draws, so that preconditioner "identity" is Lambda = I for both.
    x = rng.standard_normal((1, 600, 2))
    s = -x / np.array([1.0, 1.5])
    ours = stein_thin(x, score=s, n_selected=60, preconditioner="identity", return_info=True)
    theirs = thinning.thin(x[0], s[0], 60, standardize=False, preconditioner="id")
    # Truth: the reference implementation of Riabiz et al. (PyPI stein-thinning).
    np.testing.assert_array_equal(ours.index, np.asarray(theirs, dtype=np.int64))


def student_t(nu):
    """Closed forms for independent Student-t coordinates: log p, score, d2 log p / dx_k^2."""
    def log_density(x):
        return -(nu + 1) / 2 * np.log1p(x**2 / nu).sum(axis=-1)

    def score(x):
        return -(nu + 1) * x / (nu + x**2)

    def second(x):
        return -(nu + 1) * (nu - x**2) / (nu + x**2) ** 2

    return log_density, score, second


@pytest.mark.parametrize("preconditioner, strength, c",
                         [("identity", None, 1.0), ("med", 0.3, 1.0), ("standardize", None, 0.8)])
def test_regularized_selects_the_brute_force_argmin(preconditioner, strength, c):
    nu, n_points, beta = 3.0, 30, -0.5
    log_density, score, second = student_t(nu)
    x = np.random.default_rng(3).standard_t(nu, size=(2, 200, 2)) * 1.3
    flat = x.reshape(-1, 2)
    info = stein_thin(x, score=score, n_selected=n_points, preconditioner=preconditioner,
                      regularized=True, log_density=log_density, strength=strength, c=c,
                      return_info=True)
    if preconditioner == "standardize":
        # z = x / scale: d2 log p / dz_k^2 = scale_k^2 d2 log p / dx_k^2.
        kx, ks = standardize_reference(flat, flat, score(flat))
        scale2 = (flat / kx)[0] ** 2
    else:
        kx, ks, scale2 = flat, score(flat), np.ones(2)
    A = np.linalg.inv(lambda_for(preconditioner, kx))
    K = imq_stein_kernel_matrix(kx, ks, kx, ks, A, c, beta)
    lam = 1.0 / n_points if strength is None else strength
    # Benard, Staber & Da Veiga (2023): k_p(x, x) + Delta^+ log p(x) - lambda t log p(x)
    # + 2 sum_(j<t) k_p; Delta^+ = sum of positive parts of d2 log p / dz_k^2 in the
    # kernel's coordinates (closed form here), times c^(2 beta) like |s|^2 in k_p(x, x).
    laplacian = c ** (2 * beta) * np.maximum(scale2 * second(flat), 0.0).sum(axis=1)
    assert laplacian.max() > 0  # the correction is active for these draws
    log_p = log_density(flat)
    first = np.diag(K) + laplacian - lam * log_p
    # Truth: the regularised greedy rule by explicit argmin over the reference K_p.
    np.testing.assert_array_equal(info.index, brute_force(K, n_points, first, -lam * log_p))
    plain = stein_thin(x, score=score, n_selected=n_points, preconditioner=preconditioner)
    assert not np.array_equal(plain[0], info.thinned[0])  # the regularisation matters


def test_regularized_pulls_points_to_high_density():
    # Benard et al. (2023), the pathology: plain Stein thinning favours points where
    # |score| is small, and with a strong entropic term points move to high log p.
    # Truth: the selected points' mean log p rises with the strength lambda.
    nu = 3.0
    log_density, score, _ = student_t(nu)
    x = np.random.default_rng(8).standard_t(nu, size=(1, 800, 1))
    mean_log_p = []
    for strength in (0.0, 0.05, 1.0):
        thinned = stein_thin(x, score=score, n_selected=40, regularized=True,
                             log_density=log_density, strength=strength)
        mean_log_p.append(log_density(thinned[0]).mean())
    assert mean_log_p[0] <= mean_log_p[1] <= mean_log_p[2]
    assert mean_log_p[2] > mean_log_p[0]


# -- output types -----------------------------------------------------------------------


def trace_groups(seed=0, n_chain=3, n_draw=100):
    rng = np.random.default_rng(seed)
    posterior = xr.Dataset(
        {"mu": (("chain", "draw"), rng.standard_normal((n_chain, n_draw))),
         "theta": (("chain", "draw", "school"), rng.standard_normal((n_chain, n_draw, 2)))},
        coords={"chain": np.arange(n_chain) + 10, "draw": np.arange(n_draw) + 1000,
                "school": ["a", "b"]},
        attrs={"sampler": "test"},
    )
    sample_stats = xr.Dataset(
        {"energy": (("chain", "draw"), rng.random((n_chain, n_draw)))},
        coords={"chain": posterior["chain"], "draw": posterior["draw"]},
    )
    observed = xr.Dataset({"y": (("obs",), rng.standard_normal(5))})
    return {"posterior": posterior, "sample_stats": sample_stats, "observed_data": observed}


def check_thinned(posterior, thinned, info_index, n_draw):
    chain_pos, draw_pos = np.divmod(info_index, n_draw)
    # Truth: the draws of the original trace at the recorded (chain, draw).
    np.testing.assert_array_equal(thinned["source_chain"].values, posterior["chain"].values[chain_pos])
    np.testing.assert_array_equal(thinned["source_draw"].values, posterior["draw"].values[draw_pos])
    np.testing.assert_array_equal(
        thinned["theta"].values[0], posterior["theta"].values[chain_pos, draw_pos]
    )
    assert thinned.sizes["chain"] == 1 and thinned.sizes["draw"] == len(info_index)


def test_thinned_dataset_and_arrays():
    groups = trace_groups()
    posterior = groups["posterior"]
    info = stein_thin(posterior, score=lambda x: -x, n_selected=25, return_info=True)
    assert isinstance(info, SteinThinning) and isinstance(info.thinned, xr.Dataset)
    check_thinned(posterior, info.thinned, info.index, 100)
    assert info.thinned.attrs["sampler"] == "test"
    assert info.thinned.attrs["stein_thinning_ksd"] == pytest.approx(info.ksd)
    np.testing.assert_array_equal(info.chain, posterior["chain"].values[info.index // 100])
    # Arrays: the same selection as the flattened trace (mu, theta[a], theta[b]).
    flat = np.concatenate([posterior["mu"].values[..., None], posterior["theta"].values], axis=2)
    thinned = stein_thin(flat, score=-flat, n_selected=25)
    assert isinstance(thinned, np.ndarray) and thinned.shape == (1, 25, 3)
    np.testing.assert_array_equal(thinned[0], flat.reshape(-1, 3)[info.index])
    single = stein_thin(flat[0], score=-flat[0], n_selected=5)
    assert single.shape == (5, 3)


def test_coords_selection_thins_the_selected_draws():
    posterior = trace_groups()["posterior"]
    subset = stein_thin(posterior, score=lambda x: -x, n_selected=10,
                        coords={"draw": slice(1040, None)})
    direct = stein_thin(posterior.sel(draw=slice(1040, None)), score=lambda x: -x, n_selected=10)
    # Truth: thinning after coords= is thinning the selected draws (labels, not positions).
    np.testing.assert_array_equal(subset["source_draw"].values, direct["source_draw"].values)
    assert subset["source_draw"].values.min() >= 1040
    sel = posterior.sel(chain=xr.DataArray(subset["source_chain"].values),
                        draw=xr.DataArray(subset["source_draw"].values))
    np.testing.assert_array_equal(subset["mu"].values[0], sel["mu"].values)


def test_thinned_datatree_keeps_every_group():
    tree = xr.DataTree.from_dict(trace_groups())
    info = stein_thin(tree, score=lambda x: -x, n_selected=12, return_info=True)
    assert isinstance(info.thinned, xr.DataTree)
    posterior = tree["posterior"].to_dataset()
    check_thinned(posterior, info.thinned["posterior"].to_dataset(), info.index, 100)
    energy = info.thinned["sample_stats"]["energy"].values[0]
    chain_pos, draw_pos = np.divmod(info.index, 100)
    np.testing.assert_array_equal(energy, tree["sample_stats"]["energy"].values[chain_pos, draw_pos])
    xr.testing.assert_identical(info.thinned["observed_data"].to_dataset(),
                                tree["observed_data"].to_dataset())


def test_thinned_inference_data_keeps_every_group():
    az = pytest.importorskip("arviz")
    if not az.__version__.startswith("0."):
        pytest.skip("InferenceData is ArviZ 0.x; ArviZ 1.x uses DataTree (tested above)")
    idata = az.InferenceData(**trace_groups())
    info = stein_thin(idata, score=lambda x: -x, n_selected=12, return_info=True)
    assert isinstance(info.thinned, az.InferenceData)
    check_thinned(idata.posterior, info.thinned.posterior, info.index, 100)
    assert info.thinned.sample_stats.sizes["draw"] == 12
    xr.testing.assert_identical(info.thinned.observed_data, idata.observed_data)


# -- properties -------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n_draw=st.integers(3, 80), d=st.integers(1, 4),
       n_points=st.integers(1, 30))
def test_selection_is_valid_and_deterministic(seed, n_draw, d, n_points):
    x = np.random.default_rng(seed).standard_normal((2, n_draw, d))
    n_points = min(n_points, 2 * n_draw)
    first = stein_thin(x, score=-x, n_selected=n_points, return_info=True)
    second = stein_thin(x, score=-x, n_selected=n_points, return_info=True)
    # Truth: indices address existing draws; no hidden randomness.
    assert np.all((first.index >= 0) & (first.index < 2 * n_draw))
    np.testing.assert_array_equal(first.index, second.index)
    np.testing.assert_array_equal(first.thinned[0], x.reshape(-1, d)[first.index])
    # Greedy: the first point minimises k_p(x, x) = c^(2b) |s|^2 + const (the background page).
    assert first.index[0] == np.argmin(np.sum(x.reshape(-1, d) ** 2 * _std_scale(x) ** 2, 1))


def _std_scale(x):
    """The robust per-coordinate scale of the default "standardize" preconditioner."""
    flat = x.reshape(-1, x.shape[-1])
    return 1.482602218505602 * np.median(np.abs(flat - np.median(flat, axis=0)), axis=0)


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_selected": 0}, ValueError, "n_selected"),
        ({"n_selected": -3}, ValueError, "n_selected"),
        ({"n_selected": 41}, ValueError, "at most the number of draws"),
        ({"n_selected": 2.0}, TypeError, "n_selected"),
        ({"n_selected": 5, "strength": 0.1}, ValueError, "regularized=True"),
        ({"n_selected": 5, "regularized": True, "strength": -1.0}, ValueError, "strength"),
        ({"n_selected": 5, "regularized": True}, ValueError, "log p"),
        ({"n_selected": 5, "regularized": "yes"}, TypeError, "regularized"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    x = np.random.default_rng(0).standard_normal((2, 20, 2))
    with pytest.raises(error, match=match):
        stein_thin(x, score=-x, **kwargs)


def test_regularized_needs_a_score_function():
    x = np.random.default_rng(0).standard_normal((1, 20, 2))
    with pytest.raises(ValueError, match="callable"):
        stein_thin(x, score=-x, n_selected=3, regularized=True,
                   log_density=np.zeros((1, 20)))


# -- PyMC ---------------------------------------------------------------------------------


def test_pymc_model_matches_closed_form_callables():
    pm = pytest.importorskip("pymc")
    nu = 4.0
    with pm.Model() as model:
        pm.StudentT("x", nu=nu, mu=0.0, sigma=1.0, shape=2)
        pm.HalfNormal("s", sigma=1.0)
    rng = np.random.default_rng(4)
    x = rng.standard_t(nu, size=(2, 60, 2))
    sigma = np.abs(rng.standard_normal((2, 60))) + 0.1
    posterior = xr.Dataset(
        {"x": (("chain", "draw", "x_dim_0"), x), "s": (("chain", "draw"), sigma)},
        coords={"chain": [0, 1], "draw": np.arange(60)},
    )
    t_log_density, t_score, _ = student_t(nu)

    # Closed forms in the unconstrained space (x, y = log s), Jacobian included:
    # log p = log t(x) - exp(2 y) / 2 + y + const; d/dy = 1 - exp(2 y).
    def log_density(z):
        return t_log_density(z[:, :2]) - np.exp(2 * z[:, 2]) / 2 + z[:, 2]

    def score(z):
        return np.column_stack([t_score(z[:, :2]), 1 - np.exp(2 * z[:, 2])])

    unconstrained = np.concatenate([x, np.log(sigma)[..., None]], axis=2)
    for regularized in (False, True):
        from_model = stein_thin(posterior, model, n_selected=15, regularized=regularized,
                                return_info=True)
        from_callables = stein_thin(
            unconstrained, score=score, n_selected=15, regularized=regularized,
            log_density=log_density if regularized else None, return_info=True,
        )
        # Truth: the closed-form log density and score of the same model.
        np.testing.assert_array_equal(from_model.index, from_callables.index)
        assert from_model.ksd == pytest.approx(from_callables.ksd, rel=1e-9)
