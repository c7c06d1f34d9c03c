"""Labelled result of ``control_variates``: a Dataset along ``label``."""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs

__all__ = ["cv_dataset", "NOT_FITTING_MESSAGE"]

NOT_FITTING_MESSAGE = (
    "control_variates: the diagnosis says the draws do not fit the target "
    "(verdict_pooled = 'does not fit'); control variates reduce variance but do not "
    "remove bias, so no improvement is claimed and the plain estimates are reported.")


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
                                     "plain mean: the control variate did not lower the MCSE)"}),
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
