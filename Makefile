# Two commands on a fresh machine:
#   make example   -> creates .venv, installs steindiag with PyMC and plotting (the `example`
#                     extra: no test tools), runs the quickstart (prints the verdict, saves the
#                     trace and the diagnosis to netCDF, draws the figures)
#   make test      -> creates .venv, installs the test extras, checks the import layers
#                     (.importlinter) and runs the test suite
# PYTEST_ARGS are passed to pytest (CI: -m "not array_level" on the second Python).
# PYTHON selects the interpreter (e.g. `PYENV_VERSION=3.12.1 make test PYTHON=python VENV=.venv312`).

PYTHON ?= python3
VENV ?= .venv
# Extras installed for `make test`; CI adds `dask` on both Pythons (tests/test_dask.py:
# the engine on a local dask.distributed cluster) and `ecosystems` on one (numpyro, blackjax,
# emcee, pystan: tests/test_ecosystems.py runs the user guide's recipes).
EXTRAS ?= test
PY := $(VENV)/bin/python

.PHONY: example test bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# One marker per set of extras: `make example` then `make test` in the same venv installs
# what the tests need on top of what the example installed.
$(VENV)/.installed-%: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[$*]"
	touch $@

example: $(VENV)/.installed-example
	$(PY) examples/quickstart.py

test: $(VENV)/.installed-$(EXTRAS)
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/bench_engine.py
	$(PY) benchmarks/bench_chains.py
	$(PY) benchmarks/bench_scores.py
	$(PY) benchmarks/bench_weights.py
	$(PY) benchmarks/bench_test.py
	$(PY) benchmarks/bench_svgd.py

docs: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --quiet -e ".[docs]"
	PYTHON=$(PY) docs/build.sh

clean:
	rm -rf $(VENV) build *.egg-info
