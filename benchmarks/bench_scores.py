"""Timing of the PyMC score layer (not a test): 20,000 draws of a 10-parameter regression.

Usage::

    python benchmarks/bench_scores.py            # warm timings, default compile mode
    python benchmarks/bench_scores.py --cold     # also: first call on an empty compile cache
    python benchmarks/bench_scores.py --modes CVM NUMBA --cold

"First call, cold" runs in a fresh subprocess whose PyTensor and Numba caches point to
an empty temporary directory, so it includes compiling every C/Numba op from scratch.
"Compiled" is the median over repeated calls once the function is cached. Targets
(issue 3): <= 0.1 s compiled, <= 10 s for the first call on a cold machine.

Measured (2 cores, shared machine; `--modes CVM NUMBA --cold`, medians):

    stack                               mode    cold first call   compiled scores   prepare_trace
    py3.11 PyMC 5.28 / PyTensor 2.38    CVM     6.6 s             35 ms             43 ms
                                        NUMBA   6.5 s             7 ms              15 ms
    py3.12 PyMC 6.4 / PyTensor 3.3      CVM     6.0 s             39 ms             46 ms
                                        NUMBA   35.8 s            6 ms              13 ms

CVM (the C backend) is the default: it meets both targets on both stacks; NUMBA runs
faster once compiled but its first compilation on PyTensor 3 misses the cold target.
A model with every transform (interval, log, simplex, ordered, zero-sum, LKJ Cholesky)
took about 30 s cold with CVM and 1-3 s once its ops are in the compile cache.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

N_CHAIN, N_DRAW, N_OBS, N_BETA = 4, 5000, 200, 8  # 1 + 8 + 1 = 10 parameters


def build():
    import pymc as pm
    import xarray as xr

    rng = np.random.default_rng(20240611)
    X = rng.standard_normal((N_OBS, N_BETA))
    y = 1.0 + X @ rng.standard_normal(N_BETA) + rng.standard_normal(N_OBS)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0, 10)
        beta = pm.Normal("beta", 0, 1, shape=N_BETA)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", intercept + pm.math.dot(X, beta), sigma, observed=y)
    posterior = xr.Dataset(
        {
            "intercept": (("chain", "draw"), 1 + 0.1 * rng.standard_normal((N_CHAIN, N_DRAW))),
            "beta": (
                ("chain", "draw", "beta_dim_0"),
                0.1 * rng.standard_normal((N_CHAIN, N_DRAW, N_BETA)),
            ),
            "sigma": (("chain", "draw"), np.exp(0.1 * rng.standard_normal((N_CHAIN, N_DRAW)))),
        }
    )
    return model, posterior


def first_call(mode):
    """One process: time import, build, and the first prepare_trace call (compiles)."""
    import warnings

    warnings.simplefilter("ignore")
    from steindiag.inputs._trace import prepare_trace

    model, posterior = build()
    start = time.perf_counter()
    prepare_trace(posterior, model, compile_mode=mode)
    return time.perf_counter() - start


def warm(mode, repeats):
    import warnings

    warnings.simplefilter("ignore")
    from steindiag.inputs import _pymc
    from steindiag.inputs._trace import prepare_trace

    model, posterior = build()
    start = time.perf_counter()
    prepared = prepare_trace(posterior, model, compile_mode=mode)
    first = time.perf_counter() - start
    layout = _pymc.model_layout(model)
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    score_times, total_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        _pymc.model_scores(model, layout, flat, mode=mode)
        score_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        prepare_trace(posterior, model, compile_mode=mode)
        total_times.append(time.perf_counter() - start)
    return first, float(np.median(score_times)), float(np.median(total_times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="*", default=[None])
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child is not None:
        print(first_call(None if args._child == "default" else args._child))
        return

    import pytensor
    import pymc

    print(f"python {sys.version.split()[0]}, pymc {pymc.__version__}, pytensor "
          f"{pytensor.__version__}; {N_CHAIN} x {N_DRAW} draws, d = {N_BETA + 2}, "
          f"{N_OBS} observations")
    for mode in args.modes:
        label = mode or "default"
        if args.cold:
            colds = []
            for _ in range(2):
                with tempfile.TemporaryDirectory() as tmp:
                    env = dict(os.environ)
                    env["PYTENSOR_FLAGS"] = f"base_compiledir={tmp}/pytensor"
                    env["NUMBA_CACHE_DIR"] = f"{tmp}/numba"
                    out = subprocess.run(
                        [sys.executable, __file__, "--_child", label],
                        env=env, capture_output=True, text=True, check=True,
                    )
                    colds.append(float(out.stdout.strip().splitlines()[-1]))
            print(f"[{label}] first call, empty compile cache: median {np.median(colds):.2f} s "
                  f"(runs: {', '.join(f'{t:.2f}' for t in colds)})")
        first, score_median, total_median = warm(mode, args.repeats)
        print(f"[{label}] first call in this process (compile cache warm): {first:.2f} s")
        print(f"[{label}] compiled score, 20,000 draws: median {1e3 * score_median:.1f} ms "
              f"over {args.repeats} runs")
        print(f"[{label}] whole prepare_trace (transforms + scores + checks): median "
              f"{1e3 * total_median:.1f} ms")


if __name__ == "__main__":
    main()
