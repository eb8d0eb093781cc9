"""The daemon's samples over its manager socket (issue 50, docs/design/one-link.md): a DEALER peer that
sends ``subscribe`` gets each period's samples on that same connection, bounded and ended when it
leaves; REQ clients are answered as the REP socket answered them.  Real ZeroMQ sockets over ipc://,
the daemon's service in this process on the simulated plant."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import zmq
from procs import wait_for
from test_daemon_sample_listeners import make, step

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


def _ask(svc, s: zmq.Socket, cmd: str, rid: int = 1, **fields) -> dict:
    """Send a request on a DEALER, let the daemon serve it, and return the reply."""
    s.send_multipart([b"", json.dumps({"v": 1, "cmd": cmd, "id": rid, **fields}).encode()])
    got: list = []

    def served() -> bool:
        svc._serve_requests()
        if s.poll(10):
            got.append(s.recv_multipart())
        return bool(got)

    wait_for(served, 5.0, "the reply", 0.005)
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

        wait_for(gone, 5.0, "the link subscriber to leave", 0.005)
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
        wait_for(lambda: (svc._serve_requests(), req.poll(10))[1], 5.0, "the reply", 0.005)
        assert json.loads(req.recv())["result"]["pong"] is True
        req.send(b"{not json")
        wait_for(lambda: (svc._serve_requests(), req.poll(10))[1], 5.0, "the reply", 0.005)
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


def test_a_peer_that_asks_for_xtc_samples_3_gets_the_compact_format_and_the_others_keep_2(tmp_path):
    """``subscribe`` with ``schema`` ``xtc-samples/3``: that peer gets the columns in binary frames (the same
    values as the JSON rows), another peer and the PUB socket keep /2; each format is built once a period,
    only when someone takes it; an unknown format is refused and changes nothing."""
    from xtc.policer.rows import decode_v3

    with served(tmp_path) as (svc, clock, _, ctx):
        s3, s2 = _dealer(svc, ctx), _dealer(svc, ctx)
        rep = _ask(svc, s3, "subscribe", 1, schema=api.SAMPLES_SCHEMA_V3)
        assert rep["result"] == {"subscribed": True, "schema": api.SAMPLES_SCHEMA_V3, "period_s": 1.0}
        bad = _ask(svc, s2, "subscribe", 2, schema="xtc-samples/9")
        assert bad["ok"] is False and bad["error"]["code"] == "bad_field" and "schema" in bad["error"]["message"]
        assert len(svc.link_subscribers) == 1
        made = {"v2": 0, "v3": 0}
        real2, real3 = api.samples_message, api.samples_message_v3

        def count(kind, real):
            def f(*a):
                made[kind] += 1
                return real(*a)
            return f

        api.samples_message, api.samples_message_v3 = count("v2", real2), count("v3", real3)
        try:
            step(svc, clock)
            (m3,) = _samples(s3)
            assert made == {"v2": 0, "v3": 1}  # only /3 wanted: /2 not built
            assert _ask(svc, s2, "subscribe", 3)["result"]["schema"] == api.SAMPLES_SCHEMA
            step(svc, clock)
            (m3b,) = _samples(s3)
            (m2,) = _samples(s2)
            assert made == {"v2": 1, "v3": 2}
        finally:
            api.samples_message, api.samples_message_v3 = real2, real3
        assert m3[:2] == [b"", api.SAMPLES_TOPIC] and len(m3) == 4 and len(m2) == 3
        vrs, _ = decode_v3(m3b[1:], 4096, 65536)
        want = api.decode_samples(m2[2])
        keys = ("vr", "state", "present", "setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "saturated")
        assert [{k: v[k] for k in keys} for v in vrs] == [{k: w[k] for k in keys} for w in want]
        # The peer that asked for /3 can go back to /2 by subscribing again.
        assert _ask(svc, s3, "subscribe", 4, schema=api.SAMPLES_SCHEMA)["result"]["schema"] == api.SAMPLES_SCHEMA
        step(svc, clock)
        assert len(_samples(s3)[0]) == 3
