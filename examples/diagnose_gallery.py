"""Four samples that should not be trusted, and what ``steindiag.diagnose`` says about each.

1. Unadjusted Langevin (ULA, step 0.5) on a correlated 2-D Gaussian: it mixes well, but
   its stationary law is not the target (the variance along the stiff direction doubles).
2. A sample stuck in one mode of 0.5 N(-4, 1) + 0.5 N(4, 1): every draw is an exact draw
   of the left component, so KSD sees nothing wrong; the search for unvisited mass does.
3. Prior draws of the non-centred eight-schools model scored against its posterior: their
   KSD / floor ratio is about 1, as for good draws, because the floor is computed at the
   draws and these draws have large scores; the test rejects them.
4. NUTS on the centred eight-schools model: divergent transitions in the funnel, p-values
   that cannot be trusted: "inconclusive", never "fits".

Each case prints its ``diagnose`` report; the figure shows the draws with the verdict.

Run:  python examples/diagnose_gallery.py   (a few minutes: two NUTS runs and four
diagnoses; writes examples/output/diagnose_gallery.png and docs/_static/diagnose_gallery.png)
"""

from pathlib import Path
import warnings

import numpy as np

import steindiag

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "output"
STATIC = HERE.parent / "docs" / "_static"

# 1. ULA on a correlated Gaussian ------------------------------------------------------
RHO = 0.5
COV = np.array([[1.0, RHO], [RHO, 1.0]])
PRECISION = np.linalg.inv(COV)


def gauss_score(x):
    return -x @ PRECISION


def gauss_log_density(x):
    return -0.5 * np.einsum("ni,ij,nj->n", x, PRECISION, x)


def ula(rng, n_chain, n_draw, step, burn=200):
    x = rng.standard_normal((n_chain, 2))
    out = np.empty((n_chain, n_draw, 2))
    for t in range(burn + n_draw):
        x = x + step * gauss_score(x) + np.sqrt(2.0 * step) * rng.standard_normal(x.shape)
        if t >= burn:
            out[:, t - burn] = x
    return out


# 2. One mode of a two-mode mixture ----------------------------------------------------
def mixture_score(x):
    left, right = -0.5 * (x + 4.0) ** 2, -0.5 * (x - 4.0) ** 2
    w = np.exp(left - np.logaddexp(left, right))
    return -w * (x + 4.0) - (1.0 - w) * (x - 4.0)


def mixture_log_density(x):
    return np.logaddexp(-0.5 * (x[:, 0] + 4.0) ** 2, -0.5 * (x[:, 0] - 4.0) ** 2)


# 3 and 4. Eight schools ---------------------------------------------------------------
Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools(pm, centred):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        if centred:
            theta = pm.Normal("theta", mu, tau, shape=8)
        else:
            theta_tilde = pm.Normal("theta_tilde", 0.0, 1.0, shape=8)
            theta = pm.Deterministic("theta", mu + tau * theta_tilde)
        pm.Normal("y", theta, SIGMA, observed=Y)
    return model


def prior_as_posterior(pm, model, names, n_chain, n_draw, seed):
    """Prior draws of ``names`` laid out as a posterior Dataset (chain, draw, ...)."""
    import xarray as xr

    values = pm.draw([model[n] for n in names], draws=n_chain * n_draw, random_seed=seed)
    data = {}
    for name, value in zip(names, values):
        value = np.asarray(value).reshape(n_chain, n_draw, *np.shape(value)[1:])
        dims = ("chain", "draw") + tuple(f"{name}_dim_{i}" for i in range(value.ndim - 2))
        data[name] = (dims, value)
    return xr.Dataset(data, coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw)})


def sample(pm, model, seed, target_accept=0.8):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(model=model, draws=1000, tune=1000, chains=4, cores=1,
                         random_seed=seed, progressbar=False, target_accept=target_accept,
                         compute_convergence_checks=False)


def posterior_values(trace, name):
    posterior = trace["posterior"] if not hasattr(trace, "posterior") else trace.posterior
    return np.asarray(posterior[name].values)


def ratio(res):
    return float(res["ksd_pooled"] / res["ksd_iid_pooled"])


def show(title, res):
    print(f"\n=== {title} ===")
    print(res.attrs["report"])


def main():
    import pymc as pm

    rng = np.random.default_rng(20)
    results = {}

    x_ula = ula(rng, 4, 1000, step=0.5)
    results["ula"] = steindiag.diagnose(x_ula, score=gauss_score,
                                        log_density=gauss_log_density, rng=1)
    show("1. ULA (step 0.5) on a correlated 2-D Gaussian", results["ula"])

    x_mode = -4.0 + rng.standard_normal((4, 500, 1))
    results["mode"] = steindiag.diagnose(x_mode, score=mixture_score,
                                         log_density=mixture_log_density, rng=2)
    show("2. One mode of 0.5 N(-4, 1) + 0.5 N(4, 1)", results["mode"])

    non_centred = eight_schools(pm, centred=False)
    prior = prior_as_posterior(pm, non_centred, ["mu", "tau", "theta_tilde"], 4, 1000, seed=3)
    results["prior"] = steindiag.diagnose(prior, non_centred, rng=3)
    show("3. Eight schools: prior draws scored against the posterior", results["prior"])
    reference = sample(pm, non_centred, seed=4, target_accept=0.95)

    centred = eight_schools(pm, centred=True)
    trace = sample(pm, centred, seed=5)
    results["centred"] = steindiag.diagnose(trace, centred, rng=4)
    show("4. Eight schools, centred, NUTS (divergent)", results["centred"])

    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the figure needs matplotlib
        return
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8), constrained_layout=True)

    def title(ax, name, res):
        ax.set_title(f"{name}\n{res['verdict_pooled'].item()} "
                     f"(KSD / floor {ratio(res):.1f})", fontsize=10)

    ax = axes[0]
    exact = rng.standard_normal((2000, 2)) @ np.linalg.cholesky(COV).T
    ax.scatter(*exact.T, s=2, alpha=0.3, color="grey", label="exact")
    ax.scatter(*x_ula[0, :1000].T, s=2, alpha=0.3, color="C3", label="ULA")
    ax.set_xlabel("x[0]")
    ax.set_ylabel("x[1]")
    ax.legend(loc="upper left", markerscale=4, fontsize=8)
    title(ax, "ULA, step 0.5", results["ula"])

    ax = axes[1]
    grid = np.linspace(-8, 8, 400)
    ax.plot(grid, 0.5 * np.exp(-0.5 * (grid + 4) ** 2) / np.sqrt(2 * np.pi)
            + 0.5 * np.exp(-0.5 * (grid - 4) ** 2) / np.sqrt(2 * np.pi), color="k",
            label="target")
    ax.hist(x_mode.ravel(), bins=40, density=True, color="C3", alpha=0.6, label="draws")
    ax.set_xlabel("x")
    ax.legend(loc="upper right", fontsize=8)
    title(ax, "stuck in one mode", results["mode"])

    ax = axes[2]
    ax.scatter(posterior_values(reference, "mu").ravel(),
               np.log(posterior_values(reference, "tau").ravel()), s=2, alpha=0.2,
               color="grey", label="posterior (NUTS)")
    ax.scatter(prior["mu"].values.ravel(), np.log(prior["tau"].values.ravel()), s=2,
               alpha=0.2, color="C3", label="prior draws")
    ax.set_xlabel("mu")
    ax.set_ylabel("log tau")
    ax.legend(loc="lower left", markerscale=4, fontsize=8)
    title(ax, "eight schools: prior draws", results["prior"])

    ax = axes[3]
    theta0 = posterior_values(trace, "theta")[..., 0].ravel()
    log_tau = np.log(posterior_values(trace, "tau").ravel())
    stats = trace["sample_stats"] if not hasattr(trace, "sample_stats") else trace.sample_stats
    diverging = np.asarray(stats["diverging"].values).ravel()
    ax.scatter(theta0[~diverging], log_tau[~diverging], s=2, alpha=0.2, color="grey",
               label="draws")
    ax.scatter(theta0[diverging], log_tau[diverging], s=8, color="C3",
               label=f"divergent ({diverging.sum()})")
    ax.set_xlabel("theta[0]")
    ax.set_ylabel("log tau")
    ax.legend(loc="lower right", markerscale=2, fontsize=8)
    title(ax, "eight schools, centred NUTS", results["centred"])

    OUTPUT.mkdir(exist_ok=True)
    fig.savefig(OUTPUT / "diagnose_gallery.png", dpi=100)
    if STATIC.is_dir():
        fig.savefig(STATIC / "diagnose_gallery.png", dpi=100)
    print("\nfigure: examples/output/diagnose_gallery.png (and docs/_static/diagnose_gallery.png)")


if __name__ == "__main__":
    main()
