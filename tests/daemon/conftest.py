"""Fixtures that run ``xtc daemon`` as a real process on the simulated backend.

Each daemon gets its own directory (state, ipc:// sockets) and an ephemeral metrics port, so
parallel runs do not collide.  Every process started here is killed at the end, even on failure.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from procs import DaemonProc
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
