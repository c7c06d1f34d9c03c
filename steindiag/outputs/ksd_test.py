"""Labelled result of ``ksd_test``: statistics, p-values and the bootstrap plan, as a Dataset."""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs
from steindiag._words import chains, ordinal
from steindiag.methods.ksd_test import MIN_EXPECTED_FLIPS
from steindiag.outputs.ksd import kernel_attrs
from steindiag.stats.bootstrap import MIN_THINNED_DRAWS

__all__ = ["FLIP_RULES", "test_attrs", "test_dataset", "unreliable_message"]

FLIP_RULES = {
    "wild": "a = 1 / (1 + 12 tau), tau the chain's integrated autocorrelation time",
    "iid": "a = 1/2 (independent Rademacher signs)",
    "thinned": "a = 1/2 (independent Rademacher signs) on every L-th draw, "
               "L = 1 + floor(5 (tau - 1)) from the largest tau of the chains",
    "multinomial": "none (centred multinomial counts)",
}


def unreliable_message(plan, chain, n_draw):
    """The warning for chains whose p-value cannot be trusted, or "" when there are none."""
    few = plan.unreliable
    if not few.size:
        return ""
    labels = [chain[ch].item() for ch in few[:10]]
    if few.size > 10:
        labels.append(f"{few.size - 10} more")
    one = few.size == 1
    has, their = ("has", "its") if one else ("have", "their")
    verdict = "its p-value is" if one else "their p-values are"
    if plan.bootstrap == "wild":
        return (f"ksd_test: {chains(labels)} {has} autocorrelation times up to "
                f"{plan.tau[few].max():.3g} for {n_draw} draws, so the wild bootstrap's sign "
                f"chain flips fewer than {MIN_EXPECTED_FLIPS:g} times in {'it' if one else 'them'}; {verdict} "
                "unreliable. Run longer chains.")
    if plan.lag <= 1:
        return (f"ksd_test: {chains(labels)} {has} {n_draw} draws, fewer than "
                f"{MIN_THINNED_DRAWS}; {verdict} unreliable. Run longer chains.")
    return (f"ksd_test: {chains(labels)} {has} autocorrelation times up to "
            f"{plan.common_tau:.3g}, so reading every {ordinal(plan.lag)} of {their} "
            f"{n_draw} draws keeps {plan.n_used}, fewer than {MIN_THINNED_DRAWS}; {verdict} "
            "unreliable. Run longer chains.")


def test_attrs(plan, forms, tested, pre, kernel, n_bootstrap):
    """The attrs of a test result (``tested``: the draws the test read)."""
    return {
        "test": "KSD goodness of fit, statistic N KSD^2_V",
        "bootstrap": plan.bootstrap,
        "n_bootstrap": n_bootstrap,
        "flip_probability": plan.flip,
        "flip_probability_rule": FLIP_RULES[plan.bootstrap],
        "pvalue_rule": "(1 + #{bootstrap >= statistic}) / (1 + n_bootstrap)",
        "thinning_lag": plan.lag,
        "thinning_offsets": plan.n_offsets,
        "n_draw_tested": plan.n_used,
        **kernel_attrs(tested, pre, kernel),
        **forms.attrs,
    }


def _damped_vars(forms):
    pvalue, pvalue_pooled = forms.pvalues(damped=True)
    data_vars = {
        "statistic_damped": (("chain",), forms.damped_chain[:, 0], {
            "long_name": "statistic of the damped Stein kernel, each chain"}),
        "pvalue_damped": (("chain",), pvalue,
                          {"long_name": "bootstrap p-value, damped, each chain"}),
        "bootstrap_statistic_damped": (("chain", "bootstrap"), forms.damped_chain[:, 1:],
                                       {"long_name": "bootstrap statistics, damped "
                                                     "(same signs)"}),
    }
    if forms.damped_pooled is not None:
        data_vars["statistic_damped_pooled"] = ((), forms.damped_pooled[0], {
            "long_name": "statistic of the damped Stein kernel, pooled"})
        data_vars["pvalue_damped_pooled"] = ((), pvalue_pooled, {
            "long_name": "bootstrap p-value, damped, pooled"})
        data_vars["bootstrap_statistic_damped_pooled"] = (
            ("bootstrap",), forms.damped_pooled[1:],
            {"long_name": "bootstrap statistics, damped, pooled (same signs)"})
    return data_vars


def test_dataset(plan, forms, chain, n_draw, attrs):
    """The Dataset of :func:`steindiag.ksd_test` from the plan and the forms."""
    pvalue, pvalue_pooled = forms.pvalues()
    data_vars = {
        "statistic": (("chain",), forms.chain[:, 0], {"long_name": "N KSD^2_V of each chain"}),
        "pvalue": (("chain",), pvalue, {"long_name": "bootstrap p-value, each chain"}),
        "bootstrap_statistic": (("chain", "bootstrap"), forms.chain[:, 1:],
                                {"long_name": "bootstrap statistics N^-1 w^T K_p w"}),
        "autocorrelation_time": (("chain",), plan.tau,
                                 {"long_name": "integrated autocorrelation time (largest "
                                               "over draws and scores)"}),
        "flip_probability": (("chain",), plan.flip,
                             {"long_name": "flip probability of the sign chain"}),
        "expected_sign_flips": (("chain",), plan.expected_flips,
                                {"long_name": "expected flips of the sign chain, draw * a"}),
        "effective_draws": (("chain",), n_draw / plan.tau,
                            {"long_name": "effective number of draws, draw / tau"}),
        "pvalue_reliable": (("chain",), plan.reliable,
                            {"long_name": "whether the bootstrap p-value can be trusted"}),
    }
    if forms.damped_chain is not None:
        data_vars.update(_damped_vars(forms))
    if forms.pooled is not None:
        data_vars["statistic_pooled"] = ((), forms.pooled[0],
                                         {"long_name": "N KSD^2_V of all chains pooled"})
        data_vars["pvalue_pooled"] = ((), pvalue_pooled,
                                      {"long_name": "bootstrap p-value, pooled"})
        data_vars["bootstrap_statistic_pooled"] = (("bootstrap",), forms.pooled[1:],
                                                   {"long_name": "bootstrap statistics, pooled"})
        data_vars["effective_draws_pooled"] = ((), float(np.sum(n_draw / plan.tau)),
                                               {"long_name": "effective draws, all chains"})
        data_vars["pvalue_reliable_pooled"] = ((), bool(plan.reliable_pooled),
                                               {"long_name": "whether the pooled p-value "
                                                             "can be trusted"})
    coords = {"chain": xr.Variable(("chain",), chain)}
    return xr.Dataset(data_vars, coords=coords, attrs=netcdf_attrs(attrs))
