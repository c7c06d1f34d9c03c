"""plot_diagnosis: the verdict of ``diagnose`` per chain, with its evidence."""

import numpy as np
import xarray as xr

from steindiag._diagnose import diagnose
from steindiag.plots._diagnosis_layout import (_ATTRIBUTION_TITLE, _KSD_TITLE, _attribution_sizes,
                                               _check_diagnosis, _is_diagnosis, _layout, _p_limits,
                                               _pvalue_title, _x_limits)
from steindiag.plots._common import (_check_template, _draw_ksd_rows, _ignore_aes, _map_once,
                                     _new_collection, _new_panels, _no_pc_kwargs, _plain_kwargs,
                                     _ratio_text, _readable_log_ticks, _labelled_result,
                                     _set_once, _set_yticks, _shown, _suptitle, _use_arviz_plots,
                                     _verdict_color, _visual_kwargs)

_VISUALS = ("ksd", "ksd_iid", "segment", "pvalue", "level", "attribution", "ratio", "title", "legend")
def plot_diagnosis(diagnosis, *, plot_collection=None, backend=None, labeller=None,
                   aes_by_visuals=None, visuals=None, stats=None, ax=None, figsize=None,
                   show=False, **pc_kwargs):
    """The verdict of :func:`steindiag.diagnose` per chain, with the evidence behind it.

    Two panels, one row per chain and one for all chains pooled, each row coloured by
    its verdict (green "fits", vermilion "does not fit", orange "inconclusive"); the
    figure's title is the pooled verdict and its reason:

    * left: each chain's KSD (dot) against its i.i.d. floor (bar), with the ratio;
    * right: each KSD test's p-value (dot; hollow when the result says it cannot be
      trusted) against the level of each test (dashed line), then the p-value of the MMD
      test that the chains agree and of the search for unvisited mass when they were run
      (vermilion when they reject, grey otherwise);
    * a third panel, where the evidence points: a dot per chain and parameter, its area
      proportional to the largest of diagnose's standardised differences there (the
      chain's mean against the other chains', ``chain_shift``; its Stein moments,
      ``score_location_z`` and ``score_spread_z``), or to the variable ``attribution``
      (dims ``chain``, ``parameter``) when the result holds one.

    Parameters
    ----------
    diagnosis : Diagnosis, xarray.Dataset or draws
        The result of :func:`steindiag.diagnose` (or a saved one reopened). Anything else
        is taken as draws and diagnosed with ``steindiag.diagnose(diagnosis,
        **stats["diagnose"])``.
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection (e.g. one made by an earlier call) instead of a new
        one. It must have one plot per variable of the layout (``ksd``, ``pvalue`` and,
        with attribution, ``attribution``).
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots). Default: its ``rcParams["plot.backend"]``.
    labeller : arviz labeller, optional
        Writes the chain labels (``sel_to_str``) and the attribution's parameter labels
        (``make_label_flat``), e.g. ``arviz_base.labels.DimCoordLabeller()``. Draws are
        diagnosed with it (``diagnose(..., labeller=labeller)``: each parameter labelled
        from its variable and coordinates); a result's flat labels are read back into a
        variable name and coordinate values (dims named ``<var>_dim_<k>``).
    aes_by_visuals : dict, optional
        Visual -> list of aesthetics of the PlotCollection it uses (keys as ``visuals``).
        By default none: a new PlotCollection maps ``overlay`` to ``chain`` (one artist
        per chain) and every visual takes the verdict's colour.
    visuals : dict, optional
        ``False`` hides a visual, a dict passes keyword arguments to it. Keys: ``"ksd"``
        (the KSD dots), ``"ksd_iid"`` (the floor bars), ``"segment"`` (the line from floor
        to KSD), ``"ratio"`` (the text KSD /
        floor), ``"pvalue"`` (the p-value dots), ``"level"`` (the dashed line),
        ``"attribution"``, ``"title"`` (the figure's title) and ``"legend"`` (matplotlib
        path only: which colour is which verdict).
    stats : dict, optional
        ``{"diagnose": result}`` (the result, instead of the first argument) or
        ``{"diagnose": {"model": model, "rng": 0, ...}}``: the keyword arguments of
        :func:`steindiag.diagnose` when the first argument is draws.
    ax : matplotlib.axes.Axes or array of them, optional
        Draw with plain matplotlib into these axes (two, or three with attribution), even
        when arviz-plots is installed (ArviZ 0.x convention).
    figsize : (float, float), optional
        Figure size in inches when a new figure is created.
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap` (e.g. ``figure_kwargs``).

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        A PlotCollection (``viz`` holds the artists under the ``visuals`` keys) when
        arviz-plots is installed and ``ax`` is None; otherwise the matplotlib Figure
        (artists carry gids such as ``"ksd[0]"``, ``"pvalue_pooled"``, ``"level"``).

    Notes
    -----
    The verdict is the tests', not the ratio's: KSD / floor describes how far the draws
    are from an exact sample of the same size (the floor is computed at the draws, so
    draws far from the target raise their own floor), while each p-value is compared
    with the level of each test, alpha / (number of tests) (Bonferroni; see
    ``print(diagnosis)`` and the Background page of the docs). A p-value left of the
    dashed line is a rejection: the chain or test it belongs to is the one the verdict
    names. A hollow dot is a p-value the result marks as unreliable (too few blocks of
    nearly independent draws), which decides nothing.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((4, 500, 2))
    >>> x[3] += 1.0                                   # one chain off target
    >>> res = steindiag.diagnose(x, score=-x, rng=0)
    >>> fig, axes = plt.subplots(1, 3)                # KSD, p-values, where it points
    >>> fig = steindiag.plot_diagnosis(res, ax=axes)
    >>> [t.get_text() for t in axes[0].get_yticklabels()][-2:]
    ['chain 3: does not fit', 'pooled: does not fit']
    >>> plt.close(fig)
    """
    visuals, aes_by_visuals, stats, show = _check_template(
        _VISUALS, ("diagnose",), visuals, aes_by_visuals, stats, ax, backend, show,
        plot_collection)
    result, relabel = _labelled_result(diagnosis, stats, "diagnose", _is_diagnosis, diagnose,
                                       labeller)
    if not isinstance(result, xr.Dataset):
        raise TypeError("diagnosis must be the result of steindiag.diagnose (a Dataset); got "
                        f"{type(result).__name__}.")
    _check_diagnosis(result)
    layout = _layout(result, labeller, relabel)
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_collection(result, layout, plot_collection, backend, aes_by_visuals,
                                visuals, figsize, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_matplotlib(layout, visuals, ax, figsize, show)


def _default_size(layout):
    n_panel = 2 if layout.attribution is None else 3
    return (5.0 * n_panel, 1.8 + 0.42 * (len(layout.test_rows) + 1))


def _plot_matplotlib(layout, visuals, ax, figsize, show):
    from matplotlib.lines import Line2D

    n_panel = 2 if layout.attribution is None else 3
    fig, axes = _new_panels(ax, n_panel, figsize or _default_size(layout))
    gids = [f"[{i}]" for i in range(len(layout.rows) - 1)] + ["_pooled"]
    ax_ksd, ax_p = axes[0], axes[1]

    _draw_ksd_rows(ax_ksd, layout.rows, layout.ksd, layout.floor, layout.colors, gids, visuals,
                   segment={"color": "0.7", "linewidth": 1.2, "zorder": 1},
                   ratio={"fontsize": "small", "va": "center"})
    ax_ksd.set_xlim(*_x_limits(np.append(layout.ksd, layout.floor)))
    _readable_log_ticks(ax_ksd.xaxis)
    ax_ksd.set_yticks(layout.rows, layout.labels)
    ax_ksd.set_ylim(-0.8, layout.rows[0] + 0.8)
    ax_ksd.axhline(layout.rows[-2] / 2 if len(layout.rows) > 1 else 0.5, color="0.85",
                   linewidth=0.8, zorder=0)
    ax_ksd.set_title(_KSD_TITLE, fontsize="medium")
    ax_ksd.set_xlabel("KSD")

    kw_p = _visual_kwargs(visuals, "pvalue", {"marker": "o", "s": 60, "zorder": 3})
    n_rows = len(layout.rows)
    test_gids = gids + [f"_test{k}" for k in range(len(layout.test_rows) - n_rows)]
    if kw_p is not None:
        for i, row in enumerate(layout.test_rows):
            color = layout.test_colors[i]
            face = color if layout.reliable[i] else "none"
            ax_p.scatter([max(layout.pvalue[i], 1e-6)], [row], **{
                "facecolors": face, "edgecolors": color, "linewidths": 1.5, **kw_p},
                gid=f"pvalue{test_gids[i]}")
    kw_level = _visual_kwargs(visuals, "level", {"color": "0.3", "linestyle": "--",
                                                 "linewidth": 1.0})
    if kw_level is not None:
        ax_p.axvline(layout.level, gid="level", **kw_level)
    ax_p.set_xscale("log")
    ax_p.set_xlim(*_p_limits(layout))
    ax_p.set_yticks(layout.test_rows, layout.test_labels)
    ax_p.set_ylim(layout.test_rows[-1] - 0.8, layout.test_rows[0] + 0.8)
    ax_p.axhline(layout.rows[-2] / 2 if n_rows > 1 else 0.5, color="0.85", linewidth=0.8,
                 zorder=0)
    ax_p.set_title(_pvalue_title(layout.level), fontsize="medium")
    ax_p.set_xlabel("p-value (hollow: not reliable)")

    kw_attr = _visual_kwargs(visuals, "attribution", {"color": "#D55E00", "alpha": 0.8})
    if layout.attribution is not None:
        ax_a = axes[2]
        columns = np.arange(len(layout.parameters), dtype=np.float64)
        if kw_attr is not None:
            for i, row in enumerate(layout.rows[:-1]):
                ax_a.scatter(columns, np.full(columns.size, row),
                             s=_attribution_sizes(layout.attribution[i], 400.0),
                             gid=f"attribution[{i}]", **kw_attr)
        ax_a.set_xticks(columns, layout.parameters, rotation=60, ha="right")
        ax_a.set_yticks(layout.rows[:-1], layout.labels[:-1])
        ax_a.set_xlim(-0.7, columns.size - 0.3)
        ax_a.set_ylim(0.2, layout.rows[0] + 0.8)
        ax_a.set_title(_ATTRIBUTION_TITLE, fontsize="medium")

    kw_title = _visual_kwargs(visuals, "title", {"fontsize": "medium"})
    if kw_title is not None:
        fig.suptitle(layout.title, **kw_title)
    kw_legend = _visual_kwargs(visuals, "legend", {"fontsize": "small", "frameon": False,
                                                   "loc": "lower right"})
    if kw_legend is not None:
        present = sorted(set(layout.colors), key=layout.colors.index)
        names = {_verdict_color(v): v for v in ("fits", "does not fit", "inconclusive")}
        handles = [Line2D([], [], marker="o", linestyle="none", color=c,
                          label=names.get(c, "other")) for c in present]
        ax_ksd.legend(handles=handles, **kw_legend)
    return _shown(fig, show)


def _plot_collection(result, layout, pc, backend, aes_by_visuals, visuals, figsize, show,
                     pc_kwargs):
    from arviz_plots.visuals import (annotate_xy, hline, labelled_title, labelled_x, line_xy,
                                     scatter_xy, set_xlim, set_xscale, set_xticks, set_ylim,
                                     vline)

    scatter_xy, annotate_xy = _plain_kwargs(scatter_xy), _plain_kwargs(annotate_xy)

    chain = result["chain"]
    n_chain = chain.size
    has_attr = layout.attribution is not None
    panels = {"ksd": result["ksd"], "pvalue": result["pvalue"]}
    if has_attr:
        panels["attribution"] = result["ksd"].rename("attribution")   # one per chain
    pc = _new_collection(pc, xr.Dataset(panels), backend=backend,
                         figsize=figsize or _default_size(layout), pc_kwargs=pc_kwargs,
                         cols=["__variable__"], aes={"overlay": ["chain"]})

    def by_chain(values, name):
        return xr.DataArray(np.asarray(values)[:n_chain], dims=["chain"],
                            coords={"chain": chain}, name=name)

    rows = by_chain(layout.rows, "rows")
    colors = by_chain(np.asarray(layout.colors, dtype=object), "colors")
    pooled = len(layout.rows) - 1

    def draw(visual, fun, data, defaults, pooled_data=None, pooled_kwargs=None, **kwargs):
        kw = _visual_kwargs(visuals, visual, defaults)
        if kw is None:
            return
        ignore = _ignore_aes(pc, aes_by_visuals, visual, default=pc.aes_set)
        used = set(aes_by_visuals.get(visual, pc.aes_set))
        chain_kwargs = dict(kwargs)
        if "color" not in used:
            chain_kwargs.setdefault("color", colors)
        pc.map(fun, visual, data=data, ignore_aes=ignore, **{**chain_kwargs, **kw})
        if pooled_data is not None:
            _map_once(pc, fun, f"{visual}_pooled", pooled_data, **{**(pooled_kwargs or {}), **kw})

    # KSD panel
    kw = _visual_kwargs(visuals, "segment", {"color": "B3", "width": 1.2})
    if kw is not None:
        ends = np.stack([layout.floor, layout.ksd], axis=-1)
        ys = np.stack([layout.rows, layout.rows], axis=-1)
        segments = xr.DataArray(np.stack([ends, ys]), dims=["plot_axis", "row", "end"],
                                coords={"plot_axis": ["x", "y"]}, name="ksd")
        for k in range(len(layout.rows)):
            _map_once(pc, line_xy, f"segment_{k}", segments.isel(row=k), **kw)
    separator = float(layout.rows[-2] / 2 if len(layout.rows) > 1 else 0.5)
    for panel in ("ksd", "pvalue"):
        _map_once(pc, hline, f"separator_{panel}", xr.DataArray(separator, name=panel),
                  color="B3", width=0.8)
    draw("ksd_iid", scatter_xy, result["ksd_iid"].rename("ksd"),
         {"marker": "|", "size": 160, "width": 2}, y=rows,
         pooled_data=result["ksd_iid_pooled"].rename("ksd"),
         pooled_kwargs={"y": 0.0, "color": "B1"}, **{"color": "B1"})
    draw("ksd", scatter_xy, result["ksd"], {"marker": "o", "size": 50}, y=rows,
         pooled_data=result["ksd_pooled"].rename("ksd"),
         pooled_kwargs={"y": 0.0, "color": layout.colors[pooled]})
    ratio = (result["ksd"] / result["ksd_iid"]).rename("ksd")
    ratio_pooled = (result["ksd_pooled"] / result["ksd_iid_pooled"]).rename("ksd")
    draw("ratio", annotate_xy, ratio, {"horizontal_align": "left",
                                       "vertical_align": "center", "size": 9},
         text=_ratio_text, x=by_chain(np.maximum(layout.ksd, layout.floor) * 1.12, "x"),
         y=rows, pooled_data=ratio_pooled,
         pooled_kwargs={"text": _ratio_text, "y": 0.0, "color": "B1",
                        "x": float(max(layout.ksd[pooled], layout.floor[pooled]) * 1.12)})
    # p-value panel: hollow markers for p-values that decide nothing
    faces = by_chain(np.where(layout.reliable[:n_chain], np.asarray(layout.colors[:n_chain],
                                                                    dtype=object), "none"),
                     "faces")
    kw_p = _visual_kwargs(visuals, "pvalue", {"marker": "o", "size": 60, "width": 1.5})
    if kw_p is not None:
        ignore = _ignore_aes(pc, aes_by_visuals, "pvalue", default=pc.aes_set)
        kw_chain = dict(kw_p)
        if "color" not in aes_by_visuals.get("pvalue", pc.aes_set):
            kw_chain = {"edgecolor": colors, "facecolor": faces, **kw_chain}
        pc.map(scatter_xy, "pvalue", data=result["pvalue"].clip(min=1e-6), y=rows,
               ignore_aes=ignore, **kw_chain)
        for k in range(pooled, len(layout.test_rows)):
            color = layout.test_colors[k]
            face = color if layout.reliable[k] else "none"
            name = "pvalue_pooled" if k == pooled else f"pvalue_test{k - pooled - 1}"
            _map_once(pc, scatter_xy, name,
                      xr.DataArray(max(layout.pvalue[k], 1e-6), name="pvalue"),
                      y=float(layout.test_rows[k]),
                      **{"edgecolor": color, "facecolor": face, **kw_p})
    kw = _visual_kwargs(visuals, "level", {"color": "B2", "linestyle": "C1", "width": 1.0})
    anchor_p = xr.DataArray(layout.level, name="pvalue")
    if kw is not None:
        _map_once(pc, vline, "level", anchor_p, **kw)
    # attribution panel
    if has_attr:
        kw = _visual_kwargs(visuals, "attribution", {"color": "#D55E00", "alpha": 0.8})
        if kw is not None:
            columns = np.arange(len(layout.parameters), dtype=np.float64)
            sizes = xr.DataArray(_attribution_sizes(layout.attribution, 400.0),
                                 dims=["chain", "parameter"], coords={"chain": chain})
            data = xr.DataArray(np.broadcast_to(columns, layout.attribution.shape),
                                dims=["chain", "parameter"], coords={"chain": chain},
                                name="attribution")
            pc.map(scatter_xy, "attribution", data=data, y=rows, size=sizes,
                   ignore_aes=_ignore_aes(pc, aes_by_visuals, "attribution",
                                          default=pc.aes_set), **kw)

    # axes: one call per panel
    anchor_k = xr.DataArray(0.0, name="ksd")
    _set_once(pc, set_xscale, "xscale", anchor_k, scale="log")
    _set_once(pc, set_xscale, "xscale_p", anchor_p, scale="log")
    _set_once(pc, set_xlim, "xlim", anchor_k,
              limits=_x_limits(np.append(layout.ksd, layout.floor)))
    _set_once(pc, set_xlim, "xlim_p", anchor_p, limits=_p_limits(layout))
    _set_once(pc, set_ylim, "ylim", anchor_k, limits=(-0.8, layout.rows[0] + 0.8))
    _set_once(pc, set_ylim, "ylim_p", anchor_p,
              limits=(layout.test_rows[-1] - 0.8, layout.rows[0] + 0.8))
    _set_once(pc, _set_yticks, "yticks", anchor_k, values=list(layout.rows), labels=layout.labels)
    _set_once(pc, _set_yticks, "yticks_p", anchor_p, values=list(layout.test_rows),
              labels=layout.test_labels)
    _map_once(pc, labelled_title, "panel_title", anchor_k, text=_KSD_TITLE, color="B1", size=10)
    _map_once(pc, labelled_title, "panel_title_p", anchor_p, text=_pvalue_title(layout.level),
              color="B1", size=10)
    _map_once(pc, labelled_x, "xlabel", anchor_k, text="KSD", color="B1")
    _map_once(pc, labelled_x, "xlabel_p", anchor_p, text="p-value (hollow: not reliable)",
              color="B1")
    if has_attr:
        anchor_a = xr.DataArray(0.0, name="attribution")
        _set_once(pc, set_xticks, "xticks_a", anchor_a,
                  values=list(range(len(layout.parameters))), labels=layout.parameters)
        _set_once(pc, _set_yticks, "yticks_a", anchor_a, values=list(layout.rows[:-1]),
                  labels=layout.labels[:-1])
        _set_once(pc, set_ylim, "ylim_a", anchor_a, limits=(0.2, layout.rows[0] + 0.8))
        _map_once(pc, labelled_title, "panel_title_a", anchor_a, text=_ATTRIBUTION_TITLE,
                  color="B1", size=10)
    if pc.backend == "matplotlib":
        _set_once(pc, lambda da, target: _readable_log_ticks(target.xaxis), "xticks", anchor_k)
    if _visual_kwargs(visuals, "title", {}) is not None:
        _suptitle(pc, layout.title)
    return _shown(pc, show)
