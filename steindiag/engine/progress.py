"""Progress reporting for long kernel passes (no dependency: tqdm is used if installed)."""

import sys
import time

__all__ = ["make_progress"]

# Show a bar automatically only for passes expected to take longer than this (seconds).
_AUTO_SECONDS = 5.0


class _TextBar:
    """A one-line progress bar on stderr, for terminals without tqdm."""

    def __init__(self, total, desc):
        self.total = total
        self.done = 0
        self.desc = desc
        self.start = time.perf_counter()

    def update(self, amount):
        self.done += amount
        fraction = self.done / self.total if self.total else 1.0
        elapsed = time.perf_counter() - self.start
        bar = "#" * int(30 * fraction)
        sys.stderr.write(f"\r{self.desc}: [{bar:<30}] {100 * fraction:5.1f}% {elapsed:6.1f} s")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")
        sys.stderr.flush()


def _interactive():
    if "ipykernel" in sys.modules:
        return True
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def make_progress(progress, total, expected_seconds, desc="Stein kernel pass", unit="pair"):
    """A bar with ``update(n)``/``close()``, or None.

    ``progress`` is True (always), False (never) or None (only when interactive and the
    pass is expected to take more than a few seconds).
    """
    if progress is None:
        progress = _interactive() and expected_seconds > _AUTO_SECONDS
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextBar(total, desc)
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)
