"""The README's main job prints what it says (examples/quickstart.py's table)."""

import runpy
from pathlib import Path

import steindiag

QUICKSTART = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"


def test_quickstart_table_names_the_value_variables(small_pymc_model_and_trace, capsys):
    # The script's functions, without running its main job (sampling).
    namespace = runpy.run_path(str(QUICKSTART), run_name="quickstart")
    model, trace = small_pymc_model_and_trace   # tests/conftest.py
    res = steindiag.ksd(trace, model, compile_mode="FAST_COMPILE")
    namespace["print_table"](res)
    # Truth: the model's value variables, as PyMC names them.
    assert "d = 2 unconstrained parameters (mu, sigma_log__)" in capsys.readouterr().out
