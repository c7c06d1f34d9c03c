"""plot_stein_kernel: the four terms of the 1-D Langevin Stein kernel (a teaching figure)."""

import numpy as np
import xarray as xr

from steindiag._validate import evaluate_score_callable
from steindiag.kernels import make_kernel
from steindiag.plots._common import (_check_bool, _check_template, _ignore_aes, _map_once,
                                     _new_collection, _no_pc_kwargs, _shown, _use_arviz_plots,
                                     _visual_kwargs)

_VISUALS = ("terms", "stein_kernel", "zero", "y", "legend")


def _stein_kernel_terms_1d(x, score_x, y, score_y, lengthscale, kernel):
    """The four terms of k_p(x, y) for d = 1 and A = 1 / lengthscale^2.

    With u = x - y, a = 1 / lengthscale^2, t = a u^2 and the base kernel k = f(t)
    (the Stein kernel of the Background page with d = 1):

        d/dx k = 2 a u f'(t),   d/dy k = -2 a u f'(t),
        d2/(dx dy) k = -2 a f'(t) - 4 a^2 u^2 f''(t) = -2 a f'(t) - 4 a (t f''(t)),

    written with t f''(t), which stays finite at t = 0 for every kernel (the Matern 3/2
    f'' itself grows like 1/sqrt(t)).
    """
    a = 1.0 / lengthscale**2
    u = x - y
    t = a * u**2
    f, slope, t_curvature = kernel.profile(t)
    grad_x_k = 2.0 * a * u * slope
    grad_y_k = -grad_x_k
    return {
        "div_x_grad_y_k": -2.0 * a * slope - 4.0 * a * t_curvature,
        "grad_x_k_score_y": grad_x_k * score_y,
        "grad_y_k_score_x": grad_y_k * score_x,
        "k_score_x_score_y": f * score_x * score_y,
    }


_TERM_LABELS = {
    "div_x_grad_y_k": r"$\partial_x \partial_{y'} k(x, y')$",
    "grad_x_k_score_y": r"$\partial_x k(x, y')\, s(y')$",
    "grad_y_k_score_x": r"$\partial_{y'} k(x, y')\, s(x)$",
    "k_score_x_score_y": r"$k(x, y')\, s(x)\, s(y')$",
}


def plot_stein_kernel(score, *, y=1.0, x=None, lengthscale=1.0, kernel="imq", c=None,
                      beta=None, batched=True, plot_collection=None, backend=None,
                      aes_by_visuals=None, visuals=None, ax=None, figsize=None, show=False,
                      **pc_kwargs):
    """The Langevin Stein kernel of a 1-D target, split into its four terms.

    Draws, as functions of x for a fixed second argument y', the four terms of
    k_p(x, y') for the chosen base kernel and their sum (thick black line).

    Parameters
    ----------
    score : callable
        grad log p of a one-dimensional target. Same convention as
        :func:`steindiag.ksd`: it maps an (n, 1) array to an (n, 1) array
        (or, with ``batched=False``, a (1,) array to a (1,) array).
    y : float, default 1.0
        The fixed second argument y'. At a point where s(y') = 0 (the mode of a
        unimodal target) the two terms with s(y') vanish.
    x : array_like, optional
        Points at which to draw the curves (1-D, increasing). Default: 401 points on
        y' +- 5 lengthscales.
    lengthscale : float, default 1.0
        Kernel length scale; A = 1 / lengthscale^2.
    kernel : {"imq", "gaussian", "matern32", "matern52"} or kernel object, default "imq"
        Base kernel, as in :func:`steindiag.ksd`.
    c : float, optional
        IMQ offset, c > 0 (default 1.0). Only with ``kernel="imq"``.
    beta : float, optional
        IMQ exponent, -1 < beta < 0 (default -0.5). Only with ``kernel="imq"``.
    batched : bool, default True
        Whether ``score`` takes a batch of points (see above).
    plot_collection : arviz_plots.PlotCollection, optional
        Draw into this PlotCollection (one plot) instead of a new one.
    backend : {"matplotlib", "bokeh", "plotly", "none"}, optional
        arviz-plots backend (needs arviz-plots).
    aes_by_visuals : dict, optional
        Visual -> list of the PlotCollection's aesthetics it uses (keys as ``visuals``).
        Default: ``"terms"`` uses every aesthetic (a new PlotCollection maps ``color`` to
        the ``term`` dimension), the others none. No ``labeller=``: nothing here is a
        variable of a trace.
    visuals : dict, optional
        ``False`` hides a visual, a dict passes keyword arguments to it. Keys:
        ``"terms"`` (the four terms), ``"stein_kernel"`` (their sum), ``"zero"`` (the
        line y = 0), ``"y"`` (the vertical line at y'), ``"legend"``.
    ax : matplotlib.axes.Axes, optional
        Draw with plain matplotlib into this axes, even when arviz-plots is installed.
    figsize : (float, float), optional
        Size of a new figure in inches.
    show : bool, default False
        Call the backend's ``show`` after drawing.
    **pc_kwargs
        Passed to :meth:`arviz_plots.PlotCollection.wrap`.

    Returns
    -------
    arviz_plots.PlotCollection or matplotlib.figure.Figure
        A PlotCollection (``viz["terms"]`` one line per term, ``viz["stein_kernel"]`` the
        sum) when arviz-plots is installed and ``ax`` is None; otherwise the matplotlib
        Figure, whose lines carry gids ``"div_x_grad_y_k"``, ``"grad_x_k_score_y"``,
        ``"grad_y_k_score_x"``, ``"k_score_x_score_y"`` and ``"stein_kernel"``.

    Notes
    -----
    With u = x - y', a = 1 / lengthscale^2, t = a u^2 and base kernel k = f(t),

    .. math::

        k_p(x, y') = \\underbrace{-2a f'(t) - 4a^2 u^2 f''(t)}_{\\partial_x\\partial_{y'}k}
                   + \\underbrace{2a u f'(t) s(y')}_{\\partial_x k\\, s(y')}
                   \\underbrace{- 2a u f'(t) s(x)}_{\\partial_{y'} k\\, s(x)}
                   + \\underbrace{f(t) s(x) s(y')}_{k\\, s(x) s(y')}.

    For the IMQ, f(t) = (c^2 + t)^beta: far from y' only the terms with s(x) survive,
    decaying like ``|u|^(2 beta) |s(x)|``; the Gaussian and Matern kernels decay
    exponentially, so that far from y' every term vanishes (which is why their KSD can
    miss draws that drift away, see the Background page). Near y' the curvature term is
    positive. k_p(y', y') = -2 f'(0) a + f(0) s(y')^2 (IMQ: -2 beta c^(2 beta - 2) a +
    c^(2 beta) s(y')^2) is the diagonal that sets the i.i.d. floor.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import steindiag
    >>> fig, ax = plt.subplots()
    >>> fig = steindiag.plot_stein_kernel(lambda x: -x, y=1.0, ax=ax)   # N(0, 1) target
    >>> sorted(line.get_gid() for line in ax.lines if line.get_gid())[-1]
    'stein_kernel'
    >>> plt.close(fig)
    """
    if not callable(score):
        raise TypeError(
            "score must be a callable (grad log p of a 1-D target); "
            f"got {type(score).__name__}."
        )
    kernel = make_kernel(kernel, c, beta)
    for name, value in (("y", y), ("lengthscale", lengthscale)):
        if isinstance(value, bool) or not np.isscalar(value) or not np.isreal(value):
            raise TypeError(f"{name} must be a real number; got {type(value).__name__}.")
    y, lengthscale = float(y), float(lengthscale)
    if not (np.isfinite(lengthscale) and lengthscale > 0):
        raise ValueError(f"lengthscale must be a finite number > 0; got {lengthscale}.")
    if not np.isfinite(y):
        raise ValueError(f"y must be finite; got {y}.")
    batched = _check_bool(batched, "batched")
    visuals, aes_by_visuals, _, show = _check_template(
        _VISUALS, (), visuals, aes_by_visuals, None, ax, backend, show, plot_collection)
    if x is None:
        x = np.linspace(y - 5.0 * lengthscale, y + 5.0 * lengthscale, 401)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"x must be a 1-D array of at least 2 finite points; got shape {x.shape}.")

    points = np.append(x, y).reshape(1, -1, 1)
    scores = evaluate_score_callable(score, points, batched=batched).reshape(-1)
    if not np.all(np.isfinite(scores)):
        raise ValueError("score returned non-finite values on x or at y.")
    score_x, score_y = scores[:-1], scores[-1]
    terms = _stein_kernel_terms_1d(x, score_x, y, score_y, lengthscale, kernel)
    total = sum(terms.values())

    title = (f"Langevin Stein kernel, {kernel.describe()} base (lengthscale = "
             f"{lengthscale:g}), y' = {y:g}, s(y') = {score_y + 0.0:.3g}")
    if _use_arviz_plots(ax, backend, plot_collection):
        return _plot_collection(x, y, terms, total, title, plot_collection, backend,
                                aes_by_visuals, visuals, figsize, show, pc_kwargs)
    _no_pc_kwargs(pc_kwargs)
    return _plot_matplotlib(x, y, terms, total, title, visuals, ax, figsize, show)


def _plot_matplotlib(x, y, terms, total, title, visuals, ax, figsize, show):
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.5) if figsize is None else figsize)
    else:
        fig = ax.figure
    kw = _visual_kwargs(visuals, "terms", {"linewidth": 1.3})
    if kw is not None:
        for i, (name, values) in enumerate(terms.items()):
            line, = ax.plot(x, values, **{"color": f"C{i}", "label": _TERM_LABELS[name], **kw})
            line.set_gid(name)
    kw = _visual_kwargs(visuals, "stein_kernel", {"color": "k", "linewidth": 2.6,
                                                   "label": r"$k_p(x, y')$ (sum)"})
    if kw is not None:
        line, = ax.plot(x, total, **kw)
        line.set_gid("stein_kernel")
    kw = _visual_kwargs(visuals, "zero", {"color": "0.8", "linewidth": 0.8, "zorder": 0})
    if kw is not None:
        ax.axhline(0.0, **kw)
    kw = _visual_kwargs(visuals, "y", {"color": "0.5", "linestyle": ":", "linewidth": 1.0,
                                       "zorder": 0})
    if kw is not None:
        ax.axvline(y, **kw)
    ax.set_xlabel("x")
    ax.set_ylabel("term value")
    ax.set_title(title, fontsize="medium")
    kw = _visual_kwargs(visuals, "legend", {"fontsize": "small", "frameon": False})
    if kw is not None:
        ax.legend(**kw)
    return _shown(fig, show)


def _plot_collection(x, y, terms, total, title, pc, backend, aes_by_visuals, visuals,
                     figsize, show, pc_kwargs):
    from arviz_plots.visuals import hline, labelled_title, labelled_x, labelled_y, line_xy, vline

    names = [_TERM_LABELS[name] for name in terms]
    term_lines = xr.DataArray(np.stack(list(terms.values())), dims=["term", "x"],
                              coords={"term": names}, name="stein_kernel")
    pc = _new_collection(pc, xr.Dataset({"stein_kernel": term_lines}), backend=backend,
                         figsize=figsize or (8.5, 4.5), pc_kwargs=pc_kwargs,
                         aes={"color": ["term"]})
    kw = _visual_kwargs(visuals, "terms", {"width": 1.3})
    if kw is not None:
        pc.map(line_xy, "terms", data=term_lines, x=x,
               ignore_aes=_ignore_aes(pc, aes_by_visuals, "terms", default=pc.aes_set), **kw)
    kw = _visual_kwargs(visuals, "stein_kernel", {"color": "B1", "width": 2.6})
    if kw is not None:
        pc.map(line_xy, "stein_kernel", data=xr.DataArray(total, dims=["x"],
                                                          name="stein_kernel"),
               x=x, ignore_aes=_ignore_aes(pc, aes_by_visuals, "stein_kernel"), **kw)
    anchor = xr.DataArray(0.0, name="stein_kernel")
    kw = _visual_kwargs(visuals, "zero", {"color": "B3", "width": 0.8})
    if kw is not None:
        _map_once(pc, hline, "zero", anchor, **kw)
    kw = _visual_kwargs(visuals, "y", {"color": "B2", "linestyle": "C1", "width": 1.0})
    if kw is not None:
        _map_once(pc, vline, "y", xr.DataArray(y, name="stein_kernel"), **kw)
    _map_once(pc, labelled_x, "xlabel", anchor, text="x", color="B1")
    _map_once(pc, labelled_y, "ylabel", anchor, text="term value", color="B1")
    # Two lines, so that the legend outside the axes leaves the title whole.
    _map_once(pc, labelled_title, "title", anchor,
              text=title.replace(" base (", " base\n(") + "; thick: the sum k_p(x, y')",
              color="B1", size=10)
    kw = _visual_kwargs(visuals, "legend", {})
    if kw is not None and "color" in pc.aes_set:
        pc.add_legend("term", **kw)
    return _shown(pc, show)
