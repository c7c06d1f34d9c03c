"""Fixtures shared by test modules."""

import runpy
import warnings
from pathlib import Path

import numpy as np
import pytest

RECIPES = Path(__file__).resolve().parent.parent / "examples" / "recipes"


@pytest.fixture(scope="session")
def pystan_recipe():
    """The user guide's pystan recipe, run once for the session (building the Stan program
    is most of a minute on a fresh machine): its namespace, plus under ``"recipe_warnings"``
    the messages of the warnings its own lines triggered."""
    pytest.importorskip("stan")
    path = RECIPES / "recipe_pystan.py"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace = runpy.run_path(str(path), run_name="__main__")
    namespace["recipe_warnings"] = [str(w.message) for w in caught if w.filename == str(path)]
    return namespace


@pytest.fixture(scope="session")
def small_pymc_model_and_trace():
    """mu, sigma > 0 and four observations (a PyMC model), with a posterior group of 2 x 30
    draws as a DataTree: a model whose graphs compile in seconds in any PyTensor mode."""
    pm = pytest.importorskip("pymc")
    import xarray as xr

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.5)
        pm.Normal("y", mu, sigma, observed=[0.3, -1.2, 0.8, 2.0])
    rng = np.random.default_rng(0)
    posterior = xr.Dataset({"mu": (("chain", "draw"), rng.normal(size=(2, 30))),
                            "sigma": (("chain", "draw"), rng.gamma(2.0, 0.5, size=(2, 30)))})
    return model, xr.DataTree.from_dict({"posterior": posterior})


# Test modules that use no PyMC, ArviZ or sampler library: NumPy arrays in, the engine, the
# maths and the methods. Marked ``array_level``; CI runs them on one Python only (their code
# paths do not depend on the PyMC / ArviZ stack), ``make test`` runs them everywhere.
ARRAY_LEVEL_MODULES = {
    "test_agreement", "test_calibration", "test_correction_limits", "test_dask",
    "test_engine", "test_engine_errors", "test_estimation", "test_kernels", "test_memory",
    "test_nystrom", "test_progress", "test_valid_chains",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.split(".")[-1] in ARRAY_LEVEL_MODULES:
            item.add_marker(pytest.mark.array_level)
