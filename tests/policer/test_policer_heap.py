"""The C library's free heap given back (xtc/service/heap.py): on glibc, pages freed in the middle of the
heap stay resident until ``malloc_trim``; after it the process holds what it uses."""

from __future__ import annotations

import subprocess
import sys

# In a process of its own: 60,000 buffers of 2,000 bytes (malloc'd: larger than Python's small objects),
# one kept in ten (so the heap's top stays in use and nothing is given back by free()), the rest freed.
_CHILD = """
import resource, sys
from xtc.service.heap import release_free_heap
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
blocks = [bytearray(2000) for _ in range(60_000)]
kept = blocks[::10]
del blocks
before = rss()
ok = release_free_heap()
print(ok, before, rss())
"""


def test_free_pages_go_back_and_what_is_used_stays() -> None:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True)
    ok, before, after = out.stdout.split()
    assert ok == "True"  # this machine's C library is glibc
    freed_mb = (int(before) - int(after)) / 1e6
    assert freed_mb > 60, f"only {freed_mb:.1f} MB of about 108 MB freed went back"

