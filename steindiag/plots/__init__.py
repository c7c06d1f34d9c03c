"""Plots of steindiag's results: the verdict of ``diagnose``, running KSD curves, a
per-chain comparison, control variates, weights and thinning, MMD between chains, the
Stein kernel.

Plotting libraries are imported inside the functions, never at ``import steindiag``.

Two looks, one set of numbers:

- ArviZ 1.x users (``arviz_plots`` installed) get an ``arviz_plots.PlotCollection``
  from every plot, drawn with the arviz-plots visuals and theme, following arviz-plots'
  template: ``plot_collection=`` (draw into a PlotCollection of one's own), ``backend=``
  (matplotlib, bokeh, plotly or none), ``labeller=``, ``aes_by_visuals=``, ``visuals=``,
  ``stats=`` (the result to draw, or the keyword arguments of the public function that
  computes it from draws) and ``**pc_kwargs``.
- Everyone else, and anyone who passes ``ax=``, gets a matplotlib figure drawn with
  plain matplotlib (the ArviZ 0.x ``ax=`` / ``show=`` conventions).

Neither path calls ``show`` unless ``show=True``.

One module per plot:

- ``running_ksd``: :func:`plot_ksd`, the running KSD against the number of draws;
- ``chains``: :func:`plot_ksd_chains`, each chain's final KSD against its i.i.d. floor;
- ``stein_kernel``: :func:`plot_stein_kernel`, the four terms of the 1-D Stein kernel;
- ``mmd``: :func:`plot_mmd`, a heat map of the MMD^2 between every pair of chains;
- ``diagnosis``: :func:`plot_diagnosis`, the verdict of ``diagnose`` per chain with its
  evidence (KSD against its floor, p-values against the level);
- ``control_variates``: :func:`plot_control_variates`, plain and control-variate intervals
  of each posterior mean side by side;
- ``weights``: :func:`plot_weights`, the draws on a pair of parameters with their
  KSD-optimal weights or the points Stein thinning kept;
- ``_diagnosis_layout``: what ``plot_diagnosis`` draws, as plain arrays;
- ``_common``: the checks and helpers the plots share (validation, figures, log ticks,
  arviz-plots' template arguments).
"""

from steindiag.plots.chains import plot_ksd_chains
from steindiag.plots.control_variates import plot_control_variates
from steindiag.plots.diagnosis import plot_diagnosis
from steindiag.plots.mmd import plot_mmd
from steindiag.plots.running_ksd import plot_ksd
from steindiag.plots.stein_kernel import plot_stein_kernel
from steindiag.plots.weights import plot_weights

__all__ = ["plot_ksd", "plot_ksd_chains", "plot_stein_kernel", "plot_mmd", "plot_diagnosis",
           "plot_control_variates", "plot_weights"]
