"""indexer.workers.keep_freed_memory: a bulk load's large buffers are reused from malloc's heap instead of being
mapped (and page-faulted, and zeroed) afresh each time."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

# Allocate and free 40 MB buffers (above glibc's largest self-tuned mmap threshold, 32 MB) twenty times and print
# the minor page faults that took.
_PROBE = """
import resource, sys
from indexer.workers import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(20):
    buf = bytearray(40 << 20)
    buf[::4096] = b"x" * len(buf[::4096])
    del buf
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_large_buffers_are_reused_instead_of_mapped_again():
    if not hasattr(ctypes.CDLL(None), "mallopt"):  # not asked of this process: it would change its allocator
        pytest.skip("no glibc mallopt on this platform: keep_freed_memory changes nothing here")
    pages = (40 << 20) // 4096
    plain, kept = _faults("plain"), _faults("keep")
    assert plain >= 15 * pages  # every buffer mapped and touched afresh
    assert kept <= 3 * pages    # the first one's pages, reused
