"""How much memory a computation may still take, so that a request too large for it is
refused before it starts (with the size it would need) instead of failing midway.

``available_memory`` is the smallest of the limits that apply to this process: the
memory the system reports available (Linux ``MemAvailable``), what is left of the
process's control group's limit (cgroup v2 ``memory.max`` - ``memory.current``, or v1),
and what is left of its address-space limit (``ulimit -v``). ``check_memory`` raises a
``MemoryError`` that says what was asked, how much it needs and what to change.
"""

import os

try:
    import resource
except ImportError:   # not POSIX (Windows): no address-space limit to read
    resource = None

__all__ = ["available_memory", "check_memory", "GIB"]

GIB = 2.0**30
# Without any readable limit (not Linux): assume this much.
_FALLBACK_BYTES = 4 * 2**30
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path):
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None   # "max": no limit


def _meminfo_available():
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_left():
    for limit_path, usage_path in _CGROUP_FILES:
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        # cgroup v1 reports "no limit" as a huge number (about 2^63).
        if limit is not None and usage is not None and limit < 2**60:
            return max(limit - usage, 0)
    return None


def _address_space_left():
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory():
    """Bytes this process can still allocate: the smallest of the system's available
    memory, its control group's remaining limit and its address-space limit (4 GiB when
    none can be read)."""
    limits = [value for value in (_meminfo_available(), _cgroup_left(), _address_space_left())
              if value is not None]
    return min(limits) if limits else _FALLBACK_BYTES


def check_memory(need, what, advice, limit=None):
    """Raise ``MemoryError`` when ``need`` bytes are more than ``limit`` (default: what is
    available now): "<what> would need about X GiB, more than the Y GiB available. <advice>"."""
    limit = available_memory() if limit is None else limit
    if need > limit:
        raise MemoryError(
            f"{what} would need about {need / GIB:.2f} GiB, more than the "
            f"{limit / GIB:.2f} GiB available now. {advice}")
