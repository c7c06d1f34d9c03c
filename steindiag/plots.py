"""Plots of KSD results: running curves, a per-chain comparison, the Stein kernel.

Plotting libraries are imported inside the functions, never at ``import steindiag``.

Two looks, one set of numbers:

- ArviZ 1.x users (``arviz_plots`` installed) get an ``arviz_plots.PlotCollection``
  from :func:`plot_ksd` and :func:`plot_ksd_chains`, drawn with the arviz-plots
  visuals and theme (``backend=`` picks matplotlib, bokeh or plotly there).
- Everyone else, and anyone who passes ``ax=``, gets a matplotlib figure drawn with
  plain matplotlib (the ArviZ 0.x ``ax=`` / ``show=`` conventions).

Neither path calls ``show`` unless ``show=True``.
"""

import numpy as np
import xarray as xr

from steindiag._validate import evaluate_score_callable
from steindiag.kernels import make_kernel

__all__ = ["plot_ksd", "plot_ksd_chains", "plot_stein_kernel", "plot_mmd"]

_PATH_VARS = ("ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled")
_PLOT_KSD_VISUALS = ("ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled", "guide", "legend")
_PLOT_CHAINS_VISUALS = ("ksd", "ksd_iid", "segment", "ratio")

_KSD_LABEL = "KSD (square root of the V-statistic)"
_GUIDE_LABEL = "slope \u22121/2"


# --------------------------------------------------------------------------------------
# input validation (once, up front)
# --------------------------------------------------------------------------------------


def _check_dataset(result, name, func, required_dims):
    if not isinstance(result, xr.Dataset):
        raise TypeError(
            f"{name} must be the xarray.Dataset returned by steindiag.{func}; "
            f"got {type(result).__name__}."
        )
    missing = [var for var in _PATH_VARS if var not in result.data_vars]
    if missing:
        raise ValueError(
            f"{name} must hold the variables {list(_PATH_VARS)} (as returned by "
            f"steindiag.{func}); missing {missing}."
        )
    if tuple(result["ksd"].dims) not in required_dims:
        allowed = " or ".join(str(dims) for dims in required_dims)
        raise ValueError(
            f"{name}['ksd'] must have dims {allowed}; got {tuple(result['ksd'].dims)}."
            + (" Use steindiag.ksd_path to get the running curve." if func == "ksd_path" else "")
        )


def _select(result, coords, name):
    if coords is None:
        return result
    if not isinstance(coords, dict):
        raise TypeError(
            f"coords must be a dict such as {{'chain': [0, 1]}}; got {type(coords).__name__}."
        )
    unknown = set(coords) - set(result.dims)
    if unknown:
        raise ValueError(
            f"coords keys must be dimensions of {name} ({sorted(result.dims)}); "
            f"got {sorted(unknown)}."
        )
    # A scalar would drop the dimension; keep it, so one chain is still a chain.
    coords = {key: value if isinstance(value, slice) or np.ndim(value) else [value]
              for key, value in coords.items()}
    selected = result.sel(coords)
    if "chain" in selected["ksd"].dims and selected.sizes["chain"] == 0:
        raise ValueError(f"coords selects no chain of {name}.")
    return selected


def _check_visuals(visuals, allowed):
    if visuals is None:
        return {}
    if not isinstance(visuals, dict):
        raise TypeError(f"visuals must be a dict; got {type(visuals).__name__}.")
    unknown = set(visuals) - set(allowed)
    if unknown:
        raise ValueError(f"visuals keys must be among {list(allowed)}; got {sorted(unknown)}.")
    for key, value in visuals.items():
        if value is not False and value is not True and not isinstance(value, dict):
            raise TypeError(
                f"visuals[{key!r}] must be False (hide), True or a dict of keyword arguments; "
                f"got {type(value).__name__}."
            )
    return visuals


def _visual_kwargs(visuals, key, defaults):
    """Defaults updated with the user's keyword arguments, or None if switched off."""
    value = visuals.get(key, True)
    if value is False:
        return None
    return {**defaults, **(value if isinstance(value, dict) else {})}


def _check_bool(value, name):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__}.")
    return bool(value)


def _check_target(ax, backend, show):
    show = _check_bool(show, "show")
    if ax is not None and backend is not None:
        raise ValueError(
            "ax and backend cannot be used together: ax= draws with plain matplotlib, "
            "backend= selects an arviz-plots backend."
        )
    return show


def _use_arviz_plots(ax, backend):
    """ArviZ 1.x look (arviz_plots) unless the caller passed a matplotlib ``ax``."""
    if ax is not None:
        return False
    try:
        import arviz_plots  # noqa: F401
    except ImportError:
        if backend is not None:
            raise ImportError(
                "backend= needs arviz-plots (ArviZ 1.x); install it with "
                "`pip install arviz-plots`, or omit backend to draw with matplotlib."
            ) from None
        return False
    return True


# --------------------------------------------------------------------------------------
# geometry shared by both renderers
# --------------------------------------------------------------------------------------


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


def _chain_label(chain):
    return f"chain {chain}"


# --------------------------------------------------------------------------------------
# plot_ksd
# --------------------------------------------------------------------------------------


def plot_ksd(path, *, coords=None, visuals=None, ax=None, figsize=None, backend=None,
             show=False, **pc_kwargs):
    """Running KSD against the number of draws, per chain and pooled, on log-log axes.

    Parameters
    ----------
    path : xarray.Dataset
        Output of :func:`steindiag.ksd_path`: ``ksd`` (chain, n), ``ksd_pooled`` (n),
        ``ksd_iid`` (chain, n) and ``ksd_iid_pooled`` (n).
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
        * ``"ksd_iid"``: each chain's i.i.d. floor (thin, grey, dashed);
        * ``"ksd_iid_pooled"``: the pooled i.i.d. floor (black, dotted);
        * ``"guide"``: a slope -1/2 line through the pooled curve at about n_max / 100;
        * ``"legend"``: the legend.
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes (ArviZ 0.x convention), even when
        arviz-plots is installed.
    figsize : (float, float), optional
        Figure size in inches when a new figure is created.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots). Defaults to arviz-plots' own default.
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
    with zero.

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
    _check_dataset(path, "path", "ksd_path", [("chain", "n")])
    visuals = _check_visuals(visuals, _PLOT_KSD_VISUALS)
    show = _check_target(ax, backend, show)
    path = _select(path, coords, "path")
    if path.sizes["n"] < 2:
        raise ValueError(
            f"path must hold at least 2 values of n to draw a curve; got {path.sizes['n']}."
        )
    if _use_arviz_plots(ax, backend):
        return _plot_ksd_collection(path, visuals, figsize, backend, show, pc_kwargs)
    if pc_kwargs:
        raise TypeError(
            f"unexpected keyword arguments {sorted(pc_kwargs)}: they go to "
            "arviz_plots.PlotCollection.wrap, which is not used with ax= or without arviz-plots."
        )
    return _plot_ksd_matplotlib(path, visuals, ax, figsize, show)


def _new_figure(ax, figsize, default_size):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax, False
    fig, ax = plt.subplots(figsize=default_size if figsize is None else figsize,
                           layout="constrained")
    return fig, ax, True


def _plot_ksd_matplotlib(path, visuals, ax, figsize, show):
    import matplotlib.pyplot as plt

    fig, ax, created = _new_figure(ax, figsize, (8.0, 4.5))
    n = path["n"].values
    chains = path["chain"].values

    # Drawn in legend order; zorder keeps the floors under the curves.
    kw_chain = _visual_kwargs(visuals, "ksd", {"linewidth": 1.4, "alpha": 0.9, "zorder": 2.2})
    if kw_chain is not None:
        for i, chain in enumerate(chains):
            line, = ax.plot(n, path["ksd"].values[i], **{
                "color": f"C{i % 10}", "label": _chain_label(chain), **kw_chain})
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
        "color": "0.55", "linestyle": "--", "linewidth": 0.9, "zorder": 2.0})
    if kw_iid is not None:
        for i, chain in enumerate(chains):
            line, = ax.plot(n, path["ksd_iid"].values[i], **{
                "label": "i.i.d. floor, each chain" if i == 0 else "_nolegend_", **kw_iid})
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
        ax.legend(**kw_legend)
    if show:
        plt.show()
    return fig


def _plot_ksd_collection(path, visuals, figsize, backend, show, pc_kwargs):
    from arviz_base import rcParams
    from arviz_plots import PlotCollection
    from arviz_plots.visuals import labelled_x, labelled_y, line_xy, set_xscale, set_yscale

    if backend is None:
        backend = rcParams["plot.backend"]
    pc_kwargs = dict(pc_kwargs)
    pc_kwargs.setdefault("aes", {"color": ["chain"]})
    figure_kwargs = _figure_kwargs(pc_kwargs, backend, figsize or (8.0, 4.5))
    pc = PlotCollection.wrap(
        path[["ksd"]], cols=[], backend=backend, figure_kwargs=figure_kwargs, **pc_kwargs
    )
    n = path["n"]
    no_aes = set(pc.aes_set)

    kw = _visual_kwargs(visuals, "ksd_iid", {"color": "B2", "linestyle": "C1", "width": 0.9})
    if kw is not None:
        # One line per chain (the chain aesthetic loops), all in the neutral floor colour.
        pc.map(line_xy, "ksd_iid", data=path["ksd_iid"], x=n, **kw)
    kw = _visual_kwargs(visuals, "ksd", {"width": 1.4})
    if kw is not None:
        pc.map(line_xy, "ksd", data=path["ksd"], x=n, **kw)
    kw = _visual_kwargs(visuals, "ksd_iid_pooled", {"color": "B1", "linestyle": "C2", "width": 1.4})
    if kw is not None:
        pc.map(line_xy, "ksd_iid_pooled", data=path["ksd_iid_pooled"], x=n, ignore_aes=no_aes, **kw)
    kw = _visual_kwargs(visuals, "ksd_pooled", {"color": "B1", "width": 2.4})
    if kw is not None:
        pc.map(line_xy, "ksd_pooled", data=path["ksd_pooled"], x=n, ignore_aes=no_aes, **kw)
    kw = _visual_kwargs(visuals, "guide", {"color": "B2", "linestyle": "C3", "width": 1.0})
    if kw is not None:
        n_guide, y_guide = _slope_guide(n.values, path["ksd_pooled"].values)
        guide = xr.DataArray(y_guide, dims=["n_guide"], name="guide")
        pc.map(line_xy, "guide", data=guide, x=n_guide, ignore_aes=no_aes, **kw)

    anchor = path["ksd_pooled"]  # any variable without chain: one call per plot
    pc.map(set_xscale, "xscale", data=anchor, ignore_aes=no_aes, scale="log", store_artist=False)
    pc.map(set_yscale, "yscale", data=anchor, ignore_aes=no_aes, scale="log", store_artist=False)
    pc.map(labelled_x, "xlabel", data=anchor, ignore_aes=no_aes, text="draws per chain, n",
           color="B1")
    pc.map(labelled_y, "ylabel", data=anchor, ignore_aes=no_aes, text=_KSD_LABEL, color="B1")

    kw_legend = _visual_kwargs(visuals, "legend", {})
    if kw_legend is not None:
        if "color" in pc.aes_set:
            pc.add_legend("chain", **kw_legend)
        _reference_legend(pc, visuals)
    if show:
        pc.show()
    return pc


def _figure_kwargs(pc_kwargs, backend, figsize):
    """figure_kwargs for PlotCollection.wrap: our size, and room for outside legends."""
    figure_kwargs = dict(pc_kwargs.pop("figure_kwargs", None) or {})
    figure_kwargs.setdefault("figsize", figsize)
    if backend == "matplotlib":
        figure_kwargs.setdefault("layout", "constrained")
    return figure_kwargs


def _readable_log_ticks(axis):
    """Ticks at 1, 2, 5 x 10^k written as plain numbers (matplotlib axis only)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(NullFormatter())


def _reference_legend(pc, visuals):
    """Second legend (pooled, floors, guide) through the arviz-plots backend's legend."""
    from importlib import import_module

    entries = [
        ("ksd_pooled", "pooled (all chains)", {"color": "B1", "width": 2.4}),
        ("ksd_iid_pooled", "i.i.d. floor, pooled",
         {"color": "B1", "linestyle": "C2", "width": 1.4}),
        ("ksd_iid", "i.i.d. floor, each chain", {"color": "B2", "linestyle": "C1", "width": 0.9}),
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


# --------------------------------------------------------------------------------------
# plot_ksd_chains
# --------------------------------------------------------------------------------------


def _chains_table(result):
    """Final values per chain (from ``ksd`` or the last n of ``ksd_path``)."""
    if "n" in result["ksd"].dims:
        n_final = int(result["n"].values[-1])
        result = result.isel(n=-1)
    else:
        n_final = int(result.attrs["n_draw"]) if "n_draw" in result.attrs else None
    return result, n_final


def plot_ksd_chains(result, *, coords=None, visuals=None, ax=None, figsize=None, backend=None,
                    show=False, **pc_kwargs):
    """Final KSD of every chain against its i.i.d. floor, one row per chain plus pooled.

    Parameters
    ----------
    result : xarray.Dataset
        Output of :func:`steindiag.ksd` (``ksd`` with dims (chain,)) or of
        :func:`steindiag.ksd_path` (the last n is used).
    coords : dict, optional
        Subset of chains, e.g. ``{"chain": [0, 1]}``.
    visuals : dict, optional
        ``False`` hides an element, a dict passes keyword arguments to it. Keys:
        ``"ksd"`` (a marker per chain at its KSD), ``"ksd_iid"`` (a bar at its floor),
        ``"segment"`` (the line from floor to KSD) and ``"ratio"`` (the text
        KSD / floor). The x label says which marker is which.
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes, even when arviz-plots is installed.
    figsize : (float, float), optional
        Figure size in inches when a new figure is created (default grows with chains).
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
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
    logarithmic. The number next to each row is KSD / floor: about 1 for exact
    independent draws, a few for a well-mixing but autocorrelated chain, and much larger
    for a chain that is stuck or biased. A chain far to the right of the others is the
    one to inspect. The pooled floor is lower than the chains' floors by about
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
    _check_dataset(result, "result", "ksd", [("chain",), ("chain", "n")])
    visuals = _check_visuals(visuals, _PLOT_CHAINS_VISUALS)
    show = _check_target(ax, backend, show)
    result = _select(result, coords, "result")
    result, n_final = _chains_table(result)
    if _use_arviz_plots(ax, backend):
        return _plot_chains_collection(result, n_final, visuals, figsize, backend, show, pc_kwargs)
    if pc_kwargs:
        raise TypeError(
            f"unexpected keyword arguments {sorted(pc_kwargs)}: they go to "
            "arviz_plots.PlotCollection.wrap, which is not used with ax= or without arviz-plots."
        )
    return _plot_chains_matplotlib(result, n_final, visuals, ax, figsize, show)


def _chains_layout(result):
    n_chain = result.sizes["chain"]
    # Chains from the top, a gap, then pooled at the bottom.
    positions = np.arange(n_chain, 0, -1, dtype=np.float64) + 0.5
    pooled_position = 0.0
    labels = [_chain_label(chain) for chain in result["chain"].values]
    return positions, pooled_position, labels


def _ratio_text(ratio):
    return f"\u00d7{ratio:.1f}" if ratio < 10 else f"\u00d7{ratio:.0f}"


def _xlabel_chains(n_final):
    tail = "" if n_final is None else f", n = {n_final} per chain"
    return f"KSD (dot) and i.i.d. floor (bar){tail}"


_CHAINS_TITLE = "Final KSD per chain (numbers: KSD / i.i.d. floor)"


def _plot_chains_matplotlib(result, n_final, visuals, ax, figsize, show):
    import matplotlib.pyplot as plt

    positions, pooled_position, labels = _chains_layout(result)
    fig, ax, _ = _new_figure(ax, figsize, (7.5, 1.6 + 0.4 * (len(positions) + 2)))
    ksd = np.append(result["ksd"].values, result["ksd_pooled"].values)
    floor = np.append(result["ksd_iid"].values, result["ksd_iid_pooled"].values)
    rows = np.append(positions, pooled_position)
    colors = [f"C{i % 10}" for i in range(len(positions))] + ["k"]
    gids = [f"[{chain}]" for chain in result["chain"].values] + ["_pooled"]

    kw_segment = _visual_kwargs(visuals, "segment", {"color": "0.6", "linewidth": 1.2})
    kw_iid = _visual_kwargs(visuals, "ksd_iid", {"color": "0.25", "marker": "|", "markersize": 14,
                                                  "markeredgewidth": 2, "linestyle": "none"})
    kw_ksd = _visual_kwargs(visuals, "ksd", {"marker": "o", "markersize": 8, "linestyle": "none"})
    kw_ratio = _visual_kwargs(visuals, "ratio", {"fontsize": "small", "va": "center", "ha": "left"})
    for i, (row, value, base) in enumerate(zip(rows, ksd, floor)):
        if kw_segment is not None:
            line, = ax.plot([base, value], [row, row], **kw_segment)
            line.set_gid(f"segment{gids[i]}")
        if kw_iid is not None:
            line, = ax.plot([base], [row], **kw_iid)
            line.set_gid(f"ksd_iid{gids[i]}")
        if kw_ksd is not None:
            line, = ax.plot([value], [row], **{"color": colors[i], **kw_ksd})
            line.set_gid(f"ksd{gids[i]}")
        if kw_ratio is not None:
            text = ax.text(max(value, base) * 1.12, row, _ratio_text(value / base), **kw_ratio)
            text.set_gid(f"ratio{gids[i]}")
    ax.set_xscale("log")
    low, high = np.min(np.minimum(ksd, floor)), np.max(np.maximum(ksd, floor))
    ax.set_xlim(low / 1.5, high * 2.2)  # room for the ratio text
    _readable_log_ticks(ax.xaxis)
    ax.set_yticks(rows, labels + ["pooled"])
    ax.set_ylim(pooled_position - 0.8, positions[0] + 0.8)
    ax.axhline((pooled_position + positions[-1]) / 2, color="0.85", linewidth=0.8, zorder=0)
    ax.set_xlabel(_xlabel_chains(n_final))
    ax.set_title(_CHAINS_TITLE, fontsize="medium")
    if show:
        plt.show()
    return fig


def _plot_chains_collection(result, n_final, visuals, figsize, backend, show, pc_kwargs):
    from arviz_base import rcParams
    from arviz_plots import PlotCollection
    from arviz_plots.plot_collection import backend_from_object
    from arviz_plots.visuals import (
        annotate_xy,
        hline,
        labelled_title,
        labelled_x,
        line_xy,
        scatter_xy,
        set_xscale,
        set_xlim,
        set_ylim,
    )

    def set_yticks(da, target, values, labels):
        return backend_from_object(target).yticks(values, labels, target)

    if backend is None:
        backend = rcParams["plot.backend"]
    positions, pooled_position, labels = _chains_layout(result)
    pc_kwargs = dict(pc_kwargs)
    pc_kwargs.setdefault("aes", {"color": ["chain"]})
    figure_kwargs = _figure_kwargs(pc_kwargs, backend,
                                   figsize or (7.5, 1.6 + 0.4 * (len(positions) + 2)))
    pc = PlotCollection.wrap(
        result[["ksd"]], cols=[], backend=backend, figure_kwargs=figure_kwargs, **pc_kwargs
    )
    no_aes = set(pc.aes_set)
    chain_rows = xr.DataArray(positions, dims=["chain"], coords={"chain": result["chain"]})
    ksd, floor = result["ksd"], result["ksd_iid"]
    ksd_pooled, floor_pooled = result["ksd_pooled"], result["ksd_iid_pooled"]

    def segment(value, base, row):
        return xr.concat([xr.concat([base, value], "end"), xr.concat([row, row], "end")],
                         "plot_axis").assign_coords(plot_axis=["x", "y"])

    kw = _visual_kwargs(visuals, "segment", {"color": "B2", "width": 1.2})
    if kw is not None:
        pc.map(line_xy, "segment", data=segment(ksd, floor, chain_rows).rename("segment"), **kw)
        pooled_row = xr.DataArray(pooled_position)
        pc.map(line_xy, "segment_pooled",
               data=segment(ksd_pooled, floor_pooled, pooled_row).rename("segment_pooled"),
               ignore_aes=no_aes, **kw)
    kw = _visual_kwargs(visuals, "ksd_iid", {"color": "B1", "marker": "|", "size": 160, "width": 2})
    if kw is not None:
        pc.map(scatter_xy, "ksd_iid", data=floor, y=chain_rows, **kw)
        pc.map(scatter_xy, "ksd_iid_pooled", data=floor_pooled, y=pooled_position,
               ignore_aes=no_aes, **kw)
    kw = _visual_kwargs(visuals, "ksd", {"marker": "o", "size": 50})
    if kw is not None:
        pc.map(scatter_xy, "ksd", data=ksd, y=chain_rows, **kw)
        pc.map(scatter_xy, "ksd_pooled", data=ksd_pooled, y=pooled_position, ignore_aes=no_aes,
               **{"color": "B1", **kw})
    kw = _visual_kwargs(visuals, "ratio", {"color": "B1", "horizontal_align": "left",
                                           "vertical_align": "center", "size": 9})
    if kw is not None:
        pc.map(annotate_xy, "ratio", data=(ksd / floor).rename("ratio"), text=_ratio_text,
               x=np.maximum(ksd, floor) * 1.12, y=chain_rows, **kw)
        pc.map(annotate_xy, "ratio_pooled", data=(ksd_pooled / floor_pooled).rename("ratio_pooled"),
               text=_ratio_text, x=float(np.maximum(ksd_pooled, floor_pooled)) * 1.12,
               y=pooled_position, ignore_aes=no_aes, **kw)

    all_values = np.concatenate(
        [ksd.values, floor.values, [ksd_pooled.item(), floor_pooled.item()]]
    )
    anchor = ksd_pooled.rename("axes")
    pc.map(set_xscale, "xscale", data=anchor, ignore_aes=no_aes, scale="log", store_artist=False)
    pc.map(set_xlim, "xlim", data=anchor, ignore_aes=no_aes, store_artist=False,
           limits=(all_values.min() / 1.5, all_values.max() * 2.2))
    pc.map(set_ylim, "ylim", data=anchor, ignore_aes=no_aes, store_artist=False,
           limits=(pooled_position - 0.8, positions[0] + 0.8))
    pc.map(set_yticks, "yticks", data=anchor, ignore_aes=no_aes, store_artist=False,
           values=list(np.append(positions, pooled_position)), labels=labels + ["pooled"])
    pc.map(hline, "separator", data=xr.DataArray((pooled_position + positions[-1]) / 2, name="sep"),
           ignore_aes=no_aes, color="B3", width=0.8)
    pc.map(labelled_x, "xlabel", data=anchor, ignore_aes=no_aes, text=_xlabel_chains(n_final),
           color="B1")
    pc.map(labelled_title, "title", data=anchor, ignore_aes=no_aes, text=_CHAINS_TITLE,
           color="B1")
    if pc.backend == "matplotlib":
        pc.map(lambda da, target: _readable_log_ticks(target.xaxis), "xticks", data=anchor,
               ignore_aes=no_aes, store_artist=False)
    if show:
        pc.show()
    return pc


# --------------------------------------------------------------------------------------
# plot_stein_kernel (1-D teaching figure)
# --------------------------------------------------------------------------------------


def _stein_kernel_terms_1d(x, score_x, y, score_y, lengthscale, kernel):
    """The four terms of k_p(x, y) for d = 1 and A = 1 / lengthscale^2.

    With u = x - y, a = 1 / lengthscale^2, t = a u^2 and the base kernel k = f(t)
    (the Stein kernel of the Background page with d = 1):

        d/dx k = 2 a u f'(t),   d/dy k = -2 a u f'(t),
        d2/(dx dy) k = -2 a f'(t) - 4 a^2 u^2 f''(t) = -2 a f'(t) - 4 a (t f''(t)),

    written with t f''(t), which stays finite at t = 0 for every kernel (the Matern 3/2
    f'' itself grows like 1/sqrt(t)).
    """
    a = 1.0 / lengthscale**2
    u = x - y
    t = a * u**2
    f, slope, t_curvature = kernel.profile(t)
    grad_x_k = 2.0 * a * u * slope
    grad_y_k = -grad_x_k
    return {
        "div_x_grad_y_k": -2.0 * a * slope - 4.0 * a * t_curvature,
        "grad_x_k_score_y": grad_x_k * score_y,
        "grad_y_k_score_x": grad_y_k * score_x,
        "k_score_x_score_y": f * score_x * score_y,
    }


_TERM_LABELS = {
    "div_x_grad_y_k": r"$\partial_x \partial_{y'} k(x, y')$",
    "grad_x_k_score_y": r"$\partial_x k(x, y')\, s(y')$",
    "grad_y_k_score_x": r"$\partial_{y'} k(x, y')\, s(x)$",
    "k_score_x_score_y": r"$k(x, y')\, s(x)\, s(y')$",
}


def plot_stein_kernel(score, *, y=1.0, x=None, lengthscale=1.0, kernel="imq", c=None,
                      beta=None, batched=True, ax=None, figsize=None, show=False):
    """The Langevin Stein kernel of a 1-D target, split into its four terms.

    Draws, as functions of x for a fixed second argument y', the four terms of
    k_p(x, y') for the chosen base kernel and their sum (thick black line).

    Parameters
    ----------
    score : callable
        grad log p of a one-dimensional target. Same convention as
        :func:`steindiag.ksd`: it maps an (n, 1) array to an (n, 1) array
        (or, with ``batched=False``, a (1,) array to a (1,) array).
    y : float, default 1.0
        The fixed second argument y'. At a point where s(y') = 0 (the mode of a
        unimodal target) the two terms with s(y') vanish.
    x : array_like, optional
        Points at which to draw the curves (1-D, increasing). Default: 401 points on
        y' +- 5 lengthscales.
    lengthscale : float, default 1.0
        Kernel length scale; A = 1 / lengthscale^2.
    kernel : {"imq", "gaussian", "matern32", "matern52"} or kernel object, default "imq"
        Base kernel, as in :func:`steindiag.ksd`.
    c : float, optional
        IMQ offset, c > 0 (default 1.0). Only with ``kernel="imq"``.
    beta : float, optional
        IMQ exponent, -1 < beta < 0 (default -0.5). Only with ``kernel="imq"``.
    batched : bool, default True
        Whether ``score`` takes a batch of points (see above).
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.
    figsize : (float, float), optional
        Size of a new figure in inches.
    show : bool, default False
        Call ``matplotlib.pyplot.show`` after drawing.

    Returns
    -------
    matplotlib.figure.Figure
        The lines carry gids ``"div_x_grad_y_k"``, ``"grad_x_k_score_y"``,
        ``"grad_y_k_score_x"``, ``"k_score_x_score_y"`` and ``"stein_kernel"``.

    Notes
    -----
    With u = x - y', a = 1 / lengthscale^2, t = a u^2 and base kernel k = f(t),

    .. math::

        k_p(x, y') = \\underbrace{-2a f'(t) - 4a^2 u^2 f''(t)}_{\\partial_x\\partial_{y'}k}
                   + \\underbrace{2a u f'(t) s(y')}_{\\partial_x k\\, s(y')}
                   \\underbrace{- 2a u f'(t) s(x)}_{\\partial_{y'} k\\, s(x)}
                   + \\underbrace{f(t) s(x) s(y')}_{k\\, s(x) s(y')}.

    For the IMQ, f(t) = (c^2 + t)^beta: far from y' only the terms with s(x) survive,
    decaying like ``|u|^(2 beta) |s(x)|``; the Gaussian and Matern kernels decay
    exponentially, so that far from y' every term vanishes (which is why their KSD can
    miss draws that drift away, see the Background page). Near y' the curvature term is
    positive. k_p(y', y') = -2 f'(0) a + f(0) s(y')^2 (IMQ: -2 beta c^(2 beta - 2) a +
    c^(2 beta) s(y')^2) is the diagonal that sets the i.i.d. floor.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import steindiag
    >>> fig = steindiag.plot_stein_kernel(lambda x: -x, y=1.0)   # standard normal target
    >>> sorted(line.get_gid() for line in fig.axes[0].lines if line.get_gid())[-1]
    'stein_kernel'
    >>> plt.close(fig)
    """
    if not callable(score):
        raise TypeError(
            "score must be a callable (grad log p of a 1-D target); "
            f"got {type(score).__name__}."
        )
    kernel = make_kernel(kernel, c, beta)
    for name, value in (("y", y), ("lengthscale", lengthscale)):
        if isinstance(value, bool) or not np.isscalar(value) or not np.isreal(value):
            raise TypeError(f"{name} must be a real number; got {type(value).__name__}.")
    y, lengthscale = float(y), float(lengthscale)
    if not (np.isfinite(lengthscale) and lengthscale > 0):
        raise ValueError(f"lengthscale must be a finite number > 0; got {lengthscale}.")
    if not np.isfinite(y):
        raise ValueError(f"y must be finite; got {y}.")
    batched = _check_bool(batched, "batched")
    show = _check_bool(show, "show")
    if x is None:
        x = np.linspace(y - 5.0 * lengthscale, y + 5.0 * lengthscale, 401)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"x must be a 1-D array of at least 2 finite points; got shape {x.shape}.")

    points = np.append(x, y).reshape(1, -1, 1)
    scores = evaluate_score_callable(score, points, batched=batched).reshape(-1)
    if not np.all(np.isfinite(scores)):
        raise ValueError("score returned non-finite values on x or at y.")
    score_x, score_y = scores[:-1], scores[-1]
    terms = _stein_kernel_terms_1d(x, score_x, y, score_y, lengthscale, kernel)
    total = sum(terms.values())

    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.5) if figsize is None else figsize)
    else:
        fig = ax.figure
    for i, (name, values) in enumerate(terms.items()):
        line, = ax.plot(x, values, color=f"C{i}", linewidth=1.3, label=_TERM_LABELS[name])
        line.set_gid(name)
    line, = ax.plot(x, total, color="k", linewidth=2.6, label=r"$k_p(x, y')$ (sum)")
    line.set_gid("stein_kernel")
    ax.axhline(0.0, color="0.8", linewidth=0.8, zorder=0)
    ax.axvline(y, color="0.5", linestyle=":", linewidth=1.0, zorder=0)
    ax.set_xlabel("x")
    ax.set_ylabel("term value")
    ax.set_title(
        f"Langevin Stein kernel, {kernel.describe()} base (lengthscale = "
        f"{lengthscale:g}), y' = {y:g}, s(y') = {score_y + 0.0:.3g}",
        fontsize="medium",
    )
    ax.legend(fontsize="small", frameon=False)
    if show:
        plt.show()
    return fig


# --------------------------------------------------------------------------------------
# plot_mmd
# --------------------------------------------------------------------------------------


def _check_mmd_result(result):
    """The (chain, chain_other) MMD^2 DataArray of ``result``, and its p-values or None."""
    if isinstance(result, xr.Dataset) and "mmd2" in result.data_vars:
        # A saved result read back as a Dataset (``res.to_dataset()``, ``open_dataset``).
        mmd2 = result["mmd2"]
        if "pvalue" in result.data_vars and "pvalue" not in mmd2.coords:
            mmd2 = mmd2.assign_coords(pvalue=result["pvalue"])
        result = mmd2
    if not isinstance(result, xr.DataArray):
        raise TypeError(
            "result must be the xarray.DataArray returned by steindiag.mmd; got "
            f"{type(result).__name__}."
        )
    if tuple(result.dims) != ("chain", "chain_other"):
        raise ValueError(
            "result must have dims ('chain', 'chain_other') (steindiag.mmd without "
            f"other=); got {tuple(result.dims)}."
        )
    pvalue = None
    if "pvalue" in result.coords:
        pvalue = result.coords["pvalue"].transpose("chain", "chain_other").values
    return result, pvalue


def plot_mmd(result, *, alpha=0.01, annotate=True, cmap="viridis", ax=None, figsize=None,
             show=False):
    """Heat map of the MMD^2 between every pair of chains, with p-values if computed.

    Parameters
    ----------
    result : xarray.DataArray
        Output of :func:`steindiag.mmd` without ``other``: MMD^2 with dims
        (``chain``, ``chain_other``), and its ``pvalue`` coordinate if permutations
        were run. A Dataset holding it as ``mmd2`` (a result saved and read back) is
        accepted too.
    alpha : float, default 0.01
        Pairs with p-value below alpha are outlined in red (when p-values are present).
    annotate : bool, default True
        Write each pair's MMD^2 (and p-value) in its cell.
    cmap : str or matplotlib colormap, default "viridis"
    ax : matplotlib.axes.Axes, optional
        Draw into this axes; otherwise a new figure is created.
    figsize : (float, float), optional
    show : bool, default False
        Call ``matplotlib.pyplot.show`` after drawing.

    Returns
    -------
    matplotlib.figure.Figure
        The image has gid ``"mmd2"`` and holds the MMD^2 values unchanged (negative
        values of the unbiased estimate included); the colour scale starts at 0.

    Notes
    -----
    Chains that sample the same distribution have MMD^2 near 0 (the unbiased estimate
    fluctuates around 0 and can be slightly negative); a chain in a different region of
    the space (another mode) stands out as a bright row and column. Drawn with
    matplotlib on every install (arviz-plots has no heat-map layout for it).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((4, 300, 2))
    >>> x[3] += 2.0
    >>> fig = steindiag.plot_mmd(steindiag.mmd(x, n_permutations=100, rng=0))
    >>> fig.axes[0].get_xlabel()
    'chain'
    >>> plt.close(fig)
    """
    result, pvalue = _check_mmd_result(result)
    annotate = _check_bool(annotate, "annotate")
    show = _check_bool(show, "show")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not (
            0 < alpha < 1):
        raise ValueError(f"alpha must be a number in (0, 1); got {alpha!r}.")
    import matplotlib.pyplot as plt

    values = result.values
    rows = [str(v) for v in result["chain"].values]
    columns = [str(v) for v in result["chain_other"].values]
    n_row, n_column = values.shape
    fig, ax, _ = _new_figure(ax, figsize, (1.6 + 0.9 * n_column, 1.2 + 0.8 * n_row))
    vmax = max(float(np.nanmax(values)), np.finfo(float).tiny)
    image = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=vmax, origin="upper")
    image.set_gid("mmd2")
    fig.colorbar(image, ax=ax, label="MMD$^2$ (unbiased)")
    ax.set_xticks(np.arange(n_column), columns)
    ax.set_yticks(np.arange(n_row), rows)
    ax.set_xlabel("chain")
    ax.set_ylabel("chain")
    for i in range(n_row):
        for j in range(n_column):
            if rows[i] == columns[j]:
                continue
            if annotate:
                text = f"{values[i, j]:.2g}"
                if pvalue is not None:
                    text += f"\np={pvalue[i, j]:.2g}"
                bright = values[i, j] > 0.6 * vmax
                ax.text(j, i, text, ha="center", va="center", fontsize="small",
                        color="k" if bright else "w", gid=f"label[{i},{j}]")
            if pvalue is not None and pvalue[i, j] < alpha:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                           edgecolor="r", linewidth=2, gid=f"flag[{i},{j}]"))
    title = "MMD$^2$ between chains"
    if pvalue is not None:
        title += f" (red: p < {alpha:g}, {result.attrs.get('n_permutations', '?')} permutations)"
    ax.set_title(title, fontsize="medium")
    if show:
        plt.show()
    return fig
