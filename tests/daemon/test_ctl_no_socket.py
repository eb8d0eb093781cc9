"""`xtc ctl` toward an ipc:// socket that does not exist says so, not only "no answer"."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from xtc.daemon.ctl import ManagerClient, ManagerError


def test_a_missing_ipc_socket_is_named(tmp_path: Path) -> None:
    sock = tmp_path / "manager.sock"
    with ManagerClient(f"ipc://{sock}", timeout_s=0.2) as c, pytest.raises(ManagerError) as e:
        c.request("status")
    assert e.value.code == "timeout"
    assert f"no socket {sock}" in str(e.value) and "manager.endpoint" in str(e.value)


def test_the_command_line_prints_it(tmp_path: Path) -> None:
    sock = tmp_path / "manager.sock"
    r = subprocess.run([str(Path(sys.executable).parent / "xtc"), "ctl", "-e", f"ipc://{sock}", "--timeout", "0.2", "status"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"no socket {sock}" in r.stderr, r.stderr


def test_an_existing_socket_that_does_not_answer_says_no_answer_only(tmp_path: Path) -> None:
    sock = tmp_path / "manager.sock"
    ctx = zmq.Context.instance()
    rep = ctx.socket(zmq.ROUTER)  # binds the file, never answers
    rep.bind(f"ipc://{sock}")
    try:
        with ManagerClient(f"ipc://{sock}", timeout_s=0.2) as c, pytest.raises(ManagerError) as e:
            c.request("status")
        assert "within 200 ms" in str(e.value) and "no socket" not in str(e.value)
    finally:
        rep.close(0)
