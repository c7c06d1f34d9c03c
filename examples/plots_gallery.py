"""The plots of diagnose, control variates, weights and thinning on eight schools.

Reads the trace and the diagnosis that examples/quickstart.py saved to netCDF (run it
first: `make example`), then

    plot_diagnosis(diagnosis)                         # the verdict per chain, its evidence
    plot_control_variates(control_variates(...))      # plain and control-variate intervals
    plot_weights(trace, stein_weights(...), thinning=stein_thin(..., return_info=True))

and, for a run that is not to be trusted, the diagnosis of the centred eight-schools model
(NUTS with divergences). Works with PyMC 5 / ArviZ 0.x (matplotlib figures) and PyMC 6 /
ArviZ 1.x (arviz-plots PlotCollections).

Run:  python examples/plots_gallery.py
Writes examples/output/plots_diagnosis.png, plots_diagnosis_centred.png,
plots_control_variates.png and plots_weights.png.
"""

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402
import xarray as xr  # noqa: E402

import steindiag  # noqa: E402
from quickstart import EFFECT, OUTPUT, SCHOOLS, STANDARD_ERROR, eight_schools  # noqa: E402

HERE = Path(__file__).resolve().parent


def read_trace(path):
    """The saved trace: a DataTree (ArviZ 1.x) or an InferenceData (ArviZ 0.x)."""
    try:
        import arviz_base  # noqa: F401  (ArviZ 1.x: traces are DataTrees)
    except ImportError:
        import arviz as az

        return az.from_netcdf(path)
    return xr.open_datatree(path).load()


def centred_eight_schools():
    with pm.Model(coords={"school": SCHOOLS}) as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, dims="school")
        pm.Normal("obs", theta, sigma=STANDARD_ERROR, observed=EFFECT, dims="school")
    return model


def save(figure, name):
    figure.savefig(OUTPUT / name, dpi=100)
    print(f"figure: examples/output/{name}")


def main():
    model = eight_schools()
    trace = read_trace(OUTPUT / "eight_schools_trace.nc")
    with xr.open_dataset(OUTPUT / "eight_schools_diagnosis.nc") as saved:
        diagnosis = steindiag.Diagnosis.from_dataset(saved.load())
    print(f"non-centred: {diagnosis['verdict_pooled'].item()}")
    save(steindiag.plot_diagnosis(diagnosis), "plots_diagnosis.png")

    cv = steindiag.control_variates(trace, model, var_names=["mu", "tau", "theta"])
    print(cv[["mean", "mean_cv", "variance_reduction"]].to_dataframe().round(3))
    save(steindiag.plot_control_variates(cv), "plots_control_variates.png")

    with warnings.catch_warnings():
        # The checks of weights and thinning warn on runs they cannot vouch for; this
        # one passed diagnose.
        warnings.simplefilter("ignore", steindiag.CorrectionWarning)
        weights = steindiag.stein_weights(trace, model)
        thinning = steindiag.stein_thin(trace, model, n_selected=40, return_info=True)
    print(f"weights: Kish ESS {weights.attrs['kish_ess']:.0f} of {weights.size}; "
          f"thinning: KSD {thinning.ksd:.3g} with 40 points")
    save(steindiag.plot_weights(trace, weights, thinning=thinning, pair=("mu", "tau")),
         "plots_weights.png")

    centred = centred_eight_schools()
    with centred:
        centred_trace = pm.sample(draws=1000, tune=1000, chains=4, random_seed=1,
                                  progressbar=False)
    centred_diagnosis = steindiag.diagnose(centred_trace, centred, rng=1)
    print(f"centred: {centred_diagnosis['verdict_pooled'].item()}")
    save(steindiag.plot_diagnosis(centred_diagnosis), "plots_diagnosis_centred.png")
    assert np.isfinite(float(centred_diagnosis["ksd_pooled"]))


if __name__ == "__main__":
    main()
