"""Memory habits of a long-running service: keep freed memory, and keep long-lived objects
out of the cyclic collector's sweeps.

Keep freed memory for reuse instead of handing it back to the kernel at once (glibc only).

Each poll allocates and frees arrays of a few megabytes per counter. Above glibc's mmap
threshold every such array is fresh memory from the kernel, and its first touch costs a page
fault per 4 KiB: on a busy 2-core machine that was a third of a 100k-port poll, more than the
arithmetic. A fixed threshold at glibc's maximum (32 MiB on 64-bit) and a trim threshold above
a poll's working set keep those arrays in the heap, so the next poll reuses warm pages. The
process's memory stays near its peak poll, which it needs again ten seconds later anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

# mallopt(3) parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
MMAP_THRESHOLD = 32 * 2**20
#: Free memory at the top of the heap kept before it is returned: a large fabric's poll.
TRIM_THRESHOLD = 1 * 2**30


def keep_freed_memory() -> bool:
    """Apply the thresholds; False where the C library is not glibc (nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl and others have no mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap_ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return mmap_ok and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def freeze_long_lived() -> int:
    """Collect once, then exempt every object alive now from later collections; how many.

    Call it when start-up has built what lives as long as the process. Reference counting still
    frees a frozen object that is dropped; only a reference cycle among them would stay.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
