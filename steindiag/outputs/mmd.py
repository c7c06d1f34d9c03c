"""Labelled result of ``mmd``: MMD^2 as a DataArray, the p-values as its coordinates."""

import numpy as np
import xarray as xr

from steindiag._attrs import netcdf_attrs, provenance
from steindiag.methods.mmd import MIN_BLOCKS

__all__ = ["constant_message", "blocks_message", "mmd_attrs", "mmd_dataarray"]


def constant_message(names):
    """The warning for coordinates left out because they have one value in every draw."""
    return (
        f"mmd: {len(names)} coordinate(s) have one value in every draw (up to round-off), "
        f"{names[:10]}"
        f"{'...' if len(names) > 10 else ''}; they add nothing to MMD and are left out "
        "(attrs['constant_parameters_left_out']). Usually a deterministic of the trace, "
        "such as the unit diagonal of an LKJ correlation matrix; pass model= to compare "
        "the model's free variables, or var_names= to choose the variables.")


def blocks_message(blocks, test_all):
    """The warning for too few blocks per chain for the permutation p-values."""
    needed = f"3 per chain and {2 * MIN_BLOCKS} in all" if test_all else f"{MIN_BLOCKS}"
    return (
        f"mmd: blocks of {blocks.block_length} draws leave only "
        f"{min(blocks.blocks_per_chain)} blocks per chain (fewer than {needed}); the "
        "permutation p-values are "
        + ("coarse or unreliable (pvalue_reliable is False)" if blocks.testable else
           "not computed (NaN): the test needs at least 3 blocks per chain")
        + ". Run longer chains, or pass a smaller block_length if the draws are less "
        "autocorrelated than estimated.")


def mmd_attrs(kernel, pre, parameters, constant, input_attrs, n_permutations, blocks):
    """The attrs of an ``mmd`` result."""
    attrs = {
        "kernel": kernel.label,
        "kernel_formula": (f"{kernel.label} base kernel k(x, y) = {kernel.formula}, "
                           "t = (x-y)^T A (x-y), A = Lambda^-1"),
        "estimator": "unbiased MMD^2 (U-statistic)",
        **kernel.parameters(),
        **pre.attrs(),
        "n_parameter": len(parameters),
        "parameters": parameters,
        "constant_parameters_left_out": constant,
        **provenance(input_attrs),
        "n_permutations": n_permutations,
    }
    if n_permutations:
        attrs.update({
            "permutation": "blocks of consecutive draws permuted whole",
            "block_length": int(blocks.block_length),
            "autocorrelation_time": blocks.tau,
            "pvalue_rule": "(1 + #{permuted >= observed}) / (1 + n_permutations)",
        })
    return attrs


def mmd_dataarray(result, blocks, attrs, *, chain, n_draw, test, n_draw_other=None):
    """The DataArray of :func:`steindiag.mmd` (``n_draw_other``: two samples)."""
    reliable = blocks.reliable
    if n_draw_other is not None:
        attrs.update({"n_draw_data": len(chain) * n_draw, "n_draw_other": n_draw_other})
        coords = {}
        if result.pvalue is not None:
            coords["pvalue"] = ((), result.pvalue, {"long_name": "block-permutation p-value"})
            coords["pvalue_reliable"] = ((), reliable,
                                         {"long_name": "whether the p-value can be trusted"})
        return xr.DataArray(result.mmd2, coords=coords, name="mmd2",
                            attrs=netcdf_attrs({"long_name": "unbiased MMD^2 between data "
                                                             "and other", **attrs}))
    n_chain = len(chain)
    coords = {"chain": ("chain", chain), "chain_other": ("chain_other", chain)}
    if result.pvalue is not None and test == "all":
        coords["pvalue"] = ((), result.pvalue, {"long_name": "p-value of the test that all "
                                                             "chains agree (blocks relabelled "
                                                             "among them)"})
        coords["pvalue_reliable"] = ((), reliable,
                                     {"long_name": "whether the p-value can be trusted"})
        coords["agreement_statistic"] = ((), result.statistic, {
            "long_name": "mean kernel within chains minus between chains (every other "
                         "block)"})
        if result.units_per_chain is not None:
            # The streamed test (many blocks): the blocks used, merged into this many
            # units per chain, are relabelled whole (methods.agreement).
            attrs["agreement_units_per_chain"] = int(result.units_per_chain)
    elif result.pvalue is not None:
        coords["pvalue"] = (("chain", "chain_other"), result.pvalue,
                            {"long_name": "block-permutation p-value between chains"})
        coords["pvalue_reliable"] = (("chain", "chain_other"),
                                     np.full((n_chain, n_chain), reliable),
                                     {"long_name": "whether the p-value can be trusted"})
    attrs.update({"n_chain": n_chain, "n_draw": n_draw})
    return xr.DataArray(result.mmd2, dims=("chain", "chain_other"), coords=coords, name="mmd2",
                        attrs=netcdf_attrs({"long_name": "unbiased MMD^2 between chains",
                                            **attrs}))
