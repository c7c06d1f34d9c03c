"""Quickstart: sample a PyMC model, get a verdict, save it, plot it, measure KSD.

The eight-schools model (non-centred), 4 chains x 1000 draws with NUTS, then

    steindiag.diagnose(idata, model)    # "fits" / "does not fit" / "inconclusive", and why
    plot_diagnosis(diagnosis)           # the verdict per chain with its evidence
    steindiag.ksd(idata, model)         # KSD of each chain and pooled, with the i.i.d. floor
    steindiag.ksd_path(idata, model)    # the same as the draws accumulate
    plot_ksd(path)                      # running KSD against n, log-log

The trace and the diagnosis are saved to netCDF (examples/output/eight_schools_trace.nc and
eight_schools_diagnosis.nc; examples/plots_gallery.py reads them back).

Scores come from the model in the sampler's unconstrained space (here mu, tau_log__ and
theta_z), Jacobian included. Works with PyMC 5 / ArviZ 0.x (InferenceData, a matplotlib
figure) and PyMC 6 / ArviZ 1.x (DataTree, an arviz-plots PlotCollection).

Run:  python examples/quickstart.py    (or `make example`)
Writes examples/output/quickstart.png, quickstart_diagnosis.png and the two .nc files.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import steindiag  # noqa: E402
from steindiag.plots import plot_diagnosis, plot_ksd  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "output"

SCHOOLS = ["Choate", "Deerfield", "Phillips Andover", "Phillips Exeter", "Hotchkiss",
           "Lawrenceville", "St. Paul's", "Mt. Hermon"]
EFFECT = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
STANDARD_ERROR = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools():
    with pm.Model(coords={"school": SCHOOLS}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta_z = pm.Normal("theta_z", 0.0, 1.0, dims="school")
        theta = pm.Deterministic("theta", mu + tau * theta_z, dims="school")
        pm.Normal("obs", theta, sigma=STANDARD_ERROR, observed=EFFECT, dims="school")
    return model


def print_table(res):
    print(f"KSD of {res.attrs['n_chain']} chains x {res.attrs['n_draw']} draws, "
          f"d = {res.attrs['n_parameter']} unconstrained parameters "
          f"({', '.join(json.loads(res.attrs['value_variables']))})\n")
    print(f"{'':>8}  {'KSD':>7}  {'i.i.d. floor':>12}  {'KSD / floor':>11}  {'KSD^2 (U)':>10}")
    rows = [(f"chain {c}", res["ksd"].sel(chain=c), res["ksd_iid"].sel(chain=c),
             res["ksd2_u"].sel(chain=c)) for c in res["chain"].values]
    rows.append(("pooled", res["ksd_pooled"], res["ksd_iid_pooled"], res["ksd2_u_pooled"]))
    for label, value, floor, u_stat in rows:
        value, floor, u_stat = float(value), float(floor), float(u_stat)
        print(f"{label:>8}  {value:7.4f}  {floor:12.4f}  {value / floor:11.2f}  {u_stat:10.5f}")
    print("\nKSD / floor describes the draws; it is not the verdict (the floor is computed at the"
          "\ndraws, so draws far from the posterior raise their own floor): the verdict is"
          "\ndiagnose's, from calibrated tests. A healthy run's running curve falls parallel to"
          "\nthe floor, slope -1/2.")


def save_figure(figure, name):
    """Save a PlotCollection (ArviZ 1.x) or a matplotlib Figure (ArviZ 0.x)."""
    figure.savefig(OUTPUT / name, dpi=110)
    print(f"figure: examples/output/{name}")


def main():
    OUTPUT.mkdir(exist_ok=True)
    model = eight_schools()
    with model:
        idata = pm.sample(draws=1000, tune=1000, chains=4, target_accept=0.95,
                          random_seed=20240501, progressbar=False)
    # InferenceData (PyMC 5) or DataTree (PyMC 6): both write netCDF with h5netcdf.
    idata.to_netcdf(OUTPUT / "eight_schools_trace.nc")

    diagnosis = steindiag.diagnose(idata, model, rng=20240501)
    print(diagnosis)                    # the verdict, its evidence, what to do next
    diagnosis.to_netcdf(OUTPUT / "eight_schools_diagnosis.nc")
    save_figure(plot_diagnosis(diagnosis), "quickstart_diagnosis.png")
    print("saved: examples/output/eight_schools_trace.nc, eight_schools_diagnosis.nc\n")

    res = steindiag.ksd(idata, model)
    print_table(res)

    path = steindiag.ksd_path(idata, model, n_points=40)
    print()
    save_figure(plot_ksd(path), "quickstart.png")   # PlotCollection (1.x) or Figure (0.x)


if __name__ == "__main__":
    main()
