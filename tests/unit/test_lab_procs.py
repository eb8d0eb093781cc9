"""xtc_lab.procs: a child stopped by SIGTERM, one that ignores it SIGKILLed after the timeout, both reaped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from xtc_lab.procs import stop_process, stop_processes

_IGNORES_TERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def _child(code: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
    return p


def test_a_child_that_ends_on_sigterm_is_stopped_by_it_and_reaped() -> None:
    p = _child("import time; print('ready', flush=True); time.sleep(60)")
    stop_process(p, 10)
    assert p.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    p = _child(_IGNORES_TERM)
    t = time.monotonic()
    stop_process(p, 0.5)
    assert p.returncode == -signal.SIGKILL and 0.5 <= time.monotonic() - t < 10


def test_several_are_stopped_side_by_side_and_none_or_an_ended_one_is_left_alone() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    a, b = _child(_IGNORES_TERM), _child(_IGNORES_TERM)
    t = time.monotonic()
    stop_processes([None, ended, a, b], 0.5)
    # Each waited for up to its timeout after both were sent SIGTERM: about 1 s for the two, not more.
    assert a.returncode == b.returncode == -signal.SIGKILL and time.monotonic() - t < 10
    assert ended.returncode == 0
    stop_process(None)
