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

from procs import wait_for


def test_sigterm_removes_what_the_command_made(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "xtc.cli", "bench", "daemon", "--file", "--vrs", "200", "--seconds", "1000000"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def made_its_directory() -> bool:
            if list(tmp_path.glob("xtc-bench-*")):
                return True
            assert p.poll() is None, p.stderr.read() if p.stderr else ""  # the bench still runs
            return False

        wait_for(made_its_directory, 60, "the bench's temporary directory", step_s=0.05)
        time.sleep(0.3)  # inside the measurement
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 128 + signal.SIGTERM
    assert list(tmp_path.glob("xtc-bench-*")) == [], "the temporary directory was left behind"


_FORKS = r"""
import os, signal, sys, time
from xtc_lab.unwind import unwinding

class Sub:  # the one thing unwinding needs of argparse's subparsers: a choices dict that register fills
    choices = {}

class Parser:
    def __init__(self): self.func = None; self._actions = []
    def get_default(self, _k): return self.func
    def set_defaults(self, func): self.func = func

@unwinding
def register(sub):
    p = Parser()
    p.func = run
    sub.choices["cmd"] = p

def run(_args):
    pid = os.fork()
    if pid == 0:  # a helper forked by the command (pyroute2's netns helpers are)
        try:
            time.sleep(30)
        finally:
            os._exit(7)  # what an unwinding child's cleanup would reach
    time.sleep(0.3)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    print(os.WIFSIGNALED(status) and os.WTERMSIG(status))

s = Sub()
register(s)
s.choices["cmd"].get_default("func")(None)
"""


def test_a_forked_child_dies_by_sigterm_as_before() -> None:
    out = subprocess.run([sys.executable, "-c", _FORKS], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(int(signal.SIGTERM)), "the child unwound the parent's stack instead of dying"
