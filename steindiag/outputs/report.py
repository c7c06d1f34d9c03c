"""The report a :class:`~steindiag.outputs.diagnosis.Diagnosis` prints: its verdicts, the
evidence behind them, and what to do next.

The advice is chosen by the code of the pooled reason (``stats.verdict.REASONS``), told
apart where the code alone would mislead (a lone rejected chain, a missed mode of MCMC
chains). Everything is read from the result's variables, so a selection or a saved and
reopened result reports what it holds.
"""

import numpy as np

from steindiag._words import plural
from steindiag.outputs.divergences import divergence_advice, divergence_line
from steindiag.stats import verdict as rules

__all__ = ["report", "next_step"]


# What to do next, by the code of the pooled reason (``stats.verdict.REASONS``).
_RUN_LONGER = "run longer chains (or a better-tuned sampler) and diagnose again."


_NEXT_STEP = {
    "no_rejection": "use the draws; KSD / floor and the tests found nothing to act on.",
    "divergences": ("reparameterise (e.g. non-centred) or raise target_accept until the "
                    "divergences are gone, then diagnose again."),
    "few_divergences": "use the draws, and report the divergent transitions with them.",
    "too_few_draws": _RUN_LONGER,
    "agreement_undecided": _RUN_LONGER,
    "unvisited_mass": ("the draws missed a mode: for MCMC, start chains from overdispersed "
                       "points or use a sampler that moves between modes (tempering); an "
                       "approximation (ADVI, Laplace) needs a sampler; weights and thinning "
                       "cannot create mass where no draw is."),
    "chains_disagree": "the chains sampled different regions: run longer, from dispersed "
                       "starts.",
    "chain_differs": "the chains sampled different regions: run longer, from dispersed "
                     "starts.",
    "stuck": ("a chain stopped moving (a step size that collapsed, a funnel's neck, a bad "
              "start): rerun it, or leave it out with coords= and diagnose again."),
    "far_off": ("the draws named spread far wider than the target: they are not from it "
                "(prior draws, a run that has not converged, or draws and scores that do not "
                "belong together: check space= and the model)."),
}


_NOT_FROM_TARGET = ("the draws are not from the target: check the sampler (step size, bias, "
                    "a bug), the model, and that the draws and the score belong together.")


_MCMC_UNVISITED = ("the chains missed a mode: start chains from overdispersed points or use "
                   "a sampler that moves between modes (tempering); weights and thinning "
                   "cannot create mass where no draw is.")


_ALL_STUCK = ("every chain stopped moving (a step size that collapsed, a start where the "
              "gradient is zero, NaN or huge): rerun the sampler from other starting points, "
              "and check the model's log density there.")


_LONE_CHAIN = ("only {chain}'s own KSD test rejects (p = {p:.2g}); the pooled test and the "
               "other chains' do not. Either that chain sampled badly (look at its trace, "
               "step size and divergences) or this is one of the false alarms the level "
               "allows (at most alpha = {alpha:g} of healthy runs in all): rerun that chain "
               "with another seed to tell them apart.")


def next_step(code):
    """The advice of the report for the pooled reason's code."""
    return _NEXT_STEP.get(code, _NOT_FROM_TARGET)


def _next(result, level):
    """The advice for this result: by the pooled reason's code, told apart where the code
    alone would mislead (a lone rejected chain; a missed mode of MCMC chains)."""
    code = _pooled_code(result)
    if code == "stuck" and "stuck" in result and result["stuck"].values.all():
        return _ALL_STUCK
    if code in ("divergences", "few_divergences") and "reason_code_pooled" in result:
        return divergence_advice(result)
    if code == "unvisited_mass" and "divergences" in result:
        return _MCMC_UNVISITED
    if code == "chains_rejected":
        p = result["pvalue"].values
        rejected = np.flatnonzero(result["pvalue_reliable"].values & (p <= level))
        if (rejected.size == 1 and result["pvalue_pooled"].item() > level
                and not float(result["agreement_pvalue"]) <= level):
            k = rejected[0]
            return _LONE_CHAIN.format(chain=f"chain {result['chain'].values[k]}", p=p[k],
                                      alpha=result.attrs["alpha"])
    return next_step(code)


def _table(result):
    """The verdicts with the statistic behind each (``statistic*`` variables), or the plain
    KSD for a result saved before they were stored."""
    decided = "statistic" in result
    ksd, floor = (("statistic_ksd", "statistic_floor") if decided else ("ksd", "ksd_iid"))
    divergent = "divergences" in result
    lines = [f"  {'chain':>8} {'verdict':>13} {'statistic':>20} {'KSD':>9} {'floor':>9} "
             f"{'p':>7} {'reliable':>8} {'eff. draws':>10}"
             + (" divergences" if divergent else "")]
    def value(name, k=None):
        """The deciding statistic's value, or the plain KSD of all draws where no test ran."""
        plain = {"statistic_ksd": "ksd", "statistic_floor": "ksd_iid"}.get(name, name)
        if k is None:
            got = result[f"{name}_pooled"].item()
            return got if np.isfinite(got) else result[f"{plain}_pooled"].item()
        got = result[name].values[k]
        return got if np.isfinite(got) else result[plain].values[k]

    rows = [(str(ch), result["verdict"].values[k],
             str(result["statistic"].values[k]) if decided else "plain",
             value(ksd, k), value(floor, k), result["pvalue"].values[k],
             bool(result["pvalue_reliable"].values[k]), result["effective_draws"].values[k],
             int(result["divergences"].values[k]) if divergent else None)
            for k, ch in enumerate(result["chain"].values)]
    rows.append(("pooled", result["verdict_pooled"].item(),
                 str(result["statistic_pooled"].item()) if decided else "plain",
                 value(ksd), value(floor),
                 result["pvalue_pooled"].item(), bool(result["pvalue_reliable_pooled"].item()),
                 result["effective_draws_pooled"].item(), None))
    for label, verdict, name, value, low, p, ok, eff, div in rows:
        lines.append(f"  {label:>8} {verdict:>13} {name or '-':>20} {value:9.3g} {low:9.3g} "
                     f"{p:7.3g} {str(ok):>8} {eff:10.0f}"
                     + (f" {div:11d}" if div is not None else ""))
    return lines


def _moment_phrase(name, location_z, spread, spread_z):
    """'mu too low (mean score z = 5.2)' or 'tau too narrow (variance 0.61 of p's, z = -7)'."""
    if np.isfinite(location_z) and (not np.isfinite(spread_z)
                                    or abs(location_z) >= abs(spread_z)):
        return f"{name} too {'low' if location_z > 0 else 'high'} (mean score z = {location_z:.2g})"
    side = "narrow" if spread < 1 else "wide"
    return f"{name} too {side} (variance {spread:.2g} of the target's, z = {spread_z:.2g})"


def _driven_by(result, chain_index=None):
    """The parameters whose score moments drive a KSD rejection (a chain's, or pooled)."""
    if chain_index is None:
        if "score_location_z_pooled" not in result:
            return ""
        location = result["score_location_z_pooled"].values
        spread = result["score_spread_pooled"].values
        spread_z = result["score_spread_z_pooled"].values
    else:
        if "score_location_z" not in result:
            return ""
        location = result["score_location_z"].values[chain_index]
        spread = result["score_spread"].values[chain_index]
        spread_z = result["score_spread_z"].values[chain_index]
    strength = np.fmax(np.abs(location), np.abs(spread_z))
    picked, significant = rules.named(strength, top=2)
    names = result["parameter"].values
    parts = [_moment_phrase(names[k], location[k], spread[k], spread_z[k]) for k in picked]
    if not parts:
        return ""
    if not significant:
        return ("no parameter's mean or spread stands out (most off: " + parts[0]
                + "); the difference is in the shape or in how parameters move together")
    return ", ".join(parts)


def _where(result, level):
    """At most three lines naming the chains and parameters a rejection comes from."""
    lines = []
    names = result["parameter"].values if "parameter" in result.coords else []
    agreement = float(result["agreement_pvalue"])
    if ("chain_shift" in result and bool(result["agreement_reliable"])
            and np.isfinite(agreement) and agreement <= level):
        shifts = result["chain_shift"].values
        picked, significant = rules.named(shifts, top=shifts.size, alpha=level)
        cells = [np.unravel_index(k, shifts.shape) for k in picked]
        parts, seen = [], []
        for c, _ in cells:
            if c in seen or len(seen) == 2:
                continue
            seen.append(c)
            params = [k for cc, k in cells if cc == c][:2]
            detail = ", ".join(f"{names[k]} (z = {shifts[c, k]:.2g})" for k in params)
            parts.append(f"chain {result['chain'].values[c]} in {detail}")
        if parts:
            lines.append(f"  where: {'differing' if significant else 'differing most'} from "
                         f"the other chains: {'; '.join(parts)}")
    if "score_spread" in result and "reason_code" in result:
        for k, ch in enumerate(result["chain"].values):
            if result["reason_code"].values[k] == "far_off" and len(lines) < 2:
                spread = result["score_spread"].values[k]
                widest = np.argsort(-np.abs(np.nan_to_num(spread)))[:2]
                lines.append(f"  where: chain {ch} is too wide in " + ", ".join(
                    f"{names[j]} (variance {spread[j]:.2g} of the target's)" for j in widest))
    driven = []
    if "reason_code_pooled" in result and result["reason_code_pooled"].item() == "ksd_rejects":
        driven.append(("pooled", _driven_by(result)))
    for k, ch in enumerate(result["chain"].values):
        if "reason_code" in result and result["reason_code"].values[k] == "ksd_rejects":
            driven.append((f"chain {ch}", _driven_by(result, k)))
    driven = [f"{who}: {what}" for who, what in driven if what]
    if driven:
        lines.append(f"  where the KSD tests point: {'; '.join(driven[:3])}"
                     + (f"; and {len(driven) - 3} more" if len(driven) > 3 else ""))
    return lines


def _agreement_line(result, level):
    p_agree = float(result["agreement_pvalue"])
    floor = float(result["agreement_min_pvalue"]) if "agreement_min_pvalue" in result else 0.0
    if floor > level:
        return (f"not decided: with so few blocks of draws the test's smallest attainable "
                f"p-value is {floor:.2g} > {level:.2g}")
    if not np.isfinite(p_agree) or not bool(result["agreement_reliable"]):
        return "not decided (too few blocks of draws per chain for the level)"
    if p_agree <= level:
        return f"no: the MMD test of agreement rejects (p = {p_agree:.2g} <= {level:.2g})"
    return f"yes: the MMD test of agreement does not reject (p = {p_agree:.2g} > {level:.2g})"


def _blocks_line(result):
    lag, kept = int(result.attrs["thinning_lag"]), int(result.attrs["kept_draws"])
    statistics = result.attrs.get("ksd_statistics", "")
    if kept == 0:
        return "  KSD tests: not run (no chain left to test)"
    if lag <= 1:
        return (f"  KSD test on every draw ({kept} per chain, nearly independent); "
                f"statistics: {statistics}")
    return (f"  KSD test on blocks of {lag} draws ({plural(kept, 'block')} per chain; draws "
            f"at least {lag} apart are nearly independent); statistics: {statistics}")


def report(result):
    """The text of ``print(diagnose(...))``: verdicts, evidence, what to do next."""
    level = result.attrs["test_level"]
    lines = [f"steindiag.diagnose: {result['verdict_pooled'].item().upper()}",
             f"  why: {result['reason_pooled'].item()}",
             f"  next: {_next(result, level)}",
             "", *_table(result), ""]
    lines += _where(result, level)
    where_divergent = divergence_line(result)
    if where_divergent:
        lines.append(where_divergent)
    tested = int(result.attrs["kept_draws"]) > 0
    if result.sizes["chain"] > 1 and tested:
        lines.append(f"  chains agree: {_agreement_line(result, level)}")
    lines.append(_blocks_line(result))
    if "detectable_shift" in result.attrs and tested:
        lines.append(f"  power: with {result['effective_draws_pooled'].item():.0f} effective "
                     f"draws, a shift of the mean by about "
                     f"{result.attrs['detectable_shift']:.2g} posterior sd is detected 80 % "
                     "of the time (roughly Gaussian posterior); smaller errors can pass")
    if "missing_mass_found" in result:
        lines.append(f"  unvisited mass ({result.attrs['missing_mass_search']}): "
                     f"{result.attrs['missing_mass_summary']}")
    else:
        lines.append(f"  unvisited mass: search {result.attrs['missing_mass_search']}")
    for note in ("selection_note", "ensemble_note", "estimator_note", "mmd_note"):
        if note in result.attrs:
            lines.append(f"  {result.attrs[note]}")
    lines.append(f"  each test at level {level:.2g} = alpha "
                 f"{result.attrs['alpha']:g} / {result.attrs['n_tests']} tests (Bonferroni); "
                 "KSD / floor is a description, not the verdict.")
    pooled_reason = result["reason_pooled"].item()
    bad = [(str(ch), v, r) for ch, v, r in zip(result["chain"].values, result["verdict"].values,
                                               result["reason"].values)
           if v != rules.FITS and r not in pooled_reason and pooled_reason not in r]
    for ch, v, r in bad[:8]:
        lines.append(f"  chain {ch}: {v}: {r}")
    return "\n".join(lines)


def _pooled_code(result):
    """The code of the pooled reason (a result saved before codes were stored: none)."""
    if "reason_code_pooled" in result:
        return result["reason_code_pooled"].item()
    return "no_rejection" if result["verdict_pooled"].item() == rules.FITS else ""
