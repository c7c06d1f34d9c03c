"""The package's version, in one place: the installed distribution's metadata."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("steindiag")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "unknown"
