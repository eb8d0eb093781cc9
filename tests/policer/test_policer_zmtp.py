"""ZMTP spoken by hand (xtc/policer/zmtp.py): the protocol core on bytes (frames, bounds, a peer that breaks
the protocol), and the same core against real libzmq ROUTER sockets: the NULL and CURVE handshakes, messages
both ways, heartbeats, a client the daemon's authenticator does not know, a server key that is not the
daemon's; then :class:`ZmtpConnection` on a loop, made again after the daemon goes and comes back."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import zmq
from procs import wait_for

from xtc.policer.zmtp import (
    GREETING_BYTES,
    CurveKeys,
    ZmtpClient,
    ZmtpConnection,
    ZmtpError,
    curve_keys,
    parse_metadata,
)
from xtc.service.curve import (
    CurveError,
    generate_keypair,
    load_public,
    load_secret,
    secure_context,
)

T = TypeVar("T")

ROUTER_GREETING = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x01" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _ready(kind: bytes = b"ROUTER") -> bytes:
    body = b"\x05READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", len(kind)) + kind
    return b"\x04" + bytes([len(body)]) + body


def _greeted(**kw: int) -> ZmtpClient:
    c = ZmtpClient(**kw)
    assert bytes(c.out[:10]) == b"\xff" + b"\x00" * 8 + b"\x7f" and len(c.out) == GREETING_BYTES
    c.out.clear()
    assert c.receive(ROUTER_GREETING + _ready()) == [] and c.ready
    assert bytes(c.out).startswith(b"\x04") and b"READY" in c.out and b"DEALER" in c.out
    c.out.clear()
    return c


def test_frames_in_any_pieces_make_whole_messages() -> None:
    c = _greeted()
    wire = b"\x01\x00" + b"\x00\x05hello" + b"\x02" + struct.pack(">Q", 300) + b"x" * 300
    got: list[list[bytes]] = []
    for i in range(len(wire)):  # one byte at a time
        got += c.receive(wire[i:i + 1])
    assert got == [[b"", b"hello"], [b"x" * 300]]
    c.send([b"", b"{}"])
    assert bytes(c.out) == b"\x01\x00" + b"\x00\x02{}"


def test_a_ping_is_answered_and_pongs_counted() -> None:
    c = _greeted()
    ping = b"\x04PING" + struct.pack(">H", 30) + b"ctx"
    assert c.receive(b"\x04" + bytes([len(ping)]) + ping) == []
    assert bytes(c.out) == b"\x04\x08\x04PONGctx" and c.pings_answered == 1 and c.peer_ttl_s == 3.0
    c.receive(b"\x04\x05\x04PONG")
    assert c.pongs == 1


@pytest.mark.parametrize("wire, words", [
    (b"\x00" + b"\x00" * 63, "bad signature"),
    (ROUTER_GREETING[:10] + b"\x02\x00" + ROUTER_GREETING[12:], "ZMTP 2.0"),
    (ROUTER_GREETING[:12] + b"CURVE".ljust(20, b"\x00") + ROUTER_GREETING[32:], "mechanism is CURVE"),
    (ROUTER_GREETING + b"\x00\x02hi", "a message before the handshake"),
    (ROUTER_GREETING + _ready(b"PUB"), "peer is a PUB"),
    (ROUTER_GREETING + b"\x04\x0b\x05ERROR\x04nope", "refused the handshake: nope"),
    (ROUTER_GREETING + _ready() + b"\x08\x00", "reserved flags"),
    (ROUTER_GREETING + _ready() + b"\x02" + struct.pack(">Q", 1 << 40), "over the bound"),
], ids=["signature", "version", "mechanism", "early-message", "peer-type", "error", "flags", "bound"])
def test_a_peer_that_breaks_the_protocol_is_refused(wire: bytes, words: str) -> None:
    with pytest.raises(ZmtpError, match=words):
        ZmtpClient().receive(wire)


def test_a_message_is_bounded_across_its_frames() -> None:
    """libzmq bounds a frame but keeps a message's frames until its last: here the message is bounded too,
    so a peer that never ends one is cut at the bound."""
    c = _greeted(max_frame_bytes=100, max_message_bytes=250)
    part = b"\x01\x64" + b"x" * 100
    c.receive(part + part)
    with pytest.raises(ZmtpError, match="message of more than 250"):
        c.receive(part)


def test_sending_before_the_handshake_is_an_error() -> None:
    with pytest.raises(ZmtpError, match="not connected"):
        ZmtpClient().send([b"x"])


def test_metadata_that_does_not_parse() -> None:
    assert parse_metadata(b"\x01a\x00\x00\x00\x01b") == {b"a": b"b"}
    with pytest.raises(ZmtpError):
        parse_metadata(b"\x01a\x00\x00\x00\x09b")


def test_curve_keys_are_checked(tmp_path: Path) -> None:
    _, sec = generate_keypair(tmp_path, "policer")
    with pytest.raises(CurveError, match="40 Z85"):
        curve_keys(sec, "short")
    with pytest.raises(ValueError, match="32 bytes"):
        CurveKeys(b"x", b"y" * 32, b"z" * 32)


# -- against libzmq -----------------------------------------------------------------------------------------

def _bound_again(make: Callable[[], T]) -> T:
    """``make()`` (a socket bound on a port just closed) once the port is free again: libzmq closes a socket on
    its I/O thread, a moment after ``close``."""
    def attempt() -> T | None:
        try:
            return make()
        except zmq.ZMQError:
            return None

    return wait_for(attempt, 2, "the port free again", step_s=0.02)


async def _up(conn: ZmtpConnection, timeout_s: float = 5.0) -> None:
    """Wait until the connection's handshake is done (as the link pool's sends wait: on its ``waiters``)."""
    while not conn.ready:
        fut = asyncio.get_running_loop().create_future()
        conn.waiters.append(fut)
        await asyncio.wait_for(fut, timeout_s)


def _drive(c: ZmtpClient, s: socket.socket, done: object, timeout_s: float = 5.0) -> list[list[bytes]]:
    """Write what the client has, read what comes, until ``done(messages)``."""
    got: list[list[bytes]] = []
    s.settimeout(0.05)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if c.out:
            s.sendall(bytes(c.out))
            c.out.clear()
        if done(got):  # type: ignore[operator]
            return got
        try:
            data = s.recv(65536)
        except TimeoutError:
            continue
        if not data:
            raise ConnectionError("the peer closed the connection")
        got += c.receive(data)
    raise TimeoutError(f"not done in {timeout_s} s; got {got}")


def _exchange_with(router: zmq.Socket, c: ZmtpClient, s: socket.socket) -> None:
    _drive(c, s, lambda g: c.ready)
    assert c.peer_type == b"ROUTER"
    c.send([b"", b"request", b"x" * 70000])
    s.sendall(bytes(c.out))
    c.out.clear()
    assert router.poll(5000)
    peer, *msg = router.recv_multipart()
    assert msg == [b"", b"request", b"x" * 70000]
    router.send_multipart([peer, b"", b"reply"])
    router.send_multipart([peer, b"", b"y" * 300])
    assert _drive(c, s, lambda g: len(g) == 2) == [[b"", b"reply"], [b"", b"y" * 300]]
    c.ping(3.0, b"hb")
    _drive(c, s, lambda g: c.pongs == 1)


def test_null_against_a_libzmq_router() -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            _exchange_with(router, ZmtpClient(), s)
    finally:
        router.close(0)
        ctx.term()


@pytest.fixture
def curve_daemon(tmp_path: Path) -> tuple[zmq.Socket, int, Path, str]:
    """A libzmq ROUTER with the daemon's CURVE set-up (its authenticator admits the policer's key only)."""
    keys, clients = tmp_path / "keys", tmp_path / "clients"
    server_pub, server_sec = generate_keypair(keys, "daemon")
    policer_pub, _ = generate_keypair(keys, "policer")
    clients.mkdir()
    (clients / "policer.key").write_bytes(policer_pub.read_bytes())
    ctx, auth = secure_context(server_sec, clients)
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    yield router, port, keys, load_public(server_pub).decode()
    router.close(0)
    auth.stop()
    ctx.term()


def test_curve_against_a_libzmq_router_with_the_daemons_authenticator(curve_daemon: tuple) -> None:
    router, port, keys, server_key = curve_daemon
    with socket.create_connection(("127.0.0.1", port)) as s:
        _exchange_with(router, ZmtpClient(curve_keys(keys / "policer.key_secret", server_key)), s)


def test_curve_refused_for_a_key_the_daemon_does_not_know(curve_daemon: tuple) -> None:
    router, port, keys, server_key = curve_daemon
    _, stranger = generate_keypair(keys, "stranger")
    c = ZmtpClient(curve_keys(stranger, server_key))
    with socket.create_connection(("127.0.0.1", port)) as s, pytest.raises((ZmtpError, ConnectionError)):
        _drive(c, s, lambda g: c.ready)
    assert not c.ready and router.poll(200) == 0


def test_curve_with_another_server_key_is_not_taken_for_the_daemon(curve_daemon: tuple) -> None:
    """A server that is not the one whose key we hold: the daemon cannot open our HELLO and closes the
    connection without an answer (were it to answer, its WELCOME would not open)."""
    _, port, keys, _ = curve_daemon
    other_pub, _ = generate_keypair(keys, "other")
    c = ZmtpClient(curve_keys(keys / "policer.key_secret", load_public(other_pub).decode()))
    with socket.create_connection(("127.0.0.1", port)) as s, pytest.raises((ZmtpError, ConnectionError, TimeoutError)):
        _drive(c, s, lambda g: c.ready, timeout_s=1.0)
    assert not c.ready


def test_a_replayed_curve_box_is_refused(curve_daemon: tuple) -> None:
    router, port, keys, server_key = curve_daemon
    c = ZmtpClient(curve_keys(keys / "policer.key_secret", server_key))
    with socket.create_connection(("127.0.0.1", port)) as s:
        _drive(c, s, lambda g: c.ready)
        c.send([b"", b"hi"])
        s.sendall(bytes(c.out))
        c.out.clear()
        assert router.poll(5000)
        peer, *_ = router.recv_multipart()
        router.send_multipart([peer, b"", b"one"])
        s.settimeout(5)
        wire = s.recv(65536)
        assert c.receive(wire) == [[b"", b"one"]]
        with pytest.raises(ZmtpError, match="replayed"):
            c.receive(wire)


def test_a_kept_connection_comes_back_after_the_daemon_does() -> None:
    """ZmtpConnection on a loop: messages both ways; the daemon's socket closed, then bound again on the same
    port: the connection is made again by itself (``on_up`` twice) and carries messages again."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    got: list[list[bytes]] = []
    ups: list[float] = []

    async def run() -> ZmtpConnection:
        loop = asyncio.get_running_loop()
        conn = ZmtpConnection(loop, f"tcp://127.0.0.1:{port}", None, got.append, lambda: ups.append(loop.time()),
                              heartbeat_s=0.2, reconnect_max_s=0.4)
        for round_ in range(2):
            await _up(conn)
            assert conn.send([b"", b"ask %d" % round_])
            peer = None
            for _ in range(100):
                if router.poll(0):
                    peer, _, body = router.recv_multipart()
                    assert body == b"ask %d" % round_
                    break
                await asyncio.sleep(0.02)
            assert peer is not None
            router.send_multipart([peer, b"", b"answer %d" % round_])
            for _ in range(100):
                if len(got) == round_ + 1:
                    break
                await asyncio.sleep(0.02)
            if round_ == 0:
                await asyncio.sleep(0.5)  # heartbeats on a quiet connection: it stays up
                assert conn.handshakes == 1 and conn.client is not None and conn.client.pongs >= 1
                rebind()
                await asyncio.sleep(0.1)
        conn.close()
        return conn

    def rebind() -> None:
        nonlocal router
        router.close(0)

        def bound() -> zmq.Socket:
            r = ctx.socket(zmq.ROUTER)
            try:
                r.bind(f"tcp://127.0.0.1:{port}")
            except zmq.ZMQError:
                r.close(0)
                raise
            return r

        router = _bound_again(bound)

    try:
        conn = asyncio.run(run())
        assert got == [[b"", b"answer 0"], [b"", b"answer 1"]]
        assert conn.handshakes == 2 and len(ups) == 2 and conn.losses >= 1 and conn.errors == 0
    finally:
        router.close(0)
        ctx.term()


def test_the_link_pool_cuts_a_daemon_that_never_ends_its_message() -> None:
    """A hostile daemon (ZMTP by hand on a raw socket) answers the handshake, then sends frames of 64 KiB with
    the MORE flag and never a last one: the pool's connection is cut once the message passes
    ``max_reply_bytes`` (libzmq would keep every frame until the last), the error is counted, and the
    daemon could not push more than the bound and the sockets' buffers."""
    import threading

    from xtc.policer.link import LinkPool

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    sent = [0]

    def hostile() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(ROUTER_GREETING + _ready())
            frame = b"\x03" + struct.pack(">Q", 65536) + b"x" * 65536
            try:
                while sent[0] < 200 << 20:
                    conn.sendall(frame)
                    sent[0] += 65536
            except OSError:
                pass

    t = threading.Thread(target=hostile, daemon=True)
    t.start()
    pool = LinkPool(2.0, max_reply_bytes=1 << 20, transport="zmtp")
    got: list = []
    try:
        pool.exchange_many([("r", f"tcp://127.0.0.1:{port}", None, [{"cmd": "list"}], lambda _r, res: got.append(res))])
        t.join(20)
        assert not t.is_alive(), "the hostile daemon was never cut"
        wait_for(lambda: got, 5, "the exchange's answer")
        conns = list(pool._conns.values())
        errors = sum(c.zmtp.errors for c in conns)
        print(f"the daemon sent {sent[0] >> 10} KiB before the cut; errors {errors}; {got}")
        assert errors >= 1 and "bytes" in conns[0].zmtp.last_error
        assert sent[0] < 16 << 20, "cut at the bound (1 MiB), not after the daemon's 200 MiB"
        assert got and "no answer" in str(got[0][0])
    finally:
        pool.close()
        server.close()


def test_a_connection_that_only_receives_is_kept_by_its_pings() -> None:
    """A PING carries a TTL: libzmq cuts a connection on which nothing came from its peer for that long. The
    daemon first silent (so a PING goes), then sending while the policer sends nothing: the connection's own
    PINGs keep it up (one handshake, no loss), as a libzmq DEALER's timer does."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    got: list[list[bytes]] = []

    async def run() -> ZmtpConnection:
        loop = asyncio.get_running_loop()
        conn = ZmtpConnection(loop, f"tcp://127.0.0.1:{port}", None, got.append, heartbeat_s=0.2)
        await _up(conn)
        assert conn.send([b"", b"hello"])
        for _ in range(100):
            if router.poll(0):
                break
            await asyncio.sleep(0.02)
        peer, *_ = router.recv_multipart()
        await asyncio.sleep(0.5)  # the daemon silent: a PING (TTL 0.6 s) goes, its PONG comes
        for i in range(25):  # then 2.5 s of the daemon's messages, nothing from the policer but PINGs
            router.send_multipart([peer, b"", b"sample %d" % i])
            await asyncio.sleep(0.1)
        conn.close()
        return conn

    try:
        conn = asyncio.run(run())
        assert len(got) == 25 and conn.handshakes == 1 and conn.losses == 0, (len(got), conn.last_loss)
    finally:
        router.close(0)
        ctx.term()


def test_a_subscription_is_asked_again_as_soon_as_its_connection_is_made_again() -> None:
    """The daemon restarted on the same port (a new socket: it knows the policer's connection no more): the
    pool, which sees the new handshake, sends ``subscribe`` again at once, not after 2.5 of the daemon's
    periods of silence (here 10 s each, so 25 s)."""
    import json

    from fakes.daemon import RouterPeer

    from xtc.policer.link import LinkPool

    class Daemon(RouterPeer):
        asked: list[float] = []

        def reply(self, req: dict) -> list[bytes]:
            if req["cmd"] == "subscribe":
                Daemon.asked.append(time.monotonic())
            result = {"subscribed": True, "period_s": 10.0} if req["cmd"] == "subscribe" else {}
            return [json.dumps({"v": 1, "id": req["id"], "ok": True, "result": result}).encode()]

    d = Daemon()
    pool = LinkPool(1.0, transport="zmtp", heartbeat_s=0.5, reconnect_max_s=0.2)
    try:
        pool.subscribe("r", d.endpoint, None, lambda frames: None, lambda e: None)
        wait_for(lambda: pool.stats()["subscriptions"] == 1, 5, "the subscription")
        assert len(Daemon.asked) == 1
        port = d.port
        d.close()
        d = _bound_again(lambda: Daemon(port=port))
        restarted = time.monotonic()
        wait_for(lambda: len(Daemon.asked) >= 2, 10, "subscribe asked again within 10 s of the restart", step_s=0.02)
        assert len(Daemon.asked) == 2
        print(f"asked again {Daemon.asked[1] - restarted:.2f} s after the restart")
        assert Daemon.asked[1] - restarted < 5.0 and pool.resubscribes == 1
    finally:
        pool.close()
        d.close()


@pytest.mark.parametrize("endpoint", ["ipc://{tmp}/m.sock", "ipc://@xtc-zmtp-test-{pid}"])
def test_ipc_endpoints_a_path_and_an_abstract_name(tmp_path: Path, endpoint: str) -> None:
    import os

    ep = endpoint.format(tmp=tmp_path, pid=os.getpid())
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(ep)
    got: list[list[bytes]] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        conn = ZmtpConnection(loop, ep, None, got.append)
        await _up(conn)
        assert conn.send([b"", b"ping"])
        for _ in range(250):
            if router.poll(0):
                peer, *_ = router.recv_multipart()
                router.send_multipart([peer, b"", b"pong"])
            if got:
                break
            await asyncio.sleep(0.02)
        conn.close()

    try:
        asyncio.run(run())
        assert got == [[b"", b"pong"]]
    finally:
        router.close(0)
        ctx.term()


@pytest.mark.parametrize("curve", [False, True], ids=["null", "curve"])
def test_the_daemons_pings_are_answered(curve_daemon: tuple, curve: bool) -> None:
    """The daemon's manager socket PINGs its peers and cuts one that stays silent (xtc daemon: every 5 s,
    cut after 15): a libzmq ROUTER that PINGs every 0.1 s and cuts after 0.3 s keeps the connection, which
    answers each PING with a PONG and sends none of its own (its heartbeat 60 s), plain and in CURVE's boxes."""
    fixture_router, _, keys, server_key = curve_daemon
    # A socket of its own, its heartbeat set before it binds (a listener's connections take its options then):
    # with CURVE on the fixture's context (the daemon's authenticator, CURVE server by default), else on its own.
    ctx = fixture_router.context if curve else zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.HEARTBEAT_IVL, 100)
    router.setsockopt(zmq.HEARTBEAT_TIMEOUT, 300)
    if curve:
        router.curve_server = True
        router.curve_secretkey = load_secret(keys / "daemon.key_secret")[1]
    port = router.bind_to_random_port("tcp://127.0.0.1")
    got: list[list[bytes]] = []

    async def run() -> ZmtpConnection:
        loop = asyncio.get_running_loop()
        keys_ = curve_keys(keys / "policer.key_secret", server_key) if curve else None
        conn = ZmtpConnection(loop, f"tcp://127.0.0.1:{port}", keys_, got.append, heartbeat_s=60.0)
        await _up(conn)
        await asyncio.sleep(1.5)
        assert conn.client is not None
        answered = conn.client.pings_answered
        conn.close()
        assert answered >= 5, f"only {answered} PINGs answered in 1.5 s"
        return conn

    try:
        conn = asyncio.run(run())
        assert conn.handshakes == 1 and conn.losses == 0, conn.last_loss
    finally:
        router.close(0)
        if not curve:
            ctx.term()


def test_a_peer_that_breaks_the_protocol_after_each_handshake_is_connected_to_with_backoff() -> None:
    """A hostile daemon completes the handshake and sends a frame with reserved flags, every time: each
    connection is cut (a protocol error), and the next is made after a wait that doubles (0.1, 0.2, 0.4,
    0.8, then 1 s here), not ten times a second."""
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = [0]
    stop = threading.Event()

    def hostile() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted[0] += 1
            with conn:
                conn.sendall(ROUTER_GREETING + _ready())
                time.sleep(0.05)  # the handshake done on the policer's side, then the bad frame
                conn.sendall(b"\x08\x00")
                conn.settimeout(1.0)
                try:
                    while conn.recv(4096):
                        pass
                except OSError:
                    pass

    t = threading.Thread(target=hostile, daemon=True)
    t.start()

    async def run() -> ZmtpConnection:
        conn = ZmtpConnection(asyncio.get_running_loop(), f"tcp://127.0.0.1:{port}", None, lambda m: None,
                              heartbeat_s=5.0, reconnect_max_s=1.0)
        await asyncio.sleep(3.0)
        conn.close()
        return conn

    try:
        conn = asyncio.run(run())
        print(f"{accepted[0]} connections in 3 s, {conn.errors} protocol errors: {conn.last_error}")
        assert conn.errors >= 3 and "reserved flags" in conn.last_error
        assert accepted[0] <= 8, f"{accepted[0]} connections in 3 s: no backoff"
    finally:
        stop.set()
        t.join(5)
        server.close()
