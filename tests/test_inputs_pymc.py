"""The input pipeline with a PyMC model: validation before any compile, labels, batched log p.

Sources of truth:
- ``model.compile_logp(jacobian=True)`` evaluated draw by draw (PyMC's own log density,
  the per-draw loop the batched graph replaces);
- a spy on ``pytensor.function`` and on the model layout: a bad argument must raise
  before any PyTensor function is compiled;
- ``arviz.summary``'s row labels for the variables that are not transformed.
"""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402
from steindiag.inputs import _pymc  # noqa: E402
from trace_reading import prepare_trace  # noqa: E402

FAST = {"mode": "FAST_COMPILE"}


def _model():
    """A log-transformed scalar, a vector with coordinates, a simplex, observed data."""
    with pm.Model(coords={"school": ["a", "b", "c"]}) as model:
        sigma = pm.HalfNormal("sigma", 1.0)                       # log transform, Jacobian
        theta = pm.Normal("theta", 0.0, sigma, dims="school")     # vector, no transform
        w = pm.Dirichlet("w", np.array([2.0, 3.0, 4.0]))          # simplex: 2 coordinates
        pm.Normal("y", mu=theta.sum() + w[0], sigma=1.0, observed=np.array([0.3, -0.2, 1.1]))
    return model


def _trace(model, n_chain=2, n_draw=40, seed=1):
    values = pm.draw(model.free_RVs, draws=n_chain * n_draw, random_seed=seed, **FAST)
    data = {}
    for rv, value in zip(model.free_RVs, values):
        value = np.asarray(value).reshape(n_chain, n_draw, *np.shape(value)[1:])
        dims = model.named_vars_to_dims.get(rv.name)
        dims = tuple(dims) if dims else tuple(f"{rv.name}_dim_{i}" for i in range(value.ndim - 2))
        data[rv.name] = (("chain", "draw") + dims, value)
    return xr.Dataset(data, coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw),
                                    "school": ["a", "b", "c"]})


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def trace(model):
    return _trace(model)


def _per_draw_logp(model, flat):
    """PyMC's compiled log p (Jacobian included), one Python call per draw."""
    logp = model.compile_logp(jacobian=True)
    layout = _pymc.model_layout(model)
    out = np.empty(flat.shape[0])
    for row, x in enumerate(flat):
        point, start = {}, 0
        for var in layout:
            point[var.value_name] = x[start : start + var.size].reshape(var.value_shape)
            start += var.size
        out[row] = float(logp(point))
    return out


def test_batched_log_density_matches_per_draw_compile_logp(model, trace):
    prepared = prepare_trace(trace, model)
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    layout = _pymc.model_layout(model)
    # Chunks of 7 draws: the last chunk is partial, every chunk boundary is crossed.
    batched = _pymc.model_log_density(model, layout, flat, chunk_size=7)
    # Truth: PyMC's own model.compile_logp(jacobian=True), draw by draw.
    np.testing.assert_allclose(batched, _per_draw_logp(model, flat), rtol=1e-11, atol=1e-11)
    # The Jacobian matters here (HalfNormal -> log, simplex): without it the values differ.
    no_jacobian = model.compile_logp(jacobian=False)
    point = {var.value_name: x for var, x in zip(layout, _pymc.value_inputs(layout, flat[:1]))}
    point = {name: value[0] for name, value in point.items()}
    assert abs(float(no_jacobian(point)) - batched[0]) > 1e-3


def test_regularized_thinning_with_model_uses_its_log_density(model, trace):
    prepared = prepare_trace(trace, model)
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    truth = _per_draw_logp(model, flat).reshape(prepared.draws.shape[:2])
    from_model = steindiag.stein_thin(trace, model, n_selected=12, regularized=True,
                                      return_info=True)
    # Truth: the same rule fed with PyMC's per-draw log p as an array.
    given = steindiag.stein_thin(trace, model, n_selected=12, regularized=True,
                                 log_density=truth, return_info=True)
    np.testing.assert_array_equal(from_model.index, given.index)
    assert from_model.ksd == given.ksd


def test_labels_with_a_model(model, trace):
    res = steindiag.ksd(trace, model)
    # Truth: the documented rule; theta has the model's coordinates and no transform,
    # sigma's value variable is a scalar, the simplex's value variable has 2 entries for
    # 3 coordinates (labelled by position).
    assert json.loads(res.attrs["parameters"]) == [
        "sigma_log__", "theta[a]", "theta[b]", "theta[c]", "w_simplex__[0]",
        "w_simplex__[1]",
    ]
    az = pytest.importorskip("arviz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = az.summary(xr.DataTree.from_dict({"posterior": trace})
                             if int(az.__version__.split(".")[0]) >= 1
                             else az.InferenceData(posterior=trace), kind="stats")
    # Truth: arviz.summary labels theta's rows the same way.
    assert [label for label in summary.index if label.startswith("theta")] == \
        json.loads(res.attrs["parameters"])[1:4]


class _Spy:
    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


_MODEL_CASES = [
    ("ksd", {"preconditioner": "standardise"}),
    ("ksd", {"method": "fast"}),
    ("ksd", {"c": -1.0}),
    ("ksd_path", {"n_points": 1}),
    ("ksd_path", {"preconditioner": "standardise"}),
    ("stein_weights", {"tol": 0.0}),
    ("stein_weights", {"preconditioner": "standardise"}),
    ("stein_thin", {"n_selected": 0}),
    ("stein_thin", {"n_selected": 5, "preconditioner": "standardise"}),
    ("stein_thin", {"n_selected": 5, "strength": -1.0, "regularized": True}),
    ("ksd_test", {"bootstrap": "block"}),
    ("ksd_test", {"preconditioner": "standardise"}),
    ("stein_variational", {"n_steps": 0}),
    ("stein_variational", {"kernel": "gauss"}),
    ("ksd", {"space": "constrained"}),
    ("ksd", {"var_names": ["nope"]}),
    ("ksd", {"var_names": ["~theta"], "filter_vars": "glob"}),
]


@pytest.mark.parametrize("name, kwargs", _MODEL_CASES,
                         ids=[f"{n}-{'-'.join(k)}" for n, k in _MODEL_CASES])
def test_bad_argument_raises_before_any_pytensor_compile(name, kwargs, model, trace,
                                                         monkeypatch):
    import pytensor

    compile_spy = _Spy(pytensor.function)
    layout_spy = _Spy(_pymc.model_layout)
    monkeypatch.setattr(pytensor, "function", compile_spy)
    monkeypatch.setattr(_pymc, "model_layout", layout_spy)
    with pytest.raises((ValueError, TypeError)):
        getattr(steindiag, name)(trace, model, **kwargs)
    # Truth: the spies; nothing of the model was compiled or even laid out.
    assert compile_spy.calls == 0 and layout_spy.calls == 0


def test_mmd_bad_argument_raises_before_any_pytensor_compile(model, trace, monkeypatch):
    import pytensor

    compile_spy = _Spy(pytensor.function)
    monkeypatch.setattr(pytensor, "function", compile_spy)
    with pytest.raises(ValueError, match="preconditioner"):
        steindiag.mmd(trace, model=model, preconditioner="standardise")
    assert compile_spy.calls == 0


def test_valid_arguments_do_lay_out_the_model(model, trace, monkeypatch):
    # The spy sees the model when the arguments are valid: the test above is not vacuous.
    layout_spy = _Spy(_pymc.model_layout)
    monkeypatch.setattr(_pymc, "model_layout", layout_spy)
    steindiag.ksd(trace, model)
    assert layout_spy.calls > 0
