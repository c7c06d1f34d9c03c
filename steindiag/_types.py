"""Plain containers passed between the layers (no behaviour of their own).

``PendingInput`` is what the input layer's one reading step returns: the draws read and
checked, their labels, where they came from (``Origin``) and what is known of the target
besides its scores at the draws (``source``, a score source of the input layer: see
``steindiag.inputs``); its ``with_scores()`` evaluates the scores and gives the
``SteinInput`` that the methods compute on.
"""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["SteinInput", "PendingInput", "Origin", "CorrectionWarning"]


class CorrectionWarning(UserWarning):
    """A correction (weights, thinning, SVGD) cannot be trusted on these draws.

    The message names the cause: divergent transitions, unvisited mass, a KSD that stays
    far above its floor, corrected draws narrower than the target (weights cannot add
    spread; ``stein_variational`` moves the draws), or (SVGD) particles that ended with a
    higher KSD than they started with.
    """


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
        One label per column of ``draws`` (e.g. ``"sigma_log__"``, ``"beta[0]"``), as
        results show it (a ``labeller``'s labels, if one was given).
    attrs : dict
        Provenance recorded on the results (space, source, transforms, ...).
        Values must be str, int, float or lists/arrays of those (netCDF-friendly).
    canonical : list of str
        steindiag's own label of each column (``theta[Choate]``), what stored scores, a
        model's layout and a second sample are matched by (default: ``parameter``).
    """

    draws: np.ndarray
    scores: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    parameter: list
    attrs: dict = field(default_factory=dict)
    canonical: list = None

    def __post_init__(self):
        if self.canonical is None:
            self.canonical = list(self.parameter)


@dataclass(kw_only=True)
class Origin:
    """Where the draws were read from, for results written back into the caller's container.

    Attributes
    ----------
    data : object
        The container the draws were read from, as the input layer saw it: a trace
        (``InferenceData``, ``DataTree``, ``Dataset``, ``DataArray``: for a numpyro
        ``MCMC``, its trace) or an array (for a sampler's own object, its draws).
    group : str
        The trace's group holding the draws.
    coords : dict or None
        The selection applied to it.
    sample_dims : tuple of str or None
        For a trace, its (chain, draw) dims (or (draw,)); for an array, the layout given
        (None: the default layout).
    labelled : bool
        Whether ``data`` is an xarray / ArviZ container.
    """

    data: object
    group: str = "posterior"
    coords: dict = None
    sample_dims: tuple = None
    labelled: bool = False

    @property
    def trace_dims(self):
        """(chain_dim, draw_dim) of a trace; ("chain", draw_dim) when it has one sample dim."""
        dims = ("chain", "draw") if self.sample_dims is None else tuple(self.sample_dims)
        return ("chain", dims[0]) if len(dims) == 1 else dims


@dataclass(kw_only=True)
class PendingInput:
    """Draws read and checked, scores not yet evaluated: the input layer's one result.

    Attributes
    ----------
    draws : ndarray of float64, shape (chain, draw, d)
    chain, draw : ndarray
        Coordinate values of the sample dims.
    parameter : list of str
        One label per column of ``draws``, as results show it.
    canonical : list of str
        steindiag's own labels, for matching (as ``SteinInput.canonical``).
    attrs : dict
        Provenance, as ``SteinInput.attrs`` (without ``score_source`` yet).
    source : score source
        The score, log density and batching the input layer derived (a model's graphs, a
        user's callables or arrays, a sampler's or JAX's own functions), with methods
        that evaluate them at new points (``steindiag.inputs.ScoreSource``).
    origin : Origin
        The container the draws came from.
    has_chains : bool
        Whether the draws come as chains (a trace, a sampler, an array with a chain
        axis): otherwise one sample of independent draws.
    ensemble : bool
        Whether the chains are the walkers of one ensemble (emcee).
    complete : callable
        () -> SteinInput: evaluates or loads the scores (``with_scores``).
    read_sampler_warnings : callable
        () -> the sampler's divergences for these draws (``SamplerWarnings``) or None.
    selection : object or None
        With a score that covers more coordinates than ``var_names`` selects (a PyMC
        model's): the selected columns of the whole vector and the whole draws
        (``steindiag.inputs._selection.Selection``); None: the draws are the whole vector.
    """

    draws: np.ndarray
    chain: np.ndarray
    draw: np.ndarray
    parameter: list
    attrs: dict
    complete: object
    source: object = None
    origin: Origin = None
    has_chains: bool = True
    ensemble: bool = False
    read_sampler_warnings: object = None
    selection: object = None
    canonical: list = None

    def __post_init__(self):
        if self.canonical is None:
            self.canonical = list(self.parameter)

    @property
    def n_draws(self):
        """Number of draws, all chains together."""
        return self.draws.shape[0] * self.draws.shape[1]

    def with_scores(self):
        """Evaluate or load the scores: the ``SteinInput``."""
        return self.complete()

    def sampler_warnings(self):
        """The sampler's divergence counts for the draws read, or None."""
        return None if self.read_sampler_warnings is None else self.read_sampler_warnings()
