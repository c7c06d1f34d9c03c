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
"""

from itertools import product

import numpy as np

__all__ = ["element_labels", "variable_labels"]

# Attributes of the input that every result carries: the space of the draws and, for a
# trace, the group they were read from.
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
        Name of each axis of ``shape``.
    coords : mapping of str to sequence, optional
        Coordinate values by dim; a dim without one (or with one of the wrong
        length) is labelled by position.

    Returns
    -------
    list of str
    """
    shape = tuple(int(n) for n in shape)
    if len(shape) == 0:
        return [name]
    entries = []
    for axis, size in enumerate(shape):
        values = None
        if dims is not None and coords is not None and axis < len(dims):
            values = coords.get(dims[axis])
        if values is None or len(values) != size:
            values = range(size)
        entries.append([_entry(value) for value in values])
    return [f"{name}[{', '.join(parts)}]" for parts in product(*entries)]


def variable_labels(name, data_array, sample_dims):
    """Labels of the elements of a DataArray variable with ``sample_dims`` first.

    Its other dims are taken in the order the DataArray has them (the order in which
    its values are flattened).
    """
    other = [dim for dim in data_array.dims if dim not in sample_dims]
    coords = {dim: np.asarray(data_array[dim].values) for dim in other
              if dim in data_array.coords}
    return element_labels(name, [data_array.sizes[dim] for dim in other], other, coords)
