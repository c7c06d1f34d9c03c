"""Plots: what is drawn, not only that a call returns.

Sources of truth:
- The numbers on the plot are the arrays in the ``ksd_path`` / ``ksd`` Dataset (exact equality:
  the plots must not transform them).
- The slope guide: y = y0 (n / n0)^(-1/2), a closed form with log-log slope exactly -1/2.
- The Stein-kernel figure: ``reference.imq_stein_kernel_matrix`` (plain NumPy from the docs' background page
  section 2, written independently of ``steindiag.plots``) with d = 1 and A = 1 / lengthscale^2,
  and the diagonal k_p(x, x) = -2 beta c^(2 beta - 2) tr(A) + c^(2 beta) |s(x)|^2 (the docs' background page).
"""

import importlib.util
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from reference import imq_stein_kernel_matrix  # noqa: E402

import steindiag  # noqa: E402
from steindiag.plots import plot_ksd, plot_ksd_chains, plot_stein_kernel  # noqa: E402

HAS_ARVIZ_PLOTS = importlib.util.find_spec("arviz_plots") is not None
needs_arviz_plots = pytest.mark.skipif(not HAS_ARVIZ_PLOTS, reason="needs arviz-plots (ArviZ 1.x)")

N_CHAIN, N_DRAW, D = 4, 300, 2


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def draws():
    # Exact N(0, I) draws, except chain 2 which is shrunk and shifted (a "bad chain").
    rng = np.random.default_rng(20240501)
    x = rng.standard_normal((N_CHAIN, N_DRAW, D))
    x[2] = 0.7 * x[2] + 0.5
    return x


@pytest.fixture(scope="module")
def path(draws):
    return steindiag.ksd_path(draws, score=-draws, n_points=25)


@pytest.fixture(scope="module")
def result(draws):
    return steindiag.ksd(draws, score=-draws)


@pytest.fixture
def no_arviz_plots(monkeypatch):
    """Make ``import arviz_plots`` fail, as on an ArviZ 0.x install."""
    monkeypatch.setitem(sys.modules, "arviz_plots", None)


def _lines_by_gid(ax):
    return {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}


# ----------------------------------------------------------------------------- plot_ksd


def test_plot_ksd_matplotlib_draws_every_curve(path):
    fig, ax = plt.subplots()
    out = plot_ksd(path, ax=ax)
    assert out is fig
    lines = _lines_by_gid(ax)
    # 4 chains + 4 per-chain floors + pooled + pooled floor + guide
    assert len(ax.get_lines()) == 2 * N_CHAIN + 3
    n = path["n"].values
    for i, chain in enumerate(path["chain"].values):
        # Truth: the Dataset's own arrays, drawn unchanged.
        np.testing.assert_array_equal(lines[f"ksd[{chain}]"].get_xdata(), n)
        np.testing.assert_array_equal(lines[f"ksd[{chain}]"].get_ydata(), path["ksd"].values[i])
        np.testing.assert_array_equal(lines[f"ksd_iid[{chain}]"].get_ydata(),
                                      path["ksd_iid"].values[i])
        assert lines[f"ksd[{chain}]"].get_label() == f"chain {chain}"
    np.testing.assert_array_equal(lines["ksd_pooled"].get_ydata(), path["ksd_pooled"].values)
    np.testing.assert_array_equal(lines["ksd_iid_pooled"].get_ydata(),
                                  path["ksd_iid_pooled"].values)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "draws per chain, n"
    assert ax.get_ylabel().startswith("KSD")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"chain {c}" for c in range(N_CHAIN)] + [
        "pooled (all chains)", "i.i.d. floor, pooled", "i.i.d. floor, each chain",
        "slope \u22121/2"]


def test_plot_ksd_guide_has_slope_minus_half_through_pooled_curve(path):
    fig, ax = plt.subplots()
    plot_ksd(path, ax=ax)
    guide = _lines_by_gid(ax)["guide"]
    n_guide, y_guide = guide.get_xdata(), guide.get_ydata()
    # Closed form: log y = log y0 - (1/2) log(n / n0), so every log-log slope is -1/2.
    slopes = np.diff(np.log(y_guide)) / np.diff(np.log(n_guide))
    np.testing.assert_allclose(slopes, -0.5, rtol=1e-12)
    # Anchored on the pooled curve, at the first n >= n_max / 100.
    start = np.flatnonzero(path["n"].values == n_guide[0])[0]
    assert n_guide[0] >= path["n"].values[-1] / 100
    assert y_guide[0] == path["ksd_pooled"].values[start]
    assert n_guide[-1] == path["n"].values[-1]


def test_plot_ksd_visuals_and_coords(path):
    fig, ax = plt.subplots()
    plot_ksd(path, ax=ax, coords={"chain": [0, 2]},
             visuals={"ksd_iid": False, "guide": False, "ksd_pooled": {"color": "red"}})
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["chain 0", "chain 2", "pooled (all chains)", "i.i.d. floor, pooled"]
    assert _lines_by_gid(ax)["ksd_pooled"].get_color() == "red"
    fig, ax = plt.subplots()
    plot_ksd(path, ax=ax, visuals={"legend": False})
    assert ax.get_legend() is None
    fig, ax = plt.subplots()
    plot_ksd(path, ax=ax, coords={"chain": 1, "n": slice(10, None)})
    line = _lines_by_gid(ax)["ksd[1]"]
    assert line.get_xdata()[0] >= 10 and len(_lines_by_gid(ax)) == 5


def test_plot_ksd_without_arviz_plots_returns_matplotlib_figure(path, no_arviz_plots, tmp_path):
    fig = plot_ksd(path)
    assert isinstance(fig, matplotlib.figure.Figure)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    fig.savefig(tmp_path / "plot_ksd_matplotlib.png")
    assert (tmp_path / "plot_ksd_matplotlib.png").stat().st_size > 10_000
    with pytest.raises(ImportError, match="arviz-plots"):
        plot_ksd(path, backend="matplotlib")


def test_show_only_when_asked(path, monkeypatch):
    calls = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: calls.append(1))
    fig, axes = plt.subplots(1, 3)
    plot_ksd(path, ax=axes[0])
    plot_ksd_chains(path, ax=axes[1])
    plot_stein_kernel(lambda x: -x, ax=axes[2])
    assert calls == []
    plot_ksd(path, ax=axes[0], show=True)
    assert calls == [1]


def test_plot_ksd_bad_input(path, result):
    with pytest.raises(TypeError, match="xarray.Dataset returned by steindiag.ksd_path"):
        plot_ksd(np.zeros((4, 10)))
    with pytest.raises(ValueError, match="Use steindiag.ksd_path"):
        plot_ksd(result)
    with pytest.raises(ValueError, match="visuals keys"):
        plot_ksd(path, visuals={"floor": False})
    with pytest.raises(TypeError, match=r"visuals\['guide'\]"):
        plot_ksd(path, visuals={"guide": "no"})
    with pytest.raises(ValueError, match="coords keys"):
        plot_ksd(path, coords={"draw": [0]})
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="ax and backend"):
        plot_ksd(path, ax=ax, backend="matplotlib")
    with pytest.raises(TypeError, match="unexpected keyword"):
        plot_ksd(path, ax=ax, figure_kwargs={})
    with pytest.raises(TypeError, match="show must be"):
        plot_ksd(path, ax=ax, show="yes")


@needs_arviz_plots
def test_plot_ksd_plot_collection(path, tmp_path):
    from arviz_plots import PlotCollection

    pc = plot_ksd(path)
    assert isinstance(pc, PlotCollection)
    ax = pc.viz["plot"].item()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    chain_lines = pc.viz["ksd"]["ksd"]
    floor_lines = pc.viz["ksd_iid"]["ksd_iid"]
    assert chain_lines.sizes["chain"] == N_CHAIN and floor_lines.sizes["chain"] == N_CHAIN
    for chain in path["chain"].values:
        line = chain_lines.sel(chain=chain).item()
        np.testing.assert_array_equal(line.get_xdata(), path["n"].values)
        np.testing.assert_array_equal(line.get_ydata(), path["ksd"].sel(chain=chain).values)
        np.testing.assert_array_equal(floor_lines.sel(chain=chain).item().get_ydata(),
                                      path["ksd_iid"].sel(chain=chain).values)
    np.testing.assert_array_equal(pc.viz["ksd_pooled"]["ksd_pooled"].item().get_ydata(),
                                  path["ksd_pooled"].values)
    np.testing.assert_array_equal(pc.viz["ksd_iid_pooled"]["ksd_iid_pooled"].item().get_ydata(),
                                  path["ksd_iid_pooled"].values)
    guide = pc.viz["guide"]["guide"].item()
    slopes = np.diff(np.log(guide.get_ydata())) / np.diff(np.log(guide.get_xdata()))
    np.testing.assert_allclose(slopes, -0.5, rtol=1e-12)
    # 4 chains + 4 floors + pooled + pooled floor + guide, and nothing else.
    assert len(ax.get_lines()) == 2 * N_CHAIN + 3
    chain_legend = pc.viz["legend"]["chain"].item()
    assert [t.get_text() for t in chain_legend.get_texts()] == [str(c) for c in range(N_CHAIN)]
    reference = pc.viz["legend"]["reference"].item()
    assert [t.get_text() for t in reference.get_texts()] == [
        "pooled (all chains)", "i.i.d. floor, pooled", "i.i.d. floor, each chain",
        "slope \u22121/2"]
    assert ax.get_xlabel() == "draws per chain, n"
    pc.savefig(tmp_path / "plot_ksd_collection.png")
    assert (tmp_path / "plot_ksd_collection.png").stat().st_size > 10_000


@needs_arviz_plots
def test_plot_ksd_plot_collection_visuals_and_none_backend(path):
    pc = plot_ksd(path, visuals={"guide": False, "ksd_iid": False})
    assert "guide" not in pc.viz.children and "ksd_iid" not in pc.viz.children
    assert len(pc.viz["plot"].item().get_lines()) == N_CHAIN + 2
    # The backend-agnostic "none" backend records the drawing calls instead of drawing.
    pc = plot_ksd(path, backend="none")
    assert pc.backend == "none"


# ---------------------------------------------------------------------- plot_ksd_chains


def test_plot_ksd_chains_matplotlib(result, tmp_path):
    fig, ax = plt.subplots()
    plot_ksd_chains(result, ax=ax)
    lines = _lines_by_gid(ax)
    for i, chain in enumerate(result["chain"].values):
        assert lines[f"ksd[{chain}]"].get_xdata()[0] == result["ksd"].values[i]
        assert lines[f"ksd_iid[{chain}]"].get_xdata()[0] == result["ksd_iid"].values[i]
    assert lines["ksd_pooled"].get_xdata()[0] == result["ksd_pooled"].item()
    assert lines["ksd_iid_pooled"].get_xdata()[0] == result["ksd_iid_pooled"].item()
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        f"chain {c}" for c in range(N_CHAIN)] + ["pooled"]
    assert ax.get_xscale() == "log"
    ratios = {t.get_gid(): t.get_text() for t in ax.texts}
    expected = result["ksd"].values[2] / result["ksd_iid"].values[2]
    expected_text = f"\u00d7{expected:.1f}" if expected < 10 else f"\u00d7{expected:.0f}"
    assert ratios["ratio[2]"] == expected_text
    # The shrunk and shifted chain 2 is the one far to the right of its floor.
    chain_ratio = result["ksd"].values / result["ksd_iid"].values
    assert np.argmax(chain_ratio) == 2
    fig.savefig(tmp_path / "plot_ksd_chains.png")


def test_plot_ksd_chains_from_path_uses_last_n(path, result):
    fig, ax = plt.subplots()
    plot_ksd_chains(path, ax=ax)
    lines = _lines_by_gid(ax)
    assert "n = 300 per chain" in ax.get_xlabel()
    for i, chain in enumerate(path["chain"].values):
        assert lines[f"ksd[{chain}]"].get_xdata()[0] == path["ksd"].values[i, -1]
        # The last point of the running curve is the full-sample KSD (engine property).
        np.testing.assert_allclose(path["ksd"].values[i, -1], result["ksd"].values[i], rtol=1e-10)


@needs_arviz_plots
def test_plot_ksd_chains_plot_collection(result, tmp_path):
    pc = plot_ksd_chains(result)
    ax = pc.viz["plot"].item()
    assert ax.get_xscale() == "log"
    for chain in result["chain"].values:
        dots = pc.viz["ksd"]["ksd"].sel(chain=chain).item().get_offsets()
        bars = pc.viz["ksd_iid"]["ksd_iid"].sel(chain=chain).item().get_offsets()
        assert dots[0, 0] == result["ksd"].sel(chain=chain).item()
        assert bars[0, 0] == result["ksd_iid"].sel(chain=chain).item()
        assert dots[0, 1] == bars[0, 1]  # same row
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        f"chain {c}" for c in range(N_CHAIN)] + ["pooled"]
    pc.savefig(tmp_path / "plot_ksd_chains_collection.png")
    assert plot_ksd_chains(result, backend="none").backend == "none"


def test_plot_ksd_chains_bad_input(result):
    with pytest.raises(ValueError, match="must hold the variables"):
        plot_ksd_chains(result[["ksd"]])
    with pytest.raises(ValueError, match="visuals keys"):
        plot_ksd_chains(result, visuals={"guide": False})


# -------------------------------------------------------------------- plot_stein_kernel


def _kernel_fig(*args, **kwargs):
    """plot_stein_kernel on the matplotlib path (its lines carry gids)."""
    fig, ax = plt.subplots()
    plot_stein_kernel(*args, ax=ax, **kwargs)
    return fig


def _student_t_score(nu):
    return lambda x: -(nu + 1.0) * x / (nu + x**2)


@pytest.mark.parametrize(
    ("score", "y", "lengthscale", "c", "beta"),
    [
        (lambda x: -x, 1.0, 1.0, 1.0, -0.5),                  # N(0, 1), defaults
        (lambda x: -(x - 2.0) / 4.0, -0.5, 0.7, 2.0, -0.3),   # N(2, 4)
        (_student_t_score(3.0), 1.5, 2.0, 0.5, -0.8),         # Student-t(3)
    ],
)
def test_stein_kernel_terms_sum_to_reference(score, y, lengthscale, c, beta, tmp_path):
    x = np.linspace(-6.0, 6.0, 241)
    fig = _kernel_fig(score, y=y, x=x, lengthscale=lengthscale, c=c, beta=beta)
    ax = fig.axes[0]
    lines = _lines_by_gid(ax)
    names = ["div_x_grad_y_k", "grad_x_k_score_y", "grad_y_k_score_x", "k_score_x_score_y"]
    terms = [lines[name].get_ydata() for name in names]
    total = lines["stein_kernel"].get_ydata()
    for line in [lines[name] for name in names] + [lines["stein_kernel"]]:
        np.testing.assert_array_equal(line.get_xdata(), x)
    np.testing.assert_allclose(np.sum(terms, axis=0), total, rtol=0, atol=1e-12)
    # Independent truth: the plain-NumPy reference with d = 1, A = 1 / lengthscale^2.
    sx = score(x[:, None])
    sy = score(np.array([[y]]))
    expected = imq_stein_kernel_matrix(x[:, None], sx, np.array([[y]]), sy,
                                       np.array([[lengthscale**-2]]), c=c, beta=beta)[:, 0]
    np.testing.assert_allclose(total, expected, rtol=1e-12, atol=1e-14)
    fig.savefig(tmp_path / "stein_kernel.png")


def test_stein_kernel_diagonal_and_vanishing_terms():
    # At x = y' the total is k_p(y', y') = -2 beta c^(2beta-2) a + c^(2beta) s(y')^2 (the docs' background page).
    c, beta, lengthscale, y = 1.5, -0.5, 0.8, 0.7
    fig = _kernel_fig(lambda x: -x, y=y, x=np.array([y - 1.0, y, y + 1.0]),
                            lengthscale=lengthscale, c=c, beta=beta)
    lines = _lines_by_gid(fig.axes[0])
    diag = -2 * beta * c ** (2 * beta - 2) / lengthscale**2 + c ** (2 * beta) * y**2
    np.testing.assert_allclose(lines["stein_kernel"].get_ydata()[1], diag, rtol=1e-14)
    # At the mode of N(0, 1), s(y') = 0: both terms with s(y') are identically zero.
    fig = _kernel_fig(lambda x: -x, y=0.0)
    lines = _lines_by_gid(fig.axes[0])
    assert not np.any(lines["grad_x_k_score_y"].get_ydata())
    assert not np.any(lines["k_score_x_score_y"].get_ydata())
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(legend) == 5 and legend[-1].startswith("$k_p(x, y')$")


def test_stein_kernel_unbatched_score_and_bad_input():
    import math

    x = np.linspace(-2, 2, 5)
    batched = _lines_by_gid(_kernel_fig(lambda z: -z, x=x).axes[0])["stein_kernel"]
    one_at_a_time = _lines_by_gid(
        _kernel_fig(lambda z: np.array([-math.fsum(z)]), x=x, batched=False).axes[0]
    )["stein_kernel"]
    np.testing.assert_array_equal(batched.get_ydata(), one_at_a_time.get_ydata())
    with pytest.raises(TypeError, match="score must be a callable"):
        _kernel_fig(np.zeros(3))
    with pytest.raises(ValueError, match="returned shape"):
        _kernel_fig(lambda z: -z[:, 0])
    with pytest.raises(ValueError, match="beta must be"):
        _kernel_fig(lambda z: -z, beta=0.5)
    with pytest.raises(ValueError, match="lengthscale must be"):
        _kernel_fig(lambda z: -z, lengthscale=0.0)
    with pytest.raises(ValueError, match="x must be a 1-D array"):
        _kernel_fig(lambda z: -z, x=np.zeros((3, 2)))


@needs_arviz_plots
def test_stein_kernel_plot_collection():
    x = np.linspace(-3.0, 3.0, 61)
    pc = plot_stein_kernel(lambda z: -z, y=0.5, x=x)
    terms = pc.viz["terms"]["stein_kernel"]
    assert terms.sizes["term"] == 4
    fig, ax = plt.subplots()
    plot_stein_kernel(lambda z: -z, y=0.5, x=x, ax=ax)
    reference = _lines_by_gid(ax)
    total = pc.viz["stein_kernel"]["stein_kernel"].item()
    np.testing.assert_array_equal(total.get_xdata(), x)
    np.testing.assert_array_equal(total.get_ydata(), reference["stein_kernel"].get_ydata())
    drawn = sorted(tuple(terms.sel(term=t).item().get_ydata()) for t in terms["term"].values)
    expected = sorted(tuple(reference[name].get_ydata()) for name in
                      ("div_x_grad_y_k", "grad_x_k_score_y", "grad_y_k_score_x",
                       "k_score_x_score_y"))
    np.testing.assert_array_equal(drawn, expected)
    assert len({terms.sel(term=t).item().get_color() for t in terms["term"].values}) == 4
    assert plot_stein_kernel(lambda z: -z, backend="none").backend == "none"


def test_import_steindiag_does_not_import_matplotlib():
    import subprocess

    code = ("import sys, steindiag, steindiag.plots; "
            "print(any(m == 'matplotlib' or m.startswith('matplotlib.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
