"""A stand-in fleet (``python -m xtc_lab.policer_fleet``) started by a bench or profile that is killed
stops by itself: it used to run on for good, taking CPU from every later measurement on the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from procs import until, wait_for

PARENT = """
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-m", "xtc_lab.policer_fleet", "--routers", "2", "--vrs", "1", "--dead", "0",
                      "--out", sys.argv[1]], stdout=subprocess.DEVNULL)
print(p.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_the_fleet_stops_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(out)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    fleet_pid = int(parent.stdout.readline())
    try:
        wait_for(out.exists, 30, "the fleet to write its routers", step_s=0.05)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert until(lambda: not _alive(fleet_pid), 5, step_s=0.05), "the fleet outlived the process that started it"
    finally:
        parent.kill()
        try:
            os.kill(fleet_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
