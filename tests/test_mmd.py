"""Tests of ``mmd`` (MMD^2 between chains or two samples, block permutations) and ``plot_mmd``.

Sources of truth: the explicit-matrix MMD^2_U of tests/reference.py (the docs' background page,
written independently of the engine); closed forms (a test of exact level gives
Binomial(R, alpha) rejections and uniform p-values over independent replicates);
published behaviour (score-based discrepancies are blind to mixing weights and isolated
modes: Wenliang & Kanagawa 2020; MMD with a characteristic kernel is not: Gretton et
al. 2012).
"""

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402
from scipy import stats  # noqa: E402

import steindiag  # noqa: E402
from steindiag.kernels import IMQ  # noqa: E402
from steindiag.methods.mmd import unit_kernel_sums  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from reference import (  # noqa: E402
    imq_base_kernel_matrix,
    lambda_for,
    mmd2_u,
    standardize_reference,
)

ALPHA = 0.05


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def ar1(rng, n_chain, n_draw, rho, d=1, mean=0.0):
    """AR(1) chains with exact N(mean, 1) marginals."""
    noise = rng.standard_normal((n_chain, n_draw, d))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, n_draw):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * noise[:, t]
    return x + mean


def reference_transform(pooled, preconditioner):
    """(map of draws, A) written from the docs' background page, independent of steindiag."""
    if preconditioner == "standardize":
        def transform(x):
            return standardize_reference(pooled, x, x)[0]
        return transform, np.eye(pooled.shape[1])
    return (lambda x: x), np.linalg.inv(lambda_for(preconditioner, pooled))


# -- values -----------------------------------------------------------------------------


@pytest.mark.parametrize("preconditioner", ["identity", "standardize", "med", "smpcov"])
@pytest.mark.parametrize("beta", [-0.5, -0.3])
def test_chain_matrix_matches_reference(preconditioner, beta):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 130, 2)) @ np.array([[1.0, 0.4], [0.0, 3.0]])
    x[2] += 0.5
    c = 1.3
    res = steindiag.mmd(x, preconditioner=preconditioner, c=c, beta=beta)
    transform, A = reference_transform(x.reshape(-1, 2), preconditioner)
    z = transform(x)
    for i in range(3):
        for j in range(3):
            expected = 0.0 if i == j else mmd2_u(z[i], z[j], A, c, beta)
            # Truth: the explicit-matrix MMD^2_U of tests/reference.py.
            np.testing.assert_allclose(res.values[i, j], expected, rtol=1e-10,
                                       atol=1e-14)
    # Truth: the documented output, a (chain, chain_other) DataArray named "mmd2", with no
    # p-value coordinate when no permutations were run.
    assert isinstance(res, xr.DataArray) and res.name == "mmd2"
    assert res.dims == ("chain", "chain_other")
    assert "pvalue" not in res.coords


@pytest.mark.parametrize("kernel", ["gaussian", "matern32", "matern52"])
def test_other_base_kernels_match_reference(kernel):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 90, 2))
    x[1] *= 1.5
    res = steindiag.mmd(x, kernel=kernel, preconditioner="med")
    transform, A = reference_transform(x.reshape(-1, 2), "med")
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        # Truth: the explicit-matrix MMD^2_U with the radial profile of tests/reference.py.
        np.testing.assert_allclose(res.values[i, j], mmd2_u(x[i], x[j], A, kernel=kernel),
                                   rtol=1e-10, atol=1e-14)
    # Truth: the documented labels: the kernel's name, no IMQ parameters.
    assert res.attrs["kernel"].lower() == kernel and "c" not in res.attrs
    with pytest.raises(ValueError, match="c"):
        steindiag.mmd(x, kernel=kernel, c=2.0)


def test_two_samples_match_reference():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 100, 3))
    y = rng.standard_normal((3, 70, 3)) * 1.2
    res = steindiag.mmd(x, y, preconditioner="med")
    transform, A = reference_transform(np.concatenate([x.reshape(-1, 3), y.reshape(-1, 3)]),
                                       "med")
    # Truth: MMD^2_U between all draws of x and all draws of y, chains pooled, with Lambda
    # from all draws of both (tests/reference.py).
    np.testing.assert_allclose(float(res),
                               mmd2_u(x.reshape(-1, 3), y.reshape(-1, 3), A), rtol=1e-10)


def test_two_sample_permutation_test():
    rng = np.random.default_rng(17)
    x = ar1(rng, 2, 300, 0.5, d=2)
    same = ar1(rng, 2, 300, 0.5, d=2)
    shifted = same + [0.5, 0.0]
    res_same = steindiag.mmd(x, same, n_permutations=200, rng=1)
    res_shift = steindiag.mmd(x, shifted, n_permutations=200, rng=1)
    # Truth: same stationary law -> the null holds (p > 0.01 fails with probability 0.01 for
    # a valid test; seed fixed); a mean shift of half a standard deviation with 600 and 600
    # draws is far beyond the null spread of MMD^2 (Gretton et al. 2012): p = 1/201.
    assert float(res_same["pvalue"]) > 0.01
    assert float(res_shift["pvalue"]) < 0.01
    assert res_shift.attrs["n_draw_data"] == 600 and res_shift.attrs["n_draw_other"] == 600
    # Truth: the documented output with other=, a 0-d DataArray with a scalar p-value
    # coordinate.
    assert res_shift.dims == () and res_shift.name == "mmd2"
    assert res_shift.coords["pvalue"].dims == ()


def test_two_traces_are_matched_by_parameter_name():
    rng = np.random.default_rng(18)
    x = rng.standard_normal((2, 80, 2)) * [1.0, 3.0]
    y = rng.standard_normal((1, 90, 2)) * [1.0, 3.0] + [0.5, 0.0]
    data = xr.Dataset({"a": (("chain", "draw"), x[..., 0]), "b": (("chain", "draw"), x[..., 1])})
    # The same variables stored in the other order.
    other = xr.Dataset({"b": (("chain", "draw"), y[..., 1]), "a": (("chain", "draw"), y[..., 0])})
    res = steindiag.mmd(data, other, preconditioner="identity")
    # Truth: MMD^2_U of tests/reference.py with the columns paired by name (a with a, b
    # with b), not by position.
    np.testing.assert_allclose(float(res), mmd2_u(x.reshape(-1, 2), y.reshape(-1, 2), np.eye(2)),
                               rtol=1e-10)
    assert json.loads(res.attrs["parameters"]) == ["a", "b"]
    renamed = other.rename({"b": "c"})
    with pytest.raises(ValueError, match=r"other lacks \['b'\] and has \['c'\]"):
        steindiag.mmd(data, renamed)


def test_unit_sums_match_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((500, 2))
    starts = np.array([0, 7, 300, 301, 500], dtype=np.int64)
    pre = steindiag.kernels.preconditioner.make_preconditioner("identity", x, ["a", "b"])
    G = unit_kernel_sums(x, starts, pre, IMQ())
    K = imq_base_kernel_matrix(x, x, np.eye(2))
    np.fill_diagonal(K, 0.0)
    expected = np.array([[K[starts[u]:starts[u + 1], starts[v]:starts[v + 1]].sum()
                          for v in range(4)] for u in range(4)])
    # Truth: block sums of the explicit base-kernel matrix, self-pairs removed.
    np.testing.assert_allclose(G, expected, rtol=1e-12)


def test_unit_sums_same_result_on_one_and_two_threads():
    import numba

    x = np.random.default_rng(19).standard_normal((900, 3))
    starts = np.array([0, 100, 450, 451, 900], dtype=np.int64)
    pre = steindiag.kernels.preconditioner.make_preconditioner("identity", x, ["a", "b", "c"])
    full = unit_kernel_sums(x, starts, pre, IMQ())
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        single = unit_kernel_sums(x, starts, pre, IMQ())
    finally:
        numba.set_num_threads(saved)
    # Truth: the rows are split into 8 parts whatever the thread count (up to 8), each part
    # summed by one thread and the parts added in a fixed order, so the sums are bitwise
    # equal.
    np.testing.assert_array_equal(full, single)


def test_permutation_pvalue_matches_explicit_recomputation():
    rng = np.random.default_rng(4)
    x = ar1(rng, 2, 60, 0.3)
    x[1] += 0.3
    block, n_perm = 6, 40
    res = steindiag.mmd(x, n_permutations=n_perm, block_length=block, rng=9,
                        preconditioner="identity")
    # Independent recomputation from the explicit matrix: the same random splits (the
    # same generator, drawing a (count, units) uniform array and ranking each row), and the
    # documented statistic: MMD^2 over the pairs that are neither in one block nor in
    # adjacent blocks of one chain.
    pooled = x.reshape(-1, 1)
    K = imq_base_kernel_matrix(pooled, pooled, np.eye(1))
    unit = np.repeat(np.arange(20), block)
    chain = unit // 10
    far = ~((chain[:, None] == chain[None, :]) & (np.abs(unit[:, None] - unit[None, :]) <= 1))

    def statistic(in_x_unit):
        in_x = in_x_unit[unit]
        def mean(a, b):
            mask = far & a[:, None] & b[None, :]
            return K[mask].mean()
        return mean(in_x, in_x) + mean(~in_x, ~in_x) - 2 * mean(in_x, ~in_x)

    observed = statistic(np.arange(20) < 10)
    order = np.argsort(np.random.default_rng(9).random((n_perm, 20)), axis=1)
    permuted = np.array([statistic(row < 10) for row in order])
    expected = (1 + np.sum(permuted >= observed)) / (1 + n_perm)
    # Truth: (1 + #{permuted >= observed}) / (1 + B) from the explicit matrix.
    assert res["pvalue"].values[0, 1] == pytest.approx(expected)
    assert res.attrs["block_length"] == block
    # Truth: the documented layout, p-values as a (chain, chain_other) coordinate,
    # symmetric with NaN on the diagonal, that follows a selection of a pair.
    assert res.coords["pvalue"].dims == ("chain", "chain_other")
    assert res.pvalue.values[1, 0] == res.pvalue.values[0, 1]
    assert np.isnan(res.pvalue.values[0, 0]) and np.isnan(res.pvalue.values[1, 1])
    pair = res.sel(chain=0, chain_other=1)
    assert float(pair.pvalue) == res.pvalue.values[0, 1] and float(pair) == res.values[0, 1]


def test_two_sample_pvalue_matches_explicit_recomputation():
    rng = np.random.default_rng(20)
    x = ar1(rng, 2, 60, 0.3)
    y = ar1(rng, 1, 90, 0.3) + 0.2
    block, n_perm = 6, 40
    res = steindiag.mmd(x, y, n_permutations=n_perm, block_length=block, rng=9,
                        preconditioner="identity")
    # Independent recomputation from the explicit matrix, as for chains: units are the
    # blocks of data's chains (10 each), then of other's chain (15); the statistic keeps
    # the pairs that are neither in one block nor in adjacent blocks of one chain (other's
    # chain counts as a chain of its own), and each permutation draws 20 of the 35 units
    # for the first sample (the same generator calls).
    pooled = np.concatenate([x.reshape(-1, 1), y.reshape(-1, 1)])
    K = imq_base_kernel_matrix(pooled, pooled, np.eye(1))
    unit = np.repeat(np.arange(35), block)
    chain = np.repeat([0, 1, 2], [60, 60, 90])
    far = ~((chain[:, None] == chain[None, :]) & (np.abs(unit[:, None] - unit[None, :]) <= 1))

    def statistic(in_x_unit):
        in_x = in_x_unit[unit]

        def mean(a, b):
            return K[far & a[:, None] & b[None, :]].mean()
        return mean(in_x, in_x) + mean(~in_x, ~in_x) - 2 * mean(in_x, ~in_x)

    observed = statistic(np.arange(35) < 20)
    order = np.argsort(np.random.default_rng(9).random((n_perm, 35)), axis=1)
    permuted = np.array([statistic(row < 20) for row in order])
    # Truth: (1 + #{permuted >= observed}) / (1 + B) from the explicit matrix.
    assert float(res.pvalue) == pytest.approx((1 + np.sum(permuted >= observed)) / (1 + n_perm))


# -- what it is for ------------------------------------------------------------------------


def mixture_score(x, mode=4.0):
    """grad log of 0.5 N(-mode, 1) + 0.5 N(mode, 1), computed stably."""
    log_left = -0.5 * (x + mode) ** 2
    log_right = -0.5 * (x - mode) ** 2
    w_right = 1.0 / (1.0 + np.exp(log_left - log_right))
    return -(x + mode) * (1 - w_right) - (x - mode) * w_right


def test_chains_in_different_modes_ksd_blind_mmd_flags():
    rng = np.random.default_rng(5)
    # Two chains of a well-separated two-mode target, each stuck in one mode (autocorrelated).
    x = ar1(rng, 2, 600, 0.5)
    x[0] -= 4.0
    x[1] += 4.0
    score = mixture_score(x)
    test = steindiag.ksd_test(x, score=score, n_bootstrap=200, rng=6)
    # Truth (Wenliang & Kanagawa 2020; the docs' background page): near one mode the mixture's
    # score is that mode's, so a chain stuck in a mode passes the KSD test, and both
    # chains pooled are a correct sample of the mixture (equal weights).
    assert np.all(test["pvalue"].values > 0.01), test["pvalue"].values
    assert float(test["pvalue_pooled"]) > 0.01
    res = steindiag.mmd(x, n_permutations=200, rng=7)
    # Truth: the chains sample different distributions, which MMD with the characteristic
    # IMQ kernel separates (Gretton et al. 2012); every permutation mixes blocks of both
    # modes, so the observed statistic exceeds all 200: p = 1/201.
    assert res["pvalue"].values[0, 1] < 0.01
    assert res.values[0, 1] > 0.1


def test_healthy_chains_have_uniform_pvalues():
    rng = np.random.default_rng(8)
    n_rep = 150
    pvalues = np.empty(n_rep)
    for r in range(n_rep):
        x = ar1(rng, 4, 500, 0.5, d=2)
        res = steindiag.mmd(x, n_permutations=100, rng=r)
        pvalues[r] = res["pvalue"].values[0, 1]
    # Truth: four chains of one stationary AR(1) process satisfy the null; independent
    # replicates of a valid test give (discrete) uniform p-values on {1/101, ..., 1}.
    # Kolmogorov-Smirnov at the 0.001 level: fails when the level is off by ~0.15 or more.
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3
    se = np.sqrt(ALPHA * (1 - ALPHA) / n_rep)
    rate = np.mean(pvalues <= ALPHA)
    # Truth: Binomial(150, 0.05) rejections, 3.5 standard errors.
    assert rate <= ALPHA + 3.5 * se, rate


def test_unblocked_permutations_over_reject_on_autocorrelated_chains():
    rng = np.random.default_rng(9)
    n_rep = 60
    rejected = 0
    for r in range(n_rep):
        x = ar1(rng, 2, 300, 0.8)
        res = steindiag.mmd(x, n_permutations=100, block_length=1, rng=r)
        rejected += res["pvalue"].values[0, 1] <= ALPHA
    # Truth: permuting single draws treats an AR(1) chain (rho = 0.8, tau = 9) as ~9 times
    # more informative than it is, so the null is rejected far more often than 5%
    # (the reason for blocks); 0.05 + 3.5 se = 0.15 for 60 replicates.
    assert rejected / n_rep > 0.2


# -- labels, options, errors --------------------------------------------------------------


def test_labels_attrs_and_chain_order():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 100, 2))
    posterior = xr.Dataset({"theta": (("chain", "draw", "k"), x)}, coords={"chain": [5, 6, 9]})
    res = steindiag.mmd(posterior)
    assert list(res["chain"].values) == [5, 6, 9]
    assert list(res["chain_other"].values) == [5, 6, 9]
    assert res.attrs["kernel"] == "IMQ" and res.attrs["preconditioner"] == "standardize"
    order = [2, 0, 1]
    swapped = steindiag.mmd(x[order])
    # Truth: MMD^2 of a pair does not depend on the order of the chains (symmetry).
    np.testing.assert_allclose(swapped.values,
                               res.values[np.ix_(order, order)], rtol=1e-12)
    np.testing.assert_allclose(res.values, res.values.T, rtol=0, atol=0)


def test_same_seed_same_pvalues():
    x = np.random.default_rng(11).standard_normal((3, 200, 1))
    first = steindiag.mmd(x, n_permutations=50, rng=3)
    second = steindiag.mmd(x, n_permutations=50, rng=3)
    # Truth: randomness only through rng=.
    xr.testing.assert_identical(first, second)


def test_few_blocks_degrade_to_unreliable_or_nan_pvalues():
    x = ar1(np.random.default_rng(12), 2, 100, 0.9)
    plain = steindiag.mmd(x)
    # Truth: tau ~ 19 for rho = 0.9 (closed form), so blocks of 5 tau cannot fit 3 times:
    # the statistic is still returned (the same as without permutations: permutations do
    # not enter MMD^2; to rounding, the sums are taken over blocks), the p-value is NaN and marked unreliable, with a warning.
    with pytest.warns(UserWarning, match="not computed"):
        res = steindiag.mmd(x, n_permutations=10, rng=0)
    np.testing.assert_allclose(res.values, plain.values, rtol=1e-10, atol=1e-14)
    assert np.isnan(res.pvalue.values).all()
    assert not res.pvalue_reliable.values.any()
    # Truth: 100 draws in blocks of 20 give 5 blocks: between 3 and 10, a p-value marked
    # unreliable.
    with pytest.warns(UserWarning, match="blocks per chain"):
        res = steindiag.mmd(x, n_permutations=10, block_length=20, rng=0)
    assert np.isfinite(res.pvalue.values[0, 1]) and not res.pvalue_reliable.values.any()
    with pytest.warns(UserWarning, match="not computed"):
        res = steindiag.mmd(x[0], x[1], n_permutations=10, rng=0)
    assert np.isnan(res.pvalue.item()) and not res.pvalue_reliable.item()


def test_enough_blocks_are_marked_reliable():
    x = np.random.default_rng(13).standard_normal((2, 200, 1))
    # Truth: independent draws: blocks of 2 draws (at least 1/100 of the chain) give 100
    # blocks per chain, at least 10.
    res = steindiag.mmd(x, n_permutations=10, rng=0)
    assert res.pvalue_reliable.values.all()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_permutations": -1}, ValueError, "n_permutations must be an integer >= 0; got -1"),
        ({"n_permutations": 2.5}, TypeError, "n_permutations"),
        ({"block_length": 0}, ValueError, "block_length must be 'auto' or a positive"),
        ({"block_length": "long"}, TypeError, "block_length"),
        ({"rng": "x"}, TypeError, "rng must be"),
        ({"c": 0.0}, ValueError, "c must be"),
        ({"preconditioner": "nope"}, ValueError, "preconditioner must be one of"),
    ],
)
def test_invalid_arguments_are_named(kwargs, error, match):
    x = np.random.default_rng(0).standard_normal((2, 50, 2))
    with pytest.raises(error, match=match):
        steindiag.mmd(x, **kwargs)


def test_one_chain_needs_other_and_dimensions_must_agree():
    x = np.random.default_rng(0).standard_normal((1, 50, 2))
    with pytest.raises(ValueError, match="data has one chain"):
        steindiag.mmd(x)
    with pytest.raises(ValueError, match="same number of parameters"):
        steindiag.mmd(x, np.zeros((1, 50, 3)) + np.arange(3))
    with pytest.raises(ValueError, match="other"):
        steindiag.mmd(x, np.full((1, 50, 2), np.nan))


# -- plot ---------------------------------------------------------------------------------


def test_plot_mmd_draws_the_values():
    x = np.random.default_rng(13).standard_normal((4, 200, 2))
    x[3] += 2.0
    res = steindiag.mmd(x, n_permutations=100, rng=0)
    fig, ax = plt.subplots()
    steindiag.plot_mmd(res, alpha=0.05, ax=ax)
    images = [im for im in ax.get_images() if im.get_gid() == "mmd2"]
    # Truth: the image holds the Dataset's values unchanged.
    np.testing.assert_array_equal(images[0].get_array(), res.values)
    flagged = {p.get_gid() for p in ax.patches}
    expected = {f"flag[{i},{j}]" for i in range(4) for j in range(4)
                if i != j and res["pvalue"].values[i, j] < 0.05}
    # Truth: exactly the pairs with p < alpha are outlined.
    assert flagged == expected and "flag[0,3]" in flagged
    labels = {t.get_gid(): t.get_text() for t in ax.texts}
    assert labels["label[0,3]"].startswith(f"{res.values[0, 3]:.2g}")
    # Without the p-value coordinate: no p-values, no flags.
    fig2, ax2 = plt.subplots()
    steindiag.plot_mmd(res.drop_vars("pvalue"), annotate=False, ax=ax2)
    assert not ax2.patches and not ax2.texts
    # A result saved as a Dataset and read back draws the same flags.
    fig3, ax3 = plt.subplots()
    steindiag.plot_mmd(res.to_dataset(), alpha=0.05, ax=ax3)
    assert {p.get_gid() for p in ax3.patches} == expected
    plt.close("all")


@pytest.mark.skipif(importlib.util.find_spec("arviz_plots") is None,
                    reason="needs arviz-plots (ArviZ 1.x)")
def test_plot_mmd_plot_collection_draws_the_values():
    x = np.random.default_rng(13).standard_normal((4, 200, 2))
    x[3] += 2.0
    res = steindiag.mmd(x, n_permutations=100, rng=0)
    pc = steindiag.plot_mmd(res, alpha=0.05)
    ax = pc.viz["figure"].item().axes[0]
    # One filled square per pair, at (column j, height 3 - i): the first chain on top.
    for i in range(4):
        for j in range(4):
            cell = pc.viz[f"cells_{i}_{j}"]["mmd2"].item()
            corners = cell.get_paths()[0].vertices
            np.testing.assert_allclose(corners[:, 0].min(), j - 0.5)
            np.testing.assert_allclose(corners[:, 1].max(), 3 - i + 0.5)
    flagged = {name for name in pc.viz.children if name.startswith("flags_")}
    expected = {f"flags_{i}_{j}" for i in range(4) for j in range(4)
                if i != j and res["pvalue"].values[i, j] < 0.05}
    assert flagged == expected and "flags_0_3" in flagged
    text = pc.viz["labels_0_3"]["mmd2"].item().get_text()
    assert text.startswith(f"{res.values[0, 3]:.2g}")
    # The brightest cell is the largest value (the colour scale runs from 0 to the max).
    i, j = np.unravel_index(np.argmax(res.values), res.shape)
    brightest = pc.viz[f"cells_{i}_{j}"]["mmd2"].item().get_facecolor()[0]
    import matplotlib

    assert matplotlib.colors.to_hex(brightest) == matplotlib.colors.to_hex(
        matplotlib.colormaps["viridis"](1.0))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3"]
    plt.close("all")


def test_plot_mmd_rejects_other_input():
    x = np.random.default_rng(14).standard_normal((2, 50, 1))
    two_sample = steindiag.mmd(x[:1], x[1:])
    with pytest.raises(ValueError, match="chain_other"):
        steindiag.plot_mmd(two_sample)
    with pytest.raises(TypeError, match="steindiag.mmd"):
        steindiag.plot_mmd(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="alpha"):
        steindiag.plot_mmd(steindiag.mmd(x), alpha=2.0)


def test_no_warning_on_healthy_input():
    x = np.random.default_rng(15).standard_normal((3, 300, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steindiag.mmd(x, n_permutations=20, rng=0)


def test_model_compares_unconstrained_draws():
    pm = pytest.importorskip("pymc")
    with pm.Model() as model:
        pm.Normal("mu", 0.0, 1.0)
        pm.HalfNormal("sigma", 1.0)
    rng = np.random.default_rng(16)
    mu = rng.standard_normal((2, 80))
    sigma = np.abs(rng.standard_normal((2, 80))) + 0.05
    posterior = xr.Dataset({"mu": (("chain", "draw"), mu), "sigma": (("chain", "draw"), sigma)})
    res = steindiag.mmd(posterior, model=model, preconditioner="identity")
    unconstrained = np.stack([mu, np.log(sigma)], axis=-1)
    # Truth: with model=, draws are the value variables (sigma_log__ = log sigma), and the
    # explicit-matrix MMD^2_U of tests/reference.py on them.
    np.testing.assert_allclose(res.values[0, 1],
                               mmd2_u(unconstrained[0], unconstrained[1], np.eye(2)), rtol=1e-10)
    assert json.loads(res.attrs["parameters"]) == ["mu", "sigma_log__"]
    plain = steindiag.mmd(posterior, preconditioner="identity")
    # Truth: without a model the stored (constrained) values are compared.
    np.testing.assert_allclose(plain.values[0, 1],
                               mmd2_u(np.stack([mu[0], sigma[0]], -1),
                                      np.stack([mu[1], sigma[1]], -1), np.eye(2)), rtol=1e-10)
