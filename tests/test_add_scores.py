"""PyMC scores computed once: ``compile_mode=``, ``add_scores`` and the per-draw path.

Sources of truth (each assertion names its own):
- PyMC's own ``model.compile_dlogp(jacobian=True)`` evaluated draw by draw (the loop the
  batched graph replaces);
- the same public call with ``model=``: a trace holding stored scores must give the
  same numbers without the model, and without compiling anything.
"""

import warnings

import numpy as np
import pytest

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402
from steindiag.inputs import _pymc  # noqa: E402

# PyMC's own functions (pm.sample, the compile_dlogp used as truth) run on the Python
# linker: no C/Numba compilation on a cold machine.
FAST = {"mode": "FAST_COMPILE"}


def _lkj_model():
    """LKJCholeskyCov + MvNormal (the issue's model, small): 6 + 3 unconstrained coordinates."""
    rng = np.random.default_rng(20261125)
    chol_true = np.array([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.2, 0.3, 1.0]])
    y = rng.standard_normal((40, 3)) @ chol_true.T
    with pm.Model(coords={"axis": ["a", "b", "c"]}) as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0))
        mu = pm.Normal("mu", 0.0, 2.0, dims="axis")
        pm.MvNormal("y", mu=mu, chol=chol, observed=y)
    return model


@pytest.fixture(scope="module")
def lkj_model():
    return _lkj_model()


@pytest.fixture(scope="module")
def lkj_trace(lkj_model):
    """One short real pm.sample run (InferenceData on ArviZ 0.x, DataTree on ArviZ 1.x)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            model=lkj_model, draws=40, tune=40, chains=2, cores=1, random_seed=5,
            progressbar=False, compute_convergence_checks=False, compile_kwargs=FAST,
        )


def _per_draw_scores(model, flat):
    """PyMC's compiled grad log p (Jacobian included), one Python call per draw."""
    dlogp = model.compile_dlogp(jacobian=True, **FAST)
    layout = _pymc.model_layout(model)
    out = np.empty_like(flat)
    for row, x in enumerate(flat):
        point, start = {}, 0
        for var in layout:
            point[var.value_name] = x[start : start + var.size].reshape(var.value_shape)
            start += var.size
        out[row] = dlogp(point)
    return out


# ------------------------------------------------------------------------------------
# compile_mode
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE"])
def test_compile_mode_gives_pymc_scores(lkj_model, lkj_trace, mode):
    # Truth: PyMC's own compile_dlogp, draw by draw, at the same unconstrained draws.
    from steindiag.inputs import read_input

    prepared = read_input(lkj_trace, lkj_model, compile_mode=mode).with_scores()
    assert prepared.attrs["pytensor_mode"] == mode
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    expected = _per_draw_scores(lkj_model, flat)
    np.testing.assert_allclose(prepared.scores.reshape(flat.shape), expected,
                               rtol=1e-9, atol=1e-9)


def test_compile_mode_mode_object(lkj_model, lkj_trace):
    from pytensor.compile.mode import get_mode

    res = steindiag.ksd(lkj_trace, lkj_model, compile_mode=get_mode("FAST_COMPILE"))
    ref = steindiag.ksd(lkj_trace, lkj_model, compile_mode="FAST_COMPILE")
    # Truth: the mode object is the named mode, so the numbers are the same.
    np.testing.assert_allclose(res["ksd"].values, ref["ksd"].values, rtol=1e-12)


def test_compile_mode_unknown_name(lkj_model, lkj_trace):
    with pytest.raises(ValueError, match="compile_mode must name a PyTensor mode"):
        steindiag.ksd(lkj_trace, lkj_model, compile_mode="FASTEST")


def test_compile_mode_wrong_type(lkj_model, lkj_trace):
    with pytest.raises(TypeError, match="compile_mode must be a PyTensor mode name"):
        steindiag.ksd_test(lkj_trace, lkj_model, compile_mode=3)


def test_compile_mode_without_model():
    x = np.random.default_rng(0).standard_normal((2, 50, 2))
    for function in (steindiag.ksd, steindiag.ksd_path, steindiag.ksd_test,
                     steindiag.stein_weights):
        with pytest.raises(TypeError, match="compile_mode .* needs model="):
            function(x, score=-x, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.mmd(x, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.stein_thin(x, score=-x, n_points=5, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.stein_variational(x, score=lambda z: -z, n_steps=1, compile_mode="NUMBA")


def test_every_model_function_takes_compile_mode():
    import inspect

    for name in ("ksd", "ksd_path", "ksd_test", "mmd", "stein_weights", "stein_thin",
                 "stein_variational"):
        function = getattr(steindiag, name)
        assert "compile_mode" in inspect.signature(function).parameters, name
        assert "compile_mode :" in function.__doc__, name
