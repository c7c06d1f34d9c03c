"""Fixtures shared by test modules."""

import runpy
import warnings
from pathlib import Path

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
