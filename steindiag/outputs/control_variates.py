"""Labelled result of ``control_variates``: a Dataset along ``label``."""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag.methods.cv_checks import PREMISE_LEVEL

__all__ = ["cv_dataset", "NOT_FITTING_MESSAGE", "premise_message"]

NOT_FITTING_MESSAGE = (
    "control_variates: the diagnosis says the draws do not fit the target "
    "(verdict_pooled = 'does not fit'); control variates reduce variance but do not "
    "remove bias, so no improvement is claimed and the plain estimates are reported.")


def premise_message(result, limit=6):
    """The warning for failed premise checks, naming the failed tests (worst first), or
    None when they passed."""
    failed = result.check.failed
    if not failed:
        return None
    named = "; ".join(f"{label}: z = {z:.3g} (threshold {bound:.3g})"
                      for label, z, bound in failed[:limit])
    more = f"; and {len(failed) - limit} more" if len(failed) > limit else ""
    return (
        "control_variates: the draws and the score do not belong together, so the control "
        "variates would return the score's answer with a falsely small error bar. Failed "
        f"(Bonferroni over {result.check.n_tests} tests at family-wise level "
        f"{PREMISE_LEVEL}): {named}{more}. 's', '1 + y s', "
        "'2 y + y^2 s' test the Stein identity on the draws (a score with a wrong "
        "constant, scale or shape, a missing log-Jacobian, or biased draws); 'shift of "
        "ROW' tests that the fitted control variate has mean zero on held-out folds. The "
        "plain estimates are reported for every row (cv_status 'premise failed'). Check "
        "the score and the draws (steindiag.diagnose).")


def cv_dataset(result, labels, prepared, verdict):
    """The Dataset of :func:`steindiag.control_variates` from ``methods.cv_estimate``'s
    estimate (``verdict``: the diagnosis' pooled verdict, or None)."""
    n_chain, n_draw, d = prepared.draws.shape
    data_vars = {
        "mean": ("label", result.mean, {"long_name": "posterior mean, plain MCMC average"}),
        "sd": ("label", result.sd, {"long_name": "posterior sd, plain (ddof = 1)"}),
        "mcse_mean": ("label", result.mcse_mean,
                      {"long_name": "MCSE of the plain mean, as arviz.mcse(method='mean')"}),
        "mean_cv": ("label", result.mean_cv, {"long_name": "posterior mean, control variates"}),
        "sd_cv": ("label", result.sd_cv, {"long_name": "posterior sd, control variates"}),
        "mcse_mean_cv": ("label", result.mcse_mean_cv,
                         {"long_name": "MCSE of mean_cv: arviz's mcse_mean of the "
                                       "cross-fitted adjusted values"}),
        "variance_reduction": ("label", result.variance_reduction,
                               {"long_name": "mcse_mean^2 / mcse_mean_cv^2"}),
        "cv_applied": ("label", result.cv_applied,
                       {"long_name": "whether mean_cv uses the control variate (else the "
                                     "plain mean: see cv_status)"}),
        "cv_status": ("label", np.asarray(result.cv_status, dtype=str),
                      {"long_name": "why the control variate is used or not: 'applied', "
                                    "'no gain' (its MCSE is not lower), 'premise failed' (the "
                                    "draws and the score do not belong together), "
                                    "'diagnosis: does not fit'"}),
        "shift_z": ("label", result.shift_z,
                    {"long_name": "fitted shift (mean_cv - mean) over the MCSE of the "
                                  "cross-fitted control variate: a premise check, NaN where "
                                  "not tested (the control variate gave no gain)"}),
        "shift_in_mcse": ("label", result.shift_in_mcse,
                          {"long_name": "fitted shift (mean_cv - mean) over the plain "
                                        "mcse_mean"}),
    }
    attrs = {
        **result.attrs,
        "n_chain": n_chain,
        "n_draw": n_draw,
        "n_parameter": d,
        "parameters": list(prepared.parameter),
        **{key: value for key, value in prepared.attrs.items()
           if isinstance(value, (str, int, float))},
    }
    if verdict is not None:
        attrs["diagnosis_verdict"] = verdict
    return xr.Dataset(data_vars, coords={"label": ("label", np.asarray(labels, dtype=object))},
                      attrs=netcdf_attrs(attrs))
