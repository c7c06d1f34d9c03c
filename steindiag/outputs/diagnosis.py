"""The result of ``diagnose``: a labelled Dataset whose repr is a report.

``diagnosis_dataset`` labels the verdicts and their evidence; :class:`Diagnosis` prints
:func:`report` (verdicts, evidence, what to do next, chosen by the code of the pooled
reason: ``stats.verdict.REASONS``); a saved result reopened with
``Diagnosis.from_dataset`` prints the same report.
"""

from html import escape

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._words import plural
from steindiag.outputs.divergences import (divergence_advice, divergence_attrs,
                                           divergence_line, divergence_vars)
from steindiag.outputs.ksd_test import test_attrs
from steindiag.stats import verdict as rules

__all__ = ["Diagnosis", "diagnosis_dataset", "diagnosis_attrs", "report", "next_step"]


class Diagnosis(xr.Dataset):
    """The ``xarray.Dataset`` returned by :func:`steindiag.diagnose`.

    ``print(result)`` shows the report (verdicts, evidence, what to do next); its repr
    shows the report above the Dataset.

    Everything else is the Dataset's: select, save (``to_netcdf``, ``to_zarr``) and
    compute as with any Dataset (the report is kept in ``attrs["report"]``). Its attrs are
    stored as netCDF can hold them (lists as JSON strings, bools as 0/1: see
    ``steindiag._attrs``), so every engine writes it; :meth:`from_dataset` (or
    ``Diagnosis(dataset)``) turns a reopened file back into a Diagnosis, which prints the
    same report.

    Parameters
    ----------
    data_vars : xarray.Dataset or mapping, optional
        A saved result, whose variables, coords and attrs are taken; or the data variables,
        as for ``xarray.Dataset``.
    coords : mapping, optional
        Coordinates, as for ``xarray.Dataset`` (none with a Dataset: they come from it).
    attrs : mapping, optional
        Attributes, stored as netCDF can hold them (with a Dataset: instead of its own).
    """

    __slots__ = ()

    def __init__(self, data_vars=None, coords=None, attrs=None):
        if isinstance(data_vars, xr.Dataset):
            # Diagnosis(xr.open_dataset(path)): the Dataset's variables, coords and attrs.
            if coords is not None:
                raise TypeError("Diagnosis(dataset) takes no coords=: they come from the "
                                "dataset.")
            dataset = data_vars
            data_vars = {name: var.variable for name, var in dataset.data_vars.items()}
            coords = {name: var.variable for name, var in dataset.coords.items()}
            attrs = dict(dataset.attrs) if attrs is None else attrs
        super().__init__(data_vars, coords,
                         None if attrs is None else netcdf_attrs(attrs))

    @classmethod
    def from_dataset(cls, dataset):
        """A saved :func:`steindiag.diagnose` result, reopened, as a Diagnosis.

        Parameters
        ----------
        dataset : xarray.Dataset
            What ``xr.open_dataset(path)`` (any engine) or ``xr.open_zarr(path)`` gives
            for a file written by ``diagnose(...).to_netcdf(path)`` or ``.to_zarr(path)``.

        Returns
        -------
        Diagnosis
            The same variables, coords and attrs; ``print`` shows the report of the
            original result.

        Examples
        --------
        >>> import os, tempfile, numpy as np, xarray as xr, steindiag
        >>> x = np.random.default_rng(0).standard_normal((2, 300, 2))
        >>> res = steindiag.diagnose(x, score=-x, rng=1)
        >>> path = os.path.join(tempfile.mkdtemp(), "diagnosis.nc")
        >>> res.to_netcdf(path)
        >>> with xr.open_dataset(path) as saved:
        ...     back = steindiag.Diagnosis.from_dataset(saved)
        ...     same = str(back) == str(res)
        >>> same
        True
        """
        if not isinstance(dataset, xr.Dataset):
            raise TypeError("Diagnosis.from_dataset: dataset must be an xarray.Dataset (as "
                            "xr.open_dataset gives); got "
                            f"{type(dataset).__name__}.")
        missing = [name for name in ("verdict", "verdict_pooled", "reason_pooled")
                   if name not in dataset.data_vars]
        missing += [name for name in ("test_level", "alpha", "n_tests", "thinning_lag")
                    if name not in dataset.attrs]
        if missing:
            raise ValueError("Diagnosis.from_dataset: dataset is not a saved diagnose "
                             f"result: it lacks {', '.join(missing)}.")
        return cls(dataset)

    def _report(self):
        """The report written from the data (so a selection reports what it holds), or None."""
        try:
            return report(self)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None

    def __repr__(self):
        text = self._report()
        if text is None:
            return xr.Dataset.__repr__(self)
        return text + "\n\n" + xr.Dataset.__repr__(self)

    def __str__(self):
        # print(result): the report a person acts on; repr adds the Dataset below it.
        text = self._report()
        return xr.Dataset.__repr__(self) if text is None else text

    def _repr_html_(self):
        text = self._report()
        html = xr.Dataset._repr_html_(self)
        if text is None:
            return html
        return f"<pre>{escape(text)}</pre>" + html


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
    for note in ("ensemble_note", "estimator_note", "mmd_note"):
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


def diagnosis_dataset(*, verdicts, evidence, pooled, per_chain, chain, parameters, gathered,
                      found, attrs):
    """The :class:`Diagnosis` of the verdicts and their evidence.

    ``verdicts``: (verdicts, codes, reasons) of the chains; ``pooled``: (verdict, code,
    reason); ``per_chain``: each chain's ``ksd``, ``ksd_iid``, ``pvalue_unadjusted`` and
    ``effective_draws``; ``gathered``: what ``methods.evidence.gather`` measured (the KSD
    values, the Stein moments, the chains' shifts, the search); ``found``: the sampler's
    divergences (or None); ``attrs``: the result's attrs.
    """
    (chain_verdicts, chain_codes, reasons), (verdict_pooled, code_pooled, reason_pooled) = (
        verdicts, pooled)
    values, search = gathered.values, gathered.search
    data_vars = {
        "verdict": (("chain",), chain_verdicts, {"long_name": "verdict of each chain"}),
        "verdict_pooled": ((), verdict_pooled, {"long_name": "verdict, all chains"}),
        "reason": (("chain",), reasons, {"long_name": "why, each chain"}),
        "reason_pooled": ((), reason_pooled, {"long_name": "why, all chains"}),
        "reason_code": (("chain",), chain_codes,
                        {"long_name": "what decided each chain's verdict (a reason code)"}),
        "reason_code_pooled": ((), code_pooled,
                               {"long_name": "what decided the pooled verdict (a reason "
                                             "code)"}),
        "ksd": (("chain",), per_chain["ksd"], {"long_name": "KSD of each chain"}),
        "ksd_pooled": ((), float(values.ksd_pooled), {"long_name": "KSD of all chains pooled"}),
        "ksd_iid": (("chain",), per_chain["ksd_iid"],
                    {"long_name": "i.i.d. floor at the draws, each chain"}),
        "ksd_iid_pooled": ((), float(values.ksd_iid_pooled),
                           {"long_name": "i.i.d. floor at the draws, pooled"}),
        "pvalue": (("chain",), evidence.pvalue, {
            "long_name": "KSD test p-value, each chain, adjusted for the family of the "
                         "chains' tests (max-T)"}),
        "pvalue_unadjusted": (("chain",), per_chain["pvalue_unadjusted"],
                              {"long_name": "KSD test p-value of the chain on its own"}),
        "pvalue_pooled": ((), evidence.pvalue_pooled,
                          {"long_name": "KSD test p-value, pooled"}),
        "pvalue_reliable": (("chain",), evidence.reliable,
                            {"long_name": "whether the KSD p-value can be trusted"}),
        "pvalue_reliable_pooled": ((), evidence.reliable_pooled,
                                   {"long_name": "whether the pooled p-value can be trusted"}),
        "effective_draws": (("chain",), per_chain["effective_draws"],
                            {"long_name": "effective number of draws, draw / tau"}),
        "effective_draws_pooled": ((), evidence.effective_draws_pooled,
                                   {"long_name": "effective number of draws, all chains"}),
        "agreement_pvalue": ((), evidence.agreement_pvalue,
                             {"long_name": "p-value of the MMD test that all chains agree"}),
        "agreement_reliable": ((), evidence.agreement_reliable, {
            "long_name": "whether the p-value of the test of agreement can be trusted"}),
        "agreement_min_pvalue": ((), float(evidence.agreement_min_pvalue), {
            "long_name": "smallest p-value the test of agreement can attain (permutations "
                         "and distinct block arrangements)"}),
        "stuck": (("chain",), evidence.stuck,
                  {"long_name": "the chain barely moves (or never moved)"}),
    }
    data_vars.update(_deciding_vars(gathered, len(chain)))
    data_vars.update(_attribution_vars(gathered, len(chain)))
    data_vars.update(divergence_vars(evidence, found))
    attrs.update(divergence_attrs(found))
    if search is not None:
        data_vars["missing_mass_found"] = ((), evidence.missing_found,
                                           {"long_name": "unvisited mass found"})
        data_vars["missing_mass_pvalue"] = ((), float(search.pvalue),
                                            {"long_name": "p-value of the search"})
        attrs["missing_mass_summary"] = search.summary
        attrs["n_log_density"] = int(search.n_log_density)
    coords = {"chain": ("chain", chain), "parameter": ("parameter", list(parameters))}
    result = Diagnosis(data_vars, coords=coords, attrs=attrs)
    result.attrs["report"] = report(result)
    return result


def _deciding_vars(gathered, n_chain):
    """The statistic behind each test: its name, its value and floor as KSDs, its p-value
    (``methods.evidence.Deciding``); the chains the tests did not read: empty and NaN."""
    decided, active = gathered.deciding, gathered.active
    names = np.full(n_chain, "", dtype=object)
    values = {key: np.full(n_chain, np.nan) for key in ("ksd", "floor", "pvalue")}
    pooled = {"name": "", "ksd": np.nan, "floor": np.nan, "pvalue": np.nan}
    if decided is not None:
        pooled = {"name": decided.name_pooled, "ksd": decided.ksd_pooled,
                  "floor": decided.floor_pooled, "pvalue": decided.pvalue_pooled}
        if n_chain == active.size:
            names[active] = decided.name
            for key in values:
                values[key][active] = getattr(decided, key)
        else:   # an ensemble: its one chain is the pooled test
            names[:] = pooled["name"]
            for key in values:
                values[key][:] = pooled[key]
    what = "the statistic of the KSD test that points most strongly against the target"
    return {
        "statistic": (("chain",), names.astype(str), {"long_name": f"{what}, each chain"}),
        "statistic_ksd": (("chain",), values["ksd"], {
            "long_name": "its value, as a KSD of the draws the test read"}),
        "statistic_floor": (("chain",), values["floor"], {
            "long_name": "the mean of its bootstrap replicates, as a KSD"}),
        "statistic_pvalue": (("chain",), values["pvalue"], {
            "long_name": "its own bootstrap p-value (before the family's adjustment)"}),
        "statistic_pooled": ((), pooled["name"], {"long_name": f"{what}, pooled"}),
        "statistic_ksd_pooled": ((), pooled["ksd"], {"long_name": "its value, as a KSD"}),
        "statistic_floor_pooled": ((), pooled["floor"], {
            "long_name": "the mean of its bootstrap replicates, as a KSD"}),
        "statistic_pvalue_pooled": ((), pooled["pvalue"], {"long_name": "its own p-value"}),
    }


def _attribution_vars(gathered, n_chain):
    """Where the evidence points, per chain and parameter (``stats.stein_moments``): each
    chain's mean against the others' and the score's location and spread moments, each in
    standard errors; an ensemble's one chain gets its walkers' pooled moments."""
    pooled = gathered.pooled_moments
    per_chain = gathered.moments if n_chain == gathered.moments.location.shape[0] else pooled
    shifts = (gathered.shifts if n_chain == gathered.shifts.shape[0]
              else np.full((1, gathered.shifts.shape[1]), np.nan))
    dims = ("chain", "parameter")
    out = {
        "chain_shift": (dims, shifts, {
            "long_name": "the chain's mean minus the other chains', in standard errors"}),
        "score_location_z": (dims, per_chain.location_z, {
            "long_name": "mean score in standard errors (0 for draws of the target; > 0: "
                         "the draws sit too low)"}),
        "score_spread": (dims, per_chain.spread, {
            "long_name": "Stein spread moment -mean((x - mean x) s) (1 for draws of the "
                         "target; < 1: too narrow, > 1: too wide, about 0: barely moves)"}),
        "score_spread_z": (dims, per_chain.spread_z, {
            "long_name": "spread moment minus 1, in standard errors"}),
    }
    if pooled is not None:
        out["score_location_z_pooled"] = (("parameter",), pooled.location_z[0], {
            "long_name": "mean score of the chains tested, in standard errors"})
        out["score_spread_pooled"] = (("parameter",), pooled.spread[0], {
            "long_name": "Stein spread moment of the chains tested"})
        out["score_spread_z_pooled"] = (("parameter",), pooled.spread_z[0], {
            "long_name": "spread moment minus 1 of the chains tested, in standard errors"})
    return out


def diagnosis_attrs(*, alpha, n_tests, level, evidence, d, gathered, kernel, n_bootstrap,
                    prepared, ensemble, notes):
    """The attrs of a :class:`Diagnosis`: the decision's, the first KSD test's (as
    ``ksd_test`` records them), the input's, and the report's notes (``notes``, by name;
    empty ones left out)."""
    tests, search = gathered.tests, gathered.search
    first = {} if tests is None else test_attrs(
        tests.plan, tests.forms[0], tests.tested, tests.preconditioners[0], kernel, n_bootstrap)
    notes = {**notes, "covariance_note": "" if tests is None else tests.note,
             "mmd_note": gathered.agreement.note}
    n_chain, n_draw = prepared.draws.shape[:2]
    if ensemble:
        notes = {"ensemble_note": (
            f"ensemble of {n_chain} walkers x {n_draw} steps read as one chain (walkers "
            f"are not independent chains): one KSD test on every {evidence.thinning_lag}-th "
            "step of every walker; no per-walker tests, no test of agreement among walkers"),
            **notes}
    attrs = {
        "alpha": alpha,
        "n_tests": n_tests,
        "test_level": level,
        "multiple_testing": "Bonferroni: each test at alpha / n_tests",
        "thinning_lag": evidence.thinning_lag,
        "kept_draws": evidence.kept_draws,
        "draws_needed": rules.more_draws_needed(evidence),
        "detectable_shift": rules.detectable_shift(evidence.effective_draws_pooled, d),
        "missing_mass_search": (search.method if search is not None
                                else f"not run: {gathered.not_run}"),
        **netcdf_attrs({key: value for key, value in first.items()
                        if key not in ("space", "score_source", "thinning_lag", "n_draw_tested")
                        and key not in prepared.attrs}),
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }
    attrs["ksd_statistics"] = "" if tests is None else ", ".join(
        pre.name + (" (plain, damped)" if forms.damped_chain is not None else "")
        for pre, forms in zip(tests.preconditioners, tests.forms))
    attrs.update({name: note for name, note in notes.items() if note})
    return attrs
