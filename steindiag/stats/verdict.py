"""From test results to a verdict: "fits", "does not fit" or "inconclusive" (NumPy only).

The rules of :func:`steindiag.diagnose`, as plain functions of arrays so that they can be
read and tested on their own. The tests combined are the KSD tests of the chains (one
family: max-T adjusted p-values, so any number of chains counts as one test), the KSD
test of all chains pooled (both on nearly independent draws: every L-th draw, L about
five autocorrelation times, from every offset), one test that all chains agree (MMD,
blocks of draws relabelled among the chains), and the search for unvisited mass: at
most 4 tests, whatever the number of chains. The family-wise level is held by Bonferroni's rule:
each test is read at level alpha / m for m tests, so the probability that any of them
rejects a sample drawn from p is at most alpha (Holm's step-down procedure would reject
the same hypotheses first: a verdict only asks whether any test rejects). A p-value
marked unreliable is read neither way: it can neither reject nor support a fit, so the
verdict it decides is "inconclusive". See the Background page of the docs, "From numbers
to a verdict" and "Calibration on MCMC output".
"""

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from steindiag._words import chains, plural
from steindiag.stats.divergences import per_thousand

__all__ = ["FITS", "DOES_NOT_FIT", "INCONCLUSIVE", "VERDICTS", "REASONS", "VERDICT_OF",
           "Evidence", "n_tests", "chain_verdicts", "pooled_verdict", "more_draws_needed",
           "detectable_shift", "NAMING_ALPHA", "named", "FEW_DIVERGENCES",
           "divergences_in_context"]

# kappa(d): the pooled KSD test of diagnose detects a shift of the mean by delta posterior
# standard deviations (along one coordinate of N(0, I_d)) in 80 % of runs when
# delta = kappa(d) / sqrt(n) for n independent draws; measured by
# benchmarks/bench_power_shift.py (results/power_shift.md: 30 runs a point, n = 200 and
# 800 agree within 4 %), interpolated in log d and extrapolated with the last slope.
_KAPPA_D = np.array([1.0, 2.0, 10.0, 50.0])
_KAPPA = np.array([4.0, 4.7, 5.4, 8.4])

# A run with divergent transitions can still get "fits" (with the divergences named in the
# reason) when every test passes, they are at most this many per 1000 draws in every chain,
# the divergent draws sit nowhere in particular (no parameter named by their shift) and
# the model was read as holding no centred hierarchy:
# benchmarks/bench_divergences.py (results/divergences.md).
FEW_DIVERGENCES = 2.0

FITS = "fits"
DOES_NOT_FIT = "does not fit"
INCONCLUSIVE = "inconclusive"
VERDICTS = (FITS, DOES_NOT_FIT, INCONCLUSIVE)
# The code of each reason a verdict can have: what decided it. Advice is chosen from the
# code (the reason's text is for people and may be reworded freely).
REASONS = (
    "no_rejection",         # fits: no test rejected
    "stuck",                # a chain never moved
    "ksd_rejects",          # the (chain's or pooled) KSD test rejects
    "chains_rejected",      # pooled: the KSD tests of some chains reject
    "unvisited_mass",       # the search found mass no draw visited
    "chains_disagree",      # the test that all chains agree rejects
    "too_few_draws",        # a KSD p-value that would decide cannot be trusted
    "divergences",          # the sampler reported divergent transitions; nothing rejected
    "few_divergences",      # fits, with a caveat: a few divergences, sitting nowhere in
                            # particular, and every test passed
    "agreement_undecided",  # too few blocks for the test of agreement
    "chain_differs",        # the chains disagree, and this one differs from the others
    "far_off",              # a chain spreads far wider than the target allows
)


# The verdict each reason code gives (pooled, then a chain's where they differ): a saved
# result whose verdict does not follow from its code was edited.
VERDICT_OF = {
    "no_rejection": (FITS, FITS), "stuck": (DOES_NOT_FIT, DOES_NOT_FIT),
    "ksd_rejects": (DOES_NOT_FIT, DOES_NOT_FIT), "chains_rejected": (DOES_NOT_FIT, None),
    "unvisited_mass": (DOES_NOT_FIT, DOES_NOT_FIT),
    "chains_disagree": (DOES_NOT_FIT, INCONCLUSIVE),
    "too_few_draws": (INCONCLUSIVE, INCONCLUSIVE), "divergences": (INCONCLUSIVE, INCONCLUSIVE),
    "few_divergences": (FITS, FITS),
    "agreement_undecided": (INCONCLUSIVE, None), "chain_differs": (None, DOES_NOT_FIT),
    "far_off": (DOES_NOT_FIT, DOES_NOT_FIT),
}


@dataclass(kw_only=True)
class Evidence:
    """What the tests found, as :func:`chain_verdicts` and :func:`pooled_verdict` read it.

    Attributes
    ----------
    pvalue, reliable : ndarray (chain,)
        Each chain's KSD test: p-value, adjusted for the family of the chains' tests,
        and whether it can be trusted.
    pvalue_pooled, reliable_pooled : float, bool
        The pooled KSD test.
    kept_draws : int
        Draws of each chain the KSD test read (every ``thinning_lag``-th).
    thinning_lag : int
        Every how many draws the KSD test read.
    min_kept_draws : int
        Fewer kept draws than this: the chain's KSD p-value is not trusted.
    n_draw : int
        Draws of each chain.
    effective_draws_pooled : float
        Sum over chains of draw / tau.
    agreement_pvalue, agreement_reliable : float, bool
        The test that all chains agree (NaN, True for one chain).
    agreement_min_pvalue : float
        Its smallest attainable p-value (when above the level, it cannot decide).
    divergences : ndarray (chain,) of int or None
        Divergent transitions (None: no sampler statistics).
    divergence_shift : ndarray (d,) or None
        The divergent draws' mean minus the others', in standard errors, per parameter
        (``stats.divergences.divergence_shift``); None when the flags of the draws are
        not known.
    parameterisation : str
        The model's as read from its graph: "centred", "non-centred", "unknown", or ""
        (no model read).
    stuck, never_moved : ndarray (chain,) of bool
        Chains that barely move (their Stein spread moment is tiny in every parameter:
        ``stats.stein_moments``), and those whose draws are all the same point.
    far_off : ndarray (chain,) of bool
        Chains whose spread moment reaches 100 in absolute value in some parameter: their
        draws spread far wider than the target allows there.
    spread : ndarray (chain,)
        Each chain's largest spread moment over the parameters (1 for draws of p; for a
        far-off chain, the largest in absolute value).
    differs : ndarray (chain,) of bool or None
        Once the test of agreement rejects: the chains whose mean differs from the other
        chains' in some parameter (``methods.evidence.differing_chains``); None otherwise.
    missing_found, missing_run : bool
        The search for unvisited mass: found some, ran at all.
    missing_summary, missing_not_run_reason : str
    labels : list
        The chains' coordinate values, to name them in reasons.
    """

    pvalue: np.ndarray
    reliable: np.ndarray
    pvalue_pooled: float
    reliable_pooled: bool
    kept_draws: int
    thinning_lag: int
    min_kept_draws: int
    n_draw: int
    effective_draws_pooled: float
    agreement_pvalue: float = np.nan
    agreement_reliable: bool = True
    agreement_min_pvalue: float = 0.0
    divergences: np.ndarray = None
    divergence_shift: np.ndarray = None
    parameterisation: str = ""
    stuck: np.ndarray = None
    far_off: np.ndarray = None
    never_moved: np.ndarray = None
    spread: np.ndarray = None
    differs: np.ndarray = None
    missing_found: bool = False
    missing_run: bool = False
    missing_summary: str = ""
    missing_not_run_reason: str = ""
    labels: list = None

    def __post_init__(self):
        self.pvalue = np.asarray(self.pvalue, dtype=np.float64)
        self.reliable = np.asarray(self.reliable, dtype=bool)
        n_chain = self.pvalue.shape[0]
        if self.stuck is None:
            self.stuck = np.zeros(n_chain, dtype=bool)
        if self.never_moved is None:
            self.never_moved = self.stuck.copy()
        if self.far_off is None:
            self.far_off = np.zeros(n_chain, dtype=bool)
        if self.spread is None:
            self.spread = np.where(self.stuck, 0.0, 1.0)
        if self.labels is None:
            self.labels = list(range(n_chain))

    @property
    def n_chain(self):
        return self.pvalue.shape[0]


def n_tests(n_chain, missing_mass_run):
    """Number of tests combined: the KSD tests of the chains (one family, read through
    family-wise adjusted p-values), the pooled KSD test, one test that all chains agree
    (none for one chain), and the search for unvisited mass when it runs."""
    return 2 + int(n_chain > 1) + int(bool(missing_mass_run))


def more_draws_needed(evidence):
    """About how many draws per chain would give the KSD test enough nearly independent
    draws: the number needed times the lag between them (or, from the draws kept now, the
    draws per chain scaled up to that number, when that is more), rounded up to a hundred."""
    e = evidence
    needed = max(max(e.thinning_lag, 1) * e.min_kept_draws,
                 e.n_draw * e.min_kept_draws / max(e.kept_draws, 1))
    return int(np.ceil(needed / 100.0) * 100)


def detectable_shift(effective_draws, d):
    """The mean shift, in posterior standard deviations, that the KSD test would detect 80 %
    of the time with ``effective_draws`` effective draws of a d-dimensional, roughly
    Gaussian posterior: kappa(d) / sqrt(effective draws) (see ``_KAPPA``)."""
    log_d = np.log(max(float(d), 1.0))
    log_kappa = np.log(_KAPPA)
    knots = np.log(_KAPPA_D)
    if log_d > knots[-1]:
        slope = (log_kappa[-1] - log_kappa[-2]) / (knots[-1] - knots[-2])
        value = log_kappa[-1] + slope * (log_d - knots[-1])
    else:
        value = np.interp(log_d, knots, log_kappa)
    return float(np.exp(value) / np.sqrt(max(float(effective_draws), 1.0)))


def _p(value):
    return f"p = {value:.2g}"


def _agreement_rejects(evidence, level):
    return (evidence.n_chain > 1 and bool(evidence.agreement_reliable)
            and np.isfinite(evidence.agreement_pvalue) and evidence.agreement_pvalue <= level)


def _agreement_doubt(e, level):
    if e.agreement_min_pvalue > level:
        return (f"the MMD test of agreement cannot reach the level: with so few blocks of "
                f"draws its smallest attainable p-value is {e.agreement_min_pvalue:.2g} > "
                f"{level:.2g}, so whether the chains agree cannot be checked")
    return ("the chains are too autocorrelated for the MMD test of agreement (fewer than 3 "
            "blocks of about 5 autocorrelation times per chain, or 20 in all): whether they "
            "agree cannot be checked")


def _too_few(evidence, what):
    e = evidence
    return (f"too few nearly independent draws for the KSD test of {what}: the "
            f"autocorrelation time is long, so only draws at least {e.thinning_lag} apart are "
            f"nearly independent and the {e.n_draw} draws of a chain give "
            f"{e.kept_draws}, fewer than {e.min_kept_draws}; about "
            f"{more_draws_needed(e)} draws per chain would decide")


def chain_verdicts(evidence, level, conditional=False):
    """The verdict and its reason for each chain.

    Parameters
    ----------
    evidence : Evidence
    level : float
        The level each test is read at (alpha / number of tests).
    conditional : bool
        The search for unvisited mass did not run: a "fits" says it is conditional.

    Returns
    -------
    verdicts, codes, reasons : ndarray (chain,) of str
        The verdict, the code of its reason (one of ``REASONS``) and the reason in words.

    Notes
    -----
    In order, the first rule that applies decides:

    1. every draw of the chain is the same point: "does not fit" (the chain never moved);
    2. the chain's KSD test rejects at ``level`` with a reliable p-value: "does not fit";
    3. the search found unvisited mass: "does not fit" (what the pooled draws missed,
       every chain missed);
    4. the chain's p-value is unreliable (too few nearly independent draws):
       "inconclusive";
    5. the chain has divergent transitions and they cannot be read in context
       (:func:`divergences_in_context`): "inconclusive" (the sampler reports regions it
       could not explore; no test rejected, which does not show they hold no mass);
    6. the test that all chains agree rejects: "inconclusive" (some chain did not sample
       p, and the test does not say which);
    7. otherwise "fits" (code "few_divergences" when the chain had a few divergences
       read in context: the reason names them).
    """
    e = evidence
    disagree = _agreement_rejects(e, level)
    rows = [_chain_rule(e, ch, level, disagree) for ch in range(e.n_chain)]
    if conditional:
        rows = [(verdict, code, reason + (" (conditional: no search for unvisited mass)"
                                          if verdict == FITS else ""))
                for verdict, code, reason in rows]
    verdicts, codes, reasons = (np.array([row[k] for row in rows], dtype=object).astype(str)
                                for k in range(3))
    return verdicts, codes, reasons


def _others(e):
    """' (the other chains are tested without it)' when some chain is left to test."""
    out = e.stuck | e.far_off
    if not (~out).any():
        return ""
    return f" (the other chains are tested without {'it' if out.sum() == 1 else 'them'})"


def _stuck_reason(e, ch):
    if e.never_moved[ch]:
        return f"the chain never moved: all {e.n_draw} draws are the same point"
    return (f"the chain barely moves: in every parameter its spread is at most "
            f"{np.sqrt(max(e.spread[ch], 0.0)):.2g} of the scale the target's curvature sets "
            f"where it sits (Stein spread moment {e.spread[ch]:.2g}; 1 for draws of the "
            "target)")


def _chain_rule(e, ch, level, disagree):
    """(verdict, code, reason) of chain ``ch``: the first rule of ``chain_verdicts``."""
    if e.stuck[ch]:
        return DOES_NOT_FIT, "stuck", _stuck_reason(e, ch)
    if e.far_off[ch]:
        return DOES_NOT_FIT, "far_off", (
            f"in some parameter its draws spread about {e.spread[ch]:.2g} times the variance "
            "the target allows where they sit (Stein spread moment; 1 for draws of the "
            "target), which no sample of the target does (see 'where')")
    if e.reliable[ch] and e.pvalue[ch] <= level:
        return DOES_NOT_FIT, "ksd_rejects", (
            f"the KSD test rejects the draws ({_p(e.pvalue[ch])} <= {level:.2g})")
    if e.missing_found:
        return DOES_NOT_FIT, "unvisited_mass", f"unvisited mass: {e.missing_summary}"
    if not e.reliable[ch]:
        return INCONCLUSIVE, "too_few_draws", _too_few(e, "this chain")
    divergent = e.divergences is not None and e.divergences[ch] > 0
    if divergent and not divergences_in_context(e, ch):
        return INCONCLUSIVE, "divergences", (
            f"{plural(e.divergences[ch], 'divergent transition')}: the sampler could not "
            f"explore part of the target; no test rejected ({_p(e.pvalue[ch])})")
    if disagree and e.differs is not None and e.differs[ch]:
        return DOES_NOT_FIT, "chain_differs", (
            f"the chains disagree (MMD test of agreement, {_p(e.agreement_pvalue)}) and this "
            "chain's mean differs from the other chains' (see 'where'); its own KSD test "
            f"did not reject ({_p(e.pvalue[ch])}), which KSD's blindness to the weights of "
            "separated regions allows")
    if disagree:
        named = ([e.labels[k] for k in np.flatnonzero(e.differs)]
                 if e.differs is not None else [])
        which = (f"{chains(named)} {'differs' if len(named) == 1 else 'differ'} from the "
                 "others" if named else
                 "no chain's mean stands out, so the test does not say which chain differs")
        return INCONCLUSIVE, "chains_disagree", (
            f"the chains disagree (MMD test of agreement, {_p(e.agreement_pvalue)}): {which}; "
            f"this chain's own KSD test did not reject ({_p(e.pvalue[ch])})")
    if divergent:
        return FITS, "few_divergences", (f"no test rejected (KSD {_p(e.pvalue[ch])}); "
                                         + _few_caveat(e, e.divergences[ch]))
    return FITS, "no_rejection", f"no test rejected (KSD {_p(e.pvalue[ch])})"


def pooled_verdict(evidence, level):
    """The verdict and its reason for all chains together.

    Parameters
    ----------
    evidence : Evidence
    level : float
        The level each test is read at (alpha / number of tests).

    Returns
    -------
    verdict, code, reason : str
        The verdict, the code of its reason (one of ``REASONS``; with several doubts, the
        first) and the reason in words.

    Notes
    -----
    "does not fit" when a chain never moved, or any test rejects reliably at ``level``
    (the pooled or a chain's KSD test, the test that all chains agree: chains of one
    target have one distribution, or the search for unvisited mass); otherwise
    "inconclusive" when the sampler reported divergent transitions that cannot be read
    in context (:func:`divergences_in_context`) or a p-value that would decide is
    unreliable (the pooled KSD test, the test of agreement), with every such doubt in
    the reason; otherwise "fits" (said to be conditional when the search for unvisited
    mass did not run; code "few_divergences", the divergences named, when there were a
    few read in context).
    """
    e = evidence
    labels = e.labels
    rejecting = np.flatnonzero(e.reliable & (e.pvalue <= level))
    if e.stuck.any():
        stuck = [labels[k] for k in np.flatnonzero(e.stuck)]
        if e.never_moved[e.stuck].all():
            return DOES_NOT_FIT, "stuck", (
                f"{chains(stuck)} never moved: all {e.n_draw} draws of "
                f"{'it' if len(stuck) == 1 else 'each'} are the same point")
        one = len(stuck) == 1
        return DOES_NOT_FIT, "stuck", (
            f"{chains(stuck)} barely {'moves' if one else 'move'}: in every parameter "
            f"{'its' if one else 'their'} spread is at most "
            f"{np.sqrt(max(e.spread[e.stuck].max(), 0.0)):.2g} of the scale the target sets "
            f"where {'it sits' if one else 'they sit'}, so {'it does' if one else 'they do'} "
            f"not sample the target{_others(e)}")
    if e.far_off.any():
        far = [labels[k] for k in np.flatnonzero(e.far_off)]
        return DOES_NOT_FIT, "far_off", (
            f"{chains(far)} {'spreads' if len(far) == 1 else 'spread'} about "
            f"{e.spread[e.far_off].max():.2g} times the variance "
            "the target allows in some parameter (Stein spread moment; 1 for draws of the "
            f"target): {'it is' if len(far) == 1 else 'they are'} not draws of the target"
            f"{_others(e)}")
    if e.reliable_pooled and e.pvalue_pooled <= level:
        return DOES_NOT_FIT, "ksd_rejects", (
            f"the KSD test rejects the draws ({_p(e.pvalue_pooled)} <= {level:.2g})")
    if rejecting.size:
        return DOES_NOT_FIT, "chains_rejected", (
            f"the KSD test rejects {chains(labels[k] for k in rejecting)} "
            f"(smallest {_p(e.pvalue[rejecting].min())} <= {level:.2g})")
    if e.missing_found:
        return DOES_NOT_FIT, "unvisited_mass", f"unvisited mass: {e.missing_summary}"
    if _agreement_rejects(e, level):
        return DOES_NOT_FIT, "chains_disagree", (
            f"the chains disagree: the MMD test of agreement among all chains rejects "
            f"({_p(e.agreement_pvalue)} <= {level:.2g}); chains of one target have one "
            "distribution")
    doubts, codes = [], []
    divergent = e.divergences is not None and np.sum(e.divergences) > 0
    if divergent and not divergences_in_context(e):
        codes.append("divergences")
        doubts.append(
            f"{plural(np.sum(e.divergences), 'divergent transition')}: the sampler could not "
            f"explore part of the target, and no test rejected ({_p(e.pvalue_pooled)}); that "
            "does not show the unexplored part holds no mass")
    if not e.reliable_pooled:
        codes.append("too_few_draws")
        doubts.append(_too_few(e, "the chains") + f" ({e.effective_draws_pooled:.0f} "
                      "effective draws in all)")
    if e.n_chain > 1 and not e.agreement_reliable:
        codes.append("agreement_undecided")
        doubts.append(_agreement_doubt(e, level))
    if doubts:
        return INCONCLUSIVE, codes[0], "; ".join(doubts)
    reason = f"no test rejected (KSD {_p(e.pvalue_pooled)})"
    if divergent:
        reason += "; " + _few_caveat(e, np.sum(e.divergences), e.n_chain)
    if not e.missing_run:
        reason += (f"; conditional: the search for unvisited mass was not run "
                   f"({e.missing_not_run_reason}), and KSD alone is blind to modes the chains "
                   "never visited")
    return FITS, "few_divergences" if divergent else "no_rejection", reason


def divergences_in_context(evidence, chain=None):
    """Whether the divergent transitions of ``chain`` (None: of every chain) can be read in
    context, so that they do not by themselves make the verdict "inconclusive".

    They can when the model was read and holds no centred hierarchy
    (``evidence.parameterisation`` is "non-centred": centred models and traces without a
    model never qualify, as a centred hierarchy's funnel can leave a few divergences
    that sit nowhere in particular; benchmarks/results/divergences.md), the flags of the
    draws are known, there are at most
    ``FEW_DIVERGENCES`` per 1000 draws (in the chain; with ``chain=None``, in every
    chain), and no parameter is named where the divergent draws sit (their shift from
    the other draws, ``evidence.divergence_shift``, read by :func:`named` at
    ``NAMING_ALPHA``, Bonferroni over the parameters). The tests are the rules' own
    business: a verdict is "fits" only when, besides this, none rejects and every p-value
    that decides is reliable.
    """
    e = evidence
    if (e.divergences is None or e.divergence_shift is None
            or e.parameterisation != "non-centred"):
        return False
    counts = e.divergences if chain is None else e.divergences[chain:chain + 1]
    if np.max(per_thousand(counts, e.n_draw)) > FEW_DIVERGENCES:
        return False
    shift = np.asarray(e.divergence_shift, dtype=np.float64)
    return bool(np.isfinite(shift).any()) and not named(shift)[1]


def _few_caveat(e, count, n_chain=1):
    rate = float(per_thousand(count, e.n_draw * n_chain))
    one = int(count) == 1
    return (f"the sampler reported {plural(count, 'divergent transition')} ({rate:.2g} per "
            f"1000 draws), which {'sits' if one else 'sit'} nowhere in particular (no "
            f"parameter's value at {'it' if one else 'them'} stands out): read the draws "
            "with that caveat")


# Level at which a chain or a parameter is named as where a rejection comes from (two-sided,
# Bonferroni over the candidates): a description of the rejection, not another test.
NAMING_ALPHA = 0.05


def named(z, top=3, alpha=NAMING_ALPHA):
    """Which entries of the standardised differences ``z`` to name, most extreme first.

    Those whose two-sided normal p-value is at most alpha / (number of finite entries)
    (Bonferroni), at most ``top``; when none is, the most extreme one alone. Returns
    (indices, significant): ``significant`` False when the one named is only the largest.
    """
    z = np.asarray(z, dtype=np.float64).ravel()
    finite = np.flatnonzero(np.isfinite(z))
    if finite.size == 0:
        return np.array([], dtype=np.int64), False
    order = finite[np.argsort(-np.abs(z[finite]), kind="stable")]
    # |z| above which the two-sided p-value is at most alpha / m: the normal quantile.
    threshold = -ndtri(alpha / (2.0 * finite.size))
    strong = order[np.abs(z[order]) >= threshold]
    if strong.size:
        return strong[:top], True
    return order[:1], False
