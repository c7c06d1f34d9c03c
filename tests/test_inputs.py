"""The one input pipeline (steindiag.inputs): validation order, labels, DataArray input.

Sources of truth:
- validation order: a score callable that records every call (and a PyMC model whose
  graph compilation is recorded): a bad argument must raise with no call made;
- labels: ``arviz.summary``'s row labels of the same trace (ArviZ 0.x InferenceData on
  Python 3.11, ArviZ 1.x DataTree on Python 3.12): an independent implementation of the
  rule steindiag documents (coordinate values where a dim has a coordinate);
- DataArray input: the same draws as a plain (chain, draw, d) array (the layouts are
  reshapes of each other, so the numbers must be identical); N(0, 1): s(x) = -x.
"""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

from steindiag import (
    ksd,
    ksd_path,
    ksd_test,
    min_ksd_fit,
    mmd,
    stein_thin,
    stein_variational,
    stein_weights,
    weighted_summary,
)


class Recorder:
    """A score (or log density) callable that records every call: N(0, I), s(x) = -x."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return -np.asarray(x)


def _draws(seed=0, n_chain=2, n_draw=60, d=2):
    return np.random.default_rng(seed).standard_normal((n_chain, n_draw, d))


def _posterior(seed=0, n_chain=2, n_draw=60):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "mu": (("chain", "draw"), rng.standard_normal((n_chain, n_draw))),
            "theta": (("chain", "draw", "school"), rng.standard_normal((n_chain, n_draw, 2))),
        },
        coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw), "school": ["a", "b"]},
    )


# ------------------------------------------------------------------------------------
# 1. every argument is validated before any score evaluation
# ------------------------------------------------------------------------------------

_KSD_BAD = [
    ({"preconditioner": "standardise"}, ValueError, "preconditioner must be one of"),
    ({"preconditioner": np.eye(3)}, ValueError, r"must have shape \(2, 2\)"),
    ({"preconditioner": [[1.0, 2.0], [2.0, 1.0]]}, ValueError, "positive definite"),
    ({"preconditioner": -1.0}, ValueError, "must be > 0"),
    ({"preconditioner": {"a": 1}}, TypeError, "preconditioner"),
    ({"c": 0.0}, ValueError, "c must be"),
    ({"c": "1"}, TypeError, "c must be"),
    ({"beta": 0.5}, ValueError, "beta must be"),
    ({"method": "fast"}, ValueError, "method must be one of"),
    ({"progress": "yes"}, TypeError, "progress"),
    ({"batched": "yes"}, TypeError, "batched"),
    ({"space": "latent"}, ValueError, "space must be"),
    ({"sample_dims": ("walker",)}, ValueError, "sample_dims"),
    ({"var_names": ["x"]}, TypeError, "var_names"),
]
# client= (ksd, ksd_path, ksd_test): checked before any score, with or without dask.
_CLIENT_BAD = [({"client": "tcp://127.0.0.1:8786"}, (TypeError, ImportError), "client|dask")]
_WEIGHTS_BAD = [
    *[case for case in _KSD_BAD if "method" not in case[0]],
    ({"method": "newton"}, ValueError, "method must be one of"),
    ({"tol": 0.0}, ValueError, "tol"),
    ({"tol": 2.0}, ValueError, "tol"),
    ({"max_iter": 0}, ValueError, "max_iter"),
    ({"memory_limit": -1.0}, ValueError, "memory_limit"),
    ({"per_chain": "yes"}, TypeError, "per_chain"),
]
_THIN_BAD = [
    *[case for case in _KSD_BAD if not {"method", "progress"} & set(case[0])],
    ({"n_selected": 0}, ValueError, "n_selected"),
    ({"n_selected": 2.5}, TypeError, "n_selected"),
    ({"n_selected": 10**6}, ValueError, "at most the number of draws"),
    ({"regularized": "yes"}, TypeError, "regularized"),
    ({"return_info": 1}, TypeError, "return_info"),
    ({"strength": -1.0, "regularized": True}, ValueError, "strength"),
    ({"strength": 0.1}, ValueError, "regularized=True"),
    ({"regularized": True}, ValueError, "log p"),
    ({"regularized": True, "log_density": np.zeros((3, 3))}, ValueError,
     r"log_density array must have shape \(chain, draw\)"),
    ({"regularized": True, "log_density": "p"}, TypeError, "log_density"),
]
_TEST_BAD = [
    *[case for case in _KSD_BAD if not {"method", "progress"} & set(case[0])],
    ({"bootstrap": "block"}, ValueError, "bootstrap must be one of"),
    ({"n_bootstrap": 0}, ValueError, "n_bootstrap"),
    ({"n_bootstrap": 1.5}, TypeError, "n_bootstrap"),
    ({"rng": "seed"}, TypeError, "rng"),
    ({"pooled": "yes"}, TypeError, "pooled"),
    *_CLIENT_BAD,
]
_PATH_BAD = [
    *_KSD_BAD,
    *_CLIENT_BAD,
    ({"n_points": 1}, ValueError, "n_points"),
    ({"n_points": 2.5}, TypeError, "n_points"),
]
_SVGD_BAD = [
    ({"n_steps": 0}, ValueError, "n_steps"),
    ({"step_size": -1.0}, ValueError, "step_size"),
    ({"svgd_kernel": "gauss"}, ValueError, "svgd_kernel must be one of"),
    ({"bandwidth": "silverman"}, ValueError, "bandwidth"),
    ({"standardize": "yes"}, TypeError, "standardize"),
    ({"ksd_every": 0}, ValueError, "ksd_every"),
    ({"method": "fast"}, ValueError, "method must be one of"),
    ({"progress": "yes"}, TypeError, "progress"),
    ({"batched": "yes"}, TypeError, "batched"),
    ({"sample_dims": ("walker",)}, ValueError, "sample_dims"),
]
_FUNCTIONS = {
    "ksd": (lambda x, **kw: ksd(x, **kw), [*_KSD_BAD, *_CLIENT_BAD]),
    "ksd_path": (lambda x, **kw: ksd_path(x, **kw), _PATH_BAD),
    "stein_weights": (lambda x, **kw: stein_weights(x, **kw), _WEIGHTS_BAD),
    "stein_thin": (lambda x, **kw: stein_thin(x, **{"n_selected": 5, **kw}), _THIN_BAD),
    "ksd_test": (lambda x, **kw: ksd_test(x, **{"n_bootstrap": 20, **kw}), _TEST_BAD),
    "stein_variational": (lambda x, **kw: stein_variational(x, **{"n_steps": 2, **kw}),
                          _SVGD_BAD),
}
_CASES = [
    pytest.param(name, kwargs, error, match, id=f"{name}-{'-'.join(map(str, kwargs))}-{k}")
    for name, (_, cases) in _FUNCTIONS.items()
    for k, (kwargs, error, match) in enumerate(cases)
]


@pytest.mark.parametrize("name, kwargs, error, match", _CASES)
def test_bad_argument_raises_before_any_score_call(name, kwargs, error, match):
    function = _FUNCTIONS[name][0]
    score = Recorder()
    with pytest.raises(error, match=match):
        function(_draws(), score=score, **kwargs)
    # Truth: the recorder; no score evaluation happened before the error.
    assert score.calls == 0


@pytest.mark.parametrize("name", list(_FUNCTIONS))
def test_valid_arguments_do_call_the_score(name):
    # The recorder does see calls when the arguments are valid: the test above is not
    # vacuous.
    score = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _FUNCTIONS[name][0](_draws(), score=score)
    assert score.calls > 0


@pytest.mark.parametrize("kwargs, error, match", [
    ({"group": 3}, TypeError, "group"),
    ({"var_names": []}, ValueError, "var_names"),
    ({"var_names": ["nope"]}, ValueError, r"no variable\(s\) \['nope'\]"),
    ({"coords": [1]}, TypeError, "coords"),
    ({"coords": {"school": ["z"]}}, ValueError, "coords"),
    ({"sample_dims": ("chain", "draw", "x")}, ValueError, "sample_dims"),
    ({"preconditioner": np.ones(2)}, ValueError, r"must have shape \(3,\)"),
    ({"preconditioner": "standardise"}, ValueError, "preconditioner must be one of"),
    ({"n_selected": 10**6}, ValueError, "at most the number of draws"),
    ({"regularized": True, "log_density": np.zeros(7)}, ValueError, "log_density array"),
])
def test_trace_arguments_checked_before_any_score_call(kwargs, error, match):
    score = Recorder()
    with pytest.raises(error, match=match):
        stein_thin(_posterior(), score=score, **{"n_selected": 5, **kwargs})
    assert score.calls == 0


@pytest.mark.parametrize("kwargs, error, match", [
    ({"n_permutations": -1}, ValueError, "n_permutations"),
    ({"block_length": 0}, ValueError, "block_length"),
    ({"rng": "seed"}, TypeError, "rng"),
    ({"preconditioner": "standardise"}, ValueError, "preconditioner must be one of"),
    ({"c": -1.0}, ValueError, "c must be"),
])
def test_mmd_arguments_checked_before_reading(kwargs, error, match, monkeypatch):
    # mmd evaluates no score; its arguments are checked before the draws are even read.
    import steindiag.inputs._arrays as arrays

    reads = []
    original = arrays.read_array_draws
    monkeypatch.setattr(arrays, "read_array_draws",
                        lambda *a, **k: reads.append(1) or original(*a, **k))
    import steindiag.inputs._read as prepare

    monkeypatch.setattr(prepare, "read_array_draws", arrays.read_array_draws)
    with pytest.raises(error, match=match):
        mmd(_draws(), **kwargs)
    assert reads == []


@pytest.mark.parametrize("kwargs, error, match", [
    ({"c": 0.0}, ValueError, "c must be"),
    ({"beta": 1.0}, ValueError, "beta must be"),
    ({"preconditioner": "standardise"}, ValueError, "preconditioner must be one of"),
    ({"preconditioner": np.ones(3)}, ValueError, r"must have shape \(2,\)"),
    ({"max_iter": 0}, ValueError, "max_iter"),
    ({"linear": "yes"}, TypeError, "linear"),
    ({"parameter_names": ["a", "b"]}, ValueError, "parameter_names"),
    ({"linear": True, "bounds": [(0, 1)]}, ValueError, "bounds"),
])
def test_min_ksd_fit_arguments_checked_before_any_score_call(kwargs, error, match):
    calls = []

    def score_fn(x, theta):
        calls.append(1)
        return -theta[0] * x

    with pytest.raises(error, match=match):
        min_ksd_fit(_draws(n_chain=1)[0], score_fn, [1.0], **kwargs)
    assert calls == []


# ------------------------------------------------------------------------------------
# 2. one labelling rule, the same in every function, and the same as ArviZ's
# ------------------------------------------------------------------------------------


def _labelled_trace(seed=3):
    rng = np.random.default_rng(seed)
    posterior = xr.Dataset(
        {
            "mu": (("chain", "draw"), rng.standard_normal((2, 80))),
            "theta": (("chain", "draw", "school"), rng.standard_normal((2, 80, 3))),
            "Sigma": (("chain", "draw", "i", "j"), rng.standard_normal((2, 80, 2, 2))),
        },
        coords={"chain": [0, 1], "draw": np.arange(80),
                "school": ["Choate", "Deerfield", "Phillips"]},
    )
    az = pytest.importorskip("arviz")
    if int(az.__version__.split(".")[0]) >= 1:
        trace = xr.DataTree.from_dict({"posterior": posterior})
    else:
        trace = az.InferenceData(posterior=posterior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        truth = list(az.summary(trace, kind="stats").index)
    return trace, truth


def test_labels_identical_across_functions_and_equal_to_arviz():
    trace, truth = _labelled_trace()
    # Truth: arviz.summary's row labels of the same trace (InferenceData on ArviZ 0.x,
    # DataTree on ArviZ 1.x), i.e. theta[Choate], ..., Sigma[0, 1].
    assert "theta[Choate]" in truth and "Sigma[0, 1]" in truth
    score = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weights = stein_weights(trace, score=score)
        found = {
            "ksd": ksd(trace, score=score).attrs["parameters"],
            "ksd_path": ksd_path(trace, score=score, n_points=5).attrs["parameters"],
            "stein_weights": json.loads(weights.attrs["parameters"]),
            "weighted_summary": list(weighted_summary(trace, weights).index),
            "stein_thin": stein_thin(trace, score=score, n_selected=4,
                                     return_info=True).attrs["stein_thinning_parameters"],
            "ksd_test": ksd_test(trace, score=score, n_bootstrap=10).attrs["parameters"],
            "mmd": mmd(trace).attrs["parameters"],
        }
    for name, labels in found.items():
        # Results store the labels as a JSON string (netCDF attrs, issue 29).
        labels = json.loads(labels) if isinstance(labels, str) else labels
        assert list(labels) == truth, name


def test_labels_without_coordinates_are_positions():
    posterior = _posterior().drop_vars("school")
    labels = ksd(posterior, score=-np.concatenate(
        [posterior["mu"].values[..., None], posterior["theta"].values], axis=2),
    ).attrs["parameters"]
    # Truth: the documented rule, a dim without a coordinate is labelled by position.
    assert json.loads(labels) == ["mu", "theta[0]", "theta[1]"]


# ------------------------------------------------------------------------------------
# 3. a DataArray of draws is accepted like an array, labelled like a trace
# ------------------------------------------------------------------------------------


def _dataarray(seed=4, n_chain=3, n_draw=70):
    values = np.random.default_rng(seed).standard_normal((n_chain, n_draw, 2))
    return xr.DataArray(values, dims=("chain", "draw", "school"), name="theta",
                        coords={"chain": [5, 6, 7][:n_chain], "draw": np.arange(n_draw),
                                "school": ["a", "b"]})


@pytest.mark.parametrize("score_kind", ["array", "dataarray", "callable"])
def test_ksd_of_a_dataarray_equals_ksd_of_its_array(score_kind):
    theta = _dataarray()
    x = theta.values
    score = {"array": -x, "dataarray": -theta, "callable": Recorder()}[score_kind]
    res = ksd(theta, score=score)
    plain = ksd(x, score=-x)
    # Truth: the same draws as a (chain, draw, d) array, N(0, I) score -x.
    np.testing.assert_array_equal(res["ksd"].values, plain["ksd"].values)
    assert float(res["ksd_pooled"]) == float(plain["ksd_pooled"])
    np.testing.assert_array_equal(res["chain"].values, [5, 6, 7])
    assert json.loads(res.attrs["parameters"]) == ["theta[a]", "theta[b]"]


def test_dataarray_transposed_and_with_two_parameter_dims():
    theta = _dataarray()
    x = theta.values
    plain = ksd(x, score=-x)
    moved = theta.transpose("school", "draw", "chain")
    # Truth: the same draws; the sample dims are found by name, not position.
    res = ksd(moved, score=-moved)
    np.testing.assert_array_equal(res["ksd"].values, plain["ksd"].values)
    matrix = xr.DataArray(np.random.default_rng(5).standard_normal((2, 50, 2, 2)),
                          dims=("chain", "draw", "i", "j"), name="Sigma")
    res = ksd(matrix, score=-matrix.values)
    flat = matrix.values.reshape(2, 50, 4)
    np.testing.assert_array_equal(res["ksd"].values, ksd(flat, score=-flat)["ksd"].values)
    assert json.loads(res.attrs["parameters"]) == ["Sigma[0, 0]", "Sigma[0, 1]", "Sigma[1, 0]",
                                       "Sigma[1, 1]"]
    unnamed = xr.DataArray(x, dims=("chain", "draw", "k"))
    assert json.loads(ksd(unnamed, score=-x).attrs["parameters"]) == ["x[0]", "x[1]"]


def test_dataarray_in_path_weights_thinning_and_test():
    theta = _dataarray()
    x = theta.values
    # Truth for each: the same function on the plain array.
    path = ksd_path(theta, score=-theta, n_points=6)
    np.testing.assert_array_equal(path["ksd"].values,
                                  ksd_path(x, score=-x, n_points=6)["ksd"].values)
    weights = stein_weights(theta, score=-theta)
    np.testing.assert_allclose(weights.values, stein_weights(x, score=-x).values,
                               rtol=0, atol=1e-12)
    np.testing.assert_array_equal(weights["chain"].values, [5, 6, 7])
    thinned = stein_thin(theta, score=-theta, n_selected=7)
    assert isinstance(thinned, xr.DataArray) and thinned.name == "theta"
    np.testing.assert_array_equal(thinned.values, stein_thin(x, score=-x, n_selected=7))
    np.testing.assert_array_equal(thinned["school"].values, ["a", "b"])
    test = ksd_test(theta, score=-theta, n_bootstrap=50, rng=2, bootstrap="iid")
    plain = ksd_test(x, score=-x, n_bootstrap=50, rng=2, bootstrap="iid")
    np.testing.assert_array_equal(test["statistic"].values, plain["statistic"].values)
    np.testing.assert_array_equal(test["pvalue"].values, plain["pvalue"].values)
    moved = stein_variational(theta, score=Recorder(), n_steps=3)
    assert isinstance(moved.draws, xr.DataArray) and moved.draws.dims == theta.dims
    plain_moved = stein_variational(x, score=Recorder(), n_steps=3)
    np.testing.assert_array_equal(moved.draws.values, plain_moved.draws)


def test_dataarray_errors_name_the_argument():
    theta = _dataarray()
    with pytest.raises(ValueError, match="score"):
        ksd(theta, score=-theta.values[:, :10])
    with pytest.raises(TypeError, match="var_names"):
        ksd(theta, score=-theta, var_names=["theta"])
    with pytest.raises(ValueError, match="sample_dims"):
        ksd(theta.rename(chain="walker"), score=-theta.values)
