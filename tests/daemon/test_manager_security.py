"""The manager API's sockets and keys on real daemons and real sockets (issue 45 item 4, issue 51
item 2): ``xtc ctl`` speaks CURVE with the keys its configuration names, a bad key file stops the
daemon, ``check-config`` and ``xtc ctl`` with one line naming the file, an ipc:// endpoint another
program listens on is never taken over, and the daemon's sockets are owner-only (0600; 0660 with
an ``xtc`` group) and removed when it stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import write_config
from procs import DaemonProc
from xtc.daemon.ctl import ManagerClient
from xtc.service.curve import generate_keypair

VRS = '[sim]\nseed = 1\n[[sim.vr]]\nname = "vr1"\noffered_pps = 30000\n'


def xtc(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xtc.cli", *args], capture_output=True, text=True, timeout=timeout_s)


def curve_setup(d: Path, ctl_key: bool = True) -> tuple[Path, dict[str, Path]]:
    """A daemon config with CURVE (and the ctl key pair when ``ctl_key``); its key files."""
    keys, clients = d / "keys", d / "clients"
    clients.mkdir(parents=True)
    daemon_pub, daemon_sec = generate_keypair(keys, "daemon")
    ctl_pub, ctl_sec = generate_keypair(keys, "ctl")
    (clients / "ctl.key").write_bytes(ctl_pub.read_bytes())
    cfg = write_config(d, VRS)
    extra = f'curve_secret_key_file = "{daemon_sec}"\ncurve_clients_dir = "{clients}"\n'
    if ctl_key:
        extra += f'ctl_curve_secret_key_file = "{ctl_sec}"\n'
    cfg.write_text(cfg.read_text().replace("max_message_bytes = 4096\n", "max_message_bytes = 4096\n" + extra))
    return cfg, {"daemon_pub": daemon_pub, "daemon_sec": daemon_sec, "ctl_sec": ctl_sec, "clients": clients}


def test_ctl_speaks_curve_with_the_keys_its_config_names(tmp_path, start_daemon):
    cfg, keys = curve_setup(tmp_path)
    d = start_daemon(cfg)
    endpoint = f"ipc://{tmp_path}/mgr.sock"
    r = xtc("ctl", "-c", str(cfg), "ping")
    assert r.returncode == 0 and f"daemon at {endpoint}: 0 instance(s)" in r.stdout, r
    r = xtc("ctl", "-c", str(cfg), "activate", "vr1", "20k")
    assert r.returncode == 0, r
    # The same with the keys on the command line (an operator on another host, no daemon config).
    r = xtc("ctl", "-e", endpoint, "--curve-key", str(keys["ctl_sec"]), "--server-key", str(keys["daemon_pub"]),
            "--json", "status", "vr1")
    assert r.returncode == 0 and json.loads(r.stdout)["result"]["state"] == "active", r
    # The samples, over CURVE too.
    r = xtc("ctl", "-c", str(cfg), "watch", "vr1", "--count", "1")
    assert r.returncode == 0 and json.loads(r.stdout.splitlines()[0])["vr"] == "vr1", r
    # Without a key pair: one line saying what to give, no connection tried.
    plain = tmp_path / "plain.toml"
    plain.write_text(cfg.read_text().replace(f'ctl_curve_secret_key_file = "{keys["ctl_sec"]}"\n', ""))
    r = xtc("ctl", "-c", str(plain), "ping")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"xtc ctl: the daemon uses CURVE ({plain}: manager.curve_secret_key_file): "
                                     "give --curve-key FILE or set manager.ctl_curve_secret_key_file"]
    # A client without CURVE gets no answer at all.
    with ManagerClient(endpoint, timeout_s=0.5) as c:
        with pytest.raises(Exception, match="timeout"):
            c.call("ping")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def _bad_key(keys: dict[str, Path], what: str, which: str) -> tuple[Path, str]:
    """Spoil the key file ``which`` (daemon_sec or ctl_sec) as ``what`` says; (its path, the words expected)."""
    p = keys[which]
    if what == "missing":
        p.unlink()
        return p, f"CURVE secret key file {p} does not exist"
    if what == "readable":
        os.chmod(p, 0o644)
        return p, f"CURVE secret key file {p} has mode 0644: group or others may read it; chmod 600 {p}"
    p.write_text("metadata\ncurve\n    public-key = \"not a key\"\n    secret-key = \"x\"\n")
    return p, (f"CURVE secret key file {p} does not hold a valid key (40 Z85 characters; write key files with "
               f"`xtc policer keygen`)")


@pytest.mark.parametrize("what", ["missing", "readable", "garbage"])
def test_a_bad_daemon_key_file_stops_the_daemon_and_check_config_with_one_line(tmp_path, what):
    cfg, keys = curve_setup(tmp_path)
    path, words = _bad_key(keys, what, "daemon_sec")
    r = xtc("check-config", str(cfg))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"xtc check-config: {cfg}: manager.curve_secret_key_file/curve_clients_dir: {words}"]
    d = DaemonProc(cfg)
    rc = d.wait(30)
    assert rc == 2
    lines = [json.loads(line) for line in d.raw]
    assert [e["event"] for e in lines] == ["curve_failed"] and lines[0]["error"] == words
    assert lines[0]["key"] == "manager.curve_secret_key_file"
    assert not (tmp_path / "mgr.sock").exists() and not (tmp_path / "pub.sock").exists()


@pytest.mark.parametrize("what", ["missing", "readable", "garbage"])
def test_a_bad_ctl_key_file_stops_ctl_with_one_line(tmp_path, what):
    cfg, keys = curve_setup(tmp_path)
    path, words = _bad_key(keys, what, "ctl_sec")
    r = xtc("ctl", "-c", str(cfg), "ping")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"xtc ctl: {words}"]


def test_a_bad_client_key_in_the_clients_dir_is_named(tmp_path):
    cfg, keys = curve_setup(tmp_path)
    bad = keys["clients"] / "broken.key"
    bad.write_text("not a certificate\n")
    r = xtc("check-config", str(cfg))
    assert r.returncode == 1 and f"cannot read CURVE public key file {bad}" in r.stderr and len(r.stderr.splitlines()) == 1


def test_an_ipc_endpoint_another_program_listens_on_is_not_taken_over(tmp_path, start_daemon):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    a = start_daemon(write_config(a_dir, VRS))
    sock = a_dir / "mgr.sock"
    # The socket is owner-only (no xtc group here) or 0660 for the xtc group.
    mode = sock.stat().st_mode & 0o777
    try:
        import grp

        grp.getgrnam("xtc")
        assert mode == 0o660
    except KeyError:
        assert mode == 0o600
    # A second daemon (its own state) on the same endpoints: refused, the first keeps its socket.
    b_cfg = write_config(b_dir, VRS)
    b_cfg.write_text(b_cfg.read_text().replace(f"ipc://{b_dir}/", f"ipc://{a_dir}/"))
    b = DaemonProc(b_cfg)
    assert b.wait(30) != 0
    assert any(f"cannot bind manager.endpoint ipc://{sock}: another daemon or program is listening there" in line
               for line in b.raw), b.raw
    with ManagerClient(f"ipc://{sock}", timeout_s=2) as c:
        assert c.call("ping")["pong"]
    # A file that is not a socket is not removed to make room.
    a.signal(signal.SIGTERM)
    assert a.wait() == 0
    assert not sock.exists() and not (a_dir / "pub.sock").exists()  # removed at stop
    sock.write_text("keep me\n")
    c = DaemonProc(b_cfg)
    assert c.wait(30) != 0
    assert any(f"{sock} exists and is not a socket (not removing it)" in line for line in c.raw), c.raw
    assert sock.read_text() == "keep me\n"


def _samples_seen(endpoint: str, extra_subscription: bytes, wait_s: float = 2.5) -> int:
    """How many samples messages a SUB socket that also subscribes to ``extra_subscription`` receives."""
    import zmq

    from xtc.daemon.api import SAMPLES_TOPIC

    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, SAMPLES_TOPIC)
        sub.setsockopt(zmq.SUBSCRIBE, extra_subscription)
        sub.connect(endpoint)
        seen = 0
        end = time.monotonic() + wait_s
        while (left_ms := int((end - time.monotonic()) * 1000)) > 0:
            if sub.poll(left_ms):
                topic = sub.recv_multipart()[0]
                seen += topic == SAMPLES_TOPIC
        return seen
    finally:
        sub.close(0)


def test_the_samples_socket_drops_a_peer_sending_a_frame_larger_than_a_request(tmp_path, start_daemon):
    """A subscription is a short topic: a subscriber whose subscription frame is larger than
    max_message_bytes is dropped with its connection (ZMQ_MAXMSGSIZE on the XPUB socket)."""
    d = start_daemon(write_config(tmp_path, VRS))  # max_message_bytes = 4096, a period of 0.5 s
    pub = f"ipc://{tmp_path}/pub.sock"
    assert _samples_seen(pub, b"y" * 100) >= 2
    assert _samples_seen(pub, b"y" * 65536) == 0
    with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=2) as c:
        assert c.call("ping")["pong"]
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_ctl_refuses_keys_that_cannot_work_before_connecting(tmp_path):
    _, keys = curve_setup(tmp_path)
    sec = str(keys["ctl_sec"])
    bad = "#" * 40
    cases = [
        (["--curve-key", sec, "--server-key", bad],
         f"xtc ctl: --server-key '{bad}' is not a CURVE public key (40 Z85 characters, as in the daemon's .key file)"),
        (["--curve-key", sec], "xtc ctl: --curve-key needs the daemon's public key: give --server-key, or --config "
                               "with manager.curve_secret_key_file"),
        (["--server-key", str(keys["daemon_pub"])], "xtc ctl: the daemon uses CURVE: give --curve-key FILE or set "
                                                    "manager.ctl_curve_secret_key_file"),
        (["--curve-key", sec, "--server-key", str(tmp_path / "nope.key")],
         f"xtc ctl: CURVE public key file {tmp_path / 'nope.key'} does not exist"),
    ]
    for args, line in cases:
        r = xtc("ctl", "-e", f"ipc://{tmp_path}/none.sock", *args, "ping")
        assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [line])
