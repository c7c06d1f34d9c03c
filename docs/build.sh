#!/usr/bin/env bash
# Build the documentation as CI does:
#   1. run the example scripts (their figures and printed tables appear in the pages),
#   2. sphinx-build with warnings treated as errors.
# Usage: docs/build.sh            (uses `python`; set PYTHON=... to choose the interpreter)
# Needs: pip install ".[docs,pymc,plot]"
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export MPLBACKEND=Agg

mkdir -p examples/output
for example in quickstart plots_gallery biased_sampler external_score svgd_correction min_ksd_fit \
               kernel_blind_spot diagnose_gallery; do
    echo "running examples/${example}.py"
    "$PYTHON" "examples/${example}.py" > "examples/output/${example}.txt"
done

# The README shows the quickstart's diagnosis figure, drawn by the current code.
cp examples/output/quickstart_diagnosis.png docs/_static/quickstart_diagnosis.png

rm -rf docs/generated
"$PYTHON" -m sphinx -W --keep-going -b html docs docs/_build/html
echo "docs: docs/_build/html/index.html"
