"""Authenticated XCo datagrams: the tag, the key file, and the controller process refusing what
does not verify (real UDP on loopback)."""

import os
import socket
import stat
import time

import pytest

from xtc.xco import protocol as P
from xtc.xco.auth import TAG_BYTES, AuthError, load_key, seal, unseal

from procs import free_port
from tests.xco.test_xco_controller import DATA, Controller, _write_config, _xtc

KEY = bytes(range(32))


def test_a_sealed_datagram_opens_with_its_key_only_and_any_change_is_refused():
    msg = P.encode(P.Heartbeat(P.Header(3, 7, 9, 1_700_000_000_000_000)))
    sealed = seal(msg, KEY)
    assert len(sealed) == len(msg) + TAG_BYTES and unseal(sealed, KEY) == msg
    assert unseal(sealed, bytes(32)) is None  # another key
    for i in range(len(sealed)):  # one bit flipped anywhere: message or tag
        bad = bytearray(sealed)
        bad[i] ^= 0x01
        assert unseal(bytes(bad), KEY) is None, i
    assert unseal(msg, KEY) is None  # not sealed at all
    assert unseal(sealed[:TAG_BYTES], KEY) is None and unseal(b"", KEY) is None


def test_keygen_writes_a_private_key_that_loads_and_is_not_overwritten(tmp_path):
    p = tmp_path / "xco.key"
    r = _xtc("xco", "keygen", str(p))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    key = load_key(p)
    assert len(key) == 32
    r = _xtc("xco", "keygen", str(p))
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert load_key(p) == key


@pytest.mark.parametrize("text, mode, problem", [
    ("00" * 32, 0o644, "open to group or others"),
    ("not hex at all", 0o600, "hex digits"),
    ("00" * 8, 0o600, "at least 16"),
])
def test_a_bad_key_file_is_refused_naming_the_problem(tmp_path, text, mode, problem):
    p = tmp_path / "k"
    p.write_text(text)
    os.chmod(p, mode)
    with pytest.raises(AuthError, match=problem) as e:
        load_key(p)
    assert str(p) in str(e.value)
    with pytest.raises(AuthError, match="cannot read"):
        load_key(tmp_path / "missing")


def test_check_config_and_the_controller_refuse_a_loose_key_file(tmp_path):
    key = tmp_path / "xco.key"
    key.write_text(KEY.hex())
    os.chmod(key, 0o640)
    cfg = _write_config(tmp_path, free_port(socket.SOCK_DGRAM), auth_key_file='"xco.key"')
    r = _xtc("xco", "check-config", str(cfg))
    assert r.returncode == 1 and "'auth_key_file'" in r.stderr and "chmod 600" in r.stderr, r.stderr
    r = _xtc("xco", "controller", "-c", str(cfg))
    assert r.returncode == 2 and "'auth_key_file'" in r.stderr, r.stderr
    os.chmod(key, 0o600)
    r = _xtc("xco", "check-config", str(cfg))
    assert r.returncode == 0, r.stderr


def test_the_controller_answers_sealed_datagrams_only(tmp_path):
    key = tmp_path / "xco.key"
    key.write_text(KEY.hex())
    os.chmod(key, 0o600)
    port = free_port(socket.SOCK_DGRAM)
    ctl = Controller(_write_config(tmp_path, port, auth_key_file='"xco.key"'))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("127.0.0.1", port))
        s.settimeout(1.0)
        digest = P.topology_digest((DATA / "fig1a.toml").read_bytes())

        def register(seq, sealed, tamper=False):
            m = P.encode(P.Register(P.Header(0, 77, seq, time.time_ns() // 1000), digest, "s1", ()))
            data = seal(m, KEY) if sealed else m
            if tamper:
                data = data[:-1] + bytes([data[-1] ^ 1])
            s.send(data)

        register(1, sealed=False)
        register(2, sealed=True, tamper=True)
        with pytest.raises(TimeoutError):
            s.recv(P.MAX_DATAGRAM)  # neither is answered
        register(3, sealed=True)
        reply = s.recv(P.MAX_DATAGRAM)
        assert P.decode(reply[:-TAG_BYTES]) and unseal(reply, KEY) is not None  # the welcome is sealed
        assert isinstance(P.decode(unseal(reply, KEY)), P.Welcome)
        m = ctl.metrics()
        assert m['xco_messages_dropped_total{reason="auth"}'] == 2.0
    finally:
        s.close()
        ctl.stop()
