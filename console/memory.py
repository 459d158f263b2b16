"""The console's memory goes back to the system when a run's numbers are let go.

The metrics store keeps a run's rows in numpy arrays of a few hundred KB to tens of MB, and a console lets a
whole store go when it opens another run or reattaches (the next store filled from the snapshot). glibc's
malloc serves a request over its mmap threshold (128 KB) from its own mapping, handed back to the system on
free; but each such free raises the threshold to the freed size (up to 32 MB), so the next store's arrays come
from malloc's heaps instead, where a freed array stays resident while anything after it lives. The freed
store then counted twice: ``bench/dashboard_load.py``'s reattach peaked at 519-674 MB over a dozen runs, the
spread set by where the first store's arrays had landed; with the threshold fixed, at 497 MB in each run.

``return_freed_arrays`` fixes the threshold (which also stops its raising). It costs a mapping per large array
(a store's tables grow by doubling, so a few per table), nothing for Python's small objects (their own
allocator). Other C libraries (musl, macOS) hand large blocks back already: nothing to do there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's own starting value, kept: an array this large or larger is mapped

_done = False


def return_freed_arrays() -> bool:
    """Fix glibc's mmap threshold for this process (once): a freed large array goes back to the system.

    True when it is fixed (now or before); False where the C library is not glibc or says no.
    """
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc's alone: another C library's mallopt means something else
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    if not _done:
        log.warning("glibc refused mallopt(M_MMAP_THRESHOLD, %d): a freed store may stay resident", MMAP_THRESHOLD_BYTES)
    return _done
