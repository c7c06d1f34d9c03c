"""Radial base kernels of the Langevin Stein kernel, as small frozen dataclasses.

Every kernel is radial in the preconditioned squared distance: k(x, y) = f(t) with
t = (x - y)^T A (x - y) and A = Lambda^-1 the inverse of the preconditioner (the
kernel's length scales). A kernel object holds its name and parameters, validates them
when created, labels results (``attrs``) and gives the Numba layer what it needs: an
int ``kind`` and a float64 ``numba_params`` array (``steindiag.kernels._stein``).
The Background page of the docs derives f', f'' and k_p(x, x) of each kernel.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from steindiag._validate import check_kernel_args
from steindiag.kernels import _stein

__all__ = ["BaseKernel", "IMQ", "Gaussian", "Matern32", "Matern52", "KERNELS", "make_kernel"]

_SQRT3 = np.sqrt(3.0)
_SQRT5 = np.sqrt(5.0)


@dataclass(frozen=True)
class BaseKernel:
    """Base class of the radial base kernels k(x, y) = f(t), t = (x - y)^T A (x - y).

    Subclasses set ``name`` (the ``kernel=`` string), ``label`` (the name in results'
    ``attrs["kernel"]``; ``kernel=`` accepts it too, any case), ``kind`` (the Numba
    layer's int; ``numba_kind`` is the token the Numba functions take), ``formula`` (f as
    text) and implement ``profile``.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    kind: ClassVar[int] = -1
    formula: ClassVar[str] = ""

    @property
    def numba_kind(self):
        """The kind token the Numba layer takes (``steindiag.kernels._stein.kind_token``)."""
        return _stein.kind_token(self.kind)

    @property
    def numba_params(self):
        """float64 parameter array for the Numba layer (empty if none)."""
        return self._numba_params()

    def _numba_params(self):
        return np.empty(0)

    def _parameters(self):
        return {}

    def _profile(self, t):
        raise NotImplementedError

    def parameters(self):
        """The kernel's own parameters.

        Returns
        -------
        dict
            {name: float}; empty for the kernels without parameters of their own.
        """
        return self._parameters()

    def attrs(self):
        """Labels for results.

        Returns
        -------
        dict
            ``kernel`` (the label, accepted back by ``kernel=``), ``kernel_formula`` and
            the kernel's parameters.
        """
        return {
            "kernel": self.label,
            "kernel_formula": (f"{self.label} base kernel k(x, y) = {self.formula}, "
                               "t = (x-y)^T A (x-y), A = Lambda^-1; Langevin Stein kernel"),
            **self.parameters(),
        }

    def describe(self):
        """Short text for titles.

        Returns
        -------
        str
            The label and the parameters, e.g. "IMQ (c = 1, beta = -0.5)".
        """
        params = ", ".join(f"{key} = {value:g}" for key, value in self.parameters().items())
        return f"{self.label}" + (f" ({params})" if params else "")

    def profile(self, t):
        """The profile f of k(x, y) = f(t) and its derivatives.

        Parameters
        ----------
        t : array_like
            Preconditioned squared distances t = (x - y)^T A (x - y) >= 0.

        Returns
        -------
        (f, f_prime, t_f_second) : tuple of ndarray
            f(t), f'(t) and t f''(t); t f''(t) is finite at t = 0 for every kernel (the
            Matern 3/2 f'' itself grows like 1 / sqrt(t)).
        """
        return self._profile(t)

    @property
    def value_at_zero(self):
        """f(0) = k(x, x)."""
        return float(self.profile(np.zeros(1))[0][0])

    @property
    def slope_at_zero(self):
        """f'(0); k_p(x, x) = -2 f'(0) tr A + f(0) ``|s(x)|^2``."""
        return float(self.profile(np.zeros(1))[1][0])


@dataclass(frozen=True)
class IMQ(BaseKernel):
    """Inverse multiquadric base kernel f(t) = (c^2 + t)^beta, the default.

    With beta in (-1, 0) its KSD detects non-convergence in any dimension (Gorham &
    Mackey 2017).

    Parameters
    ----------
    c : float, default 1.0
        Offset, c > 0.
    beta : float, default -0.5
        Exponent, -1 < beta < 0.

    Notes
    -----
    t = (x - y)^T A (x - y) with A = Lambda^-1 from the preconditioner. The Stein kernel
    and its diagonal, k_p(x, x) = -2 beta c^(2 beta - 2) tr(A) + c^(2 beta) ``|s(x)|^2``, are
    on the Background page of the docs.

    References
    ----------
    Gorham & Mackey (2017), Measuring sample quality with kernels, ICML.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 3))
    >>> res = steindiag.ksd(x, score=-x, kernel=steindiag.kernels.IMQ(c=2.0, beta=-0.3))
    >>> res.attrs["kernel"], res.attrs["c"], res.attrs["beta"]
    ('IMQ', 2.0, -0.3)
    """

    c: float = 1.0
    beta: float = -0.5
    name: ClassVar[str] = "imq"
    label: ClassVar[str] = "IMQ"
    kind: ClassVar[int] = _stein.IMQ
    formula: ClassVar[str] = "(c^2 + t)^beta"

    def __post_init__(self):
        c, beta = check_kernel_args(self.c, self.beta)
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "beta", beta)

    @property
    def numba_kind(self):
        """The IMQ's kind token; with beta = -1/2 the one whose passes compile one loop."""
        return _stein.kind_token(self.kind, half=self.beta == -0.5)

    def _numba_params(self):
        return np.array([self.c**2, self.beta])

    def _parameters(self):
        return {"c": self.c, "beta": self.beta}

    def _profile(self, t):
        t = np.asarray(t, dtype=float)
        q = self.c**2 + t
        beta = self.beta
        return q**beta, beta * q ** (beta - 1.0), t * beta * (beta - 1.0) * q ** (beta - 2.0)


@dataclass(frozen=True)
class Gaussian(BaseKernel):
    """Gaussian (squared exponential) base kernel f(t) = exp(-t / 2).

    No parameters of its own: the length scale is the preconditioner's. Its KSD can go to
    zero for draws that drift away in d >= 3 (Gorham & Mackey 2017, Theorem 6; see the
    Background page), so prefer the IMQ to diagnose convergence.

    Notes
    -----
    f' = -f / 2, f'' = f / 4; k_p(x, x) = tr(A) + ``|s(x)|^2``.

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 3))
    >>> steindiag.ksd(x, score=-x, kernel="gaussian").attrs["kernel"]
    'Gaussian'
    """

    name: ClassVar[str] = "gaussian"
    label: ClassVar[str] = "Gaussian"
    kind: ClassVar[int] = _stein.GAUSSIAN
    formula: ClassVar[str] = "exp(-t/2)"

    def _profile(self, t):
        t = np.asarray(t, dtype=float)
        f = np.exp(-0.5 * t)
        return f, -0.5 * f, 0.25 * t * f


@dataclass(frozen=True)
class Matern32(BaseKernel):
    """Matern 3/2 base kernel f(t) = (1 + sqrt(3) r) exp(-sqrt(3) r), r = sqrt(t).

    No parameters of its own: the length scale is the preconditioner's. Its KSD can go to
    zero for draws that drift away in d >= 3 (Gorham & Mackey 2017, Theorem 6).

    Notes
    -----
    f' = -3/2 exp(-sqrt(3) r), f'' = 3 sqrt(3) / (4 r) exp(-sqrt(3) r): f'' is infinite at
    r = 0 but f'' u^T A^2 u <= 3 sqrt(3) / 4 tr(A) r exp(-sqrt(3) r) goes to 0, and
    k_p(x, x) = 3 tr(A) + ``|s(x)|^2`` (Background page).

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 3))
    >>> steindiag.ksd(x, score=-x, kernel="matern32").attrs["kernel"]
    'Matern32'
    """

    name: ClassVar[str] = "matern32"
    label: ClassVar[str] = "Matern32"
    kind: ClassVar[int] = _stein.MATERN32
    formula: ClassVar[str] = "(1 + sqrt(3 t)) exp(-sqrt(3 t))"

    def _profile(self, t):
        t = np.asarray(t, dtype=float)
        r = np.sqrt(t)
        e = np.exp(-_SQRT3 * r)
        # f' = -3/2 e, f'' = 3 sqrt3 / (4 r) e, so t f'' = 3 sqrt3 r / 4 e.
        return (1.0 + _SQRT3 * r) * e, -1.5 * e, 0.75 * _SQRT3 * r * e


@dataclass(frozen=True)
class Matern52(BaseKernel):
    """Matern 5/2 base kernel f(t) = (1 + sqrt(5) r + 5 t / 3) exp(-sqrt(5) r), r = sqrt(t).

    No parameters of its own: the length scale is the preconditioner's. Its KSD can go to
    zero for draws that drift away in d >= 3 (Gorham & Mackey 2017, Theorem 6).

    Notes
    -----
    f' = -5/6 (1 + sqrt(5) r) exp(-sqrt(5) r), f'' = 25/12 exp(-sqrt(5) r);
    k_p(x, x) = 5/3 tr(A) + ``|s(x)|^2`` (Background page).

    Examples
    --------
    >>> import numpy as np, steindiag
    >>> x = np.random.default_rng(0).standard_normal((2, 200, 3))
    >>> steindiag.ksd(x, score=-x, kernel="matern52").attrs["kernel"]
    'Matern52'
    """

    name: ClassVar[str] = "matern52"
    label: ClassVar[str] = "Matern52"
    kind: ClassVar[int] = _stein.MATERN52
    formula: ClassVar[str] = "(1 + sqrt(5 t) + 5 t / 3) exp(-sqrt(5 t))"

    def _profile(self, t):
        t = np.asarray(t, dtype=float)
        r = np.sqrt(t)
        e = np.exp(-_SQRT5 * r)
        # f' = -5/6 (1 + sqrt5 r) e, f'' = 25/12 e.
        return ((1.0 + _SQRT5 * r + (5.0 / 3.0) * t) * e, -(5.0 / 6.0) * (1.0 + _SQRT5 * r) * e,
                (25.0 / 12.0) * t * e)


KERNELS = {cls.name: cls for cls in (IMQ, Gaussian, Matern32, Matern52)}


def make_kernel(kernel="imq", c=None, beta=None):
    """Resolve a ``kernel=`` argument and the IMQ's ``c``, ``beta`` into a kernel object.

    Parameters
    ----------
    kernel : str or BaseKernel, default "imq"
        A name, {"imq", "gaussian", "matern32", "matern52"} in any case (so that a
        result's ``attrs["kernel"]``, such as "IMQ" or "Matern32", is accepted), or a
        kernel object (then ``c`` and ``beta`` must be None: they belong to the object).
    c, beta : float, optional
        The IMQ's parameters (defaults 1.0 and -0.5). Passing them with another kernel
        is an error, not silently ignored.

    Returns
    -------
    BaseKernel
        A validated kernel object.

    Examples
    --------
    >>> from steindiag.kernels import make_kernel
    >>> make_kernel("imq", c=2.0)
    IMQ(c=2.0, beta=-0.5)
    >>> make_kernel("Matern32")
    Matern32()
    """
    if isinstance(kernel, BaseKernel):
        if c is not None or beta is not None:
            raise ValueError(
                f"c and beta cannot be combined with a kernel object; set them on the object "
                f"(steindiag.kernels.IMQ(c=..., beta=...)); got kernel={kernel!r}, c={c!r}, "
                f"beta={beta!r}."
            )
        return kernel
    if not isinstance(kernel, str):
        raise TypeError(
            f"kernel must be one of {sorted(KERNELS)} or a steindiag.kernels kernel object; "
            f"got {type(kernel).__name__}."
        )
    if kernel.lower() not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}; got {kernel!r}.")
    kernel = kernel.lower()
    if kernel == "imq":
        return IMQ(c=1.0 if c is None else c, beta=-0.5 if beta is None else beta)
    given = [f"{name}={value!r}" for name, value in (("c", c), ("beta", beta)) if value is not None]
    if given:
        raise ValueError(
            f"c and beta are parameters of the IMQ kernel only (the length scale of every "
            f"kernel is the preconditioner's); got {', '.join(given)} with kernel={kernel!r}."
        )
    return KERNELS[kernel]()
