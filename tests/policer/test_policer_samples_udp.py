"""The samples as signed UDP datagrams (``engine.sample_udp``; docs/design/samples-udp.md): the link pool
binds one UDP socket, sends each daemon its address and a fresh key in ``subscribe``, and takes a
datagram only if its tag checks with the key of a subscription and its number is above the last one
taken; every other datagram is dropped and counted, and nothing else changes.  A daemon that does not
know the member sends its samples on the connection.  Real sockets: the stand-in fleet, a daemon's
manager socket played by the test (which then sends the datagrams itself), and a real ``xtc daemon``
process restarted under an engine."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for
from fakes.daemon import RouterPeer
from xtc_lab.policer_fleet import Fleet

from xtc.daemon import api, datagram
from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.samples import SampleStreams

pytestmark = pytest.mark.slow


def test_the_fleet_s_samples_come_as_datagrams_and_an_older_daemon_s_on_the_connection() -> None:
    new = Fleet(4, vrs_per_router=4, dead_fraction=0.0, publish=True, period_s=0.1, transport="tcp").start()
    old = Fleet(2, vrs_per_router=4, dead_fraction=0.0, publish=True, period_s=0.1, transport="tcp", first=4,
                samples_udp=False).start()  # they refuse the member (bad_field), as a daemon older than it
    links = LinkPool(0.5, sample_udp="127.0.0.1:0")
    streams = SampleStreams(max_vrs=8, links=links)
    streams.want({r["name"]: (r["pub_endpoint"], None, r["endpoint"]) for r in new.routers() + old.routers()})
    try:
        names = [d.name for d in new.daemons + old.daemons]
        wait_for(lambda: all(streams.latest(n) for n in names), 10, "a sample of every router")
        t = time.monotonic()
        wait_for(lambda: all(streams.latest(n)[0] > t + 1.0 for n in names), 10, "samples flowing")
        st = links.stats()
        print(st)
        assert st["subscribed_udp"] == 4 and st["subscriptions"] == 6 and st["subscribe_refused"] == 0
        assert st["udp_dropped"] == 0 and streams.bad == {}
        # The four new daemons' samples as datagrams but one period in ten; the two older ones' on the connection.
        on_conn = st["samples_received"] - st["udp_received"]
        assert st["udp_received"] >= 4 * 8 and on_conn >= 2 * 8, st
        assert {v["vr"] for v in streams.latest("r00000")[1]} == {"vr0", "vr1", "vr2", "vr3"}
        assert len(new.udp) == 4 and len(old.udp) == 0
    finally:
        streams.close()
        links.close()
        new.stop()
        old.stop()


class _Subscribed(RouterPeer):
    """A daemon that answers ``subscribe`` with the datagrams on and keeps the key and address it was sent;
    the test sends the datagrams."""

    def __init__(self) -> None:
        self.asks: list[dict[str, Any]] = []
        super().__init__()

    def reply(self, req: dict[str, Any]) -> list[bytes] | None:
        result: dict[str, Any] = {"pong": True}
        if req["cmd"] == "subscribe":
            self.asks.append(req)
            result = {"subscribed": True, "schema": "xtc-samples/2", "period_s": 10.0, "udp": True}
        return [json.dumps({"v": 1, "id": req["id"], "ok": True, "result": result}).encode()]


def _message(i: int) -> list[bytes]:
    return [api.SAMPLES_TOPIC, b'{"n": %d}' % i]  # (the sink here takes any frames: the streams check them)


def test_datagrams_without_the_key_replayed_or_malformed_are_dropped_and_counted() -> None:
    peer = _Subscribed()
    links = LinkPool(0.5, sample_udp="127.0.0.1:0")
    got: list[list[bytes]] = []
    links.subscribe("r", peer.endpoint, None, got.append, lambda e: None)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host, port = links.udp_to.rsplit(":", 1)
    to = (host, int(port))
    try:
        wait_for(lambda: peer.asks and links.stats()["subscribed_udp"] == 1, 5, "subscribed")
        ask = peer.asks[0]["udp"]
        assert ask["to"] == links.udp_to and len(bytes.fromhex(ask["key"])) == 32
        key = bytes.fromhex(ask["key"])
        kid = datagram.key_id_of(key)

        def send(seq: int, i: int, k: bytes = key, kid: bytes = kid) -> None:
            tx.sendto(datagram.encode(k, kid, seq, _message(i)), to)

        send(1, 1)
        wait_for(lambda: len(got) == 1, 5, "the first datagram")
        assert got[0] == _message(1)
        bad = [
            b"",  # empty
            b"XTU1" + bytes(30),  # short of a tag
            b"GET / HTTP/1.1\r\n\r\n" + bytes(40),  # not ours
            datagram.encode(bytes(32), datagram.key_id_of(bytes(32)), 2, _message(2)),  # a key nobody was given
            datagram.encode(bytes(32), kid, 2, _message(2)),  # the id of the key, signed with another
        ]
        for d in bad:
            tx.sendto(d, to)
        forged = bytearray(datagram.encode(key, kid, 3, _message(3)))
        forged[40] ^= 0xFF  # one bit of the samples changed in flight
        tx.sendto(bytes(forged), to)
        send(1, 9)  # replayed: the number of one taken
        send(5, 5)
        send(4, 4)  # reordered after 5: dropped as a replay
        send(6, 6)
        wait_for(lambda: len(got) == 3, 5, "the good datagrams")
        time.sleep(0.3)
        assert got == [_message(1), _message(5), _message(6)]
        assert links.udp_dropped == {"short": 2, "magic": 1, "unknown_key": 1, "bad_tag": 2, "replayed": 2}
        assert links.stats()["udp_received"] == 3
        # The pool's other work goes on: an exchange on the same loop.
        res: list[Any] = []
        links.exchange_many([("r", peer.endpoint, None, [{"cmd": "ping"}], lambda _r, r: res.append(r))])
        wait_for(lambda: res, 5, "the ping's reply")
        # Subscribed again: a fresh key; the old one's datagrams are refused.  (Asked again after a silence, the
        # same: the real daemon's restart below.)
        links.unsubscribe("r", peer.endpoint, None)
        links.subscribe("r", peer.endpoint, None, got.append, lambda e: None)
        wait_for(lambda: len(peer.asks) >= 2 and links.stats()["subscribed_udp"] == 2, 10, "subscribed again")
        key2 = bytes.fromhex(peer.asks[-1]["udp"]["key"])
        assert key2 != key
        send(7, 7)
        wait_for(lambda: links.udp_dropped.get("unknown_key") == 2, 5, "the old key refused")
        send(1, 8, key2, datagram.key_id_of(key2))
        wait_for(lambda: len(got) == 4, 5, "the new key's datagram, numbered from 1 again")
        assert got[-1] == _message(8)
    finally:
        tx.close()
        links.close()
        peer.close()


def test_a_pool_that_cannot_bind_its_address_says_so() -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    taken.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError):
            LinkPool(0.5, sample_udp=f"127.0.0.1:{taken.getsockname()[1]}")
        with pytest.raises(ValueError, match="wildcard"):
            LinkPool(0.5, sample_udp="0.0.0.0:0")
    finally:
        taken.close()


def test_an_engine_measures_a_real_daemon_from_its_datagrams_across_its_restart(tmp_path: Path, make_daemon: Any) -> None:
    """A real ``xtc daemon``: the engine measures its routers from datagrams (nine periods in ten); the
    daemon restarted, it is asked again with a fresh key and the datagrams come again; the engine gone,
    the daemon ends the subscription at its next period on the connection."""
    d = make_daemon("u", [{"name": f"v{i}", "traffic": "udp", "offered_pps": 10000.0} for i in range(4)],
                    period_s=0.1)
    store = d.sampled_routers(tmp_path / "p.db", 10)
    links = LinkPool(0.5, sample_udp="127.0.0.1:0")
    streams = SampleStreams(max_vrs=8, links=links)
    eng = Engine(store, links, period_s=0.2, samples=streams)
    try:
        eng.start()
        wait_for(lambda: eng.sampled >= 10 * 5 and links.udp_received >= 10, 15, "the routers measured from datagrams")
        assert links.stats()["subscribed_udp"] == 1 and links.udp_dropped == {}
        d.restart()
        restarted = time.monotonic()
        wait_for(lambda: links.stats()["subscribed_udp"] >= 2, 15, "subscribed again")
        received = links.udp_received
        wait_for(lambda: all((streams.latest(f"r{i:02d}") or (0,))[0] > restarted + 0.5 for i in range(10)), 15,
                 "samples again from the restarted daemon")
        wait_for(lambda: links.udp_received >= received + 10, 5, "datagrams again")
        print(links.stats(), links.udp_dropped)
        assert links.udp_dropped.get("bad_tag", 0) == 0 and eng.error is None
    finally:
        eng.stop()
        store.close()
    # The engine gone: its port read by the test.  The daemon's datagrams stop once a period on the connection
    # has found the peer gone (one in LINK_EVERY: 1 s at this period).
    host, port = links.udp_to.rsplit(":", 1)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((host, int(port)))
    rx.settimeout(0.5)
    try:
        t = time.monotonic()
        while True:
            try:
                rx.recv(65536)
            except TimeoutError:
                break
            assert time.monotonic() - t < 5.0, "datagrams still sent to an engine gone"
    finally:
        rx.close()


@pytest.mark.parametrize("policer_db", ["sqlite"], indirect=True)  # (the datagrams do not touch the database)
def test_the_served_policer_takes_datagrams_on_the_address_its_configuration_names(make_policer: Any) -> None:
    """``engine.sample_udp`` reaches the engine process of ``xtc policer serve``: every daemon holds a
    datagram target, sends datagrams, and its routers are measured."""
    fleet = Fleet(3, vrs_per_router=2, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp").start()
    try:
        pol = make_policer(period_s=0.2, extra_config='sample_udp = "127.0.0.1:0"\n')
        for r in fleet.routers():
            pol.call("POST", "/routers", json={"name": r["name"], "endpoint": r["endpoint"], "capacity_pps": 1e6,
                                               "pub_endpoint": r["pub_endpoint"]})
        wait_for(lambda: len(fleet.udp) == 3 and fleet.udp.sent >= 3 * 5, 15, "every daemon sending datagrams")
        wait_for(lambda: all(pol.get(f"/routers/{d.name}")["status"] == "reachable" for d in fleet.daemons), 10,
                 "every router measured")
        assert pol.get("/health")["bad_samples"] == 0 and fleet.udp.failed == 0
    finally:
        fleet.stop()
