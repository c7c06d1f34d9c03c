"""plot_ksd: the running KSD against the number of draws, per chain and pooled."""

import numpy as np
import xarray as xr

from steindiag._ksd import ksd_path
from steindiag.plots._common import (_chain_labels, _check_dataset, _check_template, _ignore_aes,
                                     _map_once, _new_collection, _new_figure, _no_pc_kwargs,
                                     _labelled_result, _select, _set_once, _shown,
                                     _use_arviz_plots, _visual_kwargs)

_PLOT_KSD_VISUALS = ("ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled", "guide", "legend")
_KSD_LABEL = "KSD (square root of the V-statistic)"
_GUIDE_LABEL = "slope \u22121/2"
_FLOOR_LABEL = "i.i.d. floor, each chain"


def _slope_guide(n, ksd_pooled):
    """Reference line of slope -1/2 through the pooled curve at n0 ~ n_max / 100.

    An exact sampler's KSD falls like n^(-1/2): a curve that runs parallel to the guide
    decays at the Monte Carlo rate, one that flattens above it has stalled.
    """
    n = np.asarray(n, dtype=np.float64)
    ksd_pooled = np.asarray(ksd_pooled, dtype=np.float64)
    start = int(np.searchsorted(n, max(n[0], n[-1] / 100.0)))
    start = min(start, n.size - 2) if n.size >= 2 else 0
    n_guide = n[start:]
    return n_guide, ksd_pooled[start] * np.sqrt(n[start] / n_guide)


def _is_path(value):
    return isinstance(value, xr.Dataset) and "ksd" in value.data_vars and "n" in value.dims


def plot_ksd(path, *, coords=None, visuals=None, plot_collection=None, backend=None,
             labeller=None, aes_by_visuals=None, stats=None, ax=None, figsize=None,
             show=False, **pc_kwargs):
    """Running KSD against the number of draws, per chain and pooled, on log-log axes.

    Parameters
    ----------
    path : xarray.Dataset or draws
        Output of :func:`steindiag.ksd_path`: ``ksd`` (chain, n), ``ksd_pooled`` (n),
        ``ksd_iid`` (chain, n) and ``ksd_iid_pooled`` (n). Anything else is taken as
        draws: ``steindiag.ksd_path(path, **stats["ksd_path"])`` (a trace with stored
        scores needs no keyword argument).
    coords : dict, optional
        Subset to plot, e.g. ``{"chain": [0, 2]}`` or ``{"n": slice(100, None)}``.
        The pooled lines always describe all chains of the run.
    visuals : dict, optional
        One entry per drawn element; ``False`` hides it, a dict passes keyword
        arguments to the line (``color``, ``linestyle``, ``alpha``, ...; matplotlib names
        on the matplotlib path, arviz-plots names such as ``width`` on the
        PlotCollection path). Keys:

        * ``"ksd"``: one line per chain (coloured by chain);
        * ``"ksd_pooled"``: all chains pooled (thick, black);
        * ``"ksd_iid"``: each chain's i.i.d. floor (thin, dashed, in the chain's colour);
        * ``"ksd_iid_pooled"``: the pooled i.i.d. floor (black, dotted);
        * ``"guide"``: a slope -1/2 line through the pooled curve at about n_max / 100;
        * ``"legend"``: the legend.
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection instead of a new one: one made by an earlier call
        (to overlay another run) or your own, e.g. ``PlotCollection.wrap(path[["ksd"]],
        cols=[], aes={"color": ["chain"], "linestyle": ["chain"]})``.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots). Defaults to arviz-plots' own default.
    labeller : arviz labeller, optional
        Writes the chains' legend labels on the matplotlib path (``sel_to_str``; e.g.
        ``DimCoordLabeller()`` gives "chain: 0"); the PlotCollection's legend shows the
        chain coordinate. Draws are computed with it (``ksd_path(..., labeller=...)``).
    aes_by_visuals : dict, optional
        Visual -> list of the PlotCollection's aesthetics it uses (keys as ``visuals``).
        Default: ``"ksd"`` and ``"ksd_iid"`` use every aesthetic (a new PlotCollection
        maps ``color`` to ``chain``), the pooled lines and the guide none.
    stats : dict, optional
        ``{"ksd_path": result}`` (instead of the first argument) or ``{"ksd_path":
        {"model": model, "n_points": 40}}``, keyword arguments of
        :func:`steindiag.ksd_path` when the first argument is draws.
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes (ArviZ 0.x convention), even when
        arviz-plots is installed.
    figsize : (float, float), optional
        Figure size in inches when a new figure is created.
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap` (e.g. ``figure_kwargs``).

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        A PlotCollection (its ``viz`` holds the artists under the ``visuals`` keys) when
        arviz-plots is installed and ``ax`` is None; otherwise the matplotlib Figure.

    Notes
    -----
    ``ksd`` at n is sqrt(S_n) / n with S_n the sum of k_p over all pairs of the first n
    draws (see the Background page of the docs). The i.i.d. floor
    sqrt(mean_i k_p(x_i, x_i) / n) is what
    exact independent draws of the target reach on average; it falls like n^(-1/2).
    Reading the plot: a chain whose curve runs parallel to the floor (and to the guide)
    and stays a roughly constant factor above it is mixing (the factor grows with
    autocorrelation); a curve that flattens while the floor keeps falling has stalled on
    a biased answer; one chain far above the others is the chain to inspect (see
    :func:`plot_ksd_chains`). Compare each curve with the floor of the same n, never
    with zero. The floor is computed at the draws themselves: draws far from the target
    have large scores and raise their own floor, so a curve near its floor describes the
    draws but does not show that they fit; for a verdict use :func:`steindiag.diagnose`.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((4, 1000, 2))
    >>> path = steindiag.ksd_path(x, score=-x, n_points=30)
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_ksd(path, ax=ax)
    >>> ax.get_xscale(), ax.get_yscale()
    ('log', 'log')
    >>> plt.close(fig)
    """
    visuals, aes_by_visuals, stats, show = _check_template(
        _PLOT_KSD_VISUALS, ("ksd_path",), visuals, aes_by_visuals, stats, ax, backend, show,
        plot_collection)
    if isinstance(path, xr.Dataset) and "ksd" in path.data_vars:
        _check_dataset(path, "path", "ksd_path", [("chain", "n")])
    elif isinstance(path, (np.ndarray, list, tuple)) and "ksd_path" not in stats:
        # An array has no stored scores: without a score there is nothing to compute.
        raise TypeError("path must be the xarray.Dataset returned by steindiag.ksd_path, or "
                        f"draws with stats={{'ksd_path': {{...}}}}; got {type(path).__name__}.")
    path = _labelled_result(path, stats, "ksd_path", _is_path, ksd_path, labeller)[0]
    _check_dataset(path, "path", "ksd_path", [("chain", "n")])
    path = _select(path, coords, "path")
    if path.sizes["n"] < 2:
        raise ValueError(
            f"path must hold at least 2 values of n to draw a curve; got {path.sizes['n']}."
        )
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_ksd_collection(path, plot_collection, aes_by_visuals, visuals, figsize,
                                    backend, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_ksd_matplotlib(path, visuals, labeller, ax, figsize, show)


def _plot_ksd_matplotlib(path, visuals, labeller, ax, figsize, show):
    fig, ax, created = _new_figure(ax, figsize, (8.0, 4.5))
    n = path["n"].values
    chains = path["chain"].values
    names = _chain_labels(chains, labeller)

    # Drawn in legend order; zorder keeps the floors under the curves.
    kw_chain = _visual_kwargs(visuals, "ksd", {"linewidth": 1.4, "alpha": 0.9, "zorder": 2.2})
    if kw_chain is not None:
        for i, chain in enumerate(chains):
            line, = ax.plot(n, path["ksd"].values[i], **{
                "color": f"C{i % 10}", "label": names[i], **kw_chain})
            line.set_gid(f"ksd[{chain}]")
    kw_pooled = _visual_kwargs(visuals, "ksd_pooled", {
        "color": "k", "linewidth": 2.4, "zorder": 2.4, "label": "pooled (all chains)"})
    if kw_pooled is not None:
        line, = ax.plot(n, path["ksd_pooled"].values, **kw_pooled)
        line.set_gid("ksd_pooled")
    kw_iid_pooled = _visual_kwargs(visuals, "ksd_iid_pooled", {
        "color": "k", "linestyle": ":", "linewidth": 1.4, "zorder": 2.1,
        "label": "i.i.d. floor, pooled"})
    if kw_iid_pooled is not None:
        line, = ax.plot(n, path["ksd_iid_pooled"].values, **kw_iid_pooled)
        line.set_gid("ksd_iid_pooled")
    kw_iid = _visual_kwargs(visuals, "ksd_iid", {
        "linestyle": "--", "linewidth": 0.9, "zorder": 2.0})
    if kw_iid is not None:
        # Each chain's floor in its chain's colour (the curve it is compared with).
        for i, chain in enumerate(chains):
            line, = ax.plot(n, path["ksd_iid"].values[i], **{
                "color": f"C{i % 10}", "label": _FLOOR_LABEL if i == 0 else "_nolegend_",
                **kw_iid})
            line.set_gid(f"ksd_iid[{chain}]")
    kw_guide = _visual_kwargs(visuals, "guide", {
        "color": "0.35", "linestyle": "-.", "linewidth": 1.0, "zorder": 2.0,
        "label": _GUIDE_LABEL})
    if kw_guide is not None:
        line, = ax.plot(*_slope_guide(n, path["ksd_pooled"].values), **kw_guide)
        line.set_gid("guide")

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("draws per chain, n")
    ax.set_ylabel(_KSD_LABEL)
    legend_place = ({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if created
                    else {"loc": "best"})
    kw_legend = _visual_kwargs(visuals, "legend", {"fontsize": "small", "frameon": False,
                                                   **legend_place})
    if kw_legend is not None:
        handles, labels = ax.get_legend_handles_labels()
        if kw_iid is not None:
            # The floors share a style, not a colour: a neutral entry stands for them all.
            handles = [_neutral_entry(handle, kw_iid) if label == _FLOOR_LABEL else handle
                       for handle, label in zip(handles, labels)]
        ax.legend(handles, labels, **kw_legend)
    return _shown(fig, show)


def _neutral_entry(line, kw_iid):
    """Legend handle (not drawn in the axes) with ``line``'s style, grey unless coloured."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=kw_iid.get("color", "0.55"), linestyle=line.get_linestyle(),
                  linewidth=line.get_linewidth(), alpha=line.get_alpha())


def _plot_ksd_collection(path, pc, aes_by_visuals, visuals, figsize, backend, show,
                         pc_kwargs):
    from arviz_plots.visuals import labelled_x, labelled_y, line_xy, set_xscale, set_yscale

    pc = _new_collection(pc, path[["ksd"]], backend=backend, figsize=figsize or (8.0, 4.5),
                         pc_kwargs=pc_kwargs, default_aes={"color": ["chain"]})
    n = path["n"]

    def draw(key, data, defaults, chains, **kwargs):
        kw = _visual_kwargs(visuals, key, defaults)
        if kw is None:
            return
        ignore = _ignore_aes(pc, aes_by_visuals, key, default=pc.aes_set if chains else ())
        used = set(pc.aes_set) - ignore
        # A default never overrides an aesthetic the visual uses.
        kw = {k: v for k, v in kw.items() if k not in used or k in (visuals.get(key) or {})}
        pc.map(line_xy, key, data=data, ignore_aes=ignore, **kwargs, **kw)

    # One line per chain, each in its chain's colour (the chain aesthetic).
    draw("ksd_iid", path["ksd_iid"], {"linestyle": "C1", "width": 0.9}, True, x=n)
    draw("ksd", path["ksd"], {"width": 1.4}, True, x=n)
    draw("ksd_iid_pooled", path["ksd_iid_pooled"],
         {"color": "B1", "linestyle": "C2", "width": 1.4}, False, x=n)
    draw("ksd_pooled", path["ksd_pooled"], {"color": "B1", "width": 2.4}, False, x=n)
    if _visual_kwargs(visuals, "guide", {}) is not None:
        n_guide, y_guide = _slope_guide(n.values, path["ksd_pooled"].values)
        guide = xr.DataArray(y_guide, dims=["n_guide"], name="guide")
        draw("guide", guide, {"color": "B2", "linestyle": "C3", "width": 1.0}, False,
             x=n_guide)

    anchor = path["ksd_pooled"]  # any variable without chain: one call per plot
    _set_once(pc, set_xscale, "xscale", anchor, scale="log")
    _set_once(pc, set_yscale, "yscale", anchor, scale="log")
    _map_once(pc, labelled_x, "xlabel", anchor, text="draws per chain, n", color="B1")
    _map_once(pc, labelled_y, "ylabel", anchor, text=_KSD_LABEL, color="B1")

    kw_legend = _visual_kwargs(visuals, "legend", {})
    if kw_legend is not None:
        if "color" in pc.aes_set:
            pc.add_legend("chain", **kw_legend)
        _reference_legend(pc, visuals)
    return _shown(pc, show)


def _reference_legend(pc, visuals):
    """Second legend (pooled, floors, guide) through the arviz-plots backend's legend."""
    from importlib import import_module

    entries = [
        ("ksd_pooled", "pooled (all chains)", {"color": "B1", "width": 2.4}),
        ("ksd_iid_pooled", "i.i.d. floor, pooled",
         {"color": "B1", "linestyle": "C2", "width": 1.4}),
        ("ksd_iid", _FLOOR_LABEL, {"color": "B2", "linestyle": "C1", "width": 0.9}),
        ("guide", _GUIDE_LABEL, {"color": "B2", "linestyle": "C3", "width": 1.0}),
    ]
    kwarg_list, label_list = [], []
    for key, label, defaults in entries:
        kw = _visual_kwargs(visuals, key, defaults)
        if kw is not None:
            kwarg_list.append({k: v for k, v in kw.items()
                               if k in ("color", "linestyle", "width", "alpha")})
            label_list.append(label)
    if not kwarg_list or pc.backend != "matplotlib":
        # Other backends build legends from mapped aesthetics only; the reference lines are
        # described in the docstring and keep their fixed styles.
        return
    legend = import_module(f"arviz_plots.backend.{pc.backend}").legend
    pc.viz["legend/reference"] = legend(pc, kwarg_list, label_list, title="reference")
