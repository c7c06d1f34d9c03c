"""plot_mmd: heat map of the MMD^2 between every pair of chains."""

import numpy as np
import xarray as xr

from steindiag._mmd import mmd
from steindiag._validate import check_probability
from steindiag.plots._common import (_check_bool, _check_template, _map_once, _new_collection,
                                     _new_figure, _no_pc_kwargs, _plain_kwargs, _labelled_result,
                                     _set_once, _set_yticks, _shown, _use_arviz_plots,
                                     _visual_kwargs)

_VISUALS = ("cells", "labels", "flags", "title")


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


def _is_mmd_result(value):
    # Any DataArray is taken as a result (and checked): draws come as arrays or traces.
    return isinstance(value, xr.DataArray) or (
        isinstance(value, xr.Dataset) and "mmd2" in value.data_vars)


def _chain_names(chains, labeller):
    """The chains' labels: their coordinate values, or the labeller's ``sel_to_str``."""
    if labeller is None:
        return [str(chain) for chain in chains]
    return [labeller.sel_to_str({"chain": chain}, {"chain": i}) for i, chain in enumerate(chains)]


def plot_mmd(result, *, alpha=0.01, annotate=True, cmap="viridis", plot_collection=None,
             backend=None, labeller=None, visuals=None, stats=None, ax=None, figsize=None,
             show=False, **pc_kwargs):
    """Heat map of the MMD^2 between every pair of chains, with p-values if computed.

    Parameters
    ----------
    result : xarray.DataArray or draws
        Output of :func:`steindiag.mmd` without ``other``: MMD^2 with dims
        (``chain``, ``chain_other``), and its ``pvalue`` coordinate if permutations
        were run. A Dataset holding it as ``mmd2`` (a result saved and read back) is
        accepted too. Anything else is taken as draws:
        ``steindiag.mmd(result, **stats["mmd"])``.
    alpha : float, default 0.01
        Pairs with p-value below alpha are outlined in red (when p-values are present).
    annotate : bool, default True
        Write each pair's MMD^2 (and p-value) in its cell.
    cmap : str or matplotlib colormap, default "viridis"
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection (one plot) instead of a new one.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
    labeller : arviz labeller, optional
        Writes the chain labels (``sel_to_str``); draws are compared with it
        (``mmd(..., labeller=labeller)``).
    visuals : dict, optional
        PlotCollection path: ``False`` hides a visual, a dict passes keyword arguments to
        it. Keys: ``"cells"`` (a filled square per pair), ``"labels"`` (the numbers),
        ``"flags"`` (the red outlines), ``"title"``. The heat map has no aesthetic
        mapping, so there is no ``aes_by_visuals=``.
    stats : dict, optional
        ``{"mmd": result}`` or ``{"mmd": {"n_permutations": 1000, "rng": 0}}``
        (keyword arguments of :func:`steindiag.mmd` when the first argument is draws).
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes (an image and a colour bar), even when
        arviz-plots is installed.
    figsize : (float, float), optional
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap`.

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        With arviz-plots and no ``ax``: a PlotCollection whose ``viz["cells"]`` holds one
        filled square per pair (coloured on the same scale: ``cmap`` from 0 to the
        largest value; the numbers are written in the cells). Otherwise the matplotlib
        Figure: the image has gid ``"mmd2"`` and holds the MMD^2 values unchanged
        (negative values of the unbiased estimate included); the colour scale starts at 0.

    Notes
    -----
    Chains that sample the same distribution have MMD^2 near 0 (the unbiased estimate
    fluctuates around 0 and can be slightly negative); a chain in a different region of
    the space (another mode) stands out as a bright row and column.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((4, 300, 2))
    >>> x[3] += 2.0
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_mmd(steindiag.mmd(x, n_permutations=100, rng=0), ax=ax)
    >>> ax.get_xlabel()
    'chain'
    >>> plt.close(fig)
    """
    visuals, _, stats, show = _check_template(_VISUALS, ("mmd",), visuals, None, stats, ax,
                                              backend, show, plot_collection)
    annotate = _check_bool(annotate, "annotate")
    alpha = check_probability(alpha, "alpha")
    if isinstance(result, (np.ndarray, list, tuple)) and "mmd" not in stats:
        raise TypeError("result must be the xarray.DataArray returned by steindiag.mmd, or "
                        f"draws with stats={{'mmd': {{...}}}}; got {type(result).__name__}.")
    result, pvalue = _check_mmd_result(_labelled_result(result, stats, "mmd", _is_mmd_result,
                                                        mmd, labeller)[0])
    if labeller is None:
        rows = [str(v) for v in result["chain"].values]
        columns = [str(v) for v in result["chain_other"].values]
    else:
        rows = [labeller.sel_to_str({"chain": v}, {"chain": i})
                for i, v in enumerate(result["chain"].values)]
        columns = [labeller.sel_to_str({"chain": v}, {"chain": i})
                   for i, v in enumerate(result["chain_other"].values)]
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_collection(result, pvalue, rows, columns, alpha, annotate, cmap,
                                plot_collection, backend, visuals, figsize, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    import matplotlib.pyplot as plt

    values = result.values
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
    ax.set_title(_title(result, pvalue, alpha), fontsize="medium")
    return _shown(fig, show)


def _title(result, pvalue, alpha):
    title = "MMD$^2$ between chains"
    if pvalue is not None:
        title += f" (red: p < {alpha:g}, {result.attrs.get('n_permutations', '?')} permutations)"
    return title


def _plot_collection(result, pvalue, rows, columns, alpha, annotate, cmap, pc, backend,
                     visuals, figsize, show, pc_kwargs):
    import matplotlib

    from arviz_plots.visuals import (annotate_xy, fill_between_y, labelled_title, labelled_x,
                                     labelled_y, line_xy, set_xlim, set_xticks, set_ylim)

    fill_between_y, annotate_xy = _plain_kwargs(fill_between_y), _plain_kwargs(annotate_xy)
    values = result.transpose("chain", "chain_other").values
    n_row, n_column = values.shape
    pc = _new_collection(pc, xr.Dataset({"mmd2": xr.DataArray(0.0)}), backend=backend,
                         figsize=figsize or (1.6 + 0.9 * n_column, 1.2 + 0.8 * n_row),
                         pc_kwargs=pc_kwargs)
    colormap = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    vmax = max(float(np.nanmax(values)), np.finfo(float).tiny)
    shade = np.clip(values / vmax, 0.0, 1.0)
    colors = np.vectorize(lambda v: matplotlib.colors.to_hex(colormap(v)), otypes=[object])(
        shade)
    # Row i at height n_row - 1 - i: the first chain on top, as in the matplotlib image.
    heights = n_row - 1 - np.arange(n_row, dtype=np.float64)
    cells = xr.DataArray(values, dims=["chain", "chain_other"], name="mmd2")
    kw = _visual_kwargs(visuals, "cells", {"alpha": 1.0})
    kw_labels = _visual_kwargs(visuals, "labels", {"size": 8, "horizontal_align": "center",
                                                  "vertical_align": "center"})
    kw_flags = _visual_kwargs(visuals, "flags", {"color": "red", "width": 2.0})
    for i in range(n_row):
        for j in range(n_column):
            x = np.array([j - 0.5, j + 0.5])
            cell = cells.isel(chain=i, chain_other=j)
            if kw is not None:
                _map_once(pc, fill_between_y, f"cells_{i}_{j}", cell.rename("mmd2"), x=x,
                          y_bottom=np.full(2, heights[i] - 0.5),
                          y_top=np.full(2, heights[i] + 0.5), **{"color": colors[i, j], **kw})
            if rows[i] == columns[j]:
                continue
            if annotate and kw_labels is not None:
                text = f"{values[i, j]:.2g}"
                if pvalue is not None:
                    text += f"\np={pvalue[i, j]:.2g}"
                _map_once(pc, annotate_xy, f"labels_{i}_{j}", cell, text=text, x=float(j),
                          y=heights[i],
                          **{"color": "black" if shade[i, j] > 0.6 else "white", **kw_labels})
            if pvalue is not None and pvalue[i, j] < alpha and kw_flags is not None:
                outline = xr.DataArray(
                    [[j - 0.5, j + 0.5, j + 0.5, j - 0.5, j - 0.5],
                     heights[i] + np.array([-0.5, -0.5, 0.5, 0.5, -0.5])],
                    dims=["plot_axis", "corner"], coords={"plot_axis": ["x", "y"]},
                    name="mmd2")
                _map_once(pc, line_xy, f"flags_{i}_{j}", outline, **kw_flags)
    anchor = xr.DataArray(0.0, name="mmd2")
    _set_once(pc, set_xlim, "xlim", anchor, limits=(-0.5, n_column - 0.5))
    _set_once(pc, set_ylim, "ylim", anchor, limits=(-0.5, n_row - 0.5))
    _set_once(pc, set_xticks, "xticks", anchor, values=list(range(n_column)), labels=columns)
    _set_once(pc, _set_yticks, "yticks", anchor, values=list(heights), labels=rows)
    _map_once(pc, labelled_x, "xlabel", anchor, text="chain", color="B1")
    _map_once(pc, labelled_y, "ylabel", anchor, text="chain", color="B1")
    kw = _visual_kwargs(visuals, "title", {"color": "B1", "size": 10})
    if kw is not None:
        _map_once(pc, labelled_title, "title", anchor,
                  text=_title(result, pvalue, alpha).replace("MMD$^2$", "MMD^2")
                  + f"\ncolour: {cmap if isinstance(cmap, str) else 'cmap'} from 0 to {vmax:.2g}",
                  **kw)
    return _shown(pc, show)
