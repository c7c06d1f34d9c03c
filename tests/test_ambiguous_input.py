"""Input that other ecosystems produce and that would give a plausible wrong number.

Each case of issue 11 must give a clear error or warning that says what to do, or the
right answer. Sources of truth: the same draws given in the plain (chain, draw, d) layout
(the layouts are reshapes of each other, so the results must be identical), closed-form
scores (N(0, 1): s(x) = -x), and the messages the issue asks for.
"""

import warnings

import numpy as np
import pytest
import xarray as xr

import steindiag
from trace_reading import prepare_trace


def _normal_draws(rng, n_chain, n_draw, d):
    x = rng.standard_normal((n_chain, n_draw, d))
    return x, -x


# -- case 3: 2-D arrays and sample_dims --------------------------------------------------


def test_two_d_array_with_fewer_rows_than_columns_is_refused():
    x = np.random.default_rng(0).standard_normal((4, 1000))   # (chain, draw) of a 1-D target
    with pytest.raises(ValueError, match=r"4 draws of 1000 parameters.*sample_dims=\('chain', "
                                         r"'draw'\).*sample_dims=\('draw',\)"):
        steindiag.ksd(x, score=-x)


@pytest.mark.parametrize("sample_dims, layout", [
    (("chain", "draw"), lambda x: x[:, :, 0]),
    (("draw", "chain"), lambda x: x[:, :, 0].T),
])
def test_two_d_array_of_one_parameter(sample_dims, layout):
    x, s = _normal_draws(np.random.default_rng(1), 4, 300, 1)
    plain = steindiag.ksd(x, score=s)
    res = steindiag.ksd(layout(x), score=layout(s), sample_dims=sample_dims)
    # Truth: the same draws as a (chain, draw, 1) array.
    np.testing.assert_array_equal(res["ksd"].values, plain["ksd"].values)
    np.testing.assert_array_equal(res["ksd_pooled"].values, plain["ksd_pooled"].values)
    assert res.attrs["n_chain"] == 4 and res.attrs["n_parameter"] == 1
    # A callable receives (n, 1) batches.
    called = steindiag.ksd(layout(x), score=lambda z: -z, sample_dims=sample_dims)
    np.testing.assert_array_equal(called["ksd"].values, plain["ksd"].values)


def test_explicit_one_chain_readings():
    x, s = _normal_draws(np.random.default_rng(2), 1, 50, 80)
    plain = steindiag.ksd(x, score=s)
    # (draw, d) with more parameters than draws: allowed when said explicitly.
    wide = steindiag.ksd(x[0], score=s[0], sample_dims=("draw",))
    np.testing.assert_array_equal(wide["ksd"].values, plain["ksd"].values)
    y, t = _normal_draws(np.random.default_rng(3), 1, 200, 1)
    one = steindiag.ksd(y[0, :, 0], score=t[0, :, 0], sample_dims="draw")
    # Truth: the same draws as a (1, draw, 1) array.
    np.testing.assert_array_equal(one["ksd"].values, steindiag.ksd(y, score=t)["ksd"].values)


def test_bad_sample_dims_for_arrays():
    x, s = _normal_draws(np.random.default_rng(4), 2, 30, 2)
    with pytest.raises(ValueError, match="for an array, sample_dims names its leading axes"):
        steindiag.ksd(x, score=s, sample_dims=("walker", "step"))
    with pytest.raises(ValueError, match=r"must have shape \(draw, d\) or \(draw,\)"):
        steindiag.ksd(x, score=s, sample_dims=("draw",))


# -- case 4: emcee's (draw, walker, d) --------------------------------------------------


def test_more_chains_than_draws_warns_and_draw_chain_layout_is_exact():
    x, s = _normal_draws(np.random.default_rng(5), 8, 100, 2)
    emcee_layout_x, emcee_layout_s = np.swapaxes(x, 0, 1), np.swapaxes(s, 0, 1)   # (100, 8, 2)
    with pytest.warns(UserWarning, match=r"100 chains of 8 draws.*sample_dims=\('draw', "
                                         r"'chain'\)"):
        steindiag.ksd(emcee_layout_x, score=emcee_layout_s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = steindiag.ksd(emcee_layout_x, score=emcee_layout_s, sample_dims=("draw", "chain"))
        confirmed = steindiag.ksd(emcee_layout_x, score=emcee_layout_s,
                                  sample_dims=("chain", "draw"))
    # Truth: the same draws in (chain, draw, d) order.
    np.testing.assert_array_equal(res["ksd"].values, steindiag.ksd(x, score=s)["ksd"].values)
    assert confirmed.attrs["n_chain"] == 100


def test_stein_thin_follows_the_array_layout():
    x, s = _normal_draws(np.random.default_rng(6), 3, 60, 2)
    plain = steindiag.stein_thin(x, score=s, n_selected=10)
    swapped = steindiag.stein_thin(np.swapaxes(x, 0, 1), score=np.swapaxes(s, 0, 1),
                                   n_selected=10, sample_dims=("draw", "chain"))
    # Truth: the same draws selected from the (chain, draw, d) layout.
    np.testing.assert_array_equal(swapped, plain)
    assert plain.shape == (1, 10, 2)
    one = steindiag.stein_thin(x[0, :, 0], score=s[0, :, 0], n_selected=5, sample_dims="draw")
    assert one.shape == (5,) and set(one) <= set(x[0, :, 0])


# -- case 1: deterministic quantities in the draws ----------------------------------------


def test_zero_score_column_with_varying_draws_warns():
    rng = np.random.default_rng(7)
    mu = rng.standard_normal((2, 200))
    draws = np.stack([mu, 2.0 * mu], axis=-1)            # column 1: a deterministic 2 mu
    scores = np.stack([-mu, np.zeros_like(mu)], axis=-1)  # what the flat vector's gradient is
    with pytest.warns(UserWarning, match=r"exactly 0 at every draw for 1 of 2 .*\['x\[1\]'\]"
                                         r".*numpyro.deterministic"):
        steindiag.ksd(draws, score=scores)
    posterior = xr.Dataset({"mu": (("chain", "draw"), mu), "double_mu": (("chain", "draw"),
                                                                           2.0 * mu)})
    with pytest.warns(UserWarning, match=r"\['double_mu'\]"):
        steindiag.ksd(posterior, score=lambda z: np.stack([-z[:, 0], 0.0 * z[:, 1]], axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steindiag.ksd(posterior, score=lambda z: -z[:, :1], var_names=["mu"])   # the fix
        # A zero score where the draws do not vary either is not flagged.
        steindiag.ksd(np.stack([mu, np.ones_like(mu)], axis=-1),
                      score=np.stack([-mu, np.zeros_like(mu)], axis=-1),
                      preconditioner="identity")
        # mmd needs no score (its placeholder is zero): nothing to warn about.
        steindiag.mmd(draws)


# -- case 2: a sampler's trace with a score and no model ---------------------------------


def _library_posterior(library):
    rng = np.random.default_rng(8)
    return xr.Dataset({"mu": (("chain", "draw"), rng.standard_normal((2, 100))),
                       "sigma": (("chain", "draw"), rng.exponential(size=(2, 100)))},
                      attrs={"inference_library": library})


def test_trace_written_by_a_ppl_needs_space():
    posterior = _library_posterior("numpyro")
    with pytest.raises(ValueError, match=r"written by numpyro.*space='unconstrained'.*"
                                         r"space='constrained'"):
        steindiag.ksd(posterior, score=lambda z: -z)
    tree = xr.DataTree.from_dict({"posterior": posterior})
    with pytest.raises(ValueError, match="written by numpyro"):
        steindiag.ksd_path(tree, score=lambda z: -z)
    res = steindiag.ksd(posterior, score=lambda z: -z, space="constrained")
    assert res.attrs["space"] == "constrained"
    # Truth: the same values as a Dataset without the library's mark, taken as given.
    plain = steindiag.ksd(posterior.drop_attrs(), score=lambda z: -z)
    assert plain.attrs["space"] == "as given"
    np.testing.assert_array_equal(res["ksd"].values, plain["ksd"].values)


def test_space_argument_checks():
    x, s = _normal_draws(np.random.default_rng(9), 2, 50, 2)
    assert steindiag.ksd(x, score=s, space="unconstrained").attrs["space"] == "unconstrained"
    with pytest.raises(ValueError, match="space must be None, 'unconstrained' or 'constrained'"):
        steindiag.ksd(x, score=s, space="log")
    # emcee has no transforms: its stored values are the sampler's own coordinates.
    prepared = prepare_trace(_library_posterior("emcee"), score=lambda z: -z)
    assert prepared.attrs["space"] == "as given"


# -- case 5: float32 scores ---------------------------------------------------------------


def test_float32_score_callable_warns_with_the_x64_fix():
    x, _ = _normal_draws(np.random.default_rng(10), 2, 50, 2)
    with pytest.warns(UserWarning, match=r"output of score is float32.*jax_enable_x64"):
        steindiag.ksd(x, score=lambda z: (-z).astype(np.float32))
    posterior = xr.Dataset({"mu": (("chain", "draw"), x[:, :, 0])})
    with pytest.warns(UserWarning, match="score is float32"):
        steindiag.ksd(posterior, score=-x[:, :, :1].astype(np.float32))


# -- case 6: a function of one draw given a batch ------------------------------------------


def test_per_draw_function_on_a_batch_suggests_batched_false():
    x, s = _normal_draws(np.random.default_rng(11), 2, 30, 3)

    def one_draw(z):
        if z.ndim != 1:
            raise TypeError("expected a vector")
        return -z

    with pytest.raises(ValueError, match=r"batched=True passes a batch.*pass batched=False"):
        steindiag.ksd(x, score=one_draw)
    res = steindiag.ksd(x, score=one_draw, batched=False)
    # Truth: the same scores as an array.
    np.testing.assert_array_equal(res["ksd"].values, steindiag.ksd(x, score=s)["ksd"].values)
