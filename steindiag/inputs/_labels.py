"""The labelling rule: one label per scalar element of a variable, the same everywhere.

A scalar variable is labelled by its name (``mu``). An element of a variable with
dims is labelled ``name[v1, v2, ...]``, one entry per dim (after the sample dims),
each entry the element's *coordinate value* along that dim when the dim has a
coordinate, else its integer position: ``theta[a]`` for ``theta`` with dim ``school``
and coordinate ``["a", "b"]``, ``theta[0]`` without a coordinate, ``Sigma[0, 1]``.
This is ArviZ's rule (``arviz.summary`` labels rows the same way), and every function
of steindiag (``ksd``, ``ksd_path``, ``ksd_test``, ``stein_weights``,
``weighted_summary``, ``stein_thin``, ``mmd``) labels parameters with it. Arrays
without labels are ``x[0]``, ``x[1]``, ...; a PyMC model's value variables take the
model's coordinates when the value variable has the shape of its random variable
(``theta_log__[a]``), positions otherwise (a simplex's value variable has one entry
fewer than its coordinate).

A ``labeller`` (ArviZ's: ``arviz_base.labels`` on ArviZ 1.x, ``arviz.labels`` on 0.x)
changes only the labels results carry: each element's label is then
``labeller.make_label_flat(var_name, sel, isel)``, as ``az.summary`` writes its rows,
with ``sel`` the element's coordinate value along each of its dims (its position where
the dim has no coordinate) and ``isel`` its positions. The labels above (the canonical
ones) stay what stored scores, a model's layout and a second sample are matched by. Every
label made here is an :class:`ElementLabel`, which remembers its variable, ``sel`` and
``isel``. An array's columns are read as ArviZ reads an array (variable ``x``, dim
``x_dim_0``); labels read back from flat text (a nutpie trace's unconstrained draws,
scores stored by ``add_scores``) are split into the variable and its entries, with dims
named ``<var>_dim_<k>`` (a dim's own name is not stored there).
"""

import re
from itertools import product

import numpy as np

from steindiag._validate import check_labeller

__all__ = ["ElementLabel", "element_labels", "variable_labels", "array_labels",
           "display_labels"]


class ElementLabel(str):
    """A canonical label (a ``str``) that remembers the element it labels: ``var_name``,
    ``sel`` ({dim: coordinate value}) and ``isel`` ({dim: position}), the arguments of an
    ArviZ labeller's ``make_label_flat``."""

    def __new__(cls, text, var_name, sel=None, isel=None):
        label = super().__new__(cls, text)
        label.var_name, label.sel, label.isel = var_name, dict(sel or {}), dict(isel or {})
        return label

    def __reduce__(self):
        return ElementLabel, (str(self), self.var_name, self.sel, self.isel)


def _entry(value):
    """How one coordinate value is written in a label (as ArviZ writes it)."""
    if isinstance(value, np.generic):
        value = value.item()
    return str(value)


def element_labels(name, shape, dims=None, coords=None):
    """Labels of the elements of one variable of per-draw ``shape``, in C order.

    Parameters
    ----------
    name : str
    shape : tuple of int
        Shape of one draw of the variable.
    dims : sequence of str, optional
        Name of each axis of ``shape`` (an axis without one is ``<name>_dim_<k>``, as
        ArviZ names it).
    coords : mapping of str to sequence, optional
        Coordinate values by dim; a dim without one (or with one of the wrong
        length) is labelled by position.

    Returns
    -------
    list of ElementLabel
    """
    shape = tuple(int(n) for n in shape)
    if len(shape) == 0:
        return [ElementLabel(name, name)]
    axes = []
    for axis, size in enumerate(shape):
        named = dims is not None and axis < len(dims)
        dim = dims[axis] if named else f"{name}_dim_{axis}"
        values = coords.get(dim) if named and coords is not None else None
        if values is None or len(values) != size:
            values = range(size)
        axes.append([(dim, value, position) for position, value in enumerate(values)])
    return [ElementLabel(f"{name}[{', '.join(_entry(value) for _, value, _ in parts)}]",
                         name, {dim: value for dim, value, _ in parts},
                         {dim: position for dim, _, position in parts})
            for parts in product(*axes)]


def variable_labels(name, data_array, sample_dims):
    """Labels of the elements of a DataArray variable with ``sample_dims`` first.

    Its other dims are taken in the order the DataArray has them (the order in which
    its values are flattened).
    """
    other = [dim for dim in data_array.dims if dim not in sample_dims]
    coords = {dim: np.asarray(data_array[dim].values) for dim in other
              if dim in data_array.coords}
    return element_labels(name, [data_array.sizes[dim] for dim in other], other, coords)


def array_labels(d):
    """Labels of the ``d`` columns of an array: ``x[0]``, ``x[1]``, ... (ArviZ reads an
    array as variable ``x`` with dim ``x_dim_0``)."""
    return element_labels("x", (d,))


_FLAT = re.compile(r"^(?P<name>[^\[]+)\[(?P<inner>.*)\]$")


def _read_back(labels):
    """(var_name, sel, isel) of labels known only as text (``theta[a, b]``): dims
    ``<var>_dim_<k>``; an integer entry is its own position, others are numbered in order
    of first appearance (C order)."""
    seen, structures = {}, []
    for label in labels:
        match = _FLAT.match(str(label))
        if match is None:
            structures.append((str(label), {}, {}))
            continue
        name = match["name"]
        sel, isel = {}, {}
        for axis, text in enumerate(part.strip() for part in match["inner"].split(",")):
            dim = f"{name}_dim_{axis}"
            order = seen.setdefault((name, dim), {})
            if text.isdigit():          # a position (a dim without coordinate)
                sel[dim] = isel[dim] = int(text)
            else:
                sel[dim], isel[dim] = text, order.setdefault(text, len(order))
        structures.append((name, sel, isel))
    return structures


def display_labels(labels, labeller):
    """(canonical labels, labels shown in results) of ``labels``, plain ``str``s.

    Without a labeller both are the canonical labels. With one, each label shown is
    ``labeller.make_label_flat(var_name, sel, isel)`` of its element.

    Raises
    ------
    TypeError
        If ``labeller`` has no ``make_label_flat``.
    ValueError
        If the labeller gives two elements the same label.
    """
    canonical = [str(label) for label in labels]
    if check_labeller(labeller) is None:
        return canonical, list(canonical)
    text = [label for label in labels if not isinstance(label, ElementLabel)]
    read_back = iter(_read_back(text))
    shown = [str(labeller.make_label_flat(
        *((label.var_name, label.sel, label.isel) if isinstance(label, ElementLabel)
          else next(read_back)))) for label in labels]
    first = {}
    for label, name in zip(shown, canonical):
        if label in first:
            raise ValueError(
                f"labeller ({type(labeller).__name__}) gives {first[label]} and {name} the "
                f"same label {label!r}; every parameter needs a label of its own (e.g. a "
                "NoVarLabeller on two variables with the same coordinates, or a "
                "var_name_map/coord_map sending two names to one).")
        first[label] = name
    return canonical, shown
