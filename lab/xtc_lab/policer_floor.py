"""The engine's receive floor: ``python -m xtc_lab.policer_floor``.

What one router measurement costs the policer's engine process before the engine does anything with
it.  The same stand-in fleet as :mod:`xtc_lab.policer_profile` (``python -m xtc_lab.policer_fleet`` in a
child process, one publishing daemon a router, real sockets) sends each router's samples over the
connection the link pool keeps to its daemon, as the service takes them; this process runs the
product's own receive path (:class:`xtc.policer.link.LinkPool`: its I/O thread, its paced ``epoll`` over
the connections, spoken by the pool itself or, with ``--link-transport libzmq``, libzmq sockets read through
their ``ZMQ_FD``\\ s, its reads a batch a turn) and hands each message to one of three
consumers, one per run:

``none``
    a sink that only counts the message: the link pool's loop (and libzmq's I/O thread with libzmq), nothing else
    (the transport's floor);
``streams``
    :class:`xtc.policer.samples.SampleStreams`, as the engine's: each message validated and decoded
    into the router's newest sample (the floor plus the decode);
``raw``
    no link pool: a SUB socket a router on the daemons' PUB sockets, read by the smallest loop Python
    allows (a thread that waits on their ``ZMQ_FD``\\ s with ``epoll`` at most every 10 ms, as the
    pool's is paced, and reads each ready socket with ``recv_multipart(NOBLOCK)`` until ``EVENTS`` says
    it is empty): what any Python receive over libzmq costs, the bound below the pool's;
``engine``
    the whole engine (:class:`xtc.policer.engine.Engine` on SQLite, as ``policer_profile`` runs it):
    the measurement's whole cost, for the comparison in the same conditions.

It prints JSON: messages received (or measurements, for ``engine``) per second, the process's CPU per
message in ms and each thread's share (libzmq's ``ZMQbg/IO/0``, ``policer-links``, ...), the stand-in
fleet's own CPU, and the load average before and after.  A window is whole seconds of a 1 s period;
CPU is user + system time from ``/proc``, not wall time.
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import tempfile
import threading
import time
from typing import Any

import zmq

from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.samples import SampleStreams
from xtc.policer.store import Store

from .policer_fleet import add_fleet_arguments, add_policer_arguments, add_window_arguments, fleet_process
from .policer_profile import loadavg, proc_cpu_s, process_cpu_s, threads_cpu_s

__all__ = ["CONSUMERS", "floor", "main"]

CONSUMERS = ("raw", "none", "streams", "engine")


class _RawReader:
    """The ``raw`` consumer: SUB sockets on the daemons' PUB sockets, read by a paced ``epoll`` loop."""

    def __init__(self, endpoints: list[str], pace_s: float = 0.01) -> None:
        self.n = 0
        self.refused = 0
        self._ctx = zmq.Context()
        self._socks: dict[int, zmq.Socket] = {}
        for ep in endpoints:
            s = self._ctx.socket(zmq.SUB)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(ep)
            self._socks[s.getsockopt(zmq.FD)] = s
        self._stop = threading.Event()
        self._pace_s = pace_s
        self._thread = threading.Thread(target=self._run, name="raw-recv", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ep = select.epoll()
        for fd in self._socks:
            ep.register(fd, select.EPOLLIN)
        pollin = zmq.POLLIN
        while not self._stop.is_set():
            time.sleep(self._pace_s)
            for fd, _ in ep.poll(0.1):
                s = self._socks[fd]
                while s.getsockopt(zmq.EVENTS) & pollin:
                    s.recv_multipart(zmq.NOBLOCK)
                    self.n += 1
        ep.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for s in self._socks.values():
            s.close()
        self._ctx.term()


class _Counter:
    """The ``none`` consumer: counts the messages, keeps nothing (called on the link pool's thread)."""

    def __init__(self) -> None:
        self.n = 0
        self.refused = 0

    def sample(self, _frames: list[bytes]) -> None:
        self.n += 1

    def on_refused(self, _e: BaseException) -> None:
        self.refused += 1


def floor(routers: int = 1000, vrs: int = 16, dead: float = 0.1, window_s: float = 10.0,
          consumer: str = "none", jitter: float = 0.0, warmup_s: float | None = None,
          link_transport: str | None = None) -> dict[str, Any]:
    """See the module's text; returns the JSON it prints.  ``link_transport``: the link pool's ``transport``
    (``engine.link_transport``; None: the pool's default)."""
    if consumer not in CONSUMERS:
        raise ValueError(f"consumer must be one of {', '.join(CONSUMERS)}, not {consumer!r}")
    out: dict[str, Any] = {"routers": routers, "vrs_per_router": vrs, "dead_fraction": dead, "window_s": window_s,
                           "consumer": consumer, "jitter": jitter, "link_transport": link_transport,
                           "loadavg_before": loadavg()}
    with tempfile.TemporaryDirectory(prefix="xtc-floor-") as tmp, \
            fleet_process(routers, vrs, dead, jitter, pub_socket=consumer == "raw") as (fleet, fleet_routers):
        pool = LinkPool(0.9, **({"transport": link_transport} if link_transport else {}))
        streams = eng = store = raw = None
        try:
            counter = _Counter()
            if consumer == "raw":
                raw = _RawReader([r["pub_endpoint"] for r in fleet_routers])

                def count() -> int:
                    return raw.n  # type: ignore[union-attr]
            elif consumer == "none":
                for r in fleet_routers:
                    pool.subscribe(r["name"], r["endpoint"], None, counter.sample, counter.on_refused)

                def count() -> int:
                    return counter.n
            elif consumer == "streams":
                streams = SampleStreams(vrs, links=pool)
                streams.want({r["name"]: (r["pub_endpoint"], None, r["endpoint"]) for r in fleet_routers})

                def count() -> int:
                    return streams.received  # type: ignore[union-attr]
            else:
                store = Store(f"sqlite:///{tmp}/policer.db")
                for r in fleet_routers:
                    store.add_router(r["name"], r["endpoint"], r["capacity_pps"], "on", None, "floor",
                                     pub_endpoint=r["pub_endpoint"])
                streams = SampleStreams(vrs, links=pool)
                eng = Engine(store, pool, period_s=1.0, samples=streams)
                eng.start()

                def count() -> int:
                    return eng.sampled + eng.listed  # type: ignore[union-attr]
            time.sleep(warmup_s if warmup_s is not None else 10 + routers / 100)
            n0, c0, th0, f0, t0 = count(), process_cpu_s(), threads_cpu_s(), proc_cpu_s(fleet.pid), time.monotonic()
            time.sleep(window_s)
            n1, c1, th1, f1, t1 = count(), process_cpu_s(), threads_cpu_s(), proc_cpu_s(fleet.pid), time.monotonic()
            n = n1 - n0
            out["per_s"] = round(n / (t1 - t0), 1)
            out["cpu_ms_per_message"] = round(1000 * (c1 - c0) / n, 4) if n else None
            out["thread_cpu_ms_per_message"] = {
                k: round(1000 * (th1[k] - th0.get(k, 0.0)) / n, 4) for k in sorted(th1) if n and k != "MainThread"}
            out["fleet_cpu_s_per_s"] = round((f1 - f0) / (t1 - t0), 3)
            out["refused"] = counter.refused
            if eng is not None and eng.error is not None:
                raise RuntimeError("engine failed") from eng.error
            out["loadavg_after"] = loadavg()
        finally:
            if raw is not None:
                raw.close()
            if eng is not None:
                eng.stop()
            if streams is not None:
                streams.close()
            pool.close()
            if store is not None:
                store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.policer_floor", description=__doc__.split("\n\n")[0])
    add_fleet_arguments(p)
    add_window_arguments(p, "seconds measured")
    p.add_argument("--consumer", choices=CONSUMERS, default="none", help="what takes each message (see above)")
    add_policer_arguments(p)
    args = p.parse_args(argv)
    print(json.dumps(floor(args.routers, args.vrs, args.dead, args.window, args.consumer, args.jitter, args.warmup,
                           args.link_transport),
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
