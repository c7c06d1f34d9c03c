"""Bad input gives a clear ValueError/TypeError naming the argument (issue 2, 'Bad input')."""

import numpy as np
import pytest

import steindiag


@pytest.fixture
def xs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 10, 3))
    return x, -x


def test_nan_in_draws_names_chain_and_draw(xs):
    x, s = xs
    x = x.copy()
    x[1, 4, 0] = np.nan
    with pytest.raises(ValueError, match=r"data contains NaN .*chain=1, draw=4"):
        steindiag.ksd(x, score=s)


def test_inf_in_scores_names_chain_and_draw(xs):
    x, s = xs
    s = s.copy()
    s[0, 7, 2] = np.inf
    with pytest.raises(ValueError, match=r"score contains inf .*chain=0, draw=7"):
        steindiag.ksd(x, score=s)


def test_callable_returning_nan(xs):
    x, _ = xs
    with pytest.raises(ValueError, match="score contains NaN"):
        steindiag.ksd(x, score=lambda z: np.full_like(z, np.nan))


def test_shape_mismatch(xs):
    x, s = xs
    with pytest.raises(ValueError, match="score must have the same shape as data"):
        steindiag.ksd(x, score=s[:, :5])


@pytest.mark.parametrize("shape, message", [
    ((5,), r"sample_dims=\('draw',\)"),
    ((2, 3, 4, 5), r"data must have shape \(chain, draw, d\)"),
])
def test_wrong_number_of_dimensions(shape, message):
    x = np.ones(shape)
    with pytest.raises(ValueError, match=message):
        steindiag.ksd(x, score=x)


def test_fewer_than_two_draws():
    x = np.ones((3, 1, 2))
    with pytest.raises(ValueError, match="at least 2 draws per chain"):
        steindiag.ksd(x, score=x)


def test_zero_parameters():
    x = np.ones((2, 5, 0))
    with pytest.raises(ValueError, match="d >= 1"):
        steindiag.ksd(x, score=x)


def test_missing_score(xs):
    x, _ = xs
    with pytest.raises(TypeError, match="score is required"):
        steindiag.ksd(x)


@pytest.mark.parametrize("c", [0.0, -1.0, np.inf, np.nan])
def test_bad_c(xs, c):
    x, s = xs
    with pytest.raises(ValueError, match="c must be a finite number > 0"):
        steindiag.ksd(x, score=s, c=c)


@pytest.mark.parametrize("beta", [0.0, -1.0, 0.5, -1.5])
def test_bad_beta(xs, beta):
    x, s = xs
    with pytest.raises(ValueError, match=r"beta must be in the open interval \(-1, 0\)"):
        steindiag.ksd_path(x, score=s, beta=beta)


def test_non_numeric_kernel_argument(xs):
    x, s = xs
    with pytest.raises(TypeError, match="c must be a real number"):
        steindiag.ksd(x, score=s, c="1.0")


def test_unknown_preconditioner_name(xs):
    x, s = xs
    with pytest.raises(ValueError, match="preconditioner must be one of"):
        steindiag.ksd(x, score=s, preconditioner="0.5")


def test_non_spd_preconditioner(xs):
    x, s = xs
    lam = np.diag([1.0, -1.0, 1.0]) + 0.1
    with pytest.raises(ValueError, match="symmetric positive definite"):
        steindiag.ksd(x, score=s, preconditioner=lam)


def test_non_symmetric_preconditioner(xs):
    x, s = xs
    lam = np.eye(3)
    lam[0, 1] = 0.5
    with pytest.raises(ValueError, match="must be symmetric"):
        steindiag.ksd(x, score=s, preconditioner=lam)


@pytest.mark.parametrize("lam", [np.ones(2), np.eye(2), np.ones((3, 3, 3))])
def test_wrongly_shaped_preconditioner(xs, lam):
    x, s = xs
    with pytest.raises(ValueError, match="preconditioner"):
        steindiag.ksd(x, score=s, preconditioner=lam)


def test_non_positive_diagonal_preconditioner(xs):
    x, s = xs
    with pytest.raises(ValueError, match="must be > 0"):
        steindiag.ksd(x, score=s, preconditioner=np.array([1.0, 0.0, 1.0]))


def test_zero_scale_coordinate_under_standardize(xs):
    x, s = xs
    x = x.copy()
    x[..., 1] = 3.0
    with pytest.raises(ValueError, match=r"constant over all draws.*x\[1\]"):
        steindiag.ksd(x, score=s)


def test_callable_wrong_shape(xs):
    x, _ = xs
    with pytest.raises(ValueError, match=r"score returned shape \(3,\)"):
        steindiag.ksd(x, score=lambda z: z.sum(axis=0))


def test_callable_that_raises(xs):
    x, _ = xs

    def broken(z):
        raise RuntimeError("boom")

    with pytest.raises(ValueError, match="score raised RuntimeError .*boom"):
        steindiag.ksd(x, score=broken)


def test_boolean_or_complex_arrays(xs):
    x, s = xs
    with pytest.raises(TypeError, match="data must hold real numbers"):
        steindiag.ksd(x > 0, score=s)
    with pytest.raises(TypeError, match="score must hold real numbers"):
        steindiag.ksd(x, score=s.astype(complex))


def test_bad_method_and_n_points(xs):
    x, s = xs
    with pytest.raises(ValueError, match="method must be one of"):
        steindiag.ksd(x, score=s, method="fast")
    with pytest.raises(ValueError, match="n_points must be None or an integer >= 2"):
        steindiag.ksd_path(x, score=s, n_points=1)
    with pytest.raises(TypeError, match="n_points must be None or an integer"):
        steindiag.ksd_path(x, score=s, n_points=3.5)


def test_model_with_array_data(xs):
    x, s = xs
    with pytest.raises(TypeError, match="model can only be used with a trace"):
        steindiag.ksd(x, object(), score=s)
