"""Is the MMD test of agreement exact on independent draws? (issue 36.4)

On independent draws the blocks the test relabels are exchangeable, so its p-value
(1 + #{relabelled >= observed}) / (1 + P) is exact: P(p <= a) <= a for every a. This script
checks that on independent Student-t (3) draws, calling the test exactly as ``diagnose``
does (``methods.evidence.agreement_evidence``: the default preconditioner of the pooled
draws, the IMQ kernel, 999 relabellings), run r drawing its data and relabellings from
``numpy.random.default_rng(r)``. It prints the share of p-values at or below a few levels
with their binomial standard deviation.

    python benchmarks/bench_agreement_exact.py --chains 4 --draws 100 --dim 1 --reps 30000
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from steindiag.kernels import make_kernel  # noqa: E402
from steindiag.methods.evidence import agreement_evidence, draws_preconditioner  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--dim", type=int, default=1)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--nu", type=float, default=3.0)
    args = parser.parse_args()
    kernel = make_kernel("imq")
    names = [f"x{k}" for k in range(args.dim)]
    pvalues = np.empty(args.reps)
    for rep in range(args.reps):
        rng = np.random.default_rng(rep)
        draws = rng.standard_t(args.nu, size=(args.chains, args.draws, args.dim))
        pre = draws_preconditioner("standardize", draws, names)
        pvalues[rep] = agreement_evidence(draws, names, pre, "standardize", kernel, 999, rng,
                                          False).pvalue
    print(f"{args.chains} chains x {args.draws} independent t{args.nu:g} draws, d = {args.dim}, "
          f"{args.reps} runs:")
    for level in (0.0125, 0.05, 0.1, 0.2, 0.5):
        k = int(np.sum(pvalues <= level))
        sd = np.sqrt(level * (1 - level) / args.reps)
        print(f"  p <= {level:g}: {k}/{args.reps} = {100 * k / args.reps:.2f} % "
              f"(binomial sd {100 * sd:.2f} %)")


if __name__ == "__main__":
    main()
