"""plot_diagnosis, plot_control_variates, plot_weights and the arviz-plots template
arguments: what is drawn, not only that a call returns.

Sources of truth: the result objects themselves (the plots must draw their numbers
unchanged, or transformed by the closed forms stated in the docstrings: the control-variate
intervals are (estimate - plain mean) / sd +- z MCSE / sd with z = Phi^-1(0.975) = 1.959964
for ci_prob = 0.95, a tabulated value); the draws of the fixtures.
"""

import importlib.util

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

import steindiag  # noqa: E402
from steindiag.plots import (plot_control_variates, plot_diagnosis, plot_ksd,  # noqa: E402
                             plot_ksd_chains, plot_weights)

HAS_ARVIZ_PLOTS = importlib.util.find_spec("arviz_plots") is not None
needs_arviz_plots = pytest.mark.skipif(not HAS_ARVIZ_PLOTS, reason="needs arviz-plots (ArviZ 1.x)")
Z95 = 1.959964  # Phi^-1(0.975), standard normal tables


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def draws():
    # N(0, I) draws; chain 3 shifted by 1 sd: the chain a rejection must name.
    x = np.random.default_rng(7).standard_normal((4, 500, 2))
    x[3] += 1.0
    return x


@pytest.fixture(scope="module")
def diagnosis(draws):
    return steindiag.diagnose(draws, score=-draws, rng=0)


@pytest.fixture(scope="module")
def cv_result():
    x = np.random.default_rng(3).standard_normal((2, 400, 3))
    return steindiag.control_variates(x, score=-x)


@pytest.fixture(scope="module")
def biased():
    return np.random.default_rng(11).standard_normal((2, 150, 2)) * 1.2 + 0.3


def _gids(ax):
    artists = list(ax.lines) + list(ax.collections) + list(ax.texts)
    return {a.get_gid(): a for a in artists if a.get_gid()}


def _figure(out):
    return out if isinstance(out, matplotlib.figure.Figure) else out.viz["figure"].item()


# ------------------------------------------------------------------------ plot_diagnosis


def test_plot_diagnosis_matplotlib_draws_the_result(diagnosis):
    fig, axes = plt.subplots(1, 3)
    assert plot_diagnosis(diagnosis, ax=axes) is fig
    ax_ksd, ax_p, ax_where = axes
    gids = _gids(ax_ksd)
    for i, chain in enumerate(diagnosis["chain"].values):
        assert gids[f"ksd[{i}]"].get_xdata()[0] == diagnosis["ksd"].values[i]
        assert gids[f"ksd_iid[{i}]"].get_xdata()[0] == diagnosis["ksd_iid"].values[i]
    assert gids["ksd_pooled"].get_xdata()[0] == diagnosis["ksd_pooled"].item()
    labels = [t.get_text() for t in ax_ksd.get_yticklabels()]
    assert labels == [f"chain {c}: {v}" for c, v in zip(diagnosis["chain"].values,
                                                        diagnosis["verdict"].values)] + [
        f"pooled: {diagnosis['verdict_pooled'].item()}"]
    # The shifted chain is rejected and drawn in the rejection's colour.
    assert diagnosis["verdict"].values[3] == "does not fit"
    assert matplotlib.colors.to_hex(gids["ksd[3]"].get_color()) == "#d55e00"
    # p-values at their values, the level where the result says.
    p_gids = _gids(ax_p)
    for i in range(diagnosis.sizes["chain"]):
        np.testing.assert_array_equal(p_gids[f"pvalue[{i}]"].get_offsets()[0, 0],
                                      max(diagnosis["pvalue"].values[i], 1e-6))
    assert p_gids["level"].get_xdata()[0] == diagnosis.attrs["test_level"]
    assert ax_p.get_xscale() == "log" and ax_ksd.get_xscale() == "log"
    p_labels = [t.get_text() for t in ax_p.get_yticklabels()]
    assert p_labels[-2:] == ["chains agree (MMD)", "unvisited mass"] or p_labels[-1] == (
        "chains agree (MMD)")
    assert fig._suptitle.get_text().startswith(diagnosis["verdict_pooled"].item().upper())
    # Where the evidence points: the area of each dot is the largest |z| of diagnose's
    # evidence there (chain_shift, score_location_z, score_spread_z), the largest 400.
    z = np.fmax.reduce([np.abs(np.nan_to_num(diagnosis[name].values))
                        for name in ("chain_shift", "score_location_z", "score_spread_z")])
    where = _gids(ax_where)
    np.testing.assert_allclose(where["attribution[3]"].get_sizes(), 400.0 * z[3] / z.max())


def test_plot_diagnosis_hollow_marker_for_unreliable_pvalue(diagnosis):
    unreliable = diagnosis.copy()
    unreliable["pvalue_reliable"] = xr.zeros_like(diagnosis["pvalue_reliable"])
    fig, axes = plt.subplots(1, 3)
    plot_diagnosis(unreliable, ax=axes)
    gids = _gids(axes[1])
    assert gids["pvalue[0]"].get_facecolors().size == 0 or np.all(
        gids["pvalue[0]"].get_facecolors()[:, 3] == 0)
    assert gids["pvalue_pooled"].get_facecolors()[0, 3] == 1


def test_plot_diagnosis_attribution_panel_when_present(diagnosis):
    parameters = ["x[0]", "x[1]"]
    values = np.array([[0.1, 0.2], [0.1, 0.1], [0.2, 0.1], [3.0, 1.0]])
    with_attr = diagnosis.assign(attribution=(("chain", "parameter"), values)).assign_coords(
        parameter=parameters)
    fig = plot_diagnosis(with_attr, ax=plt.subplots(1, 3)[1])
    ax_attr = fig.axes[2]
    gids = _gids(ax_attr)
    # Area proportional to the value, the largest 400 points^2.
    np.testing.assert_allclose(gids["attribution[3]"].get_sizes(), [400.0, 400.0 / 3])
    assert [t.get_text() for t in ax_attr.get_xticklabels()] == parameters
    with pytest.raises(ValueError, match="ax must hold 3 axes"):
        plot_diagnosis(with_attr, ax=plt.subplots(1, 2)[1])
    with pytest.raises(ValueError, match="attribution must have dims"):
        plot_diagnosis(diagnosis.assign(attribution=("chain", np.ones(4))))


def test_plot_diagnosis_bad_input_and_computes_from_draws(draws, diagnosis):
    with pytest.raises(ValueError, match="needs the result of steindiag.diagnose"):
        plot_diagnosis(diagnosis.drop_vars("pvalue"))
    with pytest.raises(ValueError, match="visuals keys"):
        plot_diagnosis(diagnosis, visuals={"floor": False})
    with pytest.raises(ValueError, match="stats keys"):
        plot_diagnosis(diagnosis, stats={"ksd": {}})
    with pytest.raises(ValueError, match="not both"):
        plot_diagnosis(diagnosis, stats={"diagnose": diagnosis})
    # Draws and diagnose's keyword arguments: the same figure as the result's.
    fig, axes = plt.subplots(1, 3)
    plot_diagnosis(draws, stats={"diagnose": {"score": -draws, "rng": 0}}, ax=axes)
    assert [t.get_text() for t in axes[0].get_yticklabels()][3] == "chain 3: does not fit"


@needs_arviz_plots
def test_plot_diagnosis_plot_collection(diagnosis, tmp_path):
    from arviz_base.labels import DimCoordLabeller
    from arviz_plots import PlotCollection

    pc = plot_diagnosis(diagnosis, labeller=DimCoordLabeller())
    assert isinstance(pc, PlotCollection)
    fig = _figure(pc)
    assert len(fig.axes) == 3   # KSD, p-values, where the evidence points
    dots = pc.viz["ksd"]["ksd"]
    for chain in diagnosis["chain"].values:
        offsets = dots.sel(chain=chain).item().get_offsets()
        assert offsets[0, 0] == diagnosis["ksd"].sel(chain=chain).item()
    assert matplotlib.colors.to_hex(
        dots.sel(chain=3).item().get_facecolor()[0]) == "#d55e00"
    ax_ksd = pc.viz["plot"]["ksd"].item()
    assert [t.get_text() for t in ax_ksd.get_yticklabels()][0].startswith("chain: 0")
    level = pc.viz["level"]["pvalue"].item()
    assert level.get_xdata()[0] == diagnosis.attrs["test_level"]
    pc.savefig(tmp_path / "diagnosis.png")
    assert (tmp_path / "diagnosis.png").stat().st_size > 10_000
    # Drawn again into the same PlotCollection: the artists are added to its plots.
    n_before = len(ax_ksd.collections)
    assert plot_diagnosis(diagnosis, plot_collection=pc) is pc
    assert len(ax_ksd.collections) > n_before
    assert plot_diagnosis(diagnosis, backend="none").backend == "none"


@needs_arviz_plots
def test_plot_diagnosis_aes_by_visuals(diagnosis):
    # The user maps colour to chain and asks the KSD dots to use it: chain colours, not
    # the verdict's.
    pc = plot_diagnosis(diagnosis, aes={"color": ["chain"]}, aes_by_visuals={"ksd": ["color"]})
    faces = {matplotlib.colors.to_hex(pc.viz["ksd"]["ksd"].sel(chain=c).item()
                                      .get_facecolor()[0]) for c in range(4)}
    assert len(faces) == 4


# ---------------------------------------------------------------- plot_control_variates


def test_plot_control_variates_intervals(cv_result):
    fig, ax = plt.subplots()
    plot_control_variates(cv_result, ax=ax)
    gids = _gids(ax)
    sd = cv_result["sd"].values
    for k in range(cv_result.sizes["label"]):
        plain = gids[f"plain[{k}]"].get_xdata()
        half = Z95 * cv_result["mcse_mean"].values[k] / sd[k]
        np.testing.assert_allclose(plain, [-half, 0.0, half], rtol=1e-6)
        cv = gids[f"cv[{k}]"].get_xdata()
        centre = (cv_result["mean_cv"].values[k] - cv_result["mean"].values[k]) / sd[k]
        half_cv = Z95 * cv_result["mcse_mean_cv"].values[k] / sd[k]
        np.testing.assert_allclose(cv, [centre - half_cv, centre, centre + half_cv], rtol=1e-6)
        # Side by side: the plain interval above the control-variate one, same row.
        assert gids[f"plain[{k}]"].get_ydata()[0] > gids[f"cv[{k}]"].get_ydata()[0]
        vr = cv_result["variance_reduction"].values[k]
        expected = (f"\u00d7{vr:.3g} less variance" if cv_result["cv_applied"].values[k]
                    else "not applied")
        assert gids[f"reduction[{k}]"].get_text() == expected
    assert [t.get_text() for t in ax.get_yticklabels()] == list(cv_result["label"].values)
    with pytest.raises(ValueError, match="ci_prob"):
        plot_control_variates(cv_result, ci_prob=1.5)
    with pytest.raises(ValueError, match="needs the Dataset"):
        plot_control_variates(cv_result.drop_vars("mcse_mean_cv"))


def test_plot_control_variates_labeller(cv_result):
    from types import SimpleNamespace

    # Any object with ArviZ's labeller interface: make_label_flat(var_name, sel, isel).
    seen = []

    def make_label_flat(var_name, sel, isel):
        seen.append((var_name, tuple(sel.values())))
        return f"{var_name.upper()}_{'_'.join(sel.values())}"

    fig, ax = plt.subplots()
    plot_control_variates(cv_result, ax=ax,
                          labeller=SimpleNamespace(make_label_flat=make_label_flat))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["X_0", "X_1", "X_2"]
    assert seen[0] == ("x", ("0",))


@needs_arviz_plots
def test_plot_control_variates_plot_collection(cv_result):
    pc = plot_control_variates(cv_result)
    ax = _figure(pc).axes[0]
    for k, label in enumerate(cv_result["label"].values):
        line = pc.viz["cv"]["cv"].sel(label=label).item()
        centre = (cv_result["mean_cv"].values[k] - cv_result["mean"].values[k]) / cv_result[
            "sd"].values[k]
        half = Z95 * cv_result["mcse_mean_cv"].values[k] / cv_result["sd"].values[k]
        np.testing.assert_allclose(line.get_xdata(), [centre - half, centre + half], rtol=1e-6)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(cv_result["label"].values)
    assert len(_figure(pc).axes) == 1


# ------------------------------------------------------------------------- plot_weights


def test_plot_weights_weights_and_thinning(biased):
    w = steindiag.stein_weights(biased, score=-biased)
    info = steindiag.stein_thin(biased, score=-biased, n_selected=15, return_info=True)
    fig, axes = plt.subplots(1, 2)
    plot_weights(biased, w, thinning=info, ax=axes)
    flat = biased.reshape(-1, 2)
    n = flat.shape[0]
    weights = w.values.ravel() / w.values.sum()
    keep = weights > 0
    drawn = _gids(axes[0])["weights"]
    np.testing.assert_array_equal(drawn.get_offsets(), flat[keep])
    # Area proportional to the weight: a draw of weight 1 / N has the base size 12.
    np.testing.assert_allclose(drawn.get_sizes(), 12.0 * weights[keep] * n, rtol=1e-12)
    np.testing.assert_array_equal(_gids(axes[0])["draws"].get_offsets(), flat)
    thinned = _gids(axes[1])["thinned"].get_offsets()
    positions = info.chain * biased.shape[1] + info.draw
    np.testing.assert_array_equal(thinned, flat[positions])
    assert axes[0].get_xlabel() == "x[0]" and axes[1].get_ylabel() == "x[1]"
    assert "Kish ESS" in axes[0].get_title() and "15 points" in axes[1].get_title()


def test_plot_weights_trace_pair_and_errors(biased):
    trace = xr.Dataset({"a": (("chain", "draw"), biased[..., 0]),
                        "b": (("chain", "draw", "k"), np.stack([biased[..., 1]] * 2, -1))},
                       coords={"chain": [0, 1], "draw": np.arange(150), "k": ["u", "v"]})
    w = xr.DataArray(np.full((2, 150), 1 / 300), dims=("chain", "draw"),
                     coords={"chain": [0, 1], "draw": np.arange(150)})
    fig, ax = plt.subplots()
    plot_weights(trace, w, pair=("b[v]", "a"), ax=ax)
    offsets = _gids(ax)["weights"].get_offsets()
    np.testing.assert_array_equal(offsets[:, 0], biased[..., 1].ravel())
    np.testing.assert_array_equal(offsets[:, 1], biased[..., 0].ravel())
    np.testing.assert_allclose(_gids(ax)["weights"].get_sizes(), 12.0)
    with pytest.raises(ValueError, match="pair must name two parameters"):
        plot_weights(trace, w, pair=("a", "c"))
    with pytest.raises(TypeError, match="needs weights="):
        plot_weights(trace)
    with pytest.raises(TypeError, match="SteinThinning"):
        plot_weights(trace, thinning=w)


@needs_arviz_plots
def test_plot_weights_plot_collection(biased):
    w = steindiag.stein_weights(biased, score=-biased)
    pc = plot_weights(biased, stats={"stein_weights": {"score": -biased},
                                     "stein_thin": {"score": -biased, "n_selected": 10}})
    fig = _figure(pc)
    assert len(fig.axes) == 2
    weights = w.values.ravel() / w.values.sum()
    drawn = pc.viz["weights"]["weights"].item()
    np.testing.assert_allclose(drawn.get_sizes(), 12.0 * weights[weights > 0] * weights.size,
                               rtol=1e-6)
    assert pc.viz["thinned"]["thinned"].item().get_offsets().shape == (10, 2)


# ------------------------------------------------- the template on plot_ksd / chains


@needs_arviz_plots
def test_plot_ksd_into_users_plot_collection_and_aes(draws):
    from arviz_plots import PlotCollection

    path = steindiag.ksd_path(draws, score=-draws, n_points=10)
    pc = PlotCollection.wrap(path[["ksd"]], cols=[], aes={"color": ["chain"],
                                                          "linestyle": ["chain"]})
    assert plot_ksd(path, plot_collection=pc, visuals={"guide": False}) is pc
    ax = pc.viz["plot"].item()
    styles = {pc.viz["ksd"]["ksd"].sel(chain=c).item().get_linestyle() for c in range(4)}
    assert len(styles) == 4            # the user's linestyle aesthetic applies
    # Drawn a second time (another run overlaid): the lines are added.
    n_lines = len(ax.get_lines())
    plot_ksd(path, plot_collection=pc, visuals={"guide": False})
    assert len(ax.get_lines()) == 2 * n_lines
    # aes_by_visuals: the floors drawn without the chain aesthetics (one colour).
    pc = plot_ksd(path, aes_by_visuals={"ksd_iid": []})
    assert "chain" not in pc.viz["ksd_iid"]["ksd_iid"].dims     # one artist, no chain loop
    assert pc.viz["ksd"]["ksd"].sizes["chain"] == 4


def test_plot_ksd_and_chains_compute_from_draws_and_labeller(draws):
    from types import SimpleNamespace

    path = steindiag.ksd_path(draws, score=-draws, n_points=10)
    fig, ax = plt.subplots()
    plot_ksd(draws, stats={"ksd_path": {"score": -draws, "n_points": 10}}, ax=ax,
             labeller=SimpleNamespace(sel_to_str=lambda sel, isel: f"c{sel['chain']}"))
    line = {l.get_gid(): l for l in ax.get_lines()}["ksd[2]"]
    np.testing.assert_array_equal(line.get_ydata(), path["ksd"].values[2])
    assert line.get_label() == "c2"
    fig, ax = plt.subplots()
    plot_ksd_chains(draws, stats={"ksd": {"score": -draws}}, ax=ax)
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "chain 0"
    with pytest.raises(TypeError, match="draws with stats"):
        plot_ksd_chains(draws)
    with pytest.raises(ValueError, match="aes_by_visuals keys"):
        plot_ksd(path, aes_by_visuals={"floor": []})
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="ax and plot_collection"):
        plot_ksd(path, ax=ax, plot_collection=object())
