"""Divergences in the result of ``diagnose``: where they sit, and advice from what the run did.

``divergence_vars`` labels what the input layer read (the counts, the chains' mean
acceptance) and what the evidence measured (the divergent draws' shift per parameter);
``divergence_attrs`` records the model's parameterisation as read from its graph;
``divergence_line`` is the report's "where" line, and ``divergence_advice`` its "next"
line when divergences decided the verdict, chosen from the reason code, the recorded
acceptance and the parameterisation (codes, never the report's words).
"""

import numpy as np

from steindiag._words import chains, listing, plural
from steindiag.stats import verdict as rules

__all__ = ["HIGH_ACCEPTANCE", "divergence_vars", "divergence_attrs", "divergence_line",
           "divergence_advice"]

# A recorded mean acceptance at least this high: target_accept is already high (NUTS tunes
# its step size to bring the mean near target_accept; benchmarks/results/divergences.md:
# PyMC runs at target_accept 0.8, 0.9, 0.95 and 0.99 recorded medians of 0.66-0.82,
# 0.81-0.90, 0.83-0.94 and 0.97 per model, lower in runs that diverge often), so raising
# it further buys little and the divergences call for another parameterisation.
HIGH_ACCEPTANCE = 0.95


def divergence_vars(evidence, found):
    """Data variables of the divergences: ``divergences`` and ``acceptance_rate`` (chain),
    ``divergence_shift`` (parameter); those not read are left out."""
    out = {}
    if evidence.divergences is None:
        return out
    out["divergences"] = (("chain",), evidence.divergences,
                          {"long_name": "divergent transitions", "source": found.source})
    if evidence.divergence_shift is not None:
        out["divergence_shift"] = (("parameter",), evidence.divergence_shift, {
            "long_name": "the divergent draws' mean minus the other draws', in standard "
                         "errors (NaN without divergences)"})
    if found.acceptance is not None and len(found.acceptance) == len(evidence.divergences):
        out["acceptance_rate"] = (("chain",), found.acceptance, {
            "long_name": "mean acceptance statistic the sampler recorded (about "
                         "target_accept after NUTS's adaptation)"})
    return out


def divergence_attrs(found):
    """``parameterisation`` ("centred", "non-centred", "unknown"), ``centred_variables``
    (in words) and ``parameterisation_unread`` (the free variables whose scale could not
    be read) of a PyMC model's graph, the empty ones left out; none without a model."""
    found_graph = None if found is None else found.parameterisation
    if found_graph is None:
        return {}
    words = "; ".join(f"{name} (its scale depends on {listing(parents)})"
                      for name, parents in found_graph.centred)
    attrs = {"parameterisation": found_graph.state, "centred_variables": words,
             "parameterisation_unread": ", ".join(found_graph.unknown)}
    return {key: value for key, value in attrs.items() if value}


def _named(result):
    """(parameter indices named where the divergent draws sit, whether significant)."""
    if "divergence_shift" not in result:
        return np.array([], dtype=np.int64), False
    return rules.named(result["divergence_shift"].values, top=2)


def divergence_line(result):
    """'  where: 12 divergent transitions (chains 0 and 2) sit where tau_log__ is low
    (z = -4.1)', or None without divergences. z: the divergent draws' mean minus the
    others', in standard errors (``divergence_shift``)."""
    if "divergences" not in result or int(result["divergences"].sum()) == 0:
        return None
    counts = result["divergences"].values
    total = int(counts.sum())
    which = chains(result["chain"].values[counts > 0].tolist())
    verb = "sits" if total == 1 else "sit"
    head = f"  where: {plural(total, 'divergent transition')} ({which})"
    if "divergence_shift" not in result:
        return head + ": the trace does not say at which draws"
    picked, significant = _named(result)
    shift, names = result["divergence_shift"].values, result["parameter"].values
    if not picked.size:
        return head + ": no parameter varies over the draws"
    parts = [f"{names[k]} is {'low' if shift[k] < 0 else 'high'} (z = {shift[k]:.2g})"
             for k in picked]
    if significant:
        return f"{head} {verb} where {listing(parts)}"
    return (f"{head} {verb} nowhere in particular (largest shift of a parameter's mean "
            f"there: {names[picked[0]]}, z = {shift[picked[0]]:.2g})")


def _acceptance(result):
    """The chains' mean acceptance statistic as recorded (NaN when it was not)."""
    if "acceptance_rate" not in result:
        return np.nan
    return float(np.nanmean(result["acceptance_rate"].values))


def divergence_advice(result):
    """The "next" line when the pooled reason's code is about divergences, or None.

    Chosen from what the run did: the mean acceptance the sampler recorded (NUTS tunes
    its step size until it is about target_accept, which the trace does not store: at
    ``HIGH_ACCEPTANCE`` or above, raising target_accept helps little), the model's
    parameterisation (a centred hierarchy is named and non-centring advised; a model
    without one is not told to non-centre) and the parameters named where the
    divergences sit.
    """
    code = result["reason_code_pooled"].item() if "reason_code_pooled" in result else ""
    if code == "few_divergences":
        total = int(result["divergences"].sum())
        return (f"use the draws, and report the {plural(total, 'divergent transition')} "
                "with them: they are few, sit nowhere in particular, and no test found a "
                "difference.")
    if code != "divergences":
        return None
    state = result.attrs.get("parameterisation", "")
    acceptance = _acceptance(result)
    recorded = (f"the recorded mean acceptance is {acceptance:.2f} (NUTS tunes its step size "
                "to bring it near target_accept, which is not read from the trace)")
    high = bool(acceptance >= HIGH_ACCEPTANCE)
    picked, significant = _named(result)
    where = (f" ({listing(result['parameter'].values[picked])})"
             if significant and picked.size else "")
    if state == "centred":
        lead = f"{recorded}, so raising target_accept helps little; the " if high else "the "
        return (f"{lead}model has a centred hierarchy: {result.attrs['centred_variables']}. "
                "Write it non-centred (x = location + scale * z, z ~ Normal(0, 1)), then "
                "diagnose again.")
    if high:
        unseen = ("; the model has no centred hierarchy steindiag can see"
                  if state == "non-centred" else "")
        return (f"{recorded}, so raising target_accept helps little{unseen}: reparameterise "
                f"where the divergences sit{where}, or rerun with other seeds to see whether "
                "they recur; then diagnose again.")
    raise_it = "raise target_accept" + (f" (recorded mean acceptance {acceptance:.2f})"
                                        if np.isfinite(acceptance) else "")
    if state == "non-centred":
        return (f"the model has no centred hierarchy steindiag can see: {raise_it} until "
                "the divergences are gone, then diagnose again.")
    return (f"{raise_it} or reparameterise (e.g. non-centred) where the divergences "
            f"sit{where} until they are gone, then diagnose again.")
