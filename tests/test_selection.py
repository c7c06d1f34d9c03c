"""ArviZ's selection (issue 38, point 3; issue 35, point 5): ``var_names`` with ``~``
exclusions and ``filter_vars`` ("like", "regex") in every function that reads a trace.

Source of truth: ArviZ's own ``_var_names`` (``arviz.utils`` on ArviZ 0.x,
``arviz_base.utils`` on 1.x) on the same Dataset; and a selection must give the same
numbers as the same variables named one by one.
"""

import inspect

import numpy as np
import pytest
import xarray as xr

import steindiag
from steindiag.inputs._selection import selected_names


def _arviz_var_names():
    try:
        from arviz_base.utils import _var_names
    except ImportError:
        from arviz.utils import _var_names
    return _var_names


@pytest.fixture
def posterior():
    rng = np.random.default_rng(0)
    return xr.Dataset({
        "mu": (("chain", "draw"), rng.standard_normal((2, 200))),
        "tau": (("chain", "draw"), rng.standard_normal((2, 200))),
        "theta": (("chain", "draw", "school"), rng.standard_normal((2, 200, 3))),
        "theta_t": (("chain", "draw"), rng.standard_normal((2, 200))),
    }, coords={"school": ["A", "B", "C"]})


CASES = [
    (["mu"], None), ("tau", None), (["theta", "mu"], None), (["~mu"], None),
    (["~mu", "~theta"], None), (["~theta"], "like"), (["th"], "like"),
    (["t", "m"], "like"), (["^t"], "regex"), (["~^t"], "regex"), (["a$"], "regex"),
    (["~u"], "like"),
]


@pytest.mark.parametrize("var_names, filter_vars", CASES)
def test_selection_is_arviz_selection(posterior, var_names, filter_vars):
    expected = _arviz_var_names()(var_names, posterior, filter_vars=filter_vars)
    got = selected_names(var_names, filter_vars, posterior.data_vars)
    assert got == list(dict.fromkeys(expected))   # ArviZ's order; a variable once


def test_exclusion_that_matches_nothing_warns_as_arviz(posterior):
    with pytest.warns(UserWarning, match=r"excluded \['sigma'\] match no variable"):
        assert selected_names(["~sigma"], None, posterior.data_vars) == list(
            posterior.data_vars)


def test_refusals_name_the_argument(posterior):
    score = lambda z: -z  # noqa: E731
    with pytest.raises(ValueError, match=r"mixes names \['mu'\] with exclusions"):
        steindiag.ksd(posterior, score=score, var_names=["mu", "~tau"])
    with pytest.raises(ValueError, match=r"var_names \['zz'\].*match no variable"):
        steindiag.ksd(posterior, score=score, var_names=["zz"], filter_vars="like")
    with pytest.raises(ValueError, match="not a regular expression"):
        steindiag.ksd(posterior, score=score, var_names=["("], filter_vars="regex")
    with pytest.raises(ValueError, match="filter_vars must be None, 'like' or 'regex'"):
        steindiag.ksd(posterior, score=score, var_names=["mu"], filter_vars="glob")
    with pytest.raises(ValueError, match="selects no variable"):
        steindiag.ksd(posterior, score=score, var_names=["~t", "~m"], filter_vars="like")
    with pytest.raises(TypeError, match="data is a ndarray"):
        steindiag.ksd(np.zeros((2, 10, 2)), score=score, var_names="~x")


def test_selection_gives_the_numbers_of_the_names_it_selects(posterior):
    score = lambda z: -z  # noqa: E731
    named = steindiag.ksd(posterior, score=score, var_names=["tau", "theta", "theta_t"])
    for var_names, filter_vars in ((["~mu"], None), (["t"], "like"), (["^t"], "regex")):
        got = steindiag.ksd(posterior, score=score, var_names=var_names,
                            filter_vars=filter_vars)
        assert got.attrs["parameters"] == named.attrs["parameters"]
        assert float(got["ksd_pooled"]) == float(named["ksd_pooled"])
    weights = steindiag.stein_weights(posterior, score=score, var_names="~theta")
    table = steindiag.weighted_summary(posterior, weights, var_names="~theta",
                                       filter_vars="like")
    assert table.index.tolist() == ["mu", "tau"]
    cv = steindiag.control_variates(posterior, score=score, var_names="~theta",
                                    filter_vars="like", method="polynomial1")
    assert cv["label"].values.tolist() == ["mu", "tau"]


def test_every_function_taking_var_names_takes_filter_vars():
    takes = [name for name in steindiag.__all__
             if inspect.isfunction(getattr(steindiag, name))
             and "var_names" in inspect.signature(getattr(steindiag, name)).parameters]
    assert len(takes) >= 10
    for name in takes:
        assert "filter_vars" in inspect.signature(getattr(steindiag, name)).parameters, name
