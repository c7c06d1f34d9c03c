"""Tests of the Stein-kernel products, ``stein_weights`` and ``weighted_summary``.

Sources of truth: the slow plain-NumPy kernel matrix in tests/reference.py (the docs'
background page), an exact QP solver written apart from steindiag (NumPy eigh + SciPy
NNLS, tests/reference.py) and FISTA as an upper bound, closed forms (the
equality-constrained QP optimum, the stationary variance of unadjusted Langevin on a
Gaussian, E|mean|^2 = d / N for i.i.d. draws), published results (Liu & Lee 2017), NumPy's own weighted statistics, and ArviZ's labels.
"""

import json
import builtins
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import steindiag
from steindiag.engine import products as _stein_products
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.weights import SteinWeightsError, stein_weights, weighted_summary
from steindiag.kernels import IMQ

sys.path.insert(0, str(Path(__file__).parent))
from reference import (  # noqa: E402
    imq_stein_kernel_matrix,
    lambda_for,
    simplex_qp_exact,
    simplex_qp_fista,
    standardize_reference,
)

try:
    import piqp  # noqa: F401

    HAS_PIQP = True
except ImportError:
    HAS_PIQP = False

needs_piqp = pytest.mark.skipif(not HAS_PIQP, reason="piqp (steindiag[weights]) not installed")


def gaussian_draws(seed, n_chain, n_draw, d, shift=0.0):
    """Draws of N(shift, I) and the scores of the target N(0, I)."""
    x = np.random.default_rng(seed).standard_normal((n_chain, n_draw, d)) + shift
    return x, -x


def reference_matrix(x, s, preconditioner, c=1.0, beta=-0.5):
    """K_p from tests/reference.py for pooled (N, d) draws, independent of steindiag."""
    if preconditioner == "standardize":
        x, s = standardize_reference(x, x, s)
    lam = lambda_for(preconditioner, x)
    return imq_stein_kernel_matrix(x, s, x, s, np.linalg.inv(lam), c, beta)


# -- products ---------------------------------------------------------------------------


@pytest.mark.parametrize("preconditioner", ["identity", "standardize", "med", "smpcov"])
@pytest.mark.parametrize("beta", [-0.5, -0.3])
def test_products_match_reference_matrix(preconditioner, beta):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((301, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 0.3], [0, 0, 0.5]])
    s = -x + 0.1 * rng.standard_normal(x.shape)
    c = 1.3
    pre = make_preconditioner(preconditioner, x, ["a", "b", "c"])
    points = _stein_products.KernelPoints(x, s, pre, IMQ(c, beta))
    K = reference_matrix(x, s, preconditioner, c, beta)
    w = rng.random(x.shape[0])
    scale = np.abs(K).max()
    # Truth: the explicit N x N matrix of tests/reference.py (the docs' background page).
    np.testing.assert_allclose(points.matrix(), K, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(points.matvec(w), K @ w, rtol=0, atol=1e-12 * scale * w.sum())
    index = np.array([0, 17, 300])
    np.testing.assert_allclose(points.rows(index), K[index], rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(points.diagonal, np.diag(K), rtol=0, atol=1e-12 * scale)


def test_matvec_same_result_any_thread_count():
    import numba

    x, s = gaussian_draws(0, 1, 700, 4)
    pre = make_preconditioner("identity", x[0], list("abcd"))
    points = _stein_products.KernelPoints(x[0], s[0], pre, IMQ())
    w = np.random.default_rng(1).random(700)
    full = points.matvec(w)
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        single = points.matvec(w)
    finally:
        numba.set_num_threads(saved)
    # Truth: the static partition into _MATVEC_PARTS parts fixes the summation order.
    np.testing.assert_array_equal(full, single)


# -- the QP -----------------------------------------------------------------------------


def test_interior_optimum_matches_closed_form():
    # For d = 10 the optimum is interior (all w_i > 0), so it solves the equality-
    # constrained QP: w* = K^-1 1 / (1^T K^-1 1), f* = 1 / (1^T K^-1 1) (KKT; checked
    # below that every w* > 0, which makes it the optimum of the full QP).
    x, s = gaussian_draws(11, 1, 250, 10)
    K = reference_matrix(x[0], s[0], "identity")
    z = np.linalg.solve(K, np.ones(250))
    assert np.all(z > 0)
    w_star, f_star = z / z.sum(), 1.0 / z.sum()
    methods = ["frank-wolfe"] + (["dense"] if HAS_PIQP else [])
    for method in methods:
        w = stein_weights(x, score=s, preconditioner="identity", method=method, tol=1e-11)
        f = w.attrs["ksd_weighted"] ** 2
        assert abs(f - f_star) <= 1e-8 * f_star, method
        np.testing.assert_allclose(w.values[0], w_star, rtol=1e-3, atol=1e-9)


@needs_piqp
@pytest.mark.parametrize("d, per_chain", [(5, False), (8, True)])
def test_dense_and_frank_wolfe_agree(d, per_chain):
    x, s = gaussian_draws(7, 2, 300, d, shift=0.3)
    dense = stein_weights(x, score=s, method="dense", per_chain=per_chain)
    fw = stein_weights(x, score=s, method="frank-wolfe", per_chain=per_chain, tol=1e-10)
    exact = stein_weights(x, score=s, method="active-set", per_chain=per_chain, tol=1e-10)

    def field(w, name):  # per chain: a coordinate along chain; pooled: an attribute
        return np.asarray(w[name].values if per_chain else w.attrs[name])

    f_dense = field(dense, "ksd_weighted") ** 2
    # Truth: the optimal value of a convex QP is unique, whichever solver finds it.
    np.testing.assert_allclose(field(fw, "ksd_weighted") ** 2, f_dense, rtol=1e-8)
    np.testing.assert_allclose(field(exact, "ksd_weighted") ** 2, f_dense, rtol=1e-8)
    # Truth: all report the same uniform V-statistic as the engine (background page).
    np.testing.assert_allclose(field(dense, "ksd_uniform"), field(fw, "ksd_uniform"), rtol=1e-12)


def test_weights_beat_uniform_and_match_engine():
    x, s = gaussian_draws(2, 3, 200, 4, shift=0.5)
    w = stein_weights(x, score=s)
    ksd = steindiag.ksd(x, score=s)
    # Truth: uniform weights are feasible, so the optimum is no worse; the uniform value
    # is the pooled V-statistic of the engine.
    assert w.attrs["ksd_weighted"] < w.attrs["ksd_uniform"]
    np.testing.assert_allclose(w.attrs["ksd_uniform"], float(ksd["ksd_pooled"]), rtol=1e-10)
    assert w.dims == ("chain", "draw") and w.name == "stein_weight"
    assert w.attrs["converged"] == 1
    # The stopping rule: certified gap <= tol * f + rounding floor (default tol 1e-6).
    f = w.attrs["ksd_weighted"] ** 2
    assert w.attrs["duality_gap"] <= 1e-6 * f + w.attrs["rounding_floor"]


def test_per_chain_weights_match_each_chain_alone():
    x, s = gaussian_draws(4, 2, 150, 4, shift=0.3)
    both = stein_weights(x, score=s, per_chain=True, method="frank-wolfe", tol=1e-10,
                         preconditioner="identity")
    ksd = steindiag.ksd(x, score=s, preconditioner="identity")
    # Truth: per chain, each chain sums to 1 and the uniform value is the per-chain KSD.
    np.testing.assert_allclose(both.sum("draw").values, 1.0, rtol=1e-12)
    np.testing.assert_allclose(both["ksd_uniform"].values, ksd["ksd"].values, rtol=1e-10)
    # The per-chain diagnostics are labelled by chain (coordinates), not bare arrays.
    for name in ("ksd_uniform", "ksd_weighted", "duality_gap", "converged", "kish_ess"):
        assert both[name].dims == ("chain",) and name not in both.attrs
    np.testing.assert_array_equal(both["chain"].values, [0, 1])
    # With a fixed Lambda (identity) the kernel does not depend on the other chain, so
    # chain 1 alone is the same QP.
    alone = stein_weights(x[1:], score=s[1:], method="frank-wolfe", tol=1e-10,
                          preconditioner="identity")
    f_alone = alone.attrs["ksd_weighted"] ** 2
    np.testing.assert_allclose(float(both.ksd_weighted.sel(chain=1)) ** 2, f_alone, rtol=1e-8)


@pytest.mark.parametrize("method", ["frank-wolfe"] + (["dense"] if HAS_PIQP else []))
def test_repeated_draws_leave_the_optimum_unchanged(method):
    # MCMC repeats draws (rejections). Truth: weights on two copies of a draw can be
    # merged into one, so the optimal KSD of the sample with every draw twice equals
    # the optimal KSD of the distinct draws (same preconditioner, fixed Lambda).
    x, s = gaussian_draws(12, 1, 150, 5, shift=0.2)
    twice = np.repeat(x, 2, axis=1)
    once = stein_weights(x, score=s, method=method, preconditioner="identity", tol=1e-10)
    doubled = stein_weights(twice, score=-twice, method=method, preconditioner="identity",
                            tol=1e-10)
    assert doubled.attrs["ksd_weighted"] ** 2 == pytest.approx(
        once.attrs["ksd_weighted"] ** 2, rel=1e-8
    )


def test_liu_lee_iid_gaussian_mean_error_falls_by_orders_of_magnitude():
    # Liu & Lee (2017), Black-box importance sampling, Fig. 2: for N = 100 i.i.d. draws
    # of N(0, I_2), KSD-optimal weights cut the MSE of the mean by about two orders of
    # magnitude. Closed form for uniform weights: E|mean|^2 = d / N = 0.02; averaged over
    # S = 10 seeds its sd is sqrt(2 d / S) / N = 0.006, so the observed uniform MSE lies
    # in [0.002, 0.038] with overwhelming probability.
    d, n, seeds = 2, 100, range(10)
    weighted, uniform = [], []
    for seed in seeds:
        x = np.random.default_rng(seed).standard_normal((1, n, d))
        w = stein_weights(x, score=-x).values.reshape(-1)
        weighted.append(np.sum((w @ x[0]) ** 2))
        uniform.append(np.sum(x[0].mean(axis=0) ** 2))
    assert 0.002 < np.mean(uniform) < 0.038
    # "Orders of magnitude": at least 20x below the closed-form uniform MSE d / N.
    assert np.mean(weighted) < (d / n) / 20


def ula(rng, n_chain, n_draw, step, mean, var, burn=200):
    """Unadjusted Langevin on N(mean, diag(var)): x += step * s(x) + sqrt(2 step) xi."""
    x = mean + np.sqrt(var) * rng.standard_normal((n_chain, mean.size))
    out = np.empty((n_chain, n_draw, mean.size))
    for t in range(burn + n_draw):
        x = x - step * (x - mean) / var + np.sqrt(2 * step) * rng.standard_normal(x.shape)
        if t >= burn:
            out[:, t - burn] = x
    return out


def test_biased_langevin_weights_recover_the_variance(no_piqp):
    mean, var, step = np.array([1.0, -2.0]), np.array([1.0, 4.0]), 0.5
    x = ula(np.random.default_rng(5), 4, 400, step, mean, var)
    s = -(x - mean) / var
    # Closed form: ULA on a Gaussian is an AR(1) with stationary variance
    # 2 h / (1 - (1 - h / var)^2) = 4/3 for var = 1, h = 0.5 (33 % too large).
    ula_var = 2 * step / (1 - (1 - step / var) ** 2)
    unweighted = x.reshape(-1, 2).var(axis=0)
    assert abs(unweighted[0] - ula_var[0]) < 0.15  # the sample shows the ULA bias
    w = stein_weights(x, score=s)
    table = weighted_summary(x, w)
    weighted_var = table["sd"].to_numpy() ** 2
    # Truth: the target variance var; weighted must be much closer than unweighted.
    assert abs(weighted_var[0] - var[0]) < 0.25 * abs(unweighted[0] - var[0])
    second_moment_error = np.abs(weighted_var - var).sum()
    assert second_moment_error < 0.3 * np.abs(unweighted - var).sum()
    np.testing.assert_allclose(table["mean"].to_numpy(), mean, atol=0.15)


def ula_samples(seed, n_chain, n_draw, step, cov):
    """ULA on N(0, cov) and the target's scores: x += h s(x) + sqrt(2 h) xi, s = -cov^-1 x."""
    rng = np.random.default_rng(seed)
    precision = np.linalg.inv(cov)
    x = rng.multivariate_normal(np.zeros(len(cov)), cov, size=n_chain)
    out = np.empty((n_chain, n_draw, len(cov)))
    for t in range(200 + n_draw):
        x = x - step * x @ precision + np.sqrt(2 * step) * rng.standard_normal(x.shape)
        if t >= 200:
            out[:, t - 200] = x
    return out, -out @ precision


@pytest.fixture
def no_piqp(monkeypatch):
    """The default install: the optional QP solver cannot be imported."""
    monkeypatch.setitem(sys.modules, "piqp", None)


def test_ula_one_dimensional_variance_corrected_by_default(no_piqp):
    # The textbook case of the issue: ULA (step 0.5) on N(0, 1), 4 chains x 1000 draws.
    # Closed form: ULA on N(0, 1) is an AR(1) x' = (1 - h) x + sqrt(2 h) xi with
    # stationary variance 2 h / (1 - (1 - h)^2) = 4/3: a 33 % bias that uniform weights
    # keep (sd of the sample variance ~ 0.05 at ESS ~ 1300, so the bias is > 5 sd).
    x, s = ula_samples(0, 4, 1000, 0.5, np.eye(1))
    w = stein_weights(x, score=s)
    assert w.attrs["method"] == "active-set"
    p = (w.values / w.values.sum()).reshape(-1)
    flat = x.reshape(-1)
    uniform_error = abs(flat.var() - 1.0)
    weighted_error = abs(np.sum(p * (flat - np.sum(p * flat)) ** 2) - 1.0)
    assert uniform_error > 0.2
    # Truth: the target variance 1; the weights must cut the error at least 5-fold.
    assert weighted_error < uniform_error / 5


def test_ula_correlated_covariance_corrected_by_default(no_piqp):
    # ULA (step 0.5) on a correlated 2-D Gaussian. Closed form per eigendirection with
    # eigenvalue lam: AR(1) coefficient 1 - h / lam, stationary variance
    # 2 h / (1 - (1 - h / lam)^2): here 1.00 instead of 0.52 and 3.25 instead of 2.98.
    cov = np.array([[2.0, 1.2], [1.2, 1.5]])
    x, s = ula_samples(1, 4, 1000, 0.5, cov)
    w = stein_weights(x, score=s)
    p = (w.values / w.values.sum()).reshape(-1)
    flat = x.reshape(-1, 2)
    uniform_error = np.linalg.norm(np.cov(flat.T, bias=True) - cov)
    mean = p @ flat
    weighted_cov = (flat - mean).T @ ((flat - mean) * p[:, None])
    weighted_error = np.linalg.norm(weighted_cov - cov)
    assert uniform_error > 0.4
    # Truth: the target covariance; the weights must cut the error at least 5-fold.
    assert weighted_error < uniform_error / 5


@pytest.mark.parametrize("d, n", [(1, 2000), (2, 2000), (3, 1000), (10, 1000)])
def test_weights_reach_the_optimum_of_an_independent_solver(d, n):
    # ULA draws (step 0.5) on N(0, I_d): for d <= 3 K_p is nearly singular and its
    # optimum near zero, the case where solvers stall.
    x, s = ula_samples(d, 4, n // 4, 0.5, np.eye(d))
    w = stein_weights(x, score=s)
    f = w.attrs["ksd_weighted"] ** 2
    K = reference_matrix(x.reshape(-1, d), s.reshape(-1, d), "standardize")
    _, f_exact = simplex_qp_exact(K)
    _, f_fista = simplex_qp_fista(K, n_iter=1000)
    # Truth: an exact solver written apart from steindiag (eigh + SciPy's NNLS) on the
    # explicit matrix of tests/reference.py: within 1 %.
    assert abs(f - f_exact) <= 0.01 * f_exact
    # Truth: FISTA's iterate is feasible, so the optimum cannot be above it.
    assert f <= f_fista * (1 + 1e-6) + w.attrs["rounding_floor"]
    # Truth: our weights, evaluated with the reference matrix, give the reported value.
    p = w.values.reshape(-1)
    assert p @ K @ p == pytest.approx(f, rel=1e-9, abs=w.attrs["rounding_floor"])


def test_active_set_factor_and_matrix_free_agree_with_the_reference():
    # One parameter: K_p has an exact low-rank factor, so both representations of the
    # active set apply; both must reach the exact optimum of tests/reference.py.
    from steindiag.methods.active_set import (
        lawson_hanson,
        matrix_free_kernel,
        pivoted_cholesky,
    )

    x, s = ula_samples(3, 2, 300, 0.5, np.eye(1))
    pre = make_preconditioner("standardize", x.reshape(-1, 1), None)
    points = _stein_products.KernelPoints(x.reshape(-1, 1), s.reshape(-1, 1), pre, IMQ())
    scale = points.diagonal.mean()
    diagonal = points.diagonal / scale
    floor = 1e-13
    factor, residual = pivoted_cholesky(lambda i: points.rows(i) / scale, diagonal, 600, 1e-15)
    assert residual.max() <= 1e-15  # numerically exact factor (rank << N)
    values = []
    for F, kernel, diag in [
        (factor, None, np.einsum("ij,ij->i", factor, factor)),
        (None, matrix_free_kernel(points, scale), diagonal),
    ]:
        u, _, converged, _ = lawson_hanson(F, kernel, diag, 1e-8, floor, 10_000, 128, 600,
                                           np.zeros(1, np.int8))
        assert converged
        w = u / u.sum()
        values.append(w)
    K = reference_matrix(x.reshape(-1, 1), s.reshape(-1, 1), "standardize") / scale
    _, f_exact = simplex_qp_exact(K)
    for w in values:
        # Truth: the independent exact solver (eigh + SciPy NNLS) on the explicit matrix.
        assert w @ K @ w == pytest.approx(f_exact, rel=1e-3, abs=1e-12)


# -- blocks (many draws, few parameters) ------------------------------------------------


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of at most 150 draws, and never the exact whole-problem shortcut."""
    import steindiag.methods.weights as solvers

    monkeypatch.setattr(solvers, "_BLOCK_SIZE", 150)
    monkeypatch.setattr(solvers, "_EXACT_SUPPORT", 0)
    return solvers


@pytest.mark.parametrize("d", [2, 3])
def test_blocks_are_certified_against_the_independent_optimum(small_blocks, no_piqp, d):
    # 1200 ULA draws in 8 strided blocks of 150: the path "auto" takes for d <= 3 and
    # N > 5000, on a problem small enough for the explicit matrix.
    x, s = ula_samples(7, 4, 300, 0.5, np.eye(d))
    w = stein_weights(x, score=s)
    assert w.attrs["method"] == "blocks"
    assert "8 blocks" in w.attrs["solver_status"]
    K = reference_matrix(x.reshape(-1, d), s.reshape(-1, d), "standardize")
    n = K.shape[0]
    _, f_exact = simplex_qp_exact(K)
    p = w.values.reshape(-1)
    f = p @ K @ p
    iid2 = np.trace(K) / n**2
    # Truth: the i.i.d. floor sqrt(mean_i k_p(x_i, x_i) / N) of the explicit matrix.
    assert w.attrs["ksd_iid"] == pytest.approx(np.sqrt(iid2), rel=1e-10)
    assert w.attrs["rounding_floor"] == pytest.approx(0.05 * iid2, rel=1e-10)
    # Truth: the weights evaluated with the reference matrix give the reported KSD.
    assert f == pytest.approx(w.attrs["ksd_weighted"] ** 2, rel=1e-9)
    # Truth: the exact optimum of an independent solver; the promise of "blocks" is
    # f - f* <= tol f + 0.05 mean_i k_p(x_i, x_i) / N, and the reported gap bounds f - f*.
    assert f_exact - 1e-12 <= f <= f_exact + 1e-6 * f + 0.05 * iid2
    assert f - f_exact <= w.attrs["duality_gap"] * (1 + 1e-9) + 1e-15
    # Truth: the Wolfe dual gap recomputed from the reference matrix.
    g = K @ p
    assert w.attrs["duality_gap"] == pytest.approx(2 * (f - g.min()), rel=1e-6, abs=1e-15)
    assert np.all(p >= 0) and abs(p.sum() - 1.0) < 1e-12


def test_blocks_correct_the_langevin_variance(small_blocks, no_piqp):
    # Closed form: ULA (step 0.5) on N(0, 1) has stationary variance 4/3 (see above).
    x, s = ula_samples(3, 4, 500, 0.5, np.eye(1))
    w = stein_weights(x, score=s, method="blocks")
    assert w.attrs["method"] == "blocks"
    p = w.values.reshape(-1)
    flat = x.reshape(-1)
    uniform_error = abs(flat.var() - 1.0)
    weighted_error = abs(p @ (flat - p @ flat) ** 2 - 1.0)
    assert uniform_error > 0.2  # the sample shows the ULA bias (sd of var ~ 0.05)
    # Truth: the target variance 1; at least 5-fold closer than uniform weights.
    assert weighted_error < uniform_error / 5


def test_blocks_take_the_exact_route_when_the_support_is_small(monkeypatch, no_piqp):
    # One parameter: the optimum sits on a few dozen draws at any N, so the first block
    # predicts a small support and the whole problem is solved exactly.
    import steindiag.methods.weights as solvers

    monkeypatch.setattr(solvers, "_BLOCK_SIZE", 200)
    x, s = ula_samples(11, 4, 300, 0.5, np.eye(1))
    w = stein_weights(x, score=s)
    assert w.attrs["method"] == "active-set"
    K = reference_matrix(x.reshape(-1, 1), s.reshape(-1, 1), "standardize")
    _, f_exact = simplex_qp_exact(K)
    # Truth: the independent exact optimum, within the relative rule (not the floor).
    f = w.attrs["ksd_weighted"] ** 2
    assert f <= f_exact * (1 + 1e-3) + w.attrs["rounding_floor"]
    assert w.attrs["rounding_floor"] < 1e-3 * w.attrs["ksd_iid"] ** 2


def test_blocks_per_chain_and_small_problems(small_blocks):
    x, s = ula_samples(5, 2, 400, 0.5, np.eye(2))
    w = stein_weights(x, score=s, method="blocks", per_chain=True)
    # Each chain: 400 draws in 3 blocks; weights sum to 1 within each chain.
    np.testing.assert_allclose(w.sum("draw").values, 1.0, rtol=0, atol=1e-12)
    assert list(w.chain.values) == [0, 1]
    assert all("3 blocks" in status for status in w.solver_status.values)
    # N <= 2 blocks: solved exactly as a whole.
    small = stein_weights(x[:, :250], score=s[:, :250], method="blocks", per_chain=True)
    assert set(small.attrs["method"].split("; ")) == {"active-set"}


def test_kernel_columns_and_subset_match_the_reference_matrix():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 3))
    s = -x + 0.1 * rng.standard_normal((300, 3))
    pre = make_preconditioner("standardize", x, None)
    points = _stein_products.KernelPoints(x, s, pre, IMQ())
    K = reference_matrix(x, s, "standardize")
    rows = rng.choice(300, size=90, replace=False)
    columns = rng.integers(0, 4, size=90)
    values = rng.random(90)
    W = np.zeros((300, 4))
    W[rows, columns] = values
    # Truth: K @ W with the explicit matrix of tests/reference.py.
    np.testing.assert_allclose(points.columns(rows, columns, values, 4), K @ W,
                               rtol=1e-10, atol=1e-12)
    index = np.sort(rng.choice(300, size=50, replace=False))
    sub = points.subset(index)
    np.testing.assert_allclose(sub.matrix(), K[np.ix_(index, index)], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="one non-zero only"):
        points.columns(np.array([1, 1]), np.array([0, 1]), np.ones(2), 2)


def test_small_simplex_qp_matches_the_independent_solver():
    from steindiag.methods.weights import _simplex_qp

    rng = np.random.default_rng(8)
    for rank in (2, 5, 12):
        A = rng.standard_normal((12, rank))
        M = A @ A.T + 1e-3 * np.ones((12, 12))
        a = _simplex_qp(M, 1e-10)
        _, f_exact = simplex_qp_exact(M)
        # Truth: eigh + SciPy NNLS (tests/reference.py).
        assert np.all(a >= 0) and abs(a.sum() - 1) < 1e-12
        assert a @ M @ a == pytest.approx(f_exact, rel=1e-8, abs=1e-14)


# -- properties -------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n_draw=st.integers(5, 60), d=st.integers(1, 4),
       method=st.sampled_from(["auto", "active-set"]))
def test_weights_on_simplex_and_deterministic(seed, n_draw, d, method):
    x = np.random.default_rng(seed).standard_normal((2, n_draw, d)) * 1.5 + 0.4
    s = -x
    # Every drawn case must succeed: "auto" and the active set never give up.
    first = stein_weights(x, score=s, method=method, tol=1e-6)
    second = stein_weights(x, score=s, method=method, tol=1e-6)
    # Truth: the constraints of the QP; and no hidden randomness (same input, same output).
    assert np.all(first.values >= 0)
    assert abs(float(first.sum()) - 1.0) < 1e-12
    np.testing.assert_array_equal(first.values, second.values)
    # Truth: the certificate (Wolfe dual bound from an exact product) meets the rule.
    f = first.attrs["ksd_weighted"] ** 2
    assert first.attrs["duality_gap"] <= 1e-6 * f + first.attrs["rounding_floor"]
    assert first.attrs["ksd_weighted"] <= first.attrs["ksd_uniform"] * (1 + 1e-12)


# -- errors -----------------------------------------------------------------------------


def test_dense_that_does_not_fit_says_so():
    x, s = gaussian_draws(0, 1, 100, 2)
    # piqp holds about 32 N^2 = 320 kB here: more than the 100 kB allowed.
    with pytest.raises(MemoryError, match="frank-wolfe"):
        stein_weights(x, score=s, method="dense", memory_limit=100_000)
    # "auto" needs no N x N matrix: the active set holds at most the support's factor.
    w = stein_weights(x, score=s, method="auto", memory_limit=100_000)
    assert w.attrs["method"] == "active-set"
    # A support that cannot fit is reported with the way out, never returned.
    with pytest.raises(SteinWeightsError, match="stein_thin"):
        stein_weights(x, score=s, method="active-set", memory_limit=1000)


def test_missing_solver_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_piqp(name, *args, **kwargs):
        if name == "piqp":
            raise ImportError("No module named 'piqp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setitem(sys.modules, "piqp", None)
    monkeypatch.setattr(builtins, "__import__", no_piqp)
    x, s = gaussian_draws(0, 1, 50, 3)
    with pytest.raises(ImportError, match=r"steindiag\[weights\]"):
        stein_weights(x, score=s, method="dense")
    # "auto" never needs the optional solver.
    assert stein_weights(x, score=s, method="auto").attrs["method"] == "active-set"


def test_non_convergence_is_reported_not_returned():
    x, s = gaussian_draws(1, 1, 200, 3, shift=0.5)
    with pytest.raises(SteinWeightsError, match="did not converge"):
        stein_weights(x, score=s, method="frank-wolfe", max_iter=3)
    with pytest.raises(SteinWeightsError, match="stopped after 3 iterations"):
        stein_weights(x, score=s, method="active-set", max_iter=3)
    if HAS_PIQP:
        with pytest.raises(SteinWeightsError, match="stopped"):
            stein_weights(x, score=s, method="dense", max_iter=1)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"method": "qp"}, ValueError, "method"),
        ({"tol": 0.0}, ValueError, "tol"),
        ({"tol": "small"}, TypeError, "tol"),
        ({"per_chain": "yes"}, TypeError, "per_chain"),
        ({"max_iter": 0}, ValueError, "max_iter"),
        ({"max_iter": 2.5}, TypeError, "max_iter"),
        ({"memory_limit": -1}, ValueError, "memory_limit"),
        ({"beta": 0.5}, ValueError, "beta"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    x, s = gaussian_draws(0, 1, 20, 2)
    with pytest.raises(error, match=match):
        stein_weights(x, score=s, **kwargs)


# -- traces -----------------------------------------------------------------------------


def posterior_dataset(seed=0, n_chain=2, n_draw=150):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "mu": (("chain", "draw"), rng.standard_normal((n_chain, n_draw)) + 0.3),
            "theta": (("chain", "draw", "school"), rng.standard_normal((n_chain, n_draw, 3))),
        },
        coords={"chain": [0, 1][:n_chain], "draw": np.arange(n_draw) + 500,
                "school": ["a", "b", "c"]},
    )


def test_weights_of_a_dataset_trace_carry_its_coordinates():
    posterior = posterior_dataset()
    w = stein_weights(posterior, score=lambda x: -x, tol=1e-6)
    # Truth: the trace's own chain and draw coordinates.
    np.testing.assert_array_equal(w["draw"].values, posterior["draw"].values)
    np.testing.assert_array_equal(w["chain"].values, posterior["chain"].values)
    # Truth: the labelling rule (coordinate values, as arviz.summary): school = a, b, c.
    assert json.loads(w.attrs["parameters"])[:2] == ["mu", "theta[a]"]


# -- weighted summary -------------------------------------------------------------------


def test_weighted_summary_matches_numpy():
    posterior = posterior_dataset(3)
    rng = np.random.default_rng(9)
    weights = rng.random((2, 150))
    weights[0, :10] = 0.0
    table = weighted_summary(posterior, weights, quantiles=(0.1, 0.5, 0.9))
    w = (weights / weights.sum()).reshape(-1)
    theta_b = posterior["theta"].sel(school="b").values.reshape(-1)
    row = table.loc["theta[b]"]
    # Truth: NumPy's weighted mean and inverted-CDF weighted quantiles (numpy >= 2.0),
    # and the reliability-weights variance sum w (x - m)^2 / (1 - sum w^2).
    assert row["mean"] == pytest.approx(np.average(theta_b, weights=w), rel=1e-12)
    m = np.average(theta_b, weights=w)
    sd = np.sqrt(np.sum(w * (theta_b - m) ** 2) / (1 - np.sum(w**2)))
    assert row["sd"] == pytest.approx(sd, rel=1e-12)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        expected = np.quantile(theta_b, [0.1, 0.5, 0.9], weights=w, method="inverted_cdf")
        np.testing.assert_allclose(row[["q10%", "q50%", "q90%"]].to_numpy(float), expected)
    # Truth: Kish (1965), 1 / sum w^2.
    assert table.attrs["kish_ess"] == pytest.approx(1.0 / np.sum(w**2))


def test_weighted_summary_uniform_weights_is_the_plain_summary():
    x = np.random.default_rng(4).standard_normal((3, 80, 2))
    table = weighted_summary(x, np.ones((3, 80)))
    flat = x.reshape(-1, 2)
    # Truth: uniform weights give the sample mean, the ddof=1 sd and N as Kish ESS.
    np.testing.assert_allclose(table["mean"].to_numpy(), flat.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(table["sd"].to_numpy(), flat.std(axis=0, ddof=1), rtol=1e-12)
    assert table["ess_kish"].iloc[0] == pytest.approx(240)
    assert list(table.index) == ["x[0]", "x[1]"]


def test_weighted_summary_labels_like_arviz():
    az = pytest.importorskip("arviz")
    posterior = posterior_dataset()
    posterior["S"] = (("chain", "draw", "i", "j"), np.ones((2, 150, 2, 2)))
    table = weighted_summary(posterior, np.ones((2, 150)))
    try:
        expected = az.summary(posterior, kind="stats")
    except TypeError:  # ArviZ 1.x
        expected = az.summary(posterior)
    # Truth: arviz.summary's own row labels for the same posterior.
    assert list(table.index) == list(expected.index)


def test_weighted_summary_of_containers():
    posterior = posterior_dataset()
    weights = stein_weights(posterior, score=lambda x: -x, tol=1e-6)
    reference = weighted_summary(posterior, weights)
    containers = []
    if hasattr(xr, "DataTree"):
        containers.append(xr.DataTree.from_dict({"posterior": posterior}))
    try:
        import arviz as az

        if az.__version__.startswith("0."):  # ArviZ 1.x uses DataTree instead
            containers.append(az.InferenceData(posterior=posterior))
    except ImportError:
        pass
    for container in containers:
        table = weighted_summary(container, weights)
        # Truth: the same posterior group read from its container.
        np.testing.assert_array_equal(table.to_numpy(), reference.to_numpy())
        assert list(table.index) == list(reference.index)


@pytest.mark.parametrize(
    "weights, match",
    [
        (np.ones((2, 149)), "do not match"),
        (np.ones((3, 150)), "do not match"),
        (-np.ones((2, 150)), ">= 0"),
        (np.zeros((2, 150)), "all be zero"),
        (np.full((2, 150), np.nan), "finite"),
    ],
)
def test_weighted_summary_rejects_weights_not_matching(weights, match):
    with pytest.raises(ValueError, match=match):
        weighted_summary(posterior_dataset(), weights)


def test_weighted_summary_rejects_other_draw_coordinates():
    posterior = posterior_dataset()
    weights = stein_weights(posterior, score=lambda x: -x, tol=1e-6)
    shifted = weights.assign_coords(draw=weights["draw"].values + 1)
    with pytest.raises(ValueError, match="do not match"):
        weighted_summary(posterior, shifted)


def test_pymc_model_weights_and_constrained_summary():
    pm = pytest.importorskip("pymc")
    with pm.Model() as model:
        pm.Normal("mu", 0.0, 1.0)
        pm.HalfNormal("s", sigma=1.0)
    rng = np.random.default_rng(6)
    mu = rng.standard_normal((2, 80)) + 0.3
    sigma = np.abs(rng.standard_normal((2, 80))) + 0.05
    posterior = xr.Dataset({"mu": (("chain", "draw"), mu), "s": (("chain", "draw"), sigma)},
                           coords={"chain": [0, 1], "draw": np.arange(80)})
    # d = 2: Frank-Wolfe (without piqp) only reaches a looser certified gap here.
    options = {"method": "dense"} if HAS_PIQP else {"method": "frank-wolfe", "tol": 1e-4}
    rtol = 1e-8 if HAS_PIQP else 1e-4
    from_model = stein_weights(posterior, model, **options)

    # Closed form in the unconstrained space (mu, y = log s), log-Jacobian included:
    # log p = -mu^2 / 2 - exp(2 y) / 2 + y + const.
    def score(z):
        return np.column_stack([-z[:, 0], 1 - np.exp(2 * z[:, 1])])

    unconstrained = np.stack([mu, np.log(sigma)], axis=2)
    from_callable = stein_weights(unconstrained, score=score, **options)
    # Truth: the same QP from the closed-form score of the same model (both certified).
    np.testing.assert_allclose(from_model.attrs["ksd_weighted"],
                               from_callable.attrs["ksd_weighted"], rtol=rtol)
    table = weighted_summary(posterior, from_model)
    w = (from_model.values / from_model.values.sum()).reshape(-1)
    # Truth: the weighted mean of the stored, constrained values of s (not of log s).
    assert table.loc["s", "mean"] == pytest.approx(np.sum(w * sigma.reshape(-1)), rel=1e-12)


def test_frank_wolfe_progress_bar_counts_iterations(monkeypatch):
    import steindiag.methods.weights as weights_module

    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, 300, 5))
    updates, closed = [], []

    class Recorder:
        def update(self, amount):
            updates.append(amount)

        def close(self):
            closed.append(True)

    monkeypatch.setattr(weights_module, "make_progress", lambda *a, **k: Recorder())
    w = steindiag.stein_weights(x, score=-x, method="frank-wolfe", progress=True)
    # Truth: the bar advances by exactly the iterations the solver reports, then closes.
    assert sum(updates) == w.attrs["iterations"] and closed == [True]
    with pytest.raises(TypeError, match="progress must be None, True or False"):
        steindiag.stein_weights(x, score=-x, progress="yes")


def test_weights_honour_sample_dims_and_space_of_arrays():
    # A (chain, draw) array of a one-parameter target, declared so: same weights as the
    # explicit (chain, draw, 1) array (the layout, not the numbers, is what changes).
    x = np.random.default_rng(8).standard_normal((2, 150)) * 1.3
    declared = stein_weights(x, score=-x, sample_dims=("chain", "draw"), space="unconstrained")
    explicit = stein_weights(x[..., None], score=-x[..., None])
    assert declared.dims == ("chain", "draw") and declared.shape == (2, 150)
    np.testing.assert_array_equal(declared.values, explicit.values)
    assert declared.attrs["space"] == "unconstrained"
    # The summary reads the array the same way (Truth: the explicit 3-D array's summary).
    table = weighted_summary(x, declared, sample_dims=("chain", "draw"))
    np.testing.assert_array_equal(table.to_numpy(), weighted_summary(x[..., None], explicit).to_numpy())
