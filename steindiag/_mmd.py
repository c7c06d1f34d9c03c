"""Maximum mean discrepancy between chains, or between two samples: ``mmd``.

No score is needed: MMD compares draws with draws, so it sees what score-based
discrepancies are blind to (chains stuck in different, well separated modes).

Data flow: input -> ``inputs.read_input`` (the draws only; ``other`` likewise) ->
``methods.mmd`` (constant coordinates left out, one preconditioner from all draws, blocks
of draws, one tiled pass of kernel sums between blocks, MMD^2 and block-permutation
p-values from those sums) -> ``outputs.mmd`` (a labelled ``xarray.DataArray``, the
p-values as its ``pvalue`` coordinate).
"""

import numpy as np

from steindiag._docs import fill_doc
from steindiag._validate import check_choice, check_int, check_rng, warn_user
from steindiag.engine.progress import check_progress
from steindiag.inputs import read_input
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.methods.mmd import TESTS, drop_constant, mmd_from_draws, plan_blocks
from steindiag.outputs.mmd import blocks_message, constant_message, mmd_attrs, mmd_dataarray

__all__ = ["mmd"]


def _mmd_iv(n_permutations, block_length, rng, test):
    check_choice(test, "test", TESTS)
    n_permutations = check_int(n_permutations, "n_permutations", minimum=0)
    if not (isinstance(block_length, str) and block_length == "auto"):
        block_length = check_int(block_length, "block_length", minimum=1,
                                 wanted="'auto' or a positive integer")
    return n_permutations, block_length, check_rng(rng)


def _read_draws(data, model, name, **options):
    """The draws of ``data`` (the unconstrained space if ``model`` is given); no score."""
    try:
        return read_input(data, model, need_score=False, **options)
    except (TypeError, ValueError) as err:
        if name == "data":
            raise
        raise type(err)(f"other: {err}") from err


def _match_parameters(pending, other, both_labelled):
    """other's draws with their columns in data's parameter order (traces: by name)."""
    names, other_names = list(pending.canonical), list(other.canonical)
    if other.draws.shape[2] != len(names):
        raise ValueError(f"other must have the same number of parameters as data "
                         f"({len(names)}); got {other.draws.shape[2]}.")
    if not both_labelled or other_names == names:
        return other.draws
    if sorted(other_names) != sorted(names):
        missing = [p for p in names if p not in other_names]
        extra = [p for p in other_names if p not in names]
        raise ValueError(
            "other must hold the same parameters as data (traces are matched by name); "
            f"data has {names}, other lacks {missing} and has {extra} instead."
        )
    return other.draws[:, :, [other_names.index(p) for p in names]]


@fill_doc
def mmd(data, other=None, *, model=None, n_permutations=0, block_length="auto", rng=None,
        test="pairs", kernel="imq", c=None, beta=None, preconditioner="standardize",
        group="posterior", var_names=None, coords=None, sample_dims=None, compile_mode=None,
        filter_vars=None, labeller=None, progress=None):
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
        draws of a small sample only: the permutations cost O(n_permutations U^2) for U
        blocks, and the block sums take 8 P U^2 bytes up to 1024 blocks (P = max(8,
        threads)), 8 U^2 bytes above (U = 10,000 blocks: 0.8 GB; refused up front, with
        a ``MemoryError`` giving the size, when it cannot fit), except for
        ``test="all"``, which is streamed above 1024 blocks (see Notes).
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
    group, var_names, filter_vars, coords, sample_dims : optional
        Which draws of a trace to use (ArviZ conventions: ``~`` excludes, ``filter_vars``
        "like" or "regex", as in :func:`steindiag.ksd`), for ``data`` and ``other``.
    {labeller}
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
    chain with the automatic block length) up to 1024 blocks, 8 U^2 bytes above; the
    N x N kernel matrix is never stored.

    Many chains. With many short chains the blocks are many (1000 chains of 60 draws in
    blocks of 5: 12,000), so above 1024 blocks ``test="all"`` is streamed: only the
    blocks it relabels are read (a quarter of the pairs of draws), each chain's used
    blocks are merged into at most max(2, 2048 / C) units of equally many consecutive
    used blocks (fewer than one unit's worth left out at each chain's end; the number
    is ``attrs["agreement_units_per_chain"]``), and the units are relabelled among the
    chains. The statistic is the same, over the pairs of draws in different units
    (pairs of blocks merged into one unit are in one chain under every relabelling, so
    they say nothing about which chain a unit belongs to); memory O(N d + U^2) with U
    at most 2048 units (32 MiB) while 2 units per chain fit, and each relabelling costs
    only its pairs within chains. MMD^2 between chains then takes a second pass, with
    the chains as units. See the Background page, "Calibration on MCMC output"; measured
    levels: benchmarks/results/calibration.md.

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
    options = dict(group=group, var_names=var_names, coords=coords, sample_dims=sample_dims,
                   filter_vars=filter_vars, compile_mode=compile_mode, labeller=labeller)
    pending = _read_draws(data, model, "data", **options)
    n_chain, n_draw, d = pending.draws.shape
    samples = [pending.draws]
    if other is not None:
        read_other = _read_draws(other, model, "other", **options)
        samples.append(_match_parameters(pending, read_other, pending.origin.labelled
                                         and read_other.origin.labelled))
    elif n_chain < 2:
        raise ValueError(
            "data has one chain: pass other= (a second sample), or data with at least 2 "
            "chains to compare the chains with each other."
        )
    samples, parameters, constant = drop_constant(samples, list(pending.parameter),
                                                  preconditioner)
    if constant:
        warn_user(constant_message(constant))
    pooled = np.concatenate([s.reshape(-1, len(parameters)) for s in samples], axis=0)
    pre = make_preconditioner(preconditioner, pooled, parameters)
    test_all = test == "all" and other is None
    blocks = plan_blocks(samples, n_permutations, block_length, test_all=test_all)
    if n_permutations and not blocks.reliable:
        warn_user(blocks_message(blocks, test_all))
    attrs = mmd_attrs(kernel, pre, parameters, constant, pending.attrs, n_permutations, blocks)
    result = mmd_from_draws(pooled, blocks, pre, kernel, n_chain=n_chain, n_draw=n_draw,
                            two_sample=other is not None, test=test,
                            n_permutations=n_permutations, rng=rng, progress=progress)
    n_other = None if other is None else int(samples[1].shape[0] * samples[1].shape[1])
    return mmd_dataarray(result, blocks, attrs, chain=pending.chain, n_draw=n_draw, test=test,
                         n_draw_other=n_other)
