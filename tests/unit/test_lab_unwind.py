"""SIGTERM unwinds a testbed command like Ctrl-C: what it made is removed on the way out.

Found when a stopped ``xtc bench daemon`` left its network namespaces behind: without a handler
SIGTERM kills the process where it stands and no ``finally`` runs.  The benchmark on a counters
file (no root) shows the same path with its temporary directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_sigterm_removes_what_the_command_made(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "xtc.cli", "bench", "daemon", "--file", "--vrs", "200", "--seconds", "1000000"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("xtc-bench-*")):
            assert p.poll() is None, p.stderr.read() if p.stderr else ""
            assert time.monotonic() < deadline, "the bench made no temporary directory in 60 s"
            time.sleep(0.05)
        time.sleep(0.3)  # inside the measurement
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 128 + signal.SIGTERM
    assert list(tmp_path.glob("xtc-bench-*")) == [], "the temporary directory was left behind"
