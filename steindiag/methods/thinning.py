"""Greedy Stein thinning's numerical core: the greedy selection and its corrections.

Each step adds the draw that minimises the KSD of the selected set plus the new draw:
with the Stein kernel k_p, draw j's objective is k_p(x_j, x_j) + 2 sum over the
selected i of k_p(x_i, x_j) (plus, when regularised, a Laplacian correction and a
log-density penalty, Benard et al. 2023). One kernel row per selected point is
computed, never the N x N matrix: O(N d) memory. See the Background page of the docs.
"""

import numpy as np

from steindiag.engine import products
from steindiag.engine.progress import CONSERVATIVE_FLOPS, progress_bar

__all__ = ["greedy_select", "laplacian_correction", "prefix_ksd", "stein_thinning"]


# Central-difference step for the Laplacian correction, in units of the spread of each
# kernel coordinate: about eps^(1/3), the step that balances truncation and rounding.
_FD_STEP = 1e-4
# Kernel rows of the selected points computed at a time by ``prefix_ksd``.
_PREFIX_ROWS = 256


def laplacian_correction(score_fn, draws_flat, pre, kernel):
    """k(x, x) sum_k (d^2 log p / dz_k^2)^+ in kernel coordinates z, by central differences.

    k(x, x) = f(0) is the base kernel on the diagonal: c^(2 beta) for the IMQ, 1 otherwise.

    z = V^T (x / scale); moving z_k by h moves x by h * scale * V[:, k]; the score in
    kernel coordinates is V^T (scale * s). 2 d score evaluations per draw.
    """
    n, d = draws_flat.shape
    scale = pre.scale if pre.scale is not None else np.ones(d)
    rotation = pre.rotation if pre.rotation is not None else np.eye(d)
    draws_k, _ = pre.to_kernel_coordinates(draws_flat, np.zeros_like(draws_flat))
    spread = np.std(draws_k, axis=0)
    spread[~(spread > 0)] = 1.0
    total = np.zeros(n)
    for k in range(d):
        h = _FD_STEP * spread[k]
        shift = h * scale * rotation[:, k]
        plus = score_fn(draws_flat + shift)
        minus = score_fn(draws_flat - shift)
        # k-th kernel coordinate of the score: (scale * s) . V[:, k]
        second = ((plus - minus) * scale) @ rotation[:, k] / (2.0 * h)
        total += np.maximum(second, 0.0)
    if not np.all(np.isfinite(total)):
        raise ValueError("the Laplacian correction is not finite at some draws (score overflow).")
    return kernel.value_at_zero * total


def greedy_select(points, objective, step_penalty, n_selected, bar=None):
    """Positions of ``n_selected`` draws chosen greedily (repeats allowed), in selection order.

    ``points`` is the problem's ``KernelPoints``; ``objective`` (N,) the per-draw term
    of the first step (k_p(x_j, x_j), plus the regularisation's terms); ``step_penalty``
    (N,) what each later selection of draw j adds to its own objective (zero for plain
    thinning); ``bar`` (optional) advances by the points selected. Time O(n_selected N d),
    memory O(N); Ctrl-C is honoured between calls of about 0.25 s.
    """
    n_total = objective.shape[0]
    selected = np.empty(n_selected, dtype=np.int64)
    with products.threads_for(n_total):
        products.greedy_thinning(
            *points.constants, np.ascontiguousarray(objective),
            np.ascontiguousarray(step_penalty), int(n_selected), selected, bar=bar,
        )
    return selected


def prefix_ksd(points):
    """KSD (sqrt of the V-statistic) of the first t points, t = 1 .. ``points.n``.

    ``points`` are the selected points in selection order (``KernelPoints.subset``), with
    the kernel and preconditioner of the selection. Their kernel rows come from the row
    pass the selection has compiled already (a first call compiles no pass for this):
    ``_PREFIX_ROWS`` rows at a time, each over the earlier points only: about m^2 / 2
    kernel evaluations for m points, O(_PREFIX_ROWS m) memory.
    """
    m = points.n
    earlier = np.empty(m)  # sum over j < i of k_p(x_i, x_j)
    for start in range(0, m, _PREFIX_ROWS):
        stop = min(start + _PREFIX_ROWS, m)
        index = np.arange(start, stop)
        # Columns 0 .. stop - 1 only; row i = start + r keeps its columns j <= start + r - 1.
        rows = points.subset(np.arange(stop)).rows(index)
        earlier[index] = np.tril(rows, start - 1).sum(axis=1)
    running = np.cumsum(2.0 * earlier + points.diagonal)
    return np.sqrt(np.maximum(running, 0.0)) / np.arange(1, m + 1)


def stein_thinning(prepared, pre, kernel, n_selected, *, regularized=False, strength=None,
                   log_p=None, score_fn=None, progress=None):
    """Greedy (or regularised) Stein thinning of the pooled draws.

    ``log_p`` (N,) and ``score_fn`` ((n, d) -> (n, d)) are needed with ``regularized``: the
    objective adds the Laplacian correction and -lambda log p, lambda = ``strength``
    (default 1 / n_selected). Returns (selected positions (n_selected,), KSD of every prefix
    of the selection, the selected points' ``KernelPoints``, the settings as attrs).
    """
    n_chain, n_draw, d = prepared.draws.shape
    n_total = n_chain * n_draw
    draws_flat = prepared.draws.reshape(-1, d)
    points = products.KernelPoints(draws_flat, prepared.scores.reshape(-1, d), pre, kernel)
    objective = points.diagonal.copy()
    step_penalty = np.zeros(n_total)
    settings = {"stein_thinning": "regularized" if regularized else "greedy",
                "stein_thinning_n_selected": int(n_selected)}
    if regularized:
        lam = 1.0 / n_selected if strength is None else float(strength)
        laplacian = laplacian_correction(score_fn, draws_flat, pre, kernel)
        objective += laplacian - lam * log_p
        step_penalty = -lam * log_p
        settings["stein_thinning_strength"] = lam
    pairs = n_selected * n_total
    with progress_bar(progress, n_selected, pairs * (8 * d + 22) / CONSERVATIVE_FLOPS,
                      desc="stein_thin (greedy selection)", unit="point") as bar:
        selected = greedy_select(points, objective, step_penalty, n_selected, bar)
    # KSD of every prefix of the selection, with the same kernel and preconditioner.
    selected_points = points.subset(selected)
    return selected, prefix_ksd(selected_points), selected_points, settings
