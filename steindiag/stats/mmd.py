"""MMD^2 estimates and block-permutation p-values from kernel sums between blocks (NumPy only).

The draws are cut into contiguous blocks ("units"); the engine returns G[u, v], the sum of
the base kernel over all pairs of draws in units u and v. Every MMD^2 of the ``mmd``
function, and every permuted replicate of it, is a ratio of sums of G's entries, computed
here without touching the draws again. See the Background page of the docs.
"""

import numpy as np

from steindiag.stats.autocorrelation import (chains_autocorrelation_time,
                                             integrated_autocorrelation_time)

__all__ = ["BLOCK_PER_TAU", "BLOCK_PER_TAU_AGREEMENT", "MAX_AUTO_BLOCKS", "agreement_statistic", "auto_block_length",
           "block_units", "far_pair_sums", "mmd2_from_sums", "permutation_pvalue",
           "split_statistic"]


# Automatic block length: this many integrated autocorrelation times (see ``mmd`` Notes).
BLOCK_PER_TAU = 5.0
# For the one test that all chains agree, tau from the chains' mean autocorrelation and
# every other block used (``_mmd.mmd``): blocks of 5 tau, a block apart, rejected valid
# AR(1) chains at the level (4 x 1000, d = 10, rho 0.5 and 0.7: 11 of 600 at 0.0167; 64 x
# 100, d = 2, rho 0.5: 2 of 200), where all blocks with neighbours left out gave 2.6 % (4 x
# 1000) and 7.7 % (64 x 100, at 0.0125) (benchmarks/results/calibration.md).
BLOCK_PER_TAU_AGREEMENT = 5.0


# The automatic block length gives each chain at most this many blocks (longer blocks for
# long, weakly correlated chains): permutations cost O(n_permutations U^2) for U blocks.
MAX_AUTO_BLOCKS = 100


# Permutations evaluated at a time (bounds the (chunk, units) temporaries).
_PERMUTATION_CHUNK = 1024


def mmd2_from_sums(sums_xx, sums_yy, sums_xy, n_x, n_y):
    """Unbiased MMD^2 from the three kernel sums (self-pairs excluded from the first two)."""
    return (sums_xx / (n_x * (n_x - 1.0)) + sums_yy / (n_y * (n_y - 1.0))
            - 2.0 * sums_xy / (n_x * n_y))


def agreement_statistic(within, within_pairs, total, total_pairs):
    """Mean kernel over pairs in the same chain minus the mean over pairs in different chains.

    ``within`` and ``within_pairs``: kernel sum and number of pairs over the pairs (of
    far-apart draws) that lie in the same chain, for one or many labellings; ``total``
    and ``total_pairs``: the same over all pairs. For two chains of equal size this is
    half their MMD^2 (with near pairs left out); for C chains it is, up to a factor, the
    mean of the C (C - 1) / 2 pairwise MMD^2, so one test covers every pair. Draws of one
    distribution give about 0; chains that sampled different regions give a positive
    value (draws are closer to their own chain's).
    """
    within = np.asarray(within, dtype=np.float64)
    within_pairs = np.asarray(within_pairs, dtype=np.float64)
    between = total - within
    between_pairs = total_pairs - within_pairs
    return within / within_pairs - between / between_pairs


def split_statistic(sums, counts, in_x):
    """MMD^2 between the units with in_x (P, U) true and the others, for each row of in_x.

    ``sums[u, v]`` are kernel sums between units and ``counts[u, v]`` the numbers of
    pairs they hold (both symmetric): each of the three terms is a mean over the pairs it
    includes. With y = 1 - z, z^T G y = z^T G 1 - z^T G z and
    y^T G y = 1^T G 1 - 2 z^T G 1 + z^T G z, so one product z G per matrix suffices.
    """
    z = in_x.astype(np.float64)

    def terms(matrix):
        zg = z @ matrix
        xx = np.einsum("pu,pu->p", zg, z)
        x_all = zg.sum(axis=1)
        return xx, x_all - xx, matrix.sum() - 2.0 * x_all + xx

    s_xx, s_xy, s_yy = terms(sums)
    n_xx, n_xy, n_yy = terms(counts)
    return s_xx / n_xx + s_yy / n_yy - 2.0 * s_xy / n_xy


def far_pair_sums(G, sizes, unit_chain):
    """Sums and pair counts for the permutation statistic: near pairs left out.

    Pairs inside one block, or in adjacent blocks of the same chain, are the ones whose
    draws are correlated; they are left out of the statistic (observed and permuted
    alike), so every pair it uses is at least one block apart in its chain, or in
    different chains.
    """
    n_units = G.shape[0]
    index = np.arange(n_units)
    near = (unit_chain[:, None] == unit_chain[None, :]) & (
        np.abs(index[:, None] - index[None, :]) <= 1)
    counts = np.outer(sizes, sizes)
    return np.where(near, 0.0, G), np.where(near, 0.0, counts)


def permutation_pvalue(sums, counts, n_x_units, n_permutations, rng, bar=None):
    """Block-permutation p-value: units 0..n_x_units-1 against the rest.

    Each permutation assigns n_x_units of the units, chosen uniformly at random, to the
    first sample. p = (1 + #{permuted >= observed}) / (1 + n_permutations). ``bar``
    (optional, with ``update(n)``) advances by the permutations done, chunk by chunk.
    """
    n_units = sums.shape[0]
    observed_split = np.zeros((1, n_units), dtype=bool)
    observed_split[0, :n_x_units] = True
    observed = split_statistic(sums, counts, observed_split)[0]
    exceed = 0
    for start in range(0, n_permutations, _PERMUTATION_CHUNK):
        count = min(_PERMUTATION_CHUNK, n_permutations - start)
        order = np.argsort(rng.random((count, n_units)), axis=1)
        in_x = order < n_x_units
        exceed += int(np.sum(split_statistic(sums, counts, in_x) >= observed))
        if bar is not None:
            bar.update(count)
    return (1.0 + exceed) / (1.0 + n_permutations)


def block_units(n_chain, n_draw, block_length):
    """Start of every block of ``block_length`` draws (the last of a chain may be longer)."""
    n_blocks = max(1, n_draw // block_length)
    per_chain = [c * n_draw + b * block_length for c in range(n_chain) for b in range(n_blocks)]
    return np.asarray(per_chain + [n_chain * n_draw], dtype=np.int64), n_blocks


def auto_block_length(draws_list, mean_over_chains=False):
    """max(ceil(5 tau), ceil(T / 100)) over the samples, tau the largest over chains.

    ``mean_over_chains`` (the test of agreement): tau from the chains' mean
    autocorrelation instead (``chains_autocorrelation_time``), the largest over the
    coordinates (with many short chains the largest of the chains' own estimates is
    mostly noise), and blocks of 5 tau (every other one is used).
    """
    per_tau = BLOCK_PER_TAU
    if mean_over_chains:
        tau = max(chains_autocorrelation_time(draws).max() for draws in draws_list)
        per_tau = BLOCK_PER_TAU_AGREEMENT
    else:
        tau = max(integrated_autocorrelation_time(chain_draws).max()
                  for draws in draws_list for chain_draws in draws)
    longest = max(draws.shape[1] for draws in draws_list)
    length = max(int(np.ceil(per_tau * tau)), -(-longest // MAX_AUTO_BLOCKS))
    return length, float(tau)
