"""The result of ``diagnose``: a labelled Dataset whose repr is a report.

``diagnosis_dataset`` labels the verdicts and their evidence; :class:`Diagnosis` prints
``outputs.report.report`` (verdicts, evidence, what to do next); a saved result reopened
with ``Diagnosis.from_dataset`` prints the same report.
"""

from html import escape

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag.outputs.divergences import divergence_attrs, divergence_vars
from steindiag.outputs.ksd import kernel_attrs
from steindiag.outputs.ksd_test import test_attrs
from steindiag.outputs.report import report
from steindiag.stats import verdict as rules

__all__ = ["Diagnosis", "diagnosis_dataset", "diagnosis_attrs"]


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
        _check_verdicts_follow(dataset)
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


def _check_verdicts_follow(dataset):
    """Refuse a saved result whose verdicts do not follow from their reason codes (an
    edited verdict would print "FITS" above "why: the KSD test rejects")."""
    pairs = []
    if "reason_code_pooled" in dataset:
        pairs.append(("pooled", dataset["verdict_pooled"].item(),
                      dataset["reason_code_pooled"].item(), 0))
    if "reason_code" in dataset:
        pairs += [(f"chain {ch}", v, c, 1) for ch, v, c in zip(
            dataset["chain"].values, dataset["verdict"].values, dataset["reason_code"].values)]
    for who, verdict, code, side in pairs:
        expected = rules.VERDICT_OF.get(str(code), (None, None))[side]
        if expected is not None and str(verdict) != expected:
            raise ValueError(
                f"Diagnosis.from_dataset: the {who} verdict {str(verdict)!r} does not follow "
                f"from its reason code {str(code)!r}, which gives {expected!r}: the dataset "
                "was edited after diagnose wrote it; run diagnose again.")


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


def diagnosis_attrs(*, alpha, n_tests, level, evidence, d, gathered, kernel, pre,
                    n_bootstrap, prepared, ensemble, notes):
    """The attrs of a :class:`Diagnosis`: the decision's, the first KSD test's (as
    ``ksd_test`` records them; when no test ran, the kernel and the preconditioner
    ``pre``), the input's, and the report's notes (``notes``, by name; empty ones left
    out)."""
    tests, search = gathered.tests, gathered.search
    first = kernel_attrs(prepared, pre, kernel) if tests is None else test_attrs(
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
