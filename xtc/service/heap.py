"""The C library's heap, behind one small adapter (every service's process: the daemon, the policer's
engine): what glibc keeps of freed memory, given back to the system.  Elsewhere than glibc both calls do
nothing and say so (False).

- :func:`release_large_blocks` (once, at start): blocks of at least :data:`MMAP_THRESHOLD_BYTES` are
  mmapped, so they go back when freed.  ZeroMQ allocates each received frame; without a fixed threshold,
  glibc raises it after the first large free and keeps the memory of large messages for ever.
- :func:`release_free_heap` (now and then): ``malloc_trim(0)`` returns every whole free page of every
  arena (``madvise``), keeping the memory in use where it is.  The policer's engine allocates and frees a
  great deal per period (every daemon's samples message is a buffer libzmq allocates on its I/O thread
  and the engine's threads free), and with many threads and connections the free pages glibc holds grow
  with the fleet (issue 50's memory goal: about 25 KB per router at 1,000 routers,
  docs/design/policer-memory.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["MMAP_THRESHOLD_BYTES", "release_free_heap", "release_large_blocks"]

#: Blocks of at least this many bytes are mmapped by glibc's malloc (and so go back when freed), bytes.
MMAP_THRESHOLD_BYTES = 64 * 1024
_M_MMAP_THRESHOLD = -3

_libc: Any = None


def _glibc() -> Any:
    """The C library, once (False where it cannot be loaded)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except (OSError, TypeError):
            _libc = False
    return _libc


def release_large_blocks() -> bool:
    """Make glibc return freed large blocks (received messages) to the system.  False if not glibc."""
    libc = _glibc()
    try:
        return bool(libc and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except AttributeError:  # not glibc
        return False


def release_free_heap() -> bool:
    """Give the C library's free heap pages back to the system; False where that is not glibc."""
    libc = _glibc()
    try:
        fn = libc and libc.malloc_trim
    except AttributeError:  # not glibc
        return False
    if not fn:
        return False
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    fn(0)
    return True
