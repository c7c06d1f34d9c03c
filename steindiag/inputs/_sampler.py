"""The sampler's own warnings stored in a trace: divergent transitions per chain.

PyMC, numpyro, Stan (through ArviZ) and nutpie write a boolean ``diverging`` variable to
the trace's ``sample_stats`` group (``warmup_sample_stats`` for the warm-up draws). A
divergent transition means the sampler failed to explore part of the posterior (a funnel,
a region of high curvature): the draws may miss mass there, which no KSD, weight or
thinning can restore. This module only reads; it depends on NumPy and xarray.
"""

from dataclasses import dataclass

import numpy as np

from steindiag._containers import container_kind, get_group

__all__ = ["SamplerWarnings", "sampler_warnings"]

# group of draws -> group of the sampler statistics that describe them
_STATS_GROUP = {
    "posterior": "sample_stats",
    "warmup_posterior": "warmup_sample_stats",
}
_DIVERGING = ("diverging", "divergent__")


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
    """

    divergences: np.ndarray
    n_draw: int
    source: str

    @property
    def total(self):
        """Divergent transitions over all chains."""
        return int(self.divergences.sum())


def sampler_warnings(data, *, group="posterior", chain=None, draw=None,
                     sample_dims=("chain", "draw")):
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
    diverging = stats[name]
    chain_dim, draw_dim = tuple(sample_dims) if len(sample_dims) == 2 else ("chain", sample_dims[0])
    if draw_dim not in diverging.dims:
        return None
    if chain_dim not in diverging.dims:
        diverging = diverging.expand_dims({chain_dim: [0]})
    for dim, wanted in ((chain_dim, chain), (draw_dim, draw)):
        if wanted is None:
            continue
        wanted = np.asarray(wanted)
        if dim in diverging.coords:
            have = np.asarray(diverging[dim].values)
            if len(have) == len(wanted) and np.array_equal(have, wanted):
                continue
            if not np.isin(wanted, have).all():
                return None
            diverging = diverging.sel({dim: wanted})
        elif diverging.sizes[dim] != len(wanted):
            return None
    values = np.asarray(diverging.transpose(chain_dim, draw_dim, ...).values)
    values = values.reshape(values.shape[0], values.shape[1], -1).any(axis=2)
    return SamplerWarnings(
        divergences=values.sum(axis=1).astype(np.int64),
        n_draw=int(values.shape[1]),
        source=f"{stats_group}[{name!r}]",
    )
