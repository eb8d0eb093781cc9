"""A fleet of stand-in XTC daemons in one process, for testing and benchmarking the policer at scale.

Each :class:`FakeDaemon` answers the manager API (docs/manager-api.md) on its own ROUTER socket
(a REP for its clients): requests are validated by the daemon's own :func:`xtc.daemon.api.parse_request`
and answered with :func:`~xtc.daemon.api.ok_reply` / :func:`~xtc.daemon.api.error_reply`, with the
same command semantics (``activate`` only an inactive VR, ``setpoint`` only an active or paused one,
``unknown_vr``, ``bad_state``...).  Its VRs are cheap stand-ins, not the simulated plant: a VR is
offered a fixed rate (a few with traffic that does not back off) and forwards
``min(offered, setpoint)`` while active, with a cap proportional to it.  With ``publish`` each
daemon also publishes its samples every period on a PUB socket, as the real one does, and (with
``link_samples``, as a daemon that has the command) sends them over its ROUTER socket to each peer
that sent ``subscribe`` (docs/design/one-link.md); without ``link_samples`` it refuses ``subscribe``
as an older daemon does (``unknown_command``).

Some daemons misbehave, as a real network's do: ``dead`` ones never bind (no answer at all),
``slow`` ones answer after ``slow_s``, ``flapping`` ones answer for ``flap_s`` then stay silent for
``flap_s``, over and over (each at its own phase: the first silence 1-2 ``flap_s`` after the start;
:attr:`FakeDaemon.silenced` keeps when each silence began).  Every daemon's socket is read by a callback of one
asyncio loop (epoll over all the sockets; a publishing daemon's samples are a coroutine of it), in a
thread (:meth:`Fleet.start`) or as a process (``python -m xtc_lab.policer_fleet``: writes the
routers to a JSON file, serves until SIGTERM, then prints its statistics as one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import operator
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from xtc.daemon import api
from xtc.policer.link import LINK_TRANSPORTS
from xtc_lab.procs import stop_process

try:
    from xtc.daemon.sample_udp import UdpSamples
except ImportError:  # a comparison's "before" side, older than the samples' datagrams
    UdpSamples = None  # type: ignore[assignment,misc]

__all__ = ["FakeDaemon", "FakeVr", "Fleet", "fleet_process"]

_BY_NAME = operator.attrgetter("name")

MAX_SETPOINT_PPS = 1e8


#: The compact samples format, when the xtc this fleet runs with has it (a comparison's "before" side runs
#: this fleet with an older xtc first on the path: its policer never asks for it).
_V3 = getattr(api, "SAMPLES_SCHEMA_V3", None)

class FakeVr:
    """A cheap stand-in VR: offered ``offered_pps``, forwards ``min(offered, setpoint)`` while active.

    Paused, it forwards what it forwarded when it was paused, whatever its setpoint becomes: the real
    daemon stops adjusting a paused instance's cap and leaves it where it is (docs/manager-api.md), so
    a punished VR whose traffic does not back off stays held, as it would on a real host."""

    __slots__ = ("held_pps", "name", "offered_pps", "setpoint_pps", "state")

    def __init__(self, name: str, offered_pps: float):
        self.name = name
        self.offered_pps = offered_pps
        self.state = "inactive"
        self.setpoint_pps: float | None = None
        #: While paused: the rate its cap, left where it was, lets through.
        self.held_pps: float | None = None

    def forwarded_pps(self) -> float:
        """What it forwards now: its setpoint's worth while active, the held rate while paused."""
        if self.state == "paused" and self.held_pps is not None:
            return self.held_pps
        if self.state == "active" and self.setpoint_pps:
            return min(self.offered_pps, self.setpoint_pps)
        return self.offered_pps

    def sample_row(self) -> list[Any]:
        """The VR as a samples message's row (the values of :data:`xtc.daemon.api.SAMPLE_FIELDS` that
        :meth:`instance` gives, in that order, without making the dictionary: a fleet of 5,000 daemons of
        16 VRs builds 80,000 rows a period)."""
        on = self.state != "inactive"
        fwd = self.forwarded_pps()
        return [self.name, self.state, True, self.setpoint_pps, float(fwd), float(self.offered_pps),
                round(fwd / 1000.0, 3) if on else None, None, None, None]

    def instance(self) -> dict[str, Any]:
        """The VR as the manager API's ``Instance`` object (its sample row's values, and no original record)."""
        row = self.sample_row()
        return {**dict(zip(api.SAMPLE_FIELDS[:8], row[:8])), "original_record": None, "actuation_error": row[8]}


class FakeDaemon:
    """One stand-in daemon: its name, endpoint, behaviour (``ok``, ``dead``, ``slow``, ``flapping``) and VRs."""

    def __init__(self, name: str, endpoint: str, mode: str, vrs: list[FakeVr], pub_endpoint: str | None = None):
        self.name = name
        self.endpoint = endpoint
        self.pub_endpoint = pub_endpoint
        self.mode = mode
        self.vrs = {v.name: v for v in vrs}
        #: Monotonic times of the ``list`` requests answered, and counts of the other commands.
        self.list_times: list[float] = []
        self.commands: dict[str, int] = {}
        self.silent = False
        #: When a flapping daemon fell silent: ``(monotonic, unix)`` seconds, each time.
        self.silenced: list[tuple[float, float]] = []
        #: Samples messages published; ``pub_silent`` stops publishing; ``inject`` holds raw messages
        #: (lists of frames) to publish once, before the next period's samples.
        self.published = 0
        self.pub_silent = False
        self.inject: list[list[bytes]] = []
        #: Commands whose replies are lost: ``lose_replies`` ones are carried out, ``drop_requests`` ones
        #: are not (the request itself lost).
        self.lose_replies: set[str] = set()
        self.drop_requests: set[str] = set()
        #: The ``early_drop`` commands' switches by VR (None: back to the default).
        self.early_drop: dict[str, bool | None] = {}
        #: The peers subscribed to the samples over the ROUTER socket (their envelopes, with the format each
        #: asked for), and that socket.
        self.link_peers: dict[tuple[bytes, ...], str] = {}
        self.router: Any = None

    def handle(self, raw: bytes) -> bytes | None:
        """One request -> one reply, as the daemon's REP socket would answer it (None: no reply)."""
        try:
            req = api.parse_request(raw, 65536, MAX_SETPOINT_PPS)
        except api.ApiError as e:
            return api.error_reply(e)
        if req.cmd in self.drop_requests:
            return None
        try:
            reply = api.ok_reply(self._do(req), req.id)
        except api.ApiError as e:
            reply = api.error_reply(e, req.id)
        return None if req.cmd in self.lose_replies else reply

    def _do(self, req: api.Request) -> dict[str, Any]:
        if req.cmd == "ping":
            return {"pong": True, "instances": sum(v.state != "inactive" for v in self.vrs.values())}
        if req.cmd == "list":
            self.list_times.append(time.monotonic())
            return {"vrs": [v.instance() for v in self.vrs.values()]}
        self.commands[req.cmd] = self.commands.get(req.cmd, 0) + 1
        v = self.vrs.get(req.vr or "")
        if v is None:
            raise api.ApiError("unknown_vr", f"no VR named {req.vr!r}")
        if req.cmd in ("vr_off", "vr_on"):  # the policer's last punishment (issue 48): a stand-in has no VR to turn off
            raise api.ApiError("unsupported", "the policer fleet's stand-in daemon cannot turn a VR off")
        allowed = {"status": ("inactive", "active", "paused"), "activate": ("inactive",), "pause": ("active",),
                   "resume": ("paused",), "deactivate": ("active", "paused"), "setpoint": ("active", "paused"),
                   "early_drop": ("active", "paused")}
        if v.state not in allowed[req.cmd]:
            raise api.ApiError("bad_state", f"'{req.cmd}' does not apply to a VR that is {v.state}")
        if req.cmd == "activate":
            v.state, v.setpoint_pps = "active", req.setpoint_pps
        elif req.cmd == "setpoint":
            v.setpoint_pps = req.setpoint_pps
        elif req.cmd == "pause":
            v.held_pps, v.state = v.forwarded_pps(), "paused"
        elif req.cmd == "resume":
            v.state, v.held_pps = "active", None
        elif req.cmd == "deactivate":
            v.state, v.setpoint_pps, v.held_pps = "inactive", None, None
        elif req.cmd == "early_drop":  # the policer's limiter step: recorded (a stand-in drops nothing)
            self.early_drop[v.name] = req.early_drop
        return v.instance()


class Fleet:
    """Thousands of stand-in daemons on one event loop.

    Parameters
    ----------
    n_routers : int
    vrs_per_router : int
    dead_fraction, slow_fraction, flapping_fraction : float
        Shares of the routers that never answer, answer after ``slow_s``, or flap every ``flap_s``.
    transport : str
        ``ipc`` (sockets in ``directory``) or ``tcp`` (loopback, ephemeral ports).
    period_s : float
        Seconds between published samples (with ``publish``).
    seed : int
        Which routers misbehave and the VRs' offered rates.
    first : int
        Number of the first router's name (``r00000`` for 0): several fleets, one fleet each.
    jitter : float
        With ``publish``: before each period's samples every VR's offered rate is drawn anew, its base
        rate times ``1 + jitter * u`` (``u`` uniform in -1..1), so that its measurements change every
        period as a real VR's do (0: the same rates, and the same messages but for their time).
    """

    def __init__(self, n_routers: int, vrs_per_router: int = 16, dead_fraction: float = 0.1,
                 slow_fraction: float = 0.0, flapping_fraction: float = 0.0, slow_s: float = 0.3,
                 flap_s: float = 5.0, transport: str = "ipc", directory: str | Path | None = None,
                 publish: bool = False, period_s: float = 1.0, seed: int = 0, capacity_pps: float = 200_000.0,
                 first: int = 0, jitter: float = 0.0, link_samples: bool = True, samples_v3: bool = True,
                 pub_socket: bool = True, samples_udp: bool = True):
        rng = random.Random(seed)
        #: With ``publish``: bind the PUB sockets (False: the samples go only to peers subscribed over the
        #: ROUTER socket; the routers keep their PUB endpoints, unbound: a fleet of 5,000 daemons with PUB
        #: sockets needs about 25,000 descriptors).
        self.pub_socket = pub_socket
        self.link_samples = link_samples
        #: Send the samples as datagrams to a peer whose ``subscribe`` asks for them (False: refuse the
        #: member, as a daemon older than it does), with the daemon's own adapter.
        self.samples_udp = samples_udp and UdpSamples is not None
        self.udp = UdpSamples() if UdpSamples is not None else None
        self.samples_v3 = samples_v3
        self.jitter = jitter
        self._jitter_rng = random.Random(seed + 2)
        self._rng = random.Random(seed + 1)  # the flapping daemons' phases
        self._phase_rng = random.Random(seed + 3)  # the publishing daemons' phases in the period
        self.capacity_pps = capacity_pps
        self.slow_s = slow_s
        self.flap_s = flap_s
        self.period_s = period_s
        self.publish = publish
        self._tmp = None
        if transport == "ipc" and directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="xfl")
            directory = self._tmp.name
        modes = (["dead"] * round(n_routers * dead_fraction) + ["slow"] * round(n_routers * slow_fraction)
                 + ["flapping"] * round(n_routers * flapping_fraction))
        modes += ["ok"] * (n_routers - len(modes))
        rng.shuffle(modes)
        self.daemons: list[FakeDaemon] = []
        for i, mode in enumerate(modes):
            name = f"r{first + i:05d}"
            ep = f"ipc://{directory}/{i}" if transport == "ipc" else "tcp://127.0.0.1:*"
            pub = (f"ipc://{directory}/{i}.pub" if transport == "ipc" else "tcp://127.0.0.1:*") if publish else None
            share = capacity_pps / vrs_per_router
            vrs = [FakeVr(f"vr{j}", round(share * rng.uniform(0.3, 1.4) * (3.0 if rng.random() < 0.02 else 1.0)))
                   for j in range(vrs_per_router)]
            self.daemons.append(FakeDaemon(name, ep, mode, vrs, pub))
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 4 * n_routers + 1024)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task] = []
        #: Sockets that hold the dead daemons' TCP ports (bound, never listening).
        self._held: list[socket.socket] = []

    # ---------------------------------------------------------------------------- serving
    def _held_endpoint(self) -> str:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        self._held.append(held)
        return f"tcp://127.0.0.1:{held.getsockname()[1]}"

    async def _bind_all(self) -> None:
        from xtc.policer.link import raise_open_files_limit

        if self.publish:  # a PUB socket more per daemon, and the engine's connections to it
            try:
                import resource

                want = 8 * len(self.daemons) + 4096
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                if hard != resource.RLIM_INFINITY and hard < want:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, want))  # root only; else as it is
            except (ImportError, ValueError, OSError):
                pass
        raise_open_files_limit()
        loop = asyncio.get_running_loop()
        for d in self.daemons:
            if d.mode == "dead":
                if d.endpoint.startswith("tcp"):
                    # A port nobody listens on, held for the fleet's life by a socket bound to it that never
                    # listens (a connection to it is refused): a port merely freed again could be handed
                    # to a daemon bound after it (a dead router answered by another one), or be picked as a
                    # connecting socket's own port (TCP's simultaneous open: a connection to itself).
                    d.endpoint = self._held_endpoint()
                    if d.pub_endpoint:  # (registered with the router: a valid endpoint, as dead as the other)
                        d.pub_endpoint = self._held_endpoint()
                continue
            s = self.ctx.socket(zmq.ROUTER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # as the daemon's: a gone peer's send fails, its subscription ends
            s.bind(d.endpoint)
            d.router = s
            d.endpoint = s.getsockopt_string(zmq.LAST_ENDPOINT)
            # A plain socket read when the loop sees its descriptor (one callback, no future a message: what
            # zmq.asyncio costs a message was a third of the fleet's CPU), drained whole each time.
            loop.add_reader(s.getsockopt(zmq.FD), self._readable, d)
            if d.pub_endpoint:
                p = None
                if self.pub_socket:
                    p = self.ctx.socket(zmq.PUB)
                    p.setsockopt(zmq.LINGER, 0)
                    p.bind(d.pub_endpoint)
                    d.pub_endpoint = p.getsockopt_string(zmq.LAST_ENDPOINT)
                self._tasks.append(asyncio.ensure_future(self._publish(d, p)))
            if d.mode == "flapping":  # each at its own phase: they do not all fall silent at once
                self._tasks.append(asyncio.ensure_future(self._flap(d, self.flap_s * (1 + self._rng.random()))))

    def _readable(self, d: FakeDaemon) -> None:
        """Every request waiting on the daemon's socket, answered (its descriptor is edge-triggered: it says
        only that something came since it was last read, so the socket is read until it has nothing; a send
        outside this loop may take that news, so each is followed by a call of this)."""
        s = d.router
        if s is None or s.closed:
            return
        while s.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            try:
                frames = s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if d.silent:
                continue
            if d.mode == "slow":
                asyncio.get_running_loop().call_later(self.slow_s, self._reply_later, d, frames)
                continue
            self._reply(d, frames)

    def _reply(self, d: FakeDaemon, frames: list[bytes]) -> None:
        try:
            delim = frames.index(b"")
        except ValueError:
            return
        body = frames[delim + 1] if len(frames) == delim + 2 else b"\xff"  # more than one frame: bad_json
        reply = self._link_command(d, tuple(frames[:delim]), body)
        if reply is None:
            reply = d.handle(body)
        if reply is not None:
            try:
                d.router.send_multipart([*frames[:delim + 1], reply], flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the peer is gone or reads nothing: the reply is lost, as the daemon's is

    def _link_command(self, d: FakeDaemon, peer: tuple[bytes, ...], body: bytes) -> bytes | None:
        """``subscribe`` / ``unsubscribe`` answered as the daemon does (or refused as an older daemon
        does, without ``link_samples``); None for any other request."""
        if b"subscribe" not in body:
            return None
        try:
            req = api.parse_request(body, 65536, MAX_SETPOINT_PPS)
        except api.ApiError:
            return None
        if req.cmd not in api.LINK_COMMANDS:
            return None
        if not self.link_samples:
            return api.error_reply(api.ApiError("unknown_command", f"unknown command {req.cmd!r}"), req.id)
        if req.cmd == "subscribe":
            schema = getattr(req, "schema", None)  # (None from an xtc older than xtc-samples/3)
            if schema is not None and not self.samples_v3:  # as a daemon older than the member refuses it
                return api.error_reply(api.ApiError("bad_field", "unknown field 'schema' for command 'subscribe'"), req.id)
            udp = getattr(req, "udp", None)
            if udp is not None and not self.samples_udp:
                return api.error_reply(api.ApiError("bad_field", "unknown field 'udp' for command 'subscribe'"), req.id)
            d.link_peers[peer] = schema or api.SAMPLES_SCHEMA
            reply = {"subscribed": True, "schema": d.link_peers[peer], "period_s": self.period_s}
            if udp is not None:  # (self.udp is there: samples_udp is on)
                self.udp.set((d.name, peer), *udp)
                reply["udp"] = True
            elif self.udp is not None:
                self.udp.drop((d.name, peer))
            return api.ok_reply(reply, req.id)
        d.link_peers.pop(peer, None)
        if self.udp is not None:
            self.udp.drop((d.name, peer))
        return api.ok_reply({"subscribed": False}, req.id)

    def _reply_later(self, d: FakeDaemon, frames: list[bytes]) -> None:
        try:
            self._reply(d, frames)
        except zmq.ZMQError:
            pass
        self._readable(d)

    async def _publish(self, d: FakeDaemon, p: zmq.Socket | None) -> None:
        # On a fixed schedule, as the daemon's period is (a sleep of a whole period after each message would
        # add the time the messages took to build, and the samples would drift later than the policer's
        # silence check expects), each daemon at its own phase: real daemons start at different times, so
        # their samples arrive spread over the period, not in one burst that the policer reads in one batch.
        loop = asyncio.get_running_loop()
        next_t = loop.time() + self.period_s * (1.0 + self._phase_rng.random())
        try:
            while True:
                await asyncio.sleep(max(0.0, next_t - loop.time()))
                next_t += self.period_s
                if next_t <= loop.time():  # fell a period behind: skip, as the daemon does, never two at once
                    next_t = loop.time() + self.period_s
                while d.inject:
                    raw = d.inject.pop(0)
                    if p is not None:
                        p.send_multipart(raw, flags=zmq.NOBLOCK)
                    self._send_link(d, {}, raw)
                if d.pub_silent or d.silent:
                    continue
                d.published += 1
                if self.jitter:
                    base = d.__dict__.setdefault("base_pps", {n: v.offered_pps for n, v in d.vrs.items()})
                    for n, v in d.vrs.items():
                        v.offered_pps = round(base[n] * (1 + self.jitter * (2 * self._jitter_rng.random() - 1)))
                rows = [v.sample_row() for v in sorted(d.vrs.values(), key=_BY_NAME)]  # (as the daemon sorts them)
                t = time.time()
                # Each format built only when someone takes it, as the daemon does: the PUB socket's only while
                # no peer takes the samples over the ROUTER socket (a policer reads one or the other), so that
                # the fleet's own work is that of the formats its policer asks for.
                wants = set(d.link_peers.values())
                msg = api.samples_message(t, self.period_s, rows) if not wants or api.SAMPLES_SCHEMA in wants else None
                if not wants and p is not None:
                    p.send_multipart(msg, flags=zmq.NOBLOCK)
                v3 = api.samples_message_v3(t, self.period_s, rows) if _V3 and _V3 in wants else None
                self._send_link(d, {api.SAMPLES_SCHEMA: msg, _V3: v3})
        finally:
            if p is not None:
                p.close(0)

    def _send_link(self, d: FakeDaemon, msgs: dict[str, list[bytes] | None], raw: list[bytes] | None = None) -> None:
        """A samples message to the peers subscribed over the ROUTER socket, as the daemon sends it: in the
        format each asked for (``msgs``: format -> frames), or ``raw`` to every one; as a datagram to one that
        asked for them so (the daemon's :class:`~xtc.daemon.sample_udp.UdpSamples`)."""
        udp = self.udp
        sent = False
        for peer, schema in list(d.link_peers.items()):
            msg = raw if raw is not None else msgs.get(schema)
            if msg is None:
                continue
            if udp and udp.send((d.name, peer), msg):
                continue
            try:
                d.router.send_multipart([*peer, b"", *msg], flags=zmq.NOBLOCK)
            except zmq.ZMQError as e:
                if e.errno == zmq.EHOSTUNREACH:  # gone: its subscription ends
                    del d.link_peers[peer]
                    if udp is not None:
                        udp.drop((d.name, peer))
            sent = True
        if sent:  # (a send may take the socket's edge-triggered news of a request: read what came)
            self._readable(d)

    async def _flap(self, d: FakeDaemon, first_s: float) -> None:
        await asyncio.sleep(first_s)
        while True:
            d.silent = not d.silent
            if d.silent:
                d.silenced.append((time.monotonic(), time.time()))
            await asyncio.sleep(self.flap_s)

    def start(self) -> Fleet:
        """Serve in a background thread; returns once every socket is bound."""
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._bind_all())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="policer-fleet", daemon=True)
        self._thread.start()
        ready.wait(120)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            async def _cancel() -> None:
                for t in self._tasks:
                    t.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                loop = asyncio.get_running_loop()
                for d in self.daemons:
                    if d.router is not None and not d.router.closed:
                        loop.remove_reader(d.router.getsockopt(zmq.FD))
                        d.router.close(0)

            asyncio.run_coroutine_threadsafe(_cancel(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
        self.ctx.destroy(0)
        if self.udp is not None:
            self.udp.close()
        for held in self._held:
            held.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    # ------------------------------------------------------------------------------ reports
    def routers(self) -> list[dict[str, Any]]:
        """What to register with the policer: name, endpoint, capacity, and the behaviour."""
        return [{"name": d.name, "endpoint": d.endpoint, "capacity_pps": self.capacity_pps, "mode": d.mode,
                 "pub_endpoint": d.pub_endpoint} for d in self.daemons]

    def stats(self, since_s: float = 0.0) -> dict[str, Any]:
        """Per behaviour: routers, ``list`` requests answered after monotonic ``since_s`` (and samples
        messages published since the start), the longest
        gap between two of one router's ``list`` requests (seconds), routers never polled, and commands;
        for the flapping ones also ``silenced_unix_s``: router -> the wall-clock times it fell silent
        after ``since_s``."""
        out: dict[str, Any] = {}
        for d in self.daemons:
            m = out.setdefault(d.mode, {"routers": 0, "lists": 0, "max_gap_s": 0.0, "never_polled": 0, "commands": {},
                                        "published": 0, "link_peers": 0})
            m["routers"] += 1
            m["link_peers"] += len(d.link_peers)
            m["published"] += d.published
            times = [t for t in d.list_times if t >= since_s]
            m["lists"] += len(times)
            if not times:
                m["never_polled"] += 1
            for a, b in zip(times, times[1:]):
                m["max_gap_s"] = max(m["max_gap_s"], round(b - a, 3))
            for k, n in d.commands.items():
                m["commands"][k] = m["commands"].get(k, 0) + n
            if d.mode == "flapping":
                m.setdefault("silenced_unix_s", {})[d.name] = [u for mono, u in d.silenced if mono >= since_s]
        return out


@contextlib.contextmanager
def fleet_process(routers: int, vrs: int = 16, dead: float = 0.1, jitter: float = 0.0, *,
                  pub_socket: bool = True, transport: str = "ipc", start_timeout_s: float = 120.0) -> Iterator[tuple[subprocess.Popen, list[dict[str, Any]]]]:
    """A publishing fleet in a child process (``python -m xtc_lab.policer_fleet --publish``, its output
    discarded): yields the process and its routers once it has written them, and stops it on the way out
    (SIGTERM, then SIGKILL after 30 s).  ``pub_socket=False``: samples only over the daemons' ROUTER sockets;
    ``transport``: their sockets on Unix (``ipc``) or TCP at 127.0.0.1 (``tcp``)."""
    with tempfile.TemporaryDirectory(prefix="xtc-fleet-") as tmp:
        out = Path(tmp) / "fleet.json"
        proc = subprocess.Popen([sys.executable, "-m", "xtc_lab.policer_fleet", "--routers", str(routers),
                                 "--vrs", str(vrs), "--dead", str(dead), "--out", str(out), "--publish",
                                 "--jitter", str(jitter), "--transport", transport,
                                 *([] if pub_socket else ["--no-pub-socket"])],
                                stdout=subprocess.DEVNULL)
        try:
            t = time.monotonic()
            while not out.exists():
                if proc.poll() is not None or time.monotonic() - t > start_timeout_s:
                    raise RuntimeError("the fleet did not start")
                time.sleep(0.1)
            yield proc, json.loads(out.read_text())
        finally:
            stop_process(proc, 30)


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    """The stand-in fleet's options, as every tool that starts one takes them (``--routers``, ``--vrs``, ``--dead``,
    ``--jitter``: the arguments of :class:`Fleet` and :func:`fleet_process` of the same names)."""
    p.add_argument("--routers", type=int, default=1000, help="stand-in daemons (default 1000)")
    p.add_argument("--vrs", type=int, default=16, help="VRs a daemon (default 16)")
    p.add_argument("--dead", type=float, default=0.1, help="share of the daemons that never answer (default 0.1)")
    p.add_argument("--jitter", type=float, default=0.0,
                   help="the VRs' offered rates drawn anew each period: base x (1 +- jitter) (default 0: steady)")


def add_policer_arguments(p: Any, help_prefix: str = "") -> None:
    """The options of a tool that polices a stand-in fleet, as every such tool takes them: ``--link-transport``
    (how the policer speaks to the daemons; ``help_prefix`` before its help, e.g. ``"fleet: "``)."""
    p.add_argument("--link-transport", choices=LINK_TRANSPORTS, default=None,
                   help=f"{help_prefix}how the policer speaks to the daemons (engine.link_transport; default: its default)")


def add_window_arguments(p: argparse.ArgumentParser, window_help: str) -> None:
    """``--window`` (seconds measured, 10 by default; ``window_help`` says how) and ``--warmup`` (seconds before)."""
    p.add_argument("--window", type=float, default=10.0, help=window_help)
    p.add_argument("--warmup", type=float, default=None, help="seconds before (default 10 + routers / 100)")


def main(argv: list[str] | None = None) -> int:
    """Run a fleet as a process: write its routers to ``--out`` (JSON), serve until SIGTERM, print statistics.

    It also stops when the process that started it dies (a killed bench leaves no fleet behind).
    On SIGUSR1 it prints ``{"window": statistics}`` for the time since the previous SIGUSR1 (or the
    start) and starts a new window.
    """
    p = argparse.ArgumentParser(prog="python -m xtc_lab.policer_fleet", description=main.__doc__)
    add_fleet_arguments(p)
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--flapping", type=float, default=0.0)
    p.add_argument("--flap-s", type=float, default=5.0, help="a flapping router answers this long, then is silent as long")
    p.add_argument("--transport", choices=("ipc", "tcp"), default="ipc")
    p.add_argument("--publish", action="store_true")
    p.add_argument("--no-link-samples", dest="link_samples", action="store_false",
                   help="refuse 'subscribe' as a daemon older than the command does (samples on the PUB socket only)")
    p.add_argument("--no-samples-v3", dest="samples_v3", action="store_false",
                   help="refuse 'subscribe' with a 'schema' member as a daemon older than xtc-samples/3 does")
    p.add_argument("--no-samples-udp", dest="samples_udp", action="store_false",
                   help="refuse 'subscribe' with a 'udp' member as a daemon older than the samples' datagrams does")
    p.add_argument("--no-pub-socket", dest="pub_socket", action="store_false",
                   help="with --publish, no PUB sockets: the samples only over the ROUTER socket to its subscribers")
    p.add_argument("--first", type=int, default=0, help="number of the first router's name (several fleets)")
    p.add_argument("--out", required=True, help="JSON file the routers are written to")
    p.add_argument("--warmup-s", type=float, default=0.0, help="statistics leave out the first seconds")
    args = p.parse_args(argv)
    fleet = Fleet(args.routers, args.vrs, args.dead, args.slow, args.flapping, flap_s=args.flap_s, transport=args.transport,
                  publish=args.publish, seed=args.first, first=args.first, jitter=args.jitter,
                  link_samples=args.link_samples, samples_v3=args.samples_v3, pub_socket=args.pub_socket,
                  samples_udp=args.samples_udp).start()
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps(fleet.routers()))
    tmp.rename(args.out)
    stop, mark = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: mark.set())
    since = time.monotonic() + args.warmup_s
    parent = os.getppid()
    while not stop.wait(0.05):
        if os.getppid() != parent:  # the bench or profile that started it is gone (killed): so is the fleet
            stop.set()
            continue
        if mark.is_set():  # SIGUSR1: print the statistics since the last mark, start a new window
            mark.clear()
            now = time.monotonic()
            print(json.dumps({"window": fleet.stats(since)}), flush=True)
            since = now
    stats = fleet.stats(since)
    fleet.stop()
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
