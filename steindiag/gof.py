"""Goodness-of-fit test with the kernel Stein discrepancy: ``ksd_test``.

Data flow: input -> ``inputs.read_input`` (read once) -> one preconditioner from the
pooled draws -> scores -> ``methods.ksd_test.plan_test`` (the bootstrap plan) ->
``methods.ksd_test.test_forms`` (one tiled pass for the statistic and its bootstrap
replicates, per chain and pooled) -> ``outputs.ksd_test`` (labelled ``xarray.Dataset``).
"""

from steindiag._docs import fill_doc
from steindiag._validate import check_bool, check_choice, check_int, check_rng, warn_user
from steindiag.engine.dask import resolve_backend
from steindiag.engine.progress import check_progress
from steindiag.inputs import read_input
from steindiag.kernels import make_kernel
from steindiag.kernels.preconditioner import check_preconditioner, make_preconditioner
from steindiag.methods.ksd_test import BOOTSTRAPS, plan_test, test_forms
from steindiag.methods.nystrom import check_estimator
from steindiag.outputs.ksd_test import test_attrs, test_dataset, unreliable_message

__all__ = ["ksd_test"]


def _ksd_test_iv(bootstrap, n_bootstrap, rng, pooled, damped, estimator):
    check_choice(bootstrap, "bootstrap", BOOTSTRAPS)
    n_bootstrap = check_int(n_bootstrap, "n_bootstrap", minimum=1)
    if 1.0 / (1 + n_bootstrap) > 0.05:
        warn_user(f"ksd_test: n_bootstrap={n_bootstrap} gives p-values no smaller than "
                  f"1 / (1 + {n_bootstrap}) = {1.0 / (1 + n_bootstrap):.2g}, so the test "
                  "cannot reject at the 5 % level; use n_bootstrap >= 19 (the default, "
                  "1000, resolves p-values to 0.001).")
    pooled, damped = check_bool(pooled, "pooled"), check_bool(damped, "damped")
    if damped and (bootstrap not in ("thinned", "iid", "auto") or estimator != "exact"):
        raise ValueError("damped=True needs bootstrap='thinned' or 'iid' and "
                         f"estimator='exact'; got bootstrap={bootstrap!r}, "
                         f"estimator={estimator!r}.")
    return n_bootstrap, check_rng(rng), pooled, damped


@fill_doc
def ksd_test(data, model=None, *, score=None, bootstrap="auto", n_bootstrap=1000, rng=None,
             pooled=True, damped=False, batched=True, kernel="imq", c=None, beta=None,
             preconditioner="standardize",
             group="posterior", var_names=None, coords=None, sample_dims=None, space=None,
             filter_vars=None, labeller=None,
             client=None, estimator="exact", n_landmarks=None, compile_mode=None,
             log_density=None, progress=None):
    """Goodness-of-fit test of the draws against p, with the kernel Stein discrepancy.

    Null hypothesis: the draws are distributed as p (the density whose score is given).
    The statistic is N KSD^2_V; its null distribution is simulated by a bootstrap that
    fits the draws: independent signs for independent draws, the wild bootstrap of
    Chwialkowski, Strathmann & Gretton (2016) for autocorrelated MCMC chains.

    Parameters
    ----------
    {input_entries}
    {kernel_entries}
    {trace_entries}
    {space}
    {client}
    {estimator}
    {n_landmarks}
    bootstrap : {"auto", "iid", "wild", "thinned", "multinomial"}, default "auto"
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
        2-D array (draw, d), which has no chain dimension, ``"wild"`` otherwise
        (``"thinned"`` with ``damped=True``: the wild bootstrap has no damped statistic).
    n_bootstrap : int, default 1000
        Bootstrap replicates B. The smallest possible p-value is 1 / (1 + B); below 19
        (where it exceeds 0.05) a warning says so. Time grows with B (see Notes, Cost); a B
        whose bootstrap would not fit in memory is refused up front (``MemoryError``).
    {log_density_jax}
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
    (1 + #{b : bootstrap_b >= statistic}) / (1 + B): the observed statistic counts as one
    of the B + 1 values and ties count against rejection (Davison & Hinkley 1997, Phipson
    & Smyth 2010). It is never 0 (an estimate from B replicates cannot support a smaller
    one), and P(p <= alpha) <= alpha for every alpha whenever the statistic and the
    replicates are exchangeable; without the +1, a statistic exceeding all B replicates
    would read as p = 0 and be rejected at every level. The bootstrap replicates only
    approximate the null distribution, so the level is exact only as N grows (measured
    levels: see the checking page of the docs).

    Thinned bootstrap: draws L apart, L about 5 tau (tau from the chains' mean
    autocorrelation, largest over the coordinates of the draws and the scores, of the
    same alternated in sign, which antithetic chains need, and of the draws' folded
    ranks, their second-order terms; Background page), are
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
    with BLAS; O(N B) memory for the weights (8 N (B + 1) bytes), K_p is never stored.
    Above 1 GiB of weights (N = 130,000 draws with B = 1000), they are drawn and read in
    passes over their columns of 1 GiB each (each pass evaluates the kernel again: a few
    percent more time), so memory no longer grows with B beyond the replicates
    themselves ((chain + 1) (B + 1) numbers). A test whose bootstrap would not fit in the
    memory available (the system's, the process's cgroup's or ``ulimit -v``'s) is
    refused before it starts, with a ``MemoryError`` that gives the size it would need.
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
    n_bootstrap, rng, pooled, damped = _ksd_test_iv(bootstrap, n_bootstrap, rng, pooled,
                                                    damped, estimator)
    check_progress(progress)
    rng = check_estimator(estimator, n_landmarks, rng)
    kernel = make_kernel(kernel, c, beta)
    check_preconditioner(preconditioner)
    backend = resolve_backend(client)
    pending = read_input(
        data, model, score=score, batched=batched, group=group, var_names=var_names,
        filter_vars=filter_vars, labeller=labeller,
        coords=coords, sample_dims=sample_dims, space=space, compile_mode=compile_mode,
        log_density=log_density,
    )
    n_draw, d = pending.draws.shape[1:]
    pre = make_preconditioner(preconditioner, pending.draws.reshape(-1, d), pending.parameter)
    prepared = pending.with_scores()
    plan = plan_test(prepared, bootstrap, has_chains=pending.has_chains, estimator=estimator,
                     rng=rng, damped=damped)
    message = unreliable_message(plan, prepared.chain, n_draw)
    if message:
        warn_user(message)
    tested = plan.select(prepared)
    forms = test_forms(tested, pre, kernel, plan, n_bootstrap=n_bootstrap, rng=rng,
                       pooled=pooled, damped=damped, estimator=estimator,
                       n_landmarks=n_landmarks, backend=backend, progress=progress)
    return test_dataset(plan, forms, prepared.chain, n_draw,
                        test_attrs(plan, forms, tested, pre, kernel, n_bootstrap))
