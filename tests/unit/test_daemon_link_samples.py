"""The daemon's samples over its manager socket (issue 50, docs/design/one-link.md): a DEALER peer that
sends ``subscribe`` gets each period's samples on that same connection, bounded and ended when it
leaves; REQ clients are answered as the REP socket answered them.  Real ZeroMQ sockets over ipc://,
the daemon's service in this process on the simulated plant."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import zmq
from test_daemon_sample_listeners import make, step, until

from xtc.daemon import api
from xtc.daemon.service import MAX_LINK_SUBSCRIBERS


@contextlib.contextmanager
def served(tmp_path) -> Iterator[tuple]:
    """The daemon's service on the simulated plant (``make``) and a ZeroMQ context for its peers:
    (service, clock, samples built, context); both closed at the end."""
    svc, clock, built = make(tmp_path)
    ctx = zmq.Context()
    try:
        yield svc, clock, built, ctx
    finally:
        svc._close_sockets()
        ctx.destroy(0)


def _dealer(svc, ctx: zmq.Context) -> zmq.Socket:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 3000)
    s.connect(svc.rep.getsockopt_string(zmq.LAST_ENDPOINT))
    return s


def _ask(svc, s: zmq.Socket, cmd: str, rid: int = 1) -> dict:
    """Send a request on a DEALER, let the daemon serve it, and return the reply."""
    s.send_multipart([b"", json.dumps({"v": 1, "cmd": cmd, "id": rid}).encode()])
    got: list = []

    def served() -> bool:
        svc._serve_requests()
        if s.poll(10):
            got.append(s.recv_multipart())
        return bool(got)

    until(served)
    frames = got[0]
    assert len(frames) == 2 and frames[0] == b"", frames
    return json.loads(frames[1])


def _samples(s: zmq.Socket, timeout_ms: int = 2000) -> list[list[bytes]]:
    out = []
    while s.poll(timeout_ms):
        out.append(s.recv_multipart())
        timeout_ms = 50
    return out


def test_a_dealer_that_subscribes_gets_the_samples_on_its_manager_connection(tmp_path):
    with served(tmp_path) as (svc, clock, built, ctx):
        s = _dealer(svc, ctx)
        step(svc, clock)
        assert built == [] and _samples(s, 200) == []  # nobody subscribed: none built, none sent
        rep = _ask(svc, s, "subscribe")
        assert rep["ok"] is True and rep["result"] == {"subscribed": True, "schema": api.SAMPLES_SCHEMA, "period_s": 1.0}
        assert len(svc.link_subscribers) == 1
        step(svc, clock, 2)
        msgs = _samples(s)
        assert len(msgs) == 2 and len(built) == 2
        for m in msgs:
            assert m[0] == b"" and m[1] == api.SAMPLES_TOPIC
            assert [x["vr"] for x in api.decode_samples(m[2])] == ["vr1"]
        # Requests still work on the same connection, and a reply is told from a sample by its frames.
        assert _ask(svc, s, "list", 2)["result"]["vrs"][0]["vr"] == "vr1"
        assert _ask(svc, s, "subscribe", 3)["ok"] is True and len(svc.link_subscribers) == 1  # again: the same
        rep = _ask(svc, s, "unsubscribe", 4)
        assert rep["result"] == {"subscribed": False} and not svc.link_subscribers
        n = len(built)
        step(svc, clock, 2)
        assert _samples(s, 200) == [] and len(built) == n  # none built for nobody
        s.close(0)


def test_a_subscriber_that_is_gone_loses_its_subscription(tmp_path):
    with served(tmp_path) as (svc, clock, _, ctx):
        s = _dealer(svc, ctx)
        assert _ask(svc, s, "subscribe")["ok"] is True
        s.close(0)  # the peer goes away without unsubscribing

        def gone() -> bool:
            step(svc, clock)
            return not svc.link_subscribers

        until(gone)
        step(svc, clock)
        assert not svc.sample_listeners()  # nobody left: no more samples built


def test_a_slow_subscriber_loses_samples_and_never_holds_up_the_daemon(tmp_path):
    with served(tmp_path) as (svc, clock, _, ctx):
        svc.rep.setsockopt(zmq.SNDHWM, 4)  # before the peer connects: a pipe takes the HWM it is made with
        s = _dealer(svc, ctx)
        s.setsockopt(zmq.RCVHWM, 1)
        assert _ask(svc, s, "subscribe")["ok"] is True
        dropped = svc.metrics.sends_dropped.labels("samples")._value
        periods = 0
        while dropped.get() == 0:  # until the queues and the sockets' buffers are full: the daemon never waits
            clock.t += 1.0
            svc.run_period(clock.t, 1.0)
            periods += 1
            assert periods < 20000, "no samples message was ever dropped"
        for _ in range(100):
            clock.t += 1.0
            svc.run_period(clock.t, 1.0)
        assert dropped.get() >= 100 and len(svc.link_subscribers) == 1  # dropped, the subscription kept
        assert len(_samples(s, 500)) <= periods


def test_req_clients_are_answered_and_cannot_be_flooded_with_samples(tmp_path):
    """A REQ client (``xtc ctl``, an older policer's tools) is answered as by the REP socket; a message
    without the empty delimiter gets no answer and changes nothing; ``subscribe`` is refused past
    :data:`MAX_LINK_SUBSCRIBERS` peers, with the way out named."""
    with served(tmp_path) as (svc, _, _, ctx):
        req = ctx.socket(zmq.REQ)
        req.setsockopt(zmq.LINGER, 0)
        req.connect(svc.rep.getsockopt_string(zmq.LAST_ENDPOINT))
        req.send(json.dumps({"v": 1, "cmd": "ping", "id": "a"}).encode())
        until(lambda: (svc._serve_requests(), req.poll(10))[1])
        assert json.loads(req.recv())["result"]["pong"] is True
        req.send(b"{not json")
        until(lambda: (svc._serve_requests(), req.poll(10))[1])
        assert json.loads(req.recv())["error"]["code"] == "bad_json"

        raw = ctx.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(svc.rep.getsockopt_string(zmq.LAST_ENDPOINT))
        raw.send(json.dumps({"v": 1, "cmd": "subscribe"}).encode())  # no delimiter: not a request
        raw.send_multipart([b"x"] * 20 + [b"", json.dumps({"v": 1, "cmd": "subscribe"}).encode()])  # envelope too long
        for _ in range(20):
            svc._serve_requests()
        assert raw.poll(300) == 0 and not svc.link_subscribers

        peers = [_dealer(svc, ctx) for _ in range(MAX_LINK_SUBSCRIBERS)]
        for i, p in enumerate(peers):
            assert _ask(svc, p, "subscribe", i)["ok"] is True
        extra = _dealer(svc, ctx)
        rep = _ask(svc, extra, "subscribe", 99)
        assert rep["ok"] is False and rep["error"]["code"] == "unsupported"
        assert "manager.pub_endpoint" in rep["error"]["message"]
        assert len(svc.link_subscribers) == MAX_LINK_SUBSCRIBERS
        assert svc.handle_message([json.dumps({"v": 1, "cmd": "subscribe"}).encode()]).find(b"unsupported") > 0
