"""Time per SVGD step (stein_variational) and of its kernel sum, fused vs BLAS path;
with --tuning, the KSD that SVGD's settings reach on two PyMC cases; with --at-size, SVGD
at the size users have (issue 37), against one KSD pass measured in the same run.

Run:  python benchmarks/bench_svgd.py [--quick]
      PYTHONPATH=$PWD python benchmarks/bench_svgd.py --tuning [--steps 500]
      PYTHONPATH=$PWD python benchmarks/bench_svgd.py --at-size [--part gaussian|logistic|
          radon|numpyro|sum|all] [--repeats 3] [--no-former] [--sample-repeats 2]

--at-size (results in benchmarks/results/svgd.md, "SVGD at the size users have"):
  - gaussian: the target N(m, S) in d = 89 (S = Q diag(lambda) Q^T, Q a random orthogonal
    matrix, lambda log-spaced from 1 to ``--condition`` = 300), N = 4000 particles from
    mean-field ADVI's fixed point N(m, diag(1 / diag(S^-1))), under-dispersed and
    uncorrelated; score -S^-1 (x - m). For each repeat: the time of one KSD pass on the
    initial particles (``steindiag.ksd`` on arrays, median of 3), a default run of
    ``stein_variational`` (wall time, steps, stop reason, KSD / floor), the first recorded
    step whose KSD is within 5 % of the floor and the wall time of a run stopped there
    (``n_steps`` = that step: the same path), and the KL divergence of the Gaussian fitted
    to the particles from the target (an independent check the KSD does not make). Once:
    the former defaults (AdaGrad, step 0.01 annealed to 0.001, per-coordinate scales, KSD
    at every step, 500 steps).
  - logistic: the 23-parameter hierarchical logistic model of tests/hierarchical_models.py
    (20 groups): pm.sample's own time (4 x 1000 draws, 1000 tuning steps; timed
    ``--sample-repeats`` times in the same run, and once when the cache was made), the
    first recorded step within 5 % of the floor, 4000 draws of a
    mean-field ADVI fit (30,000 iterations) moved by ``stein_variational`` (new and former
    defaults), with the moments of the particles against the NUTS draws.
  - radon: the radon ADVI case of --tuning (1000 particles, d = 89), new and former
    defaults.
  - sum: the SVGD kernel sum (IMQ, each unordered pair once) against one KSD pass on the
    same 4000 points, interleaved, d = 23 and 89.
  - numpyro: numpyro.contrib.einstein.SVGD on the same particles and target as the
    Gaussian case, at N = 400 (numpyro's step computes every pair's gradient of the
    particle loss: about 0.7 s a step at N = 400, minutes at N = 4000).

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


# -- SVGD at the size users have (issue 37) ------------------------------------------------

FORMER_DEFAULTS = dict(step_rule="adagrad", step_size=0.01, step_decay=10.0,
                       svgd_preconditioner="standardize", ksd_every=1, tol=None, n_steps=500)


def correlated_gaussian(n=4000, d=89, condition=300.0, seed=0):
    """Mean-field particles of a correlated Gaussian target: (x0, score, mean, covariance)."""
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((d, d)))
    covariance = (rotation * np.logspace(0, np.log10(condition), d)) @ rotation.T
    precision = np.linalg.inv(covariance)
    precision = 0.5 * (precision + precision.T)
    mean = rng.standard_normal(d)
    x0 = mean + rng.standard_normal((n, d)) / np.sqrt(np.diag(precision))

    def score(x):
        return -(x - mean) @ precision

    return x0, score, mean, covariance


def gaussian_kl(x, mean, covariance):
    """KL(N(mean of x, cov of x) || N(mean, covariance)) (the fitted Gaussian's divergence)
    and the extreme eigenvalues of S^-1 Cov(x) (variance ratios along the worst
    directions), as text."""
    precision = np.linalg.inv(covariance)
    product = precision @ np.cov(x.T)
    gap = x.mean(axis=0) - mean
    kl = 0.5 * (np.trace(product) - len(mean) - np.linalg.slogdet(product)[1]
                + gap @ precision @ gap)
    ratios = np.linalg.eigvals(product).real
    return f"{kl:.3f} ({ratios.min():.2f}-{ratios.max():.2f})"


def ksd_pass_seconds(x, s, repeats=3):
    import steindiag

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        steindiag.ksd(x, score=s, progress=False)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


class _TimedKSD:
    """Wraps the KSD pass of SVGD's record to time every call: the median is a KSD pass on
    the particles of that run, measured under the same load as its steps."""

    def __init__(self):
        from steindiag.methods import variational

        self.module, self.original, self.seconds = variational, variational._ksd_at, []

    def __enter__(self):
        def timed(*args):
            start = time.perf_counter()
            out = self.original(*args)
            self.seconds.append(time.perf_counter() - start)
            return out

        self.module._ksd_at = timed
        return self

    def __exit__(self, *exc):
        self.module._ksd_at = self.original


def timed_svgd(*args, **options):
    """(result, wall seconds, median seconds of the run's own KSD passes)."""
    import warnings

    start = time.perf_counter()
    with warnings.catch_warnings(), _TimedKSD() as passes:
        warnings.simplefilter("ignore")
        result = stein_variational(*args, progress=False, **options)
    return result, time.perf_counter() - start, float(np.median(passes.seconds))


def first_within(result, factor=1.05):
    """The first recorded step whose KSD is at most ``factor`` times its floor, or None."""
    within = np.flatnonzero(result.ksd.values <= factor * result.ksd_iid.values)
    return None if within.size == 0 else int(result.ksd["step"].values[within[0]])


def describe(result, seconds, pass_seconds):
    ksd, floor = result.ksd.values, result.ksd_iid.values
    returned = int(result.attrs["svgd_returned_step"])
    at = list(result.ksd["step"].values).index(returned)
    return {"seconds": seconds, "passes": seconds / pass_seconds,
            "steps": int(result.attrs["svgd_steps_run"]),
            "reason": result.attrs["svgd_stop_reason"], "ksd0": float(ksd[0]),
            "ksd": float(ksd[at]), "floor": float(floor[at]), "ratio": float(ksd[at] / floor[at]),
            "reach": first_within(result)}


def at_size_gaussian(args):
    x0, score, mean, covariance = correlated_gaussian(condition=args.condition)
    s0 = score(x0)
    stein_variational(x0[:300], score=score, n_steps=2, progress=False)  # compile
    ksd_pass_seconds(x0[:300], s0[:300], repeats=1)
    iid = mean + np.random.default_rng(1).standard_normal(x0.shape) @ np.linalg.cholesky(
        covariance).T
    print(f"Gaussian d = 89, condition {args.condition:g}, N = 4000; KL (variance ratios) of "
          f"4000 exact draws' fitted Gaussian {gaussian_kl(iid, mean, covariance)}; mean-field "
          f"start {gaussian_kl(x0, mean, covariance)}; threads {numba.get_num_threads()}\n")
    print("| run | KSD pass: ksd() / in the run | wall | = passes | steps (reason) | KSD start -> "
          "returned / floor | first step <= 1.05 floor | wall to it | = passes | KL returned "
          "(variance ratios) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    runs = [(f"defaults, repeat {i + 1}", {}) for i in range(args.repeats)]
    runs.append(("standardize (no whitening)", dict(svgd_preconditioner="standardize")))
    if args.former:
        runs.append(("former defaults", FORMER_DEFAULTS))
    for label, options in runs:
        alone = ksd_pass_seconds(x0, s0)
        result, seconds, in_run = timed_svgd(x0, score=score, **options)
        row = describe(result, seconds, in_run)
        reach = row["reach"]
        if reach is None:
            to_reach = "never | |"
        elif options.get("step_rule") == "adagrad":
            # Its schedule depends on n_steps: the same path cannot stop early, so the wall
            # time to the step is read off the whole run (steps cost the same).
            estimate = seconds * reach / row["steps"]
            to_reach = f"{reach} | ~{estimate:.1f} s | ~{estimate / in_run:.0f}"
        else:
            _, reach_seconds, reach_pass = timed_svgd(x0, score=score, n_steps=max(reach, 1),
                                                      tol=None, **options)
            to_reach = f"{reach} | {reach_seconds:.1f} s | {reach_seconds / reach_pass:.0f}"
        print(f"| {label} | {alone:.3f} / {in_run:.3f} s | {seconds:.1f} s | "
              f"{row['passes']:.0f} | {row['steps']} ({row['reason']}) | {row['ksd0']:.4f} -> "
              f"{row['ksd']:.4f} / {row['floor']:.4f} = {row['ratio']:.3f} | {to_reach} | "
              f"{gaussian_kl(result.draws, mean, covariance)} |", flush=True)


def unconstrained(trace, model):
    """Pooled unconstrained draws and scores of a trace (what SVGD and the KSD see)."""
    from steindiag.inputs import read_input

    prepared = read_input(trace, model).with_scores()
    d = prepared.draws.shape[-1]
    return prepared.draws.reshape(-1, d), prepared.scores.reshape(-1, d)


def logistic_cases():
    """(model, NUTS trace, pm.sample seconds, ADVI trace, ADVI seconds); traces cached."""
    import sys

    import arviz as az
    import pymc as pm

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hierarchical_models import logistic_model

    CACHE.mkdir(exist_ok=True)
    model = logistic_model(n_groups=20)
    timings = CACHE / "logistic_seconds.json"
    import json

    seconds = json.loads(timings.read_text()) if timings.exists() else {}
    nuts_path, advi_path = CACHE / "logistic_nuts.nc", CACHE / "logistic_advi.nc"
    if not nuts_path.exists():
        start = time.perf_counter()
        with model:
            trace = pm.sample(1000, tune=1000, chains=4, random_seed=3, progressbar=False,
                              compute_convergence_checks=False)
        seconds["pm.sample"] = time.perf_counter() - start
        trace.to_netcdf(nuts_path)
    if not advi_path.exists():
        start = time.perf_counter()
        with model:
            approx = pm.fit(n=30000, method="advi", random_seed=4, progressbar=False)
            draws = approx.sample(4000, random_seed=5)
        seconds["ADVI"] = time.perf_counter() - start
        draws.to_netcdf(advi_path)
    timings.write_text(json.dumps(seconds))
    return (model, az.from_netcdf(nuts_path), seconds.get("pm.sample"),
            az.from_netcdf(advi_path), seconds.get("ADVI"))


def sample_seconds_in_run(model, repeats=2):
    """'a s, b s' of ``repeats`` pm.sample runs (the first compiles the model's function)."""
    return ", ".join(f"{sample_seconds(model):.1f} s" for _ in range(repeats))


def sample_seconds(model):
    """Wall seconds of pm.sample (4 x 1000 draws after 1000 tuning steps, the model's
    function already compiled by an earlier call) in this process, under this run's load."""
    import pymc as pm

    start = time.perf_counter()
    with model:
        pm.sample(1000, tune=1000, chains=4, random_seed=6, progressbar=False,
                  compute_convergence_checks=False)
    return time.perf_counter() - start


def moment_errors(x, reference):
    """Largest |mean error| / reference sd and the range of sd ratios, per coordinate."""
    sd = reference.std(axis=0)
    mean_error = np.abs(x.mean(axis=0) - reference.mean(axis=0)) / sd
    ratio = x.std(axis=0) / sd
    return f"{mean_error.max():.2f} | {ratio.min():.2f}-{ratio.max():.2f}"


def at_size_pymc(args, name):
    import logging

    logging.getLogger("pymc").setLevel(logging.ERROR)
    if name == "logistic":
        model, nuts, cached_seconds, start, advi_seconds = logistic_cases()
        reference, _ = unconstrained(nuts, model)
        in_run = (sample_seconds_in_run(model, args.sample_repeats) if args.sample_repeats
                  else "not run")
        print(f"logistic (d = 23): pm.sample (4 x 1000 draws + 1000 tuning) in this run "
              f"{in_run}; when the cache was made "
              f"{cached_seconds:.1f} s; ADVI 30,000 iterations + 4000 draws "
              f"{advi_seconds:.1f} s\n")
    else:
        model, start = tuning_cases()["radon ADVI"]
        reference = None
    x0, s0 = unconstrained(start, model)
    timed_svgd(start, model, n_steps=2)  # compile the model's score graph
    print("| run | KSD pass: ksd() / in the run | wall | = passes | steps (reason) | KSD start "
          "-> returned / floor | first step <= 1.05 floor | ~ wall to it | = passes | "
          "max mean error / NUTS sd | sd / NUTS sd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    if reference is not None:
        print(f"| ADVI draws | | | | | | | | | {moment_errors(x0, reference)} |")
    runs = [(f"defaults, repeat {i + 1}", {}) for i in range(args.repeats)]
    if args.former:
        runs.append(("former defaults", FORMER_DEFAULTS))
    for label, options in runs:
        alone = ksd_pass_seconds(x0, s0)
        result, seconds, in_run = timed_svgd(start, model, **options)
        row = describe(result, seconds, in_run)
        moved, _ = unconstrained(result.draws, model)
        moments = moment_errors(moved, reference) if reference is not None else "| "
        reach = row["reach"]
        if reach is None:
            to_reach = "never | |"
        else:
            # Read off the whole run (steps cost about the same): a run stopped there
            # would recompile nothing but costs one more PyMC trace to write back.
            estimate = seconds * reach / row["steps"]
            to_reach = f"{reach} | {estimate:.1f} s | {estimate / in_run:.0f}"
        print(f"| {label} | {alone:.3f} / {in_run:.3f} s | {seconds:.1f} s | {row['passes']:.0f} | "
              f"{row['steps']} ({row['reason']}) | {row['ksd0']:.4f} -> {row['ksd']:.4f} / "
              f"{row['floor']:.4f} = {row['ratio']:.3f} | {to_reach} | {moments} |", flush=True)


def at_size_numpyro(args, n=400, steps=200, every=20):
    """numpyro's SVGD (RBF kernel, median heuristic; Adagrad 0.05 as in its docs) and
    steindiag's defaults from the same N particles of the Gaussian case."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.einstein import SVGD, RBFKernel
    from numpyro.optim import Adagrad

    x0, score, mean, covariance = correlated_gaussian(condition=args.condition)
    x0 = x0[:n]
    from steindiag.kernels.preconditioner import make_preconditioner
    from steindiag.methods.variational import _ksd_at

    pre = make_preconditioner("standardize", x0, [str(i) for i in range(x0.shape[1])])

    def model():
        numpyro.sample("x", dist.MultivariateNormal(jnp.asarray(mean),
                                                    covariance_matrix=jnp.asarray(covariance)))

    svgd = SVGD(model, Adagrad(0.05), RBFKernel(), num_stein_particles=n)
    state = svgd.init(jax.random.PRNGKey(0))
    names = list(svgd.optim.get_params(state.optim_state))
    state = state._replace(optim_state=svgd.optim.init({names[0]: jnp.asarray(x0)}))
    update = jax.jit(svgd.update)
    start = time.perf_counter()
    jax.block_until_ready(update(state)[1])
    compile_seconds = time.perf_counter() - start
    print(f"numpyro {numpyro.__version__} SVGD vs steindiag, same {n} particles (Gaussian "
          f"d = 89, condition {args.condition:g}); numpyro compile {compile_seconds:.1f} s\n")
    print("| run | step | wall (no compile) | KSD / floor | KL |")
    print("|---|---|---|---|---|")
    seconds = 0.0
    for step in range(1, steps + 1):
        begin = time.perf_counter()
        state, loss = update(state)
        jax.block_until_ready(loss)
        seconds += time.perf_counter() - begin
        if step % every == 0:
            x = np.asarray(svgd.get_params(state)[names[0]])
            value, floor = _ksd_at(x, score(x), pre)
            print(f"| numpyro SVGD, RBF, Adagrad 0.05 | {step} | {seconds:.1f} s | "
                  f"{value:.4f} / {floor:.4f} = {value / floor:.3f} | "
                  f"{gaussian_kl(x, mean, covariance)} |", flush=True)
    result, seconds, _ = timed_svgd(x0, score=score)
    row = describe(result, seconds, 1.0)
    print(f"| steindiag defaults | {row['steps']} ({row['reason']}) | {seconds:.1f} s | "
          f"{row['ksd']:.4f} / {row['floor']:.4f} = {row['ratio']:.3f} | "
          f"{gaussian_kl(result.draws, mean, covariance)} |")


def sum_versus_pass(args, n=4000, repeats=7):
    """The IMQ SVGD kernel sum (``kernel_vector_sums``, combine=True: each unordered pair
    once) against one KSD pass on the same N points, interleaved, d = 23 and 89: the
    median of the ratios of consecutive calls."""
    from steindiag.methods.variational import _ksd_at, median_bandwidth
    from steindiag.kernels.preconditioner import make_preconditioner

    print(f"threads {numba.get_num_threads()}; N = {n}; median of {repeats} interleaved pairs\n")
    print("| d | kernel sum | KSD pass | ratio (median of pairs) |")
    print("|---|---|---|---|")
    for d in (23, 89):
        x = np.random.default_rng(d).standard_normal((n, d))
        s = -x
        pre = make_preconditioner("standardize", x, [str(i) for i in range(d)])
        a = 1.0 / median_bandwidth(x)
        _svgd_kernels.kernel_vector_sums(x[:300], s[:300], a, kind=_svgd_kernels.IMQ,
                                          combine=True)
        _ksd_at(x[:300], s[:300], pre)
        sums, passes = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            _svgd_kernels.kernel_vector_sums(x, s, a, kind=_svgd_kernels.IMQ, combine=True)
            sums.append(time.perf_counter() - start)
            start = time.perf_counter()
            _ksd_at(x, s, pre)
            passes.append(time.perf_counter() - start)
        ratio = np.median(np.asarray(sums) / np.asarray(passes))
        print(f"| {d} | {np.median(sums):.3f} s | {np.median(passes):.3f} s | {ratio:.2f} |",
              flush=True)


def at_size(args):
    parts = ["gaussian", "logistic", "radon", "numpyro"] if args.part == "all" else [args.part]
    for part in parts:
        if part == "sum":
            sum_versus_pass(args)
        elif part == "gaussian":
            at_size_gaussian(args)
        elif part == "numpyro":
            at_size_numpyro(args)
        else:
            at_size_pymc(args, part)
        print()


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
    parser.add_argument("--at-size", action="store_true", help="SVGD at the issue's sizes")
    parser.add_argument("--part", choices=["gaussian", "logistic", "radon", "numpyro", "sum",
                                           "all"],
                        default="all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--condition", type=float, default=300.0)
    parser.add_argument("--sample-repeats", type=int, default=2,
                        help="pm.sample runs timed in the logistic part (0: none)")
    parser.add_argument("--no-former", dest="former", action="store_false",
                        help="skip the runs with the former defaults")
    args = parser.parse_args()
    if args.tuning:
        tuning(args)
        return
    if args.at_size:
        at_size(args)
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
            stein_variational(x, score=lambda z: -z, n_steps=n_steps, ksd_every=ksd_every,
                              tol=None)
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
