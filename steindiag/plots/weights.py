"""plot_weights: the draws on a pair of parameters, with their KSD-optimal weights or the
points Stein thinning kept."""

from dataclasses import dataclass

import numpy as np
import xarray as xr

from steindiag.inputs._columns import read_columns, read_weights
from steindiag.outputs.thinning import SteinThinning
from steindiag.plots._common import (_check_template, _ignore_aes, _map_once, _new_collection,
                                     _new_panels, _no_pc_kwargs, _plain_kwargs,
                                     _shown, _use_arviz_plots, _visual_kwargs)
from steindiag.thinning import stein_thin
from steindiag.weights import stein_weights

_VISUALS = ("draws", "weights", "thinned", "title")
_WEIGHT_COLOR, _THIN_COLOR = "#0072B2", "#D55E00"
_BASE_SIZE = 12.0    # marker area (points^2) of a draw of uniform weight 1 / N


@dataclass
class _Panels:
    x: np.ndarray                 # every draw, pooled (chain-major)
    y: np.ndarray
    xlabel: str
    ylabel: str
    weights: np.ndarray = None    # normalised to sum 1 over the draws
    weights_title: str = ""
    thinned: np.ndarray = None    # positions (in x, y) of the selected points, in order
    thinned_title: str = ""


def _resolve(value, stats, key, is_result, compute, data):
    given = stats.get(key)
    if value is not None and given is not None:
        raise ValueError(f"give the {key} result once: as an argument or as stats[{key!r}].")
    if value is not None:
        return value
    if given is None:
        return None
    if isinstance(given, dict):
        return compute(data, **given)
    return given


def _positions(columns, chain, draw):
    """Positions, in the pooled (chain-major) draws, of the (chain, draw) labels."""
    n_chain, n_draw = columns.values.shape[:2]
    if columns.chain is None or columns.draw is None:
        chain_pos, draw_pos = np.asarray(chain, dtype=np.int64), np.asarray(draw, dtype=np.int64)
    else:
        chain_pos = np.asarray([list(columns.chain).index(c) for c in chain])
        draw_pos = np.asarray([list(columns.draw).index(d) for d in draw])
    return chain_pos * n_draw + draw_pos


def _panels(data, weights, thinning, pair, group, coords, sample_dims, labeller):
    # labeller= labels the parameters where they are read; pair names them by
    # steindiag's own labels (theta[Choate]).
    columns = read_columns(data, group=group, coords=coords, sample_dims=sample_dims,
                           labeller=labeller)
    labels = columns.canonical
    if pair is None:
        if len(labels) < 2:
            raise ValueError(f"plot_weights needs two parameters; the draws have {labels}.")
        pair = labels[:2]
    if (isinstance(pair, str) or len(pair) != 2
            or any(str(p) not in labels for p in pair)):
        raise ValueError(f"pair must name two parameters among {labels}; got {pair!r}.")
    n_chain, n_draw = columns.values.shape[:2]
    flat = columns.values.reshape(n_chain * n_draw, -1)
    k, m = (labels.index(str(p)) for p in pair)
    panels = _Panels(x=flat[:, k], y=flat[:, m], xlabel=columns.labels[k],
                     ylabel=columns.labels[m])
    n = panels.x.size
    if weights is not None:
        w = read_weights(weights, (n_chain, n_draw), columns.chain, columns.draw).ravel()
        panels.weights = w
        kish = 1.0 / np.sum(w**2)
        panels.weights_title = (f"KSD-optimal weights (area \u221d weight): Kish ESS "
                                f"{kish:.0f} of {n} draws")
    if thinning is not None:
        if not isinstance(thinning, SteinThinning):
            raise TypeError("thinning must be the SteinThinning of "
                            "steindiag.stein_thin(..., return_info=True); got "
                            f"{type(thinning).__name__}.")
        panels.thinned = _positions(columns, thinning.chain, thinning.draw)
        distinct = np.unique(panels.thinned).size
        panels.thinned_title = (f"Stein thinning: {panels.thinned.size} points ({distinct} "
                                f"distinct) of {n} draws")
    return panels


def plot_weights(data, weights=None, *, thinning=None, pair=None, group="posterior",
                 coords=None, sample_dims=None, plot_collection=None, backend=None,
                 labeller=None, aes_by_visuals=None, visuals=None, stats=None, ax=None,
                 figsize=None, show=False, **pc_kwargs):
    """The draws on a pair of parameters, with their weights or the points thinning kept.

    One panel per result given: the KSD-optimal weights of :func:`steindiag.stein_weights`
    (each draw a circle whose area is proportional to its weight; a draw of weight 1 / N
    has the size of the grey dots) and the points :func:`steindiag.stein_thin` selected
    (vermilion, over all draws in grey).

    Parameters
    ----------
    data : trace or array
        The draws the weights or thinning were computed on (InferenceData, DataTree,
        Dataset, or a (chain, draw, d) array); their own variables are drawn (for a PyMC
        trace, the constrained values: ``tau``, not ``tau_log__``).
    weights : xarray.DataArray or array, optional
        The result of :func:`steindiag.stein_weights` (matched to the draws by chain and
        draw) or weights of shape (chain, draw).
    thinning : SteinThinning, optional
        The result of ``steindiag.stein_thin(..., return_info=True)``.
    pair : (str, str), optional
        The two parameters, by label (``("mu", "tau")``, ``("tau", "theta[Choate]")``).
        Default: the first two.
    group, coords, sample_dims
        Which draws of ``data`` to read, as for :func:`steindiag.weighted_summary`.
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection instead of a new one.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
    labeller : arviz labeller, optional
        Writes the axis labels: the draws are read with it, as ``labeller=`` of
        :func:`steindiag.weighted_summary` reads them (``pair`` still names steindiag's
        own labels).
    aes_by_visuals : dict, optional
        Visual -> list of aesthetics of the PlotCollection it uses (keys as ``visuals``;
        by default none).
    visuals : dict, optional
        ``False`` hides a visual, a dict passes keyword arguments to it. Keys: ``"draws"``
        (every draw, grey), ``"weights"``, ``"thinned"``, ``"title"``.
    stats : dict, optional
        ``{"stein_weights": {...}}`` and/or ``{"stein_thin": {...}}``: keyword arguments of
        those functions, to compute the results from ``data`` (``stein_thin`` needs
        ``n_selected``; ``return_info=True`` is set); or the results themselves.
    ax : matplotlib.axes.Axes or array of them, optional
        Draw with plain matplotlib into these axes (one per panel), even when arviz-plots
        is installed (ArviZ 0.x convention).
    figsize : (float, float), optional
        Figure size in inches when a new figure is created.
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap`.

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        A PlotCollection when arviz-plots is installed and ``ax`` is None; otherwise the
        matplotlib Figure (scatter collections with gids ``"draws"``, ``"weights"``,
        ``"thinned"``).

    Notes
    -----
    Weights and thinning only choose among the draws: a region the chains never visited
    gets no weight and no point, whatever the picture suggests. Check the draws with
    :func:`steindiag.diagnose` first.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 2)) + 0.3   # biased draws
    >>> w = steindiag.stein_weights(x, score=-x)
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_weights(x, w, ax=ax)
    >>> ax.get_xlabel(), ax.get_ylabel()
    ('x[0]', 'x[1]')
    >>> plt.close(fig)
    """
    visuals, aes_by_visuals, stats, show = _check_template(
        _VISUALS, ("stein_weights", "stein_thin"), visuals, aes_by_visuals, stats, ax, backend,
        show, plot_collection)
    weights = _resolve(weights, stats, "stein_weights", None, stein_weights, data)
    thinning = _resolve(thinning, stats, "stein_thin", None,
                        lambda d, **kw: stein_thin(d, **{**kw, "return_info": True}), data)
    if weights is None and thinning is None:
        raise TypeError("plot_weights needs weights= (steindiag.stein_weights) or thinning= "
                        "(steindiag.stein_thin(..., return_info=True)), or stats= to "
                        "compute them.")
    panels = _panels(data, weights, thinning, pair, group, coords, sample_dims, labeller)
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_collection(panels, plot_collection, backend, aes_by_visuals, visuals,
                                figsize, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_matplotlib(panels, visuals, ax, figsize, show)


def _names(panels):
    return [name for name, value in (("weights", panels.weights),
                                     ("thinned", panels.thinned)) if value is not None]


def _plot_matplotlib(panels, visuals, ax, figsize, show):
    names = _names(panels)
    fig, axes = _new_panels(ax, len(names), figsize or (5.0 * len(names), 4.6), f": {names}")
    kw_draws = _visual_kwargs(visuals, "draws", {"color": "0.75", "s": _BASE_SIZE / 3,
                                                 "linewidths": 0})
    kw_title = _visual_kwargs(visuals, "title", {"fontsize": "medium"})
    for name, target in zip(names, axes):
        if kw_draws is not None:
            target.scatter(panels.x, panels.y, gid="draws", **kw_draws)
        if name == "weights":
            kw = _visual_kwargs(visuals, "weights", {"color": _WEIGHT_COLOR, "alpha": 0.45,
                                                     "linewidths": 0})
            keep = panels.weights > 0
            if kw is not None:
                target.scatter(panels.x[keep], panels.y[keep],
                               s=_BASE_SIZE * panels.weights[keep] * panels.x.size,
                               gid="weights", **kw)
            title = panels.weights_title
        else:
            kw = _visual_kwargs(visuals, "thinned", {"color": _THIN_COLOR, "s": 36,
                                                     "edgecolors": "k", "linewidths": 0.6})
            if kw is not None:
                target.scatter(panels.x[panels.thinned], panels.y[panels.thinned],
                               gid="thinned", **kw)
            title = panels.thinned_title
        target.set_xlabel(panels.xlabel)
        target.set_ylabel(panels.ylabel)
        if kw_title is not None:
            target.set_title(title, **kw_title)
    return _shown(fig, show)


def _plot_collection(panels, pc, backend, aes_by_visuals, visuals, figsize, show, pc_kwargs):
    from arviz_plots.visuals import labelled_title, labelled_x, labelled_y, scatter_xy

    scatter_xy = _plain_kwargs(scatter_xy)
    names = _names(panels)
    pc = _new_collection(pc, xr.Dataset({name: xr.DataArray(0.0) for name in names}),
                         backend=backend, figsize=figsize or (5.0 * len(names), 4.6),
                         pc_kwargs=pc_kwargs, cols=["__variable__"])

    def points(name, index):
        return xr.DataArray(np.stack([panels.x[index], panels.y[index]]),
                            dims=["plot_axis", "point"], coords={"plot_axis": ["x", "y"]},
                            name=name)

    every = np.arange(panels.x.size)
    kw_draws = _visual_kwargs(visuals, "draws", {"color": "B3", "size": _BASE_SIZE / 3,
                                                 "width": 0})
    kw_title = _visual_kwargs(visuals, "title", {"color": "B1", "size": 10})
    for name in names:
        anchor = xr.DataArray(0.0, name=name)
        if kw_draws is not None:
            pc.map(scatter_xy, f"draws_{name}", data=points(name, every),
                   ignore_aes=_ignore_aes(pc, aes_by_visuals, "draws"), **kw_draws)
        if name == "weights":
            kw = _visual_kwargs(visuals, "weights", {"color": _WEIGHT_COLOR, "alpha": 0.45,
                                                     "width": 0})
            keep = np.flatnonzero(panels.weights > 0)
            if kw is not None:
                pc.map(scatter_xy, "weights", data=points(name, keep),
                       size=_BASE_SIZE * panels.weights[keep] * panels.x.size,
                       ignore_aes=_ignore_aes(pc, aes_by_visuals, "weights"), **kw)
            title = panels.weights_title
        else:
            kw = _visual_kwargs(visuals, "thinned", {"color": _THIN_COLOR, "size": 36,
                                                     "edgecolor": "B1", "width": 0.6})
            if kw is not None:
                pc.map(scatter_xy, "thinned", data=points(name, panels.thinned),
                       ignore_aes=_ignore_aes(pc, aes_by_visuals, "thinned"), **kw)
            title = panels.thinned_title
        _map_once(pc, labelled_x, f"xlabel_{name}", anchor, text=panels.xlabel, color="B1")
        _map_once(pc, labelled_y, f"ylabel_{name}", anchor, text=panels.ylabel, color="B1")
        if kw_title is not None:
            _map_once(pc, labelled_title, f"title_{name}", anchor, text=title, **kw_title)
    return _shown(pc, show)
