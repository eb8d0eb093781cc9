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
- ``zmtp``: no libzmq on the client's side: N connections on one asyncio loop, each the policer's own
  ZMTP connection (:class:`xtc.policer.zmtp.ZmtpConnection`, ``engine.link_transport = "zmtp"``), with
  CURVE when ``--curve``.

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
import functools
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from typing import Any

import zmq
from zmq.utils import z85

from xtc.policer.zmtp import CurveKeys, ZmtpConnection

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


def _zmtp_client(eps: list[str], keys: list[str], messages: int, go: Any, q: Any) -> None:
    """The ``zmtp`` mode's process: N connections spoken by the policer's own ZMTP (:class:`ZmtpConnection`,
    as the link pool makes them with ``engine.link_transport = "zmtp"``) on one asyncio loop."""
    n = len(eps)
    _raise_nofile(4 * n + 256)

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        r0, f0 = _rss(), _fds()
        answered: set[int] = set()
        got = 0
        client_pub, client_sec = zmq.curve_keypair() if keys else (b"", b"")

        def on_message(i: int, msg: list[bytes]) -> None:
            nonlocal got
            if msg[-1] == b"{}":
                answered.add(i)
            else:
                got += 1

        conns: list[ZmtpConnection] = []
        for i, ep in enumerate(eps):
            curve = (CurveKeys(z85.decode(client_pub), z85.decode(client_sec), z85.decode(keys[i])) if keys
                     else None)
            conns.append(ZmtpConnection(loop, ep, curve, functools.partial(on_message, i),
                                        functools.partial(lambda i: conns[i].send([b"", b'{"cmd": "subscribe"}']), i),
                                        max_frame_bytes=1 << 20, handshake_s=30 + n / 100))
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
            conn.close()
        await asyncio.sleep(0.1)
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
                c = mp.Process(target=_zmtp_client, args=(eps, keys, messages, go, cq))
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
    print(json.dumps(measure(a.n, a.transport, a.curve, a.messages, tuple(a.mode or ("dealers", "router")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
