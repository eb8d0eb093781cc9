"""The policer's punishments by hand through ``xtc ctl`` and the real daemon process (sim backend):
``early-drop`` switches a running instance's choice (kept in the state file), ``vr-off`` is refused
by a backend that cannot turn a VR off (one clear message, exit 1, nothing changed), ``vr-on`` of a
VR the daemon did not turn off likewise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import write_config

VRS = '[sim]\nseed = 1\n[[sim.vr]]\nname = "vr1"\noffered_pps = 30000\n'


def xtc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xtc.cli", *args], capture_output=True, text=True, timeout=30, check=False)


def test_ctl_switches_early_drop_and_refuses_vr_off_on_the_sim_backend(tmp_path: Path, start_daemon) -> None:
    cfg = write_config(tmp_path, VRS, extra="early_drop = true")
    start_daemon(cfg)
    assert xtc("ctl", "-c", str(cfg), "activate", "vr1", "20k").returncode == 0
    state = tmp_path / "state" / "state.json"
    r = xtc("ctl", "-c", str(cfg), "early-drop", "vr1", "off")
    assert r.returncode == 0, r.stderr
    assert json.loads(state.read_text())["early_drop"]["vrs"]["vr1"] == {"on": False}
    def kept() -> tuple:  # what the refused requests must not change (the caps move every period)
        doc = json.loads(state.read_text())
        return doc["early_drop"], doc["instances"]["vr1"]["state"], doc["instances"]["vr1"]["setpoint_pps"], doc.get("vr_off")

    before = kept()
    r = xtc("ctl", "-c", str(cfg), "vr-off", "vr1", "--reason", "test")
    assert r.returncode == 1 and "refused (unsupported)" in r.stderr and "cannot turn a VR off" in r.stderr, r.stderr
    r = xtc("ctl", "-c", str(cfg), "vr-on", "vr1")
    assert r.returncode == 1 and "refused (bad_state)" in r.stderr, r.stderr
    r = xtc("ctl", "-c", str(cfg), "early-drop", "vr1", "maybe")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    assert kept() == before == ({"vrs": {"vr1": {"on": False}}}, "active", 20000.0, None)
    r = xtc("ctl", "-c", str(cfg), "--json", "status", "vr1")
    assert json.loads(r.stdout)["result"]["state"] == "active"
