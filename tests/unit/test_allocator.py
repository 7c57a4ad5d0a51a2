"""The allocator's thresholds: set in glibc, left alone where the operator chose them."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from service_runtime.allocator import keep_freed_memory

_GLIBC = hasattr(ctypes.CDLL(None), "gnu_get_libc_version")

_FREE_AND_REUSE = """
import ctypes, resource, sys
from service_runtime.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def messages(blocks, size):
    pointers = [libc.malloc(size) for _ in range(blocks)]
    for pointer in pointers:
        ctypes.memset(pointer, 1, size)
    for pointer in pointers:
        libc.free(pointer)
messages(4, 4 * 1024 * 1024)
before = faults()
for _ in range(20):
    messages(4, 4 * 1024 * 1024)
print(faults() - before)
"""


def _page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _FREE_AND_REUSE, mode],
        env={"PYTHONPATH": "."},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator only")
def test_freed_blocks_are_reused_without_new_pages() -> None:
    """20 rounds of four 4 MiB blocks, written whole, then freed (messages in flight): with
    the thresholds set, the first round's pages serve every later one; with glibc's defaults,
    the heap is trimmed under the freed blocks and each round faults in 16 MiB of new pages
    (4,096 faults)."""
    assert _page_faults("keep") < 1_024
    assert _page_faults("default") > 10 * 4_096


@pytest.mark.skipif(not _GLIBC, reason="glibc's allocator only")
def test_the_operators_thresholds_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576")
    assert keep_freed_memory() is False
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert keep_freed_memory() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    assert keep_freed_memory() is True
