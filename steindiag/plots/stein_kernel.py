"""plot_stein_kernel: the four terms of the 1-D Langevin Stein kernel (a teaching figure)."""

import numpy as np

from steindiag._validate import evaluate_score_callable
from steindiag.kernels import make_kernel
from steindiag.plots._common import _check_bool


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
                      beta=None, batched=True, ax=None, figsize=None, show=False):
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
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.
    figsize : (float, float), optional
        Size of a new figure in inches.
    show : bool, default False
        Call ``matplotlib.pyplot.show`` after drawing.

    Returns
    -------
    matplotlib.figure.Figure
        The lines carry gids ``"div_x_grad_y_k"``, ``"grad_x_k_score_y"``,
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
    >>> fig = steindiag.plot_stein_kernel(lambda x: -x, y=1.0)   # standard normal target
    >>> sorted(line.get_gid() for line in fig.axes[0].lines if line.get_gid())[-1]
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
    show = _check_bool(show, "show")
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

    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.5) if figsize is None else figsize)
    else:
        fig = ax.figure
    for i, (name, values) in enumerate(terms.items()):
        line, = ax.plot(x, values, color=f"C{i}", linewidth=1.3, label=_TERM_LABELS[name])
        line.set_gid(name)
    line, = ax.plot(x, total, color="k", linewidth=2.6, label=r"$k_p(x, y')$ (sum)")
    line.set_gid("stein_kernel")
    ax.axhline(0.0, color="0.8", linewidth=0.8, zorder=0)
    ax.axvline(y, color="0.5", linestyle=":", linewidth=1.0, zorder=0)
    ax.set_xlabel("x")
    ax.set_ylabel("term value")
    ax.set_title(
        f"Langevin Stein kernel, {kernel.describe()} base (lengthscale = "
        f"{lengthscale:g}), y' = {y:g}, s(y') = {score_y + 0.0:.3g}",
        fontsize="medium",
    )
    ax.legend(fontsize="small", frameon=False)
    if show:
        plt.show()
    return fig
