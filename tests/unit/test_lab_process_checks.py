"""The lab's process checks on real processes: ancestry (for the measurement lock) and whether a
killed process is gone (a zombie counts as gone)."""

from __future__ import annotations

import os
import subprocess
import time

from procs import until
from xtc_lab.lab import cgroups
from xtc_lab.lab.harness import ancestors


def test_ancestors_walk_up_to_init() -> None:
    up = ancestors(os.getpid())
    assert up[0] == os.getppid()
    assert up[-1] == 1
    assert os.getpid() not in up


def test_ancestors_of_a_child_start_with_this_process() -> None:
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert ancestors(p.pid)[:2] == [os.getpid(), os.getppid()]
    finally:
        p.kill()
        p.wait()
    assert ancestors(p.pid) == []


def test_a_zombie_and_a_reaped_process_are_gone_a_live_one_is_not() -> None:
    p = subprocess.Popen(["sleep", "30"])
    assert not cgroups._is_gone(p.pid)
    p.kill()
    assert until(lambda: cgroups._is_gone(p.pid), 5, step_s=0.01)  # a zombie until reaped
    p.wait()
    assert cgroups._is_gone(p.pid)


def test_kill_pids_stops_a_process_that_ignores_nothing() -> None:
    p = subprocess.Popen(["sleep", "30"])
    t0 = time.monotonic()
    cgroups.kill_pids([p.pid])
    assert p.wait(timeout=5) == -15 and time.monotonic() - t0 < 3
