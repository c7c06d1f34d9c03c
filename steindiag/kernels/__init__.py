"""Base kernels of the Langevin Stein kernel: IMQ (default), Gaussian, Matern 3/2 and 5/2.

Every function that takes ``kernel=`` accepts the name (``"imq"``, ``"gaussian"``,
``"matern32"``, ``"matern52"``) or one of these objects, e.g.
``steindiag.ksd(x, score=s, kernel=steindiag.kernels.IMQ(c=2.0, beta=-0.3))``.

- ``base``: the base kernels as frozen dataclasses, ``make_kernel`` (name or object);
- ``preconditioner``: the kernel's length scales, fixed once from the pooled draws;
- ``_stein``: Numba, the Langevin Stein kernel of each base kernel, pair by pair.
"""

from steindiag.kernels.base import (IMQ, KERNELS, BaseKernel, Gaussian, Matern32, Matern52,
                                    make_kernel)

__all__ = ["BaseKernel", "IMQ", "Gaussian", "Matern32", "Matern52", "KERNELS", "make_kernel"]
