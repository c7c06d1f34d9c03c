"""Premise checks of Stein control variates: do the draws and the score belong together?

Control variates lean on the Stein identity E_p[div g + g . s] = 0, with p the density
whose score s is given and the expectation over the draws' distribution. When the draws
do not come from p (a wrong or incomplete score, biased draws), the regression still
fits, and returns the score's answer with a tiny error bar. Two checks, both on
quantities whose mean is zero under the premise, each a z statistic (mean over its MCSE,
ArviZ's ``mcse_mean``, so autocorrelation is accounted for):

- ``stein_columns``: the identity itself on the draws, for the fields g = e_j, y_j e_j
  and y_j^2 e_j (y = x - mean): columns s_j, 1 + y_j s_j and 2 y_j + y_j^2 s_j, three
  per coordinate. They fail, for instance, for a score missing a constant term (its
  mean), with the wrong scale (second moments) or the wrong skewness.
- the shift of each row, mean_cv - mean = -mean(psi), with psi the cross-fitted control
  variate: coefficients fitted on the other folds, so psi has mean zero on every
  held-out fold under the premise; its MCSE is ArviZ's of psi itself.

:func:`premise_check` combines them with a Bonferroni bound on the family-wise error:
every test at level alpha / m, two-sided, m the number of tests, with a Cornish-Fisher
allowance for the skewness of a mean of few draws (means of s_j y_j, close to a chi^2
for a Gaussian, have a long tail in z below a few hundred draws). NumPy in, a
:class:`PremiseCheck` out.
"""

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from steindiag.stats.mcse import ess_mean

__all__ = ["PREMISE_LEVEL", "PremiseCheck", "stein_columns", "z_statistics", "thresholds",
           "premise_check"]

# Family-wise false-alarm rate of the premise checks on draws that do come from p.
PREMISE_LEVEL = 0.001

STEIN_COLUMN_NAMES = ("s", "1 + y s", "2 y + y^2 s")


def stein_columns(draws, scores, parameter):
    """Columns of mean zero under p, three per coordinate, and their labels.

    Parameters
    ----------
    draws, scores : ndarray, shape (N, d)
    parameter : sequence of str, length d

    Returns
    -------
    columns : ndarray, shape (N, 3 d)
        psi_g = div g + g . s for g = e_j (s_j), g = y_j e_j (1 + y_j s_j) and
        g = y_j^2 e_j (2 y_j + y_j^2 s_j), y = x - mean(x), coordinate by coordinate.
    labels : list of str
        ``"s[beta]"``, ``"1 + y s[beta]"``, ``"2 y + y^2 s[beta]"``.
    """
    centred = draws - draws.mean(axis=0)
    columns = np.concatenate([scores, 1.0 + centred * scores,
                              2.0 * centred + centred * centred * scores], axis=1)
    labels = [f"{name}[{label}]" for name in STEIN_COLUMN_NAMES for label in parameter]
    return columns, labels


def z_statistics(values):
    """(z, kappa) of each column of ``values`` (chain, draw, m), each of shape (m,).

    z = mean / MCSE (0 where the column is constant at 0, +-inf where it is constant
    elsewhere, NaN where the MCSE cannot be computed); kappa = skewness / sqrt(ESS), the
    skewness of the mean's sampling distribution for independent draws.
    """
    n_chain, n_draw, m = values.shape
    flat = values.reshape(n_chain * n_draw, m)
    mean = flat.mean(axis=0)
    # At most the number of draws: an ESS above it (antithetic-looking chains) is, for these
    # products of draws and scores over a few dozen draws per chain, mostly noise that
    # shrinks the error bar (measured: 19 of 1,000 runs of 2 x 60 exact draws at d = 22
    # failed a check at family-wise level 0.001 with it, see the benchmark results).
    ess = np.minimum(ess_mean(values), n_chain * n_draw)
    centred = flat - mean
    variance = np.mean(centred ** 2, axis=0)
    se = np.std(flat, axis=0, ddof=1) / np.sqrt(ess)      # ArviZ's mcse_mean
    with np.errstate(divide="ignore", invalid="ignore"):
        z = mean / se
        kappa = np.mean(centred ** 3, axis=0) / variance ** 1.5 / np.sqrt(ess)
    z = np.where((se == 0) & (mean == 0), 0.0, z)
    return z, np.where(np.isfinite(kappa), kappa, 0.0)


def thresholds(z, kappa, critical):
    """|z| above which each test fails: the normal critical value plus a Cornish-Fisher
    allowance for the skewness of a mean, (2 c^2 + 1) / 6 max(0, -sign(z) kappa), where
    kappa = skewness / sqrt(ESS): a mean of left-skewed values has a long right tail in z."""
    return critical + (2.0 * critical ** 2 + 1.0) / 6.0 * np.maximum(0.0, -np.sign(z) * kappa)


@dataclass(kw_only=True)
class PremiseCheck:
    """The premise checks' statistics and verdict.

    ``stein_z`` (3 d,) and ``stein_labels``: the identity on the draws; ``shift_z``
    (rows,): (mean_cv - mean) / MCSE of the cross-fitted control variate, NaN where not
    tested; ``critical``: the normal critical value at the Bonferroni level;
    ``n_tests``; ``worst``: the largest |z| / threshold over the tests (above 1: fails);
    ``failed``: the (label, z, threshold) of every failed test, the worst first;
    ``passed``.
    """

    stein_z: np.ndarray
    stein_labels: list
    shift_z: np.ndarray
    critical: float
    n_tests: int
    worst: float
    failed: list
    passed: bool


def premise_check(draws, scores, parameter, values, adjusted, labels, tested,
                  level=PREMISE_LEVEL):
    """Test that the draws and the score belong together (Bonferroni over every test).

    Parameters
    ----------
    draws, scores : ndarray, shape (chain, draw, d)
    parameter : sequence of str, length d
    values, adjusted : ndarray, shape (chain, draw, rows)
        The rows' values f and cross-fitted adjusted values h = f - psi.
    labels : sequence of str, length rows
    tested : ndarray of bool, shape (rows,)
        The rows whose shift is tested (those where the control variate would be used).
    level : float
        Family-wise error rate.

    Returns
    -------
    PremiseCheck

    Notes
    -----
    With m = 3 d + (rows tested) tests and c = Phi^-1(1 - level / (2 m)), a test fails
    when |z| exceeds c plus the skewness allowance of :func:`thresholds`: under the
    premise, and with z approximately standard normal, the chance that any fails is at
    most ``level`` (Bonferroni). Cost: 3 d + rows ESSs, O((d + rows) N log N).
    """
    n_chain, n_draw, d = draws.shape
    columns, stein_labels = stein_columns(draws.reshape(-1, d), scores.reshape(-1, d),
                                          parameter)
    stein_z, stein_kappa = z_statistics(columns.reshape(n_chain, n_draw, -1))
    shift_z = np.full(len(labels), np.nan)
    shift_kappa = np.zeros(len(labels))
    if tested.any():
        # mean_cv - mean = -mean(psi), psi = f - h the cross-fitted control variate
        z, kappa = z_statistics((values - adjusted)[:, :, tested])
        shift_z[tested], shift_kappa[tested] = -z, -kappa
    n_tests = stein_z.size + int(tested.sum())
    critical = float(ndtri(1.0 - level / (2.0 * n_tests)))
    all_z = np.concatenate([stein_z, shift_z])
    limit = thresholds(all_z, np.concatenate([stein_kappa, shift_kappa]), critical)
    names = stein_labels + [f"shift of {label}" for label in labels]
    with np.errstate(invalid="ignore"):
        ratio = np.abs(all_z) / limit
    ratio = np.where(np.isnan(ratio), 0.0, ratio)
    order = np.argsort(-ratio, kind="stable")
    failed = [(names[k], float(all_z[k]), float(limit[k])) for k in order if ratio[k] > 1.0]
    return PremiseCheck(stein_z=stein_z, stein_labels=stein_labels, shift_z=shift_z,
                        critical=critical, n_tests=n_tests, worst=float(ratio.max()),
                        failed=failed, passed=not failed)
