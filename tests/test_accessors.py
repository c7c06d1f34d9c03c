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
