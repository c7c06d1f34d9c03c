"""The Stein-kernel engine against independent truth.

Sources of truth:
- ``reference.py``: slow plain-NumPy implementation straight from the docs' background page (full A matrix,
  explicit N x N kernel matrix, prefixes recomputed from scratch).
- Closed forms from the docs' background page (N(0, I_d) target, A = I, c = 1, beta = -1/2).
- Properties (permutation, rescaling, thread count, tile size).
"""

import json
import numba
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from reference import imq_stein_kernel_matrix, reference_ksd

import steindiag
import steindiag.engine.progress
from steindiag.engine.local import _MANY_CHAINS, stein_row_sums
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.kernels import IMQ

RTOL = 1e-10  # the bar for every fast path vs the reference
SCALARS = ["ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled", "ksd2_u", "ksd2_u_pooled"]


def _target_draws(rng, n_chain, n_draw, d, shift=0.3):
    """Draws near N(0, I_d) with a perturbed score so that KSD is clearly > 0."""
    x = rng.standard_normal((n_chain, n_draw, d)) * rng.uniform(0.5, 2.0, size=d)
    s = -x + shift * rng.standard_normal(x.shape)
    return x, s


def _assert_matches_reference(x, s, preconditioner, c=1.0, beta=-0.5, method="auto"):
    res = steindiag.ksd(x, score=s, preconditioner=preconditioner, c=c, beta=beta, method=method)
    path = steindiag.ksd_path(
        x, score=s, preconditioner=preconditioner, c=c, beta=beta, method=method
    )
    ref = reference_ksd(x, s, preconditioner, c=c, beta=beta)
    for name in SCALARS:
        # U-statistics are differences of O(1) sums (may be ~0): compare on the V scale.
        atol = RTOL * float(np.max(ref["ksd"]) ** 2) if name.startswith("ksd2_u") else 0.0
        np.testing.assert_allclose(res[name].values, ref[name], rtol=RTOL, atol=atol)
    np.testing.assert_allclose(path["ksd"].values, ref["path"], rtol=RTOL)
    np.testing.assert_allclose(path["ksd_pooled"].values, ref["path_pooled"], rtol=RTOL)


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize(
    "preconditioner", ["identity", "standardize", "med", "sclmed", "smpcov"]
)
def test_named_preconditioners_match_reference(method, preconditioner):
    # Truth: reference.py (independent plain-NumPy implementation of the docs' background page).
    x, s = _target_draws(np.random.default_rng(1), 3, 17, 4)
    _assert_matches_reference(x, s, preconditioner, method=method)


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize("kind", ["scalar", "diagonal", "full"])
def test_array_preconditioners_match_reference(method, kind):
    rng = np.random.default_rng(2)
    d = 3
    x, s = _target_draws(rng, 2, 15, d)
    if kind == "scalar":
        lam = np.float64(2.5)
    elif kind == "diagonal":
        lam = rng.uniform(0.3, 3.0, size=d)
    else:
        m = rng.standard_normal((d, d))
        lam = m @ m.T + 0.5 * np.eye(d)
    # Truth: reference.py with A = inv(Lambda) as a full matrix (no rotation).
    _assert_matches_reference(x, s, lam, method=method)


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (0.5, -0.2), (2.0, -0.9), (1.3, -0.5)])
def test_kernel_parameters_match_reference(method, c, beta):
    x, s = _target_draws(np.random.default_rng(3), 2, 16, 3)
    # Truth: reference.py with the same (c, beta).
    _assert_matches_reference(x, s, "smpcov", c=c, beta=beta, method=method)


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize("preconditioner", ["identity", "smpcov"])
@pytest.mark.parametrize("d", [3, 30])
@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (2.0, -0.3)])
def test_repeated_draws_far_from_the_centre_match_reference(
    method, preconditioner, d, c, beta, monkeypatch
):
    # A Metropolis-like trace (every draw repeated, as after a rejection) on a scale of
    # 1e6 with A = I: |x_i|^2 + |x_j|^2 - 2 x_i.x_j loses all digits of |x_i - x_j|^2
    # for the repeated pairs, which the BLAS path must then compute exactly. Small tiles,
    # so that repeated pairs fall both inside a tile and across tiles.
    from steindiag.engine import local as engine

    monkeypatch.setattr(engine, "_GEMM_TILE_ROWS", 16)
    rng = np.random.default_rng(40 + d)
    x = 1e6 * rng.standard_normal((2, 40, d))
    x[:, 1::2] = x[:, 0::2]
    x[:, 21] = x[:, 2]  # also repeated after a gap (in another tile)
    s = -x / 1e12 + 1e-6 * rng.standard_normal(x.shape)
    # Truth: reference.py (explicit differences x_i - x_j, exactly zero for repeats).
    _assert_matches_reference(x, s, preconditioner, c=c, beta=beta, method=method)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    log_scale=st.integers(-6, 8),
    log_offset=st.floats(-3, 3),
    repeat=st.sampled_from([0.0, 0.3, 0.7]),
    d=st.integers(1, 12),
    preconditioner=st.sampled_from(["identity", "standardize", "med", "smpcov"]),
    tile_rows=st.sampled_from([4, 16, 256]),
)
def test_blas_path_matches_reference_at_any_scale(
    seed, log_scale, log_offset, repeat, d, preconditioner, tile_rows
):
    # Scales 1e-6 .. 1e8, a mean offset up to 1e3 spreads, and a fraction of repeated
    # draws (rejections): the tiled path must stay within the bar of the reference.
    rng = np.random.default_rng(seed)
    scale = 10.0**log_scale
    n_chain, n_draw = 2, 24
    x = scale * (rng.standard_normal((n_chain, n_draw, d)) + 10.0**log_offset)
    for t in range(1, n_draw):
        repeated = rng.random(n_chain) < repeat
        x[repeated, t] = x[repeated, t - 1]
    s = -(x - x.mean(axis=(0, 1))) / scale**2 + 0.3 * rng.standard_normal(x.shape) / scale
    if preconditioner == "smpcov":  # a well-conditioned sample covariance
        assume(len(np.unique(x.reshape(-1, d), axis=0)) >= 3 * d)
    sums = stein_row_sums(
        x, s, kernel=IMQ(), method="gemm", tile_rows=tile_rows,
        preconditioner=make_preconditioner(preconditioner, x.reshape(-1, d), "x"),
    )
    v_pooled = (sums.diagonal.sum() + 2.0 * sums.row_all.sum()) / (n_chain * n_draw) ** 2
    # Truth: reference.py (explicit differences).
    ref = reference_ksd(x, s, preconditioner)
    np.testing.assert_allclose(np.sqrt(v_pooled), ref["ksd_pooled"], rtol=RTOL)


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize("preconditioner", ["identity", "standardize", "med", "smpcov"])
def test_inputs_are_left_unchanged(method, preconditioner):
    # The BLAS path centres the draws in kernel coordinates; that must be a copy.
    x, s = _target_draws(np.random.default_rng(41), 2, 30, 6)
    x += 5.0
    x_before, s_before = x.copy(), s.copy()
    steindiag.ksd(x, score=s, preconditioner=preconditioner, method=method)
    steindiag.ksd_path(x, score=s, preconditioner=preconditioner, method=method)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(s, s_before)


@pytest.mark.parametrize("d", [1, 2, 7, 25, 64, 300])
def test_dimensions_match_reference(d):
    # d = 1 .. 300 covers both engine paths under method="auto" (fused up to 3).
    x, s = _target_draws(np.random.default_rng(4 + d), 2, 12, d)
    _assert_matches_reference(x, s, "standardize")


@pytest.mark.parametrize("method", ["fused", "gemm"])
def test_float32_input_is_computed_in_float64(method):
    x, s = _target_draws(np.random.default_rng(5), 2, 20, 5)
    x32, s32 = x.astype(np.float32), s.astype(np.float32)
    with pytest.warns(UserWarning, match="score is float32.*jax_enable_x64"):
        res = steindiag.ksd(x32, score=s32, preconditioner="identity", method=method)
    # Truth: the reference on the same float32 values promoted to float64.
    ref = reference_ksd(x32.astype(np.float64), s32.astype(np.float64), "identity")
    np.testing.assert_allclose(res["ksd"].values, ref["ksd"], rtol=RTOL)
    np.testing.assert_allclose(res["ksd_pooled"].values, ref["ksd_pooled"], rtol=RTOL)


def test_one_chain_two_dimensional_input():
    x, s = _target_draws(np.random.default_rng(6), 1, 30, 2)
    res = steindiag.ksd(x[0], score=s[0], preconditioner="identity")
    ref = reference_ksd(x, s, "identity")
    assert res.sizes["chain"] == 1
    # Truth: reference.py; with one chain the pooled value is that chain's value.
    np.testing.assert_allclose(res["ksd"].values, ref["ksd"], rtol=RTOL)
    np.testing.assert_allclose(res["ksd_pooled"].values, res["ksd"].values[0], rtol=1e-14)


def test_diagonal_closed_form_standard_normal():
    # the docs' background page: for p = N(0, I_d), A = I, c = 1, beta = -1/2: k_p(x, x) = d + |x|^2,
    # so ksd_iid^2 * N = mean_i (d + |x_i|^2).
    rng = np.random.default_rng(7)
    d, n = 4, 50
    x = rng.standard_normal((1, n, d))
    res = steindiag.ksd(x, score=-x, preconditioner="identity")
    expected = np.sqrt(np.mean(d + np.sum(x[0] ** 2, axis=1)) / n)
    np.testing.assert_allclose(res["ksd_iid"].values[0], expected, rtol=1e-14)
    # and the diagonal of the reference kernel matrix is d + |x|^2 too.
    k = imq_stein_kernel_matrix(x[0], -x[0], x[0], -x[0], np.eye(d))
    np.testing.assert_allclose(np.diag(k), d + np.sum(x[0] ** 2, axis=1), rtol=1e-13)


def test_exact_draws_expectations_standard_normal():
    # the docs' background page: exact i.i.d. N(0, I_d) draws, A = I, c = 1, beta = -1/2:
    # E[KSD^2_V] = 2d/N and E[KSD^2_U] = 0. Each chain is an independent replicate.
    rng = np.random.default_rng(8)
    n_rep, n, d = 400, 100, 3
    x = rng.standard_normal((n_rep, n, d))
    res = steindiag.ksd(x, score=-x, preconditioner="identity", sample_dims=("chain", "draw"))
    u = res["ksd2_u"].values
    v = res["ksd"].values ** 2
    # Known variance of a degenerate U-statistic under the null (h_1 = 0):
    # Var(U) = 2 E[k_p(X, X')^2] / (N (N - 1)); E[k_p^2] estimated independently of the
    # data above, from reference.py on fresh independent pairs.
    xa, xb = rng.standard_normal((2, 4000, d))
    k_pairs = np.array([imq_stein_kernel_matrix(a[None], -a[None], b[None], -b[None], np.eye(d))
                        for a, b in zip(xa, xb)]).ravel()
    var_u = 2.0 * np.mean(k_pairs**2) / (n * (n - 1))
    se_u = np.sqrt(var_u / n_rep)
    assert abs(u.mean()) < 5 * se_u
    # V = (N-1)/N U + mean_i k_p(x_i, x_i) / N; Var(mean_i (d + |x_i|^2) / N) = 2d / N^3.
    se_v = np.sqrt((((n - 1) / n) ** 2 * var_u + 2 * d / n**3) / n_rep)
    assert abs(v.mean() - 2 * d / n) < 5 * se_v


@pytest.mark.parametrize("method, n_chain", [("fused", 70), ("gemm", 20)])
def test_many_short_chains_match_reference(method, n_chain):
    # Above _engine._MANY_CHAINS chains the pooled sums run over one time-major sequence
    # and the same-chain sums in their own pass. Truth: reference.py (per chain, pooled,
    # running curves), on more chains than draws, the layout of emcee's walkers.
    assert n_chain > _MANY_CHAINS[method]
    x, s = _target_draws(np.random.default_rng(21), n_chain, 6, 5)
    res = steindiag.ksd(x, score=s, preconditioner="standardize", method=method,
                        sample_dims=("chain", "draw"))
    path = steindiag.ksd_path(x, score=s, preconditioner="standardize", method=method,
                              sample_dims=("chain", "draw"))
    ref = reference_ksd(x, s, "standardize")
    for name in SCALARS:
        atol = RTOL * float(np.max(ref["ksd"]) ** 2) if name.startswith("ksd2_u") else 0.0
        np.testing.assert_allclose(res[name].values, ref[name], rtol=RTOL, atol=atol)
    np.testing.assert_allclose(path["ksd"].values, ref["path"], rtol=RTOL)
    np.testing.assert_allclose(path["ksd_pooled"].values, ref["path_pooled"], rtol=RTOL)


def test_running_curve_equals_prefix_recomputation():
    x, s = _target_draws(np.random.default_rng(9), 3, 25, 2)
    path = steindiag.ksd_path(x, score=s, preconditioner="identity")
    # Truth: recompute every prefix from scratch with steindiag.ksd itself (independent of
    # the cumulative-sum bookkeeping) and with the reference.
    for n in (2, 7, 25):
        prefix = steindiag.ksd(x[:, :n], score=s[:, :n], preconditioner="identity",
                               sample_dims=("chain", "draw"))
        np.testing.assert_allclose(path["ksd"].sel(n=n).values, prefix["ksd"].values, rtol=1e-12)
        np.testing.assert_allclose(
            path["ksd_pooled"].sel(n=n).values, prefix["ksd_pooled"].values, rtol=1e-12
        )
        np.testing.assert_allclose(
            path["ksd_iid"].sel(n=n).values, prefix["ksd_iid"].values, rtol=1e-12
        )


def test_path_n_points_subsamples_the_full_curve():
    x, s = _target_draws(np.random.default_rng(10), 2, 300, 2)
    full = steindiag.ksd_path(x, score=s)
    sub = steindiag.ksd_path(x, score=s, n_points=20)
    n = sub["n"].values
    assert n[0] == 1 and n[-1] == 300 and np.all(np.diff(n) > 0) and len(n) <= 20
    np.testing.assert_allclose(sub["ksd"].values, full["ksd"].sel(n=n).values, rtol=1e-14)
    # The last point of the curve is the value.
    res = steindiag.ksd(x, score=s)
    np.testing.assert_allclose(full["ksd"].values[:, -1], res["ksd"].values, rtol=1e-14)


def test_per_chain_equals_each_chain_alone():
    x, s = _target_draws(np.random.default_rng(11), 4, 30, 3)
    lam = np.array([1.0, 2.0, 0.5])  # a fixed Lambda, so each chain alone uses the same kernel
    res = steindiag.ksd(x, score=s, preconditioner=lam)
    for c in range(4):
        alone = steindiag.ksd(x[c], score=s[c], preconditioner=lam)
        np.testing.assert_allclose(res["ksd"].values[c], alone["ksd"].values[0], rtol=1e-12)
        np.testing.assert_allclose(res["ksd2_u"].values[c], alone["ksd2_u"].values[0],
                                   rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("method", ["fused", "gemm"])
def test_results_do_not_depend_on_thread_count(method):
    x, s = _target_draws(np.random.default_rng(12), 2, 400, 30)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = steindiag.ksd_path(x, score=s, method=method)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = steindiag.ksd_path(x, score=s, method=method)
    finally:
        numba.set_num_threads(before)
    # Truth: each row sum is owned by one thread, so the numbers are identical.
    np.testing.assert_array_equal(one["ksd"].values, many["ksd"].values)
    np.testing.assert_array_equal(one["ksd_pooled"].values, many["ksd_pooled"].values)


@pytest.mark.parametrize("tile_rows", [1, 3, 64, 10_000])
def test_results_do_not_depend_on_tile_size(tile_rows):
    x, s = _target_draws(np.random.default_rng(13), 3, 50, 6)
    pre = make_preconditioner("smpcov", x.reshape(-1, 6), None)
    fused = stein_row_sums(x, s, kernel=IMQ(), preconditioner=pre, method="fused")
    tiled = stein_row_sums(x, s, kernel=IMQ(), preconditioner=pre, method="gemm",
                           tile_rows=tile_rows)
    # Truth: the fused per-pair path (itself checked against reference.py above).
    scale = np.abs(fused.row_all).max()
    np.testing.assert_allclose(tiled.row_all, fused.row_all, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(tiled.row_same, fused.row_same, rtol=0, atol=1e-12 * scale)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 40), d=st.integers(1, 4))
def test_v_statistic_is_permutation_invariant(seed, n, d):
    rng = np.random.default_rng(seed)
    x, s = _target_draws(rng, 1, n, d)
    perm = rng.permutation(n)
    a = steindiag.ksd(x, score=s)
    b = steindiag.ksd(x[:, perm], score=s[:, perm])
    # Truth: V and U sum over all pairs, so the order of the draws cannot matter.
    np.testing.assert_allclose(b["ksd"].values, a["ksd"].values, rtol=1e-10)
    np.testing.assert_allclose(b["ksd_iid"].values, a["ksd_iid"].values, rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    log_factor=st.floats(-6, 6),
    coordinate=st.integers(0, 2),
)
def test_default_preconditioner_is_invariant_to_rescaling(seed, log_factor, coordinate):
    rng = np.random.default_rng(seed)
    x, s = _target_draws(rng, 2, 30, 3)
    factor = 10.0**log_factor
    x2, s2 = x.copy(), s.copy()
    # y = factor * x has score grad_y log p = s / factor.
    x2[..., coordinate] *= factor
    s2[..., coordinate] /= factor
    a = steindiag.ksd(x, score=s)
    b = steindiag.ksd(x2, score=s2)
    # Truth: "standardize" is a change of variables x -> x / scale (the background page / issue 2).
    np.testing.assert_allclose(b["ksd"].values, a["ksd"].values, rtol=1e-10)
    np.testing.assert_allclose(b["ksd_pooled"].values, a["ksd_pooled"].values, rtol=1e-10)


def test_score_callable_batched_and_single():
    x, _ = _target_draws(np.random.default_rng(14), 2, 20, 3)
    expected = steindiag.ksd(x, score=-x)
    batched = steindiag.ksd(x, score=lambda z: -z)
    single = steindiag.ksd(x, score=lambda z: -z, batched=False)
    # Truth: the array-score result with the same scores.
    np.testing.assert_allclose(batched["ksd"].values, expected["ksd"].values, rtol=1e-14)
    np.testing.assert_allclose(single["ksd"].values, expected["ksd"].values, rtol=1e-14)


def test_result_labels_and_attrs():
    x, s = _target_draws(np.random.default_rng(15), 3, 20, 2)
    res = steindiag.ksd(x, score=s, c=1.5, beta=-0.3, preconditioner="med")
    assert set(res.data_vars) == set(SCALARS)
    assert res["ksd"].dims == ("chain",) and res["ksd_pooled"].dims == ()
    assert list(res["chain"].values) == [0, 1, 2]
    for key, value in {"kernel": "IMQ", "c": 1.5, "beta": -0.3, "preconditioner": "med",
                       "n_chain": 3, "n_draw": 20, "n_parameter": 2}.items():
        assert res.attrs[key] == value
    assert json.loads(res.attrs["parameters"]) == ["x[0]", "x[1]"]
    # Reproducibility: the recorded scalar Lambda reproduces the value as an explicit array.
    again = steindiag.ksd(x, score=s, c=1.5, beta=-0.3,
                          preconditioner=res.attrs["preconditioner_lambda"])
    np.testing.assert_allclose(again["ksd"].values, res["ksd"].values, rtol=1e-12)
    std = steindiag.ksd(x, score=s)
    assert len(std.attrs["standardize_scale"]) == 2
    # Truth: standardize = explicit division by the recorded scales, identity kernel.
    scale = std.attrs["standardize_scale"]
    manual = steindiag.ksd(x / scale, score=s * scale, preconditioner="identity")
    np.testing.assert_allclose(std["ksd"].values, manual["ksd"].values, rtol=1e-12)


@pytest.mark.parametrize("method", ["fused", "gemm"])
def test_chunked_pass_equals_single_pass(method, monkeypatch):
    import steindiag.engine.local as engine

    x, s = _target_draws(np.random.default_rng(16), 3, 300, 30)
    whole = steindiag.ksd_path(x, score=s, method="fused")
    # Force many small chunks (as a long run would get): the numbers must not change.
    monkeypatch.setattr(steindiag.engine.progress, "CONSERVATIVE_FLOPS", 1.0)
    monkeypatch.setattr(engine, "_MIN_CHUNK_ROWS", 1)
    monkeypatch.setattr(engine, "_MIN_CHUNK_TILES", 1)
    monkeypatch.setattr(engine, "_GEMM_TILE_ROWS", 24)
    calls = []
    original = engine._run_in_chunks

    def spy(compute_rows, *args, **kwargs):
        def counted(lo, hi):
            calls.append((lo, hi))
            compute_rows(lo, hi)
        return original(counted, *args, **kwargs)

    monkeypatch.setattr(engine, "_run_in_chunks", spy)
    chunked = steindiag.ksd_path(x, score=s, method=method)
    assert len(calls) > 5
    # Truth: the single-pass fused result (itself checked against reference.py).
    np.testing.assert_allclose(chunked["ksd"].values, whole["ksd"].values, rtol=1e-12)
    np.testing.assert_allclose(chunked["ksd_pooled"].values, whole["ksd_pooled"].values,
                               rtol=1e-12)


def test_interrupt_between_chunks_leaves_no_thread_running(monkeypatch):
    import steindiag.engine.local as engine

    x, s = _target_draws(np.random.default_rng(17), 2, 600, 3)
    monkeypatch.setattr(steindiag.engine.progress, "CONSERVATIVE_FLOPS", 1.0)
    monkeypatch.setattr(engine, "_MIN_CHUNK_ROWS", 1)

    class Interrupting:
        def update(self, amount):
            raise KeyboardInterrupt  # as Ctrl-C arriving during the first chunk

        closed = False

        def close(self):
            Interrupting.closed = True

    monkeypatch.setattr(engine, "make_progress", lambda *a, **k: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        steindiag.ksd(x, score=s, progress=True)
    assert Interrupting.closed
    monkeypatch.undo()
    # The thread pool is idle and usable: a new call completes and matches the reference.
    res = steindiag.ksd(x[:, :20], score=s[:, :20], preconditioner="identity")
    ref = reference_ksd(x[:, :20], s[:, :20], "identity")
    np.testing.assert_allclose(res["ksd"].values, ref["ksd"], rtol=RTOL)


def test_progress_bar_reports_every_pair(monkeypatch):
    import steindiag.engine.local as engine

    x, s = _target_draws(np.random.default_rng(18), 2, 500, 2)
    monkeypatch.setattr(steindiag.engine.progress, "CONSERVATIVE_FLOPS", 1.0)
    monkeypatch.setattr(engine, "_MIN_CHUNK_ROWS", 1)
    updates = []

    class Recorder:
        def update(self, amount):
            updates.append(amount)

        def close(self):
            pass

    monkeypatch.setattr(engine, "make_progress", lambda *a, **k: Recorder())
    steindiag.ksd(x, score=s, progress=True)
    # Truth: the pooled lower triangle has N (N - 1) / 2 pairs, N = 2 * 500.
    assert len(updates) > 1 and sum(updates) == 1000 * 999 // 2


class _IMQGeneralToken(IMQ):
    """The IMQ with the general kind token, whatever beta (the passes then pick the loop
    by beta at run time instead of compiling the square-root loop alone)."""

    @property
    def numba_kind(self):
        from steindiag.kernels._stein import IMQ as IMQ_KIND, kind_token

        return kind_token(IMQ_KIND)


@pytest.mark.parametrize("method", ["fused", "gemm"])
def test_imq_half_token_runs_the_general_tokens_loop(method):
    # The default IMQ (beta = -1/2) has a kind token of its own, for which every pass
    # compiles the square-root loop only. Truth: the general IMQ token, whose passes
    # choose that same loop at run time when beta = -1/2: bitwise the same numbers.
    from steindiag.engine.products import KernelPoints

    x, s = _target_draws(np.random.default_rng(21), 2, 60, 5)
    pre = make_preconditioner("standardize", x.reshape(-1, 5), None)
    # (0.0,) and (0,): equal in Python, two Numba types.
    assert type(IMQ().numba_kind[0]) is float and type(_IMQGeneralToken().numba_kind[0]) is int
    half = stein_row_sums(x, s, kernel=IMQ(), preconditioner=pre, method=method)
    general = stein_row_sums(x, s, kernel=_IMQGeneralToken(), preconditioner=pre, method=method)
    np.testing.assert_array_equal(half.row_all, general.row_all)
    np.testing.assert_array_equal(half.diagonal, general.diagonal)
    flat_x, flat_s = x.reshape(-1, 5), s.reshape(-1, 5)
    weights = np.random.default_rng(22).uniform(size=flat_x.shape[0])
    products = [KernelPoints(flat_x, flat_s, pre, kernel).matvec(weights)
                for kernel in (IMQ(), _IMQGeneralToken())]
    np.testing.assert_array_equal(products[0], products[1])
