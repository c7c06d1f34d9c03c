"""Shared checks and helpers of the plots (validation, figures, log ticks)."""

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


def _chain_label(chain):
    return f"chain {chain}"


def _new_figure(ax, figsize, default_size):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax, False
    fig, ax = plt.subplots(figsize=default_size if figsize is None else figsize,
                           layout="constrained")
    return fig, ax, True


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
