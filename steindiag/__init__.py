"""steindiag: kernel Stein discrepancy diagnostics for MCMC output."""

from steindiag._ksd import ksd, ksd_path
from steindiag.gof import ksd_test
from steindiag._mmd import mmd
from steindiag._diagnose import Diagnosis, diagnose
from steindiag.estimation import MinKSDFit, min_ksd_fit
from steindiag.scores import add_scores
from steindiag.control_variates import control_variates
from steindiag.plots import plot_ksd, plot_ksd_chains, plot_mmd, plot_stein_kernel
from steindiag.thinning import SteinThinning, stein_thin
from steindiag.variational import SteinVariational, stein_variational
from steindiag.weights import SteinWeightsError, stein_weights, weighted_summary
from steindiag._types import CorrectionWarning
from steindiag._version import __version__

import steindiag.accessors  # noqa: F401, E402  (registers DataTree.stein; xarray only)
from steindiag import kernels  # noqa: E402  (base kernels: IMQ, Gaussian, Matern32, Matern52)

__all__ = [
    "diagnose",
    "Diagnosis",
    "ksd",
    "ksd_path",
    "add_scores",
    "ksd_test",
    "mmd",
    "plot_ksd",
    "plot_ksd_chains",
    "plot_stein_kernel",
    "plot_mmd",
    "stein_weights",
    "weighted_summary",
    "control_variates",
    "stein_thin",
    "SteinThinning",
    "SteinWeightsError",
    "CorrectionWarning",
    "stein_variational",
    "SteinVariational",
    "min_ksd_fit",
    "MinKSDFit",
    "kernels",
    "__version__",
]
