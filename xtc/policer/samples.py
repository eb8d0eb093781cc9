"""The daemons' sample streams as the policer's engine reads them: over the connection the link pool
keeps to each daemon's manager endpoint, or one SUB socket per router.

With a :class:`~xtc.policer.link.LinkPool` (``links``), a router's samples come over the one
connection the pool keeps to its daemon's manager endpoint (``subscribe``,
:meth:`LinkPool.subscribe`; docs/design/one-link.md): one connection per router instead of two,
which is what a libzmq connection costs the engine in memory (about 50 KiB each).  The daemon sends
them there in the format the pool asks for: ``xtc-samples/3`` (columns in a binary frame,
:func:`xtc.policer.rows.decode_v3`) or, from a daemon older than it, ``xtc-samples/2``; each message is
read by its frames.  A daemon that refuses ``subscribe`` (older than the command) is subscribed to on
its PUB socket as below.

A daemon publishes one ``samples`` message per control period (format ``xtc-samples/2``,
docs/manager-api.md; ``xtc-samples/1``, which named ``forwarded_pps`` ``measured_pps``, is read too, for one version) on its PUB socket (``manager.pub_endpoint``); a router registered with that
endpoint (``pub_endpoint``) is subscribed to here.  A SUB socket connected to several publishers
does not say which one a message came from, and the message does not name its host, so each
router has a SUB socket of its own; one thread waits on all of them at once (``epoll`` on the
sockets' ``ZMQ_FD``) and keeps, per router, only the newest valid message and when it arrived.

A message is untrusted like a reply: its frame is bounded on the socket (``MAXMSGSIZE``: a bigger
one drops the connection), it must be two frames (topic ``samples``, one body) of strict JSON in
format ``xtc-samples/2`` (or /1), at most ``max_vrs`` rows, each row as long as ``fields`` and valid as
an :class:`xtc.daemon.api.Instance` (checked member by member here, as the model does, strict
types, finite numbers, a VR name the API can address, no VR twice: the model per row cost ten
times more, :func:`xtc.policer.link.parse_vr_list` is what a ``list`` reply goes through).  Anything else is
counted (:attr:`SampleStreams.bad`) and dropped; the router's previous sample is kept and ages.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import selectors
import threading
import time
from pathlib import Path
from typing import Any, Callable

import zmq

from xtc.daemon.api import (SAMPLES_SCHEMA, SAMPLES_SCHEMA_V1, SAMPLES_TOPIC, SAMPLES_V1_RENAMED, reject_json_constant,
                            unique_json_keys)
from xtc.daemon.ctl import open_client

from .rows import SampleRows, V3Memory, decode_rows, decode_v3
from .link import VR_NAME_PATTERN, DEFAULT_MAX_REPLY_BYTES, VR_PATTERN, BadReply, LinkPool, raise_open_files_limit

__all__ = ["SampleStreams", "parse_newer", "parse_samples"]

log = logging.getLogger("xtc.policer.samples")


_STATES = frozenset(("inactive", "active", "paused"))
_SATURATED = frozenset((None, "cap_max", "cap_min", "cap_slack"))
#: Members a row must have (the Instance model's required ones) and the numbers among them.
_REQUIRED = ("vr", "state", "setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "original_cap_percent")
_NUMBERS = ("setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "original_cap_percent")


def _number(x: Any) -> bool:
    """A finite JSON number or null (a bool is not a number)."""
    try:
        return x is None or (type(x) in (float, int) and math.isfinite(x))
    except OverflowError:  # an integer beyond a float
        return False


def _float(x: float | int | None) -> float | None:
    return None if x is None else float(x)


def _json(body: bytes) -> Any:
    """Strict JSON (no NaN/Infinity, no duplicate keys); numbers too big for a float come out
    infinite and are refused where they are read."""
    try:
        return json.loads(body, parse_constant=reject_json_constant, object_pairs_hook=unique_json_keys)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def parse_samples(frames: list[bytes], max_vrs: int, max_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> list[dict[str, Any]]:
    """The VRs of one ``samples`` message, in the shape :func:`~xtc.policer.link.parse_vr_list` gives.

    Parameters
    ----------
    frames : list of bytes
        The message's frames (topic, body).
    max_vrs : int
        Most rows accepted; a longer message is refused whole.
    max_bytes : int
        Largest body accepted, bytes.

    Raises
    ------
    BadReply
        The message is not a valid ``xtc-samples/2`` (or /1) message (the reason, never echoing the input).
    """
    if len(frames) != 2 or frames[0] != SAMPLES_TOPIC:
        raise BadReply(f"a samples message has {len(frames)} frame(s) and topic {frames[0][:16]!r}"
                       f" ({SAMPLES_TOPIC!r} and one body expected)" if frames else "an empty samples message")
    if len(frames[1]) > max_bytes:
        raise BadReply(f"a samples message of {len(frames[1])} bytes (at most {max_bytes})")
    try:
        doc = _json(frames[1])
    except (ValueError, UnicodeDecodeError) as e:
        raise BadReply(f"a samples message that is not strict JSON: {str(e)[:200]}") from None
    if not isinstance(doc, dict) or doc.get("schema") not in (SAMPLES_SCHEMA, SAMPLES_SCHEMA_V1):
        raise BadReply(f"a samples message not in format {SAMPLES_SCHEMA} (or {SAMPLES_SCHEMA_V1})")
    fields, rows, period = doc.get("fields"), doc.get("vrs"), doc.get("period_s")
    if doc["schema"] == SAMPLES_SCHEMA_V1 and isinstance(fields, list):
        fields = [SAMPLES_V1_RENAMED.get(f, f) if isinstance(f, str) else f for f in fields]
    if not (isinstance(fields, list) and all(isinstance(f, str) for f in fields) and len(fields) == len(set(fields))
            and all(f in fields for f in _REQUIRED) and isinstance(rows, list)):
        raise BadReply("a samples message without a 'fields' list of distinct names (with "
                       + ", ".join(_REQUIRED) + ") and a 'vrs' list")
    if not (isinstance(period, (int, float)) and not isinstance(period, bool) and _number(period) and period > 0):
        raise BadReply("a samples message without a positive 'period_s'")
    if len(rows) > max_vrs:
        raise BadReply(f"a samples message of {len(rows)} VRs, more than the {max_vrs} accepted per router")
    vrs = []
    names: set[str] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(fields):
            raise BadReply(f"vrs[{i}]: a row that is not a list of {len(fields)} values")
        v = dict(zip(fields, row))
        name, present, saturated = v["vr"], v.get("present"), v.get("saturated")
        if not isinstance(name, str) or not VR_NAME_PATTERN.fullmatch(name):
            raise BadReply(f"vrs[{i}]: the VR name is not a string matching {VR_PATTERN}")
        if name in names:
            raise BadReply(f"vrs[{i}]: VR {name!r} listed twice")
        names.add(name)
        if not (isinstance(v["state"], str) and v["state"] in _STATES):
            raise BadReply(f"vrs[{i}].state: not one of {sorted(_STATES)}")
        if not (present is None or isinstance(present, bool)):
            raise BadReply(f"vrs[{i}].present: not a boolean or null")
        if not (saturated is None or isinstance(saturated, str)) or saturated not in _SATURATED:
            raise BadReply(f"vrs[{i}].saturated: not cap_max, cap_min, cap_slack or null")
        if not (v.get("actuation_error") is None or isinstance(v["actuation_error"], str)):
            raise BadReply(f"vrs[{i}].actuation_error: not a string or null")
        for k in _NUMBERS:
            if not _number(v[k]):
                raise BadReply(f"vrs[{i}].{k}: not a finite number or null")
        vrs.append({"vr": name, "state": v["state"], "present": True if present is None else present,
                    "setpoint_pps": _float(v["setpoint_pps"]), "forwarded_pps": _float(v["forwarded_pps"]),
                    "offered_pps": _float(v["offered_pps"]), "cap_percent": _float(v["cap_percent"]),
                    "saturated": saturated})
    return vrs


#: The start of a body as the daemon writes it (``encode``: its schema, then its time, no spaces).
_TIMED = re.compile(rb'\{"schema":' + re.escape(json.dumps(SAMPLES_SCHEMA).encode())
                    + rb',"t_unix_s":-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?,')


def parse_newer(frames: list[bytes], last: tuple[bytes, list[dict[str, Any]]] | None, max_vrs: int,
                max_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> tuple[list[dict[str, Any]], tuple[bytes, list[dict[str, Any]]] | None]:
    """:func:`parse_samples`, skipped for a message that differs from the router's last valid one only
    in its time: a daemon whose VRs did not change publishes the same body every period but for
    ``t_unix_s`` (which the policer does not read).

    Parameters
    ----------
    frames : list of bytes
    last : tuple or None
        What the previous call returned second for this router (None: nothing yet).
    max_vrs, max_bytes : int
        As :func:`parse_samples`.

    Returns
    -------
    vrs, last
        The VRs (the very list of ``last`` when only the time differs) and what to pass next time.

    Raises
    ------
    BadReply
        As :func:`parse_samples` (``last`` then still stands).
    """
    m = _TIMED.match(frames[1]) if len(frames) == 2 and frames[0] == SAMPLES_TOPIC else None
    rest = frames[1][m.end():] if m is not None and len(frames[1]) <= max_bytes else None
    if rest is not None and last is not None and rest == last[0]:
        return last[1], last  # the same document as a valid one but for a well-formed number it does not read
    vrs = decode_rows(frames, max_vrs, max_bytes)  # columns, checked a field at a time
    if vrs is None:  # not valid (parse_samples says why), or a message only the per-VR path reads
        vrs = SampleRows.from_dicts(parse_samples(frames, max_vrs, max_bytes))
    return vrs, ((rest, vrs) if rest is not None else None)


class SampleStreams:
    """Every registered router's sample stream, read by one thread.

    Parameters
    ----------
    max_vrs : int
        Most VRs accepted in one router's message.
    curve_secret_file : path or None
        The policer's ``.key_secret`` file (a router with a CURVE server key is subscribed to as a
        CURVE client; without the file it is not subscribed to at all).
    max_bytes : int
        Largest message frame accepted, bytes.
    clock : callable
        Monotonic seconds; the arrival times of :meth:`latest` are on it.
    links : LinkPool, optional
        Take the samples of a router whose manager endpoint :meth:`want` gives over the connection
        this pool keeps to it (``subscribe``); its PUB socket only if the daemon refuses.  None: a SUB
        socket per router.

    A stream that cannot be opened (the context's ``MAX_SOCKETS``, a third of the open-files limit,
    or the limit itself reached) is logged and its router measured by ``list``.
    """

    def __init__(self, max_vrs: int = 4096, curve_secret_file: str | Path | None = None,
                 max_bytes: int = DEFAULT_MAX_REPLY_BYTES, context: zmq.Context | None = None,
                 clock: Callable[[], float] = time.monotonic, links: LinkPool | None = None):
        self.links = links
        #: Routers whose samples come over the link pool's connection: name -> how :meth:`want` gave it.
        self._linked: dict[str, tuple] = {}
        #: Routers whose daemon refused ``subscribe``: name -> how (their PUB socket is read instead).
        self._refused: dict[str, tuple] = {}
        self.max_vrs = max_vrs
        self.curve_secret_file = curve_secret_file
        self.max_bytes = max_bytes
        self.clock = clock
        self._own_ctx = context is None
        #: Where the SUB sockets are made: made at the first one when not given (with ``links`` there may
        #: be none, and a context is two threads and their descriptors).
        self._ctx = context
        #: Messages dropped as not valid, per router.
        self.bad: dict[str, int] = {}
        #: Valid messages taken, in all.
        self.received = 0
        self._lock = threading.Lock()
        self._wanted: dict[str, tuple] = {}
        #: router -> (arrival time, VRs) of its newest valid sample, in the order of arrival (a new one is put
        #: last: :meth:`_put_latest`), so that :meth:`older_than` stops at the first one not older; while
        #: ``_in_order`` (the clock never went back between two arrivals).
        self._latest: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._in_order = True
        self._last_arrival = -math.inf
        self._last_body: dict[str, tuple[bytes, list[dict[str, Any]]]] = {}  # router -> parse_newer's memory
        self._socks: dict[str, tuple[zmq.Socket, tuple]] = {}
        self._by_fd: dict[int, str] = {}
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._changed = True
        self._thread = threading.Thread(target=self._run, name="policer-samples", daemon=True)
        self._thread.start()

    def want(self, routers: dict[str, tuple]) -> None:
        """The routers to subscribe to: name -> (PUB endpoint, CURVE server key or None[, manager endpoint]);
        others are dropped.  With the manager endpoint and ``links``, the samples come over the link
        pool's connection to it (its PUB socket if the daemon refuses)."""
        if self.links is None:  # the manager endpoint means nothing then: a router's stream is its PUB socket
            routers = {n: how[:2] for n, how in routers.items()}
        with self._lock:
            if routers != self._wanted:
                self._wanted = dict(routers)
                self._changed = True

    def latest(self, name: str) -> tuple[float, list[dict[str, Any]]] | None:
        """The newest valid sample of a router: (arrival time on ``clock``, its VRs), or None."""
        with self._lock:
            return self._latest.get(name)

    def latest_all(self) -> dict[str, tuple[float, list[dict[str, Any]]]]:
        """:meth:`latest` of every router that has a sample, in one pass under the lock (a copy)."""
        with self._lock:
            return self._latest.copy()

    def streams(self) -> int:
        """How many routers have a newest valid sample."""
        return len(self._latest)

    def older_than(self, t: float) -> list[tuple[str, float]]:
        """``(router, arrival time)`` of every stream whose newest valid sample arrived before ``t``
        (on ``clock``): the silent ones, under the lock.  The samples are kept in the order of their
        arrival, so only the silent ones and the first that is not are looked at (it is called ten times
        a period between cycles: not the whole fleet each time); after the clock went back, every one."""
        out = []
        with self._lock:
            if not self._in_order:
                return [(n, v[0]) for n, v in self._latest.items() if v[0] < t]
            for n, v in self._latest.items():
                if v[0] >= t:
                    break
                out.append((n, v[0]))
        return out

    def _put_latest(self, name: str, vrs: Any) -> None:
        """Keep ``vrs`` as the router's newest sample, arrived now (under the lock): last in the order of arrival."""
        t = self.clock()
        if t < self._last_arrival:
            self._in_order = False  # a clock that went back: older_than looks at every stream
        self._last_arrival = t
        latest = self._latest
        latest.pop(name, None)
        latest[name] = (t, vrs)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._own_ctx and self._ctx is not None and not self._thread.is_alive():
            self._ctx.term()

    # ------------------------------------------------------------------------------- thread
    @property
    def ctx(self) -> zmq.Context:
        """The context of the SUB sockets (made at the first use when it was not given)."""
        if self._ctx is None:
            # Each stream holds two descriptors (the socket's mailbox, its connection): a third of the
            # open-files limit of streams at most, the link pool's exchanges having another third.
            self._ctx = zmq.Context()
            self._ctx.set(zmq.MAX_SOCKETS, max(1024, raise_open_files_limit() // 3))
        return self._ctx

    @property
    def linked(self) -> int:
        """Routers whose samples come over the link pool's connections (not refused)."""
        return len(self._linked)

    def _reconcile(self) -> None:
        with self._lock:
            wanted, self._changed = dict(self._wanted), False
            refused = dict(self._refused)
        for name in [n for n, (_, how) in self._socks.items() if wanted.get(n) != how]:
            self._drop(name)
        for name in [n for n, how in self._linked.items() if wanted.get(n) != how or refused.get(n) == how]:
            self._unlink(name)
        for name in [n for n, how in refused.items() if wanted.get(n) != how]:
            with self._lock:
                self._refused.pop(name, None)
        for name, how in wanted.items():
            if name in self._socks or name in self._linked:
                continue
            if self.links is not None and len(how) > 2 and how[2] and refused.get(name) != how:
                self._link(name, how)
            else:
                self._open(name, how[:2])
                if name in self._socks:
                    self._socks[name] = (self._socks[name][0], how)  # as wanted (refused: with its endpoint)

    def _link(self, name: str, how: tuple) -> None:
        assert self.links is not None
        if how[1] and not self.curve_secret_file:
            return  # cannot authenticate: measured by 'list'
        self._linked[name] = how
        self.links.subscribe(name, how[2], how[1], functools.partial(self._deliver, name, how),
                             functools.partial(self._on_refused, name, how))

    def _unlink(self, name: str) -> None:
        assert self.links is not None
        with self._lock:
            how = self._linked.pop(name)
            self._last_body.pop(name, None)
            self._latest.pop(name, None)
        self.links.unsubscribe(name, how[2], how[1])

    def _on_refused(self, name: str, how: tuple, err: BaseException) -> None:
        """The link pool's thread: the router's daemon takes no ``subscribe``: its PUB socket instead."""
        with self._lock:
            if self._wanted.get(name) == how:
                self._refused[name] = how
                self._changed = True

    def _deliver(self, name: str, how: tuple, frames: list[bytes]) -> None:
        """The link pool's thread: one samples message of a router that came over its connection."""
        if self._linked.get(name) is not how:
            return  # no longer wanted that way
        parsed = self._parsed(name, frames)
        if parsed is None:
            return
        vrs, last = parsed
        self.received += 1
        with self._lock:  # against _unlink: nothing of a router that is no longer wanted stays
            if self._linked.get(name) is how:
                if last is None:
                    self._last_body.pop(name, None)
                else:
                    self._last_body[name] = last
                self._put_latest(name, vrs)

    def _parsed(self, name: str, frames: list[bytes]) -> tuple[Any, Any] | None:
        """One samples message of ``name`` (from its SUB socket or over the link): ``parse_newer``'s (or, for
        an ``xtc-samples/3`` message, ``decode_v3``'s) (rows, memory to keep), or None for a bad one
        (dropped, counted and logged)."""
        last = self._last_body.get(name)
        try:
            if len(frames) == 3:  # xtc-samples/3 (asked for in 'subscribe'): columns in a binary frame
                return decode_v3(frames, self.max_vrs, self.max_bytes, last if isinstance(last, V3Memory) else None)
            return parse_newer(frames, last if isinstance(last, tuple) else None, self.max_vrs, self.max_bytes)
        except BadReply as e:
            self.bad[name] = self.bad.get(name, 0) + 1
            log.warning("router %s: samples dropped: %s", name, e)
            return None

    def _drop(self, name: str) -> None:
        s, _ = self._socks.pop(name)
        fd = s.getsockopt(zmq.FD)
        self._sel.unregister(fd)
        del self._by_fd[fd]
        s.close(0)
        self._last_body.pop(name, None)
        with self._lock:
            self._latest.pop(name, None)

    def _open(self, name: str, how: tuple[str, str | None]) -> None:
        endpoint, server_key = how
        if server_key and not self.curve_secret_file:
            return  # cannot authenticate: measured by 'list'
        try:  # EMFILE included: this router is then measured by 'list'
            s = open_client(self.ctx, endpoint, None, self.curve_secret_file, server_key,
                            {zmq.MAXMSGSIZE: self.max_bytes, zmq.RCVHWM: 4, zmq.SUBSCRIBE: SAMPLES_TOPIC},
                            kind=zmq.SUB)
        except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
            log.warning("router %s: cannot subscribe to %s: %s", name, endpoint, e)
            return
        fd = s.getsockopt(zmq.FD)
        self._socks[name] = (s, how)
        self._by_fd[fd] = name
        self._sel.register(fd, selectors.EVENT_READ)
        self._drain(name, s)

    def _drain(self, name: str, s: zmq.Socket) -> None:
        newest = None
        while s.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            try:
                frames = s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            parsed = self._parsed(name, frames)
            if parsed is not None:
                newest, last = parsed
                if last is None:
                    self._last_body.pop(name, None)
                else:
                    self._last_body[name] = last
        if newest is not None:
            self.received += 1
            with self._lock:
                self._put_latest(name, newest)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._changed:
                    self._reconcile()
                for key, _ in self._sel.select(timeout=0.05) if self._by_fd else ():
                    name = self._by_fd.get(key.fd)
                    if name is not None:
                        self._drain(name, self._socks[name][0])
                if not self._by_fd:
                    self._stop.wait(0.05)
        finally:
            for name in list(self._socks):
                self._drop(name)
            for name in list(self._linked):
                self._unlink(name)
            self._sel.close()
