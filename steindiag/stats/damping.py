"""The window of the score-damped (diffusion) Stein operator (NumPy only).

Draws far out in the tails, where the score is huge (the neck of a funnel, the far tail
of a prior), dominate the Langevin Stein kernel's sums: the test's statistic and every
bootstrap replicate are then made of a few pairs of those draws, and the test has no
power. The diffusion Stein operator A_m f = (1/p) div(p m f) with a scalar weight m(x)
has mean zero under p for any smooth m whose boundary terms vanish (Gorham, Duncan,
Vollmer & Mackey 2019), and its Stein kernel is

    k_m(x, y) = m(x) m(y) k_p'(x, y),

the Langevin Stein kernel k_p' of the tilted density p m (score s + grad log m) between
weights m(x) and m(y). So the engine's quadratic forms give its statistic and bootstrap
replicates unchanged: the weight vectors multiplied by m, the scores shifted by
grad log m. This module chooses m: a Gaussian window around the draws' median,

    m(x) = exp(-|z|^2 / (2 h^2 q)),   z = (x - median) / (1.4826 MAD),

coordinate by coordinate, with q the median of |z|^2 over the draws (so the window
scales with the bulk of the draws in any dimension) and h = 1/2, chosen by measurement:
on prior draws of the centred eight-schools model scored against its posterior, h = 1
left pooled p-values of 0.02-0.18, h = 1/2 rejects (benchmarks/results/calibration.md). It falls faster than any power of the distance,
so it also tames scores that grow exponentially along a coordinate (1 / tau in the log
of a scale). See the Background page, "Calibration on MCMC output".
"""

import numpy as np

__all__ = ["damping_window"]

# Width h of the window, relative to the draws' median radius (see the module docstring).
_WIDTH = 0.5


def damping_window(draws):
    """(m, grad log m) of the damping window at the draws (chain, draw, d).

    Returns
    -------
    weight : ndarray (chain, draw)
        m(x), at most 1 (1 at the median).
    grad_log_weight : ndarray (chain, draw, d)
        grad log m(x) = -(x - median) / (h^2 q scale^2).

    Notes
    -----
    The centre, the scales and q come from the draws (as the kernel's preconditioner
    does); a coordinate whose MAD is 0 takes its standard deviation, and 1 if that is 0
    too.
    """
    d = draws.shape[-1]
    flat = draws.reshape(-1, d)
    centre = np.median(flat, axis=0)
    scale = 1.4826 * np.median(np.abs(flat - centre), axis=0)
    spread = flat.std(axis=0)
    scale = np.where(scale > 0, scale, np.where(spread > 0, spread, 1.0))
    z = (draws - centre) / scale
    radius_sq = np.einsum("...k,...k->...", z, z)
    q = float(np.median(radius_sq))
    q = q if q > 0 else 1.0
    q = q * _WIDTH**2
    weight = np.exp(-0.5 * radius_sq / q)
    grad_log_weight = -z / (scale * q)
    return weight, grad_log_weight
