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
    "too_few_draws": _RUN_LONGER,
    "agreement_undecided": _RUN_LONGER,
    "unvisited_mass": ("the chains missed a mode: start chains from overdispersed points or "
                       "use a sampler that moves between modes (tempering); weights and "
                       "thinning cannot create mass where no draw is."),
    "chains_disagree": "the chains sampled different regions: run longer, from dispersed "
                       "starts.",
}
_NOT_FROM_TARGET = ("the draws are not from the target: check the sampler (step size, bias, "
                    "a bug), the model, and that the draws and the score belong together.")


def next_step(code):
    """The advice of the report for the pooled reason's code."""
    return _NEXT_STEP.get(code, _NOT_FROM_TARGET)


def report(result):
    """The text of ``print(diagnose(...))``: verdicts, evidence, what to do next."""
    lines = [f"steindiag.diagnose: {result['verdict_pooled'].item().upper()}",
             f"  why: {result['reason_pooled'].item()}",
             f"  next: {next_step(_pooled_code(result))}",
             "",
             f"  {'chain':>8} {'verdict':>13} {'KSD':>9} {'floor':>9} {'p':>7} "
             f"{'reliable':>8} {'eff. draws':>10}" + (" divergences" if "divergences"
                                                      in result else "")]
    for k, ch in enumerate(result["chain"].values):
        row = (f"  {str(ch):>8} {result['verdict'].values[k]:>13} "
               f"{result['ksd'].values[k]:9.3g} {result['ksd_iid'].values[k]:9.3g} "
               f"{result['pvalue'].values[k]:7.3g} {str(bool(result['pvalue_reliable'].values[k])):>8} "
               f"{result['effective_draws'].values[k]:10.0f}")
        if "divergences" in result:
            row += f" {int(result['divergences'].values[k]):11d}"
        lines.append(row)
    lines.append(
        f"  {'pooled':>8} {result['verdict_pooled'].item():>13} "
        f"{result['ksd_pooled'].item():9.3g} {result['ksd_iid_pooled'].item():9.3g} "
        f"{result['pvalue_pooled'].item():7.3g} "
        f"{str(bool(result['pvalue_reliable_pooled'].item())):>8} "
        f"{result['effective_draws_pooled'].item():10.0f}")
    lines.append("")
    level = result.attrs["test_level"]
    if result.sizes["chain"] > 1:
        p_agree = float(result["agreement_pvalue"])
        if not np.isfinite(p_agree) or not bool(result["agreement_reliable"]):
            said = "not decided (too few blocks of draws per chain)"
        elif p_agree <= level:
            said = f"no: the MMD test of agreement rejects (p = {p_agree:.2g} <= {level:.2g})"
        else:
            said = f"yes, as far as the MMD test of agreement sees (p = {p_agree:.2g})"
        lines.append(f"  chains agree: {said}")
    lines.append(f"  KSD test on blocks of {result.attrs['thinning_lag']} draws "
                 f"({result.attrs['kept_draws']} per chain; draws "
                 f"{result.attrs['thinning_lag']} apart are nearly independent); statistics: "
                 f"{result.attrs.get('ksd_statistics', '')}")
    if "detectable_shift" in result.attrs:
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


def diagnosis_dataset(*, verdicts, evidence, pooled, per_chain, ksd_pooled, ksd_iid_pooled,
                      chain, found, search, attrs):
    """The :class:`Diagnosis` of the verdicts and their evidence.

    ``verdicts``: (verdicts, codes, reasons) of the chains; ``pooled``: (verdict, code,
    reason); ``per_chain``: each chain's ``ksd``, ``ksd_iid``, ``pvalue_unadjusted`` and
    ``effective_draws``; ``found``: the sampler's divergences (or None); ``search``: the
    missing-mass search's result (or None); ``attrs``: the result's attrs.
    """
    (chain_verdicts, chain_codes, reasons), (verdict_pooled, code_pooled, reason_pooled) = (
        verdicts, pooled)
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
        "ksd_pooled": ((), float(ksd_pooled), {"long_name": "KSD of all chains pooled"}),
        "ksd_iid": (("chain",), per_chain["ksd_iid"],
                    {"long_name": "i.i.d. floor at the draws, each chain"}),
        "ksd_iid_pooled": ((), float(ksd_iid_pooled),
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
        "stuck": (("chain",), evidence.stuck,
                  {"long_name": "every draw of the chain is the same point"}),
    }
    if evidence.divergences is not None:
        data_vars["divergences"] = (("chain",), evidence.divergences,
                                    {"long_name": "divergent transitions",
                                     "source": found.source})
    if search is not None:
        data_vars["missing_mass_found"] = ((), evidence.missing_found,
                                           {"long_name": "unvisited mass found"})
        data_vars["missing_mass_pvalue"] = ((), float(search.pvalue),
                                            {"long_name": "p-value of the search"})
        attrs["missing_mass_summary"] = search.summary
        attrs["n_log_density"] = int(search.n_log_density)
    result = Diagnosis(data_vars, coords={"chain": ("chain", chain)}, attrs=attrs)
    result.attrs["report"] = report(result)
    return result


def diagnosis_attrs(*, alpha, n_tests, level, evidence, d, search, not_run, tests, kernel,
                    n_bootstrap, prepared, ensemble, notes):
    """The attrs of a :class:`Diagnosis`: the decision's, the first KSD test's (as
    ``ksd_test`` records them), the input's, and the report's notes (``notes``, by name;
    empty ones left out)."""
    first = test_attrs(tests.plan, tests.forms[0], tests.tested, tests.preconditioners[0],
                       kernel, n_bootstrap)
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
        "missing_mass_search": search.method if search is not None else f"not run: {not_run}",
        **netcdf_attrs({key: value for key, value in first.items()
                        if key not in ("space", "score_source", "thinning_lag", "n_draw_tested")
                        and key not in prepared.attrs}),
        "parameters": list(prepared.parameter),
        **prepared.attrs,
    }
    attrs["ksd_statistics"] = ", ".join(
        pre.name + (" (plain, damped)" if forms.damped_chain is not None else "")
        for pre, forms in zip(tests.preconditioners, tests.forms))
    attrs.update({name: note for name, note in notes.items() if note})
    return attrs
