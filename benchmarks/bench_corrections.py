"""What weights and thinning do to a trace that missed mass: centred eight schools.

Run:  PYTHONPATH=$PWD python benchmarks/bench_corrections.py [--seeds 20240601 ...]

The centred eight-schools model (Rubin 1981; the data of Gelman et al., BDA3 ch. 5)
has a funnel that NUTS cannot enter: its chains diverge and miss the region of small
tau. Truth: a long run of the non-centred parametrisation (same posterior, no funnel
problem). For the centred trace (4 chains x 1000 draws) this reports, for tau:
P(tau < 1) and the mean, unweighted, with ``stein_weights`` and after ``stein_thin``
(plain and regularised), next to the truth. Writes a Markdown table to stdout
(benchmarks/results/corrections.md holds a run). Seconds to minutes, dominated by
NUTS; the machine is shared, so the timings printed are rough.
"""

import argparse
import time
import warnings

import numpy as np

import steindiag

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def centred():
    import pymc as pm

    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("y", theta, SIGMA, observed=Y, dims="school")
    return model


def non_centred():
    import pymc as pm

    with pm.Model(coords={"school": np.arange(8)}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, dims="school")
        theta = pm.Deterministic("theta", mu + tau * eta, dims="school")
        pm.Normal("y", theta, SIGMA, observed=Y, dims="school")
    return model


def sample(model, draws, seed, **kwargs):
    import pymc as pm

    with model:
        return pm.sample(draws=draws, tune=1000, chains=4, cores=1, random_seed=seed,
                         progressbar=False, compute_convergence_checks=False, **kwargs)


def row(name, tau, weights=None):
    tau = np.asarray(tau).reshape(-1)
    w = np.full(tau.size, 1.0 / tau.size) if weights is None else np.asarray(weights).reshape(-1)
    w = w / w.sum()
    return f"| {name} | {w @ (tau < 1.0):.3f} | {w @ tau:.2f} | {1.0 / np.sum(w**2):.0f} |"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[20240601])
    parser.add_argument("--truth-draws", type=int, default=10000)
    args = parser.parse_args()
    import logging

    logging.getLogger("pymc").setLevel(logging.ERROR)
    truth = sample(non_centred(), args.truth_draws, 1)
    tau_true = truth.posterior["tau"].values
    print(f"Truth: non-centred NUTS, 4 x {args.truth_draws} draws "
          f"({int(truth.sample_stats['diverging'].sum())} divergences).\n")
    for seed in args.seeds:
        model = centred()
        trace = sample(model, 1000, seed)
        n_div = int(trace.sample_stats["diverging"].sum())
        tau = trace.posterior["tau"].values
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w = steindiag.stein_weights(trace, model)
            thin = steindiag.stein_thin(trace, model, n_selected=200)
            thin_reg = steindiag.stein_thin(trace, model, n_selected=200, regularized=True)
        seconds = time.perf_counter() - start
        print(f"Centred NUTS, seed {seed}: 4 x 1000 draws, {n_div} divergences; weights and "
              f"both thinnings {seconds:.0f} s.\n")
        print("| draws | P(tau < 1) | mean tau | Kish ESS / points |")
        print("|---|---|---|---|")
        print(row("truth (non-centred, long run)", tau_true))
        print(row("centred, unweighted", tau))
        print(row("centred, stein_weights", tau, w.values))
        print(row("centred, stein_thin (200 points)", thin.posterior["tau"].values))
        print(row("centred, stein_thin regularised (200)", thin_reg.posterior["tau"].values))
        print(f"\nstein_weights: KSD uniform {w.attrs['ksd_uniform']:.3f}, weighted "
              f"{w.attrs['ksd_weighted']:.3f}, i.i.d. floor {w.attrs['ksd_iid']:.3f}.")
        for warning in caught:
            if issubclass(warning.category, UserWarning):
                print(f"- warning: {warning.message}")
        print(flush=True)


if __name__ == "__main__":
    main()
