"""The evidence of ``diagnose``, gathered on prepared arrays (no labels, no reading here).

The pieces: the number of bootstrap replicates (:func:`replicates`) and the KSD estimator
(:func:`choose_estimator`) the test needs; the KSD tests of the chains and pooled, plain,
damped and under the sample covariance, all with the same bootstrap signs
(:func:`ksd_test_family`), read together by max-T (:func:`combined_pvalues`); the MMD test
that all chains agree (:func:`agreement_evidence`); chains that never moved
(:func:`stuck_chains`); and :func:`collect`, which puts them into the ``stats.verdict``
``Evidence`` the rules read.
"""

from dataclasses import dataclass, field, replace
from math import lgamma

import numpy as np

from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.ksd import ksd_values, stein_sums
from steindiag.methods.ksd_test import check_family_memory, plan_test, test_forms
from steindiag.methods.mmd import drop_constant, mmd_from_draws, plan_blocks
from steindiag.methods.search import run_search
from steindiag.stats import verdict as rules
from steindiag.stats.bootstrap import (MIN_POOLED_BLOCKS, MIN_THINNED_DRAWS,
                                       bootstrap_pvalue, max_statistic_pvalues)
from steindiag.stats.divergences import divergence_shift
from steindiag.stats.stein_moments import chain_shifts, far_off, nearly_stuck, stein_moments

__all__ = ["MAX_REPLICATES", "EXACT_BUDGET_FLOPS", "MMD_BUDGET_PAIRS", "COVARIANCE_MAX_D",
           "replicates", "choose_estimator", "mmd_stride", "KSDTests", "ksd_test_family",
           "combined_pvalues", "Deciding", "deciding_statistics", "Agreement",
           "relabelling_min_pvalue", "agreement_evidence",
           "Gathered", "gather", "draws_preconditioner", "collect", "differing_chains", "as_one_chain",
           "chain_values"]

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
    check_family_memory(tested, plan, n_bootstrap, exact, n_landmarks)
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


def _family(tests):
    """The statistics of the max-T family in order, with their names: each test's plain
    statistic, then its damped one: [(name, chain forms, pooled forms)]."""
    family = []
    for pre, f in zip(tests.preconditioners, tests.forms):
        family.append((pre.name, f.chain, f.pooled))
        if f.damped_chain is not None:
            family.append((f"{pre.name}, damped", f.damped_chain, f.damped_pooled))
    return family


@dataclass(kw_only=True)
class Deciding:
    """The statistic of the family that points most strongly against p: per chain and
    pooled, its ``name``, its value as a KSD (sqrt of statistic / draws read), the same
    for the mean of its bootstrap replicates (``floor``), and its own p-value."""

    name: np.ndarray
    ksd: np.ndarray
    floor: np.ndarray
    pvalue: np.ndarray
    name_pooled: str
    ksd_pooled: float
    floor_pooled: float
    pvalue_pooled: float


def deciding_statistics(tests):
    """:class:`Deciding` of the KSD tests: for each chain (and pooled) the member of the
    max-T family with the smallest p-value of its own (the first, plain, on ties)."""
    family = _family(tests)
    n_used = tests.plan.n_used
    chain_p = np.array([bootstrap_pvalue(chain[:, 1:], chain[:, 0]) for _, chain, _ in family])
    pooled_p = np.array([bootstrap_pvalue(pooled[1:], np.asarray(pooled[0]))
                         for _, _, pooled in family])
    best, best_pooled = np.argmin(chain_p, axis=0), int(np.argmin(pooled_p))
    rows = np.arange(best.size)
    chain_stat = np.stack([chain[:, 0] for _, chain, _ in family])[best, rows]
    chain_null = np.stack([chain[:, 1:].mean(axis=1) for _, chain, _ in family])[best, rows]
    n_pooled = n_used * best.size
    _, _, pooled = family[best_pooled]
    return Deciding(
        name=np.array([family[k][0] for k in best]),
        ksd=np.sqrt(np.maximum(chain_stat, 0.0) / n_used),
        floor=np.sqrt(np.maximum(chain_null, 0.0) / n_used), pvalue=chain_p[best, rows],
        name_pooled=family[best_pooled][0],
        ksd_pooled=float(np.sqrt(max(pooled[0], 0.0) / n_pooled)),
        floor_pooled=float(np.sqrt(max(pooled[1:].mean(), 0.0) / n_pooled)),
        pvalue_pooled=float(pooled_p[best_pooled]))


def combined_pvalues(tests):
    """(chain p-values, pooled p-value) of the KSD tests, every statistic of every test
    (plain, damped; each preconditioner) read together by max-T (Westfall & Young): the
    chains' statistics are one family, the pooled ones another; replicate b of every
    statistic shares its bootstrap signs. A chain whose test cannot be trusted takes no
    part (its own p-value is kept)."""
    reliable = tests.plan.reliable
    family = [(chain, pooled) for _, chain, pooled in _family(tests)]
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
    """The MMD test that all chains agree: p-value (NaN for fewer than two chains), whether
    it can be trusted, its smallest attainable p-value, a note for the report, and the
    coordinates left out as constant."""

    pvalue: float = np.nan
    reliable: bool = True
    min_pvalue: float = 0.0
    note: str = ""
    constant: list = field(default_factory=list)


def relabelling_min_pvalue(blocks_used, n_permutations):
    """Smallest p-value the relabelling test can give: max(1 / (1 + B), 1 / M).

    The statistic is a function of the partition of the blocks used among the chains, not
    of the chains' names, so it takes at most M = U! / (prod_c n_c!) / prod_n (m_n!)
    values, U blocks in all, n_c in chain c, m_n chains holding n blocks; relabellings
    are equally likely under the null, so the observed partition is the most extreme of
    M at best (Phipson & Smyth 2010), whatever B.
    """
    sizes = [int(n) for n in blocks_used]
    log_m = lgamma(sum(sizes) + 1) - sum(lgamma(n + 1) for n in sizes)
    log_m -= sum(lgamma(sizes.count(n) + 1) for n in set(sizes))
    return max(1.0 / (1.0 + n_permutations), float(np.exp(-log_m)))


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
    used = [(n + 1) // 2 for n in blocks.blocks_per_chain for _ in range(n_chain)]
    return Agreement(pvalue=pvalue, reliable=bool(blocks.reliable) and np.isfinite(pvalue),
                     min_pvalue=relabelling_min_pvalue(used, n_permutations), note=note,
                     constant=constant)


@dataclass(kw_only=True)
class Gathered:
    """Everything ``diagnose`` measured, before the rules read it.

    ``moments`` (``stats.stein_moments``) of every chain; ``stuck`` and ``far_off``
    (chain,) the chains that barely move or spread far wider than the target allows in
    some parameter; ``active`` (chain,) the chains the tests read (all but those, unless the
    draws are an ensemble's);
    ``tests`` the KSD tests of the active chains (None when none is active); ``agreement``
    among them; ``values`` the KSD and floors of every chain (``methods.ksd``); ``search``
    and ``not_run``: the missing-mass search's result or why it did not run; ``shifts``
    (chain, d): each active chain's mean against the other active chains' in standard
    errors (``stats.stein_moments.chain_shifts``); ``pooled_moments``: the Stein moments of
    the active chains together, and ``deciding`` the statistic behind each test
    (:class:`Deciding`), None when no chain is active.
    """

    moments: object
    active: np.ndarray
    stuck: np.ndarray
    far_off: np.ndarray
    never_moved: np.ndarray
    tests: object
    agreement: Agreement
    values: object
    search: object
    not_run: str
    shifts: np.ndarray
    pooled_moments: object = None
    deciding: object = None


def draws_preconditioner(preconditioner, draws, parameter):
    """``make_preconditioner`` of the pooled (chain, draw, d) draws; when every draw of
    every chain is one point (no chain ever moved: nothing to scale, and every chain is
    "does not fit" before any test), the identity, recorded as such."""
    flat = draws.reshape(-1, draws.shape[-1])
    if flat.shape[0] > 0 and np.all(flat == flat[:1]):
        preconditioner = "identity"
    return make_preconditioner(preconditioner, flat, parameter)


def _chains(prepared, active):
    """The prepared draws of the ``active`` chains only."""
    if active.all():
        return prepared
    return replace(prepared, draws=prepared.draws[active], scores=prepared.scores[active],
                   chain=prepared.chain[active])


def gather(prepared, pre, preconditioner, kernel, *, has_chains, ensemble, n_bootstrap,
           n_permutations, estimator_options, rng, search, source, level, backend, progress):
    """Run every piece of the evidence on the prepared draws: :class:`Gathered`.

    In order (the order of the random draws): the chains' Stein moments and which barely
    move; the KSD tests of the others (their bootstrap signs from one seed drawn from
    ``rng``); the test that they agree (relabellings from ``rng``); KSD and floors of every
    chain (the Nystrom estimator's landmarks from ``rng``); the missing-mass search
    (``search``: whether to run it; its starts from ``rng``).
    """
    moments = stein_moments(prepared.draws, prepared.scores)
    never_moved = np.all(prepared.draws.max(axis=1) == prepared.draws.min(axis=1), axis=-1)
    stuck = nearly_stuck(moments) | never_moved
    far = far_off(moments) & ~stuck
    active = np.ones(stuck.shape, dtype=bool) if ensemble else ~(stuck | far)
    tested = _chains(prepared, active)
    seed = int(rng.integers(2**63 - 1))
    tests = None if not active.any() else ksd_test_family(
        tested, pre, preconditioner, kernel, has_chains=has_chains, n_bootstrap=n_bootstrap,
        seed=seed, backend=backend, progress=progress, **estimator_options)
    agreement = Agreement() if ensemble or active.sum() < 2 else agreement_evidence(
        tested.draws, prepared.parameter, pre, preconditioner, kernel, n_permutations, rng,
        progress)
    values = ksd_values(stein_sums(prepared, pre, kernel, rng=rng, path=False,
                                   progress=progress, backend=backend,
                                   **estimator_options)[0], prepared.draws.shape[1])
    result, not_run = None, "mode_search=False"
    if search:
        result, not_run = run_search(prepared, source, kernel, pre, level, rng)
    pooled_moments = None if not active.any() else stein_moments(
        tested.draws, tested.scores, pooled=True)
    return Gathered(moments=moments, active=active, stuck=stuck, far_off=far,
                    never_moved=never_moved,
                    tests=tests, pooled_moments=pooled_moments,
                    deciding=None if tests is None else deciding_statistics(tests),
                    agreement=agreement, values=values, search=result, not_run=not_run,
                    shifts=chain_shifts(prepared.draws, active))


def _expanded(active, values, fill, dtype):
    """(chain,) array: ``values`` at the active chains, ``fill`` elsewhere."""
    out = np.full(active.shape, fill, dtype=dtype)
    out[active] = values
    return out


def collect(gathered, *, n_draw, found, labels, level, draws=None):
    """The ``stats.verdict.Evidence`` of what :func:`gather` measured (the p-values of the
    chains the tests did not read: NaN, never reliable). ``found``: what the input layer
    read of the sampler (``divergences`` (chain,), their flags ``diverging`` (chain,
    draw) or None, and the model's ``parameterisation`` or None), or None; the flags,
    with the ``draws`` (chain, draw, d), place the divergences
    (``stats.divergences.divergence_shift``)."""
    divergences = None if found is None else found.divergences
    diverging = None if found is None else found.diverging
    model_read = None if found is None else found.parameterisation
    g, active = gathered, gathered.active
    tests = g.tests
    if tests is None:
        chain_p, pooled_p = np.full(int(active.sum()), np.nan), np.nan
        plan = None
    else:
        chain_p, pooled_p = combined_pvalues(tests)
        plan = tests.plan
    spread = np.where(g.far_off, np.max(np.where(g.moments.constant_score, 0.0,
                                                 np.abs(g.moments.spread)), axis=1),
                      np.max(np.where(g.moments.constant_score, -np.inf, g.moments.spread),
                             axis=1))
    agreement_ok = bool(g.agreement.reliable) and g.agreement.min_pvalue <= level
    rejects = agreement_ok and np.isfinite(g.agreement.pvalue) and g.agreement.pvalue <= level
    return rules.Evidence(
        pvalue=_expanded(active, chain_p, np.nan, float),
        reliable=_expanded(active, plan.reliable if plan else [], False, bool),
        pvalue_pooled=pooled_p, reliable_pooled=bool(plan and plan.reliable_pooled),
        kept_draws=int(plan.n_used) if plan else 0, thinning_lag=int(plan.lag) if plan else 1,
        min_kept_draws=MIN_THINNED_DRAWS, n_draw=n_draw,
        effective_draws_pooled=float(np.sum(n_draw / plan.tau)) if plan else 0.0,
        agreement_pvalue=g.agreement.pvalue, agreement_reliable=agreement_ok,
        agreement_min_pvalue=g.agreement.min_pvalue, divergences=divergences,
        divergence_shift=(None if diverging is None or draws is None
                          else divergence_shift(draws, diverging)),
        parameterisation="" if model_read is None else model_read.state,
        stuck=g.stuck, far_off=g.far_off, never_moved=g.never_moved, spread=spread,
        differs=differing_chains(g.shifts, level) if rejects else None,
        missing_found=bool(g.search is not None and g.search.found),
        missing_run=g.search is not None,
        missing_summary=g.search.summary if g.search is not None else "",
        missing_not_run_reason=g.not_run, labels=labels)


def differing_chains(shifts, level):
    """(chain,) bool: the chains whose mean differs from the other chains' in some parameter
    at ``level``, Bonferroni over every (chain, parameter) pair (read once the test that all
    chains agree has rejected, so that it names where the disagreement is)."""
    picked, significant = rules.named(shifts, top=shifts.size, alpha=level)
    differs = np.zeros(shifts.shape[0], dtype=bool)
    if significant:
        differs[np.unravel_index(picked, shifts.shape)[0]] = True
    return differs


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
        divergence_shift=None, differs=None,
        stuck=np.array([bool(evidence.stuck.all())]),
        far_off=np.array([bool(evidence.far_off.all())]),
        never_moved=np.array([bool(evidence.never_moved.all())]),
        spread=np.array([evidence.spread.max()]), labels=["ensemble"])


def chain_values(gathered, n_draw, ensemble):
    """Each chain's KSD, floor, unadjusted p-value and effective draws (an ensemble: one;
    the chains the tests did not read: NaN p-value and effective draws)."""
    g, values = gathered, gathered.values
    if g.tests is None:
        pvalue, pvalue_pooled, tau = np.full(g.active.sum(), np.nan), np.nan, np.nan
    else:
        (pvalue, pvalue_pooled), tau = g.tests.forms[0].pvalues(), g.tests.plan.tau
    if ensemble:
        return {"ksd": np.array([values.ksd_pooled]),
                "ksd_iid": np.array([values.ksd_iid_pooled]),
                "pvalue_unadjusted": np.array([pvalue_pooled]),
                "effective_draws": np.array([float(np.sum(n_draw / tau))])}
    return {"ksd": values.ksd, "ksd_iid": values.ksd_iid,
            "pvalue_unadjusted": _expanded(g.active, pvalue, np.nan, float),
            "effective_draws": _expanded(g.active, n_draw / tau, np.nan, float)}
