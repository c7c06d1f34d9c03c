"""Goodness-of-fit test with the kernel Stein discrepancy: ``ksd_test``.

Data flow: input -> ``SteinInput`` (as ``ksd``) -> one preconditioner from the pooled
draws -> bootstrap weights W (N, 1 + B), column 0 all ones (``stats.bootstrap``) -> one
tiled pass ``engine.forms.quadratic_forms`` giving w^T K_p w for every column, per chain
and pooled -> statistics, p-values -> labelled ``xarray.Dataset``.
"""

import dataclasses
import numbers
import warnings

import numpy as np
import xarray as xr

from steindiag.stats.autocorrelation import (
    chains_autocorrelation_time,
    integrated_autocorrelation_time,
)
from steindiag.stats.bootstrap import (
    MIN_POOLED_BLOCKS,
    MIN_THINNED_DRAWS,
    bootstrap_pvalue,
    bootstrap_weights,
    flip_probability,
    thin_chains,
    thinned_offsets,
    thinning_lag,
)
from steindiag._attrs import netcdf_attrs
from steindiag._ksd import _COMMON_PARAMETERS, _JAX_LOG_DENSITY, kernel_attrs
from steindiag.engine.forms import forms_pairs, quadratic_forms
from steindiag.engine.progress import CONSERVATIVE_FLOPS, check_progress, make_progress
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag._validate import check_rng
from steindiag.inputs import as_trace, read_input
from steindiag.inputs._prepare import has_chain_dimension
from steindiag.engine import resolve_backend
from steindiag.kernels import make_kernel
from steindiag._nystrom import check_estimator, nystrom_forms
from steindiag.stats.damping import damping_window

__all__ = ["ksd_test"]

_BOOTSTRAPS = ("auto", "iid", "wild", "thinned", "multinomial")
# Below this many expected sign flips in a chain, the wild bootstrap has too few
# effectively independent pieces to be trusted: warn.
_MIN_EXPECTED_FLIPS = 10.0

# Parameters shared with ksd, without the engine's method/progress options.
_PARAMETERS = (_COMMON_PARAMETERS.split("    method :")[0].rstrip() + "\n    space :"
               + _COMMON_PARAMETERS.split("    space :")[1].split("    rng :")[0].rstrip())


def _ksd_test_iv(bootstrap, n_bootstrap, rng, pooled, damped=False, estimator="exact"):
    if not isinstance(bootstrap, str) or bootstrap not in _BOOTSTRAPS:
        raise ValueError(f"bootstrap must be one of {list(_BOOTSTRAPS)}; got {bootstrap!r}.")
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, numbers.Integral):
        raise TypeError(
            f"n_bootstrap must be a positive integer; got {type(n_bootstrap).__name__}."
        )
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer; got {n_bootstrap}.")
    if not isinstance(pooled, (bool, np.bool_)):
        raise TypeError(f"pooled must be True or False; got {pooled!r}.")
    if not isinstance(damped, (bool, np.bool_)):
        raise TypeError(f"damped must be True or False; got {damped!r}.")
    if damped and (bootstrap not in ("thinned", "iid", "auto") or estimator != "exact"):
        raise ValueError("damped=True needs bootstrap='thinned' or 'iid' and "
                         f"estimator='exact'; got bootstrap={bootstrap!r}, "
                         f"estimator={estimator!r}.")
    rng = check_rng(rng)
    return int(n_bootstrap), rng, bool(pooled)


def _thinned_forms(prepared, pre, kernel, lag, n_offsets, n_block, rng, n_bootstrap,
                   pooled, backend, window=None, bar=None):
    """Quadratic forms of the thinned test: mean over the first ``n_offsets`` offsets o of
    each block of ``lag`` draws of the forms of the draws o, o + lag, o + 2 lag, ...
    (``n_block`` of each chain; the earliest n_draw - n_block * lag draws are left out),
    with one set of independent signs shared by all offsets (the draws of one block of
    ``lag`` consecutive draws share a sign; see ``stats.bootstrap.thinned_offsets`` for
    why the last offsets of a block are not read).

    ``window``: (m, grad log m) at the draws (``stats.damping.damping_window``); then the
    forms of the damped Stein kernel too, with the same signs (weights times m, scores
    plus grad log m). ``bar``: advanced by every pass. Returns ((per_chain, pooled), damped
    or None).
    """
    n_chain, n_draw, _ = prepared.draws.shape
    weights = bootstrap_weights("iid", rng, n_chain, n_block, n_bootstrap,
                                np.full(n_chain, 0.5))
    first = n_draw - n_block * lag
    sums = [[0.0, 0.0], [0.0, 0.0]]
    for offset in range(n_offsets):
        index = slice(first + offset, n_draw, lag)
        draws = np.ascontiguousarray(prepared.draws[:, index])
        passes = [(prepared.scores[:, index], weights)]
        if window is not None:
            m, grad_log_m = window
            passes.append((prepared.scores[:, index] + grad_log_m[:, index],
                           weights * m[:, index].reshape(-1, 1)))
        for k, (scores, w) in enumerate(passes):
            chain_forms, all_forms = quadratic_forms(
                draws, np.ascontiguousarray(scores), pre, kernel, w, pooled, backend=backend,
                bar=bar)
            sums[k][0] = sums[k][0] + chain_forms
            sums[k][1] = sums[k][1] + (all_forms if pooled else 0.0)
    results = [(per / n_offsets, (all_ / n_offsets if pooled else None))
               for per, all_ in sums]
    return results[0], (results[1] if window is not None else None)


def ksd_test(data, model=None, *, score=None, bootstrap="auto", n_bootstrap=1000, rng=None,
             pooled=True, damped=False, batched=True, kernel="imq", c=None, beta=None,
             preconditioner="standardize",
             group="posterior", var_names=None, coords=None, sample_dims=None, space=None,
             client=None, estimator="exact", n_landmarks=None, compile_mode=None,
             log_density=None, progress=None):
    """Goodness-of-fit test of the draws against p, with the kernel Stein discrepancy.

    Null hypothesis: the draws are distributed as p (the density whose score is given).
    The statistic is N KSD^2_V; its null distribution is simulated by a bootstrap that
    fits the draws: independent signs for independent draws, the wild bootstrap of
    Chwialkowski, Strathmann & Gretton (2016) for autocorrelated MCMC chains.

    Parameters
    ----------
{params}
    bootstrap : {{"auto", "iid", "wild", "thinned", "multinomial"}}, default "auto"
        ``"thinned"``: for MCMC draws, calibrated at every autocorrelation time (the one
        :func:`diagnose` uses): the statistic is the mean over the first L - floor(tau
        - 1) offsets of N_L KSD^2_V of every L-th draw (N_L = draw // L of them
        per chain), L = 1 + floor(5 (tau - 1)), and its bootstrap gives all draws of one
        block of L consecutive draws the same independent +-1 sign (see Notes). ``"wild"``: for MCMC draws;
        each bootstrap weight vector is a +-1 sign chain that flips with probability a
        (chosen per chain from its autocorrelation, see Notes); measured levels up to
        twice the nominal one in the tail (benchmarks/results/calibration.md).
        ``"iid"``: independent Rademacher signs (a = 1/2), for independent draws. ``"multinomial"``: centred multinomial counts c_i - 1 (the weights of
        Liu, Lee & Jordan 2016, applied here to the V-statistic), for independent draws. ``"auto"``: ``"iid"`` for a
        2-D array (draw, d), which has no chain dimension, ``"wild"`` otherwise.
    n_bootstrap : int, default 1000
        Bootstrap replicates B. The smallest possible p-value is 1 / (1 + B).
{log_density}
    rng : int, numpy.random.Generator or None
        Source of the bootstrap weights and of the Nyström landmarks
        (``numpy.random.default_rng(rng)``).
    pooled : bool, default True
        Also test all chains together (cross-chain pairs included). This costs
        (chain * draw)^2 pair evaluations instead of chain * draw^2.
    damped : bool, default False
        Also the statistic of the score-damped (diffusion) Stein operator, with the same
        bootstrap signs (``bootstrap="thinned"`` or ``"iid"``, exact estimator only): weight
        ``m(x) = exp(-2 |z|^2 / q)``, z the draws standardised by their median and MAD
        and q the median of ``|z|^2``, so that a few draws with huge scores (a funnel's
        neck, a prior's tail) do not make up the whole statistic (see Notes). Twice the
        cost.
    progress : bool or None, default None
        Progress bar of the bootstrap pass on stderr (tqdm if installed). None: only
        when interactive and the pass is expected to take more than a few seconds.
        Ctrl-C stops the pass between chunks of about 0.25 s; no thread is left running.
        Not shown for work on a dask ``client`` (the cluster's dashboard shows it).

    Returns
    -------
    xarray.Dataset
        ``statistic`` (chain): N KSD^2_V of each chain, N its draws;
        ``pvalue`` (chain): its bootstrap p-value;
        ``statistic_pooled``, ``pvalue_pooled`` (): the same for all chains pooled
        (only with ``pooled=True``);
        ``bootstrap_statistic`` (chain, bootstrap) and ``bootstrap_statistic_pooled``
        (bootstrap): the simulated null statistics;
        ``statistic_damped``, ``pvalue_damped``, ``bootstrap_statistic_damped`` and their
        ``_pooled`` counterparts (only with ``damped=True``): the same for the damped
        Stein kernel, replicate b with the same signs as the plain replicate b;
        ``autocorrelation_time`` (chain): the tau used for the wild bootstrap;
        ``flip_probability`` (chain): a of the sign chain (1/2 for ``"iid"``, NaN for
        ``"multinomial"``);
        ``expected_sign_flips`` (chain): draw * a, the flips the sign chain is expected
        to make; ``effective_draws`` (chain) and ``effective_draws_pooled`` (): draw / tau,
        summed over chains when pooled;
        ``pvalue_reliable`` (chain) and ``pvalue_reliable_pooled`` (): False where the
        p-value cannot be trusted: with the wild bootstrap, a sign chain expected to
        flip fewer than 10 times (pooled: in any chain); with the thinned one, fewer
        than 20 blocks of L draws in a chain (pooled: fewer than 20 in all, or 5 in a
        chain). The statistic is returned
        either way. ``"iid"`` and ``"multinomial"`` assume independent draws and are
        always marked reliable.
        ``attrs``: ``bootstrap`` (the kind used), ``n_bootstrap``, ``flip_probability``,
        the rule for it, ``thinning_lag`` (L; 1 unless thinned), ``thinning_offsets``
        (offsets of each block read; 1 unless thinned), ``n_draw_tested`` (draws per
        chain in each thinned subsequence), and the kernel and
        preconditioner as in :func:`steindiag.ksd`.

    Warns
    -----
    UserWarning
        With the wild bootstrap, when a chain's sign chain is expected to flip fewer
        than 10 times (a chain with very few effective draws), and with the thinned one,
        when a chain holds fewer than 20 blocks of L draws: its p-value is unreliable
        (``pvalue_reliable`` is False).

    Notes
    -----
    With K_p the Stein kernel matrix of the N draws (see the background page of the
    docs), the statistic is N KSD^2_V = N^-1 1^T K_p 1 and the bootstrap statistics are
    N^-1 w_b^T K_p w_b, b = 1..B, the same V-statistic form with random weights w_b
    (diagonal included, so both sides are built the same way). The p-value is
    (1 + #{{b : bootstrap_b >= statistic}}) / (1 + B): the observed statistic counts as one
    of the B + 1 values and ties count against rejection (Davison & Hinkley 1997, Phipson
    & Smyth 2010). It is never 0 (an estimate from B replicates cannot support a smaller
    one), and P(p <= alpha) <= alpha for every alpha whenever the statistic and the
    replicates are exchangeable; without the +1, a statistic exceeding all B replicates
    would read as p = 0 and be rejected at every level. The bootstrap replicates only
    approximate the null distribution, so the level is exact only as N grows (measured
    levels: see the checking page of the docs).

    Thinned bootstrap: draws L apart, L about 5 tau (tau from the chains' mean
    autocorrelation, largest over the coordinates of the draws and the scores), are
    nearly independent, so the V-statistic of every L-th draw is a statistic of nearly
    independent draws, for which independent signs give the null distribution. The
    statistic averages it over the offsets, and the bootstrap keeps the offsets
    together: the draws of one block of L consecutive draws share a sign. The last
    floor(tau - 1) offsets of each block are not read, so that draws read in
    neighbouring blocks are never close in the chain (their correlation would make the
    bootstrap underestimate the statistic's spread); ``attrs["thinning_offsets"]`` is the
    number read. Measured on stationary AR(1) chains with exact N(0, I) marginals (4
    chains x 1000 draws): levels within binomial error of the nominal one at 0.05 and at
    0.05 / 7 for tau from 1 to 19 (benchmarks/results/calibration.md).

    Damped statistic: the diffusion Stein operator A_m f = (1/p) div(p m f) has mean 0
    under p for a smooth weight m (Gorham, Duncan, Vollmer & Mackey 2019); its Stein
    kernel is m(x) m(y) k_p'(x, y), the Langevin Stein kernel of the density p m, so its
    V-statistic is the quadratic form of the weights m with the scores shifted by
    grad log m. Prior draws of the centred eight-schools model scored against its
    posterior: plain pooled p-values 0.27-0.97 over three seeds, damped 0.001 each
    (benchmarks/results/calibration.md).

    Wild bootstrap (Chwialkowski et al. 2016): w_1 = +-1 with probability 1/2, and
    w_t = -w_(t-1) with probability a, w_(t-1) otherwise. The signs must stay correlated
    over the range where the chain is, so a is chosen from the chain's integrated
    autocorrelation time tau (Geyer's initial monotone sequence estimator, the largest
    over the coordinates of the draws and of the scores): a = 1 / (1 + 12 tau), so that a
    run of equal signs lasts about 12 tau draws. Longer runs keep more of the chain's
    correlation in the bootstrap, shorter ones give it more independent pieces; the
    factor 12 was chosen by simulation (1600 AR(1) chains with exact N(0, 1) marginals,
    500 draws each, alpha = 0.05, standard error 0.55%): rejection rates 5.5% for
    rho = 0.5 and 3.5% for rho = 0.8 (8 tau gave 6.5% and 4.6%), where independent
    signs reject 25% and 68%. Chwialkowski et al. let a go to 0 as N grows (with a N to
    infinity), which makes the bootstrap's variance exact in the limit; here a follows
    tau, not N, so for a long chain the sign chain's correlation (1 - 2a)^k, about
    exp(-k / (6 tau)), keeps a small bias (the levels above include it). Pooled: the
    weights of different chains are drawn
    independently (independent sign chains; for ``"multinomial"``, one multinomial per
    chain), as different chains are independent under the null.

    Cost: one tiled pass for all B + 1 weight vectors (the statistic is the all-ones
    vector): O(N^2 (d + B)) time, the kernel tiles shared by all columns and multiplied
    with BLAS; O(N B) memory for the weights (8 N (B + 1) bytes); K_p is never stored.
    With ``client=``, the weights are sent once to every worker with the draws, so each
    worker holds them too, and each task returns its row tiles' (2, B + 1) partial forms.

    References
    ----------
    Chwialkowski, Strathmann & Gretton (2016), A kernel test of goodness of fit, ICML.
    Liu, Lee & Jordan (2016), A kernelized Stein discrepancy for goodness-of-fit tests, ICML.
    Geyer (1992), Practical Markov chain Monte Carlo, Statistical Science.
    Davison & Hinkley (1997), Bootstrap Methods and their Application, section 4.2.
    Phipson & Smyth (2010), Permutation p-values should never be zero, Statistical
    Applications in Genetics and Molecular Biology.
    Gorham, Duncan, Vollmer & Mackey (2019), Measuring sample quality with diffusions,
    Annals of Applied Probability.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> rng = np.random.default_rng(0)
    >>> x = rng.laplace(scale=2**-0.5, size=(1, 500, 1))   # Laplace, variance 1
    >>> res = steindiag.ksd_test(x, score=-x, n_bootstrap=200, rng=1)  # target N(0, 1)
    >>> bool(res["pvalue"][0] < 0.05)
    True
    """
    n_bootstrap, rng, pooled = _ksd_test_iv(bootstrap, n_bootstrap, rng, pooled, damped,
                                            estimator)
    check_progress(progress)
    rng = check_estimator(estimator, n_landmarks, rng)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    backend = resolve_backend(client)
    data = as_trace(data, model)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    data, _, _, _, sample_dims = pending.resolve(data, model, score, log_density, sample_dims)
    has_chain_dim = has_chain_dimension(data, sample_dims)
    n_chain, n_draw, d = pending.draws.shape
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    if bootstrap == "auto":
        bootstrap = "wild" if has_chain_dim else "iid"
    tau = np.array([
        integrated_autocorrelation_time(
            np.concatenate([prepared.draws[ch], prepared.scores[ch]], axis=1)).max()
        for ch in range(n_chain)
    ])
    lag = n_offsets = 1
    n_used = n_draw
    if bootstrap == "thinned":
        # One lag for all chains, so that the blocks form one array: from the largest tau
        # over the coordinates of the chains' mean autocorrelation (each chain's own
        # largest tau is noisier, and its maximum over many coordinates biased upwards).
        common_tau = chains_autocorrelation_time(
            np.concatenate([prepared.draws, prepared.scores], axis=2)).max()
        lag = int(thinning_lag(common_tau))
        n_offsets = thinned_offsets(common_tau, lag)
        n_used = max(n_draw // lag, 1)
        if estimator == "nystrom":
            # The Nystrom pass draws its own signs, so the offsets cannot share them: one
            # thinned subsequence per chain, from a random offset (less power, same level).
            kept = thin_chains(rng, n_chain, n_draw, lag)
            rows = np.arange(n_chain)[:, None]
            prepared = dataclasses.replace(
                prepared, draws=np.ascontiguousarray(prepared.draws[rows, kept]),
                scores=np.ascontiguousarray(prepared.scores[rows, kept]), draw=kept[0])
    flip = {"wild": flip_probability(tau), "iid": np.full(n_chain, 0.5),
            "thinned": np.full(n_chain, 0.5),
            "multinomial": np.full(n_chain, np.nan)}[bootstrap]
    # The p-value is marked unreliable (not only warned about) when a wild bootstrap's
    # sign chain is expected to flip fewer than _MIN_EXPECTED_FLIPS times (pooled: in any
    # chain, whose part of the pooled statistic is then badly simulated), or when the
    # thinned test has fewer than MIN_THINNED_DRAWS blocks in a chain (pooled: in all, or
    # MIN_POOLED_BLOCKS in a chain).
    expected_flips = n_used * flip
    if bootstrap == "wild":
        reliable = expected_flips >= _MIN_EXPECTED_FLIPS
    elif bootstrap == "thinned":
        reliable = np.full(n_chain, n_used >= MIN_THINNED_DRAWS)
        reliable_pooled = (n_used >= MIN_POOLED_BLOCKS
                           and n_chain * n_used >= MIN_THINNED_DRAWS)
    else:
        reliable = np.ones(n_chain, dtype=bool)
    if bootstrap != "thinned":
        reliable_pooled = bool(reliable.all())
    few = np.flatnonzero(~reliable)
    if few.size:
        labels = [prepared.chain[ch].item() for ch in few[:10]]
        more = f" and {few.size - 10} more" if few.size > 10 else ""
        if bootstrap == "wild":
            warnings.warn(
                f"ksd_test: chains {labels}{more} have autocorrelation times up to "
                f"{tau[few].max():.3g} for {n_draw} draws, so the wild bootstrap's sign "
                f"chain flips fewer than {_MIN_EXPECTED_FLIPS:g} times in them; their "
                "p-values are unreliable. Run longer chains.",
                UserWarning, stacklevel=2,
            )
        else:
            warnings.warn(
                f"ksd_test: chains {labels}{more} have autocorrelation times up to "
                f"{common_tau:.3g}, so reading every {lag}-th of their {n_draw} draws keeps "
                f"{n_used}, fewer than {MIN_THINNED_DRAWS}; their p-values are unreliable. "
                "Run longer chains.",
                UserWarning, stacklevel=2,
            )
    if estimator == "nystrom":
        (per_chain, pooled_forms), estimator_attrs = nystrom_forms(
            prepared, pre, kernel, n_landmarks, rng, bootstrap, n_bootstrap, flip, backend)
    else:
        thinned = bootstrap == "thinned" or (bootstrap == "iid" and damped)
        # One bar over every pass of the forms: (damped: two) passes per offset.
        n_passes = n_offsets * (2 if damped else 1) if thinned else 1
        pairs = n_passes * forms_pairs(n_chain, n_used, pooled)
        bar = make_progress(progress if backend is None else False, pairs,
                            pairs * (8 * d + 20 + 2 * (1 + n_bootstrap)) / CONSERVATIVE_FLOPS,
                            desc="ksd_test (bootstrap pass)")
        try:
            if thinned:
                # (independent signs are the thinned test with lag 1)
                window = damping_window(prepared.draws) if damped else None
                (per_chain, pooled_forms), damped_forms = _thinned_forms(
                    prepared, pre, kernel, lag, n_offsets, n_used, rng, n_bootstrap, pooled,
                    backend, window, bar)
            else:
                weights = bootstrap_weights(bootstrap, rng, n_chain, n_used, n_bootstrap, flip)
                per_chain, pooled_forms = quadratic_forms(prepared.draws, prepared.scores, pre,
                                                          kernel, weights, pooled,
                                                          backend=backend, bar=bar)
                del weights
        finally:
            if bar is not None:
                bar.close()
        estimator_attrs = {"estimator": "exact"}
    per_chain /= n_used
    chain = xr.Variable(("chain",), prepared.chain)
    data_vars = {
        "statistic": (("chain",), per_chain[:, 0],
                      {"long_name": "N KSD^2_V of each chain"}),
        "pvalue": (("chain",), bootstrap_pvalue(per_chain[:, 1:], per_chain[:, 0]),
                   {"long_name": "bootstrap p-value, each chain"}),
        "bootstrap_statistic": (("chain", "bootstrap"), per_chain[:, 1:],
                                {"long_name": "bootstrap statistics N^-1 w^T K_p w"}),
        "autocorrelation_time": (("chain",), tau,
                                 {"long_name": "integrated autocorrelation time (largest "
                                               "over draws and scores)"}),
        "flip_probability": (("chain",), flip,
                             {"long_name": "flip probability of the sign chain"}),
        "expected_sign_flips": (("chain",), expected_flips,
                                {"long_name": "expected flips of the sign chain, draw * a"}),
        "effective_draws": (("chain",), n_draw / tau,
                            {"long_name": "effective number of draws, draw / tau"}),
        "pvalue_reliable": (("chain",), reliable,
                            {"long_name": "whether the bootstrap p-value can be trusted"}),
    }
    if damped:
        damped_chain = damped_forms[0] / n_used
        data_vars["statistic_damped"] = (("chain",), damped_chain[:, 0], {
            "long_name": "statistic of the damped Stein kernel, each chain"})
        data_vars["pvalue_damped"] = (("chain",), bootstrap_pvalue(damped_chain[:, 1:],
                                                                  damped_chain[:, 0]),
                                      {"long_name": "bootstrap p-value, damped, each chain"})
        data_vars["bootstrap_statistic_damped"] = (("chain", "bootstrap"), damped_chain[:, 1:],
                                                   {"long_name": "bootstrap statistics, damped "
                                                                 "(same signs)"})
        if pooled:
            damped_all = damped_forms[1] / (n_chain * n_used)
            data_vars["statistic_damped_pooled"] = ((), damped_all[0], {
                "long_name": "statistic of the damped Stein kernel, pooled"})
            data_vars["pvalue_damped_pooled"] = ((), bootstrap_pvalue(damped_all[1:],
                                                                     damped_all[0]),
                                                 {"long_name": "bootstrap p-value, damped, "
                                                               "pooled"})
            data_vars["bootstrap_statistic_damped_pooled"] = (
                ("bootstrap",), damped_all[1:],
                {"long_name": "bootstrap statistics, damped, pooled (same signs)"})
    if pooled:
        pooled_forms = pooled_forms / (n_chain * n_used)
        data_vars["statistic_pooled"] = ((), pooled_forms[0],
                                         {"long_name": "N KSD^2_V of all chains pooled"})
        data_vars["pvalue_pooled"] = ((), bootstrap_pvalue(pooled_forms[1:], pooled_forms[0]),
                                      {"long_name": "bootstrap p-value, pooled"})
        data_vars["bootstrap_statistic_pooled"] = (("bootstrap",), pooled_forms[1:],
                                                   {"long_name": "bootstrap statistics, pooled"})
        data_vars["effective_draws_pooled"] = ((), float(np.sum(n_draw / tau)),
                                               {"long_name": "effective draws, all chains"})
        data_vars["pvalue_reliable_pooled"] = ((), bool(reliable_pooled),
                                               {"long_name": "whether the pooled p-value "
                                                             "can be trusted"})
    attrs = {
        "test": "KSD goodness of fit, statistic N KSD^2_V",
        "bootstrap": bootstrap,
        "n_bootstrap": n_bootstrap,
        "flip_probability": flip,
        "flip_probability_rule": {
            "wild": "a = 1 / (1 + 12 tau), tau the chain's integrated autocorrelation time",
            "iid": "a = 1/2 (independent Rademacher signs)",
            "thinned": "a = 1/2 (independent Rademacher signs) on every L-th draw, "
                       "L = 1 + floor(5 (tau - 1)) from the largest tau of the chains",
            "multinomial": "none (centred multinomial counts)",
        }[bootstrap],
        "pvalue_rule": "(1 + #{bootstrap >= statistic}) / (1 + n_bootstrap)",
        "thinning_lag": lag,
        "thinning_offsets": n_offsets,
        "n_draw_tested": n_used,
        **kernel_attrs(prepared, pre, kernel),
        **estimator_attrs,
    }
    return xr.Dataset(data_vars, coords={"chain": chain}, attrs=netcdf_attrs(attrs))


ksd_test.__doc__ = ksd_test.__doc__.format(params=_PARAMETERS, log_density=_JAX_LOG_DENSITY)
