"""The trace input layer (steindiag.inputs._trace.read_trace) without PyMC.

Sources of truth: the arrays the test itself puts into the trace (draws must come out
unchanged, in the documented order), closed-form scores (N(0, 1): s(x) = -x), and the
error contract of issue 3 ("Bad input").
"""

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import steindiag
import steindiag.accessors  # noqa: F401  (registers DataTree.stein)
from trace_reading import prepare_trace
from steindiag._types import SteinInput


def _posterior(rng, n_chain=3, n_draw=40):
    return xr.Dataset(
        {
            "mu": (("chain", "draw"), rng.standard_normal((n_chain, n_draw))),
            "theta": (("chain", "draw", "school"), rng.standard_normal((n_chain, n_draw, 2))),
        },
        coords={"chain": [10, 11, 12][:n_chain], "draw": np.arange(n_draw), "school": ["a", "b"]},
    )


def _stacked(posterior):
    """Expected flat draws: mu, then theta[a], theta[b] (documented order)."""
    return np.concatenate(
        [posterior["mu"].values[..., None], posterior["theta"].values], axis=2
    )


def test_dataset_with_batched_callable():
    posterior = _posterior(np.random.default_rng(0))
    prepared = prepare_trace(posterior, score=lambda x: -x)
    assert isinstance(prepared, SteinInput)
    # Truth: the arrays put into the Dataset, concatenated in variable order.
    np.testing.assert_array_equal(prepared.draws, _stacked(posterior))
    # Truth: N(0, 1) score s(x) = -x.
    np.testing.assert_array_equal(prepared.scores, -_stacked(posterior))
    # Truth: the labelling rule (coordinate values where the dim has a coordinate, as
    # arviz.summary labels rows): school = ["a", "b"].
    assert prepared.parameter == ["mu", "theta[a]", "theta[b]"]
    np.testing.assert_array_equal(prepared.chain, [10, 11, 12])
    np.testing.assert_array_equal(prepared.draw, np.arange(40))
    assert prepared.attrs["score_source"] == "callable"
    assert prepared.draws.dtype == np.float64 and prepared.draws.flags.c_contiguous


def test_unbatched_callable_and_var_names():
    posterior = _posterior(np.random.default_rng(1))
    calls = []

    def score_one(x):
        calls.append(x.shape)
        return -2.0 * x

    prepared = prepare_trace(posterior, score=score_one, batched=False, var_names=["theta"])
    # Truth: batched=False passes one (d,) vector per draw.
    assert set(calls) == {(2,)} and len(calls) == 3 * 40
    np.testing.assert_array_equal(prepared.draws, posterior["theta"].values)
    np.testing.assert_array_equal(prepared.scores, -2.0 * posterior["theta"].values)
    assert prepared.parameter == ["theta[a]", "theta[b]"]


def test_datatree_and_transposed_dims():
    posterior = _posterior(np.random.default_rng(2))
    tree = xr.DataTree.from_dict({"posterior": posterior.transpose("draw", "school", "chain")})
    prepared = prepare_trace(tree, score=lambda x: -x)
    # Truth: same numbers as the untransposed Dataset; (chain, draw) are put first.
    np.testing.assert_array_equal(prepared.draws, _stacked(posterior))
    # The posterior node alone (``idata.posterior`` on ArviZ 1.x) is the group itself.
    node = prepare_trace(tree.posterior, score=lambda x: -x)
    np.testing.assert_array_equal(node.draws, _stacked(posterior))


def test_inference_data_arviz_0x():
    az = pytest.importorskip("arviz")
    if int(az.__version__.split(".")[0]) >= 1:
        pytest.skip("ArviZ >= 1 uses xarray.DataTree (tested above), not InferenceData")
    posterior = _posterior(np.random.default_rng(3))
    idata = az.InferenceData(posterior=posterior)
    prepared = prepare_trace(idata, score=lambda x: -x)
    # Truth: the arrays stored in the InferenceData.
    np.testing.assert_array_equal(prepared.draws, _stacked(posterior))


def test_coords_selection_and_sample_dims():
    posterior = _posterior(np.random.default_rng(4))
    prepared = prepare_trace(
        posterior, score=lambda x: -x, coords={"chain": [12, 10], "draw": slice(5, 24)}
    )
    # Truth: Dataset.sel with the same selection.
    expected = _stacked(posterior.sel(chain=[12, 10], draw=slice(5, 24)))
    np.testing.assert_array_equal(prepared.draws, expected)
    np.testing.assert_array_equal(prepared.chain, [12, 10])

    renamed = posterior.rename({"chain": "run", "draw": "iteration"})
    prepared = prepare_trace(renamed, score=lambda x: -x, sample_dims=("run", "iteration"))
    np.testing.assert_array_equal(prepared.draws, _stacked(posterior))

    one_chain = posterior.isel(chain=0, drop=True)
    prepared = prepare_trace(one_chain, score=lambda x: -x, sample_dims="draw")
    # Truth: a single sample dim means one chain.
    assert prepared.draws.shape == (1, 40, 3)
    np.testing.assert_array_equal(prepared.draws[0], _stacked(posterior)[0])


def test_score_arrays_dataarray_dataset():
    posterior = _posterior(np.random.default_rng(5))
    expected = -_stacked(posterior)
    # ndarray of the draws' shape.
    prepared = prepare_trace(posterior, score=expected)
    np.testing.assert_array_equal(prepared.scores, expected)
    assert prepared.attrs["score_source"] == "arrays"
    # DataArray with chains in another order and labelled parameters in another order:
    # aligned by the chain coordinate and the parameter labels.
    labels = ["mu", "theta[a]", "theta[b]"]
    shuffled = xr.DataArray(
        expected[::-1][:, :, ::-1],
        dims=("chain", "draw", "parameter"),
        coords={"chain": [12, 11, 10], "draw": np.arange(40), "parameter": labels[::-1]},
    )
    prepared = prepare_trace(posterior, score=shuffled)
    np.testing.assert_array_equal(prepared.scores, expected)
    # Dataset of scores with the posterior's variable names (x defined by its variables).
    score_ds = xr.Dataset({"theta": -posterior["theta"], "mu": -posterior["mu"]})
    prepared = prepare_trace(posterior, score=score_ds)
    assert prepared.parameter == ["theta[a]", "theta[b]", "mu"]
    np.testing.assert_array_equal(prepared.scores, -prepared.draws)


def _nutpie_like(rng):
    """A trace laid out as nutpie writes store_unconstrained/store_gradient stats."""
    labels = ["mu", "log_tau", "theta_0", "theta_1"]
    unconstrained = rng.standard_normal((2, 30, 4))
    gradient = -unconstrained
    stats = xr.Dataset(
        {
            "unconstrained_draw": (("chain", "draw", "unconstrained_parameter"), unconstrained),
            "gradient": (("chain", "draw", "unconstrained_parameter"), gradient),
        },
        coords={"chain": [0, 1], "draw": np.arange(30), "unconstrained_parameter": labels},
    )
    posterior = xr.Dataset({"mu": (("chain", "draw"), unconstrained[..., 0])},
                           coords={"chain": [0, 1], "draw": np.arange(30)})
    return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats}), labels


def test_nutpie_stored_gradients_without_model():
    tree, labels = _nutpie_like(np.random.default_rng(6))
    prepared = prepare_trace(tree)
    stats = tree["sample_stats"]
    # Truth: the stored arrays, used as they are (nothing is evaluated).
    np.testing.assert_array_equal(prepared.draws, stats["unconstrained_draw"].values)
    np.testing.assert_array_equal(prepared.scores, stats["gradient"].values)
    assert prepared.parameter == labels
    assert prepared.attrs["score_source"] == "nutpie"


def test_accessor_matches_function():
    posterior = _posterior(np.random.default_rng(7))
    tree = xr.DataTree.from_dict({"posterior": posterior})
    via_accessor = tree.stein.ksd(score=lambda x: -x, preconditioner="identity")
    via_function = steindiag.ksd(tree, score=lambda x: -x, preconditioner="identity")
    # Truth: the accessor is documented as a one-line wrapper of steindiag.ksd.
    xr.testing.assert_identical(via_accessor, via_function)
    np.testing.assert_array_equal(via_accessor["chain"].values, [10, 11, 12])
    path = tree.stein.ksd_path(score=lambda x: -x, preconditioner="identity")
    xr.testing.assert_identical(
        path, steindiag.ksd_path(tree, score=lambda x: -x, preconditioner="identity")
    )


def test_import_does_not_import_pymc_arviz_pytensor():
    # Truth: issue 3 / STYLE.md, PyMC and ArviZ are imported lazily, only where used.
    code = (
        "import sys, steindiag, steindiag.inputs._trace, steindiag.accessors; "
        "print(sorted(m for m in ('pymc', 'arviz', 'pytensor') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------
# bad input (issue 3): clear errors naming the argument
# ------------------------------------------------------------------------------------


def test_bad_types():
    posterior = _posterior(np.random.default_rng(8))
    with pytest.raises(TypeError, match="data must be"):
        prepare_trace({"mu": 1}, score=lambda x: -x)
    with pytest.raises(TypeError, match="model must be a pymc.Model"):
        prepare_trace(posterior, model="not a model")
    with pytest.raises(TypeError, match="score must be"):
        prepare_trace(posterior, score="grad")
    with pytest.raises(TypeError, match="batched"):
        prepare_trace(posterior, score=lambda x: -x, batched="yes")
    with pytest.raises(ValueError, match="sample_dims"):
        prepare_trace(posterior, score=lambda x: -x, sample_dims=("chain", "draw", "x"))
    with pytest.raises(ValueError, match="chunk_size"):
        prepare_trace(posterior, score=lambda x: -x, chunk_size=0)
    with pytest.raises(TypeError, match="var_names"):
        prepare_trace(posterior, score=lambda x: -x, var_names=[1])
    with pytest.raises(TypeError, match="pass model= .* or score="):
        prepare_trace(posterior)


def test_missing_group_and_dims():
    posterior = _posterior(np.random.default_rng(9))
    tree = xr.DataTree.from_dict({"posterior": posterior})
    with pytest.raises(ValueError, match="no group 'prior'.*posterior"):
        prepare_trace(tree, score=lambda x: -x, group="prior")
    with pytest.raises(ValueError, match=r"no dimension\(s\) \['chain'\]"):
        prepare_trace(posterior.isel(chain=0, drop=True), score=lambda x: -x)
    with pytest.raises(ValueError, match=r"no variable\(s\) \['sigma'\]"):
        prepare_trace(posterior, score=lambda x: -x, var_names=["sigma"])
    with pytest.raises(ValueError, match=r"coords names dimension\(s\) \['chian'\]"):
        prepare_trace(posterior, score=lambda x: -x, coords={"chian": [10]})


def test_score_callable_that_raises_or_misbehaves():
    posterior = _posterior(np.random.default_rng(10))

    def broken(x):
        raise RuntimeError("boom")

    with pytest.raises(ValueError, match="score raised RuntimeError") as info:
        prepare_trace(posterior, score=broken)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(ValueError, match="returned shape"):
        prepare_trace(posterior, score=lambda x: -x[:, :1])

    def nan_at_two_draws(x):
        out = -x.copy()
        out[[4, 50]] = np.nan  # flat rows 4 and 50 = (chain 10, draw 4), (chain 11, draw 10)
        return out

    with pytest.raises(ValueError, match=r"scores are not finite at 2 of 120 draws: "
                                         r"\(chain=10, draw=4\), \(chain=11, draw=10\)"):
        prepare_trace(posterior, score=nan_at_two_draws)


def test_non_finite_draws_and_misaligned_scores():
    posterior = _posterior(np.random.default_rng(11))
    posterior["mu"][1, 7] = np.inf
    with pytest.raises(ValueError, match=r"draws are not finite at 1 of 120 draws: "
                                         r"\(chain=11, draw=7\).*mu: 1"):
        prepare_trace(posterior, score=lambda x: -x)
    posterior = _posterior(np.random.default_rng(11))
    with pytest.raises(ValueError, match="shape of the draws"):
        prepare_trace(posterior, score=np.zeros((3, 40, 2)))
    other_chains = xr.DataArray(np.zeros((3, 40, 3)), dims=("chain", "draw", "p"),
                                coords={"chain": [0, 1, 2]})
    with pytest.raises(ValueError, match="does not cover the chain coordinates"):
        prepare_trace(posterior, score=other_chains)
