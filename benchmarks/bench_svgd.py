"""Time per SVGD step (stein_variational) and of its kernel sum, fused vs BLAS path;
with --tuning, the KSD that SVGD's settings reach on two PyMC cases.

Run:  python benchmarks/bench_svgd.py [--quick]
      PYTHONPATH=$PWD python benchmarks/bench_svgd.py --tuning [--steps 500]

--tuning (results in benchmarks/results/svgd_tuning.md): the KSD of the particles before
and after ``stein_variational`` for a grid of settings (kernel, step size, step decay) on
  - radon ADVI: the varying-intercept radon model (Gelman & Hill 2007; the Minnesota data
    shipped with ArviZ 0.x), 1000 draws of a mean-field ADVI fit (d = 89);
  - centred eight schools: every 4th draw of 4 x 1000 centred NUTS draws (1000
    particles, d = 10), a trace with divergences that misses the funnel's neck.
The starting particles are cached in benchmarks/.cache (delete it to redraw).

Target N(0, I_d) (a cheap score, so the step is the kernel sum, the median bandwidth and
the AdaGrad update). For each (N, d): the kernel sum alone on both paths (best of a few
calls, all threads), and the time of one step of ``stein_variational`` (method "auto")
without the KSD of the particles and with it (``ksd_every=1``, the default), from
differences of whole runs. Writes a Markdown table to stdout.
"""

import argparse
import time
from pathlib import Path

import numba
import numpy as np

from steindiag.engine import svgd as _svgd_kernels
from steindiag.variational import stein_variational


def best_of(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


CACHE = Path(__file__).resolve().parent / ".cache"
EIGHT_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def radon_model():
    import json

    import arviz
    import pymc as pm

    path = Path(arviz.__file__).parent / "data/example_data/code/radon/radon.json"
    data = json.loads(path.read_text())
    county = np.asarray(data["county"]) - 1
    with pm.Model(coords={"county": np.arange(data["J"])}) as model:
        mu_a = pm.Normal("mu_a", 0.0, 10.0)
        sigma_a = pm.Exponential("sigma_a", 1.0)
        a = pm.Normal("a", mu_a, sigma_a, dims="county")
        b = pm.Normal("b", 0.0, 10.0)
        sigma_y = pm.Exponential("sigma_y", 1.0)
        pm.Normal("y", a[county] + b * np.asarray(data["x"]), sigma_y,
                  observed=np.asarray(data["y"]))
    return model


def eight_schools_model():
    import pymc as pm

    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("y", theta, EIGHT_SIGMA, observed=EIGHT_Y, dims="school")
    return model


def tuning_cases():
    """{name: (model, trace)} of the two cases; traces cached as netCDF."""
    import arviz as az
    import pymc as pm

    CACHE.mkdir(exist_ok=True)
    cases = {}
    model = radon_model()
    path = CACHE / "radon_advi.nc"
    if not path.exists():
        with model:
            approx = pm.fit(n=30000, method="advi", random_seed=1, progressbar=False)
            approx.sample(1000, random_seed=2).to_netcdf(path)
    cases["radon ADVI"] = (model, az.from_netcdf(path))
    model = eight_schools_model()
    path = CACHE / "eight_centred.nc"
    if not path.exists():
        with model:
            trace = pm.sample(1000, tune=1000, chains=4, cores=1, random_seed=20240601,
                              progressbar=False, compute_convergence_checks=False)
        trace.sel(draw=slice(None, None, 4)).to_netcdf(path)
    cases["centred eight schools"] = (model, az.from_netcdf(path))
    return cases


def tuning(args):
    import logging
    import warnings

    logging.getLogger("pymc").setLevel(logging.ERROR)
    cases = tuning_cases()
    grid = [dict(svgd_kernel=kernel, step_size=step, step_decay=decay)
            for kernel in ("rbf", "imq") for step in (0.003, 0.01, 0.03)
            for decay in (None, 10.0)]
    if args.grid == "short":
        grid = [dict(svgd_kernel="rbf", step_size=0.01, step_decay=None),
                dict(svgd_kernel="imq", step_size=0.01, step_decay=10.0),
                dict(svgd_kernel="imq", step_size=0.003, step_decay=10.0),
                dict(svgd_kernel="imq", step_size=0.03, step_decay=10.0)]
    if args.grid == "defaults":
        grid = [{}]
    if args.configs:
        grid = []
        for spec in args.configs.split(","):
            kernel, step, decay = spec.split(":")
            grid.append(dict(svgd_kernel=kernel, step_size=float(step),
                             step_decay=None if decay == "none" else float(decay)))
    if args.case != "both":
        cases = {name: case for name, case in cases.items() if name.startswith(args.case)}
    print(f"threads: {numba.get_num_threads()}; {args.steps} steps; KSD every "
          f"{args.ksd_every} steps\n")
    print("| case | kernel | step size | step decay | KSD start | KSD best (step) | "
          "KSD end | floor end | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (model, trace) in cases.items():
        for settings in grid:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = stein_variational(trace, model, n_steps=args.steps,
                                           ksd_every=args.ksd_every, progress=False,
                                           **settings)
            seconds = time.perf_counter() - start
            ksd = result.ksd.values
            best = int(np.argmin(ksd))
            attrs = result.attrs
            print(f"| {name} | {attrs['svgd_kernel']} | {attrs['svgd_step_size']:g} | "
                  f"{attrs.get('svgd_step_decay', 'none')} | {ksd[0]:.3f} | "
                  f"{ksd[best]:.3f} ({int(result.ksd.step[best])}) | {ksd[-1]:.3f} | "
                  f"{float(result.ksd_iid[-1]):.3f} | {seconds:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 1000 only")
    parser.add_argument("--tuning", action="store_true", help="KSD reached on PyMC cases")
    parser.add_argument("--grid", choices=["full", "short", "defaults"], default="full")
    parser.add_argument("--case", choices=["both", "radon", "centred"], default="both")
    parser.add_argument("--configs", default="",
                        help="kernel:step_size:step_decay,... (decay 'none' for constant)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--ksd-every", type=int, default=25)
    args = parser.parse_args()
    if args.tuning:
        tuning(args)
        return
    sizes = [(1000, 2), (1000, 50), (10000, 2), (10000, 50)]
    if args.quick:
        sizes = sizes[:2]
    rng = np.random.default_rng(0)
    print(f"threads: {numba.get_num_threads()}")
    print("| N | d | kernel sum fused | kernel sum BLAS | SVGD step | step with KSD |")
    print("|---|---|---|---|---|---|")
    for n, d in sizes:
        x = rng.standard_normal((n, d))
        h = 2.0 * d / np.log(n + 1.0)  # about the median bandwidth of these points
        repeats = 3 if n <= 1000 else 2
        timings = {}
        for method in ("fused", "gemm"):
            _svgd_kernels.kernel_vector_sums(x[:64], -x[:64], 1.0 / h,
                                              kind=_svgd_kernels.RBF, method=method,
                                              combine=True)
            timings[method] = best_of(lambda: _svgd_kernels.kernel_vector_sums(
                x, -x, 1.0 / h, kind=_svgd_kernels.RBF, method=method, combine=True),
                repeats)
        extra = 10 if n <= 1000 else 2
        stein_variational(x[:64], score=lambda z: -z, n_steps=2)

        def run(n_steps, ksd_every):
            start = time.perf_counter()
            stein_variational(x, score=lambda z: -z, n_steps=n_steps, ksd_every=ksd_every)
            return time.perf_counter() - start

        # Differences of whole runs, so that the steps run exactly as in use (one thread
        # below 2000 particles): one step and two KSD passes cancel.
        base = run(1, 1)
        step = (run(1 + extra, 1 + extra) - base) / extra
        step_with_ksd = (run(1 + extra, 1) - base) / extra
        print(f"| {n} | {d} | {timings['fused']:.3g} s | {timings['gemm']:.3g} s | "
              f"{step:.3g} s | {step_with_ksd:.3g} s |", flush=True)


if __name__ == "__main__":
    main()
