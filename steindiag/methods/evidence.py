"""The evidence of ``diagnose``, gathered on prepared arrays (no labels, no reading here).

The pieces: the number of bootstrap replicates (:func:`replicates`) and the KSD estimator
(:func:`choose_estimator`) the test needs; the KSD tests of the chains and pooled, plain,
damped and under the sample covariance, all with the same bootstrap signs
(:func:`ksd_test_family`), read together by max-T (:func:`combined_pvalues`); the MMD test
that all chains agree (:func:`agreement_evidence`); chains that never moved
(:func:`stuck_chains`); and :func:`collect`, which puts them into the ``stats.verdict``
``Evidence`` the rules read.
"""

from dataclasses import dataclass, replace

import numpy as np

from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.engine.memory import check_memory
from steindiag.methods.ksd_test import bootstrap_memory, plan_test, test_forms
from steindiag.methods.mmd import drop_constant, mmd_from_draws, plan_blocks
from steindiag.stats import verdict as rules
from steindiag.stats.bootstrap import (MIN_POOLED_BLOCKS, MIN_THINNED_DRAWS,
                                       max_statistic_pvalues)

__all__ = ["MAX_REPLICATES", "EXACT_BUDGET_FLOPS", "MMD_BUDGET_PAIRS", "COVARIANCE_MAX_D",
           "replicates", "choose_estimator", "mmd_stride", "KSDTests", "ksd_test_family",
           "combined_pvalues", "Agreement", "agreement_evidence", "stuck_chains", "collect",
           "as_one_chain"]

# The default number of replicates (or relabellings) is refused above this: an alpha so
# small that resolving p-values at alpha / n_tests would need more is a mistake.
MAX_REPLICATES = 100_000
# "auto" leaves the exact pass when its estimated cost is above this many floating-point
# operations: the statistic and B bootstrap quadratic forms cost about N^2 (8 d + 20 + B + 1)
# flops for N draws (benchmarks/results/test.md: N = 20,000, d = 10, B = 1000 in 6.8 s at
# 62 GFLOP/s on 2 cores), so this is about a minute there (N of about 57,000 at d = 10).
EXACT_BUDGET_FLOPS = 3.6e12
# The MMD test between chains is O(N^2 d) too (4 chains x 5,000 draws, 4e8 pairs: 0.6 s):
# above this many pairs of draws, each chain is thinned (every k-th draw, keeping its order).
MMD_BUDGET_PAIRS = 4.0e9
# The KSD test also reads the draws with the sample covariance as the kernel's metric (its
# statistic joins the max-T family) when the default preconditioner is used, d is at most
# this, and there are at least 10 draws per parameter: under-dispersed draws of strongly
# correlated posteriors are invisible to per-coordinate scales (benchmarks/results/
# calibration.md: draws of N(0, S), condition number 1e4, shrunk 0.8: 0 of 10 caught with
# "standardize" alone, 10 of 10 with "smpcov").
COVARIANCE_MAX_D = 200


def replicates(given, name, level, alpha, n_tests):
    """Bootstrap replicates or relabellings for tests read at ``level``.

    None: the smallest number, at least 1000, whose smallest p-value 1 / (1 + B) is at
    most level / 4 (so a clear rejection is not hidden by the grid of p-values); above
    ``MAX_REPLICATES``, refused (alpha is too small for a resampling test). A number
    whose smallest p-value is above ``level`` could never reject: refused.
    """
    if given is None:
        needed = max(1000, int(np.ceil(4.0 / level)) - 1)
        if needed > MAX_REPLICATES:
            smallest = 4.0 * n_tests / (MAX_REPLICATES + 1)
            raise ValueError(
                f"alpha={alpha:g} is too small: with {n_tests} tests each is read at "
                f"{level:.2g}, and resolving p-values that small would take {needed} "
                f"bootstrap replicates and relabellings (more than {MAX_REPLICATES}). "
                f"Pass alpha >= {smallest:.2g}, or n_bootstrap= and n_permutations= "
                "explicitly.")
        return needed
    if (1 + given) * level < 1:
        raise ValueError(
            f"{name}={given} is too small: its smallest p-value 1 / (1 + {name}) = "
            f"{1 / (1 + given):.2g} is above the level {level:.2g} at which each test is "
            f"read (alpha / number of tests), so no test could reject. Pass at least "
            f"{int(np.ceil(1 / level))}, or None for the default.")
    return int(given)


def _exact_test_flops(n_draws, d, n_bootstrap):
    """Estimated floating-point operations of the exact KSD test on ``n_draws`` draws."""
    return float(n_draws) ** 2 * (8.0 * d + 20.0 + n_bootstrap + 1.0)


def choose_estimator(estimator, n_landmarks, n_draws, d, n_bootstrap):
    """The KSD estimator of the test: the one place where exact or Nystrom is chosen.

    "auto" is the exact pass unless its estimated cost (:func:`_exact_test_flops`) is above
    ``EXACT_BUDGET_FLOPS``; then the Nystrom estimator at its default number of landmarks
    (O(N m (d + B)) instead of O(N^2 (d + B))). Returns the estimator's options (keyword
    arguments ``estimator``, ``n_landmarks``) and a sentence for the report (empty for the
    exact pass chosen by "auto").
    """
    if estimator == "auto":
        flops = _exact_test_flops(n_draws, d, n_bootstrap)
        if flops <= EXACT_BUDGET_FLOPS:
            return {"estimator": "exact", "n_landmarks": None}, ""
        return {"estimator": "nystrom", "n_landmarks": None}, (
            f"KSD test with the Nystrom estimator: the exact pass on {n_draws} draws would "
            f"cost about {flops:.2g} flops (estimator='exact' forces it)")
    if estimator == "nystrom":
        return {"estimator": "nystrom", "n_landmarks": n_landmarks}, (
            "KSD test with the Nystrom estimator (estimator='nystrom')")
    return {"estimator": estimator, "n_landmarks": None}, ""


def mmd_stride(n_chain, n_draw):
    """Every how many draws each chain is read for the MMD test (1: all of them)."""
    n_total = n_chain * n_draw
    return max(1, int(np.ceil(n_total / np.sqrt(MMD_BUDGET_PAIRS))))


@dataclass(kw_only=True)
class KSDTests:
    """The KSD tests of every chain and pooled, read as one max-T family.

    Attributes
    ----------
    plan : methods.ksd_test.TestPlan
        The bootstrap plan they share.
    forms : list of methods.ksd_test.TestForms
        Under the preconditioner given (plain, and damped with the exact estimator), then
        under the sample covariance when it is run.
    preconditioners : list of Preconditioner
        The metric of each entry of ``forms``.
    tested : SteinInput
        The draws the tests read.
    note : str
        Why the test under the sample covariance was not run, when it could not be.
    """

    plan: object
    forms: list
    preconditioners: list
    tested: object
    note: str = ""


def _check_family_memory(tested, plan, n_bootstrap, exact, n_landmarks):
    """Refuse up front (``MemoryError``) KSD tests that would not fit in memory: one test's
    bootstrap (``methods.ksd_test.bootstrap_memory``) while the replicates of up to three
    statistics (plain, damped, sample covariance) are held, and max-T's copies of them."""
    n_chain, n_draw, d = tested.draws.shape
    n_statistics = 3 if exact else 1
    need = (bootstrap_memory(n_chain, plan.n_used, d, n_bootstrap, pooled=True, damped=exact,
                             estimator="exact" if exact else "nystrom",
                             n_landmarks=n_landmarks, n_draw=n_draw)
            + 8.0 * 4 * n_statistics * (n_chain + 1) * (1 + n_bootstrap))
    check_memory(need, f"diagnose: the KSD tests ({n_bootstrap} bootstrap replicates of "
                 f"{n_chain} chain(s) x {plan.n_used} draws, read together by max-T)",
                 "Pass a larger alpha (fewer replicates: the default is the smallest B with "
                 "1 / (1 + B) <= alpha / (4 n_tests)) or a smaller n_bootstrap=, or fewer "
                 "draws (thin the chains).")


def ksd_test_family(prepared, pre, preconditioner, kernel, *, has_chains, n_bootstrap, seed,
                    estimator, n_landmarks, backend, progress):
    """The KSD tests of every chain and pooled, on nearly independent draws (the thinned
    bootstrap: blocks of L draws, L about five autocorrelation times), plain and damped;
    with the default preconditioner also under the sample covariance. Every test draws its
    bootstrap signs from ``numpy.random.default_rng(seed)``, so that they share them and
    max-T reads them as one family."""
    exact = estimator == "exact"
    # One generator for the plan and the first test (the Nystrom test of thinned chains
    # draws its offsets from it first); a fresh one of the same seed for the second.
    rng = np.random.default_rng(seed)
    plan = plan_test(prepared, "thinned" if has_chains else "iid", has_chains=has_chains,
                     estimator=estimator, rng=rng)
    tested = plan.select(prepared)
    _check_family_memory(tested, plan, n_bootstrap, exact, n_landmarks)
    options = dict(n_bootstrap=n_bootstrap, pooled=True, estimator=estimator,
                   n_landmarks=n_landmarks, backend=backend, progress=progress,
                   caller="diagnose")
    tests = KSDTests(plan=plan, forms=[test_forms(tested, pre, kernel, plan, rng=rng,
                                                  damped=exact, **options)],
                     preconditioners=[pre], tested=tested)
    n_chain, n_draw, d = prepared.draws.shape
    if (exact and isinstance(preconditioner, str) and preconditioner == "standardize"
            and 2 <= d <= COVARIANCE_MAX_D and n_chain * n_draw >= 10 * d):
        try:
            covariance = make_preconditioner("smpcov", prepared.draws.reshape(-1, d),
                                             prepared.parameter)
        except ValueError as err:   # a singular sample covariance
            tests.note = f"no KSD test under the sample covariance ({str(err).splitlines()[0]})"
        else:
            tests.forms.append(test_forms(tested, covariance, kernel, plan,
                                          rng=np.random.default_rng(seed), **options))
            tests.preconditioners.append(covariance)
    return tests


def combined_pvalues(tests):
    """(chain p-values, pooled p-value) of the KSD tests, every statistic of every test
    (plain, damped; each preconditioner) read together by max-T (Westfall & Young): the
    chains' statistics are one family, the pooled ones another; replicate b of every
    statistic shares its bootstrap signs. A chain whose test cannot be trusted takes no
    part (its own p-value is kept)."""
    reliable = tests.plan.reliable
    # The order of the family: each test's plain statistic, then its damped one.
    family = []
    for f in tests.forms:
        family.append((f.chain, f.pooled))
        if f.damped_chain is not None:
            family.append((f.damped_chain, f.damped_pooled))
    statistic = np.concatenate([chain[:, 0] for chain, _ in family])
    replicates_ = np.concatenate([chain[:, 1:] for chain, _ in family])
    chain_p = tests.forms[0].pvalues()[0]
    if reliable.any():
        adjusted = max_statistic_pvalues(statistic, replicates_, np.tile(reliable, len(family)))
        chain_p = np.where(reliable, np.nanmin(adjusted.reshape(len(family), -1), axis=0),
                           chain_p)
    pooled = max_statistic_pvalues(np.array([float(pooled[0]) for _, pooled in family]),
                                   np.stack([pooled[1:] for _, pooled in family]),
                                   np.ones(len(family), dtype=bool))
    return chain_p, float(pooled.min())


@dataclass(kw_only=True)
class Agreement:
    """The MMD test that all chains agree: p-value (NaN for one chain), whether it can
    be trusted, a note for the report, and the coordinates left out as constant."""

    pvalue: float = np.nan
    reliable: bool = True
    note: str = ""
    constant: list = None


def agreement_evidence(draws, parameters, pre, preconditioner, kernel, n_permutations, rng,
                       progress):
    """:class:`Agreement` of the chains; above ``MMD_BUDGET_PAIRS`` pairs of draws, each
    chain is read every k-th draw. ``pre``: the KSD's preconditioner, used when the test
    reads the same draws (else one is fixed from the draws read)."""
    n_chain, n_draw, _ = draws.shape
    if n_chain < 2:
        return Agreement()
    stride = mmd_stride(n_chain, n_draw)
    samples, kept, constant = drop_constant([draws[:, ::stride]], list(parameters),
                                            preconditioner)
    pooled = samples[0].reshape(-1, len(kept))
    if stride > 1 or constant:
        pre = make_preconditioner(preconditioner, pooled, kept)
    blocks = plan_blocks(samples, n_permutations, "auto", test_all=True)
    result = mmd_from_draws(pooled, blocks, pre, kernel, n_chain=n_chain,
                            n_draw=samples[0].shape[1], two_sample=False, test="all",
                            n_permutations=n_permutations, rng=rng, progress=progress,
                            mmd2=False, what="diagnose")
    note = (f"MMD test of agreement on every {stride}-th draw of each chain (its cost is "
            "quadratic in the draws)" if stride > 1 else "")
    pvalue = float(result.pvalue)
    return Agreement(pvalue=pvalue, reliable=bool(blocks.reliable) and np.isfinite(pvalue),
                     note=note, constant=constant)


def stuck_chains(draws):
    """(chain,) bool: chains whose draws are all the same point."""
    return np.all(draws.max(axis=1) == draws.min(axis=1), axis=-1)


def collect(tests, agreement, *, n_draw, stuck, divergences, search, not_run, labels):
    """The ``stats.verdict.Evidence`` of the pieces (``search``: the missing-mass search's
    result, or None with the reason ``not_run``)."""
    chain_p, pooled_p = combined_pvalues(tests)
    plan = tests.plan
    return rules.Evidence(
        pvalue=chain_p, reliable=plan.reliable, pvalue_pooled=pooled_p,
        reliable_pooled=bool(plan.reliable_pooled), kept_draws=int(plan.n_used),
        thinning_lag=int(plan.lag), min_kept_draws=MIN_THINNED_DRAWS, n_draw=n_draw,
        effective_draws_pooled=float(np.sum(n_draw / plan.tau)),
        agreement_pvalue=agreement.pvalue, agreement_reliable=agreement.reliable,
        divergences=divergences, stuck=stuck,
        missing_found=bool(search is not None and search.found),
        missing_run=search is not None,
        missing_summary=search.summary if search is not None else "",
        missing_not_run_reason=not_run, labels=labels)


def as_one_chain(evidence):
    """An ensemble's walkers read as one chain: the evidence of its one "chain".

    The walkers of an ensemble sampler (emcee) are not independent chains: each move of a
    walker uses the others. The ensemble is one Markov chain, whose state is every walker
    at one step; its stationary law is p for every walker independently (Goodman & Weare
    2010), so the walkers at one step are independent draws of p, and steps L apart
    (L about five autocorrelation times of the walkers' mean autocorrelation, as emcee
    estimates it) nearly independent of each other. The pooled KSD test reads exactly
    that (every L-th step of every walker, one independent sign each): it is the
    ensemble's test. Per-walker tests (a few blocks each) and the MMD test of agreement
    among walkers (exchangeable by construction) are not run.
    """
    return replace(
        evidence, pvalue=np.array([evidence.pvalue_pooled]),
        reliable=np.array([evidence.reliable_pooled]), min_kept_draws=MIN_POOLED_BLOCKS,
        agreement_pvalue=np.nan, agreement_reliable=True, divergences=None,
        stuck=np.array([bool(evidence.stuck.all())]), labels=["ensemble"])
