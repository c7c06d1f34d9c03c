"""The shape of the package: one reading of the input per call, thin public functions,
small modules, complete docstrings, renamed arguments refused by name.

The import layers themselves are checked by import-linter (``.importlinter``, run by
``.ci/run``); these tests check what it cannot see.
"""

import ast
import doctest
import inspect
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import steindiag

PACKAGE = Path(steindiag.__file__).resolve().parent
PUBLIC_FUNCTIONS = [name for name in steindiag.__all__
                    if inspect.isfunction(getattr(steindiag, name))]
# Compiled engine and solver modules may be longer than 500 lines.
LONG_MODULES_ALLOWED = {"engine", "methods/active_set.py", "methods/weights.py"}


def _code_lines(function):
    """Lines of a function's body without its docstring, blank lines and comments."""
    source = inspect.getsource(inspect.unwrap(function))
    lines = source.splitlines()
    node = ast.parse(source).body[0]
    start = node.body[1].lineno if ast.get_docstring(node) and len(node.body) > 1 \
        else node.body[0].lineno
    return [line for line in lines[start - 1:node.end_lineno]
            if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_docstring_examples_run(name):
    # Every public function's Examples section runs and prints what it shows.
    pytest.importorskip("matplotlib")
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(inspect.unwrap(getattr(steindiag, name)), name):
        runner.run(test)
    assert runner.tries > 0, f"{name}: no example ran"
    assert runner.failures == 0, f"{name}: {runner.failures} example(s) failed (output above)"


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_public_functions_are_thin(name):
    # validate -> read once -> methods -> outputs: at most 60 code lines.
    assert len(_code_lines(getattr(steindiag, name))) <= 60


def test_import_leaves_slow_scipy_modules_unloaded():
    # scipy.stats and scipy.optimize cost about 0.35 s of CPU per process to import; the
    # package uses scipy.special at import and defers scipy.optimize to its two callers.
    code = ("import sys, steindiag; "
            "print(sorted(m for m in ('scipy.stats', 'scipy.optimize') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


def test_modules_are_small():
    long = [str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
            if len(path.read_text().splitlines()) > 500]
    allowed = [p for p in long if p in LONG_MODULES_ALLOWED or p.split("/")[0] == "engine"]
    assert long == allowed, f"modules over 500 lines: {sorted(set(long) - set(allowed))}"


@pytest.mark.parametrize("name", steindiag.__all__)
def test_docstrings_are_complete(name):
    obj = getattr(steindiag, name)
    doc = inspect.getdoc(obj) or ""
    # Every shared entry filled in (``_docs.fill_doc``), no format field left over.
    assert not re.findall(r"^\s*\{[a-z_]+\}\s*$", doc, re.M), doc
    if inspect.isfunction(obj):
        for section in ("Parameters", "Returns", "Examples"):
            assert f"\n{section}\n---" in doc, f"{name}: no {section} section"


def test_diagnose_reads_its_input_once(monkeypatch):
    import steindiag._diagnose as module
    import steindiag.methods.evidence as evidence

    calls = {"read": 0, "preconditioner": []}
    read, make = module.read_input, evidence.make_preconditioner

    def counted_read(*args, **kwargs):
        calls["read"] += 1
        return read(*args, **kwargs)

    def counted_make(kind, *args, **kwargs):
        calls["preconditioner"].append(kind)
        return make(kind, *args, **kwargs)

    monkeypatch.setattr(module, "read_input", counted_read)
    monkeypatch.setattr(evidence, "make_preconditioner", counted_make)
    x = np.random.default_rng(3).standard_normal((3, 300, 2))
    steindiag.diagnose(x, score=-x, log_density=lambda z: -0.5 * (z * z).sum(axis=1), rng=1)
    # Truth: the design. One reading of the input; the KSD's preconditioner built once and
    # shared by the tests, the KSD values, the agreement test and the search; the sample
    # covariance's once, for the test under it.
    assert calls["read"] == 1
    assert sorted(calls["preconditioner"]) == ["smpcov", "standardize"]


@pytest.mark.parametrize("function, old, new", [
    (steindiag.diagnose, "missing_mass", "mode_search"),
    (steindiag.stein_weights, "missing_mass", "mode_search"),
    (steindiag.stein_thin, "missing_mass", "mode_search"),
    (steindiag.stein_thin, "n_points", "n_selected"),
    (steindiag.stein_variational, "kernel", "svgd_kernel"),
])
def test_renamed_arguments_name_the_new_one(function, old, new):
    x = np.random.default_rng(0).standard_normal((2, 30, 2))
    with pytest.raises(TypeError, match=f"{old}= was renamed {new}="):
        function(x, score=-x, **{old: False})
