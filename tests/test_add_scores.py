"""PyMC scores computed once: ``compile_mode=``, ``add_scores`` and the per-draw path.

Sources of truth (each assertion names its own):
- PyMC's own ``model.compile_dlogp(jacobian=True)`` evaluated draw by draw (the loop the
  batched graph replaces);
- the same public call with ``model=``: a trace holding stored scores must give the
  same numbers without the model, and without compiling anything.
"""

import json
import warnings

import numpy as np
import pytest

pm = pytest.importorskip("pymc")

import steindiag  # noqa: E402
from steindiag.inputs import _pymc, _pymc_graphs, _pymc_values  # noqa: E402

# PyMC's own functions (pm.sample, the compile_dlogp used as truth) run on the Python
# linker: no C/Numba compilation on a cold machine.
FAST = {"mode": "FAST_COMPILE"}


def _lkj_model():
    """LKJCholeskyCov + MvNormal (the issue's model, small): 6 + 3 unconstrained coordinates."""
    rng = np.random.default_rng(20261125)
    chol_true = np.array([[1.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.2, 0.3, 1.0]])
    y = rng.standard_normal((40, 3)) @ chol_true.T
    with pm.Model(coords={"axis": ["a", "b", "c"]}) as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0))
        mu = pm.Normal("mu", 0.0, 2.0, dims="axis")
        pm.MvNormal("y", mu=mu, chol=chol, observed=y)
    return model


@pytest.fixture(scope="module")
def lkj_model():
    return _lkj_model()


@pytest.fixture(scope="module")
def lkj_trace(lkj_model):
    """One short real pm.sample run (InferenceData on ArviZ 0.x, DataTree on ArviZ 1.x)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            model=lkj_model, draws=40, tune=40, chains=2, cores=1, random_seed=5,
            progressbar=False, compute_convergence_checks=False, compile_kwargs=FAST,
        )


def _per_draw_scores(model, flat):
    """PyMC's compiled grad log p (Jacobian included), one Python call per draw."""
    dlogp = model.compile_dlogp(jacobian=True, **FAST)
    layout = _pymc.model_layout(model)
    out = np.empty_like(flat)
    for row, x in enumerate(flat):
        point, start = {}, 0
        for var in layout:
            point[var.value_name] = x[start : start + var.size].reshape(var.value_shape)
            start += var.size
        out[row] = dlogp(point)
    return out


# ------------------------------------------------------------------------------------
# compile_mode
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE"])
def test_compile_mode_gives_pymc_scores(lkj_model, lkj_trace, small_pymc_model_and_trace,
                                        mode):
    # Truth: PyMC's own compile_dlogp, draw by draw, at the same unconstrained draws.
    from steindiag.inputs import read_input

    # NUMBA on a small model: compiling the LKJ graph in NUMBA mode takes about a minute
    # on PyMC 5 (the mode is passed through the same way whatever the model).
    model, trace = ((lkj_model, lkj_trace) if mode == "FAST_COMPILE"
                    else small_pymc_model_and_trace)
    prepared = read_input(trace, model, compile_mode=mode).with_scores()
    assert prepared.attrs["pytensor_mode"] == mode
    flat = prepared.draws.reshape(-1, prepared.draws.shape[2])
    expected = _per_draw_scores(model, flat)
    np.testing.assert_allclose(prepared.scores.reshape(flat.shape), expected,
                               rtol=1e-9, atol=1e-9)


def test_compile_mode_mode_object(lkj_model, lkj_trace):
    from pytensor.compile.mode import get_mode

    res = steindiag.ksd(lkj_trace, lkj_model, compile_mode=get_mode("FAST_COMPILE"))
    ref = steindiag.ksd(lkj_trace, lkj_model, compile_mode="FAST_COMPILE")
    # Truth: the mode object is the named mode, so the numbers are the same.
    np.testing.assert_allclose(res["ksd"].values, ref["ksd"].values, rtol=1e-12)


def test_compile_mode_unknown_name(lkj_model, lkj_trace):
    with pytest.raises(ValueError, match="compile_mode must name a PyTensor mode"):
        steindiag.ksd(lkj_trace, lkj_model, compile_mode="FASTEST")


def test_compile_mode_wrong_type(lkj_model, lkj_trace):
    with pytest.raises(TypeError, match="compile_mode must be a PyTensor mode name"):
        steindiag.ksd_test(lkj_trace, lkj_model, compile_mode=3)


def test_compile_mode_without_model():
    x = np.random.default_rng(0).standard_normal((2, 50, 2))
    for function in (steindiag.ksd, steindiag.ksd_path, steindiag.ksd_test,
                     steindiag.stein_weights):
        with pytest.raises(TypeError, match="compile_mode .* needs model="):
            function(x, score=-x, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.mmd(x, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.stein_thin(x, score=-x, n_selected=5, compile_mode="NUMBA")
    with pytest.raises(TypeError, match="compile_mode .* needs model="):
        steindiag.stein_variational(x, score=lambda z: -z, n_steps=1, compile_mode="NUMBA")


def test_every_model_function_takes_compile_mode():
    import inspect

    for name in ("ksd", "ksd_path", "ksd_test", "mmd", "stein_weights", "stein_thin",
                 "stein_variational"):
        function = getattr(steindiag, name)
        assert "compile_mode" in inspect.signature(function).parameters, name
        assert "compile_mode :" in function.__doc__, name


# ------------------------------------------------------------------------------------
# per-draw vs batched
# ------------------------------------------------------------------------------------


def test_per_draw_equals_batched(lkj_model, lkj_trace):
    # Truth: PyMC's compile_dlogp draw by draw; both strategies must agree with it and
    # with each other (same core graph, same layout, Jacobian included).
    from steindiag.inputs import read_input

    pending = read_input(lkj_trace, lkj_model, need_score=False)
    flat = pending.draws.reshape(-1, pending.draws.shape[2])
    layout = _pymc.model_layout(lkj_model)
    batched, used_b = _pymc.model_scores(lkj_model, layout, flat, mode="FAST_COMPILE",
                                         strategy="batched", return_strategy=True)
    per_draw, used_p = _pymc.model_scores(lkj_model, layout, flat, mode="FAST_COMPILE",
                                          strategy="per-draw", chunk_size=7,
                                          return_strategy=True)
    assert (used_b, used_p) == ("batched", "per-draw")
    np.testing.assert_allclose(per_draw, batched, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(per_draw, _per_draw_scores(lkj_model, flat),
                               rtol=1e-10, atol=1e-10)


def test_per_draw_log_density_equals_batched(lkj_model):
    # Truth: PyMC's compile_logp(jacobian=True) at the same draws.
    rng = np.random.default_rng(3)
    layout = _pymc.model_layout(lkj_model)
    flat = 0.3 * rng.standard_normal((20, 9))
    logp = lkj_model.compile_logp(jacobian=True, **FAST)
    expected = [float(logp({layout[0].value_name: x[:6], layout[1].value_name: x[6:]}))
                for x in flat]
    for strategy in ("per-draw", "batched"):
        run = _pymc._ScorePass(lkj_model, layout, flat, 5, "FAST_COMPILE", strategy,
                               False).run()
        np.testing.assert_allclose(run.log_density[:, 0], expected, rtol=1e-10)


def test_per_draw_function_is_the_sampling_function(lkj_model):
    # Truth: PyMC's own logp_dlogp_function (the function pm.sample compiles) at the same
    # flat draws; the core-graph fallback gives the same numbers to rounding.
    layout = _pymc.model_layout(lkj_model)
    flat = 0.3 * np.random.default_rng(7).standard_normal((6, 9))
    value_grad = lkj_model.logp_dlogp_function(ravel_inputs=True, **FAST)
    value_grad.set_extra_values({})
    function = _pymc_graphs.build_per_draw_function(lkj_model, layout, "FAST_COMPILE")
    core = _pymc_graphs._build_per_draw_core(lkj_model, layout, "FAST_COMPILE")
    for x in flat:
        log_p, grad = value_grad(x)
        np.testing.assert_array_equal(function(x)[0], grad)
        assert function(x)[1] == float(log_p)
        np.testing.assert_allclose(core(x)[0], grad, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(core(x)[1], float(log_p), rtol=1e-12)


def test_auto_strategy_compiles_batched_only_where_it_pays(lkj_model, monkeypatch):
    # Truth: the rule itself. The per-draw way is timed first; the batched graph is not
    # compiled while the loop costs less than compiling it (_BATCHED_PAYS_SECONDS);
    # with that bound at 0 both are timed, the faster kept, and the timings remembered
    # (a later call does not time again).
    layout = _pymc.model_layout(lkj_model)
    flat = 0.3 * np.random.default_rng(4).standard_normal((600, 9))
    mode = "FAST_COMPILE"
    key = _pymc.timing_key(layout, mode)
    cache = _pymc_graphs.COMPILED.setdefault(lkj_model, {})
    batched_key = ("batched", _pymc_graphs.layout_key(layout), mode)
    saved = {k: cache.pop(k) for k in (key, batched_key) if k in cache}
    try:
        built = []
        real_build = _pymc.build_score_function
        monkeypatch.setattr(_pymc, "build_score_function",
                            lambda *args: built.append(1) or real_build(*args))
        # The Python linker's loop may take seconds on a loaded machine: the bound is
        # set far above it, the rule is what is tested.
        monkeypatch.setattr(_pymc, "_BATCHED_PAYS_SECONDS", 1e9)
        scores, chosen = _pymc.model_scores(lkj_model, layout, flat, mode=mode,
                                            return_strategy=True)
        assert (chosen, built) == ("per-draw", [])
        cache.pop(key)
        monkeypatch.setattr(_pymc, "_BATCHED_PAYS_SECONDS", 0.0)
        _check_auto_choice(lkj_model, layout, flat, mode, monkeypatch)
        assert built == [1]
    finally:
        # Left in place, the timings would steer the module's later "auto" passes.
        cache.pop(key, None)
        cache.update(saved)


def _check_auto_choice(lkj_model, layout, flat, mode, monkeypatch):
    scores, chosen = _pymc.model_scores(lkj_model, layout, flat, mode=mode,
                                        return_strategy=True)
    assert chosen in ("batched", "per-draw")
    assert set(_pymc_graphs.COMPILED[lkj_model][_pymc.timing_key(layout, mode)]) == {
        "batched", "per-draw"}
    np.testing.assert_allclose(scores, _pymc.model_scores(
        lkj_model, layout, flat, mode=mode, strategy="batched"), rtol=1e-10, atol=1e-10)

    def no_timing(*args, **kwargs):
        raise AssertionError("the remembered timings must not be measured again")

    monkeypatch.setattr(_pymc._ScorePass, "_timed", no_timing)
    _, again = _pymc.model_scores(lkj_model, layout, flat, mode=mode, progress=False,
                                  return_strategy=True)
    assert again == chosen


def _blas_threads():
    from threadpoolctl import threadpool_info

    return max((info["num_threads"] for info in threadpool_info()
                if info["user_api"] == "blas"), default=1)


def test_per_draw_pass_runs_blas_on_one_thread(lkj_model, monkeypatch):
    # Truth: threadpoolctl's reading of the loaded BLAS libraries, taken inside each call
    # of the per-draw function, and after the pass (the limit is lifted again).
    layout = _pymc.model_layout(lkj_model)
    flat = 0.3 * np.random.default_rng(6).standard_normal((5, 9))
    seen, real_function = [], _pymc._ScorePass._function

    def recording(self, kind):
        function = real_function(self, kind)
        if kind != "per-draw":
            return function

        def call(*args):
            seen.append(_blas_threads())
            return function(*args)

        return call

    before = _blas_threads()
    monkeypatch.setattr(_pymc._ScorePass, "_function", recording)
    _pymc.model_scores(lkj_model, layout, flat, mode="FAST_COMPILE", strategy="per-draw",
                       progress=False)
    assert seen == [1] * 5
    assert _blas_threads() == before


def test_score_pass_interrupt_propagates(lkj_model, monkeypatch):
    layout = _pymc.model_layout(lkj_model)
    flat = 0.3 * np.random.default_rng(5).standard_normal((50, 9))
    calls = []
    original = _pymc._ScorePass._advance

    def interrupt(self, stop):
        calls.append(stop)
        if len(calls) == 2:
            raise KeyboardInterrupt
        original(self, stop)

    monkeypatch.setattr(_pymc._ScorePass, "_advance", interrupt)
    with pytest.raises(KeyboardInterrupt):
        _pymc.model_scores(lkj_model, layout, flat, mode="FAST_COMPILE",
                           strategy="batched", chunk_size=10, progress=True)
    assert calls == [10, 20]  # stopped between chunks, after the second


def test_strategy_validation(lkj_model, lkj_trace):
    with pytest.raises(ValueError, match="strategy must be one of"):
        steindiag.add_scores(lkj_trace, lkj_model, strategy="fastest")
    with pytest.raises(TypeError, match="progress must be None, True or False"):
        steindiag.add_scores(lkj_trace, lkj_model, progress="yes")


# ------------------------------------------------------------------------------------
# add_scores: stored scores give the numbers of model=, without the model
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored(lkj_model, lkj_trace):
    # "auto", as every function with model= (on 80 draws: the per-draw function), so that
    # the stored scores are bitwise those a model= call computes: the per-draw function is
    # PyMC's own gradient graph, equal to the batched one to rounding only
    # (test_per_draw_equals_batched), and a bootstrap p-value can flip on a tie at 1e-16.
    return steindiag.add_scores(lkj_trace, lkj_model, compile_mode="FAST_COMPILE")


@pytest.fixture
def no_model_evaluation(monkeypatch):
    """Any evaluation or compilation of a model's score fails the test."""
    def fail(*args, **kwargs):
        raise AssertionError("the model was evaluated although the trace stores its scores")

    for module, name in ((_pymc, "model_scores"), (_pymc, "model_log_density"),
                         (_pymc, "build_score_function"), (_pymc, "build_per_draw_function"),
                         (_pymc_values, "_build_forward_function")):
        monkeypatch.setattr(module, name, fail)


def _group(trace, name):
    return trace[name].to_dataset() if hasattr(trace, "children") else getattr(trace, name)


def test_add_scores_layout_and_provenance(lkj_model, lkj_trace, scored):
    assert type(scored) is type(lkj_trace)
    stats = _group(scored, "sample_stats")
    gradient = stats["gradient"]
    assert gradient.dims == ("chain", "draw", "unconstrained_parameter")
    assert gradient.attrs["space"] == "unconstrained"
    assert gradient.attrs["jacobian"] == "included"
    assert gradient.attrs["pytensor_mode"] == "FAST_COMPILE"
    assert gradient.attrs["score_strategy"] == "per-draw"  # "auto": the loop costs < 10 s
    assert gradient.attrs["steindiag_version"] == steindiag.__version__
    # Truth: nutpie's labels (name, name_i) and steindiag's (mu[a]) of the 6 + 3 values.
    value_name = _pymc.model_layout(lkj_model)[0].value_name
    labels = [str(v) for v in stats["unconstrained_parameter"].values]
    assert labels == [f"{value_name}_{i}" for i in range(6)] + ["mu_0", "mu_1", "mu_2"]
    assert [str(v) for v in stats["parameter_label"].values][6:] == ["mu[a]", "mu[b]",
                                                                      "mu[c]"]
    # Truth: PyMC's compile_dlogp draw by draw at the stored unconstrained draws.
    flat = stats["unconstrained_draw"].values.reshape(-1, 9)
    np.testing.assert_allclose(gradient.values.reshape(-1, 9),
                               _per_draw_scores(lkj_model, flat), rtol=1e-10, atol=1e-10)
    # The other groups are kept as they are.
    np.testing.assert_array_equal(_group(scored, "posterior")["mu"].values,
                                  _group(lkj_trace, "posterior")["mu"].values)
    assert "gradient" not in _group(lkj_trace, "sample_stats").data_vars  # input untouched


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float),
                               rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def with_model(lkj_model, lkj_trace):
    """Each function called with model= on the trace without stored scores."""
    kw = {"compile_mode": "FAST_COMPILE"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "ksd": steindiag.ksd(lkj_trace, lkj_model, **kw),
            "ksd_path": steindiag.ksd_path(lkj_trace, lkj_model, n_points=5, **kw),
            "ksd_test": steindiag.ksd_test(lkj_trace, lkj_model, n_bootstrap=50, rng=1, **kw),
            "mmd": steindiag.mmd(lkj_trace, model=lkj_model, **kw),
            "stein_weights": steindiag.stein_weights(lkj_trace, lkj_model, **kw),
            "stein_thin": steindiag.stein_thin(lkj_trace, lkj_model, n_selected=10,
                                               return_info=True, **kw),
        }


def test_stored_scores_give_model_numbers(scored, with_model, no_model_evaluation):
    # Truth: the same call with model= on the trace without stored scores.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ksd = steindiag.ksd(scored)
        path = steindiag.ksd_path(scored, n_points=5)
        test = steindiag.ksd_test(scored, n_bootstrap=50, rng=1)
        mmd = steindiag.mmd(scored)
        weights = steindiag.stein_weights(scored)
        thin = steindiag.stein_thin(scored, n_selected=10, return_info=True)
    for name in ("ksd", "ksd_pooled", "ksd_iid", "ksd2_u"):
        _close(ksd[name], with_model["ksd"][name])
    _close(path["ksd"], with_model["ksd_path"]["ksd"])
    for name in test.data_vars:
        _close(test[name], with_model["ksd_test"][name])
    _close(mmd, with_model["mmd"])
    _close(weights, with_model["stein_weights"])
    np.testing.assert_array_equal(thin.index, with_model["stein_thin"].index)
    _close(thin.ksd_path, with_model["stein_thin"].ksd_path)
    assert json.loads(ksd.attrs["parameters"]) == json.loads(with_model["ksd"].attrs["parameters"])
    assert ksd.attrs["scores_from"] == "sample_stats['gradient'] (steindiag.add_scores)"


def test_stored_scores_used_with_model(lkj_model, scored, with_model, no_model_evaluation):
    # With model= on a scored trace the stored scores are used (documented), not recomputed.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ksd = steindiag.ksd(scored, lkj_model)
    _close(ksd["ksd"], with_model["ksd"]["ksd"])
    assert ksd.attrs["score_source"] == "stored"


def test_stored_scores_chain_selection(scored, lkj_model, lkj_trace):
    # Truth: selecting a chain of the stored vectors = selecting it with model=.
    res = steindiag.ksd(scored, coords={"chain": [1]})
    ref = steindiag.ksd(lkj_trace, lkj_model, coords={"chain": [1]},
                        compile_mode="FAST_COMPILE")
    _close(res["ksd"], ref["ksd"])


def test_stored_scores_refuse_element_selection(scored):
    with pytest.raises(ValueError, match="coords selects along \\['axis'\\]"):
        steindiag.ksd(scored, coords={"axis": ["a", "b"]})
    with pytest.raises(ValueError, match="var_names=.* stored scores"):
        steindiag.ksd(scored, var_names=["mu"])


def test_add_scores_input_validation(lkj_model, lkj_trace):
    posterior = _group(lkj_trace, "posterior")
    with pytest.raises(TypeError, match="trace must be an arviz.InferenceData"):
        steindiag.add_scores(posterior, lkj_model)
    with pytest.raises(TypeError, match="model is required"):
        steindiag.add_scores(lkj_trace, None)
    with pytest.raises(ValueError, match="group must be one of"):
        steindiag.add_scores(lkj_trace, lkj_model, group="prior")
    with pytest.raises(ValueError, match="compile_mode must name a PyTensor mode"):
        steindiag.add_scores(lkj_trace, lkj_model, compile_mode="FASTEST")
