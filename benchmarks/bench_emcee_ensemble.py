"""How ``diagnose`` reads an emcee ensemble: level on healthy runs, power on biased ones.

Usage::

    python benchmarks/bench_emcee_ensemble.py --d 3 --walkers 16 --steps 2000 --runs 30
    python benchmarks/bench_emcee_ensemble.py --d 5 --walkers 32 --steps 2500 --runs 30
    python benchmarks/bench_emcee_ensemble.py --d 3 --walkers 16 --steps 2000 --runs 10 \
        --narrow 0.8

Target: N(0, S) in d dimensions, S = A A^T / d + I / 2 with A standard normal (seed 0).
Each run: emcee's stretch move (vectorized log p), walkers started at N(0, I), 500 steps
discarded, then ``--steps`` steps; ``diagnose(sampler, score=..., coords=...)`` in one
call (the ensemble read as one chain, log p from log_prob_fn for the search). With
``--narrow f`` the sampler targets N(0, f^2 S) while the score is that of N(0, S): draws
that do not fit; they are passed as emcee's ``get_chain()`` array with
``sample_dims=("draw", "chain")`` (also read as an ensemble), since the sampler itself
would refuse a score that is not the gradient of its ``log_prob_fn``.
``--walkers-as-chains k``: for the first k runs also diagnose the same draws read as
independent chains (the former reading), for comparison.

Prints one JSON line per run (verdict, pooled p-value, thinning lag, kept blocks per
walker, emcee's own autocorrelation time) and a summary: the fraction of runs with each
verdict. A family-wise level of alpha = 0.05 allows "does not fit" in at most 5 % of
healthy runs.
"""

import argparse
import json
import time
import warnings

import numpy as np

import steindiag


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--d", type=int, default=3)
    parser.add_argument("--walkers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--narrow", type=float, default=1.0)
    parser.add_argument("--walkers-as-chains", type=int, default=0)
    args = parser.parse_args()
    import emcee

    d, burn = args.d, 500
    a = np.random.default_rng(0).normal(size=(d, d))
    precision = np.linalg.inv(a @ a.T / d + np.eye(d) / 2)
    sampled = precision / args.narrow**2

    def log_prob(x):
        return -0.5 * np.einsum("...i,ij,...j->...", x, sampled, x)

    def score(x):
        return -x @ precision

    counts = {}
    for seed in range(args.first_seed, args.first_seed + args.runs):
        sampler = emcee.EnsembleSampler(args.walkers, d, log_prob, vectorize=True)
        sampler.random_state = np.random.RandomState(1000 + seed).get_state()
        start = np.random.default_rng(seed).normal(size=(args.walkers, d))
        sampler.run_mcmc(start, burn + args.steps, progress=False)
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if args.narrow == 1.0:
                res = steindiag.diagnose(sampler, score=score,
                                         coords={"draw": slice(burn, None)}, rng=seed)
            else:
                # The sampler's log_prob_fn is not the score's density (the sampler would
                # refuse the score): emcee's array, read as an ensemble all the same.
                res = steindiag.diagnose(sampler.get_chain(discard=burn), score=score,
                                         log_density=lambda x: -0.5 * np.einsum(
                                             "...i,ij,...j->...", x, precision, x),
                                         sample_dims=("draw", "chain"), rng=seed)
        row = {"seed": seed, "reading": "ensemble", "seconds": round(time.perf_counter()
                                                                     - started, 1),
               "verdict": res["verdict_pooled"].item(),
               "pvalue": round(float(res["pvalue_pooled"]), 4),
               "thinning_lag": int(res.attrs["thinning_lag"]),
               "kept_blocks_per_walker": int(res.attrs["kept_draws"]),
               "emcee_tau": round(float(sampler.get_autocorr_time(discard=burn,
                                                                  quiet=True).max()), 1)}
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
        print(json.dumps(row), flush=True)
        if seed - args.first_seed < args.walkers_as_chains:
            chains = np.swapaxes(sampler.get_chain(discard=burn), 0, 1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = steindiag.diagnose(chains, score=score, log_density=log_prob,
                                         sample_dims=("chain", "draw"), rng=seed)
            verdicts, number = np.unique(res["verdict"].values, return_counts=True)
            print(json.dumps({"seed": seed, "reading": "walkers as chains",
                              "verdict": res["verdict_pooled"].item(),
                              "chain_verdicts": dict(zip(verdicts.tolist(),
                                                         number.tolist()))}), flush=True)
    summary = {verdict: f"{n} / {args.runs}" for verdict, n in sorted(counts.items())}
    print(json.dumps({"d": d, "walkers": args.walkers, "steps": args.steps,
                      "narrow": args.narrow, "verdicts": summary}))


if __name__ == "__main__":
    main()
