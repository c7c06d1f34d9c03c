"""Plain containers passed between the input layer and the Stein-kernel layer."""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SteinInput"]


@dataclass(kw_only=True)
class SteinInput:
    """Draws and scores in the space where the KSD is computed, with their labels.

    Attributes
    ----------
    draws : ndarray of float64, shape (chain, draw, d)
        Points x at which the target is evaluated (for PyMC models: the
        unconstrained value variables, flattened and concatenated).
    scores : ndarray of float64, shape (chain, draw, d)
        grad log p(x) at each draw, in the same space and order as ``draws``.
    chain, draw : ndarray
        Coordinate values of the ``chain`` and ``draw`` dimensions.
    parameter : list of str
        One label per column of ``draws`` (e.g. ``"sigma_log__"``, ``"beta[0]"``).
    attrs : dict
        Provenance recorded on the results (space, source, transforms, ...).
        Values must be str, int, float or lists/arrays of those (netCDF-friendly).
    """

    draws: np.ndarray
    scores: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    parameter: list
    attrs: dict = field(default_factory=dict)
