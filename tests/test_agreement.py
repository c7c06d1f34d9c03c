"""Tests of the streamed test that all chains agree (many chains: ``methods.agreement``).

Sources of truth: the explicit base-kernel matrix of tests/reference.py (block sums,
MMD^2_U, and the statistic recomputed pair by pair with the same relabellings); the
dense path of ``methods.mmd`` where both apply (same units, same relabellings: the same
p-value); closed forms for the level (valid chains: rejections at most Binomial(R, alpha)).
"""

import sys
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from scipy import stats

import steindiag
from steindiag.engine import memory
from steindiag.engine.multi_products import base_kernel_unit_rows
from steindiag.engine.permutations import grouped_within_sums, within_sums
from steindiag.kernels import IMQ
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods import agreement, mmd as mmd_methods
from steindiag.methods.agreement import plan_units, unit_row_sums
from steindiag.stats.mmd import block_units

sys.path.insert(0, str(Path(__file__).parent))
from reference import imq_base_kernel_matrix, mmd2_u  # noqa: E402
from valid_chains import ar1_chains  # noqa: E402

ALPHA = 0.05


def _mmd(x, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "read as (chain, draw, d)" for many chains
        return steindiag.mmd(x, **options)


def test_unit_rows_match_reference_and_do_not_depend_on_threads():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((700, 3))
    starts = np.array([0, 1, 8, 300, 301, 450, 700], dtype=np.int64)
    pre = make_preconditioner("identity", x, ["a", "b", "c"])
    lower = unit_row_sums(x, starts, pre, IMQ())
    K = imq_base_kernel_matrix(x, x, np.eye(3))
    # Truth: block sums of the explicit base-kernel matrix: for u > v all pairs between
    # the blocks, on the diagonal the pairs j < i inside the block, zeros above.
    n_units = len(starts) - 1
    expected = np.zeros((n_units, n_units))
    for u in range(n_units):
        for v in range(u + 1):
            block = K[starts[u]:starts[u + 1], starts[v]:starts[v + 1]]
            expected[u, v] = np.tril(block, -1).sum() if u == v else block.sum()
    np.testing.assert_allclose(lower, expected, rtol=1e-12, atol=0)
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        single = unit_row_sums(x, starts, pre, IMQ())
    finally:
        numba.set_num_threads(saved)
    # Truth: each unit's row is summed by one task in a fixed order, whatever the threads.
    np.testing.assert_array_equal(lower, single)


def test_unit_rows_leave_the_upper_triangle_alone():
    x = np.random.default_rng(2).standard_normal((50, 2))
    starts = np.array([0, 10, 30, 50], dtype=np.int64)
    pre = make_preconditioner("identity", x, ["a", "b"])
    draws_t = np.ascontiguousarray(x.T[None])
    out = np.full((3, 3), 7.0)
    base_kernel_unit_rows(draws_t, pre.a, pre.isotropic, IMQ().numba_kind, IMQ().numba_params,
                          starts, out)
    # Truth: the documented contract (only on and below the diagonal is written).
    assert out[0, 1] == out[0, 2] == out[1, 2] == 7.0


def test_grouped_sums_match_every_pair_sums():
    rng = np.random.default_rng(5)
    n_units, n_labels = 60, 12
    sums = rng.random((n_units, n_units))
    sums = sums + sums.T
    sizes = rng.integers(1, 9, n_units).astype(float)
    counts = np.outer(sizes, sizes)
    labels = np.stack([rng.permutation(np.repeat(np.arange(n_labels), 5)) for _ in range(30)])
    got = grouped_within_sums(np.tril(sums), sizes, labels, n_labels)
    # Truth: the plain loop over every pair u < v with equal labels.
    expected_sums = [sum(sums[u, v] for u in range(n_units) for v in range(u + 1, n_units)
                         if row[u] == row[v]) for row in labels]
    expected_counts = [sum(counts[u, v] for u in range(n_units) for v in range(u + 1, n_units)
                           if row[u] == row[v]) for row in labels]
    np.testing.assert_allclose(got[0], expected_sums, rtol=1e-12)
    np.testing.assert_allclose(got[1], expected_counts, rtol=1e-12)
    # And the existing every-pair kernel agrees (the dense path's).
    np.testing.assert_allclose(within_sums(sums, counts, labels)[0], expected_sums, rtol=1e-12)


@pytest.mark.parametrize("n_chain, n_blocks, max_units", [(20, 12, 40), (30, 7, 60),
                                                          (5, 9, 1000), (3, 3, 6)])
def test_units_are_equal_runs_of_every_other_block(n_chain, n_blocks, max_units):
    n_draw = 4 * n_blocks + 3   # the last block of each chain is longer
    block_start, _ = block_units(n_chain, n_draw, 4)
    units = plan_units(block_start, n_chain, n_blocks, max_units)
    used = (n_blocks + 1) // 2
    m, b = units.per_chain, units.blocks_per_unit
    # Truth (the documented plan): m >= 2 units per chain of b used blocks each, at most
    # max(2, max_units // C) of them, fewer than b used blocks left out at each chain's end.
    assert m >= 2 and m <= max(2, max_units // n_chain) and m * b + units.left_out == used
    assert units.left_out < b
    assert np.array_equal(units.unit_chain, np.repeat(np.arange(n_chain), m))
    for c in range(n_chain):
        for k in range(m):
            u = c * m + k
            rows = units.rows[units.unit_start[u]:units.unit_start[u + 1]]
            blocks = [c * n_blocks + 2 * j for j in range(k * b, (k + 1) * b)]
            expected = np.concatenate([np.arange(block_start[q], block_start[q + 1])
                                       for q in blocks])
            assert np.array_equal(rows, expected)


def test_streamed_pvalue_matches_explicit_recomputation(monkeypatch):
    # 20 chains of 24 draws in blocks of 2: 12 blocks, 6 used per chain, merged into 2
    # units of 3 used blocks when at most 40 units are allowed; the streamed path is forced
    # by a dense limit below the 240 blocks.
    monkeypatch.setattr(mmd_methods, "DENSE_MAX_UNITS", 100)
    monkeypatch.setattr(agreement, "MAX_UNITS", 40)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((20, 24, 1))
    x[3] += 0.8
    n_perm = 40
    res = _mmd(x, test="all", n_permutations=n_perm, block_length=2, rng=9,
               preconditioner="identity")
    assert res.attrs["agreement_units_per_chain"] == 2
    # Independent recomputation from the explicit matrix: unit of every draw (-1 unused:
    # the odd blocks), statistic = mean K over pairs of draws in different units with the
    # same chain label minus the mean over pairs with different labels; the relabellings
    # drawn as the documented generator calls (one chunk of n_perm rows).
    pooled = x.reshape(-1, 1)
    K = imq_base_kernel_matrix(pooled, pooled, np.eye(1))
    draw = np.arange(24)
    block = draw // 2
    unit_in_chain = np.where(block % 2 == 0, (block // 2) // 3, -1)
    unit = np.where(unit_in_chain >= 0, np.arange(20)[:, None] * 2 + unit_in_chain, -1).ravel()
    upper = np.triu(np.ones_like(K, dtype=bool), 1)
    pair = upper & (unit[:, None] >= 0) & (unit[None, :] >= 0) & (unit[:, None] != unit[None, :])
    unit_chain = np.repeat(np.arange(20), 2)

    def statistic(labels):
        label = np.where(unit >= 0, labels[np.maximum(unit, 0)], -1)
        same = pair & (label[:, None] == label[None, :])
        return K[same].mean() - K[pair & ~same].mean()

    observed = statistic(unit_chain)
    relabelled = np.random.default_rng(9).permuted(np.tile(unit_chain, (n_perm, 1)), axis=1)
    permuted = np.array([statistic(row) for row in relabelled])
    # Truth: (1 + #{relabelled >= observed}) / (1 + B) and the statistic, pair by pair.
    assert float(res.pvalue) == pytest.approx((1 + np.sum(permuted >= observed)) / (1 + n_perm))
    assert float(res.agreement_statistic) == pytest.approx(observed, rel=1e-10)
    # Truth: MMD^2_U between chains from the explicit matrix (tests/reference.py).
    for i, j in [(0, 3), (5, 17)]:
        assert float(res.values[i, j]) == pytest.approx(mmd2_u(x[i], x[j], np.eye(1)),
                                                        rel=1e-10, abs=1e-14)


def test_streamed_equals_dense_without_merging(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 30, 2))
    dense = _mmd(x, test="all", n_permutations=99, block_length=3, rng=4)
    # 400 blocks, 200 used: the streamed path relabels the same units with the same draws.
    monkeypatch.setattr(mmd_methods, "DENSE_MAX_UNITS", 100)
    streamed = _mmd(x, test="all", n_permutations=99, block_length=3, rng=4)
    assert "agreement_units_per_chain" not in dense.attrs
    assert streamed.attrs["agreement_units_per_chain"] == 5
    # Truth: the dense path (the same statistic over the same pairs, the same relabellings).
    assert float(streamed.pvalue) == float(dense.pvalue)
    np.testing.assert_allclose(float(streamed.agreement_statistic),
                               float(dense.agreement_statistic), rtol=1e-10)
    np.testing.assert_allclose(streamed.values, dense.values, rtol=1e-10, atol=1e-14)


def test_too_large_a_request_is_refused_up_front(monkeypatch):
    monkeypatch.setattr(mmd_methods, "DENSE_MAX_UNITS", 50)
    monkeypatch.setattr(memory, "available_memory", lambda: 1000.0)
    x = np.random.default_rng(0).standard_normal((40, 30, 2))
    # Truth: the documented refusal, naming the size and what to change.
    with pytest.raises(MemoryError, match=r"test that all 40 chains agree .* would need "
                                          r"about .* GiB, more than the .* available"):
        _mmd(x, test="all", n_permutations=20, block_length=3, rng=1)
    with pytest.raises(MemoryError, match=r"permutation tests between 400 blocks.*"
                                          r"block_length="):
        _mmd(x, test="pairs", n_permutations=20, block_length=3, rng=1)


def test_streamed_test_holds_its_level_and_sees_chains_in_two_modes(monkeypatch):
    # 100 chains of 60 draws (tau 1.9: blocks of 10, 3 used per chain): 600 blocks (made
    # "many" by lower limits, to keep the test fast), 300 used, more than 200 units, so 2
    # units per chain.
    monkeypatch.setattr(mmd_methods, "DENSE_MAX_UNITS", 100)
    monkeypatch.setattr(agreement, "MAX_UNITS", 200)
    reps, pvalues = 100, []
    for rep in range(reps):
        rng = np.random.default_rng([35, rep])
        chains = ar1_chains(100, 60, 2, 0.3, rng=rng)
        res = _mmd(chains.draws, test="all", n_permutations=199, rng=rng)
        pvalues.append(float(res.pvalue))
    assert res.attrs["agreement_units_per_chain"] == 2
    # Truth: chains of one stationary process have one distribution; the bound is the
    # 0.999 quantile of Binomial(100, 0.05).
    assert np.sum(np.array(pvalues) <= ALPHA) <= stats.binom.ppf(0.999, reps, ALPHA)
    rng = np.random.default_rng(36)
    draws = ar1_chains(100, 60, 2, 0.3, rng=rng).draws
    draws[::2, :, 0] += 3.0     # every other chain in another mode
    res = _mmd(draws, test="all", n_permutations=199, rng=rng)
    # Truth: two groups of chains with different distributions (Gretton et al. 2012):
    # no relabelling keeps the chains' own units together, so the observed statistic is
    # the largest: p = 1 / 200.
    assert float(res.pvalue) == pytest.approx(1 / 200)


def test_diagnose_on_many_chains_reads_the_streamed_test():
    rng = np.random.default_rng(37)
    chains = ar1_chains(400, 30, 2, 0.3, rng=rng)
    draws = chains.draws.copy()
    draws[::2, :, 0] += 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = steindiag.diagnose(draws, score=chains.score, mode_search=False, rng=1)
    # Truth: chains in two places disagree (as above); the verdict says so.
    assert float(res["agreement_pvalue"]) <= 1 / 1000 + 1e-12
    assert str(res["verdict_pooled"].values) == "does not fit"
