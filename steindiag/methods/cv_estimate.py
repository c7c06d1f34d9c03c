"""Control-variate estimates of posterior means and sds, from prepared draws and scores.

The estimators by name (``ESTIMATORS``: first- and second-order polynomial control
variates, ridge-regularised, and Stein-kernel ones), ``"auto"``'s choice among them by
held-out error, constrained rows' own designs (``_transform_terms``), and the estimate
with its fallback to the plain one (:func:`estimate`): where the control variate does
not lower the MCSE, and for every row when the premise checks of ``methods.cv_checks``
(do the draws and the score belong together?) fail. The numerics (designs,
cross-fitted regressions) are ``methods.control_variates``; ``stats.mcse`` gives ArviZ's
MCSE of the plain and adjusted values. NumPy in, a :class:`CVEstimate` out.
"""

import json
from dataclasses import dataclass

import numpy as np

from steindiag.engine.threads import single_threaded_blas
from steindiag.kernels.preconditioner import make_preconditioner
from steindiag.methods.control_variates import (KERNEL_GRID, RIDGE_GRID, fold_labels,
                                                kernel_cross_fit, n_coefficients,
                                                polynomial_design, ridge_cross_fit,
                                                transform_controls)
from steindiag.methods.cv_checks import PREMISE_LEVEL, PremiseCheck, premise_check
from steindiag.stats.mcse import mcse_mean

__all__ = ["METHODS", "CVEstimate", "estimate"]


METHODS = ("auto", "polynomial1", "polynomial2", "regularised", "kernel")


# "auto" tries the kernel method only up to this many draws (its cost is cubic in N).
_AUTO_KERNEL_DRAWS = 1000


# Elementwise transforms of PyMC with a closed-form inverse T (constrained = T(z)) and
# derivative dT/dz written through the constrained value f: (T(z), dT/dz given f).
_TRANSFORMS = {
    "log": (np.exp, lambda f: f),
    "logodds": (lambda z: 1.0 / (1.0 + np.exp(-z)), lambda f: f * (1.0 - f)),
}


def _attr_list(attrs, key):
    value = attrs.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return list(value) if isinstance(value, (list, tuple)) else None


def _transform_terms(owners, flat_values, plain_mean, draws, scores, parameter, attrs,
                     max_coefficients, labels):
    """Designs of their own for the rows that are T(z_k) of one unconstrained coordinate,
    T a log or logodds transform (f' = dT/dz_k in closed form).

    Each such row f gets, next to the polynomial family shared by every row,
    ``transform_controls`` of f with products (3d - 1 columns: f times the first-order
    and diagonal second-order fields, and f y_i e_k) for its mean, and the one column
    (f - m)^2 s_k + 2 (f - m) f' for its centred square; no other row sees them (in a
    design shared by all rows they made the other rows' error bars too small). Rows
    qualify in order while their designs hold at most ``max_coefficients`` columns in
    all (p + 3d - 1 and p + 1 each, p the second-order family's size), which bounds the
    extra factorisations.

    A row qualifies when its trace variable is a free variable whose value variable has
    that transform and as many elements (element i of one is element i of the other),
    and its values equal T(z_k) at every draw (relative 1e-6): the check, not the names,
    decides. Returns a list of (label, target columns, extra columns (N, q)): two per
    row, its mean's (column r of the targets) and its square's (column n_rows + r).
    """
    free = _attr_list(attrs, "free_variables")
    value_names = _attr_list(attrs, "value_variables")
    transforms = _attr_list(attrs, "transforms")
    if not free or not value_names or not transforms or not (
            len(free) == len(value_names) == len(transforms)):
        return []
    owner_of_column = [str(label).split("[", 1)[0] for label in parameter]
    n_rows = flat_values.shape[1]
    d = draws.shape[1]
    p = n_coefficients(d, 2, diagonal=n_coefficients(d, 2) > max_coefficients)
    budget = max_coefficients
    groups = []
    for name, value_name, transform in zip(free, value_names, transforms):
        if transform not in _TRANSFORMS:
            continue
        row_index = [r for r, owner in enumerate(owners) if owner == name]
        column_index = [k for k, owner in enumerate(owner_of_column) if owner == value_name]
        if not row_index or len(row_index) != len(column_index):
            continue
        inverse, derivative = _TRANSFORMS[transform]
        for r, k in zip(row_index, column_index):
            if 2 * p + 3 * d > budget:
                return groups
            f = flat_values[:, [r]]
            with np.errstate(over="ignore", invalid="ignore"):
                mapped = inverse(draws[:, k])
            if not np.allclose(mapped, f[:, 0], rtol=1e-6, atol=1e-300):
                continue
            df = derivative(f)
            centred = f - plain_mean[r]
            mean_block = transform_controls(f, df, draws, scores, [k], products=True)
            square_block = transform_controls(centred ** 2, 2.0 * centred * df, draws,
                                              scores, [k], products=False)
            if not (np.all(np.isfinite(mean_block)) and np.all(np.isfinite(square_block))):
                continue
            budget -= 2 * p + 3 * d
            groups += [(labels[r], [r], mean_block), (labels[r], [n_rows + r], square_block)]
    return groups


def _polynomial(order, regularised):
    def run(values, draws, scores, folds, options):
        d = draws.shape[1]
        n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
        diagonal = False
        if order == 2 and n_coefficients(d, 2) > options["max_coefficients"]:
            if not regularised:
                raise ValueError(
                    f"method='polynomial2' needs d(d+3)/2 = {n_coefficients(d, 2)} "
                    f"coefficients for d = {d}, more than max_coefficients = "
                    f"{options['max_coefficients']}; use method='regularised' (a diagonal "
                    "quadratic then) or raise max_coefficients."
                )
            diagonal = True
        p = n_coefficients(d, order, diagonal)
        if not regularised and p + 1 >= n_train:
            others = "'regularised'" if order == 1 else "'regularised', or 'polynomial1'"
            raise ValueError(
                f"method='polynomial{order}' fits {p} coefficients on {n_train} training "
                f"draws per fold; it needs more draws than coefficients. Use method={others} "
                "(or more draws)."
            )
        # Constrained rows' own designs: the shared columns plus theirs (least squares
        # only where they leave more draws than coefficients).
        groups = [group for group in options.get("transform_groups", [])
                  if regularised or p + group[2].shape[1] + 1 < n_train]
        controls = polynomial_design(draws, scores, order, diagonal=diagonal)
        if regularised:
            penalties = RIDGE_GRID if p + 1 >= n_train else np.concatenate([[0.0], RIDGE_GRID])
        else:
            penalties = (0.0,)
        shared = np.ones(values.shape[1], dtype=bool)
        for _, columns, _ in groups:
            shared[columns] = False
        designs = [(np.flatnonzero(shared), controls)] + [
            (np.asarray(columns), np.concatenate([controls, block], axis=1))
            for _, columns, block in groups]
        adjusted = np.empty_like(values)
        penalty = np.empty(values.shape[1])
        error = np.empty(values.shape[1])
        for columns, design in designs:
            if columns.size:
                own_penalties = penalties
                if regularised and p + design.shape[1] - controls.shape[1] + 1 >= n_train:
                    own_penalties = RIDGE_GRID
                adjusted[:, columns], penalty[columns], error[columns] = ridge_cross_fit(
                    values[:, columns], design, folds, penalties=own_penalties)
        basis = {1: "first-order polynomial", 2: "second-order polynomial"}[order]
        if diagonal:
            basis = "second-order polynomial, diagonal B"
        transform_terms = list(dict.fromkeys(label for label, _, _ in groups))
        if transform_terms:
            basis += "; constrained rows f = T(z_k): + their own columns (transform_terms)"
        info = {"basis": basis, "n_coefficients": p, "transform_terms": transform_terms}
        if regularised:
            info["penalty_rule"] = ("ridge, penalty per quantity by cross-validation over "
                                    "the folds, relative to the training size")
        return adjusted, penalty, error, info
    return run


def _kernel(values, draws, scores, folds, options):
    n, d = draws.shape
    if n > options["max_kernel_draws"]:
        raise ValueError(
            f"method='kernel' holds dense Stein-kernel matrices of the draws (about "
            f"{3 * 8 * n * n / 1e9:.2g} GB for N = {n}); that is more than max_kernel_draws = "
            f"{options['max_kernel_draws']} draws. Thin the draws, raise max_kernel_draws, or "
            "use a polynomial method."
        )
    pre = make_preconditioner("standardize", draws, [str(k) for k in range(d)])
    x, sx = pre.to_kernel_coordinates(draws, scores)
    x -= x.mean(axis=0)
    n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
    semi_exact = d + 1 < n_train // 2
    adjusted, penalty, error = kernel_cross_fit(values, x, sx, folds, pre.a,
                                                semi_exact=semi_exact, penalties=KERNEL_GRID)
    info = {"basis": "Stein kernel (IMQ, c = 1, beta = -1/2, standardized)"
                     + (" + first-order polynomial (semi-exact)" if semi_exact else ""),
            "n_coefficients": n_train + (d + 1 if semi_exact else 1),
            "transform_terms": [],
            "penalty_rule": "kernel ridge, penalty per quantity by cross-validation over the "
                            "folds, relative to the mean of the kernel's diagonal"}
    return adjusted, penalty, error, info


ESTIMATORS = {
    "polynomial1": _polynomial(1, False),
    "polynomial2": _polynomial(2, False),
    "regularised": _polynomial(2, True),
    "kernel": _kernel,
}


def _auto_candidates(n, d, n_train, max_coefficients):
    """The methods "auto" compares: only those that can fit (least squares needs more
    training draws than coefficients; "regularised" always can)."""
    candidates = ["polynomial1"] if n_coefficients(d, 1) + 1 < n_train else []
    if n_coefficients(d, 2) <= max_coefficients and n_coefficients(d, 2) + 1 < n_train:
        candidates.append("polynomial2")
    candidates.append("regularised")
    if n <= _AUTO_KERNEL_DRAWS:
        candidates.append("kernel")
    return candidates


def _held_out_score(error, values):
    """Mean log of held-out error over plain variance, floored at 1e-12: lower is better.

    The floor makes fits exact to rounding tie (the simpler candidate, listed first, wins).
    """
    variance = values.var(axis=0)
    ok = variance > 0
    if not ok.any():
        return 0.0
    return float(np.mean(np.log(np.maximum(error[ok] / variance[ok], 1e-12))))


def _fit(method, targets, draws, scores, folds, options, n, d, n_train, max_coefficients,
         attrs):
    """Run the method (or every candidate of "auto"): (name, adjusted values, info)."""
    if method == "auto":
        candidates = _auto_candidates(n, d, n_train, max_coefficients)
        results = {name: ESTIMATORS[name](targets, draws, scores, folds, options)
                   for name in candidates}
        cv_scores = {name: _held_out_score(result[2], targets)
                     for name, result in results.items()}
        chosen = min(cv_scores, key=cv_scores.get)
        adjusted, penalty, _, info = results[chosen]
        attrs["auto_candidates"] = list(candidates)
        attrs["auto_cv_scores"] = [cv_scores[name] for name in candidates]
    else:
        chosen = method
        adjusted, penalty, _, info = ESTIMATORS[method](targets, draws, scores, folds, options)
    return chosen, adjusted, info


@dataclass(kw_only=True)
class CVEstimate:
    """Plain and control-variate estimates of every row (arrays of shape (rows,)).

    ``mean``, ``sd``, ``mcse_mean``: the plain MCMC estimates (ArviZ's MCSE);
    ``mean_cv``, ``sd_cv``, ``mcse_mean_cv``: with the control variates where they lower
    the MCSE (``cv_applied``) and the premise checks pass, else the plain ones;
    ``variance_reduction``: mcse_mean^2 / mcse_mean_cv^2; ``cv_status``: "applied",
    "no gain", "premise failed" or "diagnosis: does not fit"; ``shift_z``: the fitted
    shift (mean_cv - mean) over the MCSE of the cross-fitted control variate (NaN where
    not tested), ``shift_in_mcse``: the same shift over the plain MCSE; ``check``: the
    :class:`PremiseCheck`; ``attrs``: the method chosen and its settings.
    """

    mean: np.ndarray
    sd: np.ndarray
    mcse_mean: np.ndarray
    mean_cv: np.ndarray
    sd_cv: np.ndarray
    mcse_mean_cv: np.ndarray
    variance_reduction: np.ndarray
    cv_applied: np.ndarray
    cv_status: np.ndarray
    shift_z: np.ndarray
    shift_in_mcse: np.ndarray
    check: PremiseCheck
    attrs: dict


def estimate(values, owners, labels, prepared, *, method, n_folds, max_coefficients,
             max_kernel_draws, trusted=True):
    """:class:`CVEstimate` of the rows ``values`` (chain, draw, rows) from the prepared draws
    and scores. ``trusted=False`` (the draws were diagnosed as not fitting): no row uses
    the control variates (they reduce variance, not bias)."""
    n_chain, n_draw, d = prepared.draws.shape
    n_rows = len(labels)
    n = n_chain * n_draw
    flat_values = values.reshape(n, n_rows)
    plain_mean = flat_values.mean(axis=0)
    # Each quantity f and its centred square (f - mean)^2: the second moment, hence sd.
    targets = np.concatenate([flat_values, (flat_values - plain_mean) ** 2], axis=1)
    draws = prepared.draws.reshape(n, d)
    scores = prepared.scores.reshape(n, d)
    folds = fold_labels(n_chain, n_draw, n_folds).reshape(n)
    n_folds_used = int(np.unique(folds).size)
    n_train = int(np.min([np.sum(folds != k) for k in np.unique(folds)]))
    groups = _transform_terms(owners, flat_values, plain_mean, draws, scores,
                              prepared.canonical, prepared.attrs, max_coefficients, labels)
    options = {"max_coefficients": max_coefficients, "max_kernel_draws": max_kernel_draws,
               "transform_groups": groups}
    attrs = {"method_requested": method}
    with single_threaded_blas():
        chosen, adjusted, info = _fit(method, targets, draws, scores, folds, options, n, d,
                                      n_train, max_coefficients, attrs)
    adjusted = adjusted.reshape(n_chain, n_draw, 2 * n_rows)
    plain = targets.reshape(n_chain, n_draw, 2 * n_rows)
    mcse_plain, mcse_cv = mcse_mean(plain), mcse_mean(adjusted)
    mean_adjusted = adjusted.reshape(n, -1).mean(axis=0)
    helps = np.isfinite(mcse_cv) & (mcse_cv < mcse_plain)
    check = premise_check(prepared.draws, prepared.scores, prepared.parameter, values,
                          adjusted[:, :, :n_rows], labels, helps[:n_rows])
    status = np.where(helps[:n_rows], "applied", "no gain").astype(object)
    if not check.passed:
        status[:] = "premise failed"
    if not trusted:
        status[:] = "diagnosis: does not fit"
    if not (trusted and check.passed):
        helps[:] = False
    first, second = helps[:n_rows], helps[n_rows:]
    mean_cv = np.where(first, mean_adjusted[:n_rows], plain_mean)
    mcse_mean_cv = np.where(first, mcse_cv[:n_rows], mcse_plain[:n_rows])
    second_moment = np.where(second, mean_adjusted[n_rows:],
                             plain[:, :, n_rows:].mean(axis=(0, 1)))
    variance_cv = second_moment - (mean_cv - plain_mean) ** 2
    sd_plain = np.std(flat_values, axis=0, ddof=1)
    sd_cv = np.where(variance_cv > 0, np.sqrt(np.maximum(variance_cv, 0.0)), sd_plain)
    sd_cv = np.where(first | second, sd_cv, sd_plain)
    with np.errstate(divide="ignore", invalid="ignore"):
        reduction = np.where(first, mcse_plain[:n_rows] ** 2 / mcse_mean_cv ** 2, 1.0)
        shift_in_mcse = (mean_adjusted[:n_rows] - plain_mean) / mcse_plain[:n_rows]
    attrs.update({
        "method": chosen,
        **info,
        "n_folds": n_folds_used,
        "fold_rule": ("chain c in fold c mod n_folds" if n_chain >= 2
                      else "contiguous blocks of draws"),
        "fallback_rule": ("plain estimate where the cross-fitted MCSE is not lower, and "
                          "for every row when a premise check fails"),
        "n_fallback": int(n_rows - first.sum()),
        **_check_attrs(check),
    })
    return CVEstimate(mean=plain_mean, sd=sd_plain, mcse_mean=mcse_plain[:n_rows],
                      mean_cv=mean_cv, sd_cv=sd_cv, mcse_mean_cv=mcse_mean_cv,
                      variance_reduction=reduction, cv_applied=first, cv_status=status,
                      shift_z=check.shift_z, shift_in_mcse=shift_in_mcse, check=check,
                      attrs=attrs)


def _check_attrs(check):
    worst = int(np.nanargmax(np.abs(check.stein_z))) if np.any(~np.isnan(check.stein_z)) \
        else None
    return {
        "premise_check": "passed" if check.passed else "failed",
        "premise_rule": (f"Bonferroni over {check.n_tests} two-sided z tests (the Stein "
                         "identity on the draws, 3 per coordinate, and each applied row's "
                         f"shift), family-wise level {PREMISE_LEVEL}: |z| > "
                         f"{check.critical:.3g} plus a skewness allowance fails"),
        "premise_failed": [f"{label} (z = {z:.3g}, threshold {limit:.3g})"
                           for label, z, limit in check.failed[:20]],
        "premise_level": PREMISE_LEVEL,
        "premise_n_tests": check.n_tests,
        "premise_worst_ratio": check.worst,
        "stein_check_max_abs_z": (float(abs(check.stein_z[worst])) if worst is not None
                                  else float("nan")),
        "stein_check_worst": check.stein_labels[worst] if worst is not None else "",
    }
