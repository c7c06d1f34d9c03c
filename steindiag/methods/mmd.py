"""MMD between chains or two samples, and its block-permutation tests (no labels here).

Data flow: samples (chain, draw, d) -> coordinates constant over all draws left out
(:func:`drop_constant`) -> contiguous blocks of draws ("units", :func:`plan_blocks`) -> one
tiled pass ``engine.multi_products.base_kernel_unit_sums`` giving the kernel sums between
every pair of units (:func:`unit_kernel_sums`) -> MMD^2 of every pair of chains (or of the
two samples) and block-permutation p-values, both from the U x U sums alone
(:func:`mmd_tests`). The test that all chains agree (:func:`agreement_pvalue`) is the one
``diagnose`` reads. :func:`mmd_from_draws` runs the pass and the tests; above
``DENSE_MAX_UNITS`` blocks it holds one U x U array of sums instead of one per parallel
part, and the test that all chains agree is streamed (``methods.agreement``: O(N d + U^2)
memory with U <= 2048 units, whatever the number of blocks).
"""

from dataclasses import dataclass

import numba as nb
import numpy as np

from steindiag.engine.memory import check_memory
from steindiag.engine.multi_products import base_kernel_unit_sums
from steindiag.engine.permutations import within_sums
from steindiag.engine.progress import CONSERVATIVE_FLOPS, progress_bar
from steindiag.methods.agreement import streamed_agreement, unit_row_sums
from steindiag.stats.mmd import (agreement_statistic, auto_block_length, block_units,
                                 far_pair_sums, mmd2_from_sums, permutation_pvalue,
                                 split_statistic)

__all__ = ["TESTS", "MIN_BLOCKS", "DENSE_MAX_UNITS", "Blocks", "MMDResult", "drop_constant",
           "plan_blocks", "unit_kernel_sums", "agreement_pvalue", "mmd_tests",
           "mmd_from_draws"]

TESTS = ("pairs", "all")
# Fewer blocks than this per chain: the permutation p-value is coarse or unreliable.
MIN_BLOCKS = 10
# Parts of the parallel pass: max(_PARTS, threads), each with its own U x U sums. The
# partition of the rows into parts is static, so the sums are bitwise the same for any
# number of threads up to _PARTS.
_PARTS = 8
# Relative spread below which a coordinate is constant up to round-off (a few thousand
# ulp of float64): no parameter of a real posterior is that concentrated.
_ROUND_OFF = 1e-12
# Relabellings evaluated at a time in the test of agreement (bounds the (chunk, U) labels).
_RELABEL_CHUNK = 256
# Up to this many blocks, the pass keeps one U x U array of sums per parallel part (8 P U^2
# bytes: 64 MiB at P = 8) and the tests read the full U x U sums. Above it (many short
# chains: 1000 chains x 60 draws in blocks of 5 are 12,000 blocks, and the parts alone took
# 8.6 GiB), each unit's row of sums is computed by one task (one U x U array), and the test
# that all chains agree is streamed (``methods.agreement``).
DENSE_MAX_UNITS = 1024
# Bytes per entry of the U x U arrays the pairwise and two-sample tests hold at once (the
# sums, their transpose while symmetrised, the pair counts, and the far-pair sums and
# counts), beyond the pass's own.
_DENSE_BYTES_PER_ENTRY = 5 * 8


def drop_constant(samples, parameters, preconditioner):
    """Leave out coordinates constant over all draws: (samples, parameters, left out).

    A coordinate with one value in every draw of every sample, up to round-off, adds
    (almost) 0 to every distance x - y, so it does not change MMD; but it has no scale
    for the preconditioner, or one made of round-off that "standardize" would blow up to
    order 1 (e.g. the unit diagonal of an LKJ correlation matrix, a deterministic of a
    trace read without its model, is 1 to within a few ulp). Kept when Lambda is given
    as an array (its size fixes d).
    """
    if not isinstance(preconditioner, str):
        return samples, parameters, []
    d = samples[0].shape[2]
    pooled = np.concatenate([s.reshape(-1, d) for s in samples], axis=0)
    spread = pooled.max(axis=0) - pooled.min(axis=0)
    constant = spread <= _ROUND_OFF * np.abs(pooled).max(axis=0)
    if not constant.any():
        return samples, parameters, []
    names = [parameters[k] for k in np.flatnonzero(constant)]
    if constant.all():
        raise ValueError(
            f"mmd: every coordinate of the draws is constant, with the same value (up to "
            f"round-off) in every draw ({names[:10]}{'...' if len(names) > 10 else ''}): the "
            "samples are equal, so MMD is 0 and there is nothing to compare."
        )
    keep = np.flatnonzero(~constant)
    return ([np.ascontiguousarray(s[:, :, keep]) for s in samples],
            [parameters[k] for k in keep], names)


@dataclass(kw_only=True)
class Blocks:
    """The units of the permutation tests: blocks of consecutive draws of one chain.

    Attributes
    ----------
    unit_start : ndarray of int64 (U + 1,)
        Unit u holds the pooled rows unit_start[u] .. unit_start[u + 1] - 1.
    unit_chain : ndarray of int64 (U,)
        The chain of each unit, numbered across the samples (other's after data's).
    blocks_per_chain : list of int
        Blocks in each chain of each sample.
    block_length : int or str
        Draws per block ("auto" resolved; the samples' draws without permutations).
    tau : float
        The autocorrelation time the automatic length came from (NaN otherwise).
    testable, reliable : bool
        At least 3 blocks per chain (a pair of blocks far enough apart); enough blocks
        for the p-values to be trusted.
    """

    unit_start: np.ndarray
    unit_chain: np.ndarray
    blocks_per_chain: list
    block_length: object
    tau: float
    testable: bool
    reliable: bool


def plan_blocks(samples, n_permutations, block_length, *, test_all):
    """The :class:`Blocks` of the samples (one block per chain without permutations).

    ``test_all``: the test that all chains agree (``test="all"`` without ``other``), whose
    automatic blocks come from the chains' mean autocorrelation and which needs 3 blocks
    per chain and 20 in all, not 10 in each chain.
    """
    tau = np.nan
    if n_permutations == 0:
        lengths = [s.shape[1] for s in samples]
    else:
        if block_length == "auto":
            block_length, tau = auto_block_length(samples, mean_over_chains=test_all)
        lengths = [min(block_length, s.shape[1]) for s in samples]
    units, blocks_per_chain, unit_chain = [], [], []
    offset = 0
    for s, length in zip(samples, lengths):
        starts, n_blocks = block_units(s.shape[0], s.shape[1], length)
        units.append(starts[:-1] + offset)
        blocks_per_chain.append(n_blocks)
        unit_chain.append(np.repeat(np.arange(s.shape[0]), n_blocks))
        offset += s.shape[0] * s.shape[1]
    unit_start = np.concatenate(units + [np.array([offset], dtype=np.int64)])
    n_chain = samples[0].shape[0]
    unit_chain = np.concatenate([chains + (0 if k == 0 else n_chain)
                                 for k, chains in enumerate(unit_chain)])
    testable = min(blocks_per_chain) >= 3
    reliable = min(blocks_per_chain) >= MIN_BLOCKS
    if test_all:
        # One test over all chains: what it needs is far pairs within every chain (3
        # blocks) and enough blocks in all to relabel, not 10 blocks in each chain.
        reliable = testable and sum(blocks_per_chain) * n_chain >= 2 * MIN_BLOCKS
    return Blocks(unit_start=unit_start, unit_chain=unit_chain,
                  blocks_per_chain=blocks_per_chain, block_length=block_length, tau=tau,
                  testable=testable, reliable=reliable)


def unit_kernel_sums(points, unit_start, preconditioner, kernel, progress=False):
    """G[u, v] = sum of k(x_i, x_j) over i in unit u, j in unit v, i != j; (U, U) symmetric.

    Parameters
    ----------
    points : ndarray (N, d), units stored one after the other
    unit_start : int64 (U + 1,), unit u holds rows unit_start[u] .. unit_start[u+1] - 1
    preconditioner : Preconditioner
    kernel : steindiag.kernels.BaseKernel
    progress : bool or None
        A bar over the pairs (``engine.progress.make_progress``).

    O(N^2 d) time; O(N d + P U^2) memory for P = max(8, threads) parallel parts, each
    with its own U x U sums (8 P U^2 bytes), up to ``DENSE_MAX_UNITS`` units; above, each
    unit's row is computed by one task (``methods.agreement.unit_row_sums``): O(N d +
    U^2). The N x N kernel matrix is not stored. Ctrl-C is honoured between calls of
    about 0.25 s.
    """
    if unit_start.shape[0] - 1 > DENSE_MAX_UNITS:
        lower = unit_row_sums(points, unit_start, preconditioner, kernel, progress)
        lower += lower.T
        return lower
    draws_k, _ = preconditioner.to_kernel_coordinates(points, np.zeros_like(points))
    draws_t = np.ascontiguousarray(draws_k.T[None, :, :])
    n_units = unit_start.shape[0] - 1
    partial = np.empty((max(_PARTS, nb.get_num_threads()), n_units, n_units))
    n, d = points.shape
    pairs = n * (n - 1) // 2
    with progress_bar(progress, pairs, pairs * (3 * d + 10) / CONSERVATIVE_FLOPS,
                      desc="mmd (kernel sums)") as bar:
        base_kernel_unit_sums(draws_t, preconditioner.a, preconditioner.isotropic,
                              kernel.numba_kind, kernel.numba_params,
                              np.ascontiguousarray(unit_start, dtype=np.int64), partial,
                              bar=bar)
    lower = partial.sum(axis=0)
    return lower + lower.T


def agreement_pvalue(sums, counts, unit_chain, n_permutations, rng, bar=None):
    """p-value of the test that all chains agree: blocks relabelled among the chains.

    ``sums`` and ``counts`` (U, U): kernel sums and pair counts between the blocks used
    (nearly independent ones: every other block of a chain), pairs within a block left
    out (zero diagonal); ``unit_chain`` (U,): the chain of each block. Each relabelling is
    a uniformly random permutation of ``unit_chain`` (every chain keeps its number of
    blocks); the statistic is ``stats.mmd.agreement_statistic``. Returns (observed
    statistic, p-value), p = (1 + #{relabelled >= observed}) / (1 + n_permutations).
    O(n_permutations U^2) time. ``bar`` (optional, with ``update(n)``) advances by the
    relabellings done.
    """
    upper = np.triu(np.ones(sums.shape, dtype=bool), 1)
    total, total_pairs = float(sums[upper].sum()), float(counts[upper].sum())
    unit_chain = np.asarray(unit_chain, dtype=np.int64)
    observed = agreement_statistic(*within_sums(sums, counts, unit_chain[None, :]), total,
                                   total_pairs)[0]
    exceed = 0
    for start in range(0, n_permutations, _RELABEL_CHUNK):
        count = min(_RELABEL_CHUNK, n_permutations - start)
        labels = rng.permuted(np.tile(unit_chain, (count, 1)), axis=1)
        permuted = agreement_statistic(*within_sums(sums, counts, labels), total, total_pairs)
        exceed += int(np.sum(permuted >= observed))
        if bar is not None:
            bar.update(count)
    return observed, (1.0 + exceed) / (1.0 + n_permutations)


@dataclass(kw_only=True)
class MMDResult:
    """MMD^2 and its p-values (NaN where not computed).

    ``mmd2``: (chain, chain) between chains, or () between two samples; ``pvalue`` the
    same shape (pairs), () (all chains agree; two samples) or None (no permutations);
    ``statistic``: the agreement statistic (test "all" only); ``units_per_chain``: the
    units per chain of the streamed test of agreement (``methods.agreement``; None when
    the blocks were relabelled one by one).
    """

    mmd2: np.ndarray
    pvalue: object = None
    statistic: float = None
    units_per_chain: int = None


def _agreement(G, sizes, blocks, n_chain, n_permutations, rng, bar):
    # Every other block of each chain: the blocks used are a block apart, so nearly
    # independent (left out of the statistic or not, neighbouring blocks make the
    # terms of one chain depend on each other, which relabelling does not reproduce:
    # with all blocks and neighbours left out, 64 chains of 100 draws were rejected
    # in 7.7 % of valid runs at level 1.25 %).
    n_blocks = blocks.blocks_per_chain[0]
    used = np.flatnonzero(np.tile(np.arange(n_blocks) % 2 == 0, n_chain))
    used_sums = G[np.ix_(used, used)].copy()
    used_counts = np.outer(sizes[used], sizes[used])
    np.fill_diagonal(used_sums, 0.0)
    np.fill_diagonal(used_counts, 0.0)
    if not blocks.testable:
        return np.nan, np.nan
    return agreement_pvalue(used_sums, used_counts, blocks.unit_chain[used], n_permutations,
                            rng, bar)


def mmd_tests(G, blocks, *, n_chain, n_draw, two_sample, test, n_permutations, rng,
              progress):
    """MMD^2 and the permutation tests from the U x U sums: :class:`MMDResult`.

    ``two_sample``: the samples are data's chains and other's (``n_chain`` is data's);
    otherwise every pair of chains (``test="pairs"``) or all chains at once (``"all"``).
    The permutations cost O(n_permutations U^2) (a bar over them with ``progress``).
    """
    sizes = np.diff(blocks.unit_start).astype(np.float64)
    n_units = G.shape[0]
    if two_sample or test == "all":
        n_tests, units_per_test = 1, n_units
    else:
        n_tests, units_per_test = n_chain * (n_chain - 1) // 2, 2 * blocks.blocks_per_chain[0]
    n_relabellings = n_tests * n_permutations if blocks.testable else 0
    # About 10 U^2 flops per relabelling (two products with the U x U sums) at 1 GFLOP/s.
    with progress_bar(progress, n_relabellings, n_relabellings * 10 * units_per_test**2 / 1e9,
                      desc="mmd (permutations)", unit="permutation") as bar:
        if test == "pairs" or two_sample:
            # The pairwise and two-sample tests leave out pairs in the same or adjacent
            # blocks.
            test_sums, test_counts = far_pair_sums(G, sizes, blocks.unit_chain)
        if two_sample:
            n_x_units = n_chain * blocks.blocks_per_chain[0]
            split = np.zeros((1, G.shape[0]), dtype=bool)
            split[0, :n_x_units] = True
            counts = np.outer(sizes, sizes) - np.diag(sizes)
            pvalue = None
            if n_permutations:
                pvalue = (permutation_pvalue(test_sums, test_counts, n_x_units, n_permutations,
                                             rng, bar) if blocks.testable else np.nan)
            return MMDResult(mmd2=split_statistic(G, counts, split)[0], pvalue=pvalue)
        n_blocks = blocks.blocks_per_chain[0]
        chain_sums = G.reshape(n_chain, n_blocks, n_chain, n_blocks).sum(axis=(1, 3))
        diag = np.diag(chain_sums)
        mmd2 = mmd2_from_sums(diag[:, None], diag[None, :], chain_sums, n_draw, n_draw)
        np.fill_diagonal(mmd2, 0.0)
        if n_permutations and test == "all":
            statistic, pvalue = _agreement(G, sizes, blocks, n_chain, n_permutations, rng, bar)
            return MMDResult(mmd2=mmd2, pvalue=pvalue, statistic=statistic)
        if not n_permutations:
            return MMDResult(mmd2=mmd2)
        pvalue = np.full((n_chain, n_chain), np.nan)
        for i in range(n_chain if blocks.testable else 0):
            for j in range(i + 1, n_chain):
                index = np.r_[i * n_blocks: (i + 1) * n_blocks, j * n_blocks: (j + 1) * n_blocks]
                pvalue[i, j] = pvalue[j, i] = permutation_pvalue(
                    test_sums[np.ix_(index, index)], test_counts[np.ix_(index, index)],
                    n_blocks, n_permutations, rng, bar)
        return MMDResult(mmd2=mmd2, pvalue=pvalue)


def _chain_mmd2(pooled, n_chain, n_draw, preconditioner, kernel, progress):
    """MMD^2 (chain, chain) of every pair of chains, from one pass with the chains as units."""
    chain_start = np.arange(n_chain + 1, dtype=np.int64) * n_draw
    chain_sums = unit_kernel_sums(pooled, chain_start, preconditioner, kernel, progress)
    diag = np.diag(chain_sums)
    mmd2 = mmd2_from_sums(diag[:, None], diag[None, :], chain_sums, n_draw, n_draw)
    np.fill_diagonal(mmd2, 0.0)
    return mmd2


def mmd_from_draws(pooled, blocks, preconditioner, kernel, *, n_chain, n_draw, two_sample,
                   test, n_permutations, rng, progress, mmd2=True, what="mmd"):
    """The pass of kernel sums and :func:`mmd_tests` on the pooled draws: :class:`MMDResult`.

    ``pooled`` (N, d): every chain of the samples, one after the other (``blocks`` from
    :func:`plan_blocks`). Up to ``DENSE_MAX_UNITS`` blocks: :func:`unit_kernel_sums` then
    :func:`mmd_tests`. Above, the test that all chains agree is streamed
    (``methods.agreement.streamed_agreement``, O(N d + U^2) memory for its U <= 2048
    units; MMD^2 between chains from a second pass with the chains as units, skipped with
    ``mmd2=False``: then ``mmd2`` is None), and the other tests hold one U x U array of sums
    (refused up front, ``MemoryError``, when the U x U arrays would not fit in the memory
    available). ``what`` names the caller in that message.
    """
    n_units = blocks.unit_start.shape[0] - 1
    if test == "all" and not two_sample and n_permutations and n_units > DENSE_MAX_UNITS:
        statistic = pvalue = np.nan
        units_per_chain = None
        if blocks.testable:
            statistic, pvalue, units = streamed_agreement(
                pooled, blocks.unit_start, n_chain, blocks.blocks_per_chain[0],
                preconditioner, kernel, n_permutations, rng, progress, what=what)
            units_per_chain = units.per_chain
        chains = (_chain_mmd2(pooled, n_chain, n_draw, preconditioner, kernel, progress)
                  if mmd2 else None)
        return MMDResult(mmd2=chains, pvalue=pvalue, statistic=statistic,
                         units_per_chain=units_per_chain)
    if n_units > DENSE_MAX_UNITS:
        check_memory(
            _DENSE_BYTES_PER_ENTRY * float(n_units) ** 2,
            f"{what}: the permutation tests between {n_units} blocks of draws (kernel sums "
            "between every pair of blocks)",
            "Pass a longer block_length= (fewer blocks), or test='all' (one test that all "
            "chains agree, streamed), or fewer draws (thinned chains).")
    G = unit_kernel_sums(pooled, blocks.unit_start, preconditioner, kernel, progress)
    return mmd_tests(G, blocks, n_chain=n_chain, n_draw=n_draw, two_sample=two_sample,
                     test=test, n_permutations=n_permutations, rng=rng, progress=progress)
