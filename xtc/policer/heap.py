"""The C library's heap, behind one small adapter: give its free pages back to the system.

The engine's process allocates and frees a great deal per period (every daemon's samples message is a
buffer libzmq allocates on its I/O thread and the engine's threads free; the per-batch lists, arrays and
dictionaries): glibc keeps what was freed in its arenas, and with many threads and connections the free
pages held grow with the fleet (issue 50's memory goal: about 25 KB per router at 1,000 routers,
docs/design/policer-memory.md).  ``malloc_trim(0)`` returns every whole free page of every arena to the
system (``madvise``), keeping the memory in use where it is.  Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["release_free_heap"]

_trim: Any = None


def _load() -> Any:
    global _trim
    if _trim is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            fn = libc.malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
            _trim = fn
        except (OSError, AttributeError):  # not glibc
            _trim = False
    return _trim


def release_free_heap() -> bool:
    """Give the C library's free heap pages back to the system; False where that is not glibc."""
    fn = _load()
    if not fn:
        return False
    fn(0)
    return True
