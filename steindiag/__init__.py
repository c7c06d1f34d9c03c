"""steindiag: kernel Stein discrepancy diagnostics for MCMC output."""

from importlib.metadata import PackageNotFoundError, version

from steindiag._ksd import ksd, ksd_path

try:
    __version__ = version("steindiag")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "unknown"

__all__ = ["ksd", "ksd_path", "__version__"]
