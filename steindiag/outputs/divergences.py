"""Divergences in the result of ``diagnose``: where they sit, and advice from what the run did.

``divergence_vars`` labels what the input layer read (the counts, the chains' mean
acceptance) and what the evidence measured (the divergent draws' shift per parameter);
``divergence_attrs`` records the model's parameterisation as read from its graph;
``divergence_line`` is the report's "where" line, and ``divergence_advice`` its "next"
line when divergences decided the verdict, chosen from the reason code, the recorded
acceptance and the parameterisation (codes, never the report's words).
"""

import numpy as np

from steindiag._words import chains, listing
from steindiag.stats import verdict as rules

__all__ = ["HIGH_ACCEPTANCE", "divergence_vars", "divergence_attrs", "divergence_line",
           "divergence_advice"]

# A mean acceptance statistic at least this high: target_accept is already high (NUTS
# adapts its step size until the mean is about target_accept; benchmarks/results/
# divergences.md: target_accept 0.95 and 0.99 gave means of 0.93-0.99), so raising it
# further buys little and the divergences call for another parameterisation.
HIGH_ACCEPTANCE = 0.9


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
    """'  where: divergences (12, chains 0 and 2) sit where tau_log__ is low (z = -4.1)',
    or None without divergences."""
    if "divergences" not in result or int(result["divergences"].sum()) == 0:
        return None
    counts = result["divergences"].values
    which = chains(result["chain"].values[counts > 0].tolist())
    head = f"  where: divergences ({int(counts.sum())}, {which})"
    if "divergence_shift" not in result:
        return head + ": the sampler did not record which draws diverged"
    picked, significant = _named(result)
    shift, names = result["divergence_shift"].values, result["parameter"].values
    if not picked.size:
        return head + ": no parameter varies over the draws"
    parts = [f"{names[k]} is {'low' if shift[k] < 0 else 'high'} (z = {shift[k]:.2g})"
             for k in picked]
    if significant:
        return f"{head} sit where {listing(parts)}"
    return (f"{head} sit nowhere in particular (largest shift: {names[picked[0]]}, z = "
            f"{shift[picked[0]]:.2g})")


def divergence_advice(result):
    """The "next" line when the pooled reason's code is about divergences, or None."""
    code = result["reason_code_pooled"].item() if "reason_code_pooled" in result else ""
    if code == "few_divergences":
        return ("use the draws, and report the divergent transitions with them: they are "
                "few, sit nowhere in particular, and no test found a difference.")
    if code != "divergences":
        return None
    attrs = result.attrs
    state = attrs.get("parameterisation", "")
    acceptance = (float(np.nanmean(result["acceptance_rate"].values))
                  if "acceptance_rate" in result else np.nan)
    high = bool(acceptance >= HIGH_ACCEPTANCE)
    picked, significant = _named(result)
    where = (f" ({listing(result['parameter'].values[picked])})"
             if significant and picked.size else "")
    if state == "centred":
        lead = (f"target_accept is already high (mean acceptance {acceptance:.2f}) and the "
                if high else "the ")
        return (f"{lead}model has a centred hierarchy: {attrs['centred_variables']}. Write "
                "it non-centred (x = location + scale * z, z ~ Normal(0, 1)), then diagnose "
                "again.")
    unseen = ("the model has no centred hierarchy steindiag can see"
              if state == "non-centred" else "")
    if high:
        lead = f"target_accept is already high (mean acceptance {acceptance:.2f})"
        return (f"{lead}{' and ' + unseen if unseen else ''}: reparameterise where the "
                f"divergences sit{where}, or rerun with other seeds to see whether they "
                "recur; then diagnose again.")
    raise_it = ("raise target_accept" + (f" (mean acceptance now {acceptance:.2f})"
                                         if np.isfinite(acceptance) else ""))
    if unseen:
        return f"{unseen}: {raise_it} until the divergences are gone, then diagnose again."
    return (f"{raise_it} or reparameterise (e.g. non-centred) where the divergences "
            f"sit{where} until they are gone, then diagnose again.")
