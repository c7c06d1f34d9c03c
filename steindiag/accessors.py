"""``stein`` accessor on ``xarray.DataTree`` (ArviZ 1.x / PyMC 6 traces) and on ArviZ 0.x's
``InferenceData`` (PyMC 5 traces).

After ``import steindiag``::

    idata = pm.sample(model=model)          # DataTree (ArviZ >= 1) or InferenceData (0.x)
    idata.stein.diagnose(model)             # == steindiag.diagnose(idata, model)
    idata.stein.ksd(model)                  # == steindiag.ksd(idata, model)
    idata.stein.stein_weights(model)        # == steindiag.stein_weights(idata, model)
    idata.stein.mmd()                       # == steindiag.mmd(idata)

Every public function that reads a trace has a method of the same name (``ksd``,
``ksd_path``, ``ksd_test``, ``diagnose``, ``mmd``, ``control_variates``,
``stein_weights``, ``weighted_summary``, ``stein_thin``, ``stein_variational``,
``add_scores``, ``min_ksd_fit``), a one-line wrapper with the trace as ``data``.

Registration on DataTree needs only xarray (no ArviZ, PyMC or PyTensor import). ArviZ 0.x
has no accessor registry, and importing it would cost about a second at
``import steindiag``, so ``InferenceData`` gets the accessor (a class attribute, as
xarray's own registration adds) when ArviZ 0.x's ``InferenceData`` module is loaded:
at ``import steindiag`` if ArviZ is already imported, otherwise as soon as it is (an
import hook waits for that one module, then removes itself), whatever the order of the
imports. :func:`register_inference_data` registers by hand.

Registration is skipped, with a warning, if another package already put a ``stein``
attribute on the class, and it is idempotent when this module is reloaded.
"""

import importlib.abc
import sys
import warnings

import xarray as xr

from steindiag._diagnose import diagnose
from steindiag._ksd import ksd, ksd_path
from steindiag._mmd import mmd
from steindiag.control_variates import control_variates
from steindiag.estimation import min_ksd_fit
from steindiag.gof import ksd_test
from steindiag.scores import add_scores
from steindiag.thinning import stein_thin
from steindiag.variational import stein_variational
from steindiag.weights import stein_weights, weighted_summary

__all__ = ["SteinAccessor", "register_inference_data"]

_NAME = "stein"


class SteinAccessor:
    """Kernel Stein discrepancy of the trace: ``idata.stein.ksd(model)``.

    Each method is a one-line wrapper of the function of the same name in
    :mod:`steindiag`, with the trace as ``data``; all keyword arguments are passed on.
    """

    _steindiag_accessor = True

    def __init__(self, xarray_obj):
        self._obj = xarray_obj

    def ksd(self, model=None, **kwargs):
        """``steindiag.ksd(trace, model, **kwargs)``; see :func:`steindiag.ksd`."""
        return ksd(self._obj, model, **kwargs)

    def ksd_path(self, model=None, **kwargs):
        """``steindiag.ksd_path(trace, model, **kwargs)``; see :func:`steindiag.ksd_path`."""
        return ksd_path(self._obj, model, **kwargs)

    def ksd_test(self, model=None, **kwargs):
        """``steindiag.ksd_test(trace, model, **kwargs)``; see :func:`steindiag.ksd_test`."""
        return ksd_test(self._obj, model, **kwargs)

    def diagnose(self, model=None, **kwargs):
        """``steindiag.diagnose(trace, model, **kwargs)``; see :func:`steindiag.diagnose`."""
        return diagnose(self._obj, model, **kwargs)

    def control_variates(self, model=None, **kwargs):
        """``steindiag.control_variates(trace, model, **kwargs)``; see :func:`steindiag.control_variates`."""
        return control_variates(self._obj, model, **kwargs)

    def mmd(self, other=None, **kwargs):
        """``steindiag.mmd(trace, other, **kwargs)``; see :func:`steindiag.mmd`."""
        return mmd(self._obj, other, **kwargs)

    def stein_weights(self, model=None, **kwargs):
        """``steindiag.stein_weights(trace, model, **kwargs)``; see
        :func:`steindiag.stein_weights`."""
        return stein_weights(self._obj, model, **kwargs)

    def weighted_summary(self, weights, **kwargs):
        """``steindiag.weighted_summary(trace, weights, **kwargs)``; see
        :func:`steindiag.weighted_summary`."""
        return weighted_summary(self._obj, weights, **kwargs)

    def stein_thin(self, model=None, **kwargs):
        """``steindiag.stein_thin(trace, model, **kwargs)``; see :func:`steindiag.stein_thin`."""
        return stein_thin(self._obj, model, **kwargs)

    def stein_variational(self, model=None, **kwargs):
        """``steindiag.stein_variational(trace, model, **kwargs)``; see
        :func:`steindiag.stein_variational`."""
        return stein_variational(self._obj, model, **kwargs)

    def add_scores(self, model=None, **kwargs):
        """``steindiag.add_scores(trace, model, **kwargs)``; see :func:`steindiag.add_scores`."""
        return add_scores(self._obj, model, **kwargs)

    def min_ksd_fit(self, score_fn, theta0, **kwargs):
        """``steindiag.min_ksd_fit(trace, score_fn, theta0, **kwargs)``; see
        :func:`steindiag.min_ksd_fit`."""
        return min_ksd_fit(self._obj, score_fn, theta0, **kwargs)


def _take_name(cls):
    """Whether ``cls.stein`` is free (or ours, from a reload) for the accessor."""
    existing = cls.__dict__.get(_NAME, getattr(cls, _NAME, None))
    if existing is None:
        return True
    accessor = getattr(existing, "_accessor", existing)
    if getattr(accessor, "_steindiag_accessor", False):
        # Already ours (module reloaded): replace silently with the current class.
        delattr(cls, _NAME)
        return True
    warnings.warn(
        f"{cls.__module__}.{cls.__name__} already has an attribute {_NAME!r} (from another "
        "package); the steindiag accessor is not registered. Call steindiag.ksd(idata, "
        "model) instead.",
        UserWarning,
        stacklevel=3,
    )
    return False


class _InferenceDataAccessor:
    """Descriptor giving ``SteinAccessor(idata)`` (xarray's accessors work the same way)."""

    _accessor = SteinAccessor

    def __get__(self, obj, cls):
        if obj is None:
            return SteinAccessor
        return SteinAccessor(obj)


def _register():
    register = getattr(xr, "register_datatree_accessor", None)
    datatree = getattr(xr, "DataTree", None)
    if register is None or datatree is None:  # pragma: no cover - xarray < 2024.10
        return False
    if not _take_name(datatree):
        return False
    register(_NAME)(SteinAccessor)
    return True


def register_inference_data():
    """Add ``idata.stein`` to ArviZ 0.x's ``InferenceData`` (imports ArviZ).

    Done at ``import steindiag`` when ArviZ 0.x is already imported; call this when
    steindiag was imported first. ArviZ 1.x traces are DataTrees, which have the accessor
    from ``import steindiag``.

    Returns
    -------
    bool
        Whether ``InferenceData.stein`` is now the steindiag accessor (False on ArviZ 1.x,
        which has no InferenceData, or when another package holds the name).

    Examples
    --------
    >>> import steindiag.accessors
    >>> isinstance(steindiag.accessors.register_inference_data(), bool)
    True
    """
    import arviz  # noqa: F401  (loads arviz.data.inference_data on ArviZ 0.x)

    return _register_inference_data()


def _register_inference_data():
    # Never touch arviz.InferenceData itself: on ArviZ 1.x that name warns (migration).
    module = sys.modules.get("arviz.data.inference_data")
    inference_data = getattr(module, "InferenceData", None)
    if inference_data is None:
        return False
    if isinstance(inference_data.__dict__.get(_NAME), _InferenceDataAccessor):
        return True
    if not _take_name(inference_data):
        return False
    setattr(inference_data, _NAME, _InferenceDataAccessor())
    return True


_INFERENCE_DATA_MODULE = "arviz.data.inference_data"


class _RegisterWhenLoaded(importlib.abc.MetaPathFinder):
    """An import hook for one module, ArviZ 0.x's ``arviz.data.inference_data``: it lets
    the other finders find it, then registers the accessor once the module has run, and
    removes itself. Any other import passes by (one string comparison)."""

    def find_spec(self, name, path, target=None):
        if name != _INFERENCE_DATA_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _remove_hook()
        _register_inference_data()

    def __getattr__(self, name):   # anything else the import system asks of the loader
        return getattr(self._loader, name)


def _remove_hook():
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _RegisterWhenLoaded)]


_register()
_remove_hook()   # a reload of this module leaves one hook, not two
if not _register_inference_data() and _INFERENCE_DATA_MODULE not in sys.modules:
    sys.meta_path.insert(0, _RegisterWhenLoaded())
