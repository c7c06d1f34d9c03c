"""Memory: the KSD test's weights in passes over their columns, and requests too large for
the memory available refused up front (issue 35, point 3).

Sources of truth: the explicit Stein kernel matrix of tests/reference.py (w^T K_p w for
the weights drawn pass by pass from the same generator); the documented pass sizes and
refusal messages; the operating system's own limit (``ulimit -v``) in a child process.
"""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import steindiag
from steindiag.engine import memory
from steindiag.methods import ksd_test as ksd_test_methods
from steindiag.methods.ksd_test import bootstrap_memory, weight_passes
from steindiag.stats.bootstrap import bootstrap_weights

sys.path.insert(0, str(Path(__file__).parent))
from reference import imq_stein_kernel_matrix, quadratic_forms  # noqa: E402


def test_weight_passes_cover_every_column_once():
    # Truth: the documented rule: one pass while W (n_rows, 1 + B) takes at most 1 GiB,
    # else passes of that many columns, the first holding the all-ones column too.
    assert weight_passes(60_000, 1000) == [1000]
    per_pass = 2**30 // (8 * 100_000)
    passes = weight_passes(100_000, 20_000)
    assert sum(passes) == 20_000 and passes[0] == per_pass - 1
    assert all(p == per_pass for p in passes[1:-1]) and 0 < passes[-1] <= per_pass
    assert weight_passes(10**9, 500)[:2] == [63, 64]     # at least 64 columns a pass


@pytest.mark.parametrize("bootstrap", ["iid", "thinned"])
def test_passes_over_columns_give_the_forms_of_the_weights_drawn(monkeypatch, bootstrap):
    # W of 2 chains x 60 draws, 45 replicates, in passes of 16 columns (15 KiB of W);
    # independent draws whose estimated autocorrelation times give lag 1 (this seed; the
    # first assertion checks it), so the thinned test reads every draw like "iid".
    monkeypatch.setattr(ksd_test_methods, "_WEIGHT_PASS_BYTES", 8 * 120 * 16)
    monkeypatch.setattr(ksd_test_methods, "_MIN_PASS_COLUMNS", 1)
    rng = np.random.default_rng(42)
    x = rng.standard_normal((2, 60, 2))
    s = -x
    res = steindiag.ksd_test(x, score=s, bootstrap=bootstrap, n_bootstrap=45, rng=3,
                             preconditioner="identity")
    assert bootstrap == "iid" or res.attrs["thinning_lag"] == 1
    generator = np.random.default_rng(3)
    passes = weight_passes(120, 45)
    assert passes == [15, 16, 14]
    weights = np.concatenate([bootstrap_weights("iid", generator, 2, 60, n, np.full(2, 0.5),
                                                statistic=k == 0)
                              for k, n in enumerate(passes)], axis=1)
    flat_x, flat_s = x.reshape(-1, 2), s.reshape(-1, 2)
    K = imq_stein_kernel_matrix(flat_x, flat_s, flat_x, flat_s, np.eye(2))
    pooled = quadratic_forms(K, weights) / 120
    # Truth: N^-1 w^T K_p w from the explicit matrix, with the weights drawn pass after
    # pass from the same generator (the statistic's all-ones column first).
    assert float(res["statistic_pooled"]) == pytest.approx(pooled[0], rel=1e-10)
    np.testing.assert_allclose(res["bootstrap_statistic_pooled"].values, pooled[1:],
                               rtol=1e-9, atol=1e-12)
    chain = quadratic_forms(K[60:, 60:], weights[60:]) / 60
    np.testing.assert_allclose(res["bootstrap_statistic"].values[1], chain[1:], rtol=1e-9,
                               atol=1e-12)


def test_one_pass_below_the_limit_is_unchanged(monkeypatch):
    rng = np.random.default_rng(41)
    x = rng.standard_normal((2, 80, 2))
    before = steindiag.ksd_test(x, score=-x, n_bootstrap=50, rng=5)
    monkeypatch.setattr(ksd_test_methods, "_WEIGHT_PASS_BYTES", 8 * 160 * 51)
    same = steindiag.ksd_test(x, score=-x, n_bootstrap=50, rng=5)
    # Truth: W fits in one pass at both limits, so the draws of the generator and the
    # arithmetic are the same: equal bit for bit.
    np.testing.assert_array_equal(before["bootstrap_statistic"].values,
                                  same["bootstrap_statistic"].values)


def test_bootstrap_memory_stays_bounded_in_passes():
    small = bootstrap_memory(4, 25_000, 10, 1000, pooled=True, damped=False,
                             estimator="exact")
    large = bootstrap_memory(4, 25_000, 10, 100_000, pooled=True, damped=False,
                             estimator="exact")
    # Truth (closed forms): W alone is (1 + B) N 8 bytes, 0.75 GiB for B = 1000 (one pass)
    # and 74.5 GiB for B = 100,000, which is read in passes of 1 GiB: what the estimate
    # holds beyond is a pass's shares of the forms and the replicates (5 x 100,001
    # doubles, twice).
    assert 0.75 * 2**30 < small < 2.5 * 2**30
    assert 2**30 < large < 4 * 2**30
    nystrom = bootstrap_memory(1000, 100, 10, 10**8, pooled=True, damped=False,
                               estimator="nystrom")
    # Truth: the replicates alone, 1001 x 10^8 doubles twice, are 1.5 TiB.
    assert nystrom > 1.5 * 2**40


def test_requests_too_large_are_refused_up_front(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: 2.0**30)
    x = np.random.default_rng(0).standard_normal((4, 500, 3))
    with pytest.raises(MemoryError, match=r"ksd_test: the KSD test's bootstrap \(10000000 "
                                          r"replicates of 4 chain\(s\) x 500 draws\) would "
                                          r"need about .* GiB, more than the 1.00 GiB "
                                          r"available now. Pass a smaller n_bootstrap="):
        steindiag.ksd_test(x, score=-x, n_bootstrap=10**7, rng=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(MemoryError, match=r"diagnose: the KSD tests .* Pass a larger "
                                              r"alpha"):
            steindiag.diagnose(x, score=-x, n_bootstrap=10**7, mode_search=False, rng=1)


def test_available_memory_reads_the_address_space_limit():
    resource = pytest.importorskip("resource")
    script = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30));"
              "from steindiag.engine.memory import available_memory;"
              "print(available_memory())")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    # Truth: the process cannot allocate more than its address-space limit (6 GiB here)
    # minus what it already maps.
    assert 0 < int(out.stdout) < 6 * 2**30
    assert resource.RLIM_INFINITY != 6 * 2**30
