"""``xtc daemon`` as a process on the simulated backend: control, API over ZeroMQ, signals, state."""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from xtc.daemon.ctl import watch_samples

from .conftest import hypervisor_caps, write_config

# The tests that hold rates or time a control period run alone (exclusive); those that check refusals, a fuzz
# (a floor of 1,000 messages in 30 s, where a quiet host does 3,000 in 5 s) and the config run in the parallel part.

VR1 = '[[sim.vr]]\nname = "vr1"\noffered_pps = 100000\ninitial_cap_percent = 80.0\n'
VR2 = '[[sim.vr]]\nname = "vr2"\noffered_pps = 50000\ninitial_cap_percent = 60.0\n'


def samples_for(d, vr: str, seconds: float) -> list[dict]:
    out = []
    end = time.monotonic() + seconds
    for s in watch_samples(f"ipc://{d}/pub.sock", vr, timeout_s=2.0):
        out.append(s)
        if time.monotonic() >= end:
            break
    return out


def within(samples: list[dict], setpoint: float, tol: float = 0.10) -> np.ndarray:
    """The rate over the samples (their mean) is within ``tol`` of the setpoint.

    The simulated VR's forwarding is noisy (about 9% standard deviation over a 0.5 s period at
    this drop rate, as a capped VR is), so single samples may stray; their mean may not.
    """
    m = np.array([s["forwarded_pps"] for s in samples], dtype=float)
    assert len(m) >= 4, f"too few samples: {m}"
    assert abs(m.mean() - setpoint) <= tol * setpoint, m
    return m


@pytest.mark.exclusive  # times and rates: run alone
def test_holds_setpoint_follows_live_change_metrics_and_sigterm_restores(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1 + VR2)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    assert c.call("activate", vr="vr1", setpoint_pps=30000)["state"] == "active"
    run = samples_for(tmp_path, "vr1", 8.0)
    assert all(s["setpoint_pps"] == 30000 for s in run)
    within(run[len(run) // 2:], 30000)
    # Live setpoint change through the API.
    assert c.call("setpoint", vr="vr1", setpoint_pps=60000)["setpoint_pps"] == 60000
    run = samples_for(tmp_path, "vr1", 6.0)
    within(run[len(run) // 2:], 60000)
    st = c.call("status", vr="vr1")
    assert st["original_cap_percent"] == 80.0
    assert hypervisor_caps(tmp_path)["vr1"] == pytest.approx(st["cap_percent"], rel=1e-6)
    assert hypervisor_caps(tmp_path)["vr2"] == 60.0  # not controlled, never touched
    # Prometheus endpoint.
    port = d.wait_event("started")["metrics_port"]
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'xtc_vr_setpoint_pps{vr="vr1"} 60000.0' in body
    assert 'xtc_requests_total{cmd="activate",outcome="ok"} 1.0' in body
    # SIGTERM: original caps back, exit 0, instance remembered for the next start.
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    assert hypervisor_caps(tmp_path) == {"vr1": 80.0, "vr2": 60.0}
    assert d.wait_event("cap_restored")["vr"] == "vr1"
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state["instances"]["vr1"]["setpoint_pps"] == 60000


@pytest.mark.exclusive  # times and rates: run alone
def test_sigkill_and_restart_resume_instances_and_true_originals(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1 + VR2)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    c.call("activate", vr="vr1", setpoint_pps=30000)
    c.call("activate", vr="vr2", setpoint_pps=20000)
    time.sleep(3.0)
    c.call("pause", vr="vr2")
    before = {v["vr"]: v for v in c.call("list")["vrs"]}
    d.proc.kill()
    d.wait()
    caps = hypervisor_caps(tmp_path)
    # The VRs keep the caps XTC gave them (as they would on a real host)...
    assert caps["vr1"] < 60.0 and caps["vr2"] < 50.0
    d2 = start_daemon(cfg)
    c2 = client_for(tmp_path)
    after = {v["vr"]: v for v in c2.call("list")["vrs"]}
    for vr in ("vr1", "vr2"):
        for k in ("state", "setpoint_pps", "original_cap_percent"):
            assert after[vr][k] == before[vr][k], (vr, k)
    assert after["vr2"]["state"] == "paused"
    assert after["vr1"]["original_cap_percent"] == 80.0 and after["vr2"]["original_cap_percent"] == 60.0
    # ...and the resumed instance keeps holding its setpoint.
    run = samples_for(tmp_path, "vr1", 5.0)
    within(run[len(run) // 2:], 30000)
    # ...and still knows the true originals, not the caps it found at restart.
    d2.signal(signal.SIGTERM)
    assert d2.wait() == 0
    assert hypervisor_caps(tmp_path) == {"vr1": 80.0, "vr2": 60.0}


@pytest.mark.exclusive  # times and rates: run alone
def test_sighup_reload_good_bad_and_fixed_keys(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    c.call("activate", vr="vr1", setpoint_pps=30000)
    good = cfg.read_text().replace('kind = "xtc"', 'kind = "deadbeat"').replace("control_period_s = 0.5", "control_period_s = 0.4")
    cfg.write_text(good)
    n = len(d.events)
    d.signal(signal.SIGHUP)
    e = d.wait_event("reloaded", after=n)
    assert "controller.kind" in e["changed"] and "daemon.control_period_s" in e["changed"]
    assert c.call("status", vr="vr1")["state"] == "active"
    # A broken file is refused; the daemon keeps the old configuration and keeps serving.
    cfg.write_text(good + "\nnonsense = [\n")
    n = len(d.events)
    d.signal(signal.SIGHUP)
    assert "not valid TOML" in d.wait_event("reload_refused", after=n)["error"]
    assert c.call("ping")["pong"] is True
    # A key that needs a restart is refused too.
    cfg.write_text(good.replace("max_message_bytes = 4096", "max_message_bytes = 8192"))
    n = len(d.events)
    d.signal(signal.SIGHUP)
    assert "manager.max_message_bytes" in d.wait_event("reload_refused", after=n)["error"]
    assert c.call("status", vr="vr1")["setpoint_pps"] == 30000
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


BAD = [
    (b"{this is not json", "bad_json"),
    (b"\x00\xff\x10", "bad_json"),
    (b"[]", "bad_json"),
    (b'{"v": 1, "cmd": "activate", "vr": "ghost", "setpoint_pps": 1000}', "unknown_vr"),
    (b'{"v": 1, "cmd": "setpoint", "vr": "ghost", "setpoint_pps": 1000}', "unknown_vr"),
    (b'{"v": 1, "cmd": "format_disk"}', "unknown_command"),
    (b'{"v": 1, "cmd": "setpoint", "vr": "vr1", "setpoint_pps": -5}', "bad_field"),
    (b'{"v": 1, "cmd": "setpoint", "vr": "vr1", "setpoint_pps": NaN}', "bad_json"),
    (b'{"v": 1, "cmd": "setpoint", "vr": "vr1", "setpoint_pps": 1e300}', "bad_field"),
    (b'{"v": 1, "cmd": "setpoint", "vr": "vr1", "setpoint_pps": "fast"}', "bad_field"),
    (b'{"v": 1, "cmd": "setpoint", "vr": ["vr1"], "setpoint_pps": 10}', "bad_field"),
    (b'{"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 10}', "bad_state"),
    (b'{"v": "1", "cmd": "list"}', "bad_version"),
    (b'{"v": 1, "cmd": "list", "pad": "' + b"x" * 5000 + b'"}', "too_large"),
]


def test_bad_input_is_refused_clearly_and_changes_nothing(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    c.call("activate", vr="vr1", setpoint_pps=30000)
    c.call("pause", vr="vr1")  # freeze the cap so the listing can be compared exactly
    keys = ("vr", "state", "setpoint_pps", "cap_percent", "original_cap_percent")
    snap = lambda: [{k: v[k] for k in keys} for v in c.call("list")["vrs"]]  # noqa: E731
    before = snap()
    state_before = (tmp_path / "state" / "state.json").read_text()
    for raw, code in BAD:
        rep = c.send_raw(raw)
        assert rep["ok"] is False, raw
        assert rep["error"]["code"] == code, (raw, rep)
        assert len(rep["error"]["message"]) > 5
    rep = c.send_raw([b'{"v":1,"cmd":"list"}', b"second frame"])
    assert rep["error"]["code"] == "bad_json"
    assert snap() == before
    assert (tmp_path / "state" / "state.json").read_text() == state_before
    # Beyond the transport limit ZeroMQ drops the message (and the connection): no reply, daemon fine.
    c.timeout_ms = 1000
    with pytest.raises(Exception, match="timeout"):
        c.send_raw(b"x" * (4096 * 16 + 1))
    c.timeout_ms = 5000
    assert snap() == before
    assert d.proc.poll() is None


def test_fuzz_thousands_of_random_messages(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1 + VR2)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    rng = random.Random(20240607)
    cmds = ["ping", "list", "status", "activate", "pause", "resume", "deactivate", "setpoint", "nope", "", None, 3]
    values = [None, True, -1, 0, 1, 2.5, 1e6, 1e12, -1e300, "vr1", "vr2", "ghost", "", [], {}, "x" * 100, 10**30]
    t0 = time.monotonic()
    n = 0
    while n < 3000 and time.monotonic() - t0 < 30:
        kind = rng.random()
        if kind < 0.15:
            raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        else:
            doc = {}
            for key in ("v", "cmd", "vr", "setpoint_pps", "id", "junk"):
                if rng.random() < 0.7:
                    pick = {"v": [1, 1, 1, 2, "1"], "cmd": cmds, "vr": values, "setpoint_pps": values}.get(key, values)
                    doc[key] = rng.choice(pick)
            raw = json.dumps(doc).encode()
            if kind > 0.95:
                raw = raw[: rng.randint(0, len(raw))]
        rep = c.send_raw(raw)
        assert set(rep) >= {"v", "id", "ok"}
        if not rep["ok"]:
            assert rep["error"]["code"] != "internal", (raw, rep)
        n += 1
    assert n >= 1000, f"only {n} messages in 30 s"
    # Still alive, consistent and controlling with caps within bounds.
    vrs = c.call("list")["vrs"]
    for v in vrs:
        if v["state"] != "inactive":
            assert 1.0 <= v["cap_percent"] <= 100.0 and math.isfinite(v["cap_percent"])
            assert v["original_cap_percent"] == {"vr1": 80.0, "vr2": 60.0}[v["vr"]]
    d.signal(signal.SIGTERM)
    assert d.wait() == 0
    assert hypervisor_caps(tmp_path) == {"vr1": 80.0, "vr2": 60.0}


def test_bad_config_refused_at_start_and_by_check_config(tmp_path):
    cfg = write_config(tmp_path, VR1, extra="control_period_ms = 100")
    r = subprocess.run([sys.executable, "-m", "xtc.cli", "daemon", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "daemon.control_period_ms" in r.stdout + r.stderr and "control_period_s" in r.stdout + r.stderr
    assert not (tmp_path / "state").exists()
    r = subprocess.run([sys.executable, "-m", "xtc.cli", "check-config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "daemon.control_period_ms" in r.stderr
    good = write_config(tmp_path, VR1)
    r = subprocess.run([sys.executable, "-m", "xtc.cli", "check-config", str(good)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "OK" in r.stdout
