"""When weights and thinning cannot represent the target: which signal says so (issue 36.5).

Run:
    PYTHONPATH=$PWD python benchmarks/bench_correction_limits.py synthetic --reps 100 \
        --out benchmarks/results/correction_limits.jsonl
    PYTHONPATH=$PWD python benchmarks/bench_correction_limits.py pymc --seeds 1 2 ... \
        --out benchmarks/results/correction_limits.jsonl
    PYTHONPATH=$PWD python benchmarks/bench_correction_limits.py summary \
        benchmarks/results/correction_limits.jsonl
    PYTHONPATH=$PWD python benchmarks/bench_correction_limits.py thinning --reps 20
    PYTHONPATH=$PWD python benchmarks/bench_correction_limits.py example --cache DIR

Each run calls ``stein_weights`` and ``stein_thin`` (a tenth of the draws) on draws whose
truth is known by construction and records, per run, the signals the corrections compute
(their attrs): (a) the Stein spread moment -sum_i w_i (x_i - xbar_w) s_i per parameter
(1 for draws of the target); (c) each parameter's corrected variance over the one the
target's curvature implies (``spread_variance_ratio``: 1 for draws of the target, the
marginal variance ratio for a Gaussian approximation of a Gaussian target); (b) the
weighted KSD against its i.i.d. floor (the Cantelli threshold ``ksd_far_threshold`` and
the ratio). ``summary`` turns the records into false-warning rates (valid draws) and
power (draws narrower than the target), with Clopper-Pearson 95 % intervals, for the
rule the package uses and for nearby thresholds.

Valid by construction (no warning wanted): exact draws (N(0, I), a correlated Gaussian as
AR(1) chains, antithetic AR(1) chains, Student-t with 5 degrees of freedom, a banana, a
mild funnel), unadjusted Langevin with a small step (over-dispersed by 11 %, which weights
fix), draws over-dispersed by 1.25 in sd in d = 2 (which weights fix), and healthy NUTS
on a varying-intercept logistic model. Narrower than the target (warning wanted): exact
draws shrunk towards their mean by 0.8 (d = 10, 23; and d = 2, where weights can fix it),
the exact mean-field Gaussian approximation of an equicorrelated Gaussian (rho = 0.5),
and PyMC's mean-field ADVI on the varying-intercept logistic model (20 groups).

``thinning`` measures how much greedy Stein thinning narrows exact draws (the thinned
points' own variance) and how often ``stein_thin`` says so. ``example`` reproduces the
user guide's table: mean-field ADVI on the logistic model with
20 groups, corrected by ``stein_weights`` and moved by ``stein_variational``, against a
4 x 5000 NUTS reference. Minutes (synthetic: about 2 s a run on 2 shared cores).
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import steindiag
from steindiag.methods.corrections import SPREAD_RATIO, SPREAD_Z

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

N_CHAIN, N_DRAW = 4, 250


# -- draws whose truth is known ---------------------------------------------------------


def _ar(rng, d, n_draw, phi):
    """Stationary AR(1) chains with N(0, 1) marginals (phi < 0: antithetic)."""
    e = rng.standard_normal((N_CHAIN, n_draw, d))
    z = np.empty_like(e)
    z[:, 0] = e[:, 0]
    for t in range(1, n_draw):
        z[:, t] = phi * z[:, t - 1] + np.sqrt(1 - phi**2) * e[:, t]
    return z


def _equicorrelated(d, rho=0.5):
    cov = (1 - rho) * np.eye(d) + rho
    return cov, np.linalg.inv(cov)


def exact(rng, d):
    z = rng.standard_normal((N_CHAIN, N_DRAW, d))
    return z, -z


def correlated_ar(rng, d, phi=0.5):
    cov, precision = _equicorrelated(d, 0.9)
    x = _ar(rng, d, N_DRAW, phi) @ np.linalg.cholesky(cov).T
    return x, -x @ precision


def antithetic_ar(rng, d):
    z = _ar(rng, d, N_DRAW, -0.5)
    return z, -z


def student_t(rng, d, nu=5.0):
    x = rng.standard_t(nu, size=(N_CHAIN, N_DRAW, d))
    return x, -(nu + 1) * x / (nu + x * x)


def banana(rng, d=2, b=1.0):
    x1 = rng.standard_normal((N_CHAIN, N_DRAW))
    x2 = b * (x1**2 - 1) + rng.standard_normal(x1.shape)
    resid = x2 - b * (x1**2 - 1)
    x = np.stack([x1, x2], axis=-1)
    return x, np.stack([-x1 + 2 * b * x1 * resid, -resid], axis=-1)


def funnel(rng, d=5, scale=1.0):
    v = scale * rng.standard_normal((N_CHAIN, N_DRAW))
    rest = rng.standard_normal((N_CHAIN, N_DRAW, d - 1)) * np.exp(v / 2)[..., None]
    score_v = -v / scale**2 + 0.5 * np.sum(rest**2, axis=-1) * np.exp(-v) - (d - 1) / 2
    score_rest = -rest * np.exp(-v)[..., None]
    return (np.concatenate([v[..., None], rest], axis=-1),
            np.concatenate([score_v[..., None], score_rest], axis=-1))


def langevin(rng, d, step=0.2):
    """Unadjusted Langevin on N(0, I) in stationarity: variance 1 / (1 - step / 2)."""
    phi = 1 - step
    x = _ar(rng, d, 2 * N_DRAW, phi) / np.sqrt(1 - step / 2)
    return x, -x


def widened(rng, d, factor=1.25):
    z = factor * rng.standard_normal((N_CHAIN, N_DRAW, d))
    return z, -z


def shrunk(rng, d, factor=0.8):
    z = factor * rng.standard_normal((N_CHAIN, N_DRAW, d))
    return z, -z


def mean_field(rng, d):
    _, precision = _equicorrelated(d, 0.5)
    x = rng.standard_normal((N_CHAIN, N_DRAW, d)) / np.sqrt(np.diag(precision))
    return x, -x @ precision


VALID = {
    "exact N(0, I), d = 2": (exact, 2), "exact N(0, I), d = 10": (exact, 10),
    "exact N(0, I), d = 23": (exact, 23),
    "correlated Gaussian (rho 0.9), AR(1) 0.5 chains, d = 10": (correlated_ar, 10),
    "antithetic AR(1) -0.5 chains, d = 10": (antithetic_ar, 10),
    "Student-t (5 df), d = 5": (student_t, 5), "banana, d = 2": (banana, 2),
    "funnel (log-scale sd 1), d = 5": (funnel, 5),
    "unadjusted Langevin (step 0.2), d = 5": (langevin, 5),
    "over-dispersed by 1.25, d = 2": (widened, 2),
}
NARROW = {
    "shrunk by 0.8, d = 2": (shrunk, 2), "shrunk by 0.8, d = 10": (shrunk, 10),
    "shrunk by 0.8, d = 23": (shrunk, 23),
    "mean-field of equicorrelated Gaussian (0.5), d = 10": (mean_field, 10),
    "mean-field of equicorrelated Gaussian (0.5), d = 23": (mean_field, 23),
}


# -- one run: the corrections' own records ----------------------------------------------


def _floats(values):
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, float)]


def record(case, truth, rep, x, s=None, model=None, n_selected=None, **extra):
    """Run stein_weights and stein_thin on the draws; return their signals as a dict."""
    sizes = x.posterior.sizes if hasattr(x, "posterior") else None
    n_total = (sizes["chain"] * sizes["draw"] if sizes is not None
               else int(np.prod(np.shape(x)[:2])))
    n_selected = n_selected or n_total // 10
    options = {"model": model} if model is not None else {"score": s}
    row = {"case": case, "truth": truth, "rep": rep, **extra}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        w = steindiag.stein_weights(x, mode_search=False, **options)
        row["seconds_weights"] = time.perf_counter() - start
        info = steindiag.stein_thin(x, n_selected=n_selected, return_info=True,
                                    mode_search=False, **options)
    row["warnings"] = [str(c.message)[:200] for c in caught
                       if issubclass(c.category, steindiag.CorrectionWarning)]
    for prefix, attrs in (("weights", w.attrs), ("thin", info.attrs)):
        key = "" if prefix == "weights" else "stein_thinning_"
        get = (lambda name, attrs=attrs, key=key: attrs.get(key + name))
        row[prefix] = {
            "ratio": _floats(get("spread_variance_ratio")),
            "ratio_z": _floats(get("spread_variance_ratio_z")),
            "ratio_draws": _floats(get("spread_variance_ratio_draws")),
            "moment": _floats(get("spread_moment")),
            "moment_z": _floats(get("spread_moment_z")),
            "under_dispersed": json.loads(get("spread_under_dispersed") or "[]"),
            "lost": json.loads(get("spread_lost") or "[]"),
            "ksd_far": int(get("ksd_far_above_floor")),
        }
    row["weights"].update({k: float(w.attrs[k]) for k in (
        "ksd_uniform", "ksd_weighted", "ksd_iid", "ksd_far_threshold", "kish_ess")})
    row["thin"]["ksd"] = float(info.ksd)
    return row


def synthetic(args):
    rng = np.random.default_rng(args.seed)
    with open(args.out, "a") as out:
        for rep in range(args.reps):
            for truth, cases in (("valid", VALID), ("narrow", NARROW)):
                for case, (make, d) in cases.items():
                    x, s = make(rng, d)
                    row = record(case, truth, rep, x, s, seed=args.seed)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            print(f"rep {rep} done", flush=True)


# -- PyMC: healthy NUTS and mean-field ADVI on the logistic model ------------------------


def _advi(model, seed, n_iter=30000, draws=1000):
    import pymc as pm

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        approx = pm.fit(n=n_iter, method="advi", random_seed=seed, progressbar=False)
        trace = approx.sample(N_CHAIN * draws, random_seed=seed + 1)
    import arviz as az

    # approx.sample gives one chain of independent draws: laid out as 4 "chains".
    values = {name: array.values.reshape(N_CHAIN, draws, *array.shape[2:])
              for name, array in trace.posterior.data_vars.items()}
    return az.from_dict(posterior=values)


def _cached(path, make):
    """A trace from ``path`` (netCDF) if it exists, else made and written there."""
    import arviz as az

    if path is not None and Path(path).exists():
        return az.from_netcdf(path)
    trace = make()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        trace.to_netcdf(path)
    return trace


def pymc_runs(args):
    import logging

    from hierarchical_models import logistic_model, sample

    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = logistic_model(n_groups=20)
    cache = (lambda name: None) if args.cache is None else (
        lambda name: Path(args.cache) / name)
    with open(args.out, "a") as out:
        for seed in args.seeds:
            start = time.perf_counter()
            nuts = _cached(cache(f"nuts_{seed}.nc"), lambda: sample(
                model, seed=seed, draws=1000, tune=1000, chains=N_CHAIN))
            n_div = int(nuts.sample_stats["diverging"].sum())
            row = record("NUTS, logistic model (20 groups), 4 x 1000", "valid", seed, nuts,
                         model=model, divergences=n_div)
            out.write(json.dumps(row) + "\n")
            advi = _cached(cache(f"advi_{seed}.nc"), lambda: _advi(model, seed))
            row = record("mean-field ADVI, logistic model (20 groups), 4000 draws", "narrow",
                         seed, advi, model=model)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)


# -- numpyro: many cheap runs of healthy NUTS and mean-field ADVI on the same model -------


def _numpyro_logistic(n_groups=20, n_per_group=10, seed=0):
    """The logistic model of ``hierarchical_models.logistic_model`` (same data, priors and
    log transform of sigma) in numpyro, and its log density on the unconstrained vector
    (mu, log sigma, z[0..n_groups-1], beta), Jacobian included."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), n_per_group)
    x = rng.standard_normal(group.size)
    intercept = -0.5 + 0.8 * rng.standard_normal(n_groups)
    y = (rng.random(group.size) < 1 / (1 + np.exp(-(intercept[group] + x)))).astype(int)

    def model():
        mu = numpyro.sample("mu", dist.Normal(0.0, 2.5))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([n_groups]).to_event(1))
        beta = numpyro.sample("beta", dist.Normal(0.0, 2.5))
        numpyro.sample("y", dist.Bernoulli(logits=mu + sigma * z[group] + beta * x), obs=y)

    def log_density(u):
        mu, log_sigma, z, beta = u[0], u[1], u[2:2 + n_groups], u[2 + n_groups]
        sigma = jnp.exp(log_sigma)
        return (dist.Normal(0.0, 2.5).log_prob(mu) + dist.HalfNormal(1.0).log_prob(sigma)
                + log_sigma + dist.Normal(0.0, 1.0).log_prob(z).sum()
                + dist.Normal(0.0, 2.5).log_prob(beta)
                + dist.Bernoulli(logits=mu + sigma * z[group] + beta * x).log_prob(y).sum())

    return model, jax.jit(jax.vmap(jax.grad(log_density)))


def numpyro_runs(args):
    """Healthy NUTS (4 x ``--draws`` after 500 warm-up) and mean-field ADVI (numpyro's
    AutoNormal, 10000 Adam steps, 4 x ``--draws`` draws) on the logistic model with 20
    groups. All runs' NUTS chains are sampled together (4 ``--reps`` chains, vectorized,
    each adapting on its own: one compilation), then split into runs of 4 chains; each
    ADVI run starts from its own key. Unconstrained draws with their scores (jax.grad of
    the log density written out above, checked against numpyro's potential energy)."""
    import jax
    import numpyro
    from numpyro.infer import MCMC, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    model, score = _numpyro_logistic()
    names = ["mu", "sigma", "z", "beta"]

    def scored(u):
        return u, np.asarray(score(u.reshape(-1, u.shape[-1]))).reshape(u.shape)

    with open(args.out, "a") as out:
        if "nuts" in args.which:
            start = time.perf_counter()
            mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=args.draws,
                        num_chains=N_CHAIN * args.reps, chain_method="vectorized",
                        progress_bar=False)
            mcmc.run(jax.random.PRNGKey(args.seed))
            s = mcmc.get_samples(group_by_chain=True)
            u = np.concatenate([np.asarray(s["mu"])[..., None],
                                np.log(np.asarray(s["sigma"]))[..., None],
                                np.asarray(s["z"]), np.asarray(s["beta"])[..., None]], axis=-1)
            diverging = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"])
            print(f"NUTS, {N_CHAIN * args.reps} chains: {time.perf_counter() - start:.0f} s",
                  flush=True)
            for rep in range(args.reps):
                chains = slice(N_CHAIN * rep, N_CHAIN * (rep + 1))
                row = record(f"NUTS (numpyro), logistic model (20 groups), 4 x {args.draws}",
                             "valid", rep, *scored(u[chains]),
                             divergences=int(diverging[chains].sum()))
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"NUTS rep {rep}", flush=True)
        if "advi" in args.which:
            svi = SVI(model, AutoNormal(model), numpyro.optim.Adam(0.01), Trace_ELBO())
            update = jax.jit(svi.update)
            for rep in range(args.advi_reps):
                state = svi.init(jax.random.PRNGKey(args.seed + 1 + rep))
                for _ in range(10000):
                    state, _ = update(state)
                params = svi.get_params(state)
                loc = np.concatenate([np.atleast_1d(params[f"{n}_auto_loc"]) for n in names])
                scale = np.concatenate([np.atleast_1d(params[f"{n}_auto_scale"])
                                        for n in names])
                eps = np.random.default_rng(args.seed + rep).standard_normal(
                    (N_CHAIN, args.draws, loc.size))
                row = record("mean-field ADVI (numpyro AutoNormal), logistic model "
                             f"(20 groups), 4 x {args.draws}", "narrow", rep,
                             *scored(loc + scale * eps))     # AutoNormal's Gaussian
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"ADVI rep {rep}", flush=True)


# -- summary ----------------------------------------------------------------------------


def _interval(k, n, level=0.95):
    from scipy.stats import beta

    lower = 0.0 if k == 0 else beta.ppf((1 - level) / 2, k, n - k + 1)
    upper = 1.0 if k == n else beta.ppf((1 + level) / 2, k + 1, n - k)
    return lower, upper


def _flag(part, statistic, ratio, z):
    values = np.array([np.nan if v is None else v for v in part[statistic]], float)
    zs = np.array([np.nan if v is None else v for v in part[statistic + "_z"]], float)
    if statistic == "ratio":   # the package's rule: the diagonal moment where undefined
        moment = np.array([np.nan if v is None else v for v in part["moment"]], float)
        moment_z = np.array([np.nan if v is None else v for v in part["moment_z"]], float)
        undefined = ~np.isfinite(values)
        values, zs = np.where(undefined, moment, values), np.where(undefined, moment_z, zs)
    with np.errstate(invalid="ignore"):
        return bool(np.any((values <= ratio) & (zs <= -z)))


def _thinning_lost(row):
    """stein_thin's other warning: the thinned points narrower than the draws, which are
    not (``spread_lost``; recorded directly since it was added, else recomputed)."""
    if "lost" in row["thin"]:
        return bool(row["thin"]["lost"])
    return (_flag(row["thin"], "ratio", SPREAD_RATIO, SPREAD_Z)
            and not row["thin"]["under_dispersed"])


def _rate(rows, flag):
    k = sum(flag(row) for row in rows)
    lower, upper = _interval(k, len(rows))
    return f"{k}/{len(rows)} ({100 * k / len(rows):.0f} %, [{100 * lower:.1f}, {100 * upper:.1f}])"


def summary(args):
    rows = [json.loads(line) for path in args.files for line in open(path)]
    cases = list(dict.fromkeys((row["truth"], row["case"]) for row in rows))
    rule = f"ratio <= {SPREAD_RATIO}, z <= -{SPREAD_Z}"
    print(f"Warnings per case (the package's rule: {rule}); counts with 95 % "
          "Clopper-Pearson intervals.\n")
    print("| truth | draws | runs | stein_weights warns: (c) or (b) | (c) narrower than the "
          "target | (b) KSD far above floor | stein_thin warns: (c) or (b) | thinned points "
          "lost spread (recorded, not warned) | (a) diagonal moment alone | weighted KSD / "
          "floor (median) | smallest variance ratio, weighted (median) | variance ratio of "
          "the thinned points (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def values(part, key):
        return np.array([np.nan if v is None else v for v in part[key]], float)

    for truth, case in cases:
        group = [row for row in rows if row["case"] == case]
        ksd_ratio = np.median([r["weights"]["ksd_weighted"] / r["weights"]["ksd_iid"]
                               for r in group])
        min_ratio = np.median([np.nanmin(values(r["weights"], "ratio")) for r in group])
        thinned = np.median([np.nanmedian(values(r["thin"], "ratio")) for r in group])
        print(f"| {truth} | {case} | {len(group)} | "
              f"{_rate(group, lambda r: bool(r['weights']['under_dispersed'] or r['weights']['ksd_far']))} | "
              f"{_rate(group, lambda r: bool(r['weights']['under_dispersed']))} | "
              f"{_rate(group, lambda r: bool(r['weights']['ksd_far']))} | "
              f"{_rate(group, lambda r: bool(r['thin']['under_dispersed'] or r['thin']['ksd_far']))} | "
              f"{_rate(group, _thinning_lost)} | "
              f"{_rate(group, lambda r: _flag(r['weights'], 'moment', SPREAD_RATIO, SPREAD_Z))} | "
              f"{ksd_ratio:.2f} | {min_ratio:.2f} | {thinned:.2f} |")
    print("\nThresholds nearby (weights; valid: all valid runs pooled, narrow: all narrow "
          "runs pooled except shrunk d = 2, which weights can fix):\n")
    print("| ratio <= | z <= | false warnings (valid) | power (narrow) |")
    print("|---|---|---|---|")
    valid = [row for row in rows if row["truth"] == "valid"]
    narrow = [row for row in rows if row["truth"] == "narrow" and row["case"] != "shrunk by 0.8, d = 2"]
    for ratio in (0.7, 0.75, 0.8, 0.85, 0.9):
        for z in (3.0, 4.0, 5.0):
            print(f"| {ratio} | -{z:g} | "
                  f"{_rate(valid, lambda r: _flag(r['weights'], 'ratio', ratio, z))} | "
                  f"{_rate(narrow, lambda r: _flag(r['weights'], 'ratio', ratio, z))} |")


# -- how much greedy thinning narrows exact draws -------------------------------------


def thinning(args):
    """Median (over parameters, then runs) variance of the thinned points of exact
    N(0, I_d) draws (the target's: 1), and how often stein_thin says they lost spread."""
    rng = np.random.default_rng(args.seed)
    print(f"Exact N(0, I_d) draws, {N_CHAIN} x {N_DRAW}; {args.reps} runs per row; the "
          "thinned points' sample variance per parameter (target: 1).\n")
    print("| d | points | median variance | smallest variance (median over runs) | "
          "warned 'lost spread' |")
    print("|---|---|---|---|---|")
    for d in (5, 10, 23):
        for m in (50, 100, 200, 400):
            medians, smallest, warned = [], [], 0
            for _ in range(args.reps):
                x = rng.standard_normal((N_CHAIN, N_DRAW, d))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    info = steindiag.stein_thin(x, score=-x, n_selected=m, return_info=True)
                variance = np.asarray(info.thinned)[0].var(axis=0)
                medians.append(np.median(variance))
                smallest.append(variance.min())
                warned += bool(json.loads(info.attrs["stein_thinning_spread_lost"]))
            print(f"| {d} | {m} | {np.median(medians):.2f} | {np.median(smallest):.2f} | "
                  f"{warned}/{args.reps} |", flush=True)


# -- the user guide's example ------------------------------------------------------------


def example(args):
    import logging

    from hierarchical_models import logistic_model, sample

    logging.getLogger("pymc").setLevel(logging.ERROR)
    model = logistic_model(n_groups=20)
    cache = (lambda name: None) if args.cache is None else (
        lambda name: Path(args.cache) / name)
    reference = _cached(cache("nuts_reference.nc"), lambda: sample(
        model, seed=1, draws=5000, tune=1000, chains=N_CHAIN))
    advi = _cached(cache(f"advi_{args.advi_seed}.nc"), lambda: _advi(model, args.advi_seed))
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = steindiag.stein_weights(advi, model, mode_search=False)
        seconds_weights = time.perf_counter() - start
        svgd = steindiag.stein_variational(advi, model, progress=False, rng=args.advi_seed)
    seconds_svgd = time.perf_counter() - start - seconds_weights
    names = ["mu", "z", "beta", "sigma"]

    def table(trace, weights=None):
        posterior = trace.posterior
        if weights is None:
            weights = np.ones((posterior.sizes["chain"], posterior.sizes["draw"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return steindiag.weighted_summary(trace, weights, var_names=names)

    truth, plain = table(reference), table(advi)
    floor = w.attrs["ksd_iid"]
    rows = [("NUTS, 4 x 5000 (reference)", truth, "", ""),
            ("mean-field ADVI, 4 x 1000 draws", plain, f"{w.attrs['ksd_uniform']:.3f}",
             f"{floor:.3f}"),
            ("ADVI + stein_weights", table(advi, w.values), f"{w.attrs['ksd_weighted']:.3f}",
             f"{floor:.3f}"),
            ("ADVI + stein_variational", table(svgd.draws), f"{svgd.ksd_final:.3f}",
             f"{float(svgd.ksd_iid[-1]):.3f}")]
    print(f"stein_weights {seconds_weights:.0f} s (Kish ESS {w.attrs['kish_ess']:.0f} of "
          f"4000); stein_variational {seconds_svgd:.0f} s ({svgd.attrs.get('svgd_n_steps', '')}"
          f" steps; KSD {svgd.ksd_initial:.3f} -> {svgd.ksd_final:.3f}).\n")
    print("| draws | KSD | i.i.d. floor | sd of sigma | sd of mu | means closer to NUTS "
          "than ADVI's | sds closer to NUTS than ADVI's |")
    print("|---|---|---|---|---|---|---|")
    for label, t, ksd_value, floor_value in rows:
        closer = np.sum(np.abs(t["mean"] - truth["mean"]) < np.abs(plain["mean"] - truth["mean"]))
        closer_sd = np.sum(np.abs(t["sd"] - truth["sd"]) < np.abs(plain["sd"] - truth["sd"]))
        counts = ("", "") if t is truth or t is plain else (f"{closer} of {len(t)}",
                                                            f"{closer_sd} of {len(t)}")
        print(f"| {label} | {ksd_value} | {floor_value} | {t.loc['sigma', 'sd']:.3f} | "
              f"{t.loc['mu', 'sd']:.3f} | {counts[0]} | {counts[1]} |")
    print()
    for c in caught:
        if issubclass(c.category, UserWarning):
            print(f"- {c.category.__name__}: {c.message}")
    parameters = json.loads(w.attrs["parameters"])
    for key in ("spread_variance_ratio", "spread_variance_ratio_z",
                "spread_variance_ratio_draws", "spread_moment"):
        values = dict(zip(parameters, np.round(np.asarray(w.attrs[key], float), 2)))
        print(f"- {key}: mu {values['mu']}, sigma_log__ {values['sigma_log__']}, beta "
              f"{values['beta']}, z[*] median "
              f"{np.median([v for k, v in values.items() if k.startswith('z[')]):.2f}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("synthetic")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--out", required=True)
    p = sub.add_parser("pymc")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 21)))
    p.add_argument("--out", required=True)
    p.add_argument("--cache", help="directory for the NUTS and ADVI traces (reused)")
    p = sub.add_parser("numpyro")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--draws", type=int, default=250)
    p.add_argument("--advi-reps", type=int, default=30)
    p.add_argument("--which", nargs="+", default=["nuts", "advi"])
    p.add_argument("--out", required=True)
    p = sub.add_parser("summary")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("thinning")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=5)
    p = sub.add_parser("example")
    p.add_argument("--advi-seed", type=int, default=3)
    p.add_argument("--cache", help="directory for the NUTS and ADVI traces (reused)")
    args = parser.parse_args()
    {"synthetic": synthetic, "pymc": pymc_runs, "numpyro": numpyro_runs, "summary": summary, "thinning": thinning,
     "example": example}[
        args.mode](args)


if __name__ == "__main__":
    main()
