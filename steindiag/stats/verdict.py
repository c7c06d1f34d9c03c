"""From test results to a verdict: "fits", "does not fit" or "inconclusive" (NumPy only).

The rules of :func:`steindiag.diagnose`, as plain functions of arrays so that they can be
read and tested on their own. Several tests are combined (the KSD test of every chain and
of all chains pooled, the MMD test of every pair of chains, the search for unvisited
mass); the family-wise level is held by Bonferroni's rule: each test is read at level
alpha / m for m tests, so the probability that any of them rejects a sample drawn from p
is at most alpha (Holm's step-down procedure would reject the same hypotheses first: a
verdict only asks whether any test rejects). A p-value marked unreliable is read neither
way: it can neither reject nor support a fit, so the verdict it decides is
"inconclusive". See the Background page of the docs, "From numbers to a verdict".
"""

import numpy as np

__all__ = ["FITS", "DOES_NOT_FIT", "INCONCLUSIVE", "VERDICTS", "n_tests", "chain_verdicts",
           "pooled_verdict"]

FITS = "fits"
DOES_NOT_FIT = "does not fit"
INCONCLUSIVE = "inconclusive"
VERDICTS = (FITS, DOES_NOT_FIT, INCONCLUSIVE)


def n_tests(n_chain, missing_mass_run):
    """Number of tests combined: one KSD test per chain and pooled, one MMD test per pair
    of chains (none for one chain), and the search for unvisited mass when it is run."""
    return n_chain + 1 + n_chain * (n_chain - 1) // 2 + int(bool(missing_mass_run))


def _p(value):
    return f"p = {value:.2g}"


def _rejecting_pairs(mmd_pvalue, mmd_reliable, level):
    """Boolean (chain, chain): the pairs whose MMD test rejects at ``level`` (reliably)."""
    pvalue = np.asarray(mmd_pvalue, dtype=np.float64)
    reliable = np.asarray(mmd_reliable, dtype=bool) & np.isfinite(pvalue)
    return reliable & (np.nan_to_num(pvalue, nan=1.0) <= level)


def chain_verdicts(*, pvalue, reliable, effective_draws, level, mmd_pvalue, mmd_reliable,
                   divergences=None, missing_found=False, missing_summary="", labels=None):
    """The verdict and its reason for each chain.

    Parameters
    ----------
    pvalue, reliable, effective_draws : ndarray (chain,)
        The chain's KSD test: p-value, whether it can be trusted, draws / tau.
    level : float
        The level each test is read at (alpha / number of tests).
    mmd_pvalue, mmd_reliable : ndarray (chain, chain)
        MMD p-values between chains (NaN on the diagonal) and their reliability.
    divergences : ndarray (chain,) of int, optional
        Divergent transitions of each chain (None: the trace has no sampler statistics).
    missing_found : bool
        The search found mass no chain visited (then no chain visited it either).
    missing_summary : str
        The search's sentence, quoted in the reason.
    labels : sequence, optional
        The chains' coordinate values, to name them in reasons (default: positions).

    Returns
    -------
    verdicts, reasons : ndarray (chain,) of str

    Notes
    -----
    In order, the first rule that applies decides:

    1. the chain's KSD test rejects at ``level`` with a reliable p-value: "does not fit";
    2. the search found unvisited mass: "does not fit" (what the pooled draws missed,
       every chain missed);
    3. the chain's p-value is unreliable (too few effective draws): "inconclusive";
    4. the chain has divergent transitions: "inconclusive" (the sampler reports regions
       it could not explore; no test rejected, which does not show they hold no mass);
    5. the MMD test says it differs from another chain: "inconclusive" (one of the two
       did not sample p, the test does not say which);
    6. otherwise "fits".
    """
    pvalue = np.asarray(pvalue, dtype=np.float64)
    n_chain = pvalue.shape[0]
    labels = list(range(n_chain)) if labels is None else list(labels)
    differs = _rejecting_pairs(mmd_pvalue, mmd_reliable, level)
    verdicts = np.empty(n_chain, dtype=object)
    reasons = np.empty(n_chain, dtype=object)
    for ch in range(n_chain):
        divergent = divergences is not None and divergences[ch] > 0
        if reliable[ch] and pvalue[ch] <= level:
            verdict, reason = DOES_NOT_FIT, (
                f"the KSD test rejects the draws ({_p(pvalue[ch])} <= {level:.2g})")
        elif missing_found:
            verdict, reason = DOES_NOT_FIT, f"unvisited mass: {missing_summary}"
        elif not reliable[ch]:
            verdict, reason = INCONCLUSIVE, (
                f"too few effective draws ({effective_draws[ch]:.0f}) for the bootstrap: the "
                "KSD p-value cannot be trusted")
        elif divergent:
            verdict, reason = INCONCLUSIVE, (
                f"{int(divergences[ch])} divergent transitions: the sampler could not "
                f"explore part of the target; no test rejected ({_p(pvalue[ch])})")
        elif differs[ch].any():
            others = [labels[k] for k in np.flatnonzero(differs[ch])]
            verdict, reason = INCONCLUSIVE, (
                f"differs from chain(s) {others} (MMD test): one of them did not sample "
                "the target")
        else:
            verdict, reason = FITS, f"no test rejected (KSD {_p(pvalue[ch])})"
        verdicts[ch], reasons[ch] = verdict, reason
    return verdicts.astype(str), reasons.astype(str)


def pooled_verdict(*, pvalue, reliable, effective_draws, level, chain_pvalue, chain_reliable,
                   mmd_pvalue, mmd_reliable, divergences=None, missing_found=False,
                   missing_summary="", missing_run=True, missing_not_run_reason="",
                   labels=None):
    """The verdict and its reason for all chains together.

    Parameters
    ----------
    pvalue, reliable, effective_draws : float, bool, float
        The pooled KSD test.
    level : float
        The level each test is read at (alpha / number of tests).
    chain_pvalue, chain_reliable : ndarray (chain,)
        The KSD test of each chain.
    mmd_pvalue, mmd_reliable : ndarray (chain, chain)
        MMD p-values between chains and their reliability.
    divergences : ndarray (chain,) of int, optional
    missing_found, missing_summary : bool, str
        The search for unvisited mass.
    missing_run : bool
        Whether the search ran; a "fits" without it says so.
    missing_not_run_reason : str
        Why it did not run.
    labels : sequence, optional
        The chains' coordinate values, to name them in reasons (default: positions).

    Returns
    -------
    verdict, reason : str

    Notes
    -----
    "does not fit" when any test rejects reliably at ``level`` (the pooled or a chain's
    KSD test, the MMD test between two chains: chains of one target have one
    distribution, or the search for unvisited mass); otherwise "inconclusive" when the
    sampler reported divergent transitions or a p-value that would decide is unreliable
    (the pooled KSD test, an MMD test), with every such doubt in the reason; otherwise
    "fits".
    """
    chain_pvalue = np.asarray(chain_pvalue, dtype=np.float64)
    chain_reliable = np.asarray(chain_reliable, dtype=bool)
    differs = _rejecting_pairs(mmd_pvalue, mmd_reliable, level)
    rejecting_chains = np.flatnonzero(chain_reliable & (chain_pvalue <= level))
    n_chain = chain_pvalue.shape[0]
    labels = list(range(n_chain)) if labels is None else list(labels)
    if reliable and pvalue <= level:
        return DOES_NOT_FIT, f"the KSD test rejects the draws ({_p(pvalue)} <= {level:.2g})"
    if rejecting_chains.size:
        return DOES_NOT_FIT, (
            f"the KSD test rejects chain(s) {[labels[k] for k in rejecting_chains]} "
            f"(smallest {_p(chain_pvalue[rejecting_chains].min())} <= {level:.2g})")
    if missing_found:
        return DOES_NOT_FIT, f"unvisited mass: {missing_summary}"
    if differs.any():
        i, j = np.argwhere(np.triu(differs))[0]
        return DOES_NOT_FIT, (
            f"the chains disagree: the MMD test rejects chains {labels[i]} and {labels[j]} "
            f"({_p(np.asarray(mmd_pvalue)[i, j])} <= {level:.2g}); chains of one target "
            "have one distribution")
    doubts = []
    if divergences is not None and np.sum(divergences) > 0:
        doubts.append(
            f"{int(np.sum(divergences))} divergent transitions: the sampler could not explore "
            f"part of the target, and no test rejected ({_p(pvalue)}); that does not show the "
            "unexplored part holds no mass")
    if not reliable:
        doubts.append(
            f"too few effective draws ({effective_draws:.0f} in all, too few in some chain) "
            "for the bootstrap: the KSD p-values cannot be trusted")
    mmd_reliable = np.asarray(mmd_reliable, dtype=bool)
    if n_chain > 1 and not mmd_reliable[~np.eye(n_chain, dtype=bool)].all():
        doubts.append(
            "the chains are too autocorrelated for the MMD test between them: whether they "
            "agree cannot be checked")
    if doubts:
        return INCONCLUSIVE, "; ".join(doubts)
    reason = f"no test rejected (KSD {_p(pvalue)})"
    if not missing_run:
        reason += (f"; conditional: the search for unvisited mass was not run "
                   f"({missing_not_run_reason}), and KSD alone is blind to modes the chains "
                   "never visited")
    return FITS, reason
