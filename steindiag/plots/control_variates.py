"""plot_control_variates: plain and control-variate intervals side by side per parameter."""

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import xarray as xr

from steindiag._validate import check_probability
from steindiag.control_variates import control_variates
from steindiag.plots._common import (_check_template, _ignore_aes, _map_once, _new_collection,
                                     _new_figure, _no_pc_kwargs, _parameter_label, _plain_kwargs,
                                     _labelled_result, _set_once, _set_yticks, _shown,
                                     _use_arviz_plots, _visual_kwargs)

_VISUALS = ("plain", "cv", "reduction", "zero")
_NEEDED = ("mean", "sd", "mcse_mean", "mean_cv", "mcse_mean_cv", "variance_reduction",
           "cv_applied")
_PLAIN_COLOR, _CV_COLOR = "#777777", "#0072B2"
_OFFSET = 0.17   # the two intervals of a parameter, above and below its row


@dataclass
class _Layout:
    rows: np.ndarray
    labels: list
    plain: np.ndarray        # (row, 3): low, centre, high, in posterior sd from the plain mean
    cv: np.ndarray
    reduction: list          # text per row
    xlabel: str
    title: str


def _is_cv_result(value):
    return isinstance(value, xr.Dataset) and "mean_cv" in value.data_vars


def _layout(result, ci_prob, relabel):
    missing = [name for name in _NEEDED if name not in result.data_vars]
    if missing or "label" not in result.dims:
        raise ValueError("plot_control_variates needs the Dataset of "
                         "steindiag.control_variates (dims (label,)); it lacks "
                         f"{missing or ['the label dim']}.")
    z = NormalDist().inv_cdf(0.5 + ci_prob / 2.0)
    sd = result["sd"].values.astype(np.float64)
    scale = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
    mean = result["mean"].values
    plain_half = z * result["mcse_mean"].values / scale
    cv_centre = (result["mean_cv"].values - mean) / scale
    cv_half = z * result["mcse_mean_cv"].values / scale
    plain = np.stack([-plain_half, np.zeros_like(plain_half), plain_half], axis=1)
    cv = np.stack([cv_centre - cv_half, cv_centre, cv_centre + cv_half], axis=1)
    reduction = [f"\u00d7{vr:.3g} less variance" if applied else "not applied"
                 for vr, applied in zip(result["variance_reduction"].values,
                                        np.asarray(result["cv_applied"].values, dtype=bool))]
    n = result.sizes["label"]
    labels = [_parameter_label(label, relabel) for label in result["label"].values]
    percent = f"{100 * ci_prob:g} %"
    return _Layout(
        rows=np.arange(n, 0, -1, dtype=np.float64), labels=labels, plain=plain, cv=cv,
        reduction=reduction,
        xlabel=f"estimate of the posterior mean, in posterior sd from the plain mean "
               f"({percent} interval: \u00b1{z:.2f} MCSE)",
        title="plain MCMC mean (grey) and control variates (blue)")


def plot_control_variates(result, *, ci_prob=0.95, plot_collection=None, backend=None,
                          labeller=None, aes_by_visuals=None, visuals=None, stats=None,
                          ax=None, figsize=None, show=False, **pc_kwargs):
    """Plain and control-variate intervals of each posterior mean, side by side.

    One row per parameter (or function) of the result: above, the plain MCMC mean with
    its interval mean +- z MCSE (grey); below, the control-variate estimate with its own
    (blue); at the right, the variance reduction (mcse_mean^2 / mcse_mean_cv^2) or "not
    applied" where the control variate did not lower the MCSE (the plain mean is then
    kept). The x axis is in posterior standard deviations from the plain mean, so every
    parameter reads on one scale.

    Parameters
    ----------
    result : xarray.Dataset or draws
        The result of :func:`steindiag.control_variates` (dims (``label``,)). Anything else
        is taken as draws: ``steindiag.control_variates(result, **stats["control_variates"])``.
    ci_prob : float, default 0.95
        Probability of the intervals, z = Phi^-1((1 + ci_prob) / 2) MCSEs either side.
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection instead of a new one.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
    labeller : arviz labeller, optional
        Writes the parameter labels (``make_label_flat``); e.g.
        ``arviz_base.labels.MapLabeller(var_name_map={"theta": "θ"})``. Draws are
        summarised with it (``control_variates(..., labeller=labeller)``); a result's flat
        labels are read back into a variable name and coordinate values.
    aes_by_visuals : dict, optional
        Visual -> list of aesthetics of the PlotCollection it uses (keys as ``visuals``;
        by default none).
    visuals : dict, optional
        ``False`` hides a visual, a dict passes keyword arguments to it. Keys: ``"plain"``
        and ``"cv"`` (interval lines and their points), ``"reduction"`` (the text),
        ``"zero"`` (the vertical line at the plain mean); the title says which colour is
        which.
    stats : dict, optional
        ``{"control_variates": result}`` or ``{"control_variates": {"model": model}}``
        (keyword arguments of :func:`steindiag.control_variates` for draws).
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes (ArviZ 0.x convention).
    figsize : (float, float), optional
        Figure size in inches when a new figure is created (default grows with rows).
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap`.

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        A PlotCollection when arviz-plots is installed and ``ax`` is None; otherwise the
        matplotlib Figure (lines with gids ``"plain[k]"``, ``"cv[k]"`` for row k).

    Notes
    -----
    Control variates lower the variance of a mean, not its bias: where the draws do not
    fit the target (``diagnose``) both intervals can miss the posterior mean together.
    The intervals are Monte Carlo error bars of the estimate of the mean, not credible
    intervals of the parameter.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 500, 2))
    >>> cv = steindiag.control_variates(x, score=-x)
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_control_variates(cv, ax=ax)
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['x[0]', 'x[1]']
    >>> plt.close(fig)
    """
    ci_prob = check_probability(ci_prob, "ci_prob")
    visuals, aes_by_visuals, stats, show = _check_template(
        _VISUALS, ("control_variates",), visuals, aes_by_visuals, stats, ax, backend, show,
        plot_collection)
    result, relabel = _labelled_result(result, stats, "control_variates", _is_cv_result,
                                       control_variates, labeller)
    if not isinstance(result, xr.Dataset):
        raise TypeError("result must be the Dataset of steindiag.control_variates; got "
                        f"{type(result).__name__}.")
    layout = _layout(result, ci_prob, relabel)
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_collection(result, layout, plot_collection, backend, aes_by_visuals,
                                visuals, figsize, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_matplotlib(layout, visuals, ax, figsize, show)


def _default_size(layout):
    return (8.0, 1.6 + 0.45 * len(layout.rows))


def _x_limits(layout):
    ends = np.concatenate([layout.plain[:, [0, 2]].ravel(), layout.cv[:, [0, 2]].ravel()])
    ends = ends[np.isfinite(ends)]
    width = max(np.max(np.abs(ends)) if ends.size else 1.0, 1e-12)
    return -1.15 * width, 1.9 * width     # room on the right for the text


def _plot_matplotlib(layout, visuals, ax, figsize, show):
    fig, ax, _ = _new_figure(ax, figsize, _default_size(layout))
    styles = (("plain", _PLAIN_COLOR, layout.plain, _OFFSET),
              ("cv", _CV_COLOR, layout.cv, -_OFFSET))
    for name, color, values, offset in styles:
        kw = _visual_kwargs(visuals, name, {"color": color, "linewidth": 2.0,
                                            "marker": "o", "markersize": 5,
                                            "markevery": [1]})
        if kw is None:
            continue
        for k, row in enumerate(layout.rows):
            line, = ax.plot(values[k], [row + offset] * 3, **kw)
            line.set_gid(f"{name}[{k}]")
    kw_text = _visual_kwargs(visuals, "reduction", {"fontsize": "small", "va": "center",
                                                    "ha": "left", "color": _CV_COLOR})
    low, high = _x_limits(layout)
    if kw_text is not None:
        for k, row in enumerate(layout.rows):
            ax.text(high * 0.55, row - _OFFSET, layout.reduction[k], gid=f"reduction[{k}]",
                    **kw_text)
    kw_zero = _visual_kwargs(visuals, "zero", {"color": "0.8", "linewidth": 0.8, "zorder": 0})
    if kw_zero is not None:
        ax.axvline(0.0, gid="zero", **kw_zero)
    ax.set_xlim(low, high)
    ax.set_yticks(layout.rows, layout.labels)
    ax.set_ylim(0.4, layout.rows[0] + 0.6)
    ax.set_xlabel(layout.xlabel, fontsize="small")
    ax.set_title(layout.title, fontsize="medium")
    return _shown(fig, show)


def _plot_collection(result, layout, pc, backend, aes_by_visuals, visuals, figsize, show,
                     pc_kwargs):
    from arviz_plots.visuals import (annotate_xy, labelled_title, labelled_x, line_xy,
                                     scatter_xy, set_xlim, set_ylim, vline)

    annotate_xy, scatter_xy = _plain_kwargs(annotate_xy), _plain_kwargs(scatter_xy)
    label = result["label"]
    pc = _new_collection(pc, xr.Dataset({"cv": result["mean_cv"]}), backend=backend,
                         figsize=figsize or _default_size(layout), pc_kwargs=pc_kwargs,
                         aes={"overlay": ["label"]})
    rows = xr.DataArray(layout.rows, dims=["label"], coords={"label": label})
    styles = (("plain", _PLAIN_COLOR, layout.plain, _OFFSET),
              ("cv", _CV_COLOR, layout.cv, -_OFFSET))
    for name, color, values, offset in styles:
        kw = _visual_kwargs(visuals, name, {"width": 2.0})
        if kw is None:
            continue
        ignore = _ignore_aes(pc, aes_by_visuals, name, default={"overlay"})
        if "color" not in aes_by_visuals.get(name, ()):
            kw.setdefault("color", color)
        ends = xr.DataArray(np.stack([values[:, [0, 2]],
                                      np.repeat((layout.rows + offset)[:, None], 2, axis=1)]),
                            dims=["plot_axis", "label", "end"],
                            coords={"plot_axis": ["x", "y"], "label": label}, name="cv")
        pc.map(line_xy, name, data=ends, ignore_aes=ignore, **kw)
        pc.map(scatter_xy, f"{name}_point",
               data=xr.DataArray(values[:, 1], dims=["label"], coords={"label": label},
                                 name="cv"),
               y=rows + offset, ignore_aes=ignore, **{"size": 25, **kw, "width": 0})
    anchor = xr.DataArray(0.0, name="cv")
    low, high = _x_limits(layout)
    kw = _visual_kwargs(visuals, "reduction", {"color": _CV_COLOR, "size": 9,
                                               "horizontal_align": "left",
                                               "vertical_align": "center"})
    if kw is not None:
        texts = xr.DataArray(np.asarray(layout.reduction, dtype=object), dims=["label"],
                             coords={"label": label}, name="cv")
        pc.map(annotate_xy, "reduction", data=texts, text=lambda value: str(value),
               x=high * 0.55, y=rows - _OFFSET,
               ignore_aes=_ignore_aes(pc, aes_by_visuals, "reduction", default={"overlay"}),
               **kw)
    kw = _visual_kwargs(visuals, "zero", {"color": "B3", "width": 0.8})
    if kw is not None:
        _map_once(pc, vline, "zero", anchor, **kw)
    _set_once(pc, set_xlim, "xlim", anchor, limits=(low, high))
    _set_once(pc, set_ylim, "ylim", anchor, limits=(0.4, layout.rows[0] + 0.6))
    _set_once(pc, _set_yticks, "yticks", anchor, values=list(layout.rows), labels=layout.labels)
    _map_once(pc, labelled_x, "xlabel", anchor, text=layout.xlabel, color="B1", size=9)
    _map_once(pc, labelled_title, "title", anchor, text=layout.title, color="B1")
    return _shown(pc, show)
