"""Level and power of ``diagnose`` on a selection of the parameters (issue 38, point 3b).

Usage::

    nice -n 10 python benchmarks/bench_selection.py --workers 2          # the whole grid
    nice -n 10 python benchmarks/bench_selection.py --only 'leftout-*' --reps 50
    python benchmarks/bench_selection.py --pymc --reps 40                # NUTS, eight schools
    python benchmarks/bench_selection.py --tables-only

With a score covering every parameter, a selection S of the parameters is checked with the
Stein discrepancy of the selected coordinates: the draws' columns S and the joint score's
components S, s_S(x) = grad_{x_S} log p(x) (see the Background page, "A selection of the
parameters"). Its Stein kernel has mean zero under p, so the tests keep their level; it
detects draws whose conditional-mean score E_q[s_S | x_S] differs from grad log q_S.

Each run puts the chains of a configuration (``tests/valid_chains.py``) in an
``xarray.Dataset`` with one variable per coordinate (``x0``, ``x1``, ...) and its scores in
a Dataset of the same names, then calls::

    steindiag.diagnose(posterior, score=scores, var_names=SELECTED, mode_search=False, rng=seed)
    steindiag.diagnose(posterior, score=scores, mode_search=False, rng=seed)   # "full"

(the second only for the power configurations, on the same draws: how much power the
selection gives up). The search for unvisited mass is left out here: with a selection it
runs on the whole model's draws (the same test as without one; its level is in
benchmarks/results/missing_mass.md and calibration.md), and these Gaussian targets have one
mode.

``--pymc``: the non-centred eight schools (``tests/pymc_models.py``; 4 chains x 1000 draws
after 1000 tuning steps, target_accept 0.95, cores=1), runs without divergences and with
R-hat < 1.01 diagnosed with ``diagnose(idata, model, var_names=["~theta_tilde"])`` (mu and
tau: the selected check, the search on every free variable), the default variant.

Rows go to ``benchmarks/results/selection.jsonl``; the tables (rate of "does not fit",
pooled or any chain, with 95 % Clopper-Pearson intervals) to
``benchmarks/results/selection.md``. Runs resume by (configuration, variant, rep).
"""

import argparse
import concurrent.futures
import datetime
import fnmatch
import functools
import json
import platform
import shlex
import subprocess
import sys
import time
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import valid_chains as vc  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
JSONL = RESULTS / "selection.jsonl"
MARKDOWN = RESULTS / "selection.md"
BASE_ENTROPY = 38_3  # issue 38, point 3b


@dataclass(kw_only=True)
class Configuration:
    """One cell of the grid."""

    name: str
    kind: str              # "valid" or "power"
    make: functools.partial  # make(rng) -> (draws (chain, draw, d), score callable)
    selected: tuple        # indices of the selected coordinates
    reps: int
    note: str


def _equicorrelated(dim, correlation):
    return vc.equicorrelated_covariance(dim, correlation)


def _conditional(covariance, selected):
    """(B, C): E[x_-S | x_S] = x_S B^T and the conditional covariance C of N(0, Sigma)."""
    dim = covariance.shape[0]
    rest = [k for k in range(dim) if k not in selected]
    s_ss = covariance[np.ix_(selected, selected)]
    s_rs = covariance[np.ix_(rest, selected)]
    coefficient = s_rs @ np.linalg.inv(s_ss)
    conditional = covariance[np.ix_(rest, rest)] - coefficient @ s_rs.T
    return rest, coefficient, conditional


def _valid(rng, *, covariance, rho, n_chain, n_draw):
    """Exact draws (rho = 0) or a stationary VAR(1) chain (each draw exact) of N(0, Sigma)."""
    dim = covariance.shape[0]
    chains = vc.var1_chains(n_chain, n_draw, covariance, np.full(dim, rho), rng=rng)
    return chains.draws, chains.score


def _var1_slow(rng, *, covariance, slow_tau, n_chain, n_draw):
    dim = covariance.shape[0]
    rho = np.zeros(dim)
    rho[dim // 2:] = vc.rho_for_tau(slow_tau)
    chains = vc.var1_chains(n_chain, n_draw, covariance, rho, rng=rng)
    return chains.draws, chains.score


def _ula(rng, *, covariance, step, n_chain, n_draw):
    target = vc.gaussian_target(np.zeros(covariance.shape[0]), covariance)
    chains = vc.ula_chains(target, n_chain, n_draw, step=step, rng=rng, burn_in=200)
    return chains.draws, chains.score


def _shrunk(rng, *, covariance, shrink, n_chain, n_draw):
    target = vc.gaussian_target(np.zeros(covariance.shape[0]), covariance)
    chains = vc.shrunk_draws(target, n_chain, n_draw, rng=rng, shrink=shrink)
    return chains.draws, chains.score


def _mean_field(rng, *, covariance, n_chain, n_draw):
    """Independent draws of the mean-field Gaussian approximation (KL(q || p) optimal):
    N(0, diag(1 / P_kk)), P the precision: every marginal too narrow."""
    target = vc.gaussian_target(np.zeros(covariance.shape[0]), covariance)
    sds = 1.0 / np.sqrt(np.diag(np.linalg.inv(covariance)))
    draws = rng.standard_normal((n_chain, n_draw, covariance.shape[0])) * sds
    return draws, target.score


def _left_out_wrong(rng, *, covariance, selected, spread, shift, n_chain, n_draw):
    """x_S exact draws of p_S; x_-S = E_p[x_-S | x_S] + shift sd + spread L z (L L^T the
    conditional covariance): only the left-out coordinates are wrong."""
    target = vc.gaussian_target(np.zeros(covariance.shape[0]), covariance)
    rest, coefficient, conditional = _conditional(covariance, list(selected))
    n = n_chain * n_draw
    x_s = rng.standard_normal((n, len(selected))) @ np.linalg.cholesky(
        covariance[np.ix_(selected, selected)]).T
    cholesky = np.linalg.cholesky(conditional)
    x_r = (x_s @ coefficient.T + shift * np.sqrt(np.diag(conditional))
           + spread * rng.standard_normal((n, len(rest))) @ cholesky.T)
    draws = np.empty((n, covariance.shape[0]))
    draws[:, list(selected)], draws[:, rest] = x_s, x_r
    return draws.reshape(n_chain, n_draw, -1), target.score


def configurations():
    """Every configuration, by name."""
    found = []
    equi6 = _equicorrelated(6, 0.8)
    toeplitz8 = vc.correlated_covariance(8, correlation=0.9)
    equi10 = _equicorrelated(10, 0.9)
    equi5 = _equicorrelated(5, 0.8)

    def add(name, kind, make, selected, reps, note):
        found.append(Configuration(name=name, kind=kind, make=make, selected=tuple(selected),
                                   reps=reps, note=note))

    add("iid-equi0.8-d6-sel2-4x500", "valid",
        functools.partial(_valid, covariance=equi6, rho=0.0, n_chain=4, n_draw=500),
        (0, 1), 200, "exact draws of N(0, Sigma), equicorrelated 0.8, d = 6; x0, x1 selected")
    add("var1-toeplitz0.9-d8-sel3-4x1000", "valid",
        functools.partial(_var1_slow, covariance=toeplitz8, slow_tau=9, n_chain=4,
                          n_draw=1000),
        (5, 6, 7), 200, "VAR(1) on N(0, Sigma), Sigma_ij = s_i s_j 0.9^|i-j| (s 1 to 10), "
                        "d = 8, latent coordinates 4-7 tau = 9; x5-x7 selected")
    add("var1-equi0.9-d10-sel1-4x1000", "valid",
        functools.partial(_valid, covariance=equi10, rho=0.5, n_chain=4, n_draw=1000),
        (0,), 200, "VAR(1) on N(0, Sigma), equicorrelated 0.9, d = 10, latent rho 0.5 "
                   "(tau 3); x0 selected")
    add("var1anti-equi0.8-d5-sel2-4x500", "valid",
        functools.partial(_valid, covariance=equi5, rho=-0.5, n_chain=4, n_draw=500),
        (1, 3), 200, "VAR(1) on N(0, Sigma), equicorrelated 0.8, d = 5, latent rho -0.5 "
                     "(antithetic, as NUTS); x1, x3 selected")
    for ula_step in (0.1, 0.2):
        _, stationary = vc.ula_gaussian_stationary(np.zeros(6), equi6, ula_step)
        add(f"ula{ula_step:g}-equi0.8-d6-sel2-4x500", "power",
            functools.partial(_ula, covariance=equi6, step=ula_step, n_chain=4, n_draw=500),
            (0, 1), 100, f"ULA step {ula_step:g} on N(0, Sigma), equicorrelated 0.8, d = 6 "
                         f"(selected variances {stationary[0, 0]:.3f}x p's); x0, x1 selected")
    add("shrunk0.8-equi0.8-d6-sel2-4x500", "power",
        functools.partial(_shrunk, covariance=equi6, shrink=0.8, n_chain=4, n_draw=500),
        (0, 1), 100, "exact draws of the same N(0, Sigma) shrunk 0.8 to the mean; x0, x1 "
                     "selected")
    precision = np.linalg.inv(equi6)
    for selected in ((0,), (0, 1)):
        add(f"meanfield-equi0.8-d6-sel{len(selected)}-4x500", "power",
            functools.partial(_mean_field, covariance=equi6, n_chain=4, n_draw=500),
            selected, 100,
            "independent draws of the mean-field approximation N(0, diag(1 / P_kk)) of the "
            f"same N(0, Sigma) (marginal variance {1 / precision[0, 0]:.3f}, p's 1); "
            + ", ".join(f"x{k}" for k in selected) + " selected"
            + (" (one coordinate: E_q[s_0 | x_0] = -P_00 x_0 is q_0's own score, the "
               "mean-field fixed point, so the selected check cannot see it)"
               if len(selected) == 1 else ""))
    add("leftout-spread0.5-equi0.8-d6-sel2-4x500", "power",
        functools.partial(_left_out_wrong, covariance=equi6, selected=(0, 1), spread=0.5,
                          shift=0.0, n_chain=4, n_draw=500),
        (0, 1), 100, "x0, x1 exact; x2-x5 given x0, x1 with the right mean and half the "
                     "conditional sd: only the left-out coordinates are wrong, and "
                     "E_q[s_S | x_S] is p_S's score (invisible to the selected check)")
    add("leftout-shift0.5-equi0.8-d6-sel2-4x500", "power",
        functools.partial(_left_out_wrong, covariance=equi6, selected=(0, 1), spread=1.0,
                          shift=0.5, n_chain=4, n_draw=500),
        (0, 1), 100, "x0, x1 exact; x2-x5 given x0, x1 shifted by 0.5 conditional sd: only "
                     "the left-out coordinates are wrong, but s_S depends on them (visible)")
    return {c.name: c for c in found}


CONFIGURATIONS = configurations()


def seeds_for(name, rep):
    """(data seed, diagnose seed) of one run, the same for every variant (paired)."""
    sequence = np.random.SeedSequence(BASE_ENTROPY, spawn_key=(zlib.crc32(name.encode()), rep))
    data_seed, diagnose_seed = sequence.generate_state(2)
    return int(data_seed), int(diagnose_seed)


def _as_datasets(draws, scores):
    import xarray as xr

    dims = ("chain", "draw")
    names = [f"x{k}" for k in range(draws.shape[2])]
    posterior = xr.Dataset({n: (dims, draws[..., k]) for k, n in enumerate(names)})
    score = xr.Dataset({n: (dims, scores[..., k]) for k, n in enumerate(names)})
    return posterior, score


def _summary(result, seconds):
    return {"verdict_pooled": str(result["verdict_pooled"].values),
            "verdicts": [str(v) for v in np.asarray(result["verdict"].values).ravel()],
            "reason_pooled": str(result["reason_pooled"].values),
            "parameters": [str(p) for p in result["parameter"].values],
            "stein_coordinates": str(result.attrs.get("stein_coordinates", "")),
            "n_tests": int(result.attrs["n_tests"]), "seconds": seconds}


def run_one(task):
    """One run of one configuration: every variant on the same draws."""
    import steindiag

    name, rep, variants = task
    configuration = CONFIGURATIONS[name]
    data_seed, diagnose_seed = seeds_for(name, rep)
    draws, score = configuration.make(np.random.default_rng(data_seed))
    scores = score(draws.reshape(-1, draws.shape[2])).reshape(draws.shape)
    posterior, score_dataset = _as_datasets(draws, scores)
    rows = []
    for variant in variants:
        row = {"config": name, "variant": variant, "rep": rep, "kind": configuration.kind}
        options = {"score": score_dataset, "mode_search": False, "rng": diagnose_seed}
        if variant == "selected":
            options["var_names"] = [f"x{k}" for k in configuration.selected]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                result = steindiag.diagnose(posterior, **options)
            row.update(_summary(result, time.perf_counter() - start))
        except Exception as error:  # recorded and counted
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        rows.append(row)
    return rows


def run_pymc(task):
    """One NUTS run of the non-centred eight schools, diagnosed on mu and tau."""
    import arviz as az
    import pymc as pm
    import steindiag

    _, rep, variants = task
    gallery = _eight_schools()
    seed = seeds_for("pymc-eight_schools", rep)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(model=gallery.model, draws=1000, tune=1000, chains=4, cores=1,
                          random_seed=seed % 2**31, progressbar=False,
                          compute_convergence_checks=False, **gallery.sample_kwargs)
        rhat = float(az.rhat(idata).to_array().max())
    divergences = int(idata.sample_stats["diverging"].sum())
    rows = []
    for variant in variants:
        row = {"config": "pymc-eight_schools-sel-mu-tau", "variant": variant, "rep": rep,
               "kind": "nuts", "divergences": divergences, "rhat_max": rhat}
        if divergences or rhat >= 1.01:
            row["excluded"] = f"{divergences} divergences, max R-hat {rhat:.4f}"
        else:
            options = {"rng": seed}
            if variant == "selected":
                options["var_names"] = ["~theta_tilde"]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    result = steindiag.diagnose(idata, gallery.model, **options)
                row.update(_summary(result, time.perf_counter() - start))
                row["missing_mass_run"] = "missing_mass_pvalue" in result
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        rows.append(row)
    return rows


@functools.lru_cache(maxsize=None)
def _eight_schools():
    import pymc_models

    return pymc_models.eight_schools()


def clopper_pearson(successes, trials):
    """95 % Clopper-Pearson interval of a binomial proportion."""
    if trials == 0:
        return float("nan"), float("nan")
    low = 0.0 if successes == 0 else stats.beta.ppf(0.025, successes, trials - successes + 1)
    high = 1.0 if successes == trials else stats.beta.ppf(0.975, successes + 1,
                                                          trials - successes)
    return float(low), float(high)


def _rate(successes, trials):
    low, high = clopper_pearson(successes, trials)
    return f"{successes}/{trials} = {successes / max(trials, 1):.3f} [{low:.3f}, {high:.3f}]"


def read_rows():
    if not JSONL.exists():
        return []
    return [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]


def tables(rows):
    """Markdown tables: rate of "does not fit" (pooled or any chain) per configuration and
    variant, with 95 % Clopper-Pearson intervals."""
    lines = ["| configuration | kind | variant | runs | \"does not fit\" (pooled or any chain) "
             "| \"does not fit\" pooled | \"inconclusive\" pooled | errors / excluded | "
             "median s |", "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["config"], r["variant"]) for r in rows},
                  key=lambda k: (list(CONFIGURATIONS).index(k[0])
                                 if k[0] in CONFIGURATIONS else 99, k[1] != "selected"))
    for name, variant in keys:
        group = [r for r in rows if r["config"] == name and r["variant"] == variant]
        done = [r for r in group if "verdict_pooled" in r]
        rejected = sum(r["verdict_pooled"] == "does not fit"
                       or "does not fit" in r["verdicts"] for r in done)
        pooled = sum(r["verdict_pooled"] == "does not fit" for r in done)
        unsure = sum(r["verdict_pooled"] == "inconclusive" for r in done)
        other = len(group) - len(done)
        seconds = np.median([r["seconds"] for r in done]) if done else float("nan")
        kind = group[0]["kind"]
        lines.append(f"| {name} | {kind} | {variant} | {len(done)} | {_rate(rejected, len(done))} "
                     f"| {_rate(pooled, len(done))} | {_rate(unsure, len(done))} | {other} "
                     f"| {seconds:.2f} |")
    notes = ["", "Configurations:", ""]
    for name, configuration in CONFIGURATIONS.items():
        notes.append(f"- `{name}` ({configuration.kind}): {configuration.note}.")
    return "\n".join(lines + notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="configuration patterns")
    parser.add_argument("--reps", type=int, default=None, help="runs per configuration")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--pymc", action="store_true", help="NUTS runs of eight schools")
    parser.add_argument("--tables-only", action="store_true")
    args = parser.parse_args(argv)
    done = {(r["config"], r["variant"], r["rep"]) for r in read_rows()}
    tasks = []
    if args.pymc:
        variants = ("selected", "full")
        for rep in range(args.reps or 20):
            if not all(("pymc-eight_schools-sel-mu-tau", v, rep) in done for v in variants):
                tasks.append(("pymc", rep, variants))
    elif not args.tables_only:
        for name, configuration in CONFIGURATIONS.items():
            if args.only and not any(fnmatch.fnmatch(name, p) for p in args.only):
                continue
            variants = ("selected",) if configuration.kind == "valid" else ("selected", "full")
            for rep in range(args.reps or configuration.reps):
                missing = tuple(v for v in variants if (name, v, rep) not in done)
                if missing:
                    tasks.append((name, rep, missing))
    RESULTS.mkdir(parents=True, exist_ok=True)
    function = run_pymc if args.pymc else run_one
    start = time.time()
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.workers) as pool:
        for rows in pool.map(function, tasks):
            with JSONL.open("a") as handle:
                for row in rows:
                    handle.write(json.dumps(row) + "\n")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    command = "python benchmarks/bench_selection.py " + shlex.join(sys.argv[1:])
    if not args.tables_only and tasks:
        print(f"{len(tasks)} runs in {time.time() - start:.0f} s")
    header = (f"# Level and power of diagnose on a selection of the parameters\n\n"
              f"Tables rebuilt {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
              f"UTC at commit {commit} (Python {platform.python_version()}) from "
              f"benchmarks/results/selection.jsonl; last command: `{command}`.\n\n")
    text = header + tables(read_rows()) + "\n"
    if MARKDOWN.exists() and "<!-- tables -->" in MARKDOWN.read_text():
        before = MARKDOWN.read_text().split("<!-- tables -->")[0]
        text = before + "<!-- tables -->\n\n" + tables(read_rows()) + "\n"
    MARKDOWN.write_text(text)
    print(tables(read_rows()))


if __name__ == "__main__":
    main()
