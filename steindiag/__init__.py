"""steindiag: kernel Stein discrepancy diagnostics for MCMC output.

The modules, by layer (a layer imports only the layers below it; ``.importlinter``, and the
docs' Architecture page):

Plots and accessors:

- ``accessors``: the ``stein`` accessor on ``xarray.DataTree`` and ArviZ's ``InferenceData``;
- ``plots``: one module per plot (``plot_ksd``, ``plot_ksd_chains``, ``plot_mmd``, ...).

User functions (validate -> read once -> methods -> outputs; none imports another):

- ``_diagnose``: ``diagnose``, a verdict per chain and pooled, with its evidence;
- ``_ksd``: ``ksd`` and ``ksd_path``, KSD values and running curves;
- ``gof``: ``ksd_test``, the KSD goodness-of-fit test;
- ``_mmd``: ``mmd``, MMD between chains or two samples, with permutation p-values;
- ``weights``: ``stein_weights`` and ``weighted_summary``;
- ``thinning``: ``stein_thin``, Stein thinning;
- ``variational``: ``stein_variational``, SVGD on existing draws;
- ``control_variates``: ``control_variates``, posterior means with Stein control variates;
- ``scores``: ``add_scores``, a model's scores computed once and stored in the trace;
- ``estimation``: ``min_ksd_fit``, minimum-KSD estimation.

Input and output (neither imports the other):

- ``inputs``: any container + score source, read once into a ``PendingInput``;
- ``outputs``: labelled results, the result classes, results written back into traces.

Array level and the maths (NumPy and Numba; no xarray):

- ``methods``: the methods on prepared (chain, draw, d) arrays;
- ``kernels``: base kernels, the preconditioner, the Langevin Stein kernel (Numba);
- ``stats``: NumPy statistics on the engine's sums, and ``diagnose``'s decision rules;
- ``engine``: the compiled Stein-kernel passes, on this machine's threads or a cluster.

Shared bottom (none imports another):

- ``_validate``: the shared argument checkers, called once, up front;
- ``_types``: plain containers passed between layers (``PendingInput``, ``SteinInput``);
- ``_containers``: reading and writing xarray / ArviZ containers (groups, sample dims);
- ``_attrs``: result attributes every netCDF and Zarr writer can store;
- ``_docs``: shared numpydoc parameter entries and ``fill_doc``;
- ``_version``: the version string;
- ``_words``: counts and lists in words for messages and reports.
"""

from steindiag._ksd import ksd, ksd_path
from steindiag.gof import ksd_test
from steindiag._mmd import mmd
from steindiag._diagnose import Diagnosis, diagnose
from steindiag.estimation import MinKSDFit, min_ksd_fit
from steindiag.scores import add_scores
from steindiag.control_variates import control_variates
from steindiag.plots import (plot_control_variates, plot_diagnosis, plot_ksd, plot_ksd_chains,
                             plot_mmd, plot_stein_kernel, plot_weights)
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
    "plot_diagnosis",
    "plot_control_variates",
    "plot_weights",
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
