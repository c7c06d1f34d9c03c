"""PyMC: the model's data (observed values and ``pm.Data``) against the trace's.

Scores are computed with the model's data as they are now: ``check_model_data`` warns
when they differ from the trace's; ``inconsistent_data_message`` explains a log p that
``pm.set_data`` left with data whose shapes do not fit together.
"""

import warnings

import numpy as np

__all__ = ["data_value", "check_model_data", "is_shape_error", "inconsistent_data_message"]


def data_value(variable):
    """Numeric value of a constant or shared (pm.Data) variable, else None."""
    if hasattr(variable, "get_value"):
        return np.asarray(variable.get_value())
    if hasattr(variable, "data"):
        return np.asarray(variable.data)
    return None


def _model_data(model):
    """{name: value} of the model's observed values and pm.Data, as they are now."""
    values = {}
    for rv in model.observed_RVs:
        value = data_value(model.rvs_to_values[rv])
        if value is not None:
            values[rv.name] = value
    for data in getattr(model, "data_vars", []):
        value = data_value(data)
        if value is not None and data.name not in values:
            values[data.name] = value
    return values


def _same_values(model_value, trace_value):
    if model_value.ndim == 0 and trace_value.shape == (1,):
        # ArviZ 0.x stores a scalar observation (observed=13) with shape (1,).
        trace_value = trace_value.reshape(())
    if model_value.shape != trace_value.shape:
        return False, f"shape {model_value.shape} in the model, {trace_value.shape} in the trace"
    try:
        equal = np.allclose(model_value, trace_value, rtol=1e-10, atol=0.0, equal_nan=True)
    except TypeError:
        equal = np.array_equal(model_value, trace_value)
    if equal:
        return True, ""
    return False, "same shape, different values"


def check_model_data(model, observed_data, constant_data):
    """Warn when the model's observed / pm.Data values differ from the trace's.

    Parameters
    ----------
    model : pymc.Model
    observed_data, constant_data : xarray.Dataset or None
        The trace's ``observed_data`` and ``constant_data`` groups (None if absent).

    Returns
    -------
    list of str
        Names of the variables that differ (a ``UserWarning`` is issued if any).
    """
    if observed_data is None and constant_data is None:
        return []
    differ = []
    for name, model_value in _model_data(model).items():
        for group in (observed_data, constant_data):
            if group is not None and name in group.data_vars:
                same, why = _same_values(model_value, np.asarray(group[name].values))
                if not same:
                    differ.append(f"{name} ({why})")
                break
    if differ:
        warnings.warn(
            "the model's observed/pm.Data values differ from the trace's observed_data/"
            "constant_data for: " + "; ".join(differ) + ". Scores are computed with the "
            "model's current data, which is not the posterior the trace was drawn from "
            "(pm.set_data back to the sampled data, or rebuild the model).",
            UserWarning,
            stacklevel=4,
        )
    return [item.split(" (")[0] for item in differ]


# Words of PyTensor's (C, Python and Numba backends) errors when the shapes of a graph's
# inputs cannot be combined, looked for in the error's first line only: PyTensor appends
# "Inputs shapes: ..." to every error of an Apply node (e.g. a failed check sigma > 0).
_SHAPE_WORDS = ("dimension mismatch", "shape mismatch", "incompatible", "broadcast",
                "not aligned", "shapes")


def is_shape_error(err):
    """Whether ``err`` is PyTensor's error for input shapes that do not fit together."""
    message = str(err).strip().lower()
    first_line = message.splitlines()[0] if message else ""
    return any(word in first_line for word in _SHAPE_WORDS)


def inconsistent_data_message(model, err):
    """Why the model's log p could not be evaluated when its data's shapes do not fit."""
    first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    observed = {rv.name for rv in model.observed_RVs}
    shapes = [f"{name} {tuple(value.shape)}{' (observed)' if name in observed else ''}"
              for name, value in _model_data(model).items()]
    now = f" The model's data now have shapes: {', '.join(shapes)}." if shapes else ""
    return (
        f"the model's log p cannot be evaluated with its current data: PyTensor says "
        f"{first_line!r}.{now} The model itself is inconsistent, usually because "
        "pm.set_data changed the shape of some data but not of the data that must match "
        "them (e.g. the predictors but not the observed values): set them together, "
        "pm.set_data({...all of them...}), or back to the data the trace was sampled with."
    )
