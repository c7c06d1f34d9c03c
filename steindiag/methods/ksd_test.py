"""The KSD goodness-of-fit test on prepared draws: its bootstrap plan and its statistics.

Data flow: ``SteinInput`` -> :func:`plan_test` (the bootstrap: which draws the statistic
reads, the chains' autocorrelation times, whether each p-value can be trusted) ->
:func:`test_forms` (bootstrap weights W (N, 1 + B), column 0 all ones
(``stats.bootstrap``) -> one tiled pass ``engine.forms.quadratic_forms`` giving
w^T K_p w for every column, per chain and pooled) -> :class:`TestForms` (statistics and
replicates; ``pvalues`` reads them). NumPy in, NumPy out: the labels are the caller's.

Memory: W is generated and consumed in passes over its columns (:func:`weight_passes`: one
pass while W takes at most 1 GiB), and a test whose bootstrap would not fit in the memory
available is refused before it starts (:func:`bootstrap_memory`, ``MemoryError``).
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from steindiag.engine.forms import forms_memory, forms_pairs, quadratic_forms
from steindiag.engine.memory import check_memory
from steindiag.engine.nystrom import default_n_landmarks
from steindiag.engine.progress import CONSERVATIVE_FLOPS, make_progress
from steindiag.methods.nystrom import nystrom_forms
from steindiag.stats.autocorrelation import integrated_autocorrelation_time, memory_time
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
from steindiag.stats.damping import damping_window

__all__ = ["BOOTSTRAPS", "MIN_EXPECTED_FLIPS", "TestPlan", "TestForms", "plan_test",
           "test_forms", "weight_passes", "bootstrap_memory", "check_family_memory"]

BOOTSTRAPS = ("auto", "iid", "wild", "thinned", "multinomial")
# Below this many expected sign flips in a chain, the wild bootstrap has too few
# effectively independent pieces to be trusted.
MIN_EXPECTED_FLIPS = 10.0
# The exact test's weights W (N, 1 + B) are made and read in passes over their columns of
# at most this many bytes each (the forms are column by column, so a pass over some columns
# gives their forms; each pass evaluates the kernel again: a few percent more time). One
# pass, as before, up to N (1 + B) 8 bytes = 1 GiB: N = 130,000 draws with B = 1000.
_WEIGHT_PASS_BYTES = 2**30
_MIN_PASS_COLUMNS = 64
# Bytes per entry of a chunk of sign chains while it is drawn (``stats.bootstrap.
# sign_chains``: uniforms, two boolean arrays, the signs), and the rows drawn at a time.
_SIGN_BYTES = 18.0
_SIGN_ROWS = 2048


@dataclass(kw_only=True)
class TestPlan:
    """How the KSD test reads the chains.

    Attributes
    ----------
    bootstrap : str
        "iid", "wild", "thinned" or "multinomial" ("auto" resolved).
    tau : ndarray (chain,)
        Each chain's integrated autocorrelation time (largest over the coordinates of
        the draws and the scores).
    common_tau : float
        With the thinned bootstrap, the largest tau of the chains' mean autocorrelation
        over the draws and scores, the same alternated in sign and the draws' folded
        ranks (``stats.autocorrelation.memory_time``; the lag's); NaN otherwise.
    lag, n_offsets : int
        The thinned test reads every ``lag``-th draw from each of the first
        ``n_offsets`` offsets of a block (1, 1 unless thinned).
    n_used : int
        Draws per chain in each statistic (blocks, for the thinned test).
    flip : ndarray (chain,)
        The sign chain's flip probability (1/2 for independent signs, NaN for
        multinomial weights).
    expected_flips : ndarray (chain,)
        ``n_used * flip``.
    reliable : ndarray of bool (chain,); reliable_pooled : bool
        Whether each p-value can be trusted.
    kept : ndarray (chain, n_used) or None
        The Nyström test of thinned chains reads one thinned subsequence per chain,
        from a random offset: the draws it keeps.
    """

    bootstrap: str
    tau: np.ndarray
    common_tau: float
    lag: int
    n_offsets: int
    n_used: int
    flip: np.ndarray
    expected_flips: np.ndarray
    reliable: np.ndarray
    reliable_pooled: bool
    kept: np.ndarray = None

    @property
    def unreliable(self):
        """Positions of the chains whose p-value cannot be trusted."""
        return np.flatnonzero(~self.reliable)

    def select(self, prepared):
        """The draws the test reads: all, or the Nyström test's thinned subsequences."""
        if self.kept is None:
            return prepared
        rows = np.arange(self.kept.shape[0])[:, None]
        return dataclasses.replace(
            prepared, draws=np.ascontiguousarray(prepared.draws[rows, self.kept]),
            scores=np.ascontiguousarray(prepared.scores[rows, self.kept]), draw=self.kept[0])


def plan_test(prepared, bootstrap, *, has_chains, estimator, rng, damped=False):
    """The :class:`TestPlan` of ``bootstrap`` on the draws ("auto": "wild" for chains,
    "thinned" for chains with the damped statistic, which the wild bootstrap does not
    have; "iid" for one sample of independent draws). ``rng`` draws the Nyström test's
    offsets of thinned chains (nothing otherwise)."""
    n_chain, n_draw, _ = prepared.draws.shape
    if bootstrap == "auto":
        bootstrap = ("thinned" if damped else "wild") if has_chains else "iid"
    tau = np.array([
        integrated_autocorrelation_time(
            np.concatenate([prepared.draws[ch], prepared.scores[ch]], axis=1)).max()
        for ch in range(n_chain)
    ])
    lag = n_offsets = 1
    n_used, common_tau, kept = n_draw, np.nan, None
    if bootstrap == "thinned":
        # One lag for all chains, so that the blocks form one array: from the largest tau
        # over the coordinates of the chains' mean autocorrelation (each chain's own
        # largest tau is noisier, and its maximum over many coordinates biased upwards), of
        # the draws and scores, of the same alternated in sign and of the draws' folded
        # ranks: antithetic chains (HMC, NUTS) have tau 1 in the draws while their
        # dependence lasts (tau 3 alternated for AR(1) with rho -0.5) and their
        # second-order terms stay positively correlated (HMC on t5 x t5: folded tau 3.1).
        common_tau = memory_time(prepared.draws, prepared.scores)
        lag = int(thinning_lag(common_tau))
        n_offsets = thinned_offsets(common_tau, lag)
        n_used = max(n_draw // lag, 1)
        if estimator == "nystrom":
            # The Nystrom pass draws its own signs, so the offsets cannot share them: one
            # thinned subsequence per chain, from a random offset (less power, same level).
            kept = thin_chains(rng, n_chain, n_draw, lag)
    flip = {"wild": flip_probability(tau), "iid": np.full(n_chain, 0.5),
            "thinned": np.full(n_chain, 0.5),
            "multinomial": np.full(n_chain, np.nan)}[bootstrap]
    # The p-value is marked unreliable when a wild bootstrap's sign chain is expected to
    # flip fewer than MIN_EXPECTED_FLIPS times (pooled: in any chain, whose part of the
    # pooled statistic is then badly simulated), or when the thinned test has fewer than
    # MIN_THINNED_DRAWS blocks in a chain (pooled: in all, or MIN_POOLED_BLOCKS in a chain).
    expected_flips = n_used * flip
    if bootstrap == "wild":
        reliable = expected_flips >= MIN_EXPECTED_FLIPS
    elif bootstrap == "thinned":
        reliable = np.full(n_chain, n_used >= MIN_THINNED_DRAWS)
    else:
        reliable = np.ones(n_chain, dtype=bool)
    reliable_pooled = (n_used >= MIN_POOLED_BLOCKS and n_chain * n_used >= MIN_THINNED_DRAWS
                       if bootstrap == "thinned" else bool(reliable.all()))
    return TestPlan(bootstrap=bootstrap, tau=tau, common_tau=common_tau, lag=lag,
                    n_offsets=n_offsets, n_used=n_used, flip=flip,
                    expected_flips=expected_flips, reliable=reliable,
                    reliable_pooled=bool(reliable_pooled), kept=kept)


@dataclass(kw_only=True)
class TestForms:
    """The test's statistics: column 0 the statistic N KSD^2_V, columns 1.. the replicates.

    Attributes
    ----------
    chain : ndarray (chain, 1 + B)
        Each chain's statistic and bootstrap replicates.
    pooled : ndarray (1 + B,) or None
        All chains together (None unless pooled).
    damped_chain, damped_pooled : ndarray or None
        The same for the damped Stein kernel, replicate b with the signs of plain
        replicate b (None unless damped).
    attrs : dict
        The estimator's attrs.
    """

    chain: np.ndarray
    pooled: np.ndarray = None
    damped_chain: np.ndarray = None
    damped_pooled: np.ndarray = None
    attrs: dict = dataclasses.field(default_factory=dict)

    def pvalues(self, damped=False):
        """(p-value of each chain, pooled p-value or NaN) of the plain or damped statistic."""
        chain, pooled = ((self.damped_chain, self.damped_pooled) if damped
                         else (self.chain, self.pooled))
        pooled_p = np.nan if pooled is None else bootstrap_pvalue(pooled[1:], pooled[0])
        return bootstrap_pvalue(chain[:, 1:], chain[:, 0]), pooled_p


def weight_passes(n_rows, n_bootstrap):
    """Bootstrap columns of each pass over the weights W (n_rows, 1 + B) of the exact test:
    [B] while W takes at most ``_WEIGHT_PASS_BYTES``; else passes of that size, the first
    of which also holds the statistic's all-ones column. A function of the sizes alone,
    so the same seed gives the same replicates on every machine."""
    per_pass = max(_MIN_PASS_COLUMNS, int(_WEIGHT_PASS_BYTES // (8 * max(n_rows, 1))))
    if n_bootstrap + 1 <= per_pass:
        return [int(n_bootstrap)]
    passes = [per_pass - 1]
    while sum(passes) < n_bootstrap:
        passes.append(min(per_pass, n_bootstrap - sum(passes)))
    return passes


def bootstrap_memory(n_chain, n_used, d, n_bootstrap, *, pooled, damped, estimator,
                     n_landmarks=None, n_draw=None):
    """Bytes the test's bootstrap holds at its peak (an estimate, within a few tens of %).

    Exact: one pass's weights (and their damped copy), the sign chains while drawn, the
    pass's shares of the forms (``engine.forms.forms_memory``), and the statistics and
    replicates of every chain, (chain + 1, 1 + B) per statistic, held twice while the
    passes are joined. Nystrom: the replicates, the features times the weights of the
    pooled draws, of one chain and of one block ((m, B) each, m landmarks), and a block's
    weights while drawn (at most 2048 draws of one chain).
    """
    results = 16.0 * (n_chain + 1) * (1 + n_bootstrap) * (2 if damped else 1)
    if estimator == "nystrom":
        n_draw = n_used if n_draw is None else n_draw
        m = default_n_landmarks(n_chain * n_draw) if n_landmarks is None else n_landmarks
        block = min(_SIGN_ROWS, n_draw)
        return results + 24.0 * m * n_bootstrap + (8.0 + _SIGN_BYTES) * block * n_bootstrap
    columns = 1 + max(weight_passes(n_chain * n_used, n_bootstrap))
    weights = 8.0 * n_chain * n_used * columns * (2 if damped else 1)
    signs = _SIGN_BYTES * min(_SIGN_ROWS, n_used) * columns
    return results + weights + signs + forms_memory(n_chain, n_used, d, columns, pooled)


def _check_bootstrap_memory(caller, n_chain, n_used, d, n_bootstrap, **options):
    """Refuse (``MemoryError``) a bootstrap that would not fit in the memory available."""
    need = bootstrap_memory(n_chain, n_used, d, n_bootstrap, **options)
    fewer = ("a larger alpha (fewer replicates: the default is the smallest B with 1 / (1 + "
             "B) <= alpha / (4 n_tests)) or a smaller n_bootstrap=" if caller == "diagnose"
             else "a smaller n_bootstrap=")
    other = ("" if options["estimator"] == "nystrom" else ", estimator='nystrom'")
    check_memory(need, f"{caller}: the KSD test's bootstrap ({n_bootstrap} replicates of "
                 f"{n_chain} chain(s) x {n_used} draws)",
                 f"Pass {fewer}{other}, or fewer draws (thin the chains).")


def _thinned_forms(prepared, pre, kernel, plan, rng, n_bootstrap, pooled, backend,
                   window=None, bar=None, statistic=True):
    """Quadratic forms of the thinned test: mean over the first ``n_offsets`` offsets o of
    each block of ``lag`` draws of the forms of the draws o, o + lag, o + 2 lag, ...
    (``n_used`` of each chain; the earliest n_draw - n_used * lag draws are left out),
    with one set of independent signs shared by all offsets (the draws of one block of
    ``lag`` consecutive draws share a sign; see ``stats.bootstrap.thinned_offsets`` for
    why the last offsets of a block are not read).

    ``window``: (m, grad log m) at the draws (``stats.damping.damping_window``); then the
    forms of the damped Stein kernel too, with the same signs (weights times m, scores
    plus grad log m). ``bar``: advanced by every pass. ``statistic``: W's first column is
    all ones (else only the ``n_bootstrap`` bootstrap columns: a later pass). Returns
    ((per_chain, pooled), damped or None).
    """
    n_chain, n_draw, _ = prepared.draws.shape
    lag, n_block = plan.lag, plan.n_used
    weights = bootstrap_weights("iid", rng, n_chain, n_block, n_bootstrap,
                                np.full(n_chain, 0.5), statistic=statistic)
    first = n_draw - n_block * lag
    sums = [[0.0, 0.0], [0.0, 0.0]]
    for offset in range(plan.n_offsets):
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
    results = [(per / plan.n_offsets, (all_ / plan.n_offsets if pooled else None))
               for per, all_ in sums]
    return results[0], (results[1] if window is not None else None)


def _join_passes(parts, pooled):
    """((per_chain, pooled), damped or None) of the passes over W's columns, side by side
    (one pass: as it is)."""
    if len(parts) == 1:
        return parts[0]

    def join(forms):
        return (np.concatenate([f[0] for f in forms], axis=1),
                np.concatenate([f[1] for f in forms]) if pooled else None)

    damped = None if parts[0][1] is None else join([part[1] for part in parts])
    return join([part[0] for part in parts]), damped


def test_forms(prepared, pre, kernel, plan, *, n_bootstrap, rng, pooled, damped=False,
               estimator="exact", n_landmarks=None, backend=None, progress=None,
               caller="ksd_test"):
    """The statistics and bootstrap replicates of the test planned by :func:`plan_test`.

    ``prepared``: the draws the test reads (``plan.select(...)``). One tiled pass for all
    B + 1 weight vectors (the statistic is the all-ones vector), or one per pass over W's
    columns when W would take more than 1 GiB (:func:`weight_passes`): O(N^2 (d + B))
    time, O(N min(B, 2^27 / N)) memory for the weights; K_p is never stored. A bootstrap
    that would not fit in the memory available is refused before it starts
    (``MemoryError`` naming ``caller``, the size and what to change). Returns
    :class:`TestForms`, divided by the draws per chain (pooled: all draws) the statistic
    reads.
    """
    n_chain, n_draw, d = prepared.draws.shape
    n_used = plan.n_used
    _check_bootstrap_memory(caller, n_chain, n_used, d, n_bootstrap, pooled=pooled,
                            damped=damped and estimator == "exact", estimator=estimator,
                            n_landmarks=n_landmarks, n_draw=n_draw)
    damped_forms = None
    if estimator == "nystrom":
        (per_chain, pooled_forms), attrs = nystrom_forms(
            prepared, pre, kernel, n_landmarks, rng, plan.bootstrap, n_bootstrap, plan.flip,
            backend)
    else:
        thinned = plan.bootstrap == "thinned" or (plan.bootstrap == "iid" and damped)
        columns = weight_passes(n_chain * n_used, n_bootstrap)
        # One bar over every pass of the forms: (damped: two) passes per offset and per
        # pass over W's columns.
        n_passes = plan.n_offsets * (2 if damped else 1) if thinned else 1
        pairs = n_passes * len(columns) * forms_pairs(n_chain, n_used, pooled)
        bar = make_progress(progress if backend is None else False, pairs,
                            pairs * (8 * d + 20 + 2 * (1 + n_bootstrap) / len(columns))
                            / CONSERVATIVE_FLOPS, desc="ksd_test (bootstrap pass)")
        window = damping_window(prepared.draws) if thinned and damped else None
        parts = []
        try:
            for k, n_columns in enumerate(columns):
                if thinned:
                    # (independent signs are the thinned test with lag 1)
                    parts.append(_thinned_forms(prepared, pre, kernel, plan, rng, n_columns,
                                                pooled, backend, window, bar,
                                                statistic=k == 0))
                else:
                    weights = bootstrap_weights(plan.bootstrap, rng, n_chain, n_used,
                                                n_columns, plan.flip, statistic=k == 0)
                    parts.append((quadratic_forms(prepared.draws, prepared.scores, pre, kernel,
                                                  weights, pooled, backend=backend, bar=bar),
                                  None))
                    del weights
        finally:
            if bar is not None:
                bar.close()
        (per_chain, pooled_forms), damped_forms = _join_passes(parts, pooled)
        attrs = {"estimator": "exact"}
    n_total = n_chain * n_used
    forms = TestForms(chain=per_chain / n_used,
                      pooled=pooled_forms / n_total if pooled else None, attrs=attrs)
    if damped_forms is not None:
        forms.damped_chain = damped_forms[0] / n_used
        forms.damped_pooled = damped_forms[1] / n_total if pooled else None
    return forms


def check_family_memory(tested, plan, n_bootstrap, exact, n_landmarks):
    """Refuse up front (``MemoryError``) KSD tests that would not fit in memory: one test's
    bootstrap (:func:`bootstrap_memory`) while the replicates of up to three
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
