"""Write the behaviour snapshot of every case in ``cases.py``.

    python tests/snapshot/make_snapshot.py            # every case
    python tests/snapshot/make_snapshot.py CASE ...   # only these cases

Files go to ``tests/snapshot/data/<stack>/`` (``pymc5`` or ``pymc6``, from the installed
PyMC's major version): ``<case>.nc`` (or ``<case>.<part>.nc``, one per group or field),
``<case>.txt`` (type, structure, report, warnings) and, for plots, ``<case>.json``.
Cases whose optional dependency is missing on this stack are skipped (and their files
left as they are). Run it only when a change of results is intended, and say so in the
commit.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import snapshot_io  # noqa: E402


def main(argv):
    import cases
    import matplotlib.pyplot as plt

    names = argv or list(cases.CASES)
    unknown = [n for n in names if n not in cases.CASES]
    if unknown:
        raise SystemExit(f"unknown cases: {unknown}")
    directory = snapshot_io.data_dir()
    print(f"writing to {directory}")
    total = time.perf_counter()
    for name in names:
        function, requires, inputs = cases.CASES[name]
        missing = [m for m in requires if importlib.util.find_spec(m) is None]
        if missing:
            print(f"  {name:45s} skipped: needs {', '.join(missing)}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for build in inputs:
                build()
        start = time.perf_counter()
        try:
            result, caught = snapshot_io.run_case(function)
        except BaseException as error:  # a skip raised by the case (pytest.skip)
            if type(error).__name__ == "Skipped":
                print(f"  {name:45s} skipped: {error}")
                continue
            raise
        elapsed = time.perf_counter() - start
        parts = snapshot_io.write_case(name, result, caught, directory)
        plt.close("all")
        print(f"  {name:45s} {elapsed:6.2f} s  {len(parts)} part(s)"
              f"{'  ' + str(len(caught)) + ' warning(s)' if caught else ''}")
    size = sum(p.stat().st_size for p in directory.iterdir())
    print(f"done in {time.perf_counter() - total:.1f} s; {directory.name}: "
          f"{size / 1e6:.2f} MB")


if __name__ == "__main__":
    main(sys.argv[1:])
