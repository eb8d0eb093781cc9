"""Faults from the adversarial probe (issue 13), on real daemon processes: a real full tmpfs, real
SIGKILLs, a second daemon, a multipart flood from a real ZeroMQ client, bad state files."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import zmq
from procs import free_port

from .conftest import hypervisor_caps, write_config

VR1 = '[[sim.vr]]\nname = "vr1"\noffered_pps = 100000\ninitial_cap_percent = 80.0\n'
VR2 = '[[sim.vr]]\nname = "vr2"\noffered_pps = 50000\ninitial_cap_percent = 60.0\n'
PAGE = 4096


def run_daemon(cfg: Path, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xtc.cli", "daemon", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=timeout_s)


@contextmanager
def small_tmpfs(d: Path, size: str = "512k"):
    """A real tmpfs of ``size`` mounted on ``d`` (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def fill(d: Path, leave_pages: int = 0) -> Path:
    """Fill the file system of ``d`` with page-sized writes until it is full; free ``leave_pages``."""
    filler = d / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    size = 0
    try:
        while True:
            try:
                os.write(fd, b"\0" * PAGE)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
            size += PAGE
        os.ftruncate(fd, max(0, size - leave_pages * PAGE))
    finally:
        os.close(fd)
    return filler


def state_doc(d: Path) -> dict:
    return json.loads((d / "state" / "state.json").read_text())


# ------------------------------------------------------------------------------- high 2: full disk

def test_full_disk_refuses_changes_writes_no_cap_and_loses_nothing(tmp_path, start_daemon, client_for):
    with small_tmpfs(tmp_path / "state"):
        cfg = write_config(tmp_path, VR1 + VR2)
        d = start_daemon(cfg)
        c = client_for(tmp_path)
        c.call("activate", vr="vr1", setpoint_pps=30000)
        assert state_doc(tmp_path)["instances"]["vr1"]["setpoint_pps"] == 30000
        filler = fill(tmp_path / "state")
        for cmd, fields in (("setpoint", {"vr": "vr1", "setpoint_pps": 12345}),
                            ("activate", {"vr": "vr2", "setpoint_pps": 20000})):
            rep = c.request(cmd, **fields)
            assert rep["ok"] is False, rep
            assert rep["error"]["code"] == "state_not_saved"
            assert str(tmp_path / "state" / "state.json") in rep["error"]["message"]
            assert "No space left on device" in rep["error"]["message"]
        # Nothing changed: not in the daemon, not in the file, not on the (simulated) hypervisor.
        assert c.call("status", vr="vr1")["setpoint_pps"] == 30000
        assert c.call("status", vr="vr2")["state"] == "inactive"
        assert hypervisor_caps(tmp_path)["vr2"] == 60.0
        assert set(state_doc(tmp_path)["instances"]) == {"vr1"}
        assert c.call("ping")["pong"] is True
        # A real SIGKILL, space back, a restart: exactly what was acknowledged.
        d.proc.kill()
        d.wait()
        filler.unlink()
        d2 = start_daemon(cfg)
        assert c.call("status", vr="vr1")["setpoint_pps"] == 30000
        assert c.call("status", vr="vr2")["state"] == "inactive"
        assert c.call("activate", vr="vr2", setpoint_pps=20000)["state"] == "active"
        assert state_doc(tmp_path)["instances"]["vr2"]["setpoint_pps"] == 20000
        d2.signal(signal.SIGTERM)
        assert d2.wait() == 0
        assert hypervisor_caps(tmp_path) == {"vr1": 80.0, "vr2": 60.0}


def test_full_disk_at_start_is_one_clear_line_and_a_non_zero_exit(tmp_path):
    with small_tmpfs(tmp_path / "state"):
        cfg = write_config(tmp_path, VR1)
        # A state too big for the space left: 40 instances (of VRs that are gone) to rewrite.
        inst = {"state": "paused", "setpoint_pps": 1000.0, "original_cap_percent": None, "cap_percent": 50.0}
        (tmp_path / "state" / "state.json").write_text(json.dumps(
            {"schema": "xtc-daemon-state/1", "instances": {f"gone{i}": inst for i in range(40)},
             "pending_restores": {}}))
        fill(tmp_path / "state", leave_pages=2)  # enough for the simulated hypervisor's file only
        r = run_daemon(cfg)
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        assert "Traceback" not in out, out
        assert [ln for ln in out.splitlines() if not ln.startswith("{")] == [
            f"xtc daemon: cannot write state file {tmp_path}/state/state.json: No space left on device; "
            "requests could not be saved, not starting"], out


# ------------------------------------------------------------------- medium 3: two daemons, one place

def test_second_daemon_on_the_same_state_directory_refuses_naming_the_first(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    c.call("activate", vr="vr1", setpoint_pps=30000)
    r = run_daemon(cfg)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"in use by another xtc daemon (pid {d.proc.pid}" in out and "Traceback" not in out, out
    # The first one is untouched: it answers, keeps its instance and its state file.
    assert c.call("status", vr="vr1")["setpoint_pps"] == 30000
    assert state_doc(tmp_path)["instances"]["vr1"]["setpoint_pps"] == 30000
    d.signal(signal.SIGTERM)
    assert d.wait() == 0



def test_second_daemon_on_the_same_port_says_which_endpoint_is_in_use(tmp_path, start_daemon):
    port = free_port()
    a, b = tmp_path / "a", tmp_path / "b"
    for x in (a, b):
        x.mkdir()
    cfg_a = write_config(a, VR1)
    cfg_a.write_text(cfg_a.read_text().replace(f'endpoint = "ipc://{a}/mgr.sock"', f'endpoint = "tcp://127.0.0.1:{port}"'))
    cfg_b = write_config(b, VR1)
    cfg_b.write_text(cfg_b.read_text().replace(f'endpoint = "ipc://{b}/mgr.sock"', f'endpoint = "tcp://127.0.0.1:{port}"'))
    d = start_daemon(cfg_a)
    r = run_daemon(cfg_b)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "Traceback" not in out and "ZMQError" not in out, out
    assert f"cannot bind manager.endpoint tcp://127.0.0.1:{port}: Address already in use" in out, out
    assert d.proc.poll() is None


# -------------------------------------------------------------------- medium 4: multipart flood

def test_multipart_flood_keeps_memory_bounded_and_the_daemon_answering(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    # 64 KiB messages: ZeroMQ's per-frame limit is then 16 times that, 1 MiB.
    cfg.write_text(cfg.read_text().replace("max_message_bytes = 4096", "max_message_bytes = 65536"))
    d = start_daemon(cfg)
    c = client_for(tmp_path)
    proc = psutil.Process(d.proc.pid)
    assert c.call("ping")["pong"] is True
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    frames, mib = 150, 1 << 20
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 20000)
    s.connect(f"ipc://{tmp_path}/mgr.sock")
    after: list[int] = []
    replies: list[dict] = []
    try:
        blob = b"x" * mib
        for _ in range(3):
            for _ in range(frames):
                s.send(blob, zmq.SNDMORE)
            s.send(b'{"v": 1, "cmd": "ping"}')
            replies.append(json.loads(s.recv()))
            assert c.call("ping")["pong"] is True
            time.sleep(0.3)
            after.append(proc.memory_info().rss)
    finally:
        stop.set()
        t.join(2)
        s.close(0)
        ctx.term()
    total = frames * mib
    # ZeroMQ delivers a message whole, so the daemon holds one copy while it arrives; never two,
    # and the memory goes back once the message is dropped.
    print(f"RSS MiB: base {base / mib:.0f}, peak {peak[0] / mib:.0f}, after each message {[round(a / mib) for a in after]}")
    assert peak[0] - base < 1.5 * total, (base, peak[0])
    assert max(after) - base < 48 * mib, (base, after)
    for rep in replies:
        assert rep["ok"] is False and rep["error"]["code"] == "too_large", rep
        assert f"in {frames + 1} frame(s)" in rep["error"]["message"]
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


# ------------------------------------------------------------------------ low 9 and 10: state files

CTL = '{"kind": "xtc", "u": 1.69, "steps": %s, "carry_percent": 0.0, "E_prev_decades": %s, "noise_decades": 0.0087}'


def bad_state(steps: str = "3", e_prev: str = "null") -> str:
    return ('{"schema": "xtc-daemon-state/1", "pending_restores": {}, "instances": {"vr1": {"state": "active", '
            '"setpoint_pps": 30000.0, "original_cap_percent": 80.0, "cap_percent": 40.0, "controller": '
            + CTL % (steps, e_prev) + "}}}")


@pytest.mark.parametrize("text, words", [
    (bad_state(steps="1e400"), "field 'instances.vr1.controller.steps' must be a finite number"),
    (bad_state(e_prev="NaN"), "field 'instances.vr1.controller.E_prev_decades' must be a finite number"),
    (bad_state(e_prev="-Infinity"), "field 'instances.vr1.controller.E_prev_decades' must be a finite number"),
    (bad_state(steps="1" + "0" * 400), "field 'instances.vr1.controller.steps' is out of range"),
    (None, "is a symlink to"),
])
def test_bad_state_file_is_refused_at_start_naming_the_field(tmp_path, text, words):
    cfg = write_config(tmp_path, VR1)
    (tmp_path / "state").mkdir()
    sp = tmp_path / "state" / "state.json"
    if text is None:
        sp.symlink_to(tmp_path / "elsewhere" / "state.json")  # dangling
    else:
        sp.write_text(text)
    r = run_daemon(cfg)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "Traceback" not in out, out
    assert words in out and str(sp) in out, out


def test_good_state_file_still_loads(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(bad_state())
    d = start_daemon(cfg)
    assert client_for(tmp_path).call("status", vr="vr1")["setpoint_pps"] == 30000
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_temp_files_of_killed_daemons_are_removed_at_start_never_a_live_ones(tmp_path, start_daemon, client_for):
    cfg = write_config(tmp_path, VR1)
    state = tmp_path / "state"
    dead = []
    for _ in range(3):  # real SIGKILLs; each leaves the temporary file of a write it was making
        d = start_daemon(cfg)
        client_for(tmp_path).call("ping")
        d.proc.kill()
        d.wait()
        tmp = state / f".state.json.{d.proc.pid}.tmp"
        tmp.write_text("{half a wri")
        dead.append(tmp)
    live = state / f".state.json.{os.getpid()}.tmp"  # a live process's (this test's)
    live.write_text("{}")
    d = start_daemon(cfg)
    assert [p for p in dead if p.exists()] == []
    assert live.exists()
    assert d.proc.poll() is None
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


