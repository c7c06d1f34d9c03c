"""Attributes every netCDF and Zarr writer can store, and their decoding.

Every result's ``attrs`` go through :func:`netcdf_attrs` where the result is built, so
``result.to_netcdf(path)`` works with each engine xarray offers (SciPy's netCDF3 writer
included, the only one of a default install without netCDF4 or h5netcdf) and
``to_zarr``, and the reopened result holds the same values.

netCDF3 attributes are a string or a 1-D array of numbers. The conversions:

- ``bool`` -> ``int`` (0 or 1);
- ``None`` -> ``""``;
- a list or tuple of strings (e.g. ``parameters``), an empty list, a list mixing types,
  or a dict -> a JSON string (``json.loads`` gives the list or dict back; a separator
  would not round-trip: ArviZ labels such as ``theta[0, 1]`` hold commas);
- a list or tuple of numbers -> a 1-D float64 (or int64) array;
- an array -> 1-D (a 0-d array becomes its number; a 2-D array is raveled row-major, its
  layout recorded by the caller);
- NumPy scalars -> Python numbers; strings and Python numbers unchanged.

Names that SciPy's netCDF3 writer keeps for itself (it sets global attributes as
attributes of its file object, so an attribute ``variables`` replaces the file's table of
variables and the write fails, leaving a corrupt file) are renamed: ``variables`` (the
trace's variables read) becomes ``var_names``, ArviZ's name for them; any other such name
``attr_<name>``.
"""

import json

import numpy as np

__all__ = ["netcdf_attrs", "netcdf_value", "decode_list", "provenance"]


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"attribute value of type {type(value).__name__} cannot be stored.")


def netcdf_value(value):
    """One attribute value as a type every netCDF/Zarr writer stores unchanged."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, dict):
        return json.dumps(value, default=_json_default)
    if isinstance(value, (list, tuple)):
        items = list(value)
        if items and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                         for v in items):
            return np.asarray(items, dtype=np.int64)
        if items and all(isinstance(v, (int, float, np.integer, np.floating))
                         and not isinstance(v, (bool, np.bool_)) for v in items):
            return np.asarray(items, dtype=np.float64)
        return json.dumps(items, default=_json_default)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return netcdf_value(value.item())
        if value.dtype.kind in "iuf":
            return value.ravel().copy()
        if value.dtype.kind == "b":
            return value.ravel().astype(np.int8)
        return json.dumps(value.ravel().tolist(), default=_json_default)
    return str(value)


# Attributes of scipy.io.netcdf_file and netcdf_variable objects (scipy/io/_netcdf.py).
_SCIPY_RESERVED = {"variables", "dimensions", "filename", "fp", "mode", "use_mmap", "shape",
                   "version_byte", "maskandscale", "data"}
_RENAMED = {"variables": "var_names"}


def netcdf_attrs(attrs):
    """A copy of ``attrs`` with every value converted by :func:`netcdf_value` and the
    names SciPy's netCDF3 writer reserves renamed."""
    out = {}
    for key, value in attrs.items():
        key = str(key)
        if key in _SCIPY_RESERVED:
            key = _RENAMED.get(key, f"attr_{key}")
        out[key] = netcdf_value(value)
    return out


def decode_list(value):
    """A list attribute as written by :func:`netcdf_attrs` (JSON string or array) -> list."""
    if isinstance(value, str):
        return json.loads(value) if value else []
    return np.asarray(value).tolist()


_PROVENANCE = ("space", "group")


def provenance(input_attrs):
    """The input attributes every result records (``space``, and ``group`` for a trace)."""
    out = {key: input_attrs[key] for key in _PROVENANCE if key in input_attrs}
    out.setdefault("space", "as given")
    return out
