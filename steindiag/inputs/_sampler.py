"""The sampler's own warnings stored in a trace: divergent transitions, and what it did.

PyMC, numpyro, Stan (through ArviZ) and nutpie write a boolean ``diverging`` variable to
the trace's ``sample_stats`` group (``warmup_sample_stats`` for the warm-up draws). A
divergent transition means the sampler failed to explore part of the posterior (a funnel,
a region of high curvature): the draws may miss mass there, which no KSD, weight or
thinning can restore. Read with them, once: the per-draw flags (where the divergences
are), the mean acceptance statistic each chain recorded (``acceptance_rate``; NUTS adapts
its step size until this mean is about ``target_accept``, which PyMC 5 and 6 do not store
in the trace), and, with a PyMC model, whether the model holds a centred hierarchy
(``_pymc_hierarchy``). This module only reads; it depends on NumPy and xarray.
"""

from dataclasses import dataclass

import numpy as np

from steindiag._containers import container_kind, get_group
from steindiag.inputs._pymc_hierarchy import model_parameterisation

__all__ = ["SamplerWarnings", "sampler_warnings"]

# group of draws -> group of the sampler statistics that describe them
_STATS_GROUP = {
    "posterior": "sample_stats",
    "warmup_posterior": "warmup_sample_stats",
}
_DIVERGING = ("diverging", "divergent__")
# The mean acceptance statistic of a NUTS transition: PyMC and ArviZ's converters
# ("acceptance_rate"), Stan's CSV ("accept_stat__"), nutpie ("mean_tree_accept").
_ACCEPTANCE = ("acceptance_rate", "accept_stat__", "mean_tree_accept")


@dataclass(kw_only=True)
class SamplerWarnings:
    """Divergent transitions per chain, read from a trace's sampler statistics.

    Attributes
    ----------
    divergences : ndarray of int, shape (chain,)
        Number of divergent transitions in each chain (of the draws selected).
    n_draw : int
        Draws per chain the counts refer to.
    source : str
        Where the counts were read, e.g. ``"sample_stats['diverging']"``.
    diverging : ndarray of bool, shape (chain, draw), or None
        The flag of each draw (None: only the counts are known).
    acceptance : ndarray, shape (chain,), or None
        Each chain's mean acceptance statistic over the draws (None: not recorded).
    parameterisation : Parameterisation or None
        With a PyMC model: its centred hierarchies (``_pymc_hierarchy``); None otherwise.
    """

    divergences: np.ndarray
    n_draw: int
    source: str
    diverging: np.ndarray = None
    acceptance: np.ndarray = None
    parameterisation: object = None

    @property
    def total(self):
        """Divergent transitions over all chains."""
        return int(self.divergences.sum())


def sampler_warnings(data, *, group="posterior", chain=None, draw=None,
                     sample_dims=("chain", "draw"), model=None):
    """The sampler's divergence counts for the draws read from ``data``, or None.

    Parameters
    ----------
    data : object
        The caller's input. Only traces (InferenceData, DataTree) carry sampler
        statistics; any other input gives None.
    group : str
        The group the draws were read from (``"posterior"`` -> ``"sample_stats"``).
    chain, draw : array_like, optional
        Coordinate values of the chains and draws actually used (the input layer's
        ``chain`` and ``draw``); the statistics are restricted to them when they carry
        those coordinates.
    sample_dims : tuple of str
        Names of the chain and draw dimensions.
    model : pymc.Model, optional
        The model the draws are scored with: its parameterisation is read too.

    Returns
    -------
    SamplerWarnings or None
        None when the trace has no sampler statistics with a divergence indicator, or
        when they cannot be matched to the draws (no guess is made).
    """
    if container_kind(data) not in ("datatree", "inferencedata"):
        return None
    stats_group = _STATS_GROUP.get(group)
    if stats_group is None:
        return None
    stats = get_group(data, stats_group)
    if stats is None:
        return None
    name = next((n for n in _DIVERGING if n in stats.data_vars), None)
    if name is None:
        return None
    dims = tuple(sample_dims) if len(sample_dims) == 2 else ("chain", sample_dims[0])
    flags = _matched(stats[name], dims, chain, draw)
    if flags is None:
        return None
    flags = flags.reshape(flags.shape[0], flags.shape[1], -1).any(axis=2)
    accept_name = next((n for n in _ACCEPTANCE if n in stats.data_vars), None)
    accepted = None if accept_name is None else _matched(stats[accept_name], dims, chain, draw)
    return SamplerWarnings(
        divergences=flags.sum(axis=1).astype(np.int64),
        n_draw=int(flags.shape[1]),
        source=f"{stats_group}[{name!r}]",
        diverging=flags,
        acceptance=None if accepted is None or accepted.ndim != 2 else np.nanmean(
            accepted.astype(np.float64), axis=1),
        parameterisation=None if model is None else model_parameterisation(model),
    )


def _matched(variable, dims, chain, draw):
    """The (chain, draw, ...) values of a sampler statistic at the draws read, or None
    when they cannot be matched to them (no guess is made)."""
    chain_dim, draw_dim = dims
    if draw_dim not in variable.dims:
        return None
    if chain_dim not in variable.dims:
        variable = variable.expand_dims({chain_dim: [0]})
    for dim, wanted in ((chain_dim, chain), (draw_dim, draw)):
        if wanted is None:
            continue
        wanted = np.asarray(wanted)
        if dim in variable.coords:
            have = np.asarray(variable[dim].values)
            if len(have) == len(wanted) and np.array_equal(have, wanted):
                continue
            if not np.isin(wanted, have).all():
                return None
            variable = variable.sel({dim: wanted})
        elif variable.sizes[dim] != len(wanted):
            return None
    return np.asarray(variable.transpose(chain_dim, draw_dim, ...).values)
