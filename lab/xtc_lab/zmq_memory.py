"""libzmq's memory per daemon connection on the policer's side: ``python -m xtc_lab.zmq_memory``.

    python -m xtc_lab.zmq_memory [--n N] [--transport ipc|tcp] [--curve] [--messages M] [--mode dealers|router ...]

A child process binds N ROUTER sockets (the daemons' manager sockets; with ``--curve`` each a CURVE
server with a key of its own) and answers each request with ``["", "{}"]``, then sends every peer
that asked M samples of 1,000 bytes (``["", "samples", body]``), in M rounds of one message a peer (as a
daemon sends its subscriber one a period; the client reads them as they come).
Each mode runs in a fresh process of its own (memory a mode freed would hide the next one's growth)
and connects to all N:

- ``dealers``: N DEALER sockets, one connection each (the policer's link pool today);
- ``router``: ONE ROUTER socket with N connections, each given its routing id
  (``ZMQ_CONNECT_ROUTING_ID``) and, with ``--curve``, its daemon's key (``ZMQ_CURVE_SERVERKEY``) set
  just before its ``connect``: libzmq copies a socket's options into each connection when it is made,
  so one socket can hold connections to servers of different keys;
- ``zmtp`` (not with ``--curve``): no libzmq on the client's side: N stream connections on one asyncio
  loop, each speaking ZMTP 3.0 with the NULL mechanism by hand as a DEALER (:class:`_ZmtpDealer`),
  to size what a connection would cost a client written without libzmq (issue 50's "cheaper
  connection"). An experiment, not the product: no heartbeats, no CURVE, no reconnection.

Each mode sends one request per connection, waits for every reply (a connection that did not answer,
a failed CURVE handshake among them, is counted in ``unanswered``), reads all M samples per peer, and
prints one JSON line: per mode the RSS growth per connection (KiB; the Python objects of N pyzmq sockets
are in it), the same after glibc's ``malloc_trim(0)`` gave its free pages back, the open files per
connection, and the client process's CPU (every thread's: libzmq's I/O thread too) per sample while the
samples came, in microseconds (the ``dealers`` and ``router`` clients poll all N sockets with one
``zmq.Poller``, which the policer's link pool does not: theirs is an upper bound).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import json
import multiprocessing as mp
import os
import resource
import struct
import sys
import tempfile
import time
from typing import Any

import zmq

__all__ = ["main", "measure"]

BODY = b"x" * 1000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _raise_nofile(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _serve(d: str, n: int, transport: str, curve: bool, messages: int, q: Any, go: Any, done: Any) -> None:
    """The daemons: N ROUTER sockets; puts their endpoints and CURVE public keys on ``q``."""
    _raise_nofile(4 * n + 256)
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 2 * n + 64)
    socks, eps, keys = [], [], []
    for i in range(n):
        r = ctx.socket(zmq.ROUTER)
        r.setsockopt(zmq.LINGER, 0)
        r.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if curve:
            pub, sec = zmq.curve_keypair()
            r.curve_server = True
            r.curve_secretkey = sec
            keys.append(pub.decode())
        if transport == "ipc":
            ep = f"ipc://{d}/{i}"
            r.bind(ep)
        else:
            port = r.bind_to_random_port("tcp://127.0.0.1")
            ep = f"tcp://127.0.0.1:{port}"
        socks.append(r)
        eps.append(ep)
    q.put((eps, keys))
    poller = zmq.Poller()
    for r in socks:
        poller.register(r, zmq.POLLIN)
    peers: dict[int, list[bytes]] = {}
    while not done.is_set():
        for s, _ in poller.poll(50):
            while True:
                try:
                    f = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                peers[id(s)] = [s, f[0]]  # type: ignore[list-item]  (the newest client's peer)
                s.send_multipart([f[0], b"", b"{}"])
        if go.is_set():
            go.clear()
            for _ in range(messages):  # rounds, one message a peer each, as periods are (not one burst)
                time.sleep(0.002 + len(peers) / 500_000)
                for key, (s, peer) in list(peers.items()):
                    try:
                        s.send_multipart([peer, b"", b"samples", BODY], zmq.NOBLOCK)  # type: ignore[list-item]
                    except zmq.ZMQError:  # a client gone (ROUTER_MANDATORY), or its queue full
                        peers.pop(key, None)
    ctx.destroy(0)


def _trimmed_rss() -> int | None:
    """The RSS after glibc's ``malloc_trim(0)`` gave its free pages back (None: no such call)."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
        return _rss()
    except (OSError, AttributeError):
        return None


def _figures(mode: str, n: int, unanswered: int, got: int, want: int, r0: int, r1: int, r2: int | None,
             f0: int, f1: int, cpu_s: float) -> dict[str, Any]:
    return {"mode": mode, "connections": n, "unanswered": unanswered, "samples_received": got, "samples_sent": want,
            "rss_kib_per_connection": round((r1 - r0) / n / 1024, 2),
            "rss_kib_per_connection_after_trim": None if r2 is None else round((r2 - r0) / n / 1024, 2),
            "fds_per_connection": round((f1 - f0) / n, 2),
            "client_cpu_us_per_sample": round(cpu_s / got * 1e6, 2) if got else None}


#: ZMTP 3.0's greeting with the NULL mechanism, as a client (RFC 23/ZMTP).
_GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _frame(body: bytes, more: bool = False, command: bool = False) -> bytes:
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


class _ZmtpDealer(asyncio.Protocol):
    """One connection to a ROUTER, as a DEALER speaking ZMTP 3.0 with the NULL mechanism: the greeting,
    READY, then whole messages (a list of frames) to ``on_message``; the peer's commands are skipped."""

    def __init__(self, on_message: Any) -> None:
        self.on_message = on_message
        self.buf = bytearray()
        self.greeted = False
        self.parts: list[bytes] = []
        self.pending: list[bytes] = []
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(_GREETING)

    def send(self, frames: list[bytes]) -> None:
        """A message (its frames); written once the peer's greeting came (until then, kept)."""
        data = b"".join(_frame(f, more=k < len(frames) - 1) for k, f in enumerate(frames))
        if self.greeted:
            self.transport.write(data)
        else:
            self.pending.append(data)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.greeted:  # READY and what waited for it go once the peer's greeting is whole
            if len(buf) < 64:
                return
            del buf[:64]
            self.greeted = True
            ready = b"\x05READY" + bytes([11]) + b"Socket-Type" + struct.pack(">I", 6) + b"DEALER"
            self.transport.write(b"".join([_frame(ready, command=True), *self.pending]))
            self.pending.clear()
        at = 0
        while len(buf) - at >= 2:
            flags = buf[at]
            if flags & 2:
                if len(buf) - at < 9:
                    break
                size, head = int.from_bytes(buf[at + 1:at + 9], "big"), 9
            else:
                size, head = buf[at + 1], 2
            if len(buf) - at < head + size:
                break
            body = bytes(buf[at + head:at + head + size])
            at += head + size
            if flags & 4:
                continue
            self.parts.append(body)
            if not flags & 1:
                msg, self.parts = self.parts, []
                self.on_message(self, msg)
        del buf[:at]


def _zmtp_client(eps: list[str], messages: int, go: Any, q: Any) -> None:
    """The ``zmtp`` mode's process: N :class:`_ZmtpDealer` connections on one asyncio loop."""
    n = len(eps)
    _raise_nofile(4 * n + 256)

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        r0, f0 = _rss(), _fds()
        answered: set[int] = set()
        got = 0

        def on_message(conn: _ZmtpDealer, msg: list[bytes]) -> None:
            nonlocal got
            if msg[-1] == b"{}":
                answered.add(id(conn))
            else:
                got += 1

        conns = []
        for ep in eps:
            if ep.startswith("ipc://"):
                _, conn = await loop.create_unix_connection(lambda: _ZmtpDealer(on_message), ep[len("ipc://"):])
            else:
                host, port = ep[len("tcp://"):].rsplit(":", 1)
                _, conn = await loop.create_connection(lambda: _ZmtpDealer(on_message), host, int(port))
            conn.send([b"", b'{"cmd": "subscribe"}'])
            conns.append(conn)
        deadline = time.monotonic() + 30 + n / 100
        while len(answered) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        go.set()
        want = messages * len(answered)
        t, cpu0 = time.monotonic(), time.process_time()
        while got < want and time.monotonic() - t < 30 + n * messages / 2000:
            await asyncio.sleep(0.01)
        cpu_s = time.process_time() - cpu0
        r1, f1 = _rss(), _fds()
        out = _figures("zmtp", n, n - len(answered), got, want, r0, r1, _trimmed_rss(), f0, f1, cpu_s)
        for conn in conns:
            conn.transport.close()
        return out

    q.put(asyncio.run(run()))


def _client(eps: list[str], keys: list[str], mode: str, messages: int, go: Any, q: Any) -> None:
    n = len(eps)
    _raise_nofile(4 * n + 256)
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 2 * n + 64)
    ctx.socket(zmq.DEALER).close()  # the I/O thread and the reaper started before the baseline
    time.sleep(0.2)
    r0, f0 = _rss(), _fds()
    socks: list[zmq.Socket] = []
    client_pub, client_sec = zmq.curve_keypair() if keys else (b"", b"")

    def curve_client(s: zmq.Socket, i: int) -> None:
        s.curve_publickey = client_pub
        s.curve_secretkey = client_sec
        s.curve_serverkey = keys[i].encode()

    if mode == "dealers":
        for i, ep in enumerate(eps):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            if keys:
                curve_client(s, i)
            s.connect(ep)
            s.send_multipart([b"", b'{"cmd": "subscribe"}'])
            socks.append(s)
    else:
        s = ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.ROUTER_MANDATORY, 1)
        for i, ep in enumerate(eps):
            s.setsockopt(zmq.CONNECT_ROUTING_ID, b"d%d" % i)
            if keys:
                curve_client(s, i)
            s.connect(ep)
        for i in range(n):
            s.send_multipart([b"d%d" % i, b"", b'{"cmd": "subscribe"}'])
        socks.append(s)
    answered: set[int] = set()
    got = 0
    deadline = time.monotonic() + 30 + n / 100
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    index = {id(s): i for i, s in enumerate(socks)}

    def drain(timeout_ms: int) -> None:
        nonlocal got
        for s, _ in poller.poll(timeout_ms):
            while True:
                try:
                    f = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                peer = int(f[0][1:]) if mode == "router" else index[id(s)]
                if f[-1] == b"{}":
                    answered.add(peer)
                else:
                    got += 1

    while len(answered) < n and time.monotonic() < deadline:
        drain(100)
    go.set()
    want = messages * len(answered)
    t, cpu0 = time.monotonic(), time.process_time()
    while got < want and time.monotonic() - t < 30 + n * messages / 2000:
        drain(100)
    cpu_s = time.process_time() - cpu0
    r1, f1 = _rss(), _fds()
    r2 = _trimmed_rss()  # what of it is free heap that glibc holds
    q.put(_figures(mode, n, n - len(answered), got, want, r0, r1, r2, f0, f1, cpu_s))
    for s in socks:
        s.close(0)
    ctx.term()


def measure(n: int, transport: str = "ipc", curve: bool = False, messages: int = 3,
            modes: tuple[str, ...] = ("dealers", "router")) -> dict[str, Any]:
    """One server, each mode's client in a fresh process after the other; returns the figures."""
    d = tempfile.mkdtemp(prefix="xtc-zmqmem-")
    q, go, done = mp.Queue(), mp.Event(), mp.Event()
    srv = mp.Process(target=_serve, args=(d, n, transport, curve, messages, q, go, done))
    srv.start()
    eps, keys = q.get(timeout=120 + n / 50)
    out: dict[str, Any] = {"n": n, "transport": transport, "curve": curve, "messages": messages,
                           "zmq": zmq.zmq_version(), "pyzmq": zmq.__version__, "draft_api": zmq.has("draft")}
    try:
        for mode in modes:
            cq = mp.Queue()
            if mode == "zmtp":
                c = mp.Process(target=_zmtp_client, args=(eps, messages, go, cq))
            else:
                c = mp.Process(target=_client, args=(eps, keys, mode, messages, go, cq))
            c.start()
            out[mode] = cq.get(timeout=300 + n / 10)
            c.join(60)
            time.sleep(1.0)  # the server notices the closed connections
    finally:
        done.set()
        srv.join(60)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.zmq_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--transport", choices=("ipc", "tcp"), default="ipc")
    p.add_argument("--curve", action="store_true")
    p.add_argument("--messages", type=int, default=3, help="samples of 1,000 bytes each peer receives")
    p.add_argument("--mode", action="append", choices=("dealers", "router", "zmtp"))
    a = p.parse_args(argv)
    if a.curve and "zmtp" in (a.mode or ()):
        p.error("--mode zmtp speaks the NULL mechanism only: not with --curve")
    print(json.dumps(measure(a.n, a.transport, a.curve, a.messages, tuple(a.mode or ("dealers", "router")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
