"""Behaviour snapshot: every public function's results, bit for bit, as stored.

The safety net of refactors that must change no result (issue 34). Each case of
``tests/snapshot/cases.py`` (one public call on fixed inputs, every random choice seeded)
is recomputed and compared with the files ``tests/snapshot/make_snapshot.py`` wrote under
``tests/snapshot/data/<stack>/`` (``pymc5`` on PyMC 5 / ArviZ 0.x, ``pymc6`` on PyMC 6 /
ArviZ 1.x: rounding may differ between stacks):

- every data variable and coordinate equal bitwise (NaN equal to NaN), same dims, same
  dtype (the in-memory dtype through the structure in ``<case>.txt``), same attrs (except
  ``snapshot_io.IGNORED_ATTRS``, whose values vary by install or time);
- the same text: type, structure, report (``print`` of a Diagnosis, ``repr`` of a
  dataclass result) and warnings (category and message);
- for plots, the same drawn arrays and strings (``<case>.json``).

A result that changes on purpose: regenerate with ``python tests/snapshot/make_snapshot.py
[CASE ...]`` on both stacks, and say why in the commit. A case that can only be matched to
rounding gets an entry in ``TOLERANCES`` (empty: every case is bitwise).
"""

import difflib
import json
import sys
import warnings
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).resolve().parent / "snapshot"
sys.path.insert(0, str(SNAPSHOT))

import cases  # noqa: E402  (matplotlib with the Agg backend)
import snapshot_io  # noqa: E402

# Per-case tolerance: {"case_name": {"rtol": 1e-12}} compares that case's floating-point
# arrays and attrs with assert_allclose(rtol) instead of bitwise; add "compare_text":
# False only if the printed report rounds differently too. Empty by default.
TOLERANCES = {}
# Variables added on purpose since the snapshot was written, dropped from the recomputed
# result before comparing (everything else is still compared bit for bit):
# - diagnose's reason codes (issue 34: the advice is chosen from a code, not the text).
# Cases stored again after an intended change of results (say which, and why, in the
# commit: issue 36/39 stored every diagnose case again) hold them and compare them.
ADDED_VARIABLES = {"reason_code", "reason_code_pooled"}
# Renamed on purpose (issue 34: one meaning per name): the search switch missing_mass= is
# mode_search=, stein_thin's n_points= is n_selected=. Applied to the stored side (attr
# names, and text in the report and in attr values) before comparing.
RENAMED_ATTRS = {"stein_thinning_n_points": "stein_thinning_n_selected"}
RENAMED_TEXT = {"missing_mass=False": "mode_search=False"}
# Result types whose module moved (issue 34: result classes live in steindiag.outputs).
MOVED_TYPES = {
    "steindiag._diagnose.Diagnosis": "steindiag.outputs.diagnosis.Diagnosis",
    "steindiag.thinning.SteinThinning": "steindiag.outputs.thinning.SteinThinning",
    "steindiag.variational.SteinVariational": "steindiag.outputs.variational.SteinVariational",
    "steindiag.estimation.MinKSDFit": "steindiag.outputs.estimation.MinKSDFit",
}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _stack_directory():
    pytest.importorskip("pymc", reason="the snapshot's stack is named by PyMC's version")
    directory = snapshot_io.data_dir()
    if not directory.is_dir():
        pytest.skip(f"no snapshot for stack {directory.name!r} (no directory {directory}); "
                    f"write it on this stack with `{snapshot_io.REGENERATE}`")
    return directory


def _missing(message):
    pytest.fail(f"{message}; regenerate with `{snapshot_io.REGENERATE}` (on this stack)",
                pytrace=False)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_snapshot(name):
    function, requires, inputs = cases.CASES[name]
    for module in requires:
        pytest.importorskip(module)
    directory = _stack_directory()
    tolerance = TOLERANCES.get(name, {})
    rtol = tolerance.get("rtol")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for build in inputs:
            build()
    result, caught = snapshot_io.run_case(function)
    parts, kind, report, strings = snapshot_io.flatten(result)
    # Variables added since the case was stored (a case stored again after an intended
    # change of results holds them, and compares them too).
    stored_path = directory / f"{name}.txt"
    stored_before = stored_path.read_text(encoding="utf-8") if stored_path.exists() else ""
    added = [v for v in ADDED_VARIABLES if f"  var {v}:" not in stored_before]
    parts = {part: ds.drop_vars([v for v in added if v in ds.variables])
             for part, ds in parts.items()}

    expected_files = {snapshot_io.part_file(name, part) for part in parts} | {f"{name}.txt"}
    if strings is not None:
        expected_files.add(f"{name}.json")
    stored_files = {path.name for path in directory.glob(f"{name}.*")}
    if not stored_files:
        _missing(f"no stored snapshot of case {name!r} in {directory}")
    if expected_files - stored_files:
        _missing(f"case {name!r}: stored files missing: {sorted(expected_files - stored_files)}")
    assert not stored_files - expected_files, \
        f"case {name!r}: the result no longer has {sorted(stored_files - expected_files)}"

    text = snapshot_io.text_of(kind, parts, report, caught)
    stored_text = (directory / f"{name}.txt").read_text(encoding="utf-8")
    for old, new in MOVED_TYPES.items():
        stored_text = stored_text.replace(f"type: {old}\n", f"type: {new}\n")
    for old, new in {**RENAMED_TEXT, **RENAMED_ATTRS}.items():
        stored_text = stored_text.replace(old, new)
    if tolerance.get("compare_text", True) and text != stored_text:
        diff = "\n".join(difflib.unified_diff(stored_text.splitlines(), text.splitlines(),
                                              "stored", "now", lineterm=""))
        pytest.fail(f"case {name!r}: text (type, structure, report, warnings) differs:\n"
                    f"{diff}", pytrace=False)

    if strings is not None:
        stored_strings = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
        assert json.loads(json.dumps(strings)) == stored_strings, \
            f"case {name!r}: the plot's strings differ"

    for part, ds in parts.items():
        # The same netCDF3 encoding on both sides, then every value bit for bit.
        got = snapshot_io.decode(snapshot_io.encode(ds))
        stored = _renamed(snapshot_io.decode((directory / snapshot_io.part_file(name, part))
                                             .read_bytes()))
        snapshot_io.assert_dataset_equal(got, stored, f"case {name!r} part {part!r}", rtol)


def _renamed(ds):
    """The stored Dataset with the renames of ``RENAMED_ATTRS`` and ``RENAMED_TEXT``."""
    def attrs(values):
        out = {}
        for key, value in values.items():
            if isinstance(value, str):
                for old, new in RENAMED_TEXT.items():
                    value = value.replace(old, new)
            out[RENAMED_ATTRS.get(key, key)] = value
        return out

    ds.attrs = attrs(ds.attrs)
    for variable in ds.variables.values():
        variable.attrs = attrs(variable.attrs)
    return ds


def test_no_stale_snapshot_files():
    directory = _stack_directory()
    stale = sorted(path.name for path in directory.iterdir()
                   if path.name.split(".")[0] not in cases.CASES)
    assert not stale, (f"files of no case in {directory}: {stale}; delete them or "
                       f"regenerate with `{snapshot_io.REGENERATE}`")
