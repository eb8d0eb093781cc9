"""CURVE on the ZeroMQ link: a daemon with a server key admits only the policer's client key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import zmq

from procs import wait_for
from xtc.policer.link import DaemonLink, LinkDown
from xtc.daemon.ctl import ManagerClient, ManagerError
from xtc.service.curve import CurveError, generate_keypair, load_public, secure_context


def test_curve_both_sides(tmp_path: Path, make_daemon: Any, make_policer: Any) -> None:
    keys = tmp_path / "keys"
    clients = tmp_path / "clients"
    server_pub, server_sec = generate_keypair(keys, "daemon")
    policer_pub, policer_sec = generate_keypair(keys, "policer")
    _, stranger_sec = generate_keypair(keys, "stranger")
    clients.mkdir()
    (clients / "policer.key").write_bytes(policer_pub.read_bytes())
    assert oct(server_sec.stat().st_mode & 0o777) == "0o600"
    server_key = load_public(server_pub).decode()

    d = make_daemon("rc", [{"name": "c1", "traffic": "udp", "offered_pps": 30000.0}], server_keys=(server_sec, clients),
                    curve=(policer_sec, server_key))
    assert d.vrs()["c1"]["present"]
    # Without CURVE, or with a key the daemon does not know, there is no answer at all.
    with ManagerClient(d.endpoint, timeout_s=0.5) as c:
        with pytest.raises(ManagerError, match="timeout"):
            c.call("ping")
    stranger = DaemonLink(d.endpoint, 0.5, stranger_sec, server_key)
    with pytest.raises(LinkDown, match="no answer"):
        stranger.call("ping")
    stranger.close()

    # The policer with its key pair talks to it; a router registered without the server key does not.
    pol = make_policer(extra_config=f'[curve]\nclient_secret_key_file = "{policer_sec}"\n')
    pol.call("POST", "/routers", json={"name": "rc", "endpoint": d.endpoint, "capacity_pps": 100000,
                                       "curve_server_key": server_key, "control_mode": "on"})
    pol.call("POST", "/routers", json={"name": "rplain", "endpoint": d.endpoint, "capacity_pps": 100000})
    wait_for(lambda: pol.get("/routers/rc")["status"] == "reachable", 10, "CURVE router reachable")
    wait_for(lambda: pol.get("/routers/rplain")["status"] == "unreachable", 10, "plain link refused")
    assert pol.get("/routers/rc")["curve"] is True
    # Control through the encrypted link: the daemon runs an instance at the policer's setpoint.
    wait_for(lambda: d.vrs()["c1"]["state"] == "active", 10, "c1 activated over CURVE")
    assert d.vrs()["c1"]["setpoint_pps"] == pytest.approx(pol.get("/vrs/rc/c1")["wanted_setpoint_pps"])


def test_a_daemon_beyond_loopback_takes_curve_from_its_config_and_the_policer_reaches_it(
        tmp_path: Path, make_policer: Any) -> None:
    """The path between hosts: the daemon on every address (tcp://0.0.0.0), CURVE named in its own
    configuration; without CURVE the same configuration does not start."""
    from conftest import Daemon

    keys, clients = tmp_path / "keys", tmp_path / "clients"
    server_pub, server_sec = generate_keypair(keys, "daemon")
    policer_pub, policer_sec = generate_keypair(keys, "policer")
    clients.mkdir()
    (clients / "policer.key").write_bytes(policer_pub.read_bytes())
    server_key = load_public(server_pub).decode()
    d = Daemon(tmp_path, "rw", [{"name": "w1", "traffic": "udp", "offered_pps": 30000.0}], curve=(policer_sec, server_key))
    wide = d.config.read_text().replace("tcp://127.0.0.1:", "tcp://0.0.0.0:")
    d.config.write_text(wide)
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "xtc.cli", "daemon", "-c", str(d.config)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "'manager.endpoint': tcp://0.0.0.0:" in r.stderr and "refused without CURVE" in r.stderr and r.stdout == ""
    d.config.write_text(wide.replace("[manager]\n", f'[manager]\ncurve_secret_key_file = "{server_sec}"\n'
                                                    f'curve_clients_dir = "{clients}"\n'))
    try:
        d.start()  # answers its CURVE client (the test's link to 127.0.0.1)
        with ManagerClient(d.endpoint, timeout_s=0.5) as c:
            with pytest.raises(ManagerError, match="timeout"):
                c.call("ping")
        pol = make_policer(extra_config=f'[curve]\nclient_secret_key_file = "{policer_sec}"\n')
        pol.call("POST", "/routers", json={"name": "rw", "endpoint": d.endpoint, "capacity_pps": 100000,
                                           "curve_server_key": server_key, "control_mode": "on",
                                           "pub_endpoint": f"tcp://127.0.0.1:{d.pub_port}"})
        wait_for(lambda: pol.get("/routers/rw")["status"] == "reachable", 10, "CURVE router reachable")
        wait_for(lambda: d.vrs()["w1"]["state"] == "active", 10, "w1 activated over CURVE")
    finally:
        d.stop()


def test_curve_key_errors(tmp_path: Path) -> None:
    with pytest.raises(CurveError, match="missing.key_secret does not exist"):
        secure_context(tmp_path / "missing.key_secret", tmp_path)
    pub, sec = generate_keypair(tmp_path, "k")
    with pytest.raises(CurveError, match="no secret key"):
        secure_context(pub, tmp_path)
    with pytest.raises(CurveError, match="does not exist"):
        secure_context(sec, tmp_path / "nope")
    link = DaemonLink("tcp://127.0.0.1:1", 0.1, sec, "short")
    with pytest.raises(LinkDown, match="40 Z85"):
        link.call("ping")
    ctx = zmq.Context()
    try:
        link = DaemonLink("tcp://127.0.0.1:1", 0.1, None, load_public(pub).decode(), ctx)
        with pytest.raises(LinkDown, match="no client key pair"):
            link.call("ping")
    finally:
        ctx.term()
