"""Readiness and watchdog of the real services, as systemd sees them (``Type=notify``, ``WatchdogSec``).

Each test binds a Unix datagram socket (tests/service/conftest.py), starts the real service as a
process with ``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` set, and checks: ``READY=1`` arrives once, and
only when the service answers (the daemon's manager socket a ping, the policer's HTTP port a
request, the XCo controller's UDP port a registration); ``WATCHDOG=1`` keeps arriving, at least
every half interval (the daemon's too when its control period is longer than that); SIGTERM gives
``STOPPING=1`` and a clean exit.  A service that cannot start never says ``READY=1``.

systemd is not PID 1 here, so the units themselves cannot be started: this is the protocol's half
of the contract (the units' half: tests/service/test_systemd_units.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sdnotify import MDWE_MAIN, kernel_has_mdwe, unit_denies_write_execute
from procs import daemon_config, free_port, stop_process, wait_for
from xtc.daemon.ctl import ManagerClient

ROOT = Path(__file__).resolve().parents[2]
XCO_DATA = ROOT / "tests" / "xco" / "data"
#: systemd's WatchdogSec here: WATCHDOG=1 is due every 0.5 s, and the test allows a busy machine
#: up to the whole interval between two.
WATCHDOG_USEC = 1_000_000

pytestmark = pytest.mark.exclusive  # asserts on the watchdog's cadence: run alone


_MDWE = kernel_has_mdwe()
_UNIT = {"daemon": "xtc-daemon.service", "policer": "xtc-policer.service"}


def _start(argv: list[str], notify_address: str, tmp: Path) -> subprocess.Popen:
    """The service as its unit runs it: with the notification socket and the watchdog, and under
    memory-deny-write-execute where its unit sets MemoryDenyWriteExecute=yes (and the kernel can)."""
    env = {**os.environ, "NOTIFY_SOCKET": notify_address, "WATCHDOG_USEC": str(WATCHDOG_USEC),
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("WATCHDOG_PID", None)
    unit = _UNIT.get(argv[0]) or f"xtc-xco-{argv[1]}.service"
    mdwe = _MDWE and unit_denies_write_execute(unit)
    cmd = [sys.executable, "-c", MDWE_MAIN, "xtc.cli"] if mdwe else [sys.executable, "-m", "xtc.cli"]
    log = open(tmp / "service.log", "w")
    return subprocess.Popen([*cmd, *argv], stdout=log, stderr=subprocess.STDOUT, env=env)


def _log(tmp: Path) -> str:
    return (tmp / "service.log").read_text()


def _watchdog_keeps_coming(ns, after_s: float, seconds: float = 2.0) -> None:
    time.sleep(seconds)
    ts = [t for t, _ in ns.with_key("WATCHDOG") if t >= after_s]
    assert len(ts) >= int(seconds / (WATCHDOG_USEC / 2e6)) - 1, ts
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, gaps


def _stop_says_stopping(proc: subprocess.Popen, ns, tmp: Path, clean: tuple[int, ...] = (0,)) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) in clean, _log(tmp)
    ns.wait_for("STOPPING", timeout_s=1)
    assert len(ns.with_key("READY")) == 1


def _daemon_config(tmp: Path, period_s: float) -> Path:
    return daemon_config(tmp, "sim", """[log]
format = "json"
[sim]
seed = 1
[[sim.vr]]
name = "vr1"
offered_pps = 50000
""", period_s, metrics='enabled = true\naddress = "127.0.0.1"\nport = 0', name="daemon.toml")


@pytest.mark.timeout(90)
def test_daemon_ready_when_its_manager_socket_answers_and_watchdog_fed(tmp_path: Path, notify_socket) -> None:
    # A control period (3 s) longer than the watchdog's interval: the loop wakes up for the watchdog.
    proc = _start(["daemon", "--config", str(_daemon_config(tmp_path, 3.0))], notify_socket.address, tmp_path)
    try:
        _, t_ready, f = notify_socket.wait_for("READY", alive=lambda: proc.poll() is None)
        with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=0.5) as c:  # answers at once
            assert c.call("ping") is not None
        assert "serving" in f["STATUS"] and "mgr.sock" in f["STATUS"]
        _watchdog_keeps_coming(notify_socket, t_ready)
        with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=5) as c:
            c.call("activate", vr="vr1", setpoint_pps=20000.0)
        # The status follows, with the watchdog (within half its interval).
        want = "1 instance(s) of 1 VR(s), period 3 s"
        wait_for(lambda: any(m.get("STATUS") == want for _, m in notify_socket.with_key("WATCHDOG")), 5,
                 lambda: f"a WATCHDOG=1 with STATUS={want!r}: {notify_socket.messages}", step_s=0.05)
        _stop_says_stopping(proc, notify_socket, tmp_path)
    finally:
        stop_process(proc)


@pytest.mark.timeout(60)
def test_daemon_that_cannot_start_never_says_ready(tmp_path: Path, notify_socket) -> None:
    cfg = _daemon_config(tmp_path, 1.0)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text("{not json")
    proc = _start(["daemon", "--config", str(cfg)], notify_socket.address, tmp_path)
    try:
        assert proc.wait(30) != 0
        assert "state" in _log(tmp_path)
        time.sleep(0.2)
        assert notify_socket.with_key("READY") == []
    finally:
        stop_process(proc)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers", [1, 2])
def test_policer_ready_when_http_answers_and_watchdog_fed(tmp_path: Path, abstract_notify_socket, workers: int) -> None:
    ns = abstract_notify_socket  # the abstract namespace, as systemd gives it
    port = free_port()
    cfg = tmp_path / "policer.toml"
    cfg.write_text(f'schema = "xtc-policer/1"\n[server]\nhost = "127.0.0.1"\nport = {port}\nworkers = {workers}\n'
                   f'[database]\nurl = "sqlite:///{tmp_path}/policer.db"\n')
    proc = _start(["policer", "serve", "-c", str(cfg)], ns.address, tmp_path)
    try:
        _, t_ready, f = ns.wait_for("READY", alive=lambda: proc.poll() is None)
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        assert r.status_code == 200, r.text
        assert f["STATUS"].startswith(f"serving the REST API on 127.0.0.1:{port}")
        _watchdog_keeps_coming(ns, t_ready)
        # Only the service's own process notifies: its engine and workers did not inherit the socket.
        assert all(set(m) <= {"READY", "STATUS", "WATCHDOG", "STOPPING"} for _, m in ns.messages)
        # uvicorn ends by the SIGTERM it stopped for, once it has shut down (systemd: a clean stop).
        _stop_says_stopping(proc, ns, tmp_path, clean=(0, -signal.SIGTERM))
    finally:
        stop_process(proc)


@pytest.mark.timeout(300)
def test_xco_controller_ready_when_its_port_is_bound_and_watchdog_fed(tmp_path: Path, notify_socket) -> None:
    port = free_port(socket.SOCK_DGRAM)
    (tmp_path / "topo.toml").write_bytes((XCO_DATA / "fig1a.toml").read_bytes())
    cfg = tmp_path / "xco.toml"
    cfg.write_text(f'schema = "xco-controller/1"\ntopology = "topo.toml"\nlisten = "127.0.0.1:{port}"\n'
                   f'state_file = "state/ctl.json"\n[metrics]\nenabled = false\n[log]\nformat = "json"\n')
    (tmp_path / "state").mkdir()
    proc = _start(["xco", "controller", "-c", str(cfg)], notify_socket.address, tmp_path)
    try:
        # In a checkout whose numba cache is cold the scheduler is compiled before READY=1: 40 s
        # and more on a busy machine (1 s once cached).
        _, t_ready, f = notify_socket.wait_for("READY", timeout_s=240, alive=lambda: proc.poll() is None)
        # The port is taken: binding it again fails.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(OSError):
            s.bind(("127.0.0.1", port))
        assert (tmp_path / "state" / "ctl.json").exists()  # the state was loaded and written first
        assert f["STATUS"] == f"listening on 127.0.0.1:{port}, 0 host(s) registered"
        _watchdog_keeps_coming(notify_socket, t_ready)
        _stop_says_stopping(proc, notify_socket, tmp_path)
    finally:
        stop_process(proc)


@pytest.mark.root
@pytest.mark.timeout(90)
def test_xco_agent_ready_when_its_gate_holds_the_uplink_and_watchdog_fed(tmp_path: Path, notify_socket) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the agent's gate takes over an uplink over netlink, in a namespace of its own")
    ns = f"xtcnt{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "up1"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", "198.18.23.1/24", "dev", "up0"], check=True)
        for dev in ("up0", "up1", "lo"):
            subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        (tmp_path / "topo.toml").write_bytes((XCO_DATA / "fig1a.toml").read_bytes())
        cfg = tmp_path / "agent.toml"
        cfg.write_text(f'schema = "xco-agent/1"\ntopology = "topo.toml"\nhost = "s1"\nuplink = "up0"\n'
                       f'netns = "{ns}"\ncontroller = "127.0.0.1:{free_port(socket.SOCK_DGRAM)}"\n'
                       f'bind = "127.0.0.1:0"\n[metrics]\nenabled = false\n[log]\nformat = "json"\n')
        proc = _start(["xco", "agent", "-c", str(cfg)], notify_socket.address, tmp_path)
        try:
            _, t_ready, f = notify_socket.wait_for("READY", alive=lambda: proc.poll() is None)
            qdisc = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "up0"], capture_output=True, text=True,
                                   check=True).stdout
            assert "htb 7c0: root" in qdisc, qdisc  # the gate holds the uplink (no controller: failed open)
            assert f["STATUS"].startswith("gating up0 for host s1")
            _watchdog_keeps_coming(notify_socket, t_ready)
            _stop_says_stopping(proc, notify_socket, tmp_path)
            qdisc = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "up0"], capture_output=True, text=True,
                                   check=True).stdout
            assert "7c0:" not in qdisc, qdisc  # and gave it back
        finally:
            stop_process(proc)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
