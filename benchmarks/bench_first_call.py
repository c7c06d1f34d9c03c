"""First call on a new PyMC model: steindiag's first call against ``pm.sample`` in one process.

Each case runs in a fresh subprocess with an EMPTY PyTensor compile cache
(``PYTENSOR_FLAGS=compiledir=<new temporary directory>``): as a user meets a model the day
they write it. The child builds the model, times ``pm.sample`` (4 chains x 1000 draws
after 1000 tuning steps, PyMC's defaults otherwise: it compiles the model itself), then
the steindiag function's first call and the same call again. Numba's cache is the
checkout's own (warm after any earlier run) unless ``--cold-numba``: then each child also
gets an empty ``NUMBA_CACHE_DIR`` (a new installation's very first call).

Models (d = number of unconstrained parameters):

- ``robust`` (d = 7): Student-t regression on 4 predictors, 200 observations;
- ``logistic`` (d = 23): hierarchical logistic regression, 20 groups (non-centred),
  1000 observations;
- ``radon`` (d = 89): varying-intercept radon model (Gelman & Hill 2007), 85 counties,
  919 observations, simulated with the Minnesota data's sizes (the data set itself ships
  only with ArviZ 0.x).

Functions: ``diagnose(idata, model)``, ``add_scores(idata, model)``,
``control_variates(idata, model)``, each with its default arguments and ``rng=0``.

Reported per (model, function): medians over ``--repeats`` processes of the sampling
time, the first call, the repeated call, and the ratios first / sample and first -
repeated measured in each process; the load average before and after. Each child also
appends its raw record, with CPU seconds (process and g++ children), to
``$FIRST_CALL_LOG`` (default /tmp/first_call_runs.jsonl).

Run:  python benchmarks/bench_first_call.py [--repeats 3] [--models robust,logistic,radon]
      [--functions diagnose,add_scores,control_variates] [--cold-numba] [--profile]
      [--one-process] [--base OTHER_CHECKOUT] [--out FILE]

``--one-process``: one process per model runs every function in turn (steindiag's
in-memory cache emptied between them; PyTensor's compile directory keeps what the earlier
ones compiled, so the later functions' first calls are lower bounds). ``--base``: the
same runs on another checkout, alternating.

``--profile``: one process per case under cProfile; prints the time of the first call
spent in PyTensor's compilation (``pytensor.compile.function.types.orig_function``), in
Numba's (``Dispatcher._compile_for_args``) and the top of the profile.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
# The checkout whose steindiag a child must import (this one, or --base).
ROOT_OF_STEINDIAG = Path(os.environ.get("FIRST_CALL_STEINDIAG", REPO)).resolve()

MODELS = ("robust", "logistic", "radon")
FUNCTIONS = ("diagnose", "add_scores", "control_variates")


def build_model(name):
    import numpy as np
    import pymc as pm

    rng = np.random.default_rng(1)
    if name == "robust":
        n, k = 200, 4
        x = rng.standard_normal((n, k))
        y = 1.0 + x @ np.array([0.5, -1.0, 0.3, 0.0]) + 0.7 * rng.standard_t(4, n)
        with pm.Model() as model:
            intercept = pm.Normal("intercept", 0.0, 5.0)
            beta = pm.Normal("beta", 0.0, 2.0, shape=k)
            sigma = pm.HalfNormal("sigma", 2.0)
            nu = pm.Gamma("nu", 2.0, 0.1)
            pm.StudentT("y", nu=nu, mu=intercept + pm.math.dot(x, beta), sigma=sigma,
                        observed=y)
        return model
    if name == "logistic":
        n, groups = 1000, 20
        group = rng.integers(0, groups, n)
        x = rng.standard_normal(n)
        alpha = 0.3 + 0.8 * rng.standard_normal(groups)
        y = rng.random(n) < 1.0 / (1.0 + np.exp(-(alpha[group] + 0.7 * x)))
        with pm.Model() as model:
            mu = pm.Normal("mu", 0.0, 2.0)
            sigma = pm.HalfNormal("sigma", 1.0)
            z = pm.Normal("z", 0.0, 1.0, shape=groups)
            slope = pm.Normal("slope", 0.0, 2.0)
            pm.Bernoulli("y", logit_p=mu + sigma * z[group] + slope * x,
                         observed=y.astype("int64"))
        return model
    if name == "radon":
        n, counties = 919, 85
        county = np.sort(np.concatenate([np.arange(counties),
                                         rng.integers(0, counties, n - counties)]))
        floor = (rng.random(n) < 0.17).astype(float)
        a = 1.5 + 0.3 * rng.standard_normal(counties)
        y = a[county] - 0.6 * floor + 0.75 * rng.standard_normal(n)
        with pm.Model() as model:
            mu_a = pm.Normal("mu_a", 0.0, 10.0)
            sigma_a = pm.Exponential("sigma_a", 1.0)
            a = pm.Normal("a", mu_a, sigma_a, shape=counties)
            b = pm.Normal("b", 0.0, 10.0)
            sigma_y = pm.Exponential("sigma_y", 1.0)
            pm.Normal("y", a[county] + b * floor, sigma_y, observed=y)
        return model
    raise ValueError(name)


def _call(function, idata, model):
    import steindiag

    if function == "diagnose":
        return steindiag.diagnose(idata, model, rng=0)
    if function == "add_scores":
        return steindiag.add_scores(idata, model)
    if function == "control_variates":
        return steindiag.control_variates(idata, model)
    raise ValueError(function)


def child(model_name, functions, profile):
    """Runs in the fresh process: sample, then each function's first and repeated call;
    prints JSON. After the first function, steindiag's in-memory cache of the model's
    compiled functions is emptied before the next one (PyTensor's compile directory then
    holds what the earlier calls compiled: a later function's "first" is a lower bound)."""
    import warnings

    warnings.simplefilter("ignore")
    import logging

    import numpy as np
    import pymc as pm

    import steindiag
    from steindiag.inputs._pymc_graphs import COMPILED

    assert Path(steindiag.__file__).resolve().is_relative_to(ROOT_OF_STEINDIAG), \
        steindiag.__file__
    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = build_model(model_name)
    cpu_start = _cpu()
    start = time.perf_counter()
    with model:
        idata = pm.sample(1000, tune=1000, chains=4, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
    sample = time.perf_counter() - start
    out = {"sample": sample, "cpu_sample": _cpu() - cpu_start, "d": int(sum(np.size(v) for v in model.initial_point().values())),
           "calls": {}}
    for function in functions.split(","):
        COMPILED.pop(model, None)
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        cpu_start = _cpu()
        start = time.perf_counter()
        _call(function, idata, model)
        first = time.perf_counter() - start
        cpu_first = _cpu() - cpu_start
        if profiler is not None:
            profiler.disable()
        cpu_start = _cpu()
        start = time.perf_counter()
        _call(function, idata, model)
        again = time.perf_counter() - start
        call = {"first": first, "again": again, "cpu_first": cpu_first,
                "cpu_again": _cpu() - cpu_start}
        if profiler is not None:
            call["profile"] = _profile_summary(profiler)
        out["calls"][function] = call
    out["model"], out["load"] = model_name, os.getloadavg()
    out["steindiag"] = str(ROOT_OF_STEINDIAG)
    print("RESULT " + json.dumps(out))
    with open(os.environ.get("FIRST_CALL_LOG", "/tmp/first_call_runs.jsonl"), "a") as log:
        log.write(json.dumps(out) + "\n")


def _cpu():
    """CPU seconds of this process (all threads) and of its finished children (g++)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _profile_summary(profiler):
    import io
    import pstats

    stats = pstats.Stats(profiler)
    groups = {"pytensor compile (orig_function)": ("pytensor/compile/function/types.py",
                                                   "orig_function"),
              "pytensor C module compile (compile_cmodule)": ("pytensor/link/c/",
                                                              "compile_cmodule_by_step"),
              "pytensor rewrites (rewrite_graph/optimizer)": ("pytensor/compile/function/types.py",
                                                              "prepare_fgraph"),
              "numba compile (_compile_for_args)": ("numba/core/dispatcher.py",
                                                    "_compile_for_args"),
              "numba cache load": ("numba/core/caching.py", "load_overload")}
    summary = {}
    for label, (path, name) in groups.items():
        total = 0.0
        for (filename, _, function), row in stats.stats.items():
            if function == name and path in filename:
                total = max(total, row[3])  # cumulative; max: outermost call
        summary[label] = round(total, 3)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    summary["top"] = text.getvalue()
    return summary


def run_case(model_name, functions, cold_numba, profile, repo=REPO):
    with tempfile.TemporaryDirectory(prefix="first_call_") as tmp:
        env = dict(os.environ)
        env["PYTENSOR_FLAGS"] = f"compiledir={tmp}/pytensor"
        if cold_numba:
            env["NUMBA_CACHE_DIR"] = f"{tmp}/numba"
        env["PYTHONPATH"] = str(repo)
        env["FIRST_CALL_STEINDIAG"] = str(repo)
        env.setdefault("MPLBACKEND", "Agg")
        command = [sys.executable, __file__, "--child", model_name, functions]
        if profile:
            command.append("--profile")
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=repo)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{model_name}/{functions} failed:\n{done.stdout}\n{done.stderr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "FUNCTIONS"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--one-process", action="store_true",
                        help="all functions in one process per model (see child())")
    parser.add_argument("--base", default=None,
                        help="another checkout, run in alternation with this one")
    parser.add_argument("--cold-numba", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.profile)
        return
    functions = args.functions.split(",")
    groups = [args.functions] if args.one_process else functions
    checkouts = [("this", REPO)] + ([("base", Path(args.base))] if args.base else [])
    runs = {}
    for model_name in args.models.split(","):
        for _ in range(args.repeats):
            for label, repo in checkouts:
                for group in groups:
                    load = _load()[0]
                    result = run_case(model_name, group, args.cold_numba, args.profile, repo)
                    for function, call in result["calls"].items():
                        runs.setdefault((model_name, function, label), []).append(
                            {"sample": result["sample"], "d": result["d"], **call,
                             "load": (load, _load()[0])})
                        print(f"[{label}] {model_name} {function}: d={result['d']} sample "
                              f"{result['sample']:.1f} s, first {call['first']:.2f} s, "
                              f"again {call['again']:.2f} s (load {load:.1f}-{_load()[0]:.1f})",
                              flush=True)
                        if args.profile:
                            for key, value in call["profile"].items():
                                if key != "top":
                                    print(f"    {key}: {value} s")
                            print(call["profile"]["top"])
    rows = [_row(model_name, function, label, group_runs)
            for (model_name, function, label), group_runs in runs.items()]
    table = _table(rows, args)
    print(table)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(table + "\n")


def _load():
    return os.getloadavg()


def _row(model_name, function, label, runs):
    median = statistics.median
    return {
        "model": model_name, "function": function, "label": label, "d": runs[0]["d"],
        "sample": median(r["sample"] for r in runs),
        "first": median(r["first"] for r in runs),
        "again": median(r["again"] for r in runs),
        "ratio": median(r["first"] / r["sample"] for r in runs),
        "extra": median(r["first"] - r["again"] for r in runs),
        "firsts": [r["first"] for r in runs],
        "load": (min(r["load"][0] for r in runs), max(r["load"][1] for r in runs)),
    }


def _table(rows, args):
    lines = [
        f"`python benchmarks/bench_first_call.py --repeats {args.repeats}"
        + (" --cold-numba" if args.cold_numba else "")
        + (" --one-process" if args.one_process else "")
        + (" --base <checkout>" if args.base else "") + "`, "
        + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "",
        "| model (d) | function | checkout | pm.sample (s) | first (s) | again (s) "
        "| first / sample | first - again (s) | firsts of the runs | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} ({r['d']}) | `{r['function']}` | {r['label']} | {r['sample']:.1f} | "
            f"{r['first']:.2f} | {r['again']:.2f} | {r['ratio']:.2f} | {r['extra']:.2f} | "
            + ", ".join(f"{v:.1f}" for v in r["firsts"])
            + f" | {r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
