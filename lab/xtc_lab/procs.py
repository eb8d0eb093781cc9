"""Child processes the testbed and the benchmarks start, stopped the one way: SIGTERM, then SIGKILL.

Public API
----------
stop_process, stop_processes
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

__all__ = ["stop_process", "stop_processes"]


def stop_process(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` if it still runs and wait for it; SIGKILL it if it has not ended by ``timeout_s``
    (and reap it).  None, or a process that has ended: nothing to do."""
    stop_processes([proc], timeout_s)


def stop_processes(procs: Iterable[subprocess.Popen | None], timeout_s: float = 10.0) -> None:
    """:func:`stop_process` for several at once: all of them sent SIGTERM first, then each waited for (up to
    ``timeout_s`` each) and SIGKILLed if it has not ended, so that they stop side by side."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for p in running:
        p.terminate()
    for p in running:
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
