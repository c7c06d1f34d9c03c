"""Input edges (issue 35, points 2 and 5): labelled scores matched by label, and clear
errors instead of silent coercions (complex, masked, +inf log p, mismatched variables).

Sources of truth: a score matched by label must give the same KSD as the same score in
the draws' order (the Stein kernel sums do not depend on how the score was passed), and
integers are exact in float64, so an integer score gives the KSD of its float64 copy.
"""

import numpy as np
import pytest
import xarray as xr

import steindiag


@pytest.fixture
def x():
    # Exact N(0, I) draws, 4 chains x 500 draws x 2 parameters; score -x.
    return np.random.default_rng(0).standard_normal((4, 500, 2))


def _pooled(result):
    return float(result["ksd_pooled"])


def test_score_in_other_parameter_order_is_matched_by_label(x):
    # The reproduction: a correct score with its parameter axis in the other order.
    da = xr.DataArray(x, dims=("chain", "draw", "p"), coords={"p": ["a", "b"]})
    expected = _pooled(steindiag.ksd(x, score=-x))          # arrays, in the draws' order
    assert _pooled(steindiag.ksd(da, score=-da)) == pytest.approx(expected, rel=1e-12)
    swapped = (-da).isel(p=[1, 0])
    assert list(swapped["p"].values) == ["b", "a"]
    assert _pooled(steindiag.ksd(da, score=swapped)) == pytest.approx(expected, rel=1e-12)
    # Used by position, the swapped score is another (wrong) target: far larger KSD.
    assert _pooled(steindiag.ksd(x, score=-x[..., ::-1])) > 5 * expected


def test_score_labelled_otherwise_is_refused_naming_both(x):
    da = xr.DataArray(x, dims=("chain", "draw", "p"), coords={"p": ["a", "b"]})
    with pytest.raises(ValueError, match=r"\['u', 'v'\].*\['a', 'b'\]"):
        steindiag.ksd(da, score=(-da).assign_coords(p=["u", "v"]))


def test_dataset_score_matched_by_label_and_dims():
    rng = np.random.default_rng(1)
    theta = rng.standard_normal((2, 300, 3, 2))
    mu = rng.standard_normal((2, 300))
    posterior = xr.Dataset({
        "theta": (("chain", "draw", "school", "k"), theta),
        "mu": (("chain", "draw"), mu)}, coords={"school": ["A", "B", "C"], "k": [0, 1]})
    score = -posterior
    expected = _pooled(steindiag.ksd(posterior, score=score))
    reordered = score.isel(school=[2, 0, 1]).transpose("k", "chain", "school", "draw")
    assert _pooled(steindiag.ksd(posterior, score=reordered)) == pytest.approx(
        expected, rel=1e-12)
    # The same numbers from plain arrays, flattened in the draws' order (C order).
    flat = np.concatenate([theta.reshape(2, 300, 6), mu[..., None]], axis=2)
    assert expected == pytest.approx(_pooled(steindiag.ksd(flat, score=-flat)), rel=1e-12)
    with pytest.raises(ValueError, match=r"\['A', 'B', 'D'\].*\['A', 'B', 'C'\]"):
        steindiag.ksd(posterior, score=score.assign_coords(school=["A", "B", "D"]))
    with pytest.raises(ValueError, match="dims"):
        steindiag.ksd(posterior, score=score.rename(school="unit"))


def test_score_dataarray_with_parameter_labels_for_a_dataset():
    rng = np.random.default_rng(2)
    posterior = xr.Dataset({
        "theta": (("chain", "draw", "school"), rng.standard_normal((2, 300, 2))),
        "mu": (("chain", "draw"), rng.standard_normal((2, 300)))},
        coords={"school": ["A", "B"]})
    values = -np.concatenate([posterior["theta"].values, posterior["mu"].values[..., None]],
                             axis=2)
    labels = ["theta[A]", "theta[B]", "mu"]
    in_order = xr.DataArray(values, dims=("chain", "draw", "parameter"),
                            coords={"parameter": labels})
    expected = _pooled(steindiag.ksd(posterior, score=in_order))
    permuted = in_order.isel(parameter=[2, 0, 1])
    assert _pooled(steindiag.ksd(posterior, score=permuted)) == pytest.approx(expected,
                                                                               rel=1e-12)
    wrong = in_order.assign_coords(parameter=["theta[A]", "theta[C]", "mu"])
    with pytest.raises(ValueError, match=r"theta\[C\].*theta\[B\]"):
        steindiag.ksd(posterior, score=wrong)


def test_score_variables_that_are_not_the_draws_are_named():
    rng = np.random.default_rng(3)
    data = xr.Dataset({"theta": (("chain", "draw"), rng.standard_normal((2, 50)))})
    score = xr.Dataset({"phi": (("chain", "draw"), rng.standard_normal((2, 50)))})
    with pytest.raises(ValueError, match=r"score's variables.*\['phi'\].*\['theta'\]"):
        steindiag.ksd(data, score=score)


@pytest.mark.skipif(not hasattr(xr, "DataTree"), reason="xarray without DataTree")
def test_score_given_as_a_trace_group(x):
    posterior = xr.Dataset({"theta": (("chain", "draw", "p"), x)}, coords={"p": ["a", "b"]})
    scores = xr.DataTree(dataset=-posterior.isel(p=[1, 0]))   # a group's node
    assert _pooled(steindiag.ksd(posterior, score=scores)) == pytest.approx(
        _pooled(steindiag.ksd(x, score=-x)), rel=1e-12)


def test_integer_scores_are_exact(x):
    draws = np.round(3 * x)
    as_float = _pooled(steindiag.ksd(draws, score=-draws))
    assert _pooled(steindiag.ksd(draws.astype(int), score=-draws.astype(int))) == as_float
    assert _pooled(steindiag.ksd(draws, score=lambda z: -np.round(z).astype(int))) == as_float


def test_complex_values_are_refused_naming_the_argument(x):
    with pytest.raises(TypeError, match="score must hold real numbers; got complex"):
        steindiag.ksd(x, score=(-x).astype(complex))
    with pytest.raises(TypeError, match="output of score must hold real numbers"):
        steindiag.ksd(x, score=lambda z: (-z).astype(complex))
    data = xr.Dataset({"theta": (("chain", "draw"), x[..., 0])})
    with pytest.raises(TypeError, match="'theta' of score must hold real numbers"):
        steindiag.ksd(data, score=(-data).astype(complex))
    with pytest.raises(TypeError, match=r"functions\['f'\] must hold real numbers"):
        steindiag.control_variates(x, score=-x, functions={"f": (x[..., 0] + 0j)})


def test_masked_arrays_are_refused(x):
    mask = np.zeros(x.shape, bool)
    mask[0, 0, 0] = True
    with pytest.raises(ValueError, match="score is a masked array with 1 masked"):
        steindiag.ksd(x, score=np.ma.masked_array(-x, mask=mask))
    with pytest.raises(ValueError, match="data is a masked array with 1 masked.*fill"):
        steindiag.ksd(np.ma.masked_array(x, mask=mask), score=-x)
    with pytest.raises(ValueError, match="output of score is a masked array"):
        steindiag.ksd(x, score=lambda z: np.ma.masked_greater(-z, 2.0))
    with pytest.raises(ValueError, match=r"functions\['f'\] is a masked array"):
        steindiag.control_variates(x, score=-x, functions={
            "f": np.ma.masked_array(x[..., 0], mask=mask[..., 0])})
    # Nothing masked: nothing lost, read as the plain array.
    unmasked = np.ma.masked_array(-x, mask=np.zeros(x.shape, bool))
    assert _pooled(steindiag.ksd(x, score=unmasked)) == _pooled(steindiag.ksd(x, score=-x))


def test_log_density_plus_infinity_is_refused(x):
    def log_density(z):
        # log N(0, I), but +inf beyond z_0 = 2 (a sign error, say): not a density value.
        return np.where(z[:, 0] > 2.0, np.inf, -0.5 * np.sum(z ** 2, axis=1))

    with pytest.raises(ValueError, match=r"log_density returned \+inf at the point"):
        steindiag.diagnose(x, score=lambda z: -z, log_density=log_density, rng=0)


def test_stein_variational_on_a_sampler_trace_advises_what_it_accepts():
    rng = np.random.default_rng(4)
    trace = xr.Dataset({"theta": (("chain", "draw"), rng.standard_normal((2, 50)))},
                       attrs={"inference_library": "numpyro"})
    with pytest.raises(ValueError, match="MCMC as data") as info:
        steindiag.stein_variational(trace, score=lambda z: -z, n_steps=2)
    assert "space=" not in str(info.value)   # stein_variational takes no space=
    with pytest.raises(ValueError, match="space='unconstrained'"):
        steindiag.ksd(trace, score=lambda z: -z)   # ksd does take it
