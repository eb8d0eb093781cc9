"""Early drop's per-activation choice through the real daemon process and ``xtc ctl`` (sim backend):
``--early-drop`` / ``--no-early-drop`` / the configured default, kept in the state file and
across a restart.  The limiter itself on real interfaces: tests/root/test_early_drop_*.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import write_config

VRS = '[sim]\nseed = 1\n[[sim.vr]]\nname = "vr1"\noffered_pps = 30000\n[[sim.vr]]\nname = "vr2"\noffered_pps = 30000\n'


def xtc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xtc.cli", *args], capture_output=True, text=True, timeout=30, check=False)


def choices(d: Path) -> dict:
    return json.loads((d / "state" / "state.json").read_text())["early_drop"]["vrs"]


def test_the_activation_chooses_early_drop_and_the_state_keeps_it(tmp_path, start_daemon):
    cfg = write_config(tmp_path, VRS, extra="early_drop = true")
    d = start_daemon(cfg)
    assert xtc("ctl", "-c", str(cfg), "activate", "vr1", "20k", "--no-early-drop").returncode == 0
    assert xtc("ctl", "-c", str(cfg), "activate", "vr2", "20k").returncode == 0  # the configured default: on
    assert choices(tmp_path) == {"vr1": {"on": False}, "vr2": {"on": True}}
    r = xtc("ctl", "-c", str(cfg), "activate", "vr1", "20k", "--early-drop")
    assert r.returncode != 0 or "refused" in r.stderr  # already active: one clear refusal, nothing changed
    assert choices(tmp_path)["vr1"] == {"on": False}
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    d2 = start_daemon(cfg)  # the choices survive a restart
    assert choices(tmp_path) == {"vr1": {"on": False}, "vr2": {"on": True}}
    assert xtc("ctl", "-c", str(cfg), "deactivate", "vr2").returncode == 0
    assert choices(tmp_path) == {"vr1": {"on": False}}
    d2.signal(signal.SIGTERM)
    assert d2.wait() == 0


def test_a_bad_early_drop_field_is_one_clear_refusal(tmp_path, start_daemon):
    cfg = write_config(tmp_path, VRS)
    start_daemon(cfg)
    from xtc.daemon.ctl import ManagerClient

    with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10) as c:
        rep = c.request("activate", vr="vr1", setpoint_pps=20000, early_drop="yes")
    assert rep["ok"] is False and rep["error"]["code"] == "bad_field" and "early_drop" in rep["error"]["message"]
    assert "vr1" not in choices(tmp_path)


def test_status_says_whether_the_vr_has_early_drop(tmp_path, start_daemon):
    cfg = write_config(tmp_path, VRS)
    start_daemon(cfg)
    from xtc.daemon.ctl import ManagerClient

    with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10) as c:
        assert c.call("status", vr="vr1")["early_drop"] == {"on": False, "limit_pps": None,
                                                            "limit_bytes_per_s": None, "interfaces": []}
        c.call("activate", vr="vr1", setpoint_pps=20000, early_drop=True)
        assert c.call("status", vr="vr1")["early_drop"]["on"] is True
