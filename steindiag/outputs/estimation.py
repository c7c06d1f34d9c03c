"""Labelled result of ``min_ksd_fit``: :class:`MinKSDFit`."""

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

__all__ = ["MinKSDFit", "fit_result"]


@dataclass(kw_only=True, repr=False)
class MinKSDFit:
    """Result of :func:`min_ksd_fit`.

    Attributes
    ----------
    estimate : xarray.DataArray (parameter)
        theta minimising KSD^2_U.
    standard_error : xarray.DataArray (parameter)
        Approximate standard errors: square roots of the diagonal of ``covariance``.
    covariance : xarray.DataArray (parameter, parameter_bis)
        Asymptotic (sandwich) covariance of the estimate, H^-1 (4 Sigma / n) H^-1
        (see Notes of :func:`min_ksd_fit`).
    ksd2_u : float
        KSD^2_U at the estimate (unbiased; may be negative).
    ksd : float
        sqrt of the V-statistic at the estimate, as :func:`steindiag.ksd` reports it.
    converged : bool
        True for the closed form; the optimiser's success flag otherwise.
    n_iterations : int
        Optimiser iterations (0 for the closed form).
    message : str
        ``"closed form"`` or the optimiser's message.
    attrs : dict
        Kernel, preconditioner, method, sizes.
    """

    estimate: xr.DataArray
    standard_error: xr.DataArray
    covariance: xr.DataArray
    ksd2_u: float
    ksd: float
    converged: bool
    n_iterations: int
    message: str
    attrs: dict = field(default_factory=dict)

    def __repr__(self):
        status = "converged" if self.converged else "NOT converged"
        lines = [f"MinKSDFit ({self.message}, {status}, {self.n_iterations} iterations): "
                 f"KSD {self.ksd:.4g}, KSD^2_U {self.ksd2_u:.4g}"]
        names = [str(name) for name in self.estimate.coords[self.estimate.dims[0]].values] \
            if self.estimate.dims and self.estimate.dims[0] in self.estimate.coords \
            else [str(i) for i in range(self.estimate.size)]
        width = max([len(name) for name in names] + [9])
        lines.append(f"  {'parameter':<{width}}  {'estimate':>12}  {'std. error':>12}")
        shown = 10
        for name, value, error in list(zip(names, np.ravel(self.estimate.values),
                                           np.ravel(self.standard_error.values)))[:shown]:
            lines.append(f"  {name:<{width}}  {value:>12.6g}  {error:>12.4g}")
        if len(names) > shown:
            lines.append(f"  ... {len(names) - shown} more (see .estimate)")
        return "\n".join(lines)


def fit_result(fit, names, attrs):
    """:class:`MinKSDFit` of ``methods.estimation.fit_theta``'s fit, parameters ``names``."""
    coords = {"parameter": names}
    estimate = xr.DataArray(fit.theta, dims=("parameter",), coords=coords, name="estimate")
    standard_error = xr.DataArray(
        np.sqrt(np.maximum(np.diag(fit.covariance), 0.0)), dims=("parameter",), coords=coords,
        name="standard_error",
        attrs={"long_name": "asymptotic standard error (Hoeffding projection, sandwich)"})
    covariance = xr.DataArray(
        fit.covariance, dims=("parameter", "parameter_bis"),
        coords={"parameter": names, "parameter_bis": names}, name="covariance")
    return MinKSDFit(estimate=estimate, standard_error=standard_error, covariance=covariance,
                     ksd2_u=float(fit.ksd2_u), ksd=float(fit.ksd), converged=fit.converged,
                     n_iterations=fit.n_iterations, message=fit.message, attrs=attrs)
