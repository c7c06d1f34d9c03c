"""Bootstrap weights and p-values of the KSD test (NumPy only).

The test's statistic and its bootstrap replicates are quadratic forms w^T K_p w in the
Stein kernel matrix, one weight vector w per replicate: column 0 all ones (the
observed V-statistic), then the bootstrap columns built here. The wild bootstrap's
weights are +-1 Markov sign chains whose runs outlast the chain's autocorrelation
(Chwialkowski, Strathmann & Gretton 2016); the i.i.d. bootstrap is the same with
independent signs; the multinomial bootstrap uses centred resampling counts. See the
Background page of the docs.
"""

import numpy as np

__all__ = ["MIN_POOLED_BLOCKS", "MIN_THINNED_DRAWS", "bootstrap_pvalue", "max_statistic_pvalues", "bootstrap_weights", "flip_probability",
           "multinomial_weights", "sign_chains", "thin_chains", "thinned_offsets",
           "thinning_lag"]


# The wild bootstrap's sign chain keeps its sign for 1 + _SIGN_RUN_PER_TAU * tau draws on
# average, tau the chain's integrated autocorrelation time (see ``flip_probability``).
_SIGN_RUN_PER_TAU = 12.0


# The thinned test reads every L-th draw, L = 1 + floor(5 (tau - 1)) (see ``thinning_lag``),
# from every offset. Fewer than MIN_THINNED_DRAWS blocks of L draws in a chain and its
# p-value is not trusted; the pooled p-value is, with at least MIN_THINNED_DRAWS blocks in
# all and MIN_POOLED_BLOCKS in every chain.
_THIN_PER_TAU = 5.0
MIN_THINNED_DRAWS = 20
# Of each block of L draws, the statistic reads the first L - floor(tau - 1) offsets
# (see ``thinned_offsets``): the draws left out at the end of every block keep the draws
# read in neighbouring blocks at least tau apart.
_GAP_PER_TAU = 1.0
MIN_POOLED_BLOCKS = 5


# Rows of W generated at a time (bounds the temporaries to O(_SIGN_CHUNK * B)).
_SIGN_CHUNK = 2048


def flip_probability(tau):
    """Flip probability a of the sign chain for a chain with autocorrelation time tau.

    A sign chain that flips with probability a has correlation (1 - 2a)^k at lag k and
    keeps its sign for 1 / a draws on average; a = 1 / (1 + 12 tau) makes that run 12
    times the chain's autocorrelation time (tau = 1, independent draws: a = 1/13).
    """
    return 1.0 / (1.0 + _SIGN_RUN_PER_TAU * np.asarray(tau, dtype=np.float64))


def thinning_lag(tau):
    """The lag L of the thinned test for a chain with autocorrelation time tau.

    L = 1 + floor(5 (tau - 1)): 1 for independent draws (tau = 1), about 5 tau for
    autocorrelated ones. The test's statistic is the mean over the L offsets of the
    V-statistic of every L-th draw, and its bootstrap gives all draws of one block of L
    consecutive draws the same random sign: draws L apart are nearly independent (for a
    Gaussian AR(1) chain with coefficient rho, tau = (1 + rho) / (1 - rho), they are
    correlated rho^L <= 0.001: 0.5^11, 0.7^23, 0.9^91), and blocks about 5 tau long
    share little across their boundaries. Measured on valid AR(1) chains (4 x 1000
    draws, the tail where the tests are read): blocks of about 2 tau rejected at 1.5 to
    2.3 times the level, 4 tau up to 1.5 times, 5 tau at the level
    (benchmarks/results/calibration.md). See the
    Background page, "Calibration on MCMC output".
    """
    tau = np.asarray(tau, dtype=np.float64)
    return (1 + np.floor(_THIN_PER_TAU * np.maximum(tau - 1.0, 0.0))).astype(np.int64)


def thinned_offsets(tau, lag):
    """How many of the ``lag`` offsets of each block the thinned test reads: the first
    L - floor(tau - 1) (at least 1).

    All draws of a block share one bootstrap sign, and the statistic averages the
    V-statistics of every L-th draw over the offsets read. Were all L offsets read, the
    last draws of block b and the first of block b + 1 would be consecutive draws, and
    the terms of the pair of blocks (b, b') would be correlated with those of
    (b + 1, b' + 1): a covariance the independent signs do not reproduce, so the
    bootstrap would underestimate the statistic's spread (with a kernel of known
    features on Gaussian AR(1) chains with tau = 3, L = 11: by about 7 %; with the last
    2 offsets left out, 3 %, and 2 % with 4; benchmarks/bench_thinned_variance.py).
    Leaving out the last floor(tau - 1) offsets of every block keeps the draws read in
    neighbouring blocks more than tau - 1 draws apart. Leaving out more costs power: on
    the unadjusted Langevin case of the calibration benchmark (4 x 500 draws), 2 (tau -
    1) offsets left out gave "does not fit" in 90 of 100 runs, tau - 1 in 99, none in
    100.
    See the Background page, "Calibration on MCMC output".
    """
    tau = float(tau)
    gap = int(np.floor(_GAP_PER_TAU * max(tau - 1.0, 0.0)))
    return max(int(lag) - gap, 1)


def thin_chains(rng, n_chain, n_draw, lag):
    """Indices (chain, kept) of the draws kept: every ``lag``-th draw from a random offset.

    Every chain keeps n_draw // lag draws (the same number, so the kept draws form a
    (chain, kept) array), starting at an offset drawn uniformly from the positions that
    leave room for them; the offsets of different chains are independent.
    """
    lag = max(int(lag), 1)
    n_kept = max(n_draw // lag, 1)
    spare = n_draw - ((n_kept - 1) * lag + 1)
    offsets = rng.integers(spare + 1, size=n_chain)
    return offsets[:, None] + lag * np.arange(n_kept)[None, :]


def sign_chains(rng, n_draw, n_bootstrap, flip, out):
    """out (n_draw, B) <- B independent +-1 Markov chains flipping with probability ``flip``.

    The first sign is +-1 with probability 1/2 each, so every W_t is Rademacher; with
    flip = 1/2 the signs are independent (the Rademacher bootstrap).
    """
    sign = np.where(rng.random(n_bootstrap) < 0.5, -1.0, 1.0)
    for start in range(0, n_draw, _SIGN_CHUNK):
        stop = min(start + _SIGN_CHUNK, n_draw)
        flips = rng.random((stop - start, n_bootstrap)) < flip
        if start == 0:
            flips[0] = False
        parity = np.logical_xor.accumulate(flips, axis=0)
        out[start:stop] = np.where(parity, -sign, sign)
        sign = out[stop - 1].copy()


def multinomial_weights(rng, n_draw, n_bootstrap, out):
    """out (n_draw, B) <- centred multinomial counts (c_i - 1), c ~ Multinomial(n, 1/n)."""
    pvals = np.full(n_draw, 1.0 / n_draw)
    for start in range(0, n_bootstrap, 64):
        stop = min(start + 64, n_bootstrap)
        out[:, start:stop] = rng.multinomial(n_draw, pvals, size=stop - start).T - 1.0


def bootstrap_weights(kind, rng, n_chain, n_draw, n_bootstrap, flip, statistic=True):
    """W (chain * draw, 1 + B), C-contiguous: column 0 all ones, then the B bootstrap columns.

    Each chain's rows are drawn independently of the other chains'. ``statistic=False``:
    the B bootstrap columns only, (chain * draw, B) (a later pass over more columns).
    """
    first = 1 if statistic else 0
    weights = np.empty((n_chain * n_draw, first + n_bootstrap))
    if statistic:
        weights[:, 0] = 1.0
    for c in range(n_chain):
        rows = weights[c * n_draw : (c + 1) * n_draw, first:]
        if kind == "multinomial":
            multinomial_weights(rng, n_draw, n_bootstrap, rows)
        else:
            sign_chains(rng, n_draw, n_bootstrap, flip[c], rows)
    return weights


def bootstrap_pvalue(bootstrap_statistics, observed):
    """(1 + #{b : B_b >= observed}) / (1 + B), along the last axis."""
    exceed = np.sum(bootstrap_statistics >= observed[..., None], axis=-1)
    return (1.0 + exceed) / (1.0 + bootstrap_statistics.shape[-1])


def max_statistic_pvalues(statistic, replicates, include):
    """Family-wise adjusted p-values of the chains' tests, from their joint bootstrap.

    Parameters
    ----------
    statistic : ndarray (chain,)
        Each chain's observed statistic.
    replicates : ndarray (chain, B)
        Each chain's bootstrap statistics; replicate b of every chain comes from one
        draw of independent signs, so column b is one draw of the chains' joint null.
    include : ndarray (chain,) of bool
        The chains taking part (the others get NaN).

    Returns
    -------
    ndarray (chain,)
        p_c = (1 + #{b : max_k z*_kb >= z_c}) / (1 + B), with z the statistic
        standardised by the mean and standard deviation of the chain's own replicates
        (the max-T procedure of Westfall & Young 1993). Rejecting every chain with
        p_c <= alpha has family-wise level alpha over all chains whatever their number,
        and needs about 20 / alpha replicates, not 20 C / alpha as Bonferroni's rule does.
    """
    statistic = np.asarray(statistic, dtype=np.float64)
    replicates = np.asarray(replicates, dtype=np.float64)
    include = np.asarray(include, dtype=bool)
    pvalue = np.full(statistic.shape, np.nan)
    if not include.any():
        return pvalue
    mean = replicates[include].mean(axis=1)
    spread = replicates[include].std(axis=1)
    spread = np.where(spread > 0, spread, np.finfo(np.float64).tiny)
    observed = (statistic[include] - mean) / spread
    largest = ((replicates[include] - mean[:, None]) / spread[:, None]).max(axis=0)
    exceed = np.sum(largest[None, :] >= observed[:, None], axis=1)
    pvalue[include] = (1.0 + exceed) / (1.0 + replicates.shape[1])
    return pvalue
