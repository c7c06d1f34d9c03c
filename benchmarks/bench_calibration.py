"""Calibration of ``steindiag.diagnose``: false alarms on valid chains, power on biased ones.

Usage::

    python benchmarks/bench_calibration.py --quick                    # small grid, 10 reps
    python benchmarks/bench_calibration.py                            # whole grid, 200 reps
    python benchmarks/bench_calibration.py --only 'ar1-d2-*-4x1000' ula-gauss2-h0.5-4x500 \\
        --reps 80 --code HEAD                                         # steindiag as committed
    python benchmarks/bench_calibration.py --pymc --seeds 3           # NUTS on gallery models
    python benchmarks/bench_calibration.py --list                     # the configurations
    python benchmarks/bench_calibration.py --tables-only --commit 80ae614 --only 'ar1-*'

Issue 27, point 1. Every configuration draws chains whose truth is known by construction
(``tests/valid_chains.py``): *valid* chains, every draw of which is marginally an exact
draw of p (stationary Gaussian AR(1) / VAR(1) chains; random-walk Metropolis and MALA
started at an exact draw), and *biased* samplers (ULA, SGLD, under-dispersed draws, one
mode of two, a wrong score, a stuck chain). Each run calls

    steindiag.diagnose(draws, score=score, log_density=log_density, rng=seed)  # "log_density"
    steindiag.diagnose(draws, score=score, mode_search=False, rng=seed)       # "score_only"

on the same draws (paired variants) and records the pooled verdict, every chain's verdict,
every data variable whose name contains "pvalue", "reliable" or "effective" (read by
name, so that renamed or added tests are picked up), the attrs ``test_level``,
``n_tests``, ``alpha``, and the wall time of the call. Per configuration and variant the
tables give the rates of "does not fit" (pooled; pooled or any chain, the family-wise
false alarm that ``alpha`` bounds), "inconclusive" and "fits" (pooled), per-chain rates,
each with a 95 % Clopper-Pearson interval; the size of every component test (the share
of its p-values <= the level it is read at, ``attrs["test_level"]``, and <= 0.05); the
median time.

Raw per-run rows go to ``benchmarks/results/calibration.jsonl`` (one JSON object per
line), so tables can be rebuilt (``--tables-only``); a run appends a dated section to
``benchmarks/results/calibration.md`` with the commit and the command. Runs resume:
(commit, configuration, variant, rep) already in the JSONL are skipped unless
``--force``. The commit is ``git rev-parse --short HEAD`` of the working tree, with
"+dirty" when ``steindiag/`` has uncommitted changes; with ``--code REF`` the package is
exported (``git archive``) at REF into a temporary folder and imported from there, so the
numbers belong to that commit whatever the working tree holds.

``--pymc``: NUTS (PyMC, 4 chains x ``--pymc-draws`` after as many tuning steps, cores=1)
on the gallery-like models of ``tests/pymc_models.py``; runs with divergences or R-hat
>= 1.01 are recorded as excluded (and counted in the table), the others diagnosed with
``diagnose(idata, model, rng=seed)``. With ``--reference-draws N`` every healthy run is
also checked against one long run of its model (4 x N draws after 1000 tuning steps,
sampled once and cached): the z-score of each posterior mean against the reference's,
with both MCSEs, so that "healthy" means right, not only converged-looking. Every NUTS
run is cached too (``~/.cache/steindiag-bench/runs``, by model, data seed, sampler seed
and length), so that another commit is measured on the same draws without sampling again.

The machine is shared: times are indicative; rates do not depend on them.
"""

import argparse
import concurrent.futures
import datetime
import fnmatch
import functools
import json
import multiprocessing
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
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
JSONL = RESULTS / "calibration.jsonl"
MARKDOWN = RESULTS / "calibration.md"
BASE_ENTROPY = 27_2024  # issue 27; the seeds of a run are (this, configuration, rep)
VARIANTS = ("log_density", "score_only")
VERDICTS = ("fits", "does not fit", "inconclusive")

# ------------------------------------------------------------------------------------
# Configurations
# ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Configuration:
    """One cell of the grid: how to draw the chains of one run."""

    name: str
    kind: str  # "valid" or "power"
    make: functools.partial  # make(rng) -> valid_chains.Chains
    n_chain: int
    n_draw: int
    dim: int
    note: str = ""


def _ar1(rng, *, n_chain, n_draw, dim, tau):
    return vc.ar1_chains(n_chain, n_draw, dim, float(vc.rho_for_tau(tau)), rng=rng)


def _var1(rng, *, n_chain, n_draw, dim, slow_tau):
    covariance = vc.correlated_covariance(dim, correlation=0.9)
    rho = np.zeros(dim)
    rho[dim // 2:] = vc.rho_for_tau(slow_tau)  # the wide coordinates slow, the narrow fast
    return vc.var1_chains(n_chain, n_draw, covariance, rho, rng=rng)


def _metropolis(rng, *, sampler, target, n_chain, n_draw, step, proposal_scale=None):
    function = vc.random_walk_metropolis if sampler == "rwm" else vc.mala
    return function(target(), n_chain, n_draw, step=step, rng=rng,
                    proposal_scale=proposal_scale)


def _ula(rng, *, target, n_chain, n_draw, step, burn_in, gradient_noise=0.0):
    return vc.ula_chains(target(), n_chain, n_draw, step=step, rng=rng, burn_in=burn_in,
                         gradient_noise=gradient_noise)


def _shrunk(rng, *, target, n_chain, n_draw, shrink):
    return vc.shrunk_draws(target(rng), n_chain, n_draw, rng=rng, shrink=shrink)


def _ill_conditioned(rng, dim):
    # A new random rotation per run (condition number 100).
    return vc.gaussian_target(np.zeros(dim), vc.ill_conditioned_covariance(dim, 100.0, rng=rng))


def _standard_normal(rng, dim):
    return vc.standard_normal_target(dim)


def _correlated_gaussian():
    return vc.gaussian_target([1.0, -2.0], [[1.0, 0.8], [0.8, 2.0]])


def configurations():
    """All configurations, by name, in the order they run."""
    found = []
    layouts = [(4, 500), (4, 1000), (4, 4000), (64, 100), (1000, 60), (300, 200), (100, 600)]
    for layout in layouts:
        for dim in (1, 2, 10, 50, 100):
            for tau in (1, 3, 5.7, 9, 19, 30):
                n_chain, n_draw = layout
                found.append(Configuration(
                    name=f"ar1-d{dim}-tau{tau:g}-{n_chain}x{n_draw}", kind="valid",
                    make=functools.partial(_ar1, n_chain=n_chain, n_draw=n_draw, dim=dim,
                                           tau=tau),
                    n_chain=n_chain, n_draw=n_draw, dim=dim,
                    note=f"AR(1) on N(0, I), rho = {float(vc.rho_for_tau(tau)):.3f}"))
    for n_chain, n_draw in [(4, 1000), (4, 4000)]:
        found.append(Configuration(
            name=f"var1-d10-fast1-slow19-{n_chain}x{n_draw}", kind="valid",
            make=functools.partial(_var1, n_chain=n_chain, n_draw=n_draw, dim=10, slow_tau=19),
            n_chain=n_chain, n_draw=n_draw, dim=10,
            note="VAR(1) on N(0, Sigma), Sigma_ij = s_i s_j 0.9^|i-j|, s from 1 to 10; "
                 "latent coordinates 0-4 independent, 5-9 tau = 19"))
    mild_banana = functools.partial(vc.banana_target, 0.5, 1.0)
    haario_banana = functools.partial(vc.banana_target, 0.03, 100.0)
    t5_1 = functools.partial(vc.student_t_target, 1, 5.0)
    t5_2 = functools.partial(vc.student_t_target, 2, 5.0)
    close_mixture = functools.partial(vc.gaussian_mixture_target, [[-1.5], [1.5]])
    mcmc = [
        ("rwm-banana-mild", "rwm", mild_banana, 1.5, None, 2,
         "banana v = 1, b = 0.5; RWM step 1.5 (acceptance ~0.38, tau ~10-17)"),
        ("mala-banana-mild", "mala", mild_banana, 0.5, None, 2,
         "banana v = 1, b = 0.5; MALA step 0.5 (acceptance ~0.87, tau ~14)"),
        ("rwm-banana-haario", "rwm", haario_banana, 1.0, [10.0, 1.0], 2,
         "Haario banana v = 100, b = 0.03; RWM scale (10, 1) x 1.0 (acceptance ~0.32, "
         "tau ~150)"),
        ("rwm-t5-d1", "rwm", t5_1, 2.5, None, 1, "t5, RWM step 2.5 (acceptance ~0.46, tau ~5)"),
        ("mala-t5-d1", "mala", t5_1, 1.0, None, 1, "t5, MALA step 1 (acceptance ~0.93, tau ~5)"),
        ("rwm-t5-d2", "rwm", t5_2, 2.0, None, 2,
         "t5 x t5, RWM step 2 (acceptance ~0.34, tau ~9-13)"),
        ("mala-t5-d2", "mala", t5_2, 1.0, None, 2,
         "t5 x t5, MALA step 1 (acceptance ~0.89, tau ~6)"),
        ("rwm-mixture1.5-d1", "rwm", close_mixture, 2.4, None, 1,
         "0.5 N(-1.5, 1) + 0.5 N(1.5, 1), RWM step 2.4 (acceptance ~0.63, tau ~5)"),
        ("mala-mixture1.5-d1", "mala", close_mixture, 1.0, None, 1,
         "0.5 N(-1.5, 1) + 0.5 N(1.5, 1), MALA step 1 (acceptance ~0.93, tau ~15)"),
    ]
    for name, sampler, target, step, scale, dim, note in mcmc:
        for n_chain, n_draw in [(4, 1000), (4, 4000)]:
            found.append(Configuration(
                name=f"{name}-{n_chain}x{n_draw}", kind="valid",
                make=functools.partial(_metropolis, sampler=sampler, target=target,
                                       n_chain=n_chain, n_draw=n_draw, step=step,
                                       proposal_scale=scale),
                n_chain=n_chain, n_draw=n_draw, dim=dim, note=note + ", started at exact draws"))

    # Issue 36 point 4: antithetic chains (NUTS-like) and heavy-tailed targets, valid by
    # construction; issue 39 point 4: the sample-covariance statistic on strongly
    # correlated targets, including short runs.
    def valid(name, make, n_chain, n_draw, dim, note):
        found.append(Configuration(name=name, kind="valid", make=make, n_chain=n_chain,
                                   n_draw=n_draw, dim=dim, note=note))

    # Chains whose draws are nearly independent (tau < 1) are tested draw by draw, which
    # costs O(n^2): 4 x 500 draws keep 200 repetitions within the benchmark's time.
    for dim, rho in [(2, -0.5), (10, -0.7)]:
        valid(f"ar1neg-d{dim}-rho{rho:g}-4x500",
              functools.partial(vc.ar1_chains, 4, 500, dim, rho), 4, 500, dim,
              f"AR(1) on N(0, I_{dim}) with rho = {rho:g} (antithetic, tau = "
              f"{float(vc.tau_for_rho(rho)):.2f}; squares lag-1 correlation {rho ** 2:g})")
    equi10 = vc.equicorrelated_covariance(10, 0.9)
    spread10 = np.diag(np.logspace(0.0, 1.0, 10))  # sds 1 to 3.16
    for name, covariance, path, n_draw, note in [
            ("exacthmc-spread-d10-T2.6", spread10, 2.6, 1000,
             "N(0, diag(sds^2)), sds log-spaced 1 to 3.16; lag-1 correlations cos(T / sd) "
             "from -0.86 (narrow) to 0.68 (wide)"),
            ("exacthmc-equi0.9-d10-T1.2", equi10, 1.2, 1000,
             "equicorrelated rho 0.9, d = 10 (sds 3.02 once, 0.32 nine times); lag-1 "
             "correlations -0.80 (narrow) and 0.92 (wide)"),
            ("exacthmc-equi0.9-d10-T1.2", equi10, 1.2, 250, "the same, short runs")]:
        valid(f"{name}-4x{n_draw}",
              functools.partial(vc.exact_hmc_gaussian, 4, n_draw, covariance, path), 4, n_draw,
              covariance.shape[0], f"HMC with the exact flow, fixed path T = {path:g}, on "
                                   + note)
    t5_2 = functools.partial(vc.student_t_target, 2, 5.0)
    valid("hmc-t5-d2-4x500",
          functools.partial(lambda rng: vc.hmc_chains(t5_2(), 4, 500, step=0.5, n_leapfrog=5,
                                                      rng=rng)),
          4, 500, 2, "t5 x t5, HMC leapfrog 5 x 0.5 + Metropolis, started at exact draws "
                      "(antithetic in the draws)")
    for dim, nu, rho, n_draw in [(1, 3, -0.5, 500), (2, 3, 0.5, 1000), (5, 4, -0.5, 500),
                                 (2, 3, -0.5, 250)]:
        valid(f"t{nu}copula-d{dim}-rho{rho:g}-4x{n_draw}",
              functools.partial(vc.student_t_ar1_chains, 4, n_draw, dim, float(nu), rho),
              4, n_draw, dim, f"independent t{nu} coordinates, Gaussian-copula AR(1) with "
                              f"rho = {rho:g} (squares positively autocorrelated)")
    for dim, n_draw in [(2, 500)]:
        valid(f"iid-t3-d{dim}-4x{n_draw}",
              functools.partial(lambda rng, d=dim, n=n_draw: vc.iid_draws(
                  vc.student_t_target(d, 3.0), 4, n, rng=rng)),
              4, n_draw, dim, f"independent exact t3 draws, d = {dim}")
    equi5 = vc.equicorrelated_covariance(5, 0.9)
    valid("mvt4-equi0.9-d5-anti-4x500",
          functools.partial(vc.multivariate_t_ar1_chains, 4, 500, equi5, 4.0, -0.5, 0.5),
          4, 500, 5, "multivariate t4, scale equicorrelated rho 0.9 (d = 5); directions "
                      "AR(1) rho -0.5, radius copula AR(1) rho 0.5")
    for dim, n_draw in [(5, 250), (10, 250)]:
        covariance = vc.equicorrelated_covariance(dim, 0.9)
        valid(f"iid-equi0.9-d{dim}-4x{n_draw}",
              functools.partial(lambda rng, c=covariance, n=n_draw: vc.iid_draws(
                  vc.gaussian_target(np.zeros(c.shape[0]), c), 4, n, rng=rng)),
              4, n_draw, dim, f"independent draws of N(0, Sigma), equicorrelated rho 0.9, "
                              f"d = {dim}")
    for dim, corr, n_draw in [(10, 0.9, 250), (10, 0.99, 250), (10, 0.9, 1000)]:
        covariance = vc.equicorrelated_covariance(dim, corr)
        valid(f"var1-equi{corr:g}-d{dim}-rho0.5-4x{n_draw}",
              functools.partial(vc.var1_chains, 4, n_draw, covariance, np.full(dim, 0.5)),
              4, n_draw, dim, f"VAR(1) on N(0, Sigma), equicorrelated rho {corr:g}, d = {dim}; "
                              "latent AR(1) rho 0.5 (tau 3)")

    def power(name, make, n_chain, n_draw, dim, note):
        found.append(Configuration(name=name, kind="power", make=make, n_chain=n_chain,
                                   n_draw=n_draw, dim=dim, note=note))

    for n_draw in (500, 1000):
        power(f"ula-gauss2-h0.5-4x{n_draw}",
              functools.partial(_ula, target=_correlated_gaussian, n_chain=4, n_draw=n_draw,
                                step=0.5, burn_in=200),
              4, n_draw, 2, "ULA step 0.5 on N((1, -2), [[1, .8], [.8, 2]]), 200 burn-in "
                            "(stationary variances up to 1.8x p's)")
    power("ula-gauss2-h0.1-4x1000",
          functools.partial(_ula, target=_correlated_gaussian, n_chain=4, n_draw=1000,
                            step=0.1, burn_in=200),
          4, 1000, 2, "ULA step 0.1 on the same Gaussian (variances up to 1.1x)")
    power("ula-normal-d10-h0.2-4x1000",
          functools.partial(_ula, target=functools.partial(vc.standard_normal_target, 10),
                            n_chain=4, n_draw=1000, step=0.2, burn_in=200),
          4, 1000, 10, "ULA step 0.2 on N(0, I_10) (variance 1 / 0.9 = 1.11)")
    power("sgld-gauss2-h0.1-noise3-4x1000",
          functools.partial(_ula, target=_correlated_gaussian, n_chain=4, n_draw=1000,
                            step=0.1, burn_in=200, gradient_noise=3.0),
          4, 1000, 2, "SGLD: ULA step 0.1 with gradient noise sd 3 on the same Gaussian")
    power("shrunk-illcond-d10-4x1000",
          functools.partial(_shrunk, target=functools.partial(_ill_conditioned, dim=10),
                            n_chain=4, n_draw=1000, shrink=0.8),
          4, 1000, 10, "i.i.d. draws of N(0, S), S with condition number 100 (random rotation), "
                       "shrunk 0.8 to the mean")
    for dim in (2, 10):
        power(f"shrunk-normal-d{dim}-4x1000",
              functools.partial(_shrunk, target=functools.partial(_standard_normal, dim=dim),
                                n_chain=4, n_draw=1000, shrink=0.8),
              4, 1000, dim, f"i.i.d. draws of N(0, I_{dim}) shrunk 0.8")
    for dim in (1, 2):
        power(f"onemode-d{dim}-4x1000",
              functools.partial(vc.one_mode_draws, 4, 1000, dim, separation=4.0),
              4, 1000, dim, "i.i.d. draws of N(4 e1, I), target 0.5 N(-4 e1, I) + 0.5 N(4 e1, I)")
    power("wrongscore-banana-4x1000",
          functools.partial(vc.wrong_score_banana, 4, 1000, curvature=0.5,
                            first_variance=1.0, assumed_curvature=0.25),
          4, 1000, 2, "i.i.d. draws of the banana v = 1, b = 0.5; score and log p of b = 0.25")
    power("stuck-d2-4x1000",
          functools.partial(vc.stuck_chain, 4, 1000, 2, rho=0.5),
          4, 1000, 2, "3 AR(1) chains (rho 0.5) on N(0, I_2) and one constant chain")
    for dim, n_draw in [(4, 1000), (4, 250), (2, 1000)]:
        power(f"nearlystuck-d{dim}-4x{n_draw}",
              functools.partial(vc.nearly_stuck_chain, 4, n_draw, dim, rho=0.5),
              4, n_draw, dim, f"3 AR(1) chains (rho 0.5) on N(0, I_{dim}) and one 6 sd out in "
                              "every coordinate moving 1e-5 per step (issue 39)")
    # Many chains (issue 35): chains each in one mode of a two-mode mixture; the pooled
    # draws hold the right shares, only the test that the chains agree can see it.
    for n_chain, n_draw in [(1000, 60), (300, 200), (100, 600), (64, 100)]:
        for label, fraction in (("twomodes", 0.5), ("fewmodes", 0.02)):
            power(f"{label}-d10-{n_chain}x{n_draw}",
                  functools.partial(vc.split_mode_chains, n_chain, n_draw, 10, separation=4.0,
                                    rho=0.5, fraction=fraction),
                  n_chain, n_draw, 10,
                  f"max(1, round({fraction:g} C)) chains AR(1) (rho 0.5) in the mode -4 e1 of "
                  "w N(-4 e1, I) + (1 - w) N(4 e1, I), the others in +4 e1; w their share")
    return {configuration.name: configuration for configuration in found}


QUICK = ["ar1-d2-tau3-4x500", "ar1-d10-tau9-4x500", "rwm-banana-mild-4x1000",
         "ula-gauss2-h0.5-4x500", "onemode-d1-4x1000"]

# ------------------------------------------------------------------------------------
# One run
# ------------------------------------------------------------------------------------


def seeds_for(name, rep):
    """(data seed, diagnose seed) of one run: the same for both variants (paired)."""
    sequence = np.random.SeedSequence(BASE_ENTROPY, spawn_key=(zlib.crc32(name.encode()), rep))
    data_seed, diagnose_seed = sequence.generate_state(2)
    return int(data_seed), int(diagnose_seed)


def _plain(values):
    """JSON-safe list (NaN -> None)."""
    array = np.asarray(values)
    if array.dtype.kind == "f":
        return [None if not np.isfinite(v) else float(v) for v in array.ravel()]
    if array.dtype.kind == "b":
        return [bool(v) for v in array.ravel()]
    return [v.item() if hasattr(v, "item") else v for v in array.ravel()]


def read_evidence(result):
    """Every variable whose name says it is a p-value, a reliability flag or an effective
    number of draws, as flat lists; square (chain, chain_other) matrices as their upper
    triangle (one entry per pair)."""
    evidence = {}
    for name, variable in result.data_vars.items():
        if not any(word in name for word in ("pvalue", "reliable", "effective")):
            continue
        values = np.asarray(variable.values)
        if values.ndim == 2 and values.shape[0] == values.shape[1]:
            values = values[np.triu_indices(values.shape[0], k=1)]
        evidence[name] = {"dims": list(variable.dims), "values": _plain(values)}
    return evidence


def run_diagnose(draws, *, score, log_density, variant, seed, model=None):
    import steindiag

    options = {"rng": seed}
    if model is not None:
        arguments = (draws, model)
        if variant == "score_only":
            options["mode_search"] = False
    else:
        arguments = (draws,)
        options["score"] = score
        if variant == "log_density":
            options["log_density"] = log_density
        else:
            options["mode_search"] = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        result = steindiag.diagnose(*arguments, **options)
        seconds = time.perf_counter() - start
    attrs = result.attrs
    return {
        "verdict_pooled": str(result["verdict_pooled"].values),
        "verdicts": [str(v) for v in np.asarray(result["verdict"].values).ravel()],
        "reason_pooled": str(result["reason_pooled"].values),
        "reasons": [str(v) for v in np.asarray(result["reason"].values).ravel()],
        "evidence": read_evidence(result),
        "test_level": float(attrs["test_level"]) if "test_level" in attrs else None,
        "n_tests": int(attrs["n_tests"]) if "n_tests" in attrs else None,
        "alpha": float(attrs["alpha"]) if "alpha" in attrs else None,
        "seconds": seconds,
        "warnings": sorted({str(w.message)[:160] for w in caught}),
    }


def run_one(task):
    """One run of one configuration (both variants on the same draws)."""
    name, rep, variants, commit = task
    configuration = CONFIGURATIONS[name]
    data_seed, diagnose_seed = seeds_for(name, rep)
    chains = configuration.make(rng=np.random.default_rng(data_seed))
    rows = []
    for variant in variants:
        row = {"commit": commit, "config": name, "variant": variant, "rep": rep,
               "kind": configuration.kind, "n_chain": configuration.n_chain,
               "n_draw": configuration.n_draw, "dim": configuration.dim,
               "data_seed": data_seed, "diagnose_seed": diagnose_seed,
               "acceptance": None if chains.acceptance is None else _plain(chains.acceptance)}
        try:
            row.update(run_diagnose(chains.draws, score=chains.score,
                                    log_density=chains.log_density, variant=variant,
                                    seed=diagnose_seed))
        except Exception as error:  # recorded, counted in the tables
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------
# PyMC NUTS runs
# ------------------------------------------------------------------------------------


# Long NUTS runs the short healthy runs are checked against (--reference-draws): cached in
# REFERENCE_CACHE, one netCDF file per model, data seed and length.
REFERENCE_CACHE = Path.home() / ".cache" / "steindiag-bench"
REFERENCE_SEED = 20261126
# |z| above this for a posterior mean is counted as a disagreement with the reference run
# (two-sided p = 0.001 for one parameter of a correct run).
REFERENCE_Z = 3.29


def reference_posterior(name, data_seed, draws):
    """The long reference run of a gallery model: 4 chains x ``draws`` after 1000 tuning
    steps (target_accept as the model asks), read from the cache or sampled once."""
    import arviz as az
    import pymc as pm

    path = REFERENCE_CACHE / f"reference-{name}-data{data_seed}-{draws}.nc"
    if path.exists():
        return az.from_netcdf(path)
    gallery = gallery_model(name, data_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(model=gallery.model, draws=draws, tune=1000, chains=4, cores=1,
                          random_seed=REFERENCE_SEED, progressbar=False,
                          compute_convergence_checks=False, **gallery.sample_kwargs)
    REFERENCE_CACHE.mkdir(parents=True, exist_ok=True)
    idata.to_netcdf(path)
    return idata


def reference_check(idata, reference):
    """Posterior means of a run against the reference run's, per scalar parameter:
    z = (mean - mean_ref) / sqrt(mcse^2 + mcse_ref^2) (ArviZ's MCSE of each), for the
    free variables of the posterior group. Returns the row's fields."""
    import arviz as az

    def table(data):
        return az.summary(data, round_to="none")[["mean", "mcse_mean"]]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run, ref = table(idata), table(reference)
    ref = ref.loc[run.index]
    z = (run["mean"] - ref["mean"]) / np.sqrt(run["mcse_mean"] ** 2 + ref["mcse_mean"] ** 2)
    z = np.abs(z.to_numpy(dtype=float))
    # Constants (the unit diagonal of an LKJ correlation matrix) have no MCSE: left out.
    z = z[np.isfinite(z)]
    reference_divergences = int(reference.sample_stats["diverging"].sum())
    return {"reference_parameters": int(z.size), "reference_max_abs_z": float(np.max(z)),
            "reference_over_z": int(np.sum(z > REFERENCE_Z)),
            "reference_draws": int(reference.posterior.sizes["draw"]),
            "reference_divergences": reference_divergences}


@functools.lru_cache(maxsize=None)
def gallery_model(name, data_seed):
    """The gallery model ``name`` on the data of ``data_seed``, built once per process (so
    that its compiled functions are reused by every run of the process)."""
    import pymc_models

    return pymc_models.MODELS[name](np.random.default_rng(data_seed))


_WARMED = set()


def nuts_run(name, gallery, data_seed, seed, draws):
    """(idata, sampling seconds) of one NUTS run: 4 chains x ``draws`` after as many tuning
    steps, read from RUN_CACHE when this (model, data, seed, length) was sampled before
    (then the seconds are those recorded with it), else sampled and stored there. The
    cache lets a later commit be measured on the same draws (paired) without sampling
    again."""
    import arviz as az
    import pymc as pm

    path = REFERENCE_CACHE / "runs" / f"run-{name}-data{data_seed}-seed{seed}-{draws}.nc"
    if path.exists():
        idata = az.from_netcdf(path)
        return idata, float(idata.attrs.get("sampling_seconds", float("nan")))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(model=gallery.model, draws=draws, tune=draws, chains=4, cores=1,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, **gallery.sample_kwargs)
    seconds = time.perf_counter() - start
    idata.attrs["sampling_seconds"] = seconds
    path.parent.mkdir(parents=True, exist_ok=True)
    idata.to_netcdf(path)
    return idata, seconds


def run_pymc(task):
    """NUTS on one gallery model with one seed; diagnosed when healthy."""
    name, rep, variants, commit, draws, data_seed, reference_draws = task
    import arviz as az

    gallery = gallery_model(name, data_seed)
    seed = seeds_for("pymc-" + name, rep)[1]
    idata, sampling_seconds = nuts_run(name, gallery, data_seed, seed % 2**31, draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = float(az.rhat(idata).to_array().max())
    divergences = int(idata.sample_stats["diverging"].sum())
    base = {"commit": commit, "config": "pymc-" + name, "kind": "nuts", "rep": rep,
            "n_chain": 4, "n_draw": draws, "dim": gallery.dim, "data_seed": data_seed,
            "sampler_seed": seed % 2**31, "diagnose_seed": seed, "divergences": divergences,
            "rhat_max": rhat, "sampling_seconds": sampling_seconds}
    healthy = not divergences and rhat < 1.01
    if healthy and reference_draws:
        base.update(reference_check(idata, reference_posterior(name, data_seed,
                                                               reference_draws)))
    if healthy and (name, data_seed) not in _WARMED:
        # Untimed warm-up on 50 draws, once per model and process: compiles the model's
        # PyTensor functions, which the first call would otherwise pay for (minutes with
        # the C backend).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import steindiag

            steindiag.diagnose(idata.sel(draw=slice(0, 50)), gallery.model, rng=0)
        _WARMED.add((name, data_seed))
    rows = []
    for variant in variants:
        row = dict(base, variant=variant)
        if not healthy:
            row["excluded"] = f"{divergences} divergences, max R-hat {rhat:.4f}"
        else:
            try:
                row.update(run_diagnose(idata, score=None, log_density=None, variant=variant,
                                        seed=seed, model=gallery.model))
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------


def clopper_pearson(successes, trials):
    if trials == 0:
        return float("nan"), float("nan")
    interval = stats.binomtest(successes, trials).proportion_ci(0.95, method="exact")
    return interval.low, interval.high


def rate(successes, trials):
    """"k/n = r % [low, high]" with the 95 % Clopper-Pearson interval."""
    if trials == 0:
        return "-"
    low, high = clopper_pearson(successes, trials)
    return (f"{successes}/{trials} = {100 * successes / trials:.1f} % "
            f"[{100 * low:.1f}, {100 * high:.1f}]")


def latest_rows(rows):
    """One row per (commit, config, variant, rep): the last written."""
    kept = {}
    for row in rows:
        kept[(row["commit"], row["config"], row["variant"], row["rep"])] = row
    return list(kept.values())


def verdict_summary(rows):
    ok = [row for row in rows if "verdict_pooled" in row]
    n = len(ok)
    pooled = [row["verdict_pooled"] for row in ok]
    any_chain = sum(row["verdict_pooled"] == "does not fit" or "does not fit" in row["verdicts"]
                    for row in ok)
    chain_verdicts = [v for row in ok for v in row["verdicts"]]
    times = [row["seconds"] for row in ok]
    return {
        "n": n,
        "errors": sum("error" in row for row in rows),
        "excluded": sum("excluded" in row for row in rows),
        "dnf_pooled": rate(pooled.count("does not fit"), n),
        "dnf_any": rate(any_chain, n),
        "inconclusive": rate(pooled.count("inconclusive"), n),
        "fits": rate(pooled.count("fits"), n),
        "counts": "/".join(str(pooled.count(v)) for v in VERDICTS),
        "chain_dnf": rate(chain_verdicts.count("does not fit"), len(chain_verdicts)),
        "chain_inconclusive": rate(chain_verdicts.count("inconclusive"), len(chain_verdicts)),
        "seconds": statistics.median(times) if times else float("nan"),
        "levels": sorted({round(row["test_level"], 6) for row in ok if row.get("test_level")}),
    }


# What made a verdict "does not fit", read from its reason (pooled and every chain's).
FIRED = (("never moved", "stuck"), ("barely move", "stuck"),
         ("spread about", "far off"), ("draws spread", "far off"),
         ("MMD test of agreement", "agreement (MMD)"), ("unvisited mass", "missing mass"),
         ("KSD test rejects chain", "KSD, chains"))


def fired_tests(row):
    """The tests behind a run's "does not fit" verdicts (pooled and chains), as a set."""
    found = set()
    pairs = [("pooled", row["verdict_pooled"], row["reason_pooled"])] + [
        ("chain", verdict, reason) for verdict, reason in zip(row["verdicts"], row["reasons"])]
    for where, verdict, reason in pairs:
        if verdict != "does not fit":
            continue
        names = [name for text, name in FIRED if text in reason]
        if not names and "KSD test rejects" in reason:
            names = ["KSD, pooled" if where == "pooled" else "KSD, chains"]
        found.update(names or ["other"])
    return found


def fired_summary(rows):
    """"test: runs, ..." over the runs with any "does not fit" (pooled or a chain)."""
    counts = {}
    for row in rows:
        if "verdict_pooled" in row:
            for name in fired_tests(row):
                counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name}: {count}" for name, count in sorted(counts.items())) or "-"


def component_sizes(rows):
    """Per p-value variable: share of finite p-values <= the run's test_level, and <= 0.05."""
    names = sorted({name for row in rows for name in row.get("evidence", {})
                    if "pvalue" in name and "reliable" not in name})
    found = []
    for name in names:
        at_level = at_05 = total = 0
        reliable_total = reliable_count = 0
        for row in rows:
            entry = row.get("evidence", {}).get(name)
            if entry is None or row.get("test_level") is None:
                continue
            values = [v for v in entry["values"] if v is not None]
            total += len(values)
            at_level += sum(v <= row["test_level"] for v in values)
            at_05 += sum(v <= 0.05 for v in values)
            flags = _reliability(row["evidence"], name)
            if flags is not None:
                reliable_total += len(flags)
                reliable_count += sum(flags)
        reliable = (f"{100 * reliable_count / reliable_total:.0f} %" if reliable_total else "-")
        found.append((name, total, rate(at_level, total), rate(at_05, total), reliable))
    return found


def _reliability(evidence, pvalue_name):
    for candidate in (pvalue_name.replace("pvalue", "pvalue_reliable"),
                      pvalue_name + "_reliable",
                      pvalue_name.replace("pvalue", "reliable")):
        if candidate in evidence and candidate != pvalue_name:
            return [bool(v) for v in evidence[candidate]["values"] if v is not None]
    return None


def tables(rows, names):
    """Markdown tables for the configurations ``names`` (in that order)."""
    by_key = {}
    for row in rows:
        by_key.setdefault((row["config"], row["variant"]), []).append(row)
    keys = [(name, variant) for name in names for variant in VARIANTS if (name, variant) in by_key]
    lines = []
    header = ("| configuration | variant | runs | \"does not fit\" pooled | \"does not fit\" "
              "pooled or any chain (family-wise) | \"inconclusive\" pooled | \"fits\" pooled | "
              "fits/dnf/inc | per chain: \"does not fit\" | per chain: \"inconclusive\" | "
              "test level | median s | tests that fired (runs) |")
    rule = "|---" * 13 + "|"
    for kind, title in (("valid", "Valid chains: false alarms (every draw is an exact draw of p)"),
                        ("nuts", "PyMC NUTS, healthy runs only (no divergences, R-hat < 1.01)"),
                        ("power", "Biased samplers: power (a \"fits\" is a miss)")):
        selected = [key for key in keys if by_key[key][0]["kind"] == kind]
        if not selected:
            continue
        lines += [f"### {title}", "", header, rule]
        for key in selected:
            summary = verdict_summary(by_key[key])
            extra = []
            if summary["errors"]:
                extra.append(f"{summary['errors']} errors")
            if summary["excluded"]:
                extra.append(f"{summary['excluded']} excluded")
            runs = str(summary["n"]) + (f" ({', '.join(extra)})" if extra else "")
            levels = ", ".join(f"{level:.4g}" for level in summary["levels"])
            lines.append(
                f"| {key[0]} | {key[1]} | {runs} | {summary['dnf_pooled']} | {summary['dnf_any']} "
                f"| {summary['inconclusive']} | {summary['fits']} | {summary['counts']} "
                f"| {summary['chain_dnf']} | {summary['chain_inconclusive']} | {levels} "
                f"| {summary['seconds']:.2f} | {fired_summary(by_key[key])} |")
        lines.append("")
        if kind == "nuts":
            lines += reference_table([row for key in selected for row in by_key[key]])
        if kind == "power":
            continue
        lines += ["Component tests: size at the level each is read at (`attrs[\"test_level\"]`) "
                  "and at 0.05; \"reliable\": the share of those p-values flagged reliable.", "",
                  "| configuration | variant | test (variable) | p-values | p <= test level "
                  "| p <= 0.05 | reliable |", "|---" * 7 + "|"]
        for key in selected:
            for name, total, at_level, at_05, reliable in component_sizes(by_key[key]):
                lines.append(f"| {key[0]} | {key[1]} | {name} | {total} | {at_level} | {at_05} "
                             f"| {reliable} |")
        lines.append("")
    reasons = reason_counts([row for key in keys for row in by_key[key]])
    if reasons:
        lines += ["Reasons given for pooled verdicts other than \"fits\" (numbers masked as #), "
                  "most frequent first:", "",
                  "| configuration | variant | verdict | runs | reason |", "|---" * 5 + "|"]
        lines += [f"| {c} | {v} | {verdict} | {count} | {reason} |"
                  for (c, v, verdict, reason), count in reasons]
        lines.append("")
    errors = sorted({row["error"] for row in rows if "error" in row})
    if errors:
        lines += ["Errors (distinct messages):", ""] + [f"- {error}" for error in errors] + [""]
    excluded = [row for row in rows if "excluded" in row and row["variant"] == VARIANTS[0]]
    if excluded:
        lines += ["Excluded NUTS runs:", ""] + [
            f"- {row['config']} seed {row['rep']}: {row['excluded']}" for row in excluded] + [""]
    return "\n".join(lines)


def reference_table(rows):
    """Lines of the table of healthy runs against their models' long reference runs."""
    checked = [row for row in rows if "reference_max_abs_z" in row
               and row["variant"] == rows[0]["variant"]]
    if not checked:
        return []
    lines = [f"Healthy runs against long reference runs (posterior means, z = difference / "
             f"sqrt(MCSE^2 + MCSE_ref^2); a correct run has |z| > {REFERENCE_Z} for about "
             "0.1 % of its parameters):", "",
             "| model | reference (4 chains x draws, divergences) | runs | parameters "
             f"| largest \|z\| (median over runs, max) | parameters with \|z\| > {REFERENCE_Z} "
             "| verdicts (fits/dnf/inc) |", "|---" * 7 + "|"]
    by_model = {}
    for row in checked:
        by_model.setdefault(row["config"], []).append(row)
    for model, group in by_model.items():
        z = np.array([row["reference_max_abs_z"] for row in group])
        over = sum(row["reference_over_z"] for row in group)
        total = sum(row["reference_parameters"] for row in group)
        verdicts = [row.get("verdict_pooled") for row in group]
        lines.append(
            f"| {model} | 4 x {group[0]['reference_draws']}, "
            f"{group[0]['reference_divergences']} | {len(group)} | "
            f"{group[0]['reference_parameters']} | {np.median(z):.2f}, {z.max():.2f} | "
            f"{over} of {total} | {verdicts.count('fits')}/{verdicts.count('does not fit')}/"
            f"{verdicts.count('inconclusive')} |")
    return lines + [""]


def reason_counts(rows, per_key=3):
    """The ``per_key`` most frequent (masked) pooled reasons per configuration, variant and
    verdict, for verdicts other than "fits"."""
    counts = {}
    for row in rows:
        if row.get("verdict_pooled") in (None, "fits"):
            continue
        reason = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", row["reason_pooled"])
        key = (row["config"], row["variant"], row["verdict_pooled"], reason)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (item[0][:3], -item[1]))
    kept, seen = [], {}
    for key, count in ranked:
        seen[key[:3]] = seen.get(key[:3], 0) + 1
        if seen[key[:3]] <= per_key:
            kept.append((key, count))
    return kept


def configuration_notes(names):
    lines = ["Configurations:", ""]
    for name in names:
        configuration = CONFIGURATIONS.get(name)
        if configuration is not None:
            lines.append(f"- `{name}`: {configuration.note}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------


def git(*arguments):
    return subprocess.run(["git", *arguments], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def prepare_code(reference):
    """Commit label and, with a reference, a folder holding steindiag exported at it."""
    if reference is None:
        commit = git("rev-parse", "--short", "HEAD")
        if git("status", "--porcelain", "--", "steindiag"):
            commit += "+dirty"
        return commit, None
    commit = git("rev-parse", "--short", reference)
    folder = Path(tempfile.gettempdir()) / f"steindiag-code-{commit}"
    if not (folder / "steindiag" / "__init__.py").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit, "steindiag"], cwd=REPO,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return commit, folder


def read_rows():
    """Rows of the JSONL; a line that is not one JSON object (an interrupted write) is
    skipped with a message on stderr."""
    if not JSONL.exists():
        return []
    rows, broken = [], 0
    with JSONL.open() as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                broken += 1
    if broken:
        print(f"{JSONL}: {broken} unreadable lines skipped", file=sys.stderr)
    return rows


def append_rows(rows):
    """Append rows with one write() on an O_APPEND descriptor, so that runs of several
    processes (or people) writing to the same file do not interleave within a line."""
    text = "".join(json.dumps(row) + "\n" for row in rows).encode()
    descriptor = os.open(JSONL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(descriptor, text)
        while written < len(text):  # a short write (rare): finish it
            written += os.write(descriptor, text[written:])
    finally:
        os.close(descriptor)


def warm_up():
    """Compile the Numba kernels once per process (not timed, not recorded)."""
    import steindiag

    chains = vc.ar1_chains(2, 100, 2, 0.0, rng=np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steindiag.diagnose(chains.draws, score=chains.score, log_density=chains.log_density,
                           rng=0)


def select(patterns, names):
    if not patterns:
        return list(names)
    chosen = [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    return chosen


def execute(tasks, function, workers, budget, output):
    """Run tasks (all of one configuration), stopping new ones when the budget is spent."""
    start = time.perf_counter()
    done = 0
    if workers == 1:
        for task in tasks:
            if budget is not None and time.perf_counter() - start > budget:
                break
            output(function(task))
            done += 1
        return done, time.perf_counter() - start
    pending, queue = set(), list(tasks)
    while queue or pending:
        while queue and len(pending) < workers and (
                budget is None or time.perf_counter() - start <= budget):
            pending.add(EXECUTOR.submit(function, queue.pop(0)))
        if not pending:
            break
        finished, pending = concurrent.futures.wait(
            pending, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in finished:
            output(future.result())
            done += 1
    return done, time.perf_counter() - start


EXECUTOR = None
CONFIGURATIONS = configurations()


def main():
    global EXECUTOR, JSONL, MARKDOWN
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=None,
                        help="runs per configuration (default 200; 10 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a small grid: " + ", ".join(QUICK))
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="configurations by name or glob pattern (see --list)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="per configuration: start no new run after this much time")
    parser.add_argument("--force", action="store_true",
                        help="run again runs already in the JSONL for this commit")
    parser.add_argument("--code", metavar="REF", default=None,
                        help="measure steindiag as committed at REF (git archive), not the "
                             "working tree")
    parser.add_argument("--pymc", action="store_true", help="the PyMC NUTS part instead")
    parser.add_argument("--seeds", type=int, default=3, help="NUTS runs per model (--pymc)")
    parser.add_argument("--pymc-draws", type=int, default=500,
                        help="draws per chain and tuning steps (--pymc)")
    parser.add_argument("--reference-draws", type=int, default=0, metavar="N",
                        help="(--pymc) check each healthy run's posterior means against a "
                             "long run of 4 x N draws (sampled once, cached in "
                             f"{REFERENCE_CACHE})")
    parser.add_argument("--list", action="store_true", help="print the configurations and exit")
    parser.add_argument("--tables-only", action="store_true",
                        help="append tables rebuilt from the JSONL, run nothing")
    parser.add_argument("--commit", default=None, help="with --tables-only: whose rows")
    parser.add_argument("--results", type=Path, default=RESULTS, metavar="FOLDER",
                        help="where calibration.jsonl and calibration.md are (default "
                             "benchmarks/results)")
    parser.add_argument("--no-markdown", action="store_true",
                        help="write the JSONL only (no section in calibration.md)")
    args = parser.parse_args()

    if args.list:
        for configuration in CONFIGURATIONS.values():
            print(f"{configuration.kind:5s} {configuration.name:38s} {configuration.note}")
        return

    JSONL, MARKDOWN = args.results / JSONL.name, args.results / MARKDOWN.name
    commit, code_folder = prepare_code(args.code)
    if args.commit is not None:
        commit = args.commit
    if code_folder is not None:
        sys.path.insert(0, str(code_folder))
    import steindiag

    if args.pymc:
        import pymc_models

        names = select(args.only, ["pymc-" + name for name in pymc_models.MODELS])
        reps = args.seeds
    else:
        patterns = args.only if args.only else (QUICK if args.quick else None)
        names = select(patterns, CONFIGURATIONS)
        reps = args.reps if args.reps is not None else (10 if args.quick else 200)
    if not names:
        parser.error(f"--only {args.only} matches no configuration (see --list)")

    args.results.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    if not args.tables_only:
        existing = {(row["commit"], row["config"], row["variant"], row["rep"])
                    for row in read_rows()}
        if args.workers > 1:
            EXECUTOR = concurrent.futures.ProcessPoolExecutor(
                args.workers, mp_context=multiprocessing.get_context("fork"),
                initializer=warm_up)
        else:
            warm_up()
        for name in names:
            tasks = []
            for rep in range(reps):
                variants = [v for v in args.variants
                            if args.force or (commit, name, v, rep) not in existing]
                if not variants:
                    continue
                if args.pymc:
                    tasks.append((name.removeprefix("pymc-"), rep, variants, commit,
                                  args.pymc_draws, 2024, args.reference_draws))
                else:
                    tasks.append((name, rep, variants, commit))
            if not tasks:
                print(f"{name}: {reps} runs already recorded for {commit}", flush=True)
                continue
            done, seconds = execute(tasks, run_pymc if args.pymc else run_one,
                                    args.workers, args.budget, append_rows)
            print(f"{name}: {done} of {len(tasks)} runs in {seconds:.0f} s", flush=True)
        if EXECUTOR is not None:
            EXECUTOR.shutdown()

    if args.no_markdown:
        return
    rows = latest_rows([row for row in read_rows()
                        if row["commit"] == commit and row["config"] in names])
    command = "python " + " ".join(shlex.quote(a) for a in
                                   [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    section = [
        f"## {started:%Y-%m-%d %H:%M} UTC, steindiag at {commit}"
        + (f" (exported from git, --code {args.code})" if args.code else ""),
        "",
        f"Command: `{command}` (from the repository's root). Python {platform.python_version()}, "
        f"NumPy {np.__version__}; steindiag from `{Path(steindiag.__file__).parent}`; "
        f"{os.cpu_count()} cores shared with other jobs, {args.workers} worker(s). "
        "Rates with 95 % Clopper-Pearson intervals; fits/dnf/inc are pooled counts.",
        "",
        configuration_notes(names) if not args.pymc else "",
        tables(rows, names),
    ]
    with MARKDOWN.open("a") as handle:
        handle.write("\n".join(section) + "\n")
    print(f"appended to {MARKDOWN}", flush=True)


if __name__ == "__main__":
    main()
