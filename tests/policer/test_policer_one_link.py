"""One connection per router (issue 50, docs/design/one-link.md): the engine takes a daemon's samples over
the connection its link pool keeps to the daemon's manager socket (``subscribe``), not on a second
connection to its PUB socket; an older daemon (no such command) is read through its PUB socket; a
lost subscription (a daemon restarted) is asked for again.  Real sockets: the stand-in daemons of the
testbed's fleet, and a real ``xtc daemon`` process for the restart."""

from __future__ import annotations

import json
import math
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for
from fakes.daemon import RouterPeer
from xtc_lab.policer_fleet import Fleet

from xtc.daemon import api
from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool, tcp_sockets, tcp_states
from xtc.policer.samples import SampleStreams
from xtc.service.curve import generate_keypair, load_public

pytestmark = pytest.mark.slow


def _port(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def _streams(fleet: Fleet, links: LinkPool | None) -> SampleStreams:
    streams = SampleStreams(max_vrs=8, links=links)
    streams.want({r["name"]: (r["pub_endpoint"], None, r["endpoint"]) for r in fleet.routers()})
    return streams


def test_samples_come_over_the_one_connection_kept_to_each_daemon() -> None:
    n = 6
    fleet = Fleet(n, vrs_per_router=4, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp").start()
    manager = [_port(d.endpoint) for d in fleet.daemons]
    pub = [_port(d.pub_endpoint) for d in fleet.daemons]
    # The host's sockets before the policer connects (the listeners, and connections of earlier tests toward
    # the same port numbers still in TIME-WAIT for 60 s) are left out: what is counted is the links' own.
    before = tcp_sockets()
    links = LinkPool(0.5)
    streams = _streams(fleet, links)
    try:
        wait_for(lambda: all(streams.latest(d.name) for d in fleet.daemons), 10, "a sample of every router")
        t = time.monotonic()
        wait_for(lambda: all(streams.latest(d.name)[0] > t + 0.3 for d in fleet.daemons), 5, "samples flowing")
        assert tcp_states(manager, ignore=before) == {"established": n}, "one connection per daemon, none closed"
        assert tcp_states(pub, ignore=before) == {}, "none to the PUB sockets"
        assert streams.linked == n and streams._socks == {}
        assert [len(d.link_peers) for d in fleet.daemons] == [1] * n
        st = links.stats()
        assert st["connections"] == n and st["subscriptions"] == n and st["subscribe_refused"] == 0
        assert {v["vr"] for v in streams.latest("r00000")[1]} == {"vr0", "vr1", "vr2", "vr3"}
        assert streams.bad == {} and st["stray_samples"] == 0
        # A router no longer wanted: its sink dropped, the daemon told (the last one of its subscription).
        streams.want({r["name"]: (r["pub_endpoint"], None, r["endpoint"]) for r in fleet.routers()[1:]})
        wait_for(lambda: not fleet.daemons[0].link_peers and streams.latest("r00000") is None, 5,
                 "the daemon unsubscribed")
    finally:
        streams.close()
        links.close()
        fleet.stop()


def test_silent_and_slow_daemons_delay_no_other_subscription() -> None:
    """Daemons that never answer, and ones that answer late, hold up only their own ``subscribe``."""
    fleet = Fleet(12, vrs_per_router=2, dead_fraction=0.25, slow_fraction=0.25, slow_s=2.0, publish=True,
                  period_s=0.2).start()
    links = LinkPool(0.5)
    streams = _streams(fleet, links)
    try:
        ok = [d.name for d in fleet.daemons if d.mode == "ok"]
        t = time.monotonic()
        wait_for(lambda: all(streams.latest(n) for n in ok), 3, "a sample of every healthy router")
        print(f"every healthy router's first sample after {time.monotonic() - t:.2f} s")
        assert all(streams.latest(d.name) is None for d in fleet.daemons if d.mode == "dead")
    finally:
        streams.close()
        links.close()
        fleet.stop()


def test_an_older_daemon_is_read_through_its_pub_socket() -> None:
    n = 4
    fleet = Fleet(n, vrs_per_router=2, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp",
                  link_samples=False).start()  # they refuse 'subscribe' (unknown_command), as before it
    before = tcp_sockets()
    links = LinkPool(0.5)
    streams = _streams(fleet, links)
    try:
        wait_for(lambda: all(streams.latest(d.name) for d in fleet.daemons), 10, "a sample of every router")
        assert links.stats()["subscribe_refused"] == n and streams.linked == 0 and len(streams._socks) == n
        assert tcp_states([_port(d.pub_endpoint) for d in fleet.daemons], ignore=before) == {"established": n}
        assert all(not d.link_peers for d in fleet.daemons)
    finally:
        streams.close()
        links.close()
        fleet.stop()


def test_a_lost_subscription_is_asked_for_again() -> None:
    """A daemon that no longer sends (it forgot the peer: restarted, or the connection was made again)
    is sent ``subscribe`` again after 2.5 of its periods without a sample; bad messages over the link
    are counted and dropped as on the PUB socket."""
    fleet = Fleet(2, vrs_per_router=2, dead_fraction=0.0, publish=True, period_s=0.2).start()
    links = LinkPool(0.5)
    streams = _streams(fleet, links)
    try:
        wait_for(lambda: all(streams.latest(d.name) for d in fleet.daemons), 10, "a sample of every router")
        d = fleet.daemons[0]
        d.link_peers.clear()
        t = time.monotonic()
        wait_for(lambda: d.link_peers and streams.latest(d.name)[0] > t + 0.2, 5, "subscribed again")
        assert links.resubscribes >= 1
        d.inject = [[b"samples", b"{not json"], [b"samples", b"{}", b"extra"]]
        wait_for(lambda: streams.bad.get(d.name, 0) == 2, 5, "bad samples counted")
        t = time.monotonic()
        wait_for(lambda: streams.latest(d.name)[0] > t, 5, "good ones taken still")
    finally:
        streams.close()
        links.close()
        fleet.stop()


def test_an_engine_follows_a_restarted_daemon_on_one_connection(tmp_path: Path, make_daemon: Any) -> None:
    """A real ``xtc daemon``: the engine measures its routers from the samples that come over the one
    connection it keeps to the manager socket, none to the PUB socket; the daemon restarted, the
    connection is made again and the samples asked for again, with at most one socket in TIME-WAIT."""
    d = make_daemon("sim", [{"name": f"v{i}", "traffic": "udp", "offered_pps": 10000.0} for i in range(4)],
                    period_s=0.2)
    store = d.sampled_routers(tmp_path / "p.db", 20)
    links = LinkPool(0.5)
    streams = SampleStreams(max_vrs=8, links=links)
    eng = Engine(store, links, period_s=0.2, samples=streams)
    before = tcp_sockets()  # the fixture's own pings of the daemon, and earlier tests' sockets, left out
    try:
        eng.start()
        wait_for(lambda: eng.sampled >= 20 * 5, 15, "the routers measured from their samples")
        assert tcp_states([d.port], ignore=before) == {"established": 1}
        assert tcp_states([d.pub_port], ignore=before) == {}
        assert links.stats()["subscriptions"] == 1 and streams.linked == 20
        d.restart()
        restarted = time.monotonic()
        wait_for(lambda: all((streams.latest(f"r{i:02d}") or (0,))[0] > restarted + 0.5 for i in range(20)), 15,
                 "samples again from the restarted daemon")
        sampled = eng.sampled
        time.sleep(1.0)
        assert eng.sampled - sampled >= 20 * 3, "measured from the samples again"
        after, pub_after = tcp_states([d.port], ignore=before), tcp_states([d.pub_port], ignore=before)
        print(f"toward the daemon: {after}, its PUB socket: {pub_after}; links: {links.stats()}")
        assert after.get("established") == 1 and after.get("time_wait", 0) <= 1, after
        assert pub_after == {}, "never a connection to the PUB socket"
        assert links.resubscribes + links.resets >= 1 and eng.error is None
    finally:
        eng.stop()
        store.close()


@pytest.mark.parametrize("transport", ["zmtp", "libzmq"])
def test_samples_over_a_curve_connection_and_none_for_an_unknown_key(tmp_path: Path, make_daemon: Any,
                                                                     transport: str) -> None:
    """With CURVE the subscription is on the one authenticated connection (one handshake); a client
    whose key the daemon does not know gets no answer and no samples.  Both ways of speaking the link."""
    keys, clients = tmp_path / "keys", tmp_path / "clients"
    server_pub, server_sec = generate_keypair(keys, "daemon")
    policer_pub, policer_sec = generate_keypair(keys, "policer")
    _, stranger_sec = generate_keypair(keys, "stranger")
    clients.mkdir()
    (clients / "policer.key").write_bytes(policer_pub.read_bytes())
    server_key = load_public(server_pub).decode()
    d = make_daemon("c", [{"name": "w1", "traffic": "udp", "offered_pps": 30000.0}], period_s=0.2,
                    curve=(policer_sec, server_key), server_keys=(server_sec, clients))
    pub = f"tcp://127.0.0.1:{d.pub_port}"
    before = tcp_sockets()  # an earlier test's connection toward the PUB port's number can still wait
    links, stranger = LinkPool(0.5, policer_sec, transport=transport), LinkPool(0.5, stranger_sec, transport=transport)
    streams = SampleStreams(max_vrs=8, curve_secret_file=policer_sec, links=links)
    other = SampleStreams(max_vrs=8, curve_secret_file=stranger_sec, links=stranger)
    try:
        streams.want({"r": (pub, server_key, d.endpoint)})
        other.want({"r": (pub, server_key, d.endpoint)})
        wait_for(lambda: streams.latest("r"), 10, "samples over the CURVE connection")
        time.sleep(1.0)
        assert other.latest("r") is None and stranger.stats()["subscribed"] == 0
        assert links.stats()["subscriptions"] == 1 and links.connects == 1
        assert tcp_states([d.pub_port], ignore=before) == {}, "no connection to the PUB socket"
    finally:
        for s in (streams, other):
            s.close()
        links.close()
        stranger.close()


class _Pushy(RouterPeer):
    """A daemon that sends samples messages nobody asked for (before every reply), and bad ones to a
    subscriber."""

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, empty, body = self.sock.recv_multipart()
            req = json.loads(body)
            self.requests += 1
            self.sock.send_multipart([ident, b"", b"samples", b"{not json"])
            result = {"subscribed": True, "period_s": 0.2} if req["cmd"] == "subscribe" else {"pong": True}
            self.sock.send_multipart([ident, empty, json.dumps({"v": 1, "id": req["id"], "ok": True,
                                                                "result": result}).encode()])


def test_samples_nobody_asked_for_are_dropped_and_bad_ones_counted() -> None:
    """A samples message on a connection without a subscription is dropped and counted
    (``stray_samples``), never taken for a reply; a bad one to a subscriber is counted as a bad sample
    and its router's newest good sample stays."""
    peer = _Pushy()
    links = LinkPool(0.5)
    try:
        got: list[Any] = []
        links.exchange_many([("r", peer.endpoint, None, [{"cmd": "ping"}], lambda _r, res: got.append(res))])
        wait_for(lambda: got, 5, "the ping's reply")
        assert got[0] == [{"pong": True}]
        wait_for(lambda: links.stray_samples == 1, 5, "the stray sample counted")
        assert links.bad_replies == 0
        streams = SampleStreams(max_vrs=8, links=links)
        try:
            streams.want({"r": ("tcp://127.0.0.1:1", None, peer.endpoint)})
            wait_for(lambda: streams.bad.get("r", 0) >= 1, 5, "a bad sample over the link counted")
            assert streams.latest("r") is None and links.bad_replies == 0
        finally:
            streams.close()
    finally:
        links.close()
        peer.close()


def test_the_compact_format_is_asked_for_and_a_daemon_without_it_keeps_json() -> None:
    """The pool asks for ``xtc-samples/3`` in ``subscribe``; a daemon that refuses the member (older than
    it: ``bad_field``) is asked again without it and sends /2 on the same connection; the engine's
    streams read both, with the same values; bad /3 messages over the link are dropped and counted, and
    the router's good samples go on."""
    new = Fleet(3, vrs_per_router=4, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp").start()
    old = Fleet(3, vrs_per_router=4, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp", first=3,
                samples_v3=False).start()
    links = LinkPool(0.5)
    streams = SampleStreams(max_vrs=8, links=links)
    streams.want({r["name"]: (r["pub_endpoint"], None, r["endpoint"]) for f in (new, old) for r in f.routers()})
    daemons = [*new.daemons, *old.daemons]
    try:
        wait_for(lambda: all(streams.latest(d.name) for d in daemons), 10, "a sample of every router")
        st = links.stats()
        assert st["subscribed_v3"] == 3 and st["subscribed"] == 6 and st["subscribe_refused"] == 0
        assert [list(d.link_peers.values()) for d in new.daemons] == [["xtc-samples/3"]] * 3
        assert [list(d.link_peers.values()) for d in old.daemons] == [["xtc-samples/2"]] * 3
        assert streams.linked == 6 and streams._socks == {} and streams.bad == {}
        for d in daemons:  # the daemon's VRs, as it holds them
            got = {v["vr"]: (v["state"], v["offered_pps"]) for v in streams.latest(d.name)[1]}
            assert got == {n: (v.state, float(v.offered_pps)) for n, v in d.vrs.items()}, d.name
        d = new.daemons[0]
        good = api.samples_message_v3(1.0, 0.2, [[f"vr{i}", "inactive", True, None, 1.0, 1.0, None, None, None, None]
                                                  for i in range(2)])
        body = good[2]  # the numbers (2 VRs x 5), the codes (2 x 4), the names
        d.inject = [[good[0], good[1].replace(b'"layout":1', b'"layout":7'), body],
                    [*good[:2], body[:72] + struct.pack("<d", math.nan) + body[80:]],  # a NaN
                    [*good[:2], body[:-1]],  # a byte short
                    [*good[:2], body[:88] + b"vr0\nvr0\n"]]  # a VR twice
        wait_for(lambda: streams.bad.get(d.name, 0) == 4, 5, "the bad /3 messages counted")
        t = time.monotonic()
        wait_for(lambda: streams.latest(d.name)[0] > t, 5, "good ones taken still")
        assert links.stats()["stray_samples"] == 0
    finally:
        streams.close()
        links.close()
        new.stop()
        old.stop()


@pytest.mark.parametrize("schema", ["xtc-samples/2", None])
def test_the_served_policer_asks_for_the_format_its_configuration_names(make_policer: Any, schema: str | None) -> None:
    """``engine.sample_schema`` reaches the engine's link pool of ``xtc policer serve``: each daemon holds
    the subscription in that format (the default: ``xtc-samples/3``), and its routers are measured."""
    fleet = Fleet(3, vrs_per_router=2, dead_fraction=0.0, publish=True, period_s=0.2, transport="tcp").start()
    try:
        pol = make_policer(period_s=0.2, extra_config=f'sample_schema = "{schema}"\n' if schema else "")
        for r in fleet.routers():
            pol.call("POST", "/routers", json={"name": r["name"], "endpoint": r["endpoint"], "capacity_pps": 1e6,
                                               "pub_endpoint": r["pub_endpoint"]})
        want = schema or "xtc-samples/3"
        wait_for(lambda: all(list(d.link_peers.values()) == [want] for d in fleet.daemons), 15,
                 f"every daemon subscribed in {want}")
        wait_for(lambda: all(pol.get(f"/routers/{d.name}")["status"] == "reachable" for d in fleet.daemons), 10,
                 "every router measured")
        assert pol.get("/health")["bad_samples"] == 0
    finally:
        fleet.stop()
