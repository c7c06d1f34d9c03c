"""Turn any case's result into files and compare recomputed results with them.

Shared by ``make_snapshot.py`` (writes) and ``tests/test_snapshot.py`` (compares), so both
sides flatten a result in exactly the same way.

A result is flattened into *parts*, each an ``xarray.Dataset`` (one netCDF file each), and
one text (``<case>.txt``):

- ``xarray.Dataset`` (``Diagnosis`` included): one part, ``""``;
- ``xarray.DataArray``: one part holding it as variable ``__dataarray__`` (its name is in
  the text);
- ``xarray.DataTree`` / ``arviz.InferenceData``: one part per group (``posterior``, ...);
- ``numpy.ndarray``: one part with variable ``array``;
- ``pandas.DataFrame``: ``xr.Dataset.from_dataframe`` (index dim ``index``), its
  ``.attrs`` as the Dataset's attrs;
- dataclasses (SteinThinning, SteinVariational, MinKSDFit): each field flattened under
  the field's name (``thinned.posterior``, ``ksd``, ...); scalar fields and the ``attrs``
  dict go to the attrs of the part ``fields``;
- a matplotlib ``Figure``: part ``""`` holds every drawn array, ``<case>.json`` the
  strings (titles, labels, scales, texts, legend entries).

The text records the result's type, the structure of every part (each variable's dims,
shape and in-memory dtype, each attr's in-memory type: the netCDF3 files coerce int64 to
int32 and bool to int8, and the structure keeps the original), ``str(result)`` for a
report (Diagnosis) or the ``repr`` of a dataclass, and the warnings the call raised.

Files are written with scipy's netCDF3 engine (available on every stack: h5netcdf is
not). Comparison: the recomputed parts go through the same netCDF3 encoding in memory
and are then compared with the stored files bitwise.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
import xarray as xr

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
ENGINE = "scipy"
REGENERATE = "python tests/snapshot/make_snapshot.py"

# Attribute keys whose value legitimately varies between runs or installs: their key and
# type are still compared (through the structure in the .txt), their value is not.
IGNORED_ATTRS = frozenset({
    "steindiag_version",          # add_scores' provenance: the installed version string
    "created_at",                 # ArviZ converters' time stamp (az.from_numpyro, ...)
    "arviz_version",
    "inference_library_version",
    "creation_library_version",
    "creation_library_language",
})


def stack_name():
    """``pymc5`` / ``pymc6``: the PyMC major version (results may differ in rounding)."""
    import pymc

    return f"pymc{int(pymc.__version__.split('.')[0])}"


def data_dir(stack=None):
    return DATA / (stack or stack_name())


# ----------------------------------------------------------------------------- flatten


def _safe_attr(value):
    """A netCDF3-storable attr value (the in-memory type is kept in the structure)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (str, int, float, np.integer, np.floating)):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and value.ndim <= 1:
        return value.astype(np.int8) if value.dtype.kind == "b" else value
    if isinstance(value, np.ndarray):
        return json.dumps(value.tolist())
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def _attr_type(value):
    if isinstance(value, np.ndarray):
        return f"ndarray[{value.dtype}, {value.shape}]"
    return type(value).__name__


def _safe_attrs(attrs):
    return {str(k): _safe_attr(v) for k, v in attrs.items()}


def _clean_dataset(ds):
    """A copy of ``ds`` with netCDF3-storable attrs, no encoding carried over."""
    ds = ds.copy(deep=False)
    ds.attrs = _safe_attrs(ds.attrs)
    for name in ds.variables:
        var = ds.variables[name]
        var.attrs = _safe_attrs(var.attrs)
        var.encoding = {}
    ds.encoding = {}
    return ds


def _dataset_from_frame(frame):
    frame = frame.copy()
    frame.index = frame.index.rename(frame.index.name or "index")
    frame.columns = [str(c) for c in frame.columns]
    ds = xr.Dataset.from_dataframe(frame)
    ds.attrs = dict(frame.attrs)
    return ds


def _is_figure(obj):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return False
    return isinstance(obj, Figure)


def _is_inference_data(obj):
    return type(obj).__name__ == "InferenceData" and hasattr(obj, "groups")


def flatten(result):
    """(parts {name: Dataset}, type line, report text, strings dict or None)."""
    parts, strings = {}, None
    report = ""
    kind = f"{type(result).__module__}.{type(result).__qualname__}"

    def add(prefix, obj):
        nonlocal report, strings
        join = (lambda name: f"{prefix}.{name}" if prefix else name)
        if isinstance(obj, xr.DataTree):
            for node in obj.subtree:
                ds = node.to_dataset(inherit=False)
                if node.is_root and not ds.variables and not ds.attrs:
                    continue
                parts[join(node.path.strip("/") or "root")] = ds
        elif _is_inference_data(obj):
            for group in obj.groups():
                parts[join(group)] = getattr(obj, group)
        elif isinstance(obj, xr.Dataset):
            # a plain Dataset (Diagnosis is a subclass)
            parts[prefix] = xr.Dataset(
                {name: var.variable for name, var in obj.data_vars.items()},
                coords={name: var.variable for name, var in obj.coords.items()},
                attrs=dict(obj.attrs))
        elif isinstance(obj, xr.DataArray):
            parts[prefix] = obj.to_dataset(name="__dataarray__")
        elif isinstance(obj, np.ndarray):
            dims = tuple(f"array_dim_{i}" for i in range(obj.ndim))
            parts[prefix] = xr.Dataset({"array": (dims, obj)})
        elif type(obj).__name__ == "DataFrame":
            parts[prefix] = _dataset_from_frame(obj)
        elif dataclasses.is_dataclass(obj):
            scalars, arrays = {}, {}
            for field in dataclasses.fields(obj):
                value = getattr(obj, field.name)
                if field.name == "attrs":
                    scalars.update(value)
                elif isinstance(value, np.ndarray):
                    dims = tuple(f"{field.name}_dim_{i}" for i in range(value.ndim))
                    arrays[field.name] = (dims, value)
                elif isinstance(value, (xr.Dataset, xr.DataArray, xr.DataTree)) \
                        or _is_inference_data(value):
                    add(join(field.name), value)
                else:
                    scalars[f"field_{field.name}"] = value
            parts[join("fields")] = xr.Dataset(arrays, attrs=scalars)
        elif _is_figure(obj):
            ds, strings = figure_data(obj)
            parts[prefix] = ds
        else:
            raise TypeError(f"snapshot: no way to store a {type(obj).__name__}")

    add("", result)
    if isinstance(result, xr.Dataset) and type(result) is not xr.Dataset:
        report = str(result)            # Diagnosis: print(result) shows the report
    elif dataclasses.is_dataclass(result):
        report = repr(result)
    if isinstance(result, xr.DataArray):
        kind += f" named {result.name!r}"
    elif isinstance(result, xr.DataTree):
        kind += f" groups {[node.path for node in result.subtree]}"
    elif _is_inference_data(result):
        kind += f" groups {list(result.groups())}"
    return parts, kind, report, strings


def structure(parts):
    """Lines naming every variable's dims, shape and dtype and every attr's type, in the
    result's own order (the order of variables, columns and attrs is behaviour too)."""
    lines = []
    for part in sorted(parts):
        ds = parts[part]
        lines.append(f"part {part!r}: dims {dict(sorted(ds.sizes.items()))}")
        for key in ds.attrs:
            lines.append(f"  attr {key}: {_attr_type(ds.attrs[key])}")
        for name in ds.variables:
            var = ds.variables[name]
            role = "coord" if name in ds.coords else "var"
            lines.append(f"  {role} {name}: dims {var.dims} shape {var.shape} "
                         f"dtype {var.dtype}")
            for key in var.attrs:
                lines.append(f"    attr {key}: {_attr_type(var.attrs[key])}")
    return lines


def text_of(kind, parts, report, caught):
    lines = [f"type: {kind}", "", "== structure =="]
    lines += structure(parts)
    lines += ["", "== report =="]
    lines += report.splitlines() if report else ["(none)"]
    lines += ["", "== warnings =="]
    lines += caught or ["(none)"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ figures


def figure_data(fig):
    """Arrays drawn on every Axes of ``fig`` (a Dataset) and its strings (a dict)."""
    import matplotlib.colors as mcolors

    arrays, strings = {}, {"suptitle": fig._suptitle.get_text() if fig._suptitle else "",
                           "axes": []}

    def put(name, values):
        values = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)
        values = np.asarray(values, dtype=float)
        dims = tuple(f"{name}_dim_{i}" for i in range(values.ndim))
        arrays[name] = (dims, values)

    for a, ax in enumerate(fig.axes):
        info = {
            "title": {loc: ax.get_title(loc=loc) for loc in ("left", "center", "right")},
            "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
            "yticklabels": [t.get_text() for t in ax.get_yticklabels()],
            "lines": [], "collections": [], "texts": [], "images": [], "patches": [],
            "legend": None,
        }
        put(f"ax{a}_xlim", ax.get_xlim())
        put(f"ax{a}_ylim", ax.get_ylim())
        put(f"ax{a}_xticks", ax.get_xticks())
        put(f"ax{a}_yticks", ax.get_yticks())
        for i, line in enumerate(ax.get_lines()):
            put(f"ax{a}_line{i}_x", line.get_xdata())
            put(f"ax{a}_line{i}_y", line.get_ydata())
            info["lines"].append({
                "label": line.get_label(), "gid": line.get_gid(),
                "color": mcolors.to_hex(line.get_color(), keep_alpha=True),
                "linestyle": line.get_linestyle(), "linewidth": line.get_linewidth(),
                "marker": str(line.get_marker()),
            })
        for i, coll in enumerate(ax.collections):
            put(f"ax{a}_collection{i}_offsets", coll.get_offsets())
            values = coll.get_array()
            if values is not None:
                put(f"ax{a}_collection{i}_array", values)
            info["collections"].append({"type": type(coll).__name__, "label": coll.get_label(),
                                        "gid": coll.get_gid(),
                                        "has_array": values is not None})
        for i, image in enumerate(ax.get_images()):
            put(f"ax{a}_image{i}", image.get_array())
            put(f"ax{a}_image{i}_extent", image.get_extent())
            info["images"].append({"cmap": image.get_cmap().name})
        for text in ax.texts:
            x, y = text.get_position()
            info["texts"].append({"text": text.get_text(), "x": repr(float(x)),
                                  "y": repr(float(y))})
        for i, patch in enumerate(ax.patches):
            path = patch.get_path()
            put(f"ax{a}_patch{i}_vertices",
                patch.get_patch_transform().transform(path.vertices))
            info["patches"].append({
                "type": type(patch).__name__, "gid": patch.get_gid(),
                "edgecolor": mcolors.to_hex(patch.get_edgecolor(), keep_alpha=True),
                "facecolor": mcolors.to_hex(patch.get_facecolor(), keep_alpha=True),
                "fill": bool(patch.get_fill()), "linewidth": patch.get_linewidth()})
        legend = ax.get_legend()
        if legend is not None:
            info["legend"] = [t.get_text() for t in legend.get_texts()]
        strings["axes"].append(info)
    return xr.Dataset(arrays), strings


# ----------------------------------------------------------------------------- running


def run_case(function):
    """Call a case, recording every warning it raises (category name and message)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = function()
    messages = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result, messages


def part_file(case, part):
    return f"{case}.nc" if part == "" else f"{case}.{part}.nc"


def encode(ds):
    """The netCDF3 bytes of a part (scipy engine, in memory)."""
    return _clean_dataset(ds).to_netcdf(engine=ENGINE)


def decode(blob):
    with xr.open_dataset(io.BytesIO(blob), engine=ENGINE) as ds:
        return ds.load()


def write_case(case, result, caught, directory):
    parts, kind, report, strings = flatten(result)
    directory.mkdir(parents=True, exist_ok=True)
    for old in list(directory.glob(f"{case}.*")):
        old.unlink()
    for part, ds in parts.items():
        (directory / part_file(case, part)).write_bytes(encode(ds))
    (directory / f"{case}.txt").write_text(text_of(kind, parts, report, caught),
                                           encoding="utf-8")
    if strings is not None:
        (directory / f"{case}.json").write_text(json.dumps(strings, indent=1, sort_keys=True)
                                                + "\n", encoding="utf-8")
    return parts


# --------------------------------------------------------------------------- comparing


def _same_bits(a, b):
    """Float arrays equal bit for bit (every NaN equal to every NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind not in "fc" or a.dtype != b.dtype:
        return True
    if a.size == 0:
        return True
    a = np.ascontiguousarray(a).reshape(-1)
    b = np.ascontiguousarray(b).reshape(-1)
    nan = np.isnan(a) & np.isnan(b)
    diff = (a.view(np.uint8).reshape(a.size, -1)
            != b.view(np.uint8).reshape(b.size, -1)).any(axis=-1) & ~nan
    return not diff.any()


def assert_values_equal(got, expected, what, rtol=None):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != stored {expected.shape}"
    if rtol is not None and got.dtype.kind in "fc" and expected.dtype.kind in "fc":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=0, equal_nan=True,
                                   err_msg=what)
        return
    np.testing.assert_array_equal(got, expected, err_msg=what, strict=False)
    assert _same_bits(got, expected), f"{what}: equal as numbers but not bitwise (signed zeros)"


def _attr_equal(got, expected, what, rtol=None):
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        assert_values_equal(np.atleast_1d(got), np.atleast_1d(expected), what, rtol)
        return
    if isinstance(expected, (float, np.floating)) and isinstance(got, (float, np.floating)):
        if math.isnan(expected) and math.isnan(got):
            return
        if rtol is not None:
            assert math.isclose(got, expected, rel_tol=rtol, abs_tol=0), \
                f"{what}: {got!r} != stored {expected!r}"
            return
    assert type(got) is type(expected) and got == expected, \
        f"{what}: {got!r} != stored {expected!r}"


def assert_attrs_equal(got, expected, what, rtol=None):
    keys_got = set(got) - IGNORED_ATTRS
    keys_exp = set(expected) - IGNORED_ATTRS
    assert keys_got == keys_exp, (f"{what}: attrs differ: new {sorted(keys_got - keys_exp)}, "
                                  f"gone {sorted(keys_exp - keys_got)}")
    for key in sorted(keys_exp):
        _attr_equal(got[key], expected[key], f"{what} attr {key!r}", rtol)


def assert_dataset_equal(got, expected, what, rtol=None):
    assert dict(got.sizes) == dict(expected.sizes), \
        f"{what}: sizes {dict(got.sizes)} != stored {dict(expected.sizes)}"
    assert set(got.data_vars) == set(expected.data_vars), \
        f"{what}: data variables {sorted(got.data_vars)} != stored {sorted(expected.data_vars)}"
    assert set(got.coords) == set(expected.coords), \
        f"{what}: coords {sorted(got.coords)} != stored {sorted(expected.coords)}"
    assert_attrs_equal(got.attrs, expected.attrs, what, rtol)
    for name in expected.variables:
        g, e = got.variables[name], expected.variables[name]
        assert g.dims == e.dims, f"{what} {name}: dims {g.dims} != stored {e.dims}"
        assert g.dtype == e.dtype, f"{what} {name}: dtype {g.dtype} != stored {e.dtype}"
        assert_values_equal(g.values, e.values, f"{what} variable {name!r}", rtol)
        assert_attrs_equal(g.attrs, e.attrs, f"{what} variable {name!r}", rtol)
