"""plot_ksd_chains: each chain's final KSD against its i.i.d. floor."""

import numpy as np
import xarray as xr

from steindiag._ksd import ksd
from steindiag.plots._common import (_chain_labels, _check_dataset, _check_template,
                                     _draw_ksd_rows, _ignore_aes, _map_once, _new_collection,
                                     _new_figure, _no_pc_kwargs, _labelled_result, _ratio_text,
                                     _readable_log_ticks, _select, _set_once, _set_yticks, _shown,
                                     _use_arviz_plots, _visual_kwargs)

_PLOT_CHAINS_VISUALS = ("ksd", "ksd_iid", "segment", "ratio")


def _chains_table(result):
    """Final values per chain (from ``ksd`` or the last n of ``ksd_path``)."""
    if "n" in result["ksd"].dims:
        n_final = int(result["n"].values[-1])
        result = result.isel(n=-1)
    else:
        n_final = int(result.attrs["n_draw"]) if "n_draw" in result.attrs else None
    return result, n_final


def _is_ksd_result(value):
    return isinstance(value, xr.Dataset) and "ksd" in value.data_vars


def plot_ksd_chains(result, *, coords=None, visuals=None, plot_collection=None, backend=None,
                    labeller=None, aes_by_visuals=None, stats=None, ax=None, figsize=None,
                    show=False, **pc_kwargs):
    """Final KSD of every chain against its i.i.d. floor, one row per chain plus pooled.

    Parameters
    ----------
    result : xarray.Dataset or draws
        Output of :func:`steindiag.ksd` (``ksd`` with dims (chain,)) or of
        :func:`steindiag.ksd_path` (the last n is used). Anything else is taken as draws:
        ``steindiag.ksd(result, **stats["ksd"])``.
    coords : dict, optional
        Subset of chains, e.g. ``{"chain": [0, 1]}``.
    visuals : dict, optional
        ``False`` hides an element, a dict passes keyword arguments to it. Keys:
        ``"ksd"`` (a marker per chain at its KSD), ``"ksd_iid"`` (a bar at its floor),
        ``"segment"`` (the line from floor to KSD) and ``"ratio"`` (the text
        KSD / floor). The x label says which marker is which.
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection (one plot) instead of a new one.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
    labeller : arviz labeller, optional
        Writes the chains' row labels (``sel_to_str``; e.g. ``DimCoordLabeller()``);
        draws are computed with it (``ksd(..., labeller=labeller)``).
    aes_by_visuals : dict, optional
        Visual -> list of the PlotCollection's aesthetics it uses (keys as ``visuals``).
        Default: the chains' ``"ksd"``, ``"ksd_iid"``, ``"segment"`` and ``"ratio"`` use
        every aesthetic (a new PlotCollection maps ``color`` to ``chain``; the floor,
        segment and ratio keep their grey unless ``visuals`` says otherwise); the pooled
        row none.
    stats : dict, optional
        ``{"ksd": result}`` or ``{"ksd": {"model": model}}`` (keyword arguments of
        :func:`steindiag.ksd` when the first argument is draws).
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes, even when arviz-plots is installed.
    figsize : (float, float), optional
        Figure size in inches when a new figure is created (default grows with chains).
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap`.

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        As :func:`plot_ksd`.

    Notes
    -----
    Rows are the chains (top to bottom) and, last, all chains pooled; the x axis is
    logarithmic. The number next to each row is KSD / floor, a description, not a
    verdict: exact independent draws give about 1 and an autocorrelated chain a steady
    factor above 1, but the floor, sqrt(mean_i k_p(x_i, x_i) / N), is computed at the
    draws, so draws far from the target raise their own floor (prior draws of eight
    schools scored against its posterior give about 1.0 to 1.5). A chain far to the
    right of the others is the one to inspect; whether the draws fit is for
    :func:`steindiag.diagnose` to say. The pooled floor is lower than the chains' floors by about
    sqrt(number of chains), because it uses all draws.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((4, 500, 2))
    >>> x[3] += 1.0                                   # one chain off target
    >>> res = steindiag.ksd(x, score=-x, preconditioner="identity")
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_ksd_chains(res, ax=ax)
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['chain 0', 'chain 1', 'chain 2', 'chain 3', 'pooled']
    >>> plt.close(fig)
    """
    visuals, aes_by_visuals, stats, show = _check_template(
        _PLOT_CHAINS_VISUALS, ("ksd",), visuals, aes_by_visuals, stats, ax, backend, show,
        plot_collection)
    if isinstance(result, (np.ndarray, list, tuple)) and "ksd" not in stats:
        raise TypeError("result must be the xarray.Dataset returned by steindiag.ksd, or "
                        f"draws with stats={{'ksd': {{...}}}}; got {type(result).__name__}.")
    result = _labelled_result(result, stats, "ksd", _is_ksd_result, ksd, labeller)[0]
    _check_dataset(result, "result", "ksd", [("chain",), ("chain", "n")])
    result = _select(result, coords, "result")
    result, n_final = _chains_table(result)
    labels = _chain_labels(result["chain"].values, labeller)
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_chains_collection(result, n_final, labels, plot_collection,
                                       aes_by_visuals, visuals, figsize, backend, show,
                                       pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_chains_matplotlib(result, n_final, labels, visuals, ax, figsize, show)


def _chains_layout(result):
    n_chain = result.sizes["chain"]
    # Chains from the top, a gap, then pooled at the bottom.
    positions = np.arange(n_chain, 0, -1, dtype=np.float64) + 0.5
    pooled_position = 0.0
    return positions, pooled_position


def _xlabel_chains(n_final):
    tail = "" if n_final is None else f", n = {n_final} per chain"
    return f"KSD (dot) and i.i.d. floor (bar){tail}"


_CHAINS_TITLE = "Final KSD per chain (numbers: KSD / i.i.d. floor)"


def _plot_chains_matplotlib(result, n_final, labels, visuals, ax, figsize, show):
    positions, pooled_position = _chains_layout(result)
    fig, ax, _ = _new_figure(ax, figsize, (7.5, 1.6 + 0.4 * (len(positions) + 2)))
    ksd = np.append(result["ksd"].values, result["ksd_pooled"].values)
    floor = np.append(result["ksd_iid"].values, result["ksd_iid_pooled"].values)
    rows = np.append(positions, pooled_position)
    colors = [f"C{i % 10}" for i in range(len(positions))] + ["k"]
    gids = [f"[{chain}]" for chain in result["chain"].values] + ["_pooled"]

    _draw_ksd_rows(ax, rows, ksd, floor, colors, gids, visuals,
                   segment={"color": "0.6", "linewidth": 1.2},
                   ratio={"fontsize": "small", "va": "center", "ha": "left"})
    low, high = np.min(np.minimum(ksd, floor)), np.max(np.maximum(ksd, floor))
    ax.set_xlim(low / 1.5, high * 2.2)  # room for the ratio text
    _readable_log_ticks(ax.xaxis)
    ax.set_yticks(rows, labels + ["pooled"])
    ax.set_ylim(pooled_position - 0.8, positions[0] + 0.8)
    ax.axhline((pooled_position + positions[-1]) / 2, color="0.85", linewidth=0.8, zorder=0)
    ax.set_xlabel(_xlabel_chains(n_final))
    ax.set_title(_CHAINS_TITLE, fontsize="medium")
    return _shown(fig, show)


def _plot_chains_collection(result, n_final, labels, pc, aes_by_visuals, visuals, figsize,
                            backend, show, pc_kwargs):
    from arviz_plots.visuals import (annotate_xy, hline, labelled_title, labelled_x, line_xy,
                                     scatter_xy, set_xlim, set_xscale, set_ylim)

    positions, pooled_position = _chains_layout(result)
    pc = _new_collection(pc, result[["ksd"]], backend=backend,
                         figsize=figsize or (7.5, 1.6 + 0.4 * (len(positions) + 2)),
                         pc_kwargs=pc_kwargs, default_aes={"color": ["chain"]})

    def ignore(key):
        # The chains' visuals use every aesthetic by default (one artist per chain).
        return _ignore_aes(pc, aes_by_visuals, key, default=pc.aes_set)
    chain_rows = xr.DataArray(positions, dims=["chain"], coords={"chain": result["chain"]})
    ksd, floor = result["ksd"], result["ksd_iid"]
    ksd_pooled, floor_pooled = result["ksd_pooled"], result["ksd_iid_pooled"]

    def segment(value, base, row):
        return xr.concat([xr.concat([base, value], "end"), xr.concat([row, row], "end")],
                         "plot_axis").assign_coords(plot_axis=["x", "y"])

    kw = _visual_kwargs(visuals, "segment", {"color": "B2", "width": 1.2})
    if kw is not None:
        pc.map(line_xy, "segment", data=segment(ksd, floor, chain_rows).rename("segment"),
               ignore_aes=ignore("segment"), **kw)
        pooled_row = xr.DataArray(pooled_position)
        _map_once(pc, line_xy, "segment_pooled",
                  segment(ksd_pooled, floor_pooled, pooled_row).rename("segment_pooled"), **kw)
    kw = _visual_kwargs(visuals, "ksd_iid", {"color": "B1", "marker": "|", "size": 160, "width": 2})
    if kw is not None:
        pc.map(scatter_xy, "ksd_iid", data=floor, y=chain_rows, ignore_aes=ignore("ksd_iid"),
               **kw)
        _map_once(pc, scatter_xy, "ksd_iid_pooled", floor_pooled, y=pooled_position, **kw)
    kw = _visual_kwargs(visuals, "ksd", {"marker": "o", "size": 50})
    if kw is not None:
        pc.map(scatter_xy, "ksd", data=ksd, y=chain_rows, ignore_aes=ignore("ksd"), **kw)
        _map_once(pc, scatter_xy, "ksd_pooled", ksd_pooled, y=pooled_position,
                  **{"color": "B1", **kw})
    kw = _visual_kwargs(visuals, "ratio", {"color": "B1", "horizontal_align": "left",
                                           "vertical_align": "center", "size": 9})
    if kw is not None:
        pc.map(annotate_xy, "ratio", data=(ksd / floor).rename("ratio"), text=_ratio_text,
               x=np.maximum(ksd, floor) * 1.12, y=chain_rows, ignore_aes=ignore("ratio"), **kw)
        _map_once(pc, annotate_xy, "ratio_pooled",
                  (ksd_pooled / floor_pooled).rename("ratio_pooled"), text=_ratio_text,
                  x=float(np.maximum(ksd_pooled, floor_pooled)) * 1.12, y=pooled_position, **kw)

    all_values = np.concatenate(
        [ksd.values, floor.values, [ksd_pooled.item(), floor_pooled.item()]]
    )
    anchor = ksd_pooled.rename("axes")
    _set_once(pc, set_xscale, "xscale", anchor, scale="log")
    _set_once(pc, set_xlim, "xlim", anchor,
              limits=(all_values.min() / 1.5, all_values.max() * 2.2))
    _set_once(pc, set_ylim, "ylim", anchor, limits=(pooled_position - 0.8, positions[0] + 0.8))
    _set_once(pc, _set_yticks, "yticks", anchor,
              values=list(np.append(positions, pooled_position)), labels=labels + ["pooled"])
    _map_once(pc, hline, "separator",
              xr.DataArray((pooled_position + positions[-1]) / 2, name="sep"), color="B3",
              width=0.8)
    _map_once(pc, labelled_x, "xlabel", anchor, text=_xlabel_chains(n_final), color="B1")
    _map_once(pc, labelled_title, "title", anchor, text=_CHAINS_TITLE, color="B1")
    if pc.backend == "matplotlib":
        _set_once(pc, lambda da, target: _readable_log_ticks(target.xaxis), "xticks", anchor)
    return _shown(pc, show)
