"""plot_mmd: heat map of the MMD^2 between every pair of chains."""

import numpy as np
import xarray as xr

from steindiag.plots._common import _check_bool, _new_figure


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
