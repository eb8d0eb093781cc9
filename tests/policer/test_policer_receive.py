"""The link pool's receive (issue 50, the link thread's share of the CPU goal): every connection's socket
read until ``EAGAIN`` when its descriptor says so, a bounded batch at a time, with no future per message.
What that must not cost: a daemon that floods its connection delays no other connection's reply by more
than a batch, and a bad message in the middle of a burst is dropped and counted while the messages after
it are still taken.  Real sockets: test daemons' ROUTER sockets on loopback (:class:`RouterPeer`)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

import pytest
import zmq
from procs import wait_for
from fakes.daemon import RouterPeer

from xtc.daemon import api
from xtc.policer.link import READ_BATCH, LinkPool, _PacedSelector
from xtc.policer.samples import SampleStreams

pytestmark = pytest.mark.slow

ROW = ["vr0", "active", True, 1000.0, 900.0, 1200.0, 1.5, None, None, None]


def _body(t: float, forwarded_pps: float = 900.0) -> bytes:
    row = [*ROW[:4], forwarded_pps, *ROW[5:]]
    return json.dumps({"schema": api.SAMPLES_SCHEMA, "t_unix_s": t, "period_s": 1.0,
                       "fields": list(api.SAMPLE_FIELDS), "vrs": [row]}).encode()


class _Pusher(RouterPeer):
    """A daemon that answers ``subscribe`` (and anything else) and then sends, from its own thread, the
    bursts of messages a test queues in :attr:`bursts` (each a list of frame lists, sent back to back)."""

    def __init__(self) -> None:
        self.ident: bytes | None = None
        self.bursts: list[list[list[bytes]]] = []
        self.sent = threading.Event()
        super().__init__()
        self.sock.setsockopt(zmq.SNDHWM, 0)  # queue the whole burst toward the policer

    def _run(self) -> None:
        while not self._stop.is_set():
            while self.bursts and self.ident is not None:
                for frames in self.bursts.pop(0):
                    self.sock.send_multipart([self.ident, b"", *frames])
                self.sent.set()
            if not self.sock.poll(10):
                continue
            ident, empty, body = self.sock.recv_multipart()
            req = json.loads(body)
            self.requests += 1
            result = {"subscribed": True, "period_s": 1.0} if req["cmd"] == "subscribe" else {"pong": True}
            self.sock.send_multipart([ident, empty, json.dumps({"v": 1, "id": req["id"], "ok": True,
                                                                "result": result}).encode()])
            self.ident = ident


class _Slow(RouterPeer):
    """A daemon that answers every request after ``delay_s``."""

    delay_s = 0.0

    def reply(self, req: dict[str, Any]) -> list[bytes] | None:
        self._stop.wait(self.delay_s)
        return [json.dumps({"v": 1, "id": req["id"], "ok": True, "result": {"pong": True}}).encode()]


@pytest.mark.parametrize("transport", ["zmtp", "libzmq"])
def test_a_flooding_daemon_delays_another_connections_reply_by_at_most_a_batch(transport: str) -> None:
    """A daemon's burst of thousands of messages that reached the socket before another daemon's reply
    is read a batch at a time, the other connection's turn between two batches: the reply is handed on
    after at most a couple of batches of the burst, not after the whole of it."""
    flood, other = _Pusher(), _Slow()
    pool = LinkPool(5.0, transport=transport)
    seen: list[Any] = []  # the order in which the link thread hands things on
    try:
        pool.subscribe("flood", flood.endpoint, None, lambda frames: seen.append("a"), lambda e: None)
        wait_for(lambda: pool.stats()["subscriptions"] == 1, 5, "the subscription")
        got: list[Any] = []
        pool.exchange_many([("o", other.endpoint, None, [{"cmd": "ping"}], lambda _r, res: got.append(res))])
        wait_for(lambda: got, 5, "the other daemon's first reply")  # its connection is up
        other.delay_s = 0.4
        seen.clear()
        pool.exchange_many([("o", other.endpoint, None, [{"cmd": "ping"}],
                             lambda _r, res: (seen.append("b"), got.append(res)))])
        wait_for(lambda: other.requests == 2, 5, "the other daemon's second request")
        gate = threading.Event()
        pool._loop.call_soon_threadsafe(gate.wait, 10)  # the link thread held while both arrive
        flood.bursts.append([[b"samples", b"x"]] * 3000)
        assert flood.sent.wait(5)
        time.sleep(0.8)  # the other's reply (0.4 s after its request) comes after the burst
        gate.set()
        wait_for(lambda: "b" in seen, 5, "the other daemon's reply")
        ahead = seen.index("b")
        print(f"the other connection's reply handed on after {ahead} of the burst's messages")
        assert got[-1] == [{"pong": True}]
        assert ahead <= 3 * READ_BATCH, f"the reply waited for {ahead} messages of another connection"
        wait_for(lambda: seen.count("a") >= 1000, 10, "the burst read too")
    finally:
        pool.close()
        flood.close()
        other.close()


def test_a_bad_message_in_a_burst_is_dropped_and_counted_and_the_others_are_taken() -> None:
    """In one burst on one connection: good samples, a bad one, a reply that answers nothing, a message of
    three frames, and a good sample last: the bad ones are counted (``bad`` samples, ``bad_replies``), the
    good ones taken, and the last one is the router's newest (read in the same turn: nothing comes after
    it to wake the reader again)."""
    peer = _Pusher()
    pool = LinkPool(2.0)
    streams = SampleStreams(max_vrs=8, links=pool)
    try:
        streams.want({"r": ("tcp://127.0.0.1:1", None, peer.endpoint)})
        wait_for(lambda: pool.stats()["subscriptions"] == 1 and peer.ident is not None, 5, "the subscription")
        received = pool.samples_received
        peer.bursts.append([[b"samples", _body(1.0, 100.0)],
                            [b"samples", b"{not json"],
                            [json.dumps({"v": 1, "id": 10 ** 9, "ok": True, "result": {}}).encode()],
                            [b"x", b"y", b"z"],
                            [b"samples", _body(2.0, 200.0)],
                            [b"samples", _body(3.0, 300.0)]])
        wait_for(lambda: pool.samples_received - received == 4, 5, "the burst's samples")
        wait_for(lambda: streams.latest("r") is not None and streams.latest("r")[1].forwarded_pps[0] == 300.0, 2,
                 "the last good sample taken")
        assert streams.bad == {"r": 1}
        assert pool.bad_replies == 2
        assert pool.stats()["stray_samples"] == 0
    finally:
        streams.close()
        pool.close()
        peer.close()


@pytest.mark.exclusive  # times
def test_the_paced_wait_holds_back_no_timer_and_no_ready_callback() -> None:
    """The I/O thread's selector waits at most once a pace (here 0.3 s), but a timer due sooner still runs
    at its time, and callbacks already ready run at once; a readable socket is read within the pace."""
    loop = asyncio.SelectorEventLoop(_PacedSelector(0.3))
    a, b = socket.socketpair()
    try:
        loop.run_until_complete(asyncio.sleep(0))  # a wait: the next one is held back until 0.3 s after it
        t = time.monotonic()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert time.monotonic() - t < 0.2, "a timer held back by the pace"
        t = time.monotonic()
        for _ in range(20):  # ready callbacks: each turn's wait has timeout 0
            loop.run_until_complete(asyncio.sleep(0))
        assert time.monotonic() - t < 0.2, "ready callbacks held back by the pace"
        got = loop.create_future()
        loop.add_reader(a.fileno(), lambda: got.done() or got.set_result(time.monotonic()))
        t = time.monotonic()
        b.send(b"x")
        read_at = loop.run_until_complete(asyncio.wait_for(got, 2))
        assert read_at - t < 0.3 + 0.1, "a readable socket waited more than the pace"
    finally:
        loop.close()
        a.close()
        b.close()


def test_bad_compact_messages_in_a_burst_are_dropped_and_counted_and_the_others_are_taken() -> None:
    """The same over ``xtc-samples/3`` (columns in a binary frame): good messages, one whose body is cut
    short, one whose numbers hold a NaN, one of four frames, and a good one last: the bad ones counted,
    the good ones taken as /3, the last the router's newest."""
    peer = _Pusher()
    pool = LinkPool(2.0)
    streams = SampleStreams(max_vrs=8, links=pool)

    def v3(t: float, forwarded_pps: float) -> list[bytes]:
        return api.samples_message_v3(t, 1.0, [[*ROW[:4], forwarded_pps, *ROW[5:]]])

    try:
        streams.want({"r": ("tcp://127.0.0.1:1", None, peer.endpoint)})
        wait_for(lambda: pool.stats()["subscriptions"] == 1 and peer.ident is not None, 5, "the subscription")
        received = pool.samples_received
        topic, head, body = v3(2.0, 200.0)
        nan = bytearray(body)
        nan[8:16] = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"  # the first VR's forwarded_pps: NaN
        peer.bursts.append([v3(1.0, 100.0), [topic, head, body[:-3]], [topic, head, bytes(nan)],
                            [topic, head, body, b"more"], v3(2.0, 200.0), v3(3.0, 300.0)])
        wait_for(lambda: pool.samples_received - received == 6, 5, "the burst's samples")
        wait_for(lambda: streams.latest("r") is not None and streams.latest("r")[1].forwarded_pps[0] == 300.0, 2,
                 "the last good sample taken")
        assert streams.latest("r")[1].arrays is not None  # read as /3
        assert streams.bad == {"r": 3}
        assert pool.bad_replies == 0 and pool.stats()["stray_samples"] == 0
    finally:
        streams.close()
        pool.close()
        peer.close()
