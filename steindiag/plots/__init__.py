"""Plots of KSD results: running curves, a per-chain comparison, the Stein kernel.

Plotting libraries are imported inside the functions, never at ``import steindiag``.

Two looks, one set of numbers:

- ArviZ 1.x users (``arviz_plots`` installed) get an ``arviz_plots.PlotCollection``
  from :func:`plot_ksd` and :func:`plot_ksd_chains`, drawn with the arviz-plots
  visuals and theme (``backend=`` picks matplotlib, bokeh or plotly there).
- Everyone else, and anyone who passes ``ax=``, gets a matplotlib figure drawn with
  plain matplotlib (the ArviZ 0.x ``ax=`` / ``show=`` conventions).

Neither path calls ``show`` unless ``show=True``.

One module per plot: ``running_ksd`` (:func:`plot_ksd`),
``chains`` (:func:`plot_ksd_chains`),
``stein_kernel`` (:func:`plot_stein_kernel`) and
``mmd`` (:func:`plot_mmd`); shared checks live in ``_common``.
"""

from steindiag.plots.chains import plot_ksd_chains
from steindiag.plots.mmd import plot_mmd
from steindiag.plots.running_ksd import plot_ksd
from steindiag.plots.stein_kernel import plot_stein_kernel

__all__ = ["plot_ksd", "plot_ksd_chains", "plot_stein_kernel", "plot_mmd"]
