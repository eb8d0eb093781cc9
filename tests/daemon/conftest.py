"""Fixtures that run ``xtc daemon`` as a real process on the simulated backend.

Each daemon gets its own directory (state, ipc:// sockets) and an ephemeral metrics port, so
parallel runs do not collide.  Every process started here is killed at the end, even on failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from xtc.daemon.ctl import ManagerClient


def write_config(d: Path, vrs: str, extra: str = "", period_s: float = 0.5, kind: str = "xtc") -> Path:
    p = d / "xtcd.toml"
    p.write_text(
        f"""schema = "xtc-daemon/1"
[daemon]
backend = "sim"
control_period_s = {period_s}
state_dir = "{d}/state"
{extra}
[controller]
kind = "{kind}"
[manager]
endpoint = "ipc://{d}/mgr.sock"
pub_endpoint = "ipc://{d}/pub.sock"
max_message_bytes = 4096
[metrics]
enabled = true
address = "127.0.0.1"
port = 0
[log]
format = "json"
level = "info"
{vrs}
"""
    )
    return p


class DaemonProc:
    """One ``xtc daemon`` process and its JSON-lines log, read by a thread."""

    def __init__(self, config: Path):
        self.config = config
        self.events: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xtc.cli", "daemon", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw.append(line)
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def wait_event(self, name: str, timeout_s: float = 20.0, after: int = 0, pred: Callable[[dict], bool] = lambda e: True) -> dict:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for e in self.events[after:]:
                if e.get("event") == name and pred(e):
                    return e
            if self.proc.poll() is not None and not self._t.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no {name!r} event; log:\n{''.join(self.raw[-40:])}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float = 15.0) -> int:
        rc = self.proc.wait(timeout_s)
        self._t.join(5)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def start_daemon():
    procs: list[DaemonProc] = []

    def start(config: Path) -> DaemonProc:
        d = DaemonProc(config)
        procs.append(d)
        d.wait_event("started")
        return d

    try:
        yield start
    finally:
        for d in procs:
            d.kill()


@pytest.fixture
def client_for():
    clients: list[ManagerClient] = []

    def make(d: Path, timeout_s: float = 5.0) -> ManagerClient:
        c = ManagerClient(f"ipc://{d}/mgr.sock", timeout_s=timeout_s)
        clients.append(c)
        return c

    try:
        yield make
    finally:
        for c in clients:
            c.close()


def hypervisor_caps(d: Path) -> dict[str, float | None]:
    return json.loads((d / "state" / "sim-hypervisor.json").read_text())["caps"]


__all__ = ["write_config", "DaemonProc", "hypervisor_caps", "signal"]
