"""Stein control variates (issue 28): variance reduction, MCSE accuracy, coverage and times.

Also (issue 35) ``--premise``: false alarms of the premise checks on draws that come from
the target and their power on draws and scores that do not belong together; ``--advi``:
the checks on mean-field ADVI draws of the PyMC models (biased).

The parts of issue 28:

``--scaling``: stationary Gaussian AR(1) chains (rho = 0.5) of N(mu, Sigma), d from 2 to
200, 4 x 1000 draws, f = the parameters' means and f = exp(x_0 / 2) (closed-form truth,
not in the span of any polynomial control variate). Time of the default method and of
each method, variance-reduction factors as reported.

``--pymc``: repeated independent NUTS runs of logistic regression (d = 11) and
non-centred eight schools (d = 10); truth from one long reference run. For each
parameter mean: spread of the plain mean and of mean_cv across runs (their variance
ratio), mean reported mcse_mean_cv^2 over the spread of mean_cv, and the coverage of
90 % intervals mean_cv +- 1.645 mcse_mean_cv. The reference run's own MCSE is added
in quadrature when scoring coverage.

    python benchmarks/bench_control_variates.py --scaling
    python benchmarks/bench_control_variates.py --pymc --runs 50 --draws 1000
    python benchmarks/bench_control_variates.py --pymc --models schools --runs 50 \
        --draws 500 --reference-draws 10000 --trace-dir /tmp/traces

``--models`` keeps the models whose name contains one of the words; ``--trace-dir`` keeps
each NUTS trace's posterior as netCDF (``<model>_d<draws>_s<seed>.nc``) and reads it back
when it is there, so that another design is scored on the same traces without sampling.

Results are printed as Markdown rows (copied into benchmarks/results/control_variates.md).
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import steindiag

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def ar1(rng, mu, chol, n_chain, n_draw, rho=0.5):
    noise = rng.standard_normal((n_chain, n_draw, len(mu))) @ chol.T
    z = np.empty_like(noise)
    z[:, 0] = noise[:, 0]
    for t in range(1, n_draw):
        z[:, t] = rho * z[:, t - 1] + np.sqrt(1 - rho * rho) * noise[:, t]
    return mu + z


def scaling(dims, n_chain=4, n_draw=1000):
    rng = np.random.default_rng(0)
    print("| d | method (auto's choice) | time auto (s) | time polynomial1 (s) | time regularised (s)"
          " | median VR means | VR exp(x0/2) |")
    print("|---|---|---|---|---|---|---|")
    for d in dims:
        mu = rng.normal(0, 1, d)
        factor = rng.standard_normal((d, d)) / np.sqrt(d)
        sigma = factor @ factor.T + np.eye(d)
        chol = np.linalg.cholesky(sigma)
        precision = np.linalg.inv(sigma)
        x = ar1(rng, mu, chol, n_chain, n_draw)
        s = -(x - mu) @ precision
        functions = {"exp": lambda draws: np.exp(draws[..., 0] / 2)}
        times = {}
        for method in ("auto", "polynomial1", "regularised"):
            start = time.perf_counter()
            res = steindiag.control_variates(x, score=s, method=method, functions=functions)
            times[method] = time.perf_counter() - start
            if method == "auto":
                auto = res
        vr = auto["variance_reduction"].values
        print(f"| {d} | {auto.attrs['method']} | {times['auto']:.2f} | {times['polynomial1']:.2f} "
              f"| {times['regularised']:.2f} | {np.median(vr[:-1]):.3g} | {vr[-1]:.3g} |",
              flush=True)


def _premise(res):
    """(failed?, largest |z| / threshold) of one result's premise checks."""
    return res.attrs["premise_check"] == "failed", float(res.attrs["premise_worst_ratio"])


def _student_t_score(x, nu=5.0):
    return -(nu + 1.0) * x / (nu + x * x)


def premise_level(reps, method="auto"):
    """False alarms of the premise checks on draws that come from the target.

    Gaussian N(mu, Sigma) (dense Sigma as in ``scaling``), i.i.d. or stationary AR(1),
    and i.i.d. Student-t(5) coordinates; rows: the parameters' means and exp(x_0 / 2);
    ``method`` ("regularised" in the results file: "auto" adds the kernel's cubic cost
    for N <= 1000, and the checks on the draws do not depend on the method). Prints the
    fraction of runs whose checks fail (family-wise level 0.001: false alarms) and the
    largest |z| / threshold over the runs (above 1: fails).
    """
    rng = np.random.default_rng(7)
    print("| target | d | chains x draws | runs | false alarms | largest |z| / threshold | "
          "median VR of the means |")
    print("|---|---|---|---|---|---|---|")
    cases = [("Gaussian, i.i.d.", d, n, 0.0) for d in (1, 3, 10) for n in (50, 250, 1000)]
    cases += [("Gaussian, i.i.d.", 50, 1000, 0.0), ("Gaussian, i.i.d.", 200, 1000, 0.0),
              ("Gaussian, AR(1) rho = 0.5", 3, 1000, 0.5),
              ("Gaussian, AR(1) rho = 0.5", 10, 1000, 0.5),
              ("Gaussian, AR(1) rho = 0.9", 3, 1000, 0.9),
              ("Gaussian, AR(1) rho = 0.9", 10, 1000, 0.9),
              ("Student-t(5), i.i.d.", 3, 250, None), ("Student-t(5), i.i.d.", 3, 1000, None)]
    functions = {"exp": lambda draws: np.exp(draws[..., 0] / 2)}
    for name, d, n_draw, rho in cases:
        n_runs = reps if d <= 10 else max(reps // 4, 10)
        alarms, small, vr = 0, 0, []
        for _ in range(n_runs):
            if rho is None:
                x = rng.standard_t(5.0, (4, n_draw, d))
                score = _student_t_score(x)
            else:
                mu = rng.normal(0, 1, d)
                factor = rng.standard_normal((d, d)) / np.sqrt(d)
                sigma = factor @ factor.T + np.eye(d)
                x = ar1(rng, mu, np.linalg.cholesky(sigma), 4, n_draw, rho=rho)
                score = -(x - mu) @ np.linalg.inv(sigma)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = steindiag.control_variates(x, score=score, functions=functions,
                                                 method=method)
            failed, ratio = _premise(res)
            alarms += failed
            small = max(small, ratio)
            vr.append(np.median(res["variance_reduction"].values[:d]))
        print(f"| {name} | {d} | 4 x {n_draw} | {n_runs} | {alarms / n_runs:.3f} | "
              f"{small:.2f} | {np.median(vr):.3g} |", flush=True)


def premise_few_draws(reps):
    """Warnings of ``control_variates`` on few exact N(0, I) draws (score -x): seeds
    0 .. reps - 1 of ``default_rng(seed).standard_normal((chains, draws, d))``."""
    print("| exact N(0, I) draws | runs | warned |")
    print("|---|---|---|")
    for chains, draws, d in ((2, 60, 22), (2, 60, 5), (4, 50, 10), (4, 250, 3)):
        warned = 0
        for seed in range(reps):
            x = np.random.default_rng(seed).standard_normal((chains, draws, d))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                steindiag.control_variates(x, score=-x)
            warned += any("do not belong together" in str(w.message) for w in caught)
        print(f"| {chains} x {draws}, d = {d} | {reps} | {warned} |", flush=True)


def premise_power(reps):
    """Power of the premise checks on draws and scores that do not belong together.

    4 x 500 draws, d = 2; rows: the means (the issue's reproductions, and moment-matched
    wrong targets). Prints the fraction of runs whose checks fail and, without the
    checks, the median shift of mean_cv from the plain mean in plain MCSEs.
    """
    rng = np.random.default_rng(8)
    shape = (4, 500, 2)
    cases = {
        "N(0, 1) draws, score of N(3, 1)": lambda: (lambda x: (x, -(x - 3.0)))(
            rng.standard_normal(shape)),
        "N(0, 1) draws, score -x - 1 (a log-Jacobian missing)": lambda: (lambda x: (x, -x - 1.0))(
            rng.standard_normal(shape)),
        "N(0, 1) draws, score +x": lambda: (lambda x: (x, x))(rng.standard_normal(shape)),
        "Poisson(3) draws, score of N(0, 1)": lambda: (lambda x: (x, -x))(
            rng.poisson(3.0, shape).astype(float)),
        "Poisson(3) draws, score of N(3, 3) (same mean and variance)": lambda: (
            lambda x: (x, -(x - 3.0) / 3.0))(rng.poisson(3.0, shape).astype(float)),
        "Student-t(5) draws, score of N(0, 5/3) (same mean and variance)": lambda: (
            lambda x: (x, -0.6 * x))(rng.standard_t(5.0, shape)),
        "N(0, 1) draws, score of N(0, 1.2^2) (sd 20 % off)": lambda: (
            lambda x: (x, -x / 1.44))(rng.standard_normal(shape)),
        "N(0, 1) draws, score of N(0.1, 1) (mean off by 0.1 sd)": lambda: (
            lambda x: (x, -(x - 0.1)))(rng.standard_normal(shape)),
    }
    print("| draws and score | runs | checks fail (level 0.001) | median |mean_cv - mean| / "
          "mcse_mean, unchecked |")
    print("|---|---|---|---|")
    for name, make in cases.items():
        fails, shifts = 0, []
        for _ in range(reps):
            x, score = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = steindiag.control_variates(x, score=score)
            fails += _premise(res)[0]
            shifts.append(np.median(np.abs(res["shift_in_mcse"].values)))
        print(f"| {name} | {reps} | {fails / reps:.2f} | {np.median(shifts):.3g} |", flush=True)


def _sample(pm, model, draws, seed, chains=4):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(draws, tune=draws, chains=chains, cores=1, random_seed=seed,
                         progressbar=False, model=model, compute_convergence_checks=False,
                         target_accept=0.95)


def _trace(pm, model, key, draws, seed, chains, trace_dir):
    """The posterior of one NUTS run, read from or written to ``trace_dir`` when given."""
    import xarray as xr

    if trace_dir is None:
        return _sample(pm, model, draws, seed=seed, chains=chains)
    path = Path(trace_dir) / f"{key}_d{draws}_s{seed}.nc"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _sample(pm, model, draws, seed=seed, chains=chains).posterior.to_netcdf(path)
    with xr.open_dataset(path) as posterior:
        return posterior.load()


def _models():
    import pymc as pm
    from pymc_models import EIGHT_SCHOOLS_SIGMA, EIGHT_SCHOOLS_Y, logistic

    rng = np.random.default_rng(1)
    logistic_model = logistic(rng, n_obs=200, n_predictor=10).model
    with pm.Model() as schools:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta_tilde = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
        pm.Normal("y", mu + tau * theta_tilde, EIGHT_SCHOOLS_SIGMA, observed=EIGHT_SCHOOLS_Y)
    return {"logistic (d = 11)": logistic_model, "eight schools, non-centred (d = 10)": schools}


def advi_runs(n_runs, trace_dir, reference_draws, n_iterations=20000):
    """Biased draws: mean-field ADVI on the benchmark's PyMC models, 4 x 500 draws of the
    fitted approximation, as drawn and shrunk 0.8 towards their mean (every free
    variable, in its own space). Prints how often the premise checks fail and, against
    the NUTS reference run (from ``trace_dir`` when there), the largest |mean - truth| /
    mcse_mean of the plain estimates, i.e. how wrong the draws are."""
    import pymc as pm
    import xarray as xr

    print("| model | draws | runs | checks fail | median largest |z| / threshold | "
          "median largest |plain mean - truth| / mcse_mean |")
    print("|---|---|---|---|---|---|")
    for name, model in _models().items():
        key = name.split(" (")[0].split(",")[0].replace(" ", "_")
        reference = _trace(pm, model, key, reference_draws, 12345, 4, trace_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = steindiag.control_variates(reference, model)
        labels = [str(v) for v in ref["label"].values]
        truth = ref["mean_cv"].values
        rows = {"ADVI": [], "ADVI shrunk 0.8": []}
        for run in range(n_runs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                approx = pm.fit(n_iterations, method="advi", model=model, random_seed=run,
                                progressbar=False)
                drawn = approx.sample(2000, random_seed=run)
            posterior = drawn.posterior if hasattr(drawn, "posterior") else drawn["posterior"]
            posterior = xr.Dataset({
                var: (("chain", "draw", *posterior[var].dims[2:]),
                      posterior[var].values.reshape(4, 500, *posterior[var].shape[2:]))
                for var in posterior.data_vars},
                coords={"chain": np.arange(4), "draw": np.arange(500)})
            centre = posterior.mean(("chain", "draw"))
            for kind, draws in (("ADVI", posterior),
                                ("ADVI shrunk 0.8", centre + 0.8 * (posterior - centre))):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = steindiag.control_variates(draws, model).sel(label=labels)
                failed, ratio = _premise(res)
                wrong = np.max(np.abs(res["mean"].values - truth) / res["mcse_mean"].values)
                rows[kind].append((failed, ratio, wrong))
        for kind, values in rows.items():
            values = np.array(values, dtype=float)
            print(f"| {name} | {kind} | {n_runs} | {values[:, 0].mean():.2f} | "
                  f"{np.median(values[:, 1]):.3g} | {np.median(values[:, 2]):.3g} |",
                  flush=True)


def pymc_runs(n_runs, n_draws, reference_draws, method, models=None, trace_dir=None):
    import pymc as pm

    print("| model | method | runs x draws | variance ratio plain/cv (min, median) | "
          "reported MCSE^2 / spread (median, range) | coverage of 90 % intervals | "
          "time per call (s) |")
    print("|---|---|---|---|---|---|---|")
    per_parameter = []
    for name, model in _models().items():
        if models and not any(word in name for word in models):
            continue
        key = name.split(" (")[0].split(",")[0].replace(" ", "_")
        reference = _trace(pm, model, key, reference_draws, 12345, 4, trace_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = steindiag.control_variates(reference, model, method=method)
        labels = [str(v) for v in ref["label"].values]
        truth = ref["mean_cv"].values
        truth_se = ref["mcse_mean_cv"].values
        plain, cv, mcse_cv, times, alarms = [], [], [], [], []
        for run in range(n_runs):
            trace = _trace(pm, model, key, n_draws, run, 4, trace_dir)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = steindiag.control_variates(trace, model, method=method).sel(label=labels)
            times.append(time.perf_counter() - start)
            alarms.append(_premise(res))
            plain.append(res["mean"].values)
            cv.append(res["mean_cv"].values)
            mcse_cv.append(res["mcse_mean_cv"].values)
        plain, cv, mcse_cv = map(np.array, (plain, cv, mcse_cv))
        var_plain = plain.var(axis=0, ddof=1)
        var_cv = cv.var(axis=0, ddof=1)
        ratio = var_plain / var_cv
        accuracy = np.mean(mcse_cv ** 2, axis=0) / var_cv
        half = 1.645 * np.sqrt(mcse_cv ** 2 + truth_se ** 2)
        coverage = np.mean(np.abs(cv - truth) <= half)
        print(f"| {name} | {method} | {n_runs} x 4 x {n_draws} | {ratio.min():.3g} "
              f"({labels[int(np.argmin(ratio))]}), "
              f"{np.median(ratio):.3g} | {np.median(accuracy):.2f} ({accuracy.min():.2f}-"
              f"{accuracy.max():.2f}) | {coverage:.3f} | {np.median(times):.2f} |", flush=True)
        print(f"premise checks on {name}: the reference run "
              f"{ref.attrs['premise_check']} (largest |z| / threshold "
              f"{ref.attrs['premise_worst_ratio']:.2f}); {sum(a for a, _ in alarms)} of "
              f"{n_runs} runs failed (false alarms); largest |z| / threshold over the runs "
              f"{max(r for _, r in alarms):.2f}", flush=True)
        covered = np.abs(cv - truth) <= half
        per_parameter += [f"| {name} | {label} | {ratio[j]:.3g} | {accuracy[j]:.2f} | "
                          f"{covered[:, j].mean():.2f} |" for j, label in enumerate(labels)]
    print("\n| model | parameter | variance ratio plain/cv | reported MCSE^2 / spread | "
          "coverage of 90 % intervals |")
    print("|---|---|---|---|---|")
    print("\n".join(per_parameter), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--dims", type=int, nargs="*", default=[2, 5, 10, 20, 50, 100, 200])
    parser.add_argument("--pymc", action="store_true")
    parser.add_argument("--advi", action="store_true",
                        help="premise checks on mean-field ADVI draws (biased)")
    parser.add_argument("--premise-few-draws", action="store_true",
                        help="warnings of the premise checks on few exact draws")
    parser.add_argument("--premise", action="store_true",
                        help="false alarms and power of the premise checks")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--reference-draws", type=int, default=20000)
    parser.add_argument("--method", default="auto")
    parser.add_argument("--models", nargs="*", default=None,
                        help="keep the models whose name contains one of these words")
    parser.add_argument("--trace-dir", default=None,
                        help="read NUTS traces from / write them to this directory")
    args = parser.parse_args()
    if args.scaling:
        scaling(args.dims)
    if args.advi:
        advi_runs(args.runs, args.trace_dir, args.reference_draws)
    if args.premise_few_draws:
        premise_few_draws(args.runs)
    if args.premise:
        premise_level(args.runs, args.method)
        premise_power(max(args.runs // 2, 10))
    if args.pymc:
        pymc_runs(args.runs, args.draws, args.reference_draws, args.method, args.models,
                  args.trace_dir)


if __name__ == "__main__":
    main()
