"""glibc's allocator, told to keep freed memory for reuse instead of handing it back at once.

A service that relays or encodes messages of a few MiB (a stream's Arrow batches through the
gateway) allocates and frees such blocks all the time. By default glibc serves them with fresh
mappings, or trims the heap under them when they are freed, so the kernel has to find and zero
new pages for every message: relaying a 1 GiB stream cost the gateway about twice the system
time it costs with freed blocks kept (see docs/benchmarks.md). The fixed thresholds below are
within the range glibc's own adaptive ones reach (at most 32 MiB and 64 MiB), only reached at
once. The price is memory kept: after relaying streams of 1 GiB, the gateway's resident memory
stays about 100 MiB above where it started, and grows no further. Thresholds an operator gives
glibc (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or the glibc.malloc tunables in
GLIBC_TUNABLES) win over these.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap, and are reused once freed.
MMAP_THRESHOLD_BYTES = 16 * 1024 * 1024
#: Free memory at the heap's top is handed back to the system beyond this much.
TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024
_OPERATOR_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_OPERATOR_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def _operators_choice() -> bool:
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(name in os.environ for name in _OPERATOR_VARIABLES) or any(
        name in tunables for name in _OPERATOR_TUNABLES
    )


def keep_freed_memory() -> bool:
    """Sets the thresholds; False where the allocator is not glibc's, or the operator set them."""
    if _operators_choice():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not done:
        log.info("the allocator's thresholds could not be set; its defaults stay")
    return done
