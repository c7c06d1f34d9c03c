"""Maximum mean discrepancy between chains, or between two samples: ``mmd``.

No score is needed: MMD compares draws with draws, so it sees what score-based
discrepancies are blind to (chains stuck in different, well separated modes).

Data flow: input -> draws (chain, draw, d) -> one preconditioner from all draws ->
contiguous blocks of draws ("units", ``stats.mmd.block_units``) -> one tiled pass
``engine.multi_products.base_kernel_unit_sums`` giving the kernel sums between every pair of
units -> MMD^2 of every pair of chains (or of the two samples) and block-permutation
p-values, both from the U x U sums alone -> a labelled ``xarray.DataArray`` (the p-values
as its ``pvalue`` coordinate).
"""

import numbers
import warnings

import numba as nb
import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag.stats.mmd import (
    agreement_statistic,
    auto_block_length,
    block_units,
    far_pair_sums,
    mmd2_from_sums,
    permutation_pvalue,
    split_statistic,
)
from steindiag.engine.multi_products import base_kernel_unit_sums
from steindiag.engine.progress import CONSERVATIVE_FLOPS, check_progress, progress_bar
from steindiag.engine.permutations import within_sums
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag._validate import check_rng
from steindiag.inputs import as_trace, is_labelled, read_input
from steindiag.inputs._labels import provenance
from steindiag.kernels import make_kernel

__all__ = ["mmd"]

# Fewer blocks than this per chain: the permutation p-value is coarse or unreliable, warn.
_MIN_BLOCKS = 10
# Parts of the parallel pass: max(_PARTS, threads), each with its own U x U sums. The
# partition of the rows into parts is static, so the sums are bitwise the same for any
# number of threads up to _PARTS.
_PARTS = 8
# Relative spread below which a coordinate is constant up to round-off (a few thousand
# ulp of float64): no parameter of a real posterior is that concentrated.
_ROUND_OFF = 1e-12


_TESTS = ("pairs", "all")
# Relabellings evaluated at a time in the test of agreement (bounds the (chunk, U) labels).
_RELABEL_CHUNK = 256


def agreement_pvalue(sums, counts, unit_chain, n_permutations, rng, bar=None):
    """p-value of the test that all chains agree: blocks relabelled among the chains.

    ``sums`` and ``counts`` (U, U): kernel sums and pair counts between the blocks used
    (nearly independent ones: every other block of a chain), pairs within a block left
    out (zero diagonal); ``unit_chain`` (U,): the chain of each block. Each relabelling is a uniformly random permutation of ``unit_chain``
    (every chain keeps its number of blocks); the statistic is
    ``stats.mmd.agreement_statistic``. Returns (observed statistic, p-value), p =
    (1 + #{relabelled >= observed}) / (1 + n_permutations). O(n_permutations U^2) time.
    ``bar`` (optional, with ``update(n)``) advances by the relabellings done.
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


def _mmd_iv(n_permutations, block_length, rng, test="pairs"):
    if not isinstance(test, str) or test not in _TESTS:
        raise ValueError(f"test must be one of {list(_TESTS)}; got {test!r}.")
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, numbers.Integral):
        raise TypeError(
            f"n_permutations must be an integer >= 0; got {type(n_permutations).__name__}."
        )
    if n_permutations < 0:
        raise ValueError(f"n_permutations must be an integer >= 0; got {n_permutations}.")
    if not (isinstance(block_length, str) and block_length == "auto"):
        if isinstance(block_length, bool) or not isinstance(block_length, numbers.Integral):
            raise TypeError(
                f"block_length must be 'auto' or a positive integer; got {block_length!r}."
            )
        if block_length < 1:
            raise ValueError(
                f"block_length must be 'auto' or a positive integer; got {block_length}."
            )
        block_length = int(block_length)
    rng = check_rng(rng)
    return int(n_permutations), block_length, rng


def _prepare_draws(data, model, name, group, var_names, coords, sample_dims,
                   compile_mode=None):
    """The draws of ``data`` (the unconstrained space if ``model`` is given); no score."""
    try:
        return read_input(data, model, group=group, var_names=var_names, coords=coords,
                          sample_dims=sample_dims, need_score=False,
                          compile_mode=compile_mode)
    except (TypeError, ValueError) as err:
        if name == "data":
            raise
        raise type(err)(f"other: {err}") from err


def _drop_constant(samples, parameters, preconditioner):
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
            f"round-off) in every draw ({names[:10]}{'...' if len(names) > 10 else ''}): the samples are "
            "equal, so MMD is 0 and there is nothing to compare."
        )
    warnings.warn(
        f"mmd: {len(names)} coordinate(s) have one value in every draw (up to round-off), "
        f"{names[:10]}"
        f"{'...' if len(names) > 10 else ''}; they add nothing to MMD and are left out "
        "(attrs['constant_parameters_left_out']). Usually a deterministic of the trace, "
        "such as the unit diagonal of an LKJ correlation matrix; pass model= to compare "
        "the model's free variables, or var_names= to choose the variables.",
        UserWarning, stacklevel=3,
    )
    keep = np.flatnonzero(~constant)
    return ([np.ascontiguousarray(s[:, :, keep]) for s in samples],
            [parameters[k] for k in keep], names)


def _match_parameters(prepared, prepared_other, both_labelled):
    """other's draws with their columns in data's parameter order (traces: by name)."""
    names, other_names = list(prepared.parameter), list(prepared_other.parameter)
    if not both_labelled or other_names == names:
        return prepared_other.draws
    if sorted(other_names) != sorted(names):
        missing = [p for p in names if p not in other_names]
        extra = [p for p in other_names if p not in names]
        raise ValueError(
            "other must hold the same parameters as data (traces are matched by name); "
            f"data has {names}, other lacks {missing} and has {extra} instead."
        )
    return prepared_other.draws[:, :, [other_names.index(p) for p in names]]


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
    with its own U x U sums (8 P U^2 bytes); the N x N kernel matrix is not stored.
    Ctrl-C is honoured between calls of about 0.25 s.
    """
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


def mmd(data, other=None, *, model=None, n_permutations=0, block_length="auto", rng=None,
        test="pairs", kernel="imq", c=None, beta=None, preconditioner="standardize",
        group="posterior", var_names=None, coords=None, sample_dims=None, compile_mode=None,
        progress=None):
    """Maximum mean discrepancy (MMD^2, unbiased) between chains, or between two samples.

    Parameters
    ----------
    data : array_like, xarray.DataTree, arviz.InferenceData or xarray.Dataset
        Draws: an array of shape (chain, draw, d), or (draw, d) for one chain; or a
        trace (``pm.sample`` output, or its posterior Dataset).
    other : same kinds as ``data``, optional
        A second sample. Without it, every pair of chains of ``data`` is compared.
        When both are traces, their parameters are matched by name (and must be the
        same); otherwise by position.
    model : pymc.Model, optional
        With a trace: compare the draws in the model's unconstrained space (the value
        variables), the space of :func:`steindiag.ksd`. Without it, the trace's
        variables as stored. No score is computed either way.
    compile_mode : str or pytensor.compile.mode.Mode, optional
        With ``model``: the PyTensor mode of the map from the stored constrained values
        to the unconstrained space (as in :func:`steindiag.ksd`).
    n_permutations : int, default 0
        Permutations for the p-values (0: no p-values). The smallest possible p-value
        is 1 / (1 + n_permutations).
    block_length : "auto" or int, default "auto"
        Draws per block in the permutation test (blocks of consecutive draws of one chain
        are permuted whole). ``"auto"``: 5 times the largest integrated autocorrelation
        time of any coordinate of any chain, rounded up, and at least 1/100 of the chain
        (so at most 100 blocks per chain); with ``test="all"``, 5 times the largest tau
        of the chains' mean autocorrelation, and every other block is used (the blocks
        used are then a block apart, so nearly independent). Use 1 for independent
        draws of a small sample only: the permutations cost O(n_permutations U^2) for U blocks, and the
        block sums take 8 P U^2 bytes (P = max(8, threads)), so U = N draws of 10,000
        would need 6.4 GB.
    rng : int, numpy.random.Generator or None
        Source of the permutations (``numpy.random.default_rng(rng)``).
    test : {"pairs", "all"}, default "pairs"
        Without ``other``, which permutation test: ``"pairs"``, one test for every pair
        of chains (``pvalue`` (chain, chain_other)); ``"all"``, one test that all chains
        agree (``pvalue`` (), and ``agreement_statistic`` ()): every other block of every
        chain (so that the blocks used are nearly independent) is relabelled among the
        chains, and the statistic is the mean kernel over pairs
        of draws in the same chain minus the mean over pairs in different chains. With
        many chains, "all" is one test instead of C (C - 1) / 2 (no correction for
        multiple testing needed) and costs O(n_permutations U^2) for U blocks in all.
    kernel : {"imq", "gaussian", "matern32", "matern52"} or kernel object, default "imq"
        The base kernel k, as in :func:`steindiag.ksd` (here k itself, not a Stein
        kernel: MMD needs no score). All four are characteristic on R^d, so MMD is 0 only
        for equal distributions.
    c : float, optional
        IMQ offset, c > 0 (default 1.0). Only with ``kernel="imq"``.
    beta : float, optional
        IMQ exponent, -1 < beta < 0 (default -0.5). Only with ``kernel="imq"``.
    preconditioner : str or array_like, default "standardize"
        As in :func:`steindiag.ksd`: ``"standardize"``, ``"identity"``, ``"med"``,
        ``"sclmed"``, ``"smpcov"``, or Lambda as an array; fixed once from all draws
        (of ``data`` and ``other``).
    group, var_names, coords, sample_dims : optional
        Which draws of a trace to use (ArviZ conventions), for ``data`` and ``other``.
    progress : bool or None, default None
        Progress bars on stderr (tqdm if installed): one for the kernel sums, one for the
        permutations. None: only when interactive and the stage is expected to take more
        than a few seconds. Ctrl-C stops either stage within about a second; no thread is
        left running.

    Returns
    -------
    xarray.DataArray
        Named ``mmd2``. Without ``other``: dims (``chain``, ``chain_other``), the
        unbiased MMD^2 of every pair of chains (symmetric, 0 on the diagonal). With
        ``other``: 0-d, the MMD^2 between all draws of ``data`` and all draws of
        ``other`` (chains pooled).
        With ``n_permutations > 0`` the p-values come along as the non-dimension
        coordinate ``pvalue``, with the same dims (NaN on the diagonal), and
        ``pvalue_reliable`` (False when a chain has fewer than 10 blocks), so
        ``res.pvalue`` or ``res["pvalue"]`` reads them and selecting a pair
        (``res.sel(chain=0, chain_other=2)``) keeps its p-value with it.
        ``attrs`` record the kernel, c, beta, the preconditioner, the sizes, the block
        length and the autocorrelation time it came from, the trace's ``group``, and
        ``constant_parameters_left_out`` (see Warns).

        A DataArray rather than a Dataset because the result is one matrix: it can be
        indexed, compared and plotted as such (``res > 0.1``, ``res.max()``), while
        the p-values, which only qualify its entries, follow every selection.

    Warns
    -----
    UserWarning
        When coordinates have one value in every draw of both samples, up to round-off
        (a trace's deterministic, e.g. the unit diagonal of an LKJ correlation matrix,
        read without ``model=``): they change no distance, so they are left out (unless
        the preconditioner is given as an array).
    UserWarning
        With permutations, when a chain has fewer than 10 blocks: its chains are too
        short for their autocorrelation, and the p-values are unreliable
        (``pvalue_reliable`` False). With fewer than 3 blocks no pair of blocks is far
        enough apart for the test: the p-values are NaN. MMD^2 is returned either way.

    Notes
    -----
    With the base kernel k(x, y) = (c^2 + (x-y)^T A (x-y))^beta (the IMQ kernel of
    :func:`steindiag.ksd`, before the Stein operator), samples x_1..x_m and y_1..y_n,

        MMD^2_U = [m(m-1)]^-1 sum_(i != j) k(x_i, x_j) + [n(n-1)]^-1 sum_(i != j) k(y_i, y_j)
                  - 2 (mn)^-1 sum_(i, j) k(x_i, y_j)

    is unbiased for the squared distance between the two distributions' kernel mean
    embeddings, which is 0 if and only if they are equal (the IMQ kernel is
    characteristic), so it can be slightly negative.

    Permutation test. Under the null both samples come from one distribution; for
    independent draws any relabelling of the pooled draws is equally likely. MCMC draws
    are autocorrelated, so the draws are cut into blocks of consecutive draws, long
    compared with the autocorrelation time, and whole blocks are permuted (as in the
    block bootstrap); each permutation keeps the number of blocks of each sample. The
    p-value is (1 + #{permuted MMD^2 >= observed}) / (1 + n_permutations) (the observed
    split counts as one of the permutations, so P(p <= alpha) <= alpha when the blocks
    are exchangeable). Between C chains each of the C (C - 1) / 2 pairs has its own
    test, with no correction for their number: with many chains, about alpha of the
    pairs fall below alpha by chance; a chain that sampled something else shows small
    p-values against every other chain. All
    permutations are computed from the U x U matrix of kernel sums between blocks, so
    they cost O(n_permutations U^2), not another pass over the draws.

    Cost: one pass over all pairs of draws, O(N^2 d) time for N draws in all; O(N d)
    memory, plus 8 P U^2 bytes for the sums between the U blocks (P = max(8, threads)
    parallel parts; U is the number of chains without permutations, at most 100 per
    chain with the automatic block length); the N x N kernel matrix is never stored.

    References
    ----------
    Gretton, Borgwardt, Rasch, Schoelkopf & Smola (2012), A kernel two-sample test, JMLR.
    Kuensch (1989), The jackknife and the bootstrap for general stationary observations,
    Annals of Statistics (blocks of consecutive observations).

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((3, 300, 2))
    >>> x[2] += 3.0                                   # chain 2 sits elsewhere
    >>> res = steindiag.mmd(x, n_permutations=200, rng=1)
    >>> res.dims
    ('chain', 'chain_other')
    >>> bool(res.pvalue[0, 2] < 0.01), bool(res.pvalue[0, 1] > 0.01)
    (True, True)
    """
    n_permutations, block_length, rng = _mmd_iv(n_permutations, block_length, rng, test)
    check_progress(progress)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    data, other = as_trace(data, model), as_trace(other, model)
    prepared = _prepare_draws(data, model, "data", group, var_names, coords, sample_dims,
                              compile_mode)
    draws = prepared.draws
    n_chain, n_draw, d = draws.shape
    samples = [draws]
    if other is not None:
        prepared_other = _prepare_draws(other, model, "other", group, var_names, coords,
                                        sample_dims, compile_mode)
        if prepared_other.draws.shape[2] != d:
            raise ValueError(
                f"other must have the same number of parameters as data ({d}); got "
                f"{prepared_other.draws.shape[2]}."
            )
        samples.append(_match_parameters(prepared, prepared_other,
                                         is_labelled(data) and is_labelled(other)))
    elif n_chain < 2:
        raise ValueError(
            "data has one chain: pass other= (a second sample), or data with at least 2 "
            "chains to compare the chains with each other."
        )
    samples, parameters, constant = _drop_constant(samples, list(prepared.parameter),
                                                   preconditioner)
    d = len(parameters)
    pooled = np.concatenate([s.reshape(-1, d) for s in samples], axis=0)
    pre = make_preconditioner(preconditioner, pooled, parameters)

    tau = np.nan
    if n_permutations == 0:
        lengths = [s.shape[1] for s in samples]
    else:
        if block_length == "auto":
            block_length, tau = auto_block_length(
                samples, mean_over_chains=test == "all" and other is None)
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
    # Chain of every unit, numbered across data and other (other's chains after data's).
    unit_chain = np.concatenate([chains + (0 if k == 0 else n_chain)
                                 for k, chains in enumerate(unit_chain)])
    # Too few blocks: the statistic is still returned; the p-values are NaN (fewer than
    # 3 blocks: no pair of blocks is far enough apart) or marked unreliable, and a warning.
    testable = min(blocks_per_chain) >= 3
    reliable = min(blocks_per_chain) >= _MIN_BLOCKS
    if test == "all" and other is None:
        # One test over all chains: what it needs is far pairs within every chain (3
        # blocks) and enough blocks in all to relabel, not 10 blocks in each chain.
        reliable = testable and sum(blocks_per_chain) * n_chain >= 2 * _MIN_BLOCKS
    if n_permutations and not reliable:
        needed = (f"3 per chain and {2 * _MIN_BLOCKS} in all" if test == "all" and other is None
                  else f"{_MIN_BLOCKS}")
        warnings.warn(
            f"mmd: blocks of {block_length} draws leave only {min(blocks_per_chain)} blocks "
            f"per chain (fewer than {needed}); the permutation p-values are "
            + ("coarse or unreliable (pvalue_reliable is False)" if testable else
               "not computed (NaN): the test needs at least 3 blocks per chain")
            + ". Run longer chains, or pass a smaller block_length if the draws are less "
            "autocorrelated than estimated.",
            UserWarning, stacklevel=2,
        )
    G = unit_kernel_sums(pooled, unit_start, pre, kernel, progress)
    sizes = np.diff(unit_start).astype(np.float64)
    attrs = {
        "kernel": kernel.label,
        "kernel_formula": (f"{kernel.label} base kernel k(x, y) = {kernel.formula}, "
                           "t = (x-y)^T A (x-y), A = Lambda^-1"),
        "estimator": "unbiased MMD^2 (U-statistic)",
        **kernel.parameters(),
        **pre.attrs(),
        "n_parameter": d,
        "parameters": parameters,
        "constant_parameters_left_out": constant,
        **provenance(prepared.attrs),
        "n_permutations": n_permutations,
    }
    if n_permutations:
        attrs.update({
            "permutation": "blocks of consecutive draws permuted whole",
            "block_length": int(block_length),
            "autocorrelation_time": tau,
            "pvalue_rule": "(1 + #{permuted >= observed}) / (1 + n_permutations)",
        })

    n_units = G.shape[0]
    if other is not None or test == "all":
        n_tests, units_per_test = 1, n_units
    else:
        n_tests, units_per_test = n_chain * (n_chain - 1) // 2, 2 * blocks_per_chain[0]
    n_relabellings = n_tests * n_permutations if testable else 0
    # About 10 U^2 flops per relabelling (two products with the U x U sums) at 1 GFLOP/s.
    with progress_bar(progress, n_relabellings, n_relabellings * 10 * units_per_test**2 / 1e9,
                      desc="mmd (permutations)", unit="permutation") as bar:
        return _with_pvalues(G, sizes, unit_chain, other, test, n_chain, n_draw,
                             blocks_per_chain, samples, n_permutations, testable, reliable,
                             rng, attrs, prepared, bar)


def _with_pvalues(G, sizes, unit_chain, other, test, n_chain, n_draw, blocks_per_chain, samples,
                  n_permutations, testable, reliable, rng, attrs, prepared, bar):
    """The labelled result of ``mmd``, with its permutation p-values (``bar``: advanced by
    the permutations done)."""
    if test == "pairs" or other is not None:
        # The pairwise and two-sample tests leave out pairs in the same or adjacent blocks.
        test_sums, test_counts = far_pair_sums(G, sizes, unit_chain)
    if other is not None:
        n_x_units = n_chain * blocks_per_chain[0]
        split = np.zeros((1, G.shape[0]), dtype=bool)
        split[0, :n_x_units] = True
        counts = np.outer(sizes, sizes) - np.diag(sizes)
        attrs.update({"n_draw_data": n_chain * n_draw,
                      "n_draw_other": int(samples[1].shape[0] * samples[1].shape[1])})
        coords = {}
        if n_permutations:
            coords["pvalue"] = ((), permutation_pvalue(test_sums, test_counts, n_x_units,
                                                        n_permutations, rng, bar)
                                if testable else np.nan,
                                {"long_name": "block-permutation p-value"})
            coords["pvalue_reliable"] = ((), reliable,
                                         {"long_name": "whether the p-value can be trusted"})
        return xr.DataArray(split_statistic(G, counts, split)[0], coords=coords, name="mmd2",
                            attrs=netcdf_attrs({"long_name": "unbiased MMD^2 between data "
                                                             "and other", **attrs}))

    n_blocks = blocks_per_chain[0]
    chain_sums = G.reshape(n_chain, n_blocks, n_chain, n_blocks).sum(axis=(1, 3))
    diag = np.diag(chain_sums)
    mmd2 = mmd2_from_sums(diag[:, None], diag[None, :], chain_sums, n_draw, n_draw)
    np.fill_diagonal(mmd2, 0.0)
    coords = {"chain": ("chain", prepared.chain), "chain_other": ("chain_other", prepared.chain)}
    if n_permutations and test == "all":
        # Every other block of each chain: the blocks used are a block apart, so nearly
        # independent (left out of the statistic or not, neighbouring blocks make the
        # terms of one chain depend on each other, which relabelling does not reproduce:
        # with all blocks and neighbours left out, 64 chains of 100 draws were rejected
        # in 7.7 % of valid runs at level 1.25 %).
        n_blocks = blocks_per_chain[0]
        used = np.flatnonzero(np.tile(np.arange(n_blocks) % 2 == 0, n_chain))
        used_sums = G[np.ix_(used, used)].copy()
        used_counts = np.outer(sizes[used], sizes[used])
        np.fill_diagonal(used_sums, 0.0)
        np.fill_diagonal(used_counts, 0.0)
        statistic, pvalue = (agreement_pvalue(used_sums, used_counts, unit_chain[used],
                                              n_permutations, rng, bar)
                             if testable else (np.nan, np.nan))
        coords["pvalue"] = ((), pvalue, {"long_name": "p-value of the test that all chains "
                                                      "agree (blocks relabelled among them)"})
        coords["pvalue_reliable"] = ((), reliable,
                                     {"long_name": "whether the p-value can be trusted"})
        coords["agreement_statistic"] = ((), statistic, {
            "long_name": "mean kernel within chains minus between chains (every other "
                         "block)"})
    elif n_permutations:
        pvalue = np.full((n_chain, n_chain), np.nan)
        for i in range(n_chain if testable else 0):
            for j in range(i + 1, n_chain):
                index = np.r_[i * n_blocks : (i + 1) * n_blocks, j * n_blocks : (j + 1) * n_blocks]
                pvalue[i, j] = pvalue[j, i] = permutation_pvalue(
                    test_sums[np.ix_(index, index)], test_counts[np.ix_(index, index)],
                    n_blocks, n_permutations, rng, bar)
        coords["pvalue"] = (("chain", "chain_other"), pvalue,
                            {"long_name": "block-permutation p-value between chains"})
        coords["pvalue_reliable"] = (("chain", "chain_other"), np.full((n_chain, n_chain),
                                                                      reliable),
                                     {"long_name": "whether the p-value can be trusted"})
    attrs.update({"n_chain": n_chain, "n_draw": n_draw})
    return xr.DataArray(mmd2, dims=("chain", "chain_other"), coords=coords, name="mmd2",
                        attrs=netcdf_attrs({"long_name": "unbiased MMD^2 between chains",
                                            **attrs}))
