"""``idata.stein`` on ArviZ 0.x's InferenceData (issue 29, point 8).

Source of truth: the accessor is documented as a one-line wrapper of the function of the
same name, so its result must be identical to the function's on the same trace.
"""

import numpy as np
import pytest
import xarray as xr

import steindiag
import steindiag.accessors

az = pytest.importorskip("arviz")
pytestmark = pytest.mark.skipif(
    not az.__version__.startswith("0."), reason="InferenceData is ArviZ 0.x's trace type")


def _idata():
    draws = np.random.default_rng(3).standard_normal((2, 150, 2))
    return az.from_dict(posterior={"x": draws})


def test_inference_data_accessor_matches_function():
    assert steindiag.accessors.register_inference_data() is True
    idata = _idata()
    # Truth: the accessor calls steindiag.ksd / ksd_path on the same trace.
    xr.testing.assert_identical(idata.stein.ksd(score=lambda x: -x),
                                steindiag.ksd(idata, score=lambda x: -x))
    xr.testing.assert_identical(idata.stein.ksd_path(score=lambda x: -x, n_points=4),
                                steindiag.ksd_path(idata, score=lambda x: -x, n_points=4))
    # Registering again is harmless.
    assert steindiag.accessors.register_inference_data() is True


def test_registration_at_import_needs_only_arviz_loaded():
    # Truth: the documented rule. The import of steindiag runs _register_inference_data(),
    # which registers when ArviZ 0.x is loaded (it is here) and never imports it. (Not
    # checked in a fresh interpreter: that costs several seconds of imports.)
    del az.InferenceData.stein
    assert not hasattr(_idata(), "stein")
    assert steindiag.accessors._register_inference_data() is True
    assert isinstance(_idata().stein, steindiag.accessors.SteinAccessor)


def test_registered_whatever_the_import_order():
    # Issue 35: on ArviZ 0.x, `import steindiag` before `import arviz` left idata.stein a
    # plain AttributeError. Truth: the documented rule, in a fresh interpreter (the import
    # order matters only there): steindiag first, then ArviZ, and the accessor is there.
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(steindiag.__file__).resolve().parents[1])
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import steindiag, arviz as az, numpy as np\n"
            "idata = az.from_dict(posterior={'x': np.zeros((2, 5))})\n"
            "print(type(idata.stein).__name__)\n"
            "print(any(type(f).__name__ == '_RegisterWhenLoaded' for f in sys.meta_path))"
            % root)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert out == ["SteinAccessor", "False"]   # registered, and the hook removed itself


def test_every_function_that_reads_a_trace_has_a_method():
    # Issue 35: stein_weights, weighted_summary, stein_thin, control_variates (and more)
    # were missing. Truth: the documented list; each method is the function of that name.
    names = ["ksd", "ksd_path", "ksd_test", "diagnose", "mmd", "control_variates",
             "stein_weights", "weighted_summary", "stein_thin", "stein_variational",
             "add_scores", "min_ksd_fit"]
    for name in names:
        assert callable(getattr(steindiag.accessors.SteinAccessor, name)), name
    steindiag.accessors.register_inference_data()
    idata = _idata()
    score = lambda x: -x  # noqa: E731
    weights = steindiag.stein_weights(idata, score=score)
    xr.testing.assert_identical(idata.stein.stein_weights(score=score), weights)
    # weighted_summary returns a pandas DataFrame, like arviz.summary.
    assert idata.stein.weighted_summary(weights).equals(
        steindiag.weighted_summary(idata, weights))
    thin = dict(score=score, n_selected=10, mode_search=False)
    # stein_thin returns the trace's kind (an InferenceData) holding the selected draws.
    xr.testing.assert_identical(idata.stein.stein_thin(**thin).posterior,
                                steindiag.stein_thin(idata, **thin).posterior)
