"""Numbers that cannot be trusted are refused up front, with the argument named (issue 29,
point 9).

Source of truth: float64's range. Each input below made the kernel's arithmetic leave it
(inf, NaN, a raw OverflowError) or gave an error that named no argument; each must now be
refused before any kernel sum, by a ValueError naming what to change.
"""

import numpy as np
import pytest
import xarray as xr

import steindiag

RNG = np.random.default_rng(29)
X = RNG.standard_normal((4, 50, 2))          # exact N(0, I) draws; grad log p = -x


def test_tiny_lambda_is_refused():
    # Lambda = 1e-300 I: tr(Lambda^-1) = 2e300 and t = u^T Lambda^-1 u overflow (was: NaN).
    for lam in (np.full(2, 1e-300), np.array(1e-300), 1e-300 * np.eye(2)):
        with pytest.raises(ValueError, match=r"preconditioner \(Lambda array\): tr"):
            steindiag.ksd(X, score=-X, preconditioner=lam)


def test_lambda_too_small_for_the_draws_is_refused():
    # Lambda = I and draws spanning about 1e130: t = |x - y|^2 about 1e260, beyond 1e250.
    wide = X * 1e130
    with pytest.raises(ValueError, match="preconditioner='identity': the draws span"):
        steindiag.ksd(wide, score=-X, preconditioner="identity")


@pytest.mark.parametrize("c", [1e-300, 1e200])
def test_extreme_c_is_refused(c):
    # c^2 or c^(2 (beta - 2)) outside float64 (was: inf, or OverflowError (34, ...)).
    with pytest.raises(ValueError, match="c must be between .* got c="):
        steindiag.ksd(X, score=-X, c=c)


def test_c_inside_the_range_still_works():
    # Truth: a moderate change of c moves KSD but keeps it finite and positive.
    res = steindiag.ksd(X, score=-X, c=1e-3)
    assert np.isfinite(res["ksd_pooled"]) and res["ksd_pooled"] > 0


def test_draws_and_scores_at_1e200_are_refused():
    # |score| x spread = 1e400 overflows (was: KSD NaN, floor inf, RuntimeWarnings only).
    big = X * 1e200
    with pytest.raises(ValueError, match="score: .*reaches .*Rescale the parameters"):
        steindiag.ksd(big, score=-big)
    with pytest.raises(ValueError, match="score: "):
        steindiag.diagnose(big, score=-big, rng=0)


def test_a_valid_target_at_any_scale_is_not_refused():
    # Issue 35: N(0, 1e-300) draws with their exact score (1e-150 x and -1e150 x) were
    # refused ("about 1e151 overflows": the check floored the spread at 1). Truth: KSD
    # with the default preconditioner is invariant under a change of units, x -> a x,
    # s -> s / a (the preconditioner divides x by its spread and multiplies s by it), so
    # the KSD is that of the unit-scale draws, to rounding.
    tiny = 1e-150 * X
    got = steindiag.ksd(tiny, score=-tiny * 1e300)["ksd_pooled"].item()
    np.testing.assert_allclose(got, steindiag.ksd(X, score=-X)["ksd_pooled"].item(),
                               rtol=1e-10)
    # Without the rescaling (Lambda = I), the kernel would multiply scores of 1e150: the
    # product it guards, about 1e300, is refused, naming the parameter and what to change.
    with pytest.raises(ValueError, match=r"score: .*Stein kernel's coordinates for 'x\[.\]'"
                                         r".*preconditioner='standardize'"):
        steindiag.ksd(tiny, score=-tiny * 1e300, preconditioner="identity")


def test_coords_that_select_no_draw_are_refused():
    posterior = xr.Dataset({"mu": (("chain", "draw"), X[..., 0])})
    # was: "cannot reshape array of size 0 into shape (4,0,newaxis)"
    with pytest.raises(ValueError, match=r"coords=\{'draw': slice\(200, 300, None\)\} "
                                         "selects no draw"):
        steindiag.ksd(posterior, score=lambda v: -v, coords={"draw": slice(200, 300)})


@pytest.mark.parametrize("posterior", [xr.Dataset(coords={"chain": [0], "draw": [0, 1]}),
                                       xr.Dataset()])
def test_posterior_without_variables_is_refused(posterior):
    # was: "need at least one array to concatenate"
    with pytest.raises(ValueError, match="data has no variables"):
        steindiag.ksd(posterior, score=lambda v: -v)
    tree = xr.DataTree.from_dict({"posterior": posterior, "other": xr.Dataset({"a": 1.0})})
    with pytest.raises(ValueError, match="group 'posterior' has no variables"):
        steindiag.ksd(tree, score=lambda v: -v)
