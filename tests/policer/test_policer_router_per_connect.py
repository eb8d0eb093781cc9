"""One ROUTER socket with a connection per daemon (issue 50's memory goal, the link's libzmq share): what the
link pool would rely on, checked on pyzmq's own libzmq with real CURVE handshakes over ipc.

libzmq copies a socket's options into each connection when ``connect`` makes it, so options set just
before a ``connect`` are that connection's: ``ZMQ_CONNECT_ROUTING_ID`` names the peer (messages are
routed to it by that name) and ``ZMQ_CURVE_SERVERKEY`` is the key its handshake checks.  A connection
given the wrong server key gets no handshake and no reply, and the others are untouched."""

from __future__ import annotations

import time
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message


def _daemon(ctx: zmq.Context, endpoint: str) -> tuple[zmq.Socket, bytes]:
    """A daemon's manager socket: a CURVE server with a key of its own; returns it and its public key."""
    pub, sec = zmq.curve_keypair()
    s = ctx.socket(zmq.ROUTER)
    s.linger = 0
    s.curve_server = True
    s.curve_secretkey = sec
    s.bind(endpoint)
    return s, pub


def test_one_router_holds_curve_connections_to_daemons_of_different_keys(tmp_path: Path) -> None:
    ctx = zmq.Context()
    try:
        eps = [f"ipc://{tmp_path}/d{i}" for i in range(3)]
        daemons = [_daemon(ctx, ep) for ep in eps]
        client_pub, client_sec = zmq.curve_keypair()
        r = ctx.socket(zmq.ROUTER)
        r.linger = 0
        r.router_mandatory = True
        r.curve_publickey, r.curve_secretkey = client_pub, client_sec
        mon = r.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                   | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                   | zmq.EVENT_DISCONNECTED)
        keys = [daemons[0][1], daemons[1][1], daemons[0][1]]  # d2 given d0's key: its handshake must fail
        for i, ep in enumerate(eps):
            r.setsockopt(zmq.CONNECT_ROUTING_ID, b"d%d" % i)
            r.curve_serverkey = keys[i]
            r.connect(ep)
        for i in range(3):  # routed by the connection's name at once (the pipe exists before the handshake)
            r.send_multipart([b"d%d" % i, b"", b"ping %d" % i])
        heard: dict[int, bytes] = {}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until d0 and d1 have answered, and half a second more for d2
            if len(heard) >= 2:
                deadline = min(deadline, time.monotonic() + 0.5)
            for i, (s, _) in enumerate(daemons):
                if s.poll(10):
                    peer, _, body = s.recv_multipart()
                    heard[i] = body
                    s.send_multipart([peer, b"", b"pong from %d" % i])
        assert heard == {0: b"ping 0", 1: b"ping 1"}  # d2 got nothing: no handshake, no message
        replies = {}
        while r.poll(200):
            peer, _, body = r.recv_multipart()
            replies[peer] = body
        assert replies == {b"d0": b"pong from 0", b"d1": b"pong from 1"}
        events: dict[str, set[int]] = {}
        while mon.poll(100):
            ev = recv_monitor_message(mon)
            events.setdefault(ev["endpoint"].decode(), set()).add(ev["event"])
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED in events[eps[0]]
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED in events[eps[1]]
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in events.get(eps[2], set())
        r.disable_monitor()
        mon.close(0)
        r.close(0)
        for s, _ in daemons:
            s.close(0)
    finally:
        ctx.term()
