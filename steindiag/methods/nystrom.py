"""The ``estimator=`` option of ``ksd``, ``ksd_path`` and ``ksd_test``: checks and the Nyström branch.

Data flow of the Nyström branch: prepared draws and scores (chain, draw, d) and the
resolved preconditioner -> landmarks drawn with the call's rng, projection from K_mm
(``engine.nystrom.choose_landmarks``) -> streamed features -> the same arrays the exact
pass gives (running sums of k_p over pairs, or the test's quadratic forms) -> the public
function's own statistics and labels. See the Background page of the docs, "Nyström KSD".
"""

import numbers

import numpy as np

from steindiag._validate import check_rng
from steindiag.engine.nystrom import (
    choose_landmarks, default_exact_lags, default_n_landmarks, nystrom_quadratic_forms,
)
from steindiag.engine.nystrom_base import base_cumulative_sums, choose_base_landmarks

__all__ = ["ESTIMATORS", "check_estimator", "landmarks_for", "nystrom_sums", "nystrom_forms"]

ESTIMATORS = ("exact", "nystrom")


def check_estimator(estimator, n_landmarks, rng):
    """Validate ``estimator``, ``n_landmarks`` (up to the draws' count) and ``rng``.

    Returns the rng as a ``numpy.random.Generator``.
    """
    if not isinstance(estimator, str) or estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {list(ESTIMATORS)}; got {estimator!r}.")
    if n_landmarks is not None:
        if estimator != "nystrom":
            raise ValueError(
                "n_landmarks is only used with estimator='nystrom'; got n_landmarks="
                f"{n_landmarks!r} with estimator={estimator!r}."
            )
        if isinstance(n_landmarks, bool) or not isinstance(n_landmarks, numbers.Integral):
            raise TypeError(
                f"n_landmarks must be None or a positive integer; got "
                f"{type(n_landmarks).__name__}."
            )
        if n_landmarks < 1:
            raise ValueError(f"n_landmarks must be a positive integer; got {n_landmarks}.")
    return check_rng(rng)


def _n_landmarks(prepared, n_landmarks):
    n_chain, n_draw, _ = prepared.draws.shape
    n_total = n_chain * n_draw
    if n_landmarks is None:
        n_landmarks = default_n_landmarks(n_total)
    elif n_landmarks > n_total:
        raise ValueError(
            f"n_landmarks must be at most the number of draws ({n_total}); got {n_landmarks}."
        )
    return int(n_landmarks)


def landmarks_for(prepared, pre, kernel, n_landmarks, rng):
    """Landmarks of the test's Stein-kernel features (``n_landmarks`` None: the default
    for N), with the number of lags whose within-chain pairs are computed exactly."""
    land = choose_landmarks(prepared.draws, prepared.scores, pre, kernel,
                            _n_landmarks(prepared, n_landmarks), rng)
    land.n_lags = default_exact_lags(prepared.draws)
    return land


def nystrom_sums(prepared, pre, kernel, n_landmarks, rng, path, backend):
    """(per_chain, pooled, diag_chain, diag_pooled) as ``stats.ksd.cumulative_sums``, and attrs.

    ``ksd`` and ``ksd_path`` project onto the base kernel at the landmarks (m d
    functions: ``engine.nystrom_base``); the same rng draws the same landmarks as the
    test's Stein-kernel features.
    """
    land = choose_base_landmarks(prepared.draws, prepared.scores, pre, kernel,
                                 _n_landmarks(prepared, n_landmarks), rng)
    land.n_lags = default_exact_lags(prepared.draws)
    sums = base_cumulative_sums(prepared.draws, prepared.scores, pre, land, rng, path=path,
                                backend=backend)
    return sums, land.attrs()


def nystrom_forms(prepared, pre, kernel, n_landmarks, rng, kind, n_bootstrap, flip, backend):
    """(per_chain (chain, 1 + B), pooled (1 + B,)) as ``engine.forms.quadratic_forms``, and attrs."""
    land = landmarks_for(prepared, pre, kernel, n_landmarks, rng)
    # The test keeps no band of exact neighbouring pairs: with the band on both sides (the
    # statistic and its bootstrap replicates) the wild bootstrap was too liberal on AR(1)
    # chains in d = 50 (17.5 % rejections at level 5 %, 9.5 % without it; the exact test
    # 11 %: benchmarks/results/nystrom.md). Its statistic is the Nystrom one with the exact
    # diagonal only.
    land.n_lags = 0
    forms = nystrom_quadratic_forms(prepared.draws, prepared.scores, pre, land, kind, rng,
                                    n_bootstrap, np.asarray(flip, dtype=np.float64),
                                    backend=backend)
    attrs = land.attrs()
    attrs["exact_lag_rule"] = ("none in the test (L = 0): the band of exact neighbouring "
                               "pairs made the wild bootstrap too liberal in high d")
    return forms, attrs
