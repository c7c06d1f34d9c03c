"""Shared checks and helpers of the plots (validation, figures, log ticks), and the parts of
arviz-plots' template every plot shares: ``plot_collection=``, ``labeller=``,
``aes_by_visuals=``, ``stats=`` (a precomputed result, or the keyword arguments of the
public function that computes it from draws)."""

import numpy as np
import xarray as xr

_PATH_VARS = ("ksd", "ksd_pooled", "ksd_iid", "ksd_iid_pooled")


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


def _checked_dict(value, name, allowed):
    """A copy of the dict ``value`` (None: an empty one), its keys among ``allowed``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict; got {type(value).__name__}.")
    unknown = set(value) - set(allowed)
    if unknown:
        raise ValueError(f"{name} keys must be among {list(allowed)}; got {sorted(unknown)}.")
    return dict(value)


def _check_visuals(visuals, allowed):
    visuals = _checked_dict(visuals, "visuals", allowed)
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


def _check_target(ax, backend, show, plot_collection=None):
    show = _check_bool(show, "show")
    if ax is not None and backend is not None:
        raise ValueError(
            "ax and backend cannot be used together: ax= draws with plain matplotlib, "
            "backend= selects an arviz-plots backend."
        )
    if ax is not None and plot_collection is not None:
        raise ValueError(
            "ax and plot_collection cannot be used together: ax= draws with plain "
            "matplotlib, plot_collection= draws into an arviz-plots PlotCollection."
        )
    if plot_collection is not None and not hasattr(plot_collection, "map"):
        raise TypeError(
            "plot_collection must be an arviz_plots.PlotCollection; got "
            f"{type(plot_collection).__name__}."
        )
    return show


def _use_arviz_plots(ax, backend, plot_collection=None):
    """ArviZ 1.x look (arviz_plots) unless the caller passed a matplotlib ``ax``."""
    if plot_collection is not None:
        return True
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


def _chain_label(chain):
    return f"chain {chain}"


def _new_figure(ax, figsize, default_size):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax, False
    fig, ax = plt.subplots(figsize=default_size if figsize is None else figsize,
                           layout="constrained")
    return fig, ax, True


def _new_panels(ax, n_panel, figsize, panels=""):
    """A figure of ``n_panel`` axes side by side, or the ``ax`` given (as many axes)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, axes = plt.subplots(1, n_panel, layout="constrained", squeeze=False,
                                 figsize=figsize)
        return fig, axes.ravel()
    axes = np.atleast_1d(np.asarray(ax, dtype=object)).ravel()
    if axes.size != n_panel:
        raise ValueError(f"ax must hold {n_panel} axes (one per panel{panels}); got "
                         f"{axes.size}.")
    return axes[0].figure, axes


def _shown(figure, show):
    """``figure`` (a matplotlib Figure or a PlotCollection), shown first if ``show``."""
    if show:
        if hasattr(figure, "viz"):   # a PlotCollection: its backend's show
            figure.show()
        else:
            import matplotlib.pyplot as plt

            plt.show()
    return figure


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


def _ratio_text(ratio):
    return f"\u00d7{ratio:.1f}" if ratio < 10 else f"\u00d7{ratio:.0f}"


def _draw_ksd_rows(ax, rows, ksd, floor, colors, gids, visuals, segment, ratio):
    """matplotlib: per row, the segment from the i.i.d. floor to the KSD, the floor (a bar),
    the KSD (a dot in the row's colour) and the ratio KSD / floor (text); ``segment`` and
    ``ratio`` are the plot's defaults for those visuals. The x axis is made logarithmic."""
    kw_segment = _visual_kwargs(visuals, "segment", segment)
    kw_iid = _visual_kwargs(visuals, "ksd_iid", {"color": "0.25", "marker": "|", "markersize": 14,
                                                  "markeredgewidth": 2, "linestyle": "none"})
    kw_ksd = _visual_kwargs(visuals, "ksd", {"marker": "o", "markersize": 8, "linestyle": "none"})
    kw_ratio = _visual_kwargs(visuals, "ratio", ratio)
    for row, value, base, color, gid in zip(rows, ksd, floor, colors, gids):
        if kw_segment is not None:
            ax.plot([base, value], [row, row], **kw_segment)[0].set_gid(f"segment{gid}")
        if kw_iid is not None:
            ax.plot([base], [row], **kw_iid)[0].set_gid(f"ksd_iid{gid}")
        if kw_ksd is not None:
            ax.plot([value], [row], **{"color": color, **kw_ksd})[0].set_gid(f"ksd{gid}")
        if kw_ratio is not None:
            ax.text(max(value, base) * 1.12, row, _ratio_text(value / base),
                    **kw_ratio).set_gid(f"ratio{gid}")
    ax.set_xscale("log")


def _no_pc_kwargs(pc_kwargs):
    if pc_kwargs:
        raise TypeError(
            f"unexpected keyword arguments {sorted(pc_kwargs)}: they go to "
            "arviz_plots.PlotCollection.wrap, which is not used with ax= or without "
            "arviz-plots."
        )


# --------------------------------------------------------------------------------------
# arviz-plots' template: aes_by_visuals, stats, labeller, plot_collection
# --------------------------------------------------------------------------------------


def _check_aes_by_visuals(aes_by_visuals, allowed):
    """A copy of ``aes_by_visuals`` (visual -> aesthetics), keys checked."""
    aes_by_visuals = _checked_dict(aes_by_visuals, "aes_by_visuals", allowed)
    for key, value in aes_by_visuals.items():
        if isinstance(value, str) or not np.iterable(value):
            raise TypeError(f"aes_by_visuals[{key!r}] must be a list of aesthetics such as "
                            f"['color']; got {value!r}.")
    return {key: list(value) for key, value in aes_by_visuals.items()}


def _ignore_aes(pc, aes_by_visuals, visual, default=()):
    """The aesthetics of ``pc`` that ``visual`` does not use (``aes_by_visuals`` or
    ``default``), for ``PlotCollection.map(..., ignore_aes=...)``."""
    used = aes_by_visuals.get(visual, default)
    return set(pc.aes_set).difference(used)


def _check_template(allowed, stats_keys, visuals, aes_by_visuals, stats, ax, backend, show,
                    plot_collection):
    """The arguments of arviz-plots' template every plot shares, checked once:
    ``visuals`` and ``aes_by_visuals`` (keys among ``allowed``), ``stats`` (computation ->
    result or keyword arguments, keys among ``stats_keys``) as dicts, and the drawing
    target; returns those three and ``show``."""
    return (_check_visuals(visuals, allowed), _check_aes_by_visuals(aes_by_visuals, allowed),
            _checked_dict(stats, "stats", stats_keys),
            _check_target(ax, backend, show, plot_collection))


def _map_once(pc, fun, name, data, **kwargs):
    """``PlotCollection.map`` ignoring every aesthetic: one artist per plot."""
    pc.map(fun, name, data=data, ignore_aes=set(pc.aes_set), **kwargs)


def _set_once(pc, fun, name, data, **kwargs):
    """An axes setting (scale, limits, ticks) once per plot, no artist stored."""
    _map_once(pc, fun, name, data, store_artist=False, **kwargs)


def _result_or_compute(data, stats, key, is_result, compute):
    """arviz-plots' ``stats=`` rule: a precomputed result (``data`` itself or
    ``stats[key]``) is drawn as it is; otherwise ``compute(data, **stats[key])`` (the public
    function that makes that result) computes it from the draws."""
    given = stats.get(key)
    if given is not None and not isinstance(given, dict):
        if data is not None:
            raise ValueError(f"give the {key} result once: as the first argument or as "
                             f"stats[{key!r}], not both.")
        return given
    if is_result(data):
        if given:
            raise ValueError(f"stats[{key!r}] holds keyword arguments of steindiag.{key}, "
                             "which apply to draws; the first argument is already its result.")
        return data
    if data is None:
        raise TypeError(f"nothing to plot: give draws, or the result of steindiag.{key}.")
    return compute(data, **(given or {}))


def _labelled_result(data, stats, key, is_result, compute, labeller):
    """(result, labeller still to apply to its parameter labels), by
    :func:`_result_or_compute`. A result computed here from draws is computed with
    ``labeller`` (the input layer labels each parameter from its variable and
    coordinates, as the function called alone would): its labels are drawn as they
    are. A precomputed result's flat labels are relabelled by ``labeller``
    (:func:`_parameter_label`). An object with ``sel_to_str`` only labels the chains."""
    computed = []
    flat = labeller if hasattr(labeller, "make_label_flat") else None

    def compute_labelled(draws, **kwargs):
        computed.append(True)
        return compute(draws, **{"labeller": flat, **kwargs})

    result = _result_or_compute(data, stats, key, is_result, compute_labelled)
    return result, None if computed else labeller


def _chain_labels(chains, labeller):
    """``chain 0``, ``chain 1``, ... or, with an ArviZ labeller, its ``sel_to_str``."""
    if labeller is None:
        return [_chain_label(chain) for chain in chains]
    return [labeller.sel_to_str({"chain": chain}, {"chain": i}) for i, chain in enumerate(chains)]


def _parameter_label(label, labeller):
    """A parameter's flat label (``theta[Choate]``) as an ArviZ labeller writes it.

    The results store flat labels only: the variable name and the coordinate values are
    read back from them, the dimensions are named ``<var>_dim_<k>`` and the positions are
    not known (the labeller receives the coordinate values as ``isel`` too).
    """
    if labeller is None:
        return str(label)
    label = str(label)
    if label.endswith("]") and "[" in label:
        name, inner = label[:-1].split("[", 1)
        values = [value.strip() for value in inner.split(",")]
        sel = {f"{name}_dim_{k}": value for k, value in enumerate(values)}
        return labeller.make_label_flat(name, sel, dict(sel))
    return labeller.make_label_flat(label, {}, {})


def _new_collection(pc, layout, *, backend, figsize, pc_kwargs, cols=None, aes=None,
                    default_aes=None):
    """The caller's PlotCollection ``pc`` (then ``pc_kwargs``, which configure a new one,
    must be empty), or a new one wrapped on ``layout``: our figure size, ``aes`` under the
    caller's ``aes=``, or ``default_aes`` when the caller gives none."""
    from arviz_base import rcParams
    from arviz_plots import PlotCollection

    if pc is not None:
        _no_pc_kwargs(pc_kwargs)
        return pc
    if backend is None:
        backend = rcParams["plot.backend"]
    pc_kwargs = {"aes": default_aes, **pc_kwargs} if default_aes else dict(pc_kwargs)
    pc_kwargs["aes"] = {**(aes or {}), **(pc_kwargs.get("aes") or {})}
    pc_kwargs.setdefault("cols", cols if cols is not None else [])
    figure_kwargs = _figure_kwargs(pc_kwargs, backend, figsize)
    return PlotCollection.wrap(layout, backend=backend, figure_kwargs=figure_kwargs,
                               **pc_kwargs)


def _set_yticks(da, target, values, labels):
    """arviz-plots visual: y ticks at ``values`` labelled ``labels`` (any backend)."""
    from arviz_plots.plot_collection import backend_from_object

    return backend_from_object(target).yticks(values, labels, target)


def _suptitle(pc, text):
    """The figure's title (matplotlib: ``Figure.suptitle``; other backends: none)."""
    if pc.backend == "matplotlib" and text:
        pc.viz["figure"].item().suptitle(text, fontsize="medium")


# Verdict colours (Okabe-Ito, readable by colour-blind readers), the same on both paths.
VERDICT_COLORS = {"fits": "#009E73", "does not fit": "#D55E00", "inconclusive": "#E69F00"}
VERDICT_OTHER = "#999999"


def _verdict_color(verdict):
    return VERDICT_COLORS.get(str(verdict), VERDICT_OTHER)


def _plain_kwargs(visual):
    """``visual`` with DataArray keyword arguments (subset per artist by
    ``PlotCollection.map``) passed as plain values: colours and sizes per chain."""

    def wrapped(da, target, **kwargs):
        kwargs = {key: (value.item() if value.ndim == 0 else value.values)
                  if isinstance(value, xr.DataArray) else value
                  for key, value in kwargs.items()}
        return visual(da, target, **kwargs)

    wrapped.__name__ = getattr(visual, "__name__", "visual")
    return wrapped
