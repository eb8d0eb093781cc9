"""``xtc daemon`` with CURVE keys in its config: only clients with a known key get answers."""

from __future__ import annotations

import signal

import pytest
import zmq

from .conftest import write_config
from xtc.daemon.ctl import ManagerClient, ManagerError
from xtc.service.curve import generate_keypair, load_public, load_secret


def _curve_call(endpoint: str, client_secret, server_public: bytes, timeout_ms: int = 1500):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    try:
        pub, sec = load_secret(client_secret)
        s.curve_publickey, s.curve_secretkey, s.curve_serverkey = pub, sec, server_public
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send_json({"v": 1, "cmd": "ping"})
        if not s.poll(timeout_ms):
            return None
        return s.recv_json()
    finally:
        s.close(0)


def test_daemon_config_enables_curve(tmp_path, start_daemon):
    keys = tmp_path / "keys"
    clients = tmp_path / "clients"
    clients.mkdir()
    server_pub, server_sec = generate_keypair(keys, "daemon")
    good_pub, good_sec = generate_keypair(keys, "policer")
    _, stranger_sec = generate_keypair(keys, "stranger")
    (clients / "policer.key").write_bytes(good_pub.read_bytes())
    cfg = write_config(tmp_path, '[sim]\nseed = 1\n[[sim.vr]]\nname = "vr1"\noffered_pps = 30000\n')
    text = cfg.read_text().replace(
        "max_message_bytes = 4096\n",
        f'max_message_bytes = 4096\ncurve_secret_key_file = "{server_sec}"\ncurve_clients_dir = "{clients}"\n',
    )
    cfg.write_text(text)
    d = start_daemon(cfg)
    endpoint = f"ipc://{tmp_path}/mgr.sock"
    server_key = load_public(server_pub)
    reply = _curve_call(endpoint, good_sec, server_key)
    assert reply is not None and reply["ok"] is True
    assert _curve_call(endpoint, stranger_sec, server_key, timeout_ms=700) is None
    with ManagerClient(endpoint, timeout_s=0.7) as c:
        with pytest.raises(ManagerError, match="timeout"):
            c.call("ping")
    d.signal(signal.SIGTERM)
    assert d.wait() == 0


def test_curve_keys_must_come_in_pairs(tmp_path):
    from xtc.daemon.config import ConfigError, load_config

    cfg = write_config(tmp_path, '[sim]\nseed = 1\n[[sim.vr]]\nname = "vr1"\noffered_pps = 30000\n')
    cfg.write_text(cfg.read_text().replace("max_message_bytes = 4096\n", 'max_message_bytes = 4096\ncurve_secret_key_file = "/x"\n'))
    with pytest.raises(ConfigError, match="curve_clients_dir"):
        load_config(cfg)
