"""Timing of log p for regularised Stein thinning with a PyMC model (not a test).

Regularised thinning needs log p at every draw. Before, it called
``model.compile_logp(jacobian=True)`` once per draw in a Python loop; now it evaluates
one vectorised log p graph on chunks of draws (``steindiag.inputs._pymc.model_log_density``:
the second output of the function that computes the scores, so once the scores are
computed it needs no compilation of its own). This script times both on the same draws of a
10-parameter regression (200 observations; HalfNormal sigma -> log transform with its
Jacobian, a vector of coefficients) and checks that they agree.

Usage::

    python benchmarks/bench_log_density.py            # 4 chains x 1000 draws
    python benchmarks/bench_log_density.py --draws 2500 --repeat 5

"First call" includes compiling (PyTensor's compile cache warm or not, as it is);
"evaluation" is the median over ``--repeat`` calls of the compiled function.
Results: benchmarks/results/log_density.md.
"""

import argparse
import platform
import time

import numpy as np

N_CHAIN, N_OBS, N_BETA = 4, 200, 8


def build(n_draw):
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
            "intercept": (("chain", "draw"), 1 + 0.1 * rng.standard_normal((N_CHAIN, n_draw))),
            "beta": (("chain", "draw", "beta_dim_0"),
                     0.1 * rng.standard_normal((N_CHAIN, n_draw, N_BETA))),
            "sigma": (("chain", "draw"), np.exp(0.1 * rng.standard_normal((N_CHAIN, n_draw)))),
        }
    )
    return model, posterior


def per_draw_loop(model, layout, flat):
    """The former thinning._pymc_log_density: one compiled call per draw."""
    logp = model.compile_logp(jacobian=True)
    out = np.empty(flat.shape[0])
    for row, x in enumerate(flat):
        point, start = {}, 0
        for var in layout:
            point[var.value_name] = x[start : start + var.size].reshape(var.value_shape).astype(
                var.value.type.dtype)
            start += var.size
        out[row] = float(logp(point))
    return out


def timed(function, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return value, float(np.median(times)), times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000, help="draws per chain (4 chains)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import pymc
    import pytensor

    import steindiag
    from steindiag.inputs import _pymc
    from steindiag.inputs._trace import read_trace

    model, posterior = build(args.draws)
    start = time.perf_counter()
    prepared = read_trace(posterior, model).with_scores()   # compiles the score function (+ log p)
    first_scores = time.perf_counter() - start
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    layout = _pymc.model_layout(model)
    n = flat.shape[0]
    print(f"Python {platform.python_version()}, PyMC {pymc.__version__}, PyTensor "
          f"{pytensor.__version__}; N = {n} draws, d = {flat.shape[1]}, {N_OBS} observations")

    start = time.perf_counter()
    batched = _pymc.model_log_density(model, layout, flat)
    first_batched = time.perf_counter() - start
    batched, batched_median, batched_times = timed(
        lambda: _pymc.model_log_density(model, layout, flat), args.repeat)

    start = time.perf_counter()
    model.compile_logp(jacobian=True)
    compile_loop = time.perf_counter() - start
    loop, loop_median, loop_times = timed(lambda: per_draw_loop(model, layout, flat),
                                          max(1, args.repeat // 2))

    difference = float(np.max(np.abs(batched - loop) / np.maximum(1.0, np.abs(loop))))
    print(f"per-draw loop (compile_logp): compile {compile_loop:.2f} s, evaluation median "
          f"{loop_median:.3f} s ({[round(t, 3) for t in loop_times]})")
    print(f"scores (prepare_trace, compiles the shared function): first call "
          f"{first_scores:.2f} s")
    print(f"batched graph (model_log_density): first call {first_batched:.2f} s, evaluation "
          f"median {batched_median * 1e3:.1f} ms ({[round(t * 1e3, 1) for t in batched_times]})")
    print(f"speed-up of the evaluation: {loop_median / batched_median:.0f}x; max relative "
          f"difference {difference:.2e}")

    start = time.perf_counter()
    steindiag.stein_thin(posterior, model, n_selected=100, regularized=True)
    print(f"stein_thin(posterior, model, n_selected=100, regularized=True), whole call: "
          f"{time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
