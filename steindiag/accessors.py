"""``stein`` accessor on ``xarray.DataTree`` (ArviZ 1.x / PyMC 6 traces).

After ``import steindiag``::

    idata = pm.sample(model=model)          # an xarray.DataTree on ArviZ >= 1
    idata.stein.ksd(model)                  # == steindiag.ksd(idata, model)
    idata.stein.ksd_path(model)             # == steindiag.ksd_path(idata, model)
    idata.stein.ksd_test(model)             # == steindiag.ksd_test(idata, model)
    idata.stein.mmd()                       # == steindiag.mmd(idata)

Registration needs only xarray (no ArviZ, PyMC or PyTensor import). It is skipped,
with a warning, if another package already put a ``stein`` attribute on DataTree,
and it is idempotent when this module is reloaded.
"""

import warnings

import xarray as xr

__all__ = ["SteinAccessor"]

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
        import steindiag

        return steindiag.ksd(self._obj, model, **kwargs)

    def ksd_path(self, model=None, **kwargs):
        """``steindiag.ksd_path(trace, model, **kwargs)``; see :func:`steindiag.ksd_path`."""
        import steindiag

        return steindiag.ksd_path(self._obj, model, **kwargs)

    def ksd_test(self, model=None, **kwargs):
        """``steindiag.ksd_test(trace, model, **kwargs)``; see :func:`steindiag.ksd_test`."""
        import steindiag

        return steindiag.ksd_test(self._obj, model, **kwargs)

    def diagnose(self, model=None, **kwargs):
        """``steindiag.diagnose(trace, model, **kwargs)``; see :func:`steindiag.diagnose`."""
        import steindiag

        return steindiag.diagnose(self._obj, model, **kwargs)

    def control_variates(self, model=None, **kwargs):
        """``steindiag.control_variates(trace, model, **kwargs)``; see :func:`steindiag.control_variates`."""
        import steindiag

        return steindiag.control_variates(self._obj, model, **kwargs)

    def mmd(self, other=None, **kwargs):
        """``steindiag.mmd(trace, other, **kwargs)``; see :func:`steindiag.mmd`."""
        import steindiag

        return steindiag.mmd(self._obj, other, **kwargs)


def _register():
    register = getattr(xr, "register_datatree_accessor", None)
    datatree = getattr(xr, "DataTree", None)
    if register is None or datatree is None:  # pragma: no cover - xarray < 2024.10
        return False
    existing = getattr(datatree, _NAME, None)
    if existing is not None:
        accessor = getattr(existing, "_accessor", existing)
        if getattr(accessor, "_steindiag_accessor", False):
            # Already ours (module reloaded): replace silently with the current class.
            delattr(datatree, _NAME)
        else:
            warnings.warn(
                f"xarray.DataTree already has an attribute {_NAME!r} (from another package); "
                "the steindiag accessor is not registered. Call steindiag.ksd(idata, model) "
                "instead.",
                UserWarning,
                stacklevel=2,
            )
            return False
    register(_NAME)(SteinAccessor)
    return True


_register()
