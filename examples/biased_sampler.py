"""A sampler that passes R-hat and ESS but samples the wrong distribution, and KSD shows it.

Target: a 2-D Gaussian N(0, Sigma) with correlation 0.8, so the answer is known exactly.
Three ways to draw from it, 4 chains x 2000 draws each:

- exact:  independent draws (the best any sampler can do);
- MALA:   Metropolis-adjusted Langevin, step h = 0.2 (unbiased: the accept/reject step
          corrects the discretisation);
- ULA:    the unadjusted Langevin algorithm with the same step (no correction): it mixes
          well, so R-hat is about 1 and its ESS is even higher than MALA's, but its
          stationary distribution is not the target (too wide, correlation too weak).

R-hat and ESS compare chains with each other; if every chain converges to the same wrong
answer they cannot tell. KSD compares the draws with the target's score, so it can. The
running curve makes the difference visible: MALA's KSD keeps falling like n^(-1/2) (parallel
to the i.i.d. floor), ULA's flattens out at its bias.

Run:  python examples/biased_sampler.py   (a few seconds; writes examples/output/biased_sampler.png)
"""

from pathlib import Path

import arviz as az
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

import steindiag  # noqa: E402
from steindiag.plots import plot_ksd  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"
N_CHAIN, N_DRAW, STEP = 4, 2000, 0.2

SIGMA = np.array([[1.0, 0.8], [0.8, 1.0]])
PRECISION = np.linalg.inv(SIGMA)
CHOLESKY = np.linalg.cholesky(SIGMA)


def log_density(x):
    """log p(x) up to a constant, for x of shape (..., 2)."""
    return -0.5 * np.einsum("...i,ij,...j->...", x, PRECISION, x)


def score(x):
    """grad log p(x) = -Sigma^-1 x, for x of shape (n, 2)."""
    return -x @ PRECISION


def exact_draws(rng):
    return rng.standard_normal((N_CHAIN, N_DRAW, 2)) @ CHOLESKY.T


def langevin(rng, *, step, adjust):
    """ULA (adjust=False) or MALA (adjust=True), all chains advanced together."""
    x = rng.standard_normal((N_CHAIN, 2)) @ CHOLESKY.T  # start in the target
    draws = np.empty((N_CHAIN, N_DRAW, 2))
    accepted = 0.0

    def log_proposal(to, frm):  # log q(to | frm) up to a constant
        mean = frm + step * score(frm)
        return -np.sum((to - mean) ** 2, axis=-1) / (4.0 * step)

    for t in range(N_DRAW):
        proposal = x + step * score(x) + np.sqrt(2.0 * step) * rng.standard_normal(x.shape)
        if adjust:
            log_ratio = (log_density(proposal) - log_density(x)
                         + log_proposal(x, proposal) - log_proposal(proposal, x))
            accept = np.log(rng.uniform(size=N_CHAIN)) < log_ratio
            x = np.where(accept[:, None], proposal, x)
            accepted += accept.mean()
        else:
            x = proposal
        draws[:, t] = x
    return draws, accepted / N_DRAW if adjust else 1.0


def summary(name, draws):
    posterior = xr.Dataset({"x": (("chain", "draw", "coord"), draws)})
    result = steindiag.ksd(draws, score=score)
    quarter = steindiag.ksd(draws[:, : N_DRAW // 4], score=score)
    flat = draws.reshape(-1, 2)
    return {
        "sampler": name,
        "max R-hat": float(az.rhat(posterior)["x"].max()),
        "min ESS": float(az.ess(posterior)["x"].min()),
        "sd(x0)": flat[:, 0].std(),
        "corr": np.corrcoef(flat.T)[0, 1],
        "KSD": float(result["ksd_pooled"]),
        "floor": float(result["ksd_iid_pooled"]),
        "KSD/floor (n/4)": float(quarter["ksd_pooled"] / quarter["ksd_iid_pooled"]),
        "KSD/floor (n)": float(result["ksd_pooled"] / result["ksd_iid_pooled"]),
    }


def print_table(rows):
    header = list(rows[0])

    def cell(key, value):
        if isinstance(value, str):
            return value
        if np.isnan(value):
            return "-"
        return f"{value:.0f}" if key == "min ESS" else f"{value:.3f}"

    table = [header] + [[cell(key, row[key]) for key in header] for row in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(header))]
    for line in table:
        print(line[0].ljust(widths[0]) + "  " +
              "  ".join(c.rjust(w) for c, w in zip(line[1:], widths[1:])))


def main():
    rng = np.random.default_rng(20240501)
    samples = {
        "exact (i.i.d.)": exact_draws(rng),
        f"MALA h={STEP}": langevin(rng, step=STEP, adjust=True)[0],
        f"ULA h={STEP}": langevin(rng, step=STEP, adjust=False)[0],
    }
    rows = [summary(name, draws) for name, draws in samples.items()]
    rows.insert(0, {"sampler": "truth", "max R-hat": 1.0, "min ESS": float("nan"),
                    "sd(x0)": 1.0, "corr": 0.8, "KSD": 0.0, "floor": float("nan"),
                    "KSD/floor (n/4)": float("nan"), "KSD/floor (n)": float("nan")})
    print(f"Target N(0, Sigma), corr 0.8; {N_CHAIN} chains x {N_DRAW} draws; KSD pooled "
          "over chains.\n")
    print_table(rows)
    print(
        "\nR-hat ~ 1 and a healthy ESS for ULA, yet sd and correlation are off. KSD is many"
        "\ntimes its i.i.d. floor, and the ratio grows with n (the bias does not average"
        "\nout); for MALA the ratio stays put (autocorrelation only)."
    )

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True, layout="constrained")
    for i, (ax, (name, draws)) in enumerate(zip(axes, samples.items())):
        path = steindiag.ksd_path(draws, score=score, n_points=40)
        plot_ksd(path, ax=ax, visuals={"legend": {"fontsize": "x-small", "frameon": False}
                                       if i == 2 else False})
        ax.set_title(name)
        if i:
            ax.set_ylabel("")
    OUTPUT.mkdir(exist_ok=True)
    fig.savefig(OUTPUT / "biased_sampler.png", dpi=110)
    print("\nfigure: examples/output/biased_sampler.png")


if __name__ == "__main__":
    main()
