"""Divergence counts read from a trace's sampler statistics (steindiag.inputs.sampler_warnings).

Truth: the counts are those of the boolean arrays built here by hand.
"""

import numpy as np
import pytest
import xarray as xr

from steindiag.inputs import sampler_warnings


def _trace(diverging, kind):
    n_chain, n_draw = diverging.shape
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw)}
    posterior = xr.Dataset({"x": (("chain", "draw"), np.zeros((n_chain, n_draw)))}, coords=coords)
    stats = xr.Dataset({"diverging": (("chain", "draw"), diverging)}, coords=coords)
    if kind == "datatree":
        return xr.DataTree.from_dict({"posterior": posterior, "sample_stats": stats})
    az = pytest.importorskip("arviz")
    if not hasattr(az, "InferenceData") or az.InferenceData is xr.DataTree:
        # ArviZ >= 1 returns DataTree (InferenceData, where present, is that class).
        pytest.skip("this ArviZ has no separate InferenceData class")
    return az.InferenceData(posterior=posterior, sample_stats=stats)


@pytest.mark.parametrize("kind", ["datatree", "inferencedata"])
def test_counts_per_chain(kind):
    diverging = np.zeros((3, 10), dtype=bool)
    diverging[0, [1, 4]] = True      # 2 in chain 0, none in chain 1, 1 in chain 2
    diverging[2, 9] = True
    found = sampler_warnings(_trace(diverging, kind))
    np.testing.assert_array_equal(found.divergences, [2, 0, 1])
    assert found.total == 3 and found.n_draw == 10
    assert "diverging" in found.source


def test_selection_follows_the_draws_used():
    diverging = np.zeros((3, 10), dtype=bool)
    diverging[0, 1] = diverging[2, 9] = True
    found = sampler_warnings(_trace(diverging, "datatree"), chain=[2], draw=np.arange(5, 10))
    np.testing.assert_array_equal(found.divergences, [1])
    assert found.n_draw == 5


def test_absent_or_unmatched_gives_none():
    assert sampler_warnings(np.zeros((2, 5, 1))) is None
    tree = xr.DataTree.from_dict({"posterior": xr.Dataset({"x": (("chain", "draw"), np.zeros((2, 4)))})})
    assert sampler_warnings(tree) is None
    diverging = np.zeros((2, 4), dtype=bool)
    assert sampler_warnings(_trace(diverging, "datatree"), chain=[5]) is None
    assert sampler_warnings(_trace(diverging, "datatree"), group="prior") is None
