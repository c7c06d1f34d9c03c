"""The README's main job prints what it says (examples/quickstart.py's table)."""

import runpy
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402

QUICKSTART = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"


def test_quickstart_table_names_the_value_variables(capsys):
    # The script's functions, without running its main job (sampling).
    namespace = runpy.run_path(str(QUICKSTART), run_name="quickstart")
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.5)
        pm.Normal("y", mu, sigma, observed=[0.3, -1.2, 0.8, 2.0])
    rng = np.random.default_rng(0)
    posterior = xr.Dataset({"mu": (("chain", "draw"), rng.normal(size=(2, 30))),
                            "sigma": (("chain", "draw"), rng.gamma(2.0, 0.5, size=(2, 30)))})
    res = steindiag.ksd(xr.DataTree.from_dict({"posterior": posterior}), model,
                        compile_mode="FAST_COMPILE")
    namespace["print_table"](res)
    # Truth: the model's value variables, as PyMC names them.
    assert "d = 2 unconstrained parameters (mu, sigma_log__)" in capsys.readouterr().out
