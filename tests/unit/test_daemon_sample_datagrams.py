"""The daemon's samples as signed UDP datagrams (``subscribe`` with ``udp``; docs/design/samples-udp.md):
each period's message as one datagram to the address the peer gave, signed with its key, numbered; one
period in ``LINK_EVERY`` on the connection, so that a peer that is gone is found out; a datagram the
kernel refuses goes on the connection; bad ``udp`` members are refused and change nothing.  Real
ZeroMQ and UDP sockets, the daemon's service in this process on the simulated plant; the datagrams'
codec alone at the end."""

from __future__ import annotations

import socket

import pytest
from test_daemon_link_samples import _ask, _dealer, _samples, served
from procs import wait_for
from test_daemon_sample_listeners import step

from xtc.daemon import api, datagram

KEY = bytes(range(32))


def _exported(svc, outcome: str) -> float | None:
    """The daemon's ``xtc_manager_sample_datagrams_total`` for ``outcome``, as a scrape reads it."""
    return svc.metrics.registry.get_sample_value("xtc_manager_sample_datagrams_total", {"outcome": outcome})


def _udp_reader() -> socket.socket:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.bind(("127.0.0.1", 0))
    r.settimeout(2.0)
    return r


def _datagrams(r: socket.socket, n: int, key: bytes = KEY) -> list[tuple[int, list[bytes]]]:
    out = []
    for _ in range(n):
        _, seq, frames = datagram.decode(r.recv(65536), {datagram.key_id_of(key): key})
        out.append((seq, frames))
    return out


def test_a_peer_that_asks_for_datagrams_gets_nine_periods_in_ten_as_datagrams(tmp_path):
    with served(tmp_path) as (svc, clock, _, ctx):
        s, r = _dealer(svc, ctx), _udp_reader()
        try:
            to = f"127.0.0.1:{r.getsockname()[1]}"
            rep = _ask(svc, s, "subscribe", schema="xtc-samples/3", udp={"to": to, "key": KEY.hex()})
            assert rep["ok"] is True and rep["result"]["udp"] is True and rep["result"]["schema"] == "xtc-samples/3"
            step(svc, clock, 2 * datagram.LINK_EVERY)
            got = _datagrams(r, 2 * (datagram.LINK_EVERY - 1))
            assert [seq for seq, _ in got] == list(range(1, 2 * datagram.LINK_EVERY - 1))  # numbered from 1, none skipped
            for _, frames in got:
                assert frames[0] == api.SAMPLES_TOPIC and len(frames) == 3  # the very message of the connection
            on_link = _samples(s, 500)
            assert len(on_link) == 2 and all(m[1] == api.SAMPLES_TOPIC for m in on_link)  # periods 10 and 20
            assert svc.udp.sent == 18 and svc.udp.failed == 0
            assert _exported(svc, "sent") == 18
            # Asked again without udp: on the connection only; then unsubscribed: nothing.
            assert "udp" not in _ask(svc, s, "subscribe", 2, schema="xtc-samples/3")["result"]
            step(svc, clock, 3)
            assert len(_samples(s, 500)) == 3
            r.settimeout(0.2)
            with pytest.raises(TimeoutError):
                r.recv(65536)
            assert _ask(svc, s, "unsubscribe", 3)["result"] == {"subscribed": False} and len(svc.udp) == 0
        finally:
            s.close(0)
            r.close()


@pytest.mark.parametrize("udp, words", [
    ({"to": "router.example:7400", "key": KEY.hex()}, "'udp.to'"),
    ({"to": "198.18.0.1:0", "key": KEY.hex()}, "port must be 1-65535"),
    ({"to": "::1:7400", "key": KEY.hex()}, "IPv6 address is written in brackets"),
    ({"to": "198.18.0.1:7400", "key": "ab" * 16}, "'udp.key' must be 64 lower-case hex digits"),
    ({"to": "198.18.0.1:7400", "key": KEY.hex().upper()}, "'udp.key' must be 64 lower-case hex digits"),
    ({"to": "198.18.0.1:7400"}, "'udp.key'"),
    ({"to": "198.18.0.1:7400", "key": KEY.hex(), "port": 1}, "unknown field 'udp.port'"),
    ("198.18.0.1:7400", "'udp'"),
])
def test_a_bad_udp_member_is_refused_and_changes_nothing(tmp_path, udp, words):
    with served(tmp_path) as (svc, clock, _, ctx):
        s, r = _dealer(svc, ctx), _udp_reader()
        try:
            to = f"127.0.0.1:{r.getsockname()[1]}"
            assert _ask(svc, s, "subscribe", udp={"to": to, "key": KEY.hex()})["result"]["udp"] is True
            rep = _ask(svc, s, "subscribe", 2, udp=udp)
            assert rep["ok"] is False and rep["error"]["code"] == "bad_field" and words in rep["error"]["message"]
            step(svc, clock)
            assert _datagrams(r, 1)[0][0] == 1  # the subscription as it was: datagrams, with its key
        finally:
            s.close(0)
            r.close()


def test_a_datagram_the_kernel_refuses_goes_on_the_connection(tmp_path):
    """255.255.255.255 without SO_BROADCAST: every ``sendto`` fails (EACCES); the samples come on the
    connection, each failure counted."""
    with served(tmp_path) as (svc, clock, _, ctx):
        s = _dealer(svc, ctx)
        try:
            assert _ask(svc, s, "subscribe", udp={"to": "255.255.255.255:9", "key": KEY.hex()})["result"]["udp"] is True
            step(svc, clock, 4)
            assert len(_samples(s)) == 4 and svc.udp.failed == 4 and svc.udp.sent == 0
            assert _exported(svc, "failed") == 4
        finally:
            s.close(0)


def test_a_peer_that_is_gone_is_found_out_at_a_period_on_the_connection(tmp_path):
    with served(tmp_path) as (svc, clock, _, ctx):
        s, r = _dealer(svc, ctx), _udp_reader()
        try:
            assert _ask(svc, s, "subscribe", udp={"to": f"127.0.0.1:{r.getsockname()[1]}", "key": KEY.hex()})["ok"]
            s.close(0)  # gone without unsubscribing: the datagrams alone would never tell

            def gone() -> bool:
                step(svc, clock)
                return not svc.link_subscribers

            wait_for(gone, 5.0, "the link subscriber to leave", 0.005)
            assert len(svc.udp) == 0
            sent = svc.udp.sent
            step(svc, clock, datagram.LINK_EVERY)
            assert svc.udp.sent == sent
        finally:
            r.close()


# ----------------------------------------------------------------------------------- the codec

FRAMES = [api.SAMPLES_TOPIC, b"\x01" * 90, b"\x02" * 774]
KID = datagram.key_id_of(KEY)


def test_a_datagram_decodes_to_its_frames_with_its_key_only():
    d = datagram.encode(KEY, KID, 7, FRAMES)
    assert datagram.decode(d, {KID: KEY}) == (KID, 7, FRAMES)
    assert len(d) == 21 + 4 * 3 + sum(map(len, FRAMES)) + 16
    other = bytes(32)
    with pytest.raises(datagram.DatagramError) as e:
        datagram.decode(d, {KID: other})  # the id of one key, the tag of another: refused
    assert e.value.reason == "bad_tag"


def _resigned(body: bytes) -> bytes:
    import hashlib

    return body + hashlib.blake2b(body, key=KEY, digest_size=16).digest()


@pytest.mark.parametrize("make, reason", [
    (lambda d: d[:36], "short"),
    (lambda d: b"XTU2" + d[4:], "magic"),
    (lambda d: d[:4] + bytes(8) + d[12:], "unknown_key"),
    (lambda d: d[:40] + bytes([d[40] ^ 1]) + d[41:], "bad_tag"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "bad_tag"),
    (lambda d: d + b"x", "bad_tag"),
    (lambda d: _resigned(d[:20] + b"\x00" + d[21:-16]), "bad_frames"),  # 0 frames
    (lambda d: _resigned(d[:21] + (10**6).to_bytes(4, "big") + d[25:-16]), "bad_frames"),  # a frame past the end
    (lambda d: _resigned(d[:-16] + b"tail"), "bad_frames"),  # bytes after the last frame
])
def test_a_bad_datagram_is_refused_by_reason(make, reason):
    d = datagram.encode(KEY, KID, 1, FRAMES)
    with pytest.raises(datagram.DatagramError) as e:
        datagram.decode(make(d), {KID: KEY})
    assert e.value.reason == reason
