"""The dask.distributed engine (``client=``) against the local engine and independent truth.

Sources of truth:
- the local engine: the same kernels on the same prepared arrays, each row's sum in the
  same order, so every output must agree to 1e-12 relative (the issue's bar); the local
  engine is itself checked against reference.py in tests/test_engine.py;
- reference.py: the explicit N x N Stein kernel matrix, for one case end to end;
- the scheduler's own task list (nothing left behind) and the error contracts.

One LocalCluster of 2 worker processes with 1 thread each serves the whole module.
"""

import sys
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import steindiag  # noqa: E402
from steindiag.engine.local import _MANY_CHAINS  # noqa: E402
from steindiag.engine.dask import resolve_backend  # noqa: E402
from steindiag.kernels import IMQ  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from reference import imq_stein_kernel_matrix, quadratic_forms, reference_ksd  # noqa: E402

RTOL = 1e-12
KSD_VARS = ["ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled", "ksd2_u", "ksd2_u_pooled"]
PATH_VARS = ["ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled"]


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    # The workers must run this checkout's steindiag, not another installed copy.
    files = set(client.run(lambda: __import__("steindiag").__file__).values())
    assert files == {steindiag.__file__}, files
    yield client
    client.close()
    cluster.close()


def _draws(n_chain, n_draw, d, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_chain, n_draw, d)) * rng.uniform(0.5, 2.0, size=d)
    return x, -x + 0.3 * rng.standard_normal(x.shape)


def _assert_same(local, remote, names, what):
    for name in names:
        np.testing.assert_allclose(remote[name].values, local[name].values, rtol=RTOL,
                                   atol=RTOL * float(np.max(np.abs(local["ksd"].values)) ** 2),
                                   err_msg=f"{what}: {name}")
    assert remote.attrs.keys() == local.attrs.keys()


# (n_chain, n_draw, d): one chain, several chains, and more chains than _MANY_CHAINS (the
# pooled sums as one time-major sequence, the same-chain sums in their own tasks).
SHAPES = {"one chain": (1, 700, 4), "three chains": (3, 300, 5),
          "many chains": (_MANY_CHAINS["fused"] + 6, 12, 3)}


@pytest.mark.parametrize("method", ["fused", "gemm"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_ksd_and_path_match_local_engine(client, method, shape):
    x, s = _draws(*shape)
    options = dict(score=s, method=method, sample_dims=("chain", "draw"))
    # Truth: the local engine (same kernels, same summation order per row).
    _assert_same(steindiag.ksd(x, **options), steindiag.ksd(x, client=client, **options),
                 KSD_VARS, f"ksd {method} {shape}")
    _assert_same(steindiag.ksd_path(x, **options),
                 steindiag.ksd_path(x, client=client, **options), PATH_VARS,
                 f"ksd_path {method} {shape}")


@pytest.mark.parametrize("preconditioner", ["smpcov", "standardize"])
def test_gemm_non_isotropic_and_tiles_match_local_engine(client, preconditioner):
    # smpcov: a full Lambda, so the BLAS path's three-block panels [Z, Y, S]; a small
    # tile makes many row tiles and so many tasks of uneven length.
    x, s = _draws(2, 400, 6, seed=1)
    options = dict(score=s, method="gemm", preconditioner=preconditioner)
    local = steindiag.ksd_path(x, **options)
    from steindiag.engine.local import stein_row_sums
    from steindiag.kernels.preconditioner import make_preconditioner

    pre = make_preconditioner(preconditioner, x.reshape(-1, 6), list(range(6)))
    backend = resolve_backend(client)
    sums = [stein_row_sums(x, s, kernel=IMQ(), preconditioner=pre, method="gemm",
                           tile_rows=32, backend=b) for b in (None, backend)]
    for field in ("diagonal", "row_same", "row_all"):
        # Truth: the local engine with the same tiles.
        np.testing.assert_allclose(getattr(sums[1], field), getattr(sums[0], field),
                                   rtol=RTOL, atol=RTOL * np.abs(sums[0].row_all).max())
    _assert_same(local, steindiag.ksd_path(x, client=client, **options), PATH_VARS, "path")


def test_matches_reference_matrix(client):
    # Truth: reference.py, the explicit N x N kernel matrix and every prefix recomputed.
    x, s = _draws(2, 40, 3, seed=2)
    res = steindiag.ksd(x, score=s, preconditioner="smpcov", c=0.7, beta=-0.3, client=client)
    path = steindiag.ksd_path(x, score=s, preconditioner="smpcov", c=0.7, beta=-0.3,
                              method="gemm", client=client)
    ref = reference_ksd(x, s, "smpcov", c=0.7, beta=-0.3)
    for name in ["ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled"]:
        np.testing.assert_allclose(res[name].values, ref[name], rtol=1e-10)
    np.testing.assert_allclose(path["ksd"].values, ref["path"], rtol=1e-10)
    np.testing.assert_allclose(path["ksd_pooled"].values, ref["path_pooled"], rtol=1e-10)


TEST_SHAPES = {"one chain": (1, 500, 3), "four chains": (4, 150, 2),
               "many chains": (20, 15, 2)}


@pytest.mark.filterwarnings("ignore:ksd_test. chains:UserWarning")
@pytest.mark.parametrize("pooled", [True, False])
@pytest.mark.parametrize("shape", TEST_SHAPES.values(), ids=TEST_SHAPES.keys())
def test_ksd_test_matches_local_engine(client, shape, pooled):
    x, s = _draws(*shape, seed=3)
    options = dict(score=s, n_bootstrap=40, rng=5, pooled=pooled,
                   sample_dims=("chain", "draw"))
    local = steindiag.ksd_test(x, **options)
    remote = steindiag.ksd_test(x, client=client, **options)
    # Truth: the local engine; same seed, so the same bootstrap weights.
    names = [name for name in local.data_vars if name != "flip_probability"]
    for name in names:
        np.testing.assert_allclose(remote[name].values, local[name].values, rtol=RTOL,
                                   err_msg=name)


def test_ksd_test_products_match_reference(client):
    # Truth: w^T K_p w from the explicit matrix of reference.py (pooled: all points; per
    # chain: that chain's block), for the all-ones column (the statistic) and random ones.
    from steindiag.engine import forms
    from steindiag.kernels.preconditioner import make_preconditioner

    rng = np.random.default_rng(4)
    x, s = _draws(3, 60, 2, seed=4)
    n = x.shape[0] * x.shape[1]
    weights = np.ascontiguousarray(np.column_stack([np.ones(n), rng.standard_normal((n, 5))]))
    pre = make_preconditioner("identity", x.reshape(-1, 2), ["a", "b"])
    per_chain, pooled = forms.quadratic_forms(x, s, pre, IMQ(), weights, True,
                                            backend=resolve_backend(client))
    flat_x, flat_s = x.reshape(-1, 2), s.reshape(-1, 2)
    kernel = imq_stein_kernel_matrix(flat_x, flat_s, flat_x, flat_s, np.eye(2))
    np.testing.assert_allclose(pooled, quadratic_forms(kernel, weights), rtol=1e-10)
    for ch in range(3):
        rows = slice(ch * 60, (ch + 1) * 60)
        np.testing.assert_allclose(per_chain[ch],
                                   quadratic_forms(kernel[rows, rows], weights[rows]),
                                   rtol=1e-10)


def test_fewer_rows_than_workers(client):
    # Fewer row tiles and draws than worker threads: some blocks are empty, none is lost.
    x, s = _draws(1, 3, 2, seed=5)
    for method in ("fused", "gemm"):
        local = steindiag.ksd_path(x, score=s, method=method, sample_dims=("chain", "draw"))
        remote = steindiag.ksd_path(x, score=s, method=method, sample_dims=("chain", "draw"),
                                    client=client)
        _assert_same(local, remote, PATH_VARS, method)


def test_nothing_left_on_the_cluster(client):
    # The scattered arrays and the block results are released when the call returns.
    x, s = _draws(2, 200, 4, seed=6)
    steindiag.ksd(x, score=s, client=client)
    steindiag.ksd_test(x, score=s, n_bootstrap=10, rng=0, bootstrap="iid", client=client)
    # Releasing is a message to the scheduler: allow it a few seconds to arrive.
    deadline = time.monotonic() + 10.0
    while True:
        keys = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))
        if not keys or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert keys == []


@pytest.mark.parametrize("function", [steindiag.ksd, steindiag.ksd_path, steindiag.ksd_test])
def test_bad_client_type(function):
    x, s = _draws(1, 20, 2)
    with pytest.raises(TypeError, match="client must be None or a dask.distributed.Client"):
        function(x, score=s, client="tcp://127.0.0.1:8786")


def test_closed_client_refused():
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    client.close()
    cluster.close()
    x, s = _draws(1, 20, 2)
    with pytest.raises(ValueError, match="running dask.distributed.Client"):
        steindiag.ksd(x, score=s, client=client)


def test_missing_distributed_names_the_extra(monkeypatch):
    # None in sys.modules makes ``import distributed`` raise ImportError.
    monkeypatch.setitem(sys.modules, "distributed", None)
    x, s = _draws(1, 20, 2)
    with pytest.raises(ImportError, match=r"steindiag\[dask\]"):
        steindiag.ksd(x, score=s, client=object())


@pytest.mark.parametrize("kernel", ["gaussian", "matern32", "matern52"])
@pytest.mark.parametrize("method", ["fused", "gemm"])
def test_other_base_kernels_match_local_engine(client, kernel, method):
    # Truth: the local engine (itself checked against tests/reference.py for every base
    # kernel in test_kernels.py); the workers receive the kernel's Numba token and
    # parameters with the draws.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 150, 4))
    s = -x + 0.2
    local = steindiag.ksd(x, score=s, kernel=kernel, method=method)
    remote = steindiag.ksd(x, score=s, kernel=kernel, method=method, client=client)
    for name in KSD_VARS:
        np.testing.assert_allclose(remote[name].values, local[name].values, rtol=RTOL)
    assert remote.attrs["kernel"] == local.attrs["kernel"]
