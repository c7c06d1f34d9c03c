"""steindiag's CmdStanPy + BridgeStan reader against the real libraries, offline.

Usage::

    # build the models' shared libraries by hand from BridgeStan's C++ sources
    git --git-dir=<bridgestan git dir> archive v2.5.0 | tar -x -C /tmp/bridgestan-src
    python benchmarks/check_bridgestan.py --bridgestan-src /tmp/bridgestan-src \\
        --build-dir /tmp/bsbuild
    # or reuse libraries built before (normal_model.so, vec_model.so, cplx_model.so)
    python benchmarks/check_bridgestan.py --so /tmp/bsbuild

Needs ``bridgestan`` (the Python package of the same version as the C++ sources: 2.5.0
for v2.5.0, whose Stan is 2.35 like httpstan's), pystan 3 (httpstan brings Stan's C++
headers, stanc, TBB) and, for a real ``CmdStanMCMC``, ``cmdstanpy`` (``from_csv`` needs no
CmdStan); without cmdstanpy a duck-typed fit of the same draws is used.

BridgeStan normally downloads Stan from GitHub and builds with its Makefile; here
``stanc`` (httpstan's) translates the program and g++ compiles ``src/bridgestan.cpp`` and
the model with httpstan's headers and defines, linking httpstan's libtbb (rpath).

The draws are real: pystan 3 samples each program; its draws are written as Stan CSV
files in CmdStan's layout (header comments, ``lp__ ... energy__`` then the parameters with
CmdStan's ``theta.1`` names, adaptation block, timing) and read back with
``cmdstanpy.from_csv``. Then, for each program:

* steindiag.read_input(cmdstanpy_fit, bridgestan_model).with_scores(): draws against the
  stored constrained draws mapped to Stan's unconstrained space by hand (normal: mu,
  log sigma) and by BridgeStan's param_constrain (round trip); scores against the closed
  form (normal) and against pystan's own ``grad_log_prob`` path (read_input(fit, posterior));
* ksd, diagnose(rng=0), stein_thin(n_selected=20) on both sources: equal.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROGRAMS = {
    "normal": ("""parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, 1);
  sigma ~ exponential(1);
}
""", None),
    "vec": ("""data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  vector[2] theta;
  real<lower=0> sigma;
  simplex[3] w;
}
model {
  theta ~ normal(0, 1);
  sigma ~ exponential(1);
  w ~ dirichlet([2, 3, 4]');
  y ~ normal(theta[1] + theta[2], sigma);
}
""", {"N": 5, "y": [0.3, -0.4, 1.2, 0.8, 0.1]}),
    # complex parameter: BridgeStan names its coordinates "zc.real", "zc.imag"
    "cplx": ("""parameters {
  complex zc;
}
model {
  get_real(zc) ~ normal(0, 1);
  get_imag(zc) ~ normal(0, 1);
}
""", None),
}

DEFINES = ["-D_REENTRANT", "-DBOOST_DISABLE_ASSERTS", "-DBOOST_PHOENIX_NO_VARIADIC_EXPRESSION",
           "-DSTAN_THREADS", "-D_GLIBCXX_USE_CXX11_ABI=0", "-DBRIDGESTAN_EXPORT"]
CXXFLAGS = ["-std=c++17", "-O1", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden",
            "-Wno-sign-compare", "-Wno-ignored-attributes", "-Wno-deprecated-declarations"]

RESULTS = []


def check(what, value, tol):
    ok = bool(value <= tol)
    RESULTS.append((what, value, tol, ok))
    print(f"  {'ok  ' if ok else 'FAIL'} {what}: {value:.3g} (<= {tol:g})")
    return ok


def check_true(what, ok, detail=""):
    RESULTS.append((what, float("nan"), 0.0, bool(ok)))
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}")
    return ok


# --------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------


def httpstan_dir():
    import httpstan

    return Path(httpstan.__file__).parent


def run(cmd):
    print("  $", " ".join(map(str, cmd)))
    t = time.time()
    subprocess.run(["nice", *map(str, cmd)], check=True)
    print(f"    ({time.time() - t:.1f} s)")


def build(name, src, build_dir):
    """stanc + g++: <build_dir>/<name>_model.so from BridgeStan's sources ``src``."""
    h = httpstan_dir()
    build_dir.mkdir(parents=True, exist_ok=True)
    stan_file, hpp = build_dir / f"{name}.stan", build_dir / f"{name}.hpp"
    stan_file.write_text(PROGRAMS[name][0])
    run([h / "stanc", f"--o={hpp}", stan_file])
    flags = [*CXXFLAGS, *DEFINES, "-I", h / "include"]
    bridge_o = build_dir / "bridgestan.o"
    if not bridge_o.exists():
        run(["g++", *flags, "-c", Path(src) / "src" / "bridgestan.cpp", "-o", bridge_o])
    model_o = build_dir / f"{name}.o"
    run(["g++", *flags, "-x", "c++", "-c", hpp, "-o", model_o])
    lib = build_dir / f"{name}_model.so"
    run(["g++", "-shared", "-fPIC", "-o", lib, model_o, bridge_o, f"-L{h / 'lib'}",
         f"-Wl,-rpath,{h / 'lib'}", "-ltbb", "-lm"])
    return lib


# --------------------------------------------------------------------------------------
# draws: pystan -> Stan CSV (CmdStan's layout) -> cmdstanpy.from_csv
# --------------------------------------------------------------------------------------


def csv_fit(names, draws, model_name, folder, stepsize=0.9):
    """Stan CSV files (one per chain) of ``draws`` (column, draw, chain); the fit read back.

    ``names`` are CmdStan's column names (``lp__`` ... ``energy__``, ``theta.1``).
    """
    n_col, n_draw, n_chain = draws.shape
    n_unc = sum(not n.endswith("__") for n in names)
    files = []
    for chain in range(n_chain):
        lines = [
            "# stan_version_major = 2", "# stan_version_minor = 35",
            "# stan_version_patch = 0", f"# model = {model_name}_model",
            "# method = sample (Default)", "#   sample", f"#     num_samples = {n_draw}",
            "#     num_warmup = 1000 (Default)", "#     save_warmup = false (Default)",
            "#     thin = 1 (Default)", "#     adapt", "#       engaged = true (Default)",
            "#       delta = 0.8 (Default)", "#     algorithm = hmc (Default)", "#       hmc",
            "#         engine = nuts (Default)", "#           nuts",
            "#             max_depth = 10 (Default)", "#         metric = diag_e (Default)",
            "#         metric_file =  (Default)", "#         stepsize = 1 (Default)",
            "#     num_chains = 1 (Default)", f"# id = {chain + 1}", "# data",
            "#   file =  (Default)", "# random", "#   seed = 1", "# output",
            f"#   file = {model_name}-{chain + 1}.csv", "# stanc_version = stanc3 v2.35.0",
            ",".join(names),
            "# Adaptation terminated", f"# Step size = {stepsize}",
            "# Diagonal elements of inverse mass matrix:",
            "# " + ", ".join(["1"] * n_unc)]
        lines += [",".join(repr(float(v)) for v in draws[:, t, chain]) for t in range(n_draw)]
        lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)",
                  "#                0.01 seconds (Sampling)",
                  "#                0.02 seconds (Total)", "# "]
        path = Path(folder) / f"{model_name}-{chain + 1}.csv"
        path.write_text("\n".join(lines) + "\n")
        files.append(str(path))
    try:
        import cmdstanpy
    except ImportError:
        print("  cmdstanpy not importable: a duck-typed CmdStanMCMC of the same draws")
        return _DuckFit(names, draws)
    fit = cmdstanpy.from_csv(files, method="sample")
    print(f"  cmdstanpy {cmdstanpy.__version__}: {type(fit).__name__}, "
          f"draws {fit.draws(concat_chains=False).shape}, columns {fit.column_names}")
    return fit


class _DuckFit:
    def __init__(self, names, draws):
        self.column_names = tuple(names)
        self.chains = draws.shape[2]
        self._draws = np.moveaxis(draws, 0, -1)            # (draw, chain, column)

    def draws(self, *, inc_warmup=False, concat_chains=False):
        return self._draws


def pystan_fit(name, num_chains=4, num_samples=500):
    import stan

    program, data = PROGRAMS[name]
    posterior = stan.build(program, data=data or {}, random_seed=1)
    fit = posterior.sample(num_chains=num_chains, num_samples=num_samples)
    names = list(fit.sample_and_sampler_param_names) + list(fit.constrained_param_names)
    # (column, draw, chain): the fit's stored array (what fit[name] reshapes)
    draws = np.asarray(fit._draws)
    first = fit[fit.param_names[0]]
    assert np.array_equal(first.reshape(-1, first.shape[-1])[0],
                          draws[len(fit.sample_and_sampler_param_names)].ravel())
    return posterior, fit, names, draws


# --------------------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------------------


def compare(name, lib, folder):
    import bridgestan
    import steindiag
    from steindiag.inputs import read_input

    print(f"\n== {name} ==")
    program, data = PROGRAMS[name]
    model = bridgestan.StanModel(str(lib), data=json.dumps(data) if data else None)
    print(f"  bridgestan {bridgestan.__version__} (Python), library {model.model_version()}; "
          f"param_names {model.param_names()}, param_unc_names {model.param_unc_names()}")
    if name == "cplx":
        return compare_cplx(model, folder)
    posterior, fit, names, draws = pystan_fit(name)
    csfit = csv_fit(names, draws, name, folder)
    stored = {n: draws[i].T for i, n in enumerate(names)}      # (chain, draw)

    bs = read_input(csfit, model).with_scores()
    ps = read_input(fit, posterior).with_scores()
    print(f"  labels {bs.parameter} (pystan reader: {ps.parameter})")
    check("draws: BridgeStan reader vs pystan reader (max abs)",
          np.abs(bs.draws - ps.draws).max(), 1e-12)
    check("scores: BridgeStan vs pystan grad_log_prob (max abs)",
          np.abs(bs.scores - ps.scores).max(), 1e-10)
    # the stored constrained draws back: BridgeStan's param_constrain of each draw
    back = np.array([[model.param_constrain(z) for z in chain] for chain in bs.draws])
    const = np.stack([stored[n] for n in names if not n.endswith("__")], axis=-1)
    check("param_constrain(draws) vs stored constrained draws (max abs)",
          np.abs(back - const).max(), 1e-12)
    lp_bs = read_input(csfit, model).log_density(bs.draws.reshape(-1, bs.draws.shape[-1]))
    lp_ps = np.array([posterior.log_prob(list(map(float, z)), adjust_transform=True)
                      for z in ps.draws.reshape(-1, ps.draws.shape[-1])])
    check("log density: BridgeStan (jacobian=True) vs pystan log_prob (max abs)",
          np.abs(lp_bs - lp_ps).max(), 1e-10)
    check("log density vs the fit's lp__ (max abs)",
          np.abs(lp_bs - stored["lp__"].ravel()).max(), 1e-5)   # lp__ printed to 6 digits
    points = np.asfortranarray(bs.draws.reshape(-1, bs.draws.shape[-1]))
    check("score at Fortran-ordered points = at the draws (max abs)",
          np.abs(read_input(csfit, model).score_function(points)
                 - bs.scores.reshape(points.shape)).max(), 0.0)
    divergent = stored["divergent__"].sum(axis=1)
    pending = read_input(csfit, model)
    check_true("divergences per chain = fit's divergent__",
               np.array_equal(pending.sampler_warnings().divergences, divergent),
               f"{pending.sampler_warnings().divergences.tolist()}")

    if name == "normal":
        mu, sigma = stored["mu"], stored["sigma"]
        check("draws[..., 0] vs mu (max abs)", np.abs(bs.draws[..., 0] - mu).max(), 1e-12)
        check("draws[..., 1] vs log sigma (max abs)",
              np.abs(bs.draws[..., 1] - np.log(sigma)).max(), 1e-12)
        check("scores[..., 0] vs -mu (max abs)", np.abs(bs.scores[..., 0] + mu).max(), 1e-10)
        check("scores[..., 1] vs 1 - sigma (max abs)",
              np.abs(bs.scores[..., 1] - (1 - sigma)).max(), 1e-10)
        check_true("labels == ['mu', 'sigma']", bs.parameter == ["mu", "sigma"])
        closed = -0.5 * mu**2 - sigma + np.log(sigma)
        check("log density vs -mu^2/2 - sigma + log sigma (max abs)",
              np.abs(lp_bs - closed.ravel()).max(), 1e-10)
    else:
        check_true("labels are BridgeStan's unconstrained names",
                   bs.parameter == ["theta[0]", "theta[1]", "sigma", "w[0]", "w[1]"],
                   str(bs.parameter))

    k_bs, k_ps = steindiag.ksd(csfit, model), steindiag.ksd(fit, posterior)
    print(f"  ksd pooled {float(k_bs['ksd_pooled']):.12g} (pystan {float(k_ps['ksd_pooled']):.12g}); "
          f"per chain {np.round(k_bs['ksd'].values, 6).tolist()}")
    check("ksd_pooled: BridgeStan vs pystan (abs)",
          abs(float(k_bs["ksd_pooled"]) - float(k_ps["ksd_pooled"])), 1e-10)
    check("ksd per chain: BridgeStan vs pystan (max abs)",
          np.abs(k_bs["ksd"].values - k_ps["ksd"].values).max(), 1e-10)

    d_bs, d_ps = steindiag.diagnose(csfit, model, rng=0), steindiag.diagnose(fit, posterior, rng=0)
    diffs = []
    for var in d_bs.data_vars:
        a, b = d_bs[var].values, d_ps[var].values
        if np.issubdtype(a.dtype, np.number) and a.shape == b.shape:
            diffs.append(float(np.nanmax(np.abs(a.astype(float) - b.astype(float)), initial=0)))
        else:
            diffs.append(0.0 if np.array_equal(a, b) else np.inf)
    verdict = d_bs["verdict"].values if "verdict" in d_bs else ""
    print(f"  diagnose: {len(diffs)} variables; verdict {verdict}")
    check("diagnose(rng=0): every variable, BridgeStan vs pystan (max abs)", max(diffs), 1e-8)

    t_bs = steindiag.stein_thin(csfit, model, n_selected=20, return_info=True)
    t_ps = steindiag.stein_thin(fit, posterior, n_selected=20, return_info=True)
    check_true("stein_thin(n_selected=20): same indices", np.array_equal(t_bs.index, t_ps.index),
               str(t_bs.index.tolist()))
    check("stein_thin ksd: BridgeStan vs pystan (abs)", abs(t_bs.ksd - t_ps.ksd), 1e-10)
    if name == "normal":
        # log p and score at new points (the model, not the draws)
        r_bs = steindiag.stein_thin(csfit, model, n_selected=10, regularized=True,
                                    return_info=True)
        r_ps = steindiag.stein_thin(fit, posterior, n_selected=10, regularized=True,
                                    return_info=True)
        check_true("stein_thin(regularized=True): same indices",
                   np.array_equal(r_bs.index, r_ps.index), str(r_bs.index.tolist()))
        v_bs = steindiag.stein_variational(csfit, model, n_steps=3)
        v_ps = steindiag.stein_variational(fit, posterior, n_steps=3)
        check("stein_variational(n_steps=3): moved draws, BridgeStan vs pystan (max abs)",
              float(np.abs(np.asarray(v_bs.draws) - np.asarray(v_ps.draws)).max()), 1e-10)
        check("stein_variational(n_steps=3): ksd, BridgeStan vs pystan (max abs)",
              float(np.abs(v_bs.ksd.values - v_ps.ksd.values).max()), 1e-10)


def compare_cplx(model, folder):
    """Labels of a complex parameter (no pystan draws: N(0, 1) draws are enough)."""
    from steindiag.inputs import read_input

    rng = np.random.default_rng(0)
    names = ["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__",
             "divergent__", "energy__", *model.param_names()]
    draws = np.zeros((len(names), 100, 2))
    draws[-2:] = rng.normal(size=(2, 100, 2))
    draws[1], draws[2], draws[3], draws[4] = 0.9, 0.9, 2, 3
    csfit = csv_fit(names, draws, "cplx", folder)
    prepared = read_input(csfit, model).with_scores()
    print(f"  labels {prepared.parameter}")
    check_true("complex: labels == ['zc[real]', 'zc[imag]']",
               prepared.parameter == ["zc[real]", "zc[imag]"])
    check("complex: draws = stored (max abs)",
          np.abs(prepared.draws - np.transpose(draws[-2:], (2, 1, 0))).max(), 1e-12)
    check("complex: scores = -z (max abs)", np.abs(prepared.scores + prepared.draws).max(), 1e-10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bridgestan-src", help="BridgeStan's sources (src/bridgestan.cpp)")
    parser.add_argument("--build-dir", default=None, help="where to build (default: temp)")
    parser.add_argument("--so", help="folder holding <name>_model.so built before")
    parser.add_argument("--only", nargs="*", default=list(PROGRAMS))
    args = parser.parse_args()
    if not args.so and not args.bridgestan_src:
        parser.error("give --so FOLDER or --bridgestan-src FOLDER")
    build_dir = Path(args.build_dir or tempfile.mkdtemp(prefix="bsbuild-"))
    print(f"httpstan {httpstan_dir()}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.only:
            lib = Path(args.so) / f"{name}_model.so" if args.so else None
            if lib is None or not lib.exists():
                lib = build(name, args.bridgestan_src, build_dir)
            compare(name, lib, folder)
    failed = [r for r in RESULTS if not r[3]]
    print(f"\n{len(RESULTS) - len(failed)} of {len(RESULTS)} checks pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
