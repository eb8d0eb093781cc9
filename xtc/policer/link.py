"""The policer's side of the ZeroMQ link to the host daemons: the only module that talks to them.

The engine's link is :class:`LinkPool`: every exchange with every daemon in flight at once over one
event loop (one poller), on one connection kept per daemon endpoint, spoken as a DEALER by
:mod:`xtc.policer.zmtp` or by a libzmq socket (``transport``; CURVE client when the router
has a server key and the policer a key pair: one handshake per connection), with heartbeats and
reconnection, replies matched to requests by their ids, and a deadline per exchange so that silent
daemons delay no other; the same connection carries the daemon's samples once the pool has sent it
``subscribe`` (:meth:`LinkPool.subscribe`: one connection per router, not two; docs/design/one-link.md).
:class:`DaemonLink` is one blocking REQ client
(tools and tests).
A daemon's reply is untrusted input: its size is bounded on the connection (a bigger frame, and with
``zmtp`` a bigger message, drops the connection, seen here as no answer) and as a whole message (one frame of at most
``max_reply_bytes``), it must be strict JSON (no NaN, no Infinity, no duplicate keys, bounded
nesting) and a manager-API reply (:class:`xtc.daemon.api.OkReply` or
:class:`~xtc.daemon.api.ErrorReply`).  Errors are sorted here: :class:`LinkDown` (no answer,
transport failure) and :class:`BadReply` (an answer that is not a valid reply) mark the router
unreachable; :class:`DaemonRefused` (the daemon answered ``ok: false``) is a refused command.

Why one file: it is the policer's one adapter to the daemons, and its parts share one contract:
the pool and the blocking client check replies with the same functions, and most of its length
is :class:`LinkPool`, one event loop's state (connections, exchanges in flight, subscriptions)
that a split would have to share across modules by its private names.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import re
import secrets
import selectors
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator

import zmq
from pydantic import ValidationError

from xtc.daemon import datagram
from xtc.daemon.api import (API_VERSION, MAX_VR_NAME, SAMPLES_SCHEMA, SAMPLES_SCHEMA_V3, SAMPLES_SCHEMAS, SAMPLES_TOPIC,
                            ErrorReply, Instance, OkReply, reject_json_constant, unique_json_keys)
from xtc.daemon.ctl import ManagerError, open_client

from .config import sample_udp_address
from .zmtp import ZmtpConnection, curve_keys

log = logging.getLogger("xtc.policer.link")

__all__ = ["LinkDown", "parse_reply", "raise_open_files_limit", "tcp_sockets", "tcp_states", "BadReply", "DaemonRefused", "DaemonLink", "LinkPool", "DEFAULT_MAX_REPLY_BYTES",
           "strict_json", "parse_vr_list", "VR_PATTERN"]

DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024


class LinkDown(Exception):
    """The daemon did not answer (or not sensibly)."""


class BadReply(LinkDown):
    """The daemon answered with something that is not a valid manager-API reply (too big, not strict
    JSON, wrong schema).  Counted separately: a daemon that does this is misbehaving."""


class DaemonRefused(ManagerError):
    """The daemon answered with an error (``code`` from the manager API): the manager client's
    :class:`~xtc.daemon.ctl.ManagerError`, raised by the policer's own link."""


def _finite(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise ValueError(f"number {text[:32]} is out of range")
    return f


def strict_json(data: bytes | str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no number that overflows a float, no duplicate keys.

    Raises ValueError (also for nesting too deep to parse)."""
    try:
        return json.loads(data, parse_constant=reject_json_constant, object_pairs_hook=unique_json_keys, parse_float=_finite)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


class DaemonLink:
    """Requests to one daemon's manager endpoint, with its errors sorted for the policer.

    Parameters
    ----------
    endpoint : str
        ZeroMQ endpoint of the daemon's REP socket.
    timeout_s : float
        How long to wait for an answer, seconds.
    curve_secret_file : path or None
        The policer's ``.key_secret`` file (CURVE client keys).
    server_key : str or None
        The daemon's Z85 public key; CURVE is used when it is given.
    max_reply_bytes : int
        Largest reply accepted, bytes (the whole message).
    """

    def __init__(self, endpoint: str, timeout_s: float, curve_secret_file: str | Path | None = None,
                 server_key: str | None = None, context: zmq.Context | None = None,
                 max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES):
        self.endpoint = endpoint
        self.server_key = server_key
        self.curve_secret_file = curve_secret_file
        self.timeout_ms = max(1, int(timeout_s * 1000))
        self.max_reply_bytes = max_reply_bytes
        self.ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._seq = 0
        self.lock = threading.Lock()

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            if self.server_key and not self.curve_secret_file:
                raise LinkDown("the daemon has a CURVE server key but the policer has no client key pair")
            try:  # EMFILE included: an error of this router, never of the process
                # MAXMSGSIZE is per frame, checked while receiving.
                self._sock = open_client(self.ctx, self.endpoint, self.timeout_ms, self.curve_secret_file,
                                         self.server_key, {zmq.MAXMSGSIZE: self.max_reply_bytes, zmq.RCVHWM: 4})
            except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
                raise LinkDown(f"cannot connect to {self.endpoint}: {e}") from None
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def _exchange(self, doc: dict[str, Any]) -> bytes:
        s = self._socket()
        try:
            s.send(json.dumps(doc).encode())
            frames = s.recv_multipart(copy=True)
        except zmq.Again:
            self.close()
            raise LinkDown(f"no answer from {self.endpoint} within {self.timeout_ms} ms") from None
        except zmq.ZMQError as e:
            self.close()
            raise LinkDown(f"{self.endpoint}: {e}") from None
        if len(frames) != 1 or len(frames[0]) > self.max_reply_bytes:
            self.close()
            size = sum(len(f) for f in frames)
            raise BadReply(f"{self.endpoint} sent a reply of {len(frames)} frame(s), {size} bytes "
                           f"(one frame of at most {self.max_reply_bytes} bytes expected)")
        return frames[0]

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one request; the reply's ``result``.  Raises :class:`LinkDown` (:class:`BadReply`) or
        :class:`DaemonRefused`."""
        with self.lock:
            self._seq += 1
            raw = self._exchange({"v": API_VERSION, "cmd": cmd, "id": self._seq, **fields})
        return parse_reply(self.endpoint, raw)


def parse_reply(endpoint: str, raw: bytes) -> dict[str, Any]:
    """A daemon's reply (one frame) checked as a manager-API reply: its ``result``.  Raises
    :class:`BadReply` (not strict JSON, not a reply) or :class:`DaemonRefused` (``ok: false``)."""
    try:
        rep = strict_json(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadReply(f"{endpoint} sent a reply that is not strict JSON: {str(e)[:200]}") from None
    return _check_reply(endpoint, rep)


def _check_reply(endpoint: str, rep: Any) -> dict[str, Any]:
    """A reply parsed from strict JSON checked as a manager-API reply: its ``result`` (else raises as
    :func:`parse_reply`)."""
    try:
        if isinstance(rep, dict) and rep.get("ok") is False:
            err = ErrorReply.model_validate(rep).error
            raise DaemonRefused(err.code, err.message[:1000])
        return OkReply.model_validate(rep).result
    except ValidationError as e:
        raise BadReply(f"{endpoint} sent a reply that is not a manager-API reply: {_first_error(e)}") from None


def _first_error(e: ValidationError) -> str:
    """A short description of a validation error that never includes the input."""
    err = e.errors(include_input=False, include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"])[:200]
    return f"{loc or '<reply>'}: {err['msg'][:200]} ({e.error_count()} problem(s))"


#: The kernel's TCP states by their number in /proc/net/tcp.
_TCP_STATES = {1: "established", 2: "syn_sent", 3: "syn_recv", 4: "fin_wait1", 5: "fin_wait2", 6: "time_wait",
               7: "close", 8: "close_wait", 9: "last_ack", 10: "listen", 11: "closing"}


def _tcp_table(proc_net: str | Path) -> Iterator[list[str]]:
    """The fields of each socket's line in ``tcp`` and ``tcp6`` under ``proc_net`` (none where unreadable)."""
    for table in ("tcp", "tcp6"):
        try:
            lines = (Path(proc_net) / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3:
                yield f


def tcp_sockets(proc_net: str | Path = "/proc/net") -> frozenset[tuple[str, str, str]]:
    """This host's TCP sockets now, each as its (local address, remote address, state) as the kernel's table
    writes them: what :func:`tcp_states` is told to leave out (``ignore``).  The state is part of the key,
    so that a new connection that reuses the addresses of a socket left in TIME-WAIT is counted."""
    return frozenset((f[1], f[2], f[3]) for f in _tcp_table(proc_net))


def tcp_states(remote_ports: Iterable[int], proc_net: str | Path = "/proc/net",
               ignore: Collection[tuple[str, str, str]] = frozenset()) -> dict[str, int]:
    """This host's TCP sockets whose remote port is one of ``remote_ports`` (the policer's side of its
    connections toward daemons listening there), counted by state (``time_wait``, ``established``...),
    from ``tcp`` and ``tcp6`` under ``proc_net`` (Linux; empty elsewhere).  What the bench and the
    tests measure a policer's connections toward its fleet with.

    ``ignore``: sockets left out, as :func:`tcp_sockets` gave them before the policer connected.  A port
    is free again while sockets toward its last listener still wait in TIME-WAIT (a minute): a daemon
    given that port would otherwise be counted with another program's connections."""
    ports = set(remote_ports)
    out: dict[str, int] = {}
    for f in _tcp_table(proc_net):
        if int(f[2].rpartition(":")[2], 16) in ports and (f[1], f[2], f[3]) not in ignore:
            state = _TCP_STATES.get(int(f[3], 16), f[3])
            out[state] = out.get(state, 0) + 1
    return out


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; returns the soft limit."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):
        return 1024


Callback = Callable[[str, list[Any]], None]

#: The ways a connection to a daemon is spoken (``engine.link_transport``).
LINK_TRANSPORTS = ("libzmq", "zmtp")
#: Open files a kept libzmq connection holds (the ZeroMQ socket's mailbox and its TCP socket; one spoken by hand
#: holds its TCP socket only).
FILES_PER_CONNECTION = 2
#: Open files kept aside for everything else of the process (database, HTTP, sample streams' base).
RESERVED_FILES = 512
#: Most requests remembered per connection as sent and not answered (for a reply without a
#: readable id: it stands in the place of the oldest of them, as a REP socket answers in order).
MAX_UNANSWERED = 4096
#: A subscription to a daemon's samples over its connection is asked again when no sample came for
#: this many of the daemon's periods (the daemon restarted, or the connection was cut and made again:
#: the daemon knows the peer no more).
RESUBSCRIBE_PERIODS = 2.5
#: The first wait before asking again after a ``subscribe`` that got no answer, seconds (then doubling,
#: up to :data:`SUBSCRIBE_RETRY_MAX_S`: a dead daemon costs a request every 10 s; the engine measures
#: its router by ``list`` meanwhile).
SUBSCRIBE_RETRY_S = 0.5
SUBSCRIBE_RETRY_MAX_S = 10.0
#: How often the subscriptions are looked after (silent ones asked again), seconds.
TEND_S = 0.25
#: Most messages read from one connection in one turn of the I/O thread's loop; the rest after every other
#: ready connection's turn (a daemon that floods its connection delays no other by more than a batch).
READ_BATCH = 64
#: The I/O thread waits on its sockets at most once every this many seconds (:class:`_PacedSelector`).
PACE_S = 0.01
#: Most datagrams read from the samples' UDP socket in one turn of the I/O thread's loop (the rest at its
#: next turn, after the connections' turns).
READ_DATAGRAMS = 512
#: The samples' UDP socket's receive buffer asked for, bytes (the kernel caps it at ``net.core.rmem_max``):
#: room for the datagrams of a few thousand routers that arrive between two of the loop's turns.
UDP_RCVBUF_BYTES = 4 << 20


class _PacedSelector(selectors.DefaultSelector):  # type: ignore[valid-type,misc]
    """The I/O thread's ``epoll``, waited on at most once every ``pace_s``: what becomes readable meanwhile
    is read in one turn of the loop (one wake-up of the thread for many connections, not one each: at
    1,000 routers about 500 wake-ups a second became 25, and the receive 42 -> 31 us a sample).  A wait
    with something to do (timeout 0: callbacks ready) is never held back, and a timer is not delayed past
    its time; a message waits at most ``pace_s`` more before it is read."""

    def __init__(self, pace_s: float) -> None:
        super().__init__()
        self.pace_s = pace_s
        self._next_s = 0.0

    def select(self, timeout: float | None = None) -> list:
        if self.pace_s > 0 and (timeout is None or timeout > 0):
            hold_s = self._next_s - time.monotonic()
            if hold_s > 0:
                if timeout is not None:
                    hold_s = min(hold_s, timeout)
                    timeout -= hold_s
                time.sleep(hold_s)
        ready = super().select(timeout)
        self._next_s = time.monotonic() + self.pace_s
        return ready


SampleSink = Callable[[list[bytes]], None]
RefusedSink = Callable[[BaseException], None]


class _Sub:
    """The samples of one daemon endpoint over its kept connection (``subscribe``), and who takes them."""

    __slots__ = ("key", "last_s", "next_s", "period_s", "plain", "retry_s", "sinks", "state", "udp_id", "udp_seq",
                 "no_udp")

    def __init__(self, key: tuple[str, str | None]):
        self.key = key
        #: router -> (what takes each samples message's frames, what is told when the daemon refuses).
        self.sinks: dict[str, tuple[SampleSink, RefusedSink]] = {}
        #: ``asking`` (a subscribe in flight), ``on`` (samples come), ``off`` (to ask at ``next_s``),
        #: ``refused`` (the daemon has no such command: its sinks take the samples elsewhere).
        self.state = "off"
        self.last_s = 0.0
        self.retry_s = SUBSCRIBE_RETRY_S
        self.next_s = 0.0
        self.period_s = 1.0
        #: ``subscribe`` is sent without ``schema`` (the daemon refused the member: older than it).
        self.plain = False
        #: The id of the key of the datagrams asked for at the last ``subscribe`` (None: on the connection),
        #: and the sequence number of the last datagram taken.
        self.udp_id: bytes | None = None
        self.udp_seq = 0
        #: ``subscribe`` is sent without ``udp`` (the daemon refused the member: older than it).
        self.no_udp = False


class _Conn:
    """One kept connection: a DEALER socket toward one daemon endpoint (with one CURVE server key)."""

    __slots__ = ("key", "endpoint", "sock", "fd", "pending", "order", "last_used_s", "stalled_since_s", "writers",
                 "closed", "zmtp")

    def __init__(self, key: tuple[str, str | None], sock: Any, now_s: float):
        self.key = key
        self.endpoint = key[0]
        #: A libzmq DEALER socket, or (``zmtp``) the connection spoken by hand, filled in after this is made.
        self.sock = sock
        self.zmtp: ZmtpConnection | None = None
        #: request id -> the future its exchange waits on (requests in flight, sent or being sent).
        self.pending: dict[int, Any] = {}
        #: ids sent on this socket and not answered, oldest first (those past their deadline included): a list,
        #: not a deque (an empty deque holds a block of 760 bytes, a list 56; it holds one or two ids but on a
        #: silent daemon's connection, and at most MAX_UNANSWERED, so ``pop(0)`` costs nothing that counts).
        self.order: list[int] = []
        self.last_used_s = now_s
        #: When the oldest request sent since the last reply went out (None: no reply awaited since).
        self.stalled_since_s: float | None = None
        #: The socket's ``ZMQ_FD``: readable when its events may have changed (read by the I/O thread's loop).
        self.fd: int = sock.getsockopt(zmq.FD) if sock is not None else -1
        #: Sends waiting for the socket to take a message (the connection not up yet: ``IMMEDIATE``).
        self.writers: list[Any] = []
        self.closed = False


class LinkPool:
    """Every request to every daemon, in flight concurrently over one event loop (one poller), on one
    kept connection per daemon endpoint.

    :meth:`exchange` sends a list of requests to one router's daemon on the DEALER socket kept for
    its endpoint (and CURVE server key: one CURVE handshake per connection, not per exchange),
    each request with an id of its own that no other request of the pool ever had: a reply is
    matched to its request by the id it echoes, never by its place, so a reply that comes after
    its request's deadline is dropped and counted (:attr:`late_replies`), never taken for a later
    request's.  A reply whose id cannot be read or answers nothing sent on that connection is
    dropped and counted (:attr:`bad_replies`) and, as a REP socket answers in order, fails the
    oldest request unanswered on it with :class:`BadReply`.  Each exchange has its deadline
    (``timeout_s`` after it was sent): a daemon that does not answer holds up only its own
    exchanges, whatever the number of silent ones.

    The sockets keep themselves up: ZeroMQ heartbeats (``heartbeat_s``; a peer silent for three
    of them is dropped), reconnection with a backoff from 0.1 s doubling up to
    ``reconnect_max_s``, and requests queued only on a connection that is up (``IMMEDIATE``: none
    waits for a daemon to come back and reach it late; such a request fails at its deadline).  A
    connection that gave no reply at all for ``stall_s`` while requests waited on it is closed
    and opened again (what was queued toward a hung daemon is dropped, as a socket per exchange
    did); one unused for ``idle_s`` is closed.  Each reply is checked as :class:`DaemonLink` does
    (one frame of at most ``max_reply_bytes``, bounded on the socket by ``MAXMSGSIZE``, strict JSON,
    a manager-API reply).

    The open-files limit is raised to its hard limit at start and logged with the connections it
    allows (:attr:`max_connections`); :meth:`expect` says in one line when a fleet needs more.  A
    connection that cannot be opened (beyond that number, EMFILE) is an error of that router
    (:class:`LinkDown`), never of the process.

    Parameters
    ----------
    timeout_s : float
        Deadline of one exchange, seconds from its sending.
    curve_secret_file : path or None
        The policer's ``.key_secret`` (CURVE client keys), for routers that have a server key.
    context : zmq.Context, optional
    max_reply_bytes : int
        Largest reply accepted, bytes.
    max_in_flight : int, optional
        Most exchanges in flight at once (the others wait their turn, their deadline starting
        when they are sent; default 8192).
    heartbeat_s : float
        Seconds between ZeroMQ heartbeats on an idle connection.
    reconnect_max_s : float
        Longest wait between two attempts to connect, seconds.
    idle_s : float
        A connection unused this long (seconds) is closed.
    stall_s : float, optional
        A connection that has not answered for this long (seconds) while requests waited is closed
        and opened again, at the deadline of one of them (default three ``timeout_s``).
    pace_s : float
        The I/O thread waits on its sockets at most once every this many seconds, and reads then every
        connection that has messages (one wake-up for many); a message waits at most that long more.
        0: at once.
    sample_udp : str, optional
        ``engine.sample_udp``: ``ADDRESS:PORT`` (an IP address, IPv6 in brackets; port 0: any free one) to
        take the samples on as UDP datagrams (docs/design/samples-udp.md): bound here (an error raises
        ``OSError``), and sent in each ``subscribe`` with a fresh key; a daemon that does not know the
        member sends them on the connection.  None: on the connection.
    sample_udp_shard : int
        The engine shard this pool serves: it binds PORT + this (:func:`~xtc.policer.config.sample_udp_address`).
    transport : str
        ``engine.link_transport``: ``libzmq``, a libzmq DEALER socket a daemon (68-91 KiB a connection), or
        ``zmtp``, the same protocol spoken here on the I/O thread's loop (:mod:`xtc.policer.zmtp`, 6.5-9.6 KiB
        a connection, docs/design/zmtp-link.md).  The daemons cannot tell them apart.
    """

    def __init__(self, timeout_s: float, curve_secret_file: str | Path | None = None,
                 context: zmq.Context | None = None, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
                 max_in_flight: int | None = None, heartbeat_s: float = 5.0, reconnect_max_s: float = 5.0,
                 idle_s: float = 300.0, stall_s: float | None = None, pace_s: float = PACE_S,
                 sample_schema: str = SAMPLES_SCHEMA_V3, sample_udp: str | None = None, sample_udp_shard: int = 0,
                 transport: str = "zmtp"):
        if transport not in LINK_TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(LINK_TRANSPORTS)}, got {transport!r}")
        #: ``libzmq`` (a DEALER socket a connection) or ``zmtp`` (ZMTP spoken here: :mod:`xtc.policer.zmtp`).
        self.transport = transport
        if sample_schema not in SAMPLES_SCHEMAS:
            raise ValueError(f"sample_schema must be one of {', '.join(SAMPLES_SCHEMAS)}, got {sample_schema!r}")
        #: The samples' UDP socket and the address the daemons are told (None: samples on the connections).
        self._udp: socket.socket | None = None
        self.udp_to: str | None = None
        if sample_udp is not None:
            self._udp, self.udp_to = _bind_udp(sample_udp_address(sample_udp, sample_udp_shard))
        #: The samples' format asked for in ``subscribe`` (a daemon that does not know the member is asked
        #: again without it, and sends ``xtc-samples/2``).
        self.sample_schema = sample_schema
        self.timeout_s = timeout_s
        self.pace_s = pace_s
        self.curve_secret_file = curve_secret_file
        self.max_reply_bytes = max_reply_bytes
        self.heartbeat_s = heartbeat_s
        self.reconnect_max_s = reconnect_max_s
        self.idle_s = idle_s
        self.stall_s = 3 * timeout_s if stall_s is None else stall_s
        self.open_files = raise_open_files_limit()
        #: Most kept connections the open-files limit allows.
        self.files_per_connection = 1 if transport == "zmtp" else FILES_PER_CONNECTION  # (zmtp: its TCP socket only)
        self.max_connections = max(16, (self.open_files - RESERVED_FILES) // self.files_per_connection)
        self.max_in_flight = max_in_flight or 8192
        log.info("open files: limit %d, room for %d daemon connections", self.open_files, self.max_connections)
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        try:
            self.ctx.set(zmq.MAX_SOCKETS, max(self.ctx.get(zmq.MAX_SOCKETS), self.max_connections + 64))
        except zmq.ZMQError:
            pass
        #: Sockets that could not be opened (EMFILE, past :attr:`max_connections`) since the start.
        self.socket_errors = 0
        #: Connections opened, closed again for silence, and closed idle since the start.
        self.connects = 0
        self.resets = 0
        self.idle_closed = 0
        #: Replies dropped: after their request's deadline, and invalid or answering nothing sent.
        self.late_replies = 0
        self.bad_replies = 0
        self.in_flight = 0
        self._seq = 0
        self._expected = 0
        self._loop: Any = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        #: The kept connections by (endpoint, CURVE server key) (plain sockets, used on the I/O thread only:
        #: its loop waits on their ``ZMQ_FD``\ s, :meth:`_readable`): closed by :meth:`close`.
        self._conns: dict[tuple[str, str | None], _Conn] = {}
        self._tasks: set[Any] = set()
        #: The subscriptions to samples over the connections, by the same key (:meth:`subscribe`).
        self._subs: dict[tuple[str, str | None], _Sub] = {}
        #: ``subscribe`` requests answered yes and refused (an older daemon), asked again after a
        #: silence, samples messages handed on, and ones that came for no subscription (dropped).
        self.subscribed = 0
        #: Of them, answered with the compact format ``xtc-samples/3``.
        self.subscribed_v3 = 0
        self.subscribe_refused = 0
        self.resubscribes = 0
        self.samples_received = 0
        self.stray_samples = 0
        #: The datagrams' keys by their ids (the subscriptions' whose last ``subscribe`` asked for them).
        self._udp_keys: dict[bytes, bytes] = {}
        self._udp_subs: dict[bytes, _Sub] = {}
        #: ``subscribe`` answered with the datagrams on; datagrams taken; datagrams dropped, by reason
        #: (:class:`xtc.daemon.datagram.DatagramError`'s, or ``replayed``: a sequence number not above the last).
        self.subscribed_udp = 0
        self.udp_received = 0
        self.udp_dropped: dict[str, int] = {}

    def stats(self) -> dict[str, int]:
        """The counters of the links (for logs and metrics)."""
        return {"connections": len(self._conns), "connects": self.connects, "resets": self.resets,
                "idle_closed": self.idle_closed, "late_replies": self.late_replies,
                "bad_replies": self.bad_replies, "socket_errors": self.socket_errors,
                "subscriptions": sum(s.state == "on" for s in list(self._subs.values())),
                "subscribed": self.subscribed, "subscribed_v3": self.subscribed_v3,
                "subscribe_refused": self.subscribe_refused,
                "resubscribes": self.resubscribes, "samples_received": self.samples_received,
                "stray_samples": self.stray_samples, "subscribed_udp": self.subscribed_udp,
                "udp_received": self.udp_received, "udp_dropped": sum(list(self.udp_dropped.values()))}

    def expect(self, daemons: int) -> bool:
        """Check that ``daemons`` connections (the fleet's distinct daemon endpoints) fit in the
        open-files limit; if not, say so once in one line (again when the number changes).  Returns
        whether they fit."""
        fits = daemons <= self.max_connections
        if not fits and daemons != self._expected:
            log.error("the fleet has %d daemons but the open-files limit (%d) allows %d connections: "
                      "daemons past that are marked unreachable; raise the limit (LimitNOFILE=) to at least %d",
                      daemons, self.open_files, self.max_connections,
                      daemons * self.files_per_connection + RESERVED_FILES)
        self._expected = daemons
        return fits

    # ------------------------------------------------------------------------- the I/O thread
    def _ensure_loop(self) -> Any:
        import asyncio

        with self._start_lock:
            if self._closed:
                raise RuntimeError("the link pool is closed")
            if self._loop is None:
                self._loop = asyncio.SelectorEventLoop(_PacedSelector(self.pace_s))
                self._sem = asyncio.Semaphore(self.max_in_flight)
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(self._loop)
                    self._loop.call_soon(ready.set)
                    self._loop.call_later(min(30.0, self.idle_s / 4), self._close_idle)
                    self._loop.call_later(TEND_S, self._tend)
                    if self._udp is not None:
                        self._loop.add_reader(self._udp.fileno(), self._datagrams)
                    self._loop.run_forever()

                self._thread = threading.Thread(target=run, name="policer-links", daemon=True)
                self._thread.start()
                ready.wait()
            return self._loop

    def exchange(self, router: str, endpoint: str, server_key: str | None, requests: list[dict[str, Any]],
                 callback: Callback) -> None:
        """Send ``requests`` (``{"cmd": ..., fields}``) to a router's daemon, in order, without waiting.

        ``callback(router, results)`` is called from the I/O thread once, with one entry per request:
        the reply's ``result`` or the exception (:class:`LinkDown`, :class:`BadReply`,
        :class:`DaemonRefused`); requests without an answer at the deadline get :class:`LinkDown`.
        """
        import asyncio

        loop = self._ensure_loop()
        asyncio.run_coroutine_threadsafe(self._exchange(router, endpoint, server_key, requests, callback), loop)

    def exchange_many(self, exchanges: list[tuple]) -> None:
        """Several :meth:`exchange` calls, ``(router, endpoint, server_key, requests, callback)`` each, handed
        to the I/O thread at once (one wake-up of its loop for a whole cycle's ``list`` requests).  A
        sixth member, if there is one, is that exchange's own timeout in seconds (None: :attr:`timeout_s`)."""
        if not exchanges:
            return
        loop = self._ensure_loop()

        def start() -> None:
            for ex in exchanges:
                t = loop.create_task(self._exchange(*ex))
                self._tasks.add(t)  # the loop keeps only weak references to its tasks
                t.add_done_callback(self._tasks.discard)

        loop.call_soon_threadsafe(start)

    # ------------------------------------------------------------------------- subscriptions
    def subscribe(self, router: str, endpoint: str, server_key: str | None, on_sample: SampleSink,
                  on_refused: RefusedSink) -> None:
        """Take a daemon's samples over the connection kept to its manager endpoint (one connection for
        both: issue 50, docs/design/one-link.md), for ``router``.

        The pool sends ``subscribe`` on that connection (made if there is none) and hands each samples
        message that comes on it, ``[topic, body]``, to ``on_sample`` (on the I/O thread, unchecked:
        the sink validates it) for as long as the router stays subscribed.  When no sample came for
        :data:`RESUBSCRIBE_PERIODS` of the daemon's periods (it restarted, the connection was made
        again) or the ``subscribe`` got no answer, it is sent again, after a wait that doubles from
        :data:`SUBSCRIBE_RETRY_S` up to :data:`SUBSCRIBE_RETRY_MAX_S`.  A daemon that refuses it (an older one:
        ``unknown_command``) gets it no more, and ``on_refused(error)`` is called (on the I/O thread):
        the caller subscribes to the daemon's PUB socket instead.  Several routers of one daemon share
        its subscription."""
        loop = self._ensure_loop()
        loop.call_soon_threadsafe(self._add_sink, router, (endpoint, server_key or None), on_sample, on_refused)

    def unsubscribe(self, router: str, endpoint: str, server_key: str | None) -> None:
        """``router`` takes that daemon's samples no more; the last one to leave sends ``unsubscribe``."""
        if self._loop is None or self._closed:
            return
        self._loop.call_soon_threadsafe(self._remove_sink, router, (endpoint, server_key or None))

    def _add_sink(self, router: str, key: tuple[str, str | None], on_sample: SampleSink, on_refused: RefusedSink) -> None:
        sub = self._subs.get(key)
        if sub is None:
            sub = self._subs[key] = _Sub(key)
        sub.sinks[router] = (on_sample, on_refused)
        if sub.state == "refused":
            on_refused(DaemonRefused("unknown_command", "the daemon refused 'subscribe'"))
        elif sub.state == "off":
            self._ask(sub)

    def _remove_sink(self, router: str, key: tuple[str, str | None]) -> None:
        sub = self._subs.get(key)
        if sub is None or sub.sinks.pop(router, None) is None or sub.sinks:
            return
        del self._subs[key]
        self._forget_udp(sub)
        if sub.state in ("on", "asking") and key in self._conns:  # nobody takes them: the daemon may stop
            self._spawn(self._talk(key[0], key[1], [{"cmd": "unsubscribe"}]))

    def _spawn(self, coro: Any) -> None:
        t = self._loop.create_task(coro)
        self._tasks.add(t)  # the loop keeps only weak references to its tasks
        t.add_done_callback(self._tasks.discard)

    def _ask(self, sub: _Sub) -> None:
        sub.state = "asking"
        self._spawn(self._subscribe(sub))

    async def _subscribe(self, sub: _Sub) -> None:
        import asyncio

        try:
            async with self._sem:
                ask: dict[str, Any] = {"cmd": "subscribe"}
                if not sub.plain and self.sample_schema != SAMPLES_SCHEMA:
                    ask["schema"] = self.sample_schema
                self._forget_udp(sub)
                if self.udp_to is not None and not sub.no_udp:  # a fresh key each time: never one a datagram was sent with
                    key = secrets.token_bytes(datagram.KEY_BYTES)
                    sub.udp_id, sub.udp_seq = datagram.key_id_of(key), 0
                    self._udp_keys[sub.udp_id], self._udp_subs[sub.udp_id] = key, sub
                    ask["udp"] = {"to": self.udp_to, "key": key.hex()}
                results = await self._talk(sub.key[0], sub.key[1], [ask])
        except LinkDown as e:  # no connection could be made
            results = [e]
        except asyncio.CancelledError:
            return
        if self._subs.get(sub.key) is not sub:
            return  # nobody wants it any more
        res = results[0] if results else LinkDown("no answer")
        now = self._loop.time()
        if isinstance(res, dict):
            p = res.get("period_s")
            sub.period_s = float(p) if type(p) in (int, float) and 0.01 <= p <= 3600 else 1.0
            sub.state, sub.last_s, sub.retry_s = "on", now, SUBSCRIBE_RETRY_S
            self.subscribed += 1
            self.subscribed_v3 += res.get("schema") == SAMPLES_SCHEMA_V3
            self.subscribed_udp += res.get("udp") is True
        elif isinstance(res, DaemonRefused) and res.code == "bad_field" and "udp" in ask and "'udp" in str(res):
            # A daemon that does not know 'udp' (older), or cannot send to that address: on the connection.
            sub.no_udp = True
            self._forget_udp(sub)
            log.info("%s: samples on the connection, not as datagrams (%s)", sub.key[0], res)
            self._ask(sub)
        elif isinstance(res, DaemonRefused) and res.code == "bad_field" and not sub.plain:
            # A daemon that has 'subscribe' but not its 'schema' member: asked again without it (xtc-samples/2).
            sub.plain = True
            log.info("%s: 'subscribe' without the samples' format (%s): xtc-samples/2", sub.key[0], res)
            self._ask(sub)
        elif isinstance(res, DaemonRefused):
            sub.state = "refused"
            self.subscribe_refused += 1
            log.info("%s: no samples over the manager connection (%s): its PUB socket is subscribed to instead",
                     sub.key[0], res)
            for _, on_refused in list(sub.sinks.values()):
                try:
                    on_refused(res)
                except Exception:
                    log.exception("subscription callback failed")
        else:  # no answer (or not a valid one): asked again later
            sub.state, sub.next_s = "off", now + sub.retry_s
            sub.retry_s = min(2 * sub.retry_s, SUBSCRIBE_RETRY_MAX_S)

    def _tend(self) -> None:
        """Ask again the subscriptions whose samples stopped, and those whose wait is over."""
        now = self._loop.time()
        for sub in self._subs.values():
            if sub.state == "on" and now - sub.last_s > RESUBSCRIBE_PERIODS * sub.period_s:
                sub.state, sub.next_s = "off", now  # the daemon knows this connection no more
                self.resubscribes += 1
            if sub.state == "off" and now >= sub.next_s:
                self._ask(sub)
        self._loop.call_later(TEND_S, self._tend)

    def _sample(self, c: _Conn, frames: list[bytes]) -> None:
        """A samples message on a connection: handed to its subscription's sinks (else dropped, counted)."""
        sub = self._subs.get(c.key)
        if sub is None or sub.state == "refused":
            self.stray_samples += 1
            return
        self._deliver(sub, frames[1:])

    def _forget_udp(self, sub: _Sub) -> None:
        """The datagrams with the subscription's last key are taken no more."""
        if sub.udp_id is not None:
            self._udp_keys.pop(sub.udp_id, None)
            self._udp_subs.pop(sub.udp_id, None)
            sub.udp_id = None

    def _datagrams(self) -> None:
        """The loop's callback when the samples' UDP socket is readable: its datagrams read without waiting,
        at most :data:`READ_DATAGRAMS` in this turn (the rest at the next), each checked (its key's tag, a
        sequence number above the last taken) and its message handed to its subscription's sinks; one that
        does not check is dropped and counted by reason."""
        udp = self._udp
        if udp is None:
            return
        buf = bytearray(65536)
        view = memoryview(buf)
        keys, subs, dropped = self._udp_keys, self._udp_subs, self.udp_dropped
        recv_into, decode = udp.recv_into, datagram.decode
        for _ in range(READ_DATAGRAMS):
            try:
                n = recv_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error queued on the socket, or closed
                continue
            try:
                key_id, seq, frames = decode(view[:n], keys)
            except datagram.DatagramError as e:
                dropped[e.reason] = dropped.get(e.reason, 0) + 1
                continue
            sub = subs[key_id]
            if seq <= sub.udp_seq:
                dropped["replayed"] = dropped.get("replayed", 0) + 1
                continue
            sub.udp_seq = seq
            self.udp_received += 1
            self._deliver(sub, frames)
        self._loop.call_soon(self._datagrams)  # a full turn: the rest at the next

    def _deliver(self, sub: _Sub, msg: list[bytes]) -> None:
        """A samples message (``[topic, ...]``) of a subscription, from its connection or a datagram."""
        sub.last_s = self._loop.time()
        if sub.state != "on":  # a 'subscribe' whose reply was lost took effect all the same
            sub.state = "on"
        self.samples_received += 1
        for on_sample, _ in sub.sinks.values():  # (changed only by the loop's own callbacks, not during this)
            try:
                on_sample(msg)
            except Exception:
                log.exception("samples sink failed")

    # ------------------------------------------------------------------------- connections
    def _conn(self, endpoint: str, server_key: str | None) -> _Conn:
        """The kept connection to a daemon endpoint, opened if there is none."""
        key = (endpoint, server_key or None)
        c = self._conns.get(key)
        if c is not None:
            return c
        if server_key and not self.curve_secret_file:
            raise LinkDown("the daemon has a CURVE server key but the policer has no client key pair")
        if len(self._conns) >= self.max_connections:
            self.socket_errors += 1
            raise LinkDown(f"cannot connect to {endpoint}: {len(self._conns)} daemon connections open, the most "
                           f"the open-files limit ({self.open_files}) allows")
        if self.transport == "zmtp":
            return self._zmtp_conn(key)
        hb_ms = max(100, int(self.heartbeat_s * 1000))
        options = {zmq.MAXMSGSIZE: self.max_reply_bytes, zmq.RCVHWM: 1000, zmq.SNDHWM: 1000, zmq.IMMEDIATE: 1,
                   zmq.RECONNECT_IVL: 100, zmq.RECONNECT_IVL_MAX: max(100, int(self.reconnect_max_s * 1000)),
                   zmq.HEARTBEAT_IVL: hb_ms, zmq.HEARTBEAT_TIMEOUT: 3 * hb_ms, zmq.HEARTBEAT_TTL: 3 * hb_ms}
        try:
            s = open_client(self.ctx, endpoint, None, self.curve_secret_file, server_key, options, kind=zmq.DEALER)
        except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
            if isinstance(e, zmq.ZMQError) and e.errno == errno.EMFILE:
                self.socket_errors += 1  # too many sockets: this router's error, never the process's
            raise LinkDown(f"cannot connect to {endpoint}: {e}") from None
        c = self._conns[key] = _Conn(key, s, self._loop.time())
        self._loop.add_reader(c.fd, self._readable, c)
        self.connects += 1
        return c

    def _zmtp_conn(self, key: tuple[str, str | None]) -> _Conn:
        endpoint, server_key = key
        try:  # (the secret file read again only when it changed: load_secret's own cache, as for libzmq's)
            keys = curve_keys(self.curve_secret_file, server_key) if server_key else None
            c = _Conn(key, None, self._loop.time())
            c.zmtp = ZmtpConnection(self._loop, endpoint, keys, lambda frames: self._take(c, frames),
                                    lambda: self._up_again(c), max_frame_bytes=self.max_reply_bytes,
                                    heartbeat_s=self.heartbeat_s, reconnect_max_s=self.reconnect_max_s,
                                    batch=READ_BATCH)
        except ValueError as e:  # CurveError is a ValueError
            raise LinkDown(f"cannot connect to {endpoint}: {e}") from None
        self._conns[key] = c
        self.connects += 1
        return c

    def _up_again(self, c: _Conn) -> None:
        """A hand-spoken connection's handshake done: when it is not its first (the connection was lost and
        made again), the daemon knows it as a new peer, so its subscription is asked again now, not after
        :data:`RESUBSCRIBE_PERIODS` of silence (a libzmq socket reconnects without saying so)."""
        sub = self._subs.get(c.key)
        if c.zmtp.handshakes > 1 and sub is not None and sub.state == "on":  # type: ignore[union-attr]
            sub.state, sub.next_s = "off", self._loop.time()
            self.resubscribes += 1
            self._ask(sub)

    def _drop(self, c: _Conn) -> None:
        """Close a connection (its requests in flight fail at their deadlines)."""
        if c.closed:
            return
        c.closed = True
        if self._conns.get(c.key) is c:
            del self._conns[c.key]
        if c.zmtp is not None:
            c.zmtp.close()
        else:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(c.fd)
            for fut in c.writers:
                if not fut.done():
                    fut.set_exception(zmq.ZMQError(errno.ENOTSOCK))
            c.writers.clear()
            c.sock.close(0)
        sub = self._subs.get(c.key)
        if sub is not None and sub.state == "on":  # the next connection is a new peer to the daemon
            sub.state, sub.next_s = "off", self._loop.time() if self._loop is not None else 0.0

    def _close_idle(self) -> None:
        now = self._loop.time()
        for c in list(self._conns.values()):
            if not c.pending and now - c.last_used_s > self.idle_s and c.key not in self._subs:
                self.idle_closed += 1
                self._drop(c)
        self._loop.call_later(min(30.0, self.idle_s / 4), self._close_idle)

    def _readable(self, c: _Conn) -> None:
        """The loop's callback when a connection's ``ZMQ_FD`` is readable (and after a send): its messages
        read without waiting (``NOBLOCK``) while the socket's ``EVENTS`` say there is one, at most
        :data:`READ_BATCH` in this turn (the rest after every other ready connection's turn), each handed
        on as it is read: a samples message to its subscription's sinks, a reply to the request it answers.
        The descriptor signals a change of the socket's events, not each message: every message there is
        must be read before the loop waits on it again, and a message that cannot be handed on is dropped
        (counted) and the next read.  Then the sends waiting for the connection (``IMMEDIATE``) are woken
        if it takes messages now."""
        if c.closed:
            return
        sock = c.sock
        recv = sock.recv_multipart
        events = 0
        try:
            for _ in range(READ_BATCH):
                try:
                    frames = recv(zmq.NOBLOCK)
                except zmq.Again:
                    events = sock.getsockopt(zmq.EVENTS) if c.writers else 0
                    break
                self._take(c, frames)
                if c.closed:
                    return
                events = sock.getsockopt(zmq.EVENTS)  # (cheaper than the EAGAIN of one more read)
                if not events & zmq.POLLIN:
                    break
            else:  # a full batch: the rest at the loop's next turn (the descriptor will not say it again)
                self._loop.call_soon(self._readable, c)
                return
        except zmq.ZMQError:
            return  # closed
        if c.writers and events & zmq.POLLOUT:
            for fut in c.writers:
                if not fut.done():
                    fut.set_result(None)
            c.writers.clear()

    def _take(self, c: _Conn, frames: list[bytes]) -> None:
        """A message read on a connection: a samples message to its subscription's sinks, a reply to the
        request it answers.  One that cannot be handed on is dropped and counted."""
        try:
            if len(frames) >= 3 and frames[0] == b"" and frames[1] == SAMPLES_TOPIC:  # (a reply's frame is JSON)
                self._sample(c, frames)  # pushed by the daemon (subscribe): not a reply
            else:
                c.stalled_since_s = None
                self._dispatch(c, frames)
        except Exception:  # never: both sort bad input themselves; the next message is read all the same
            self.bad_replies += 1
            log.exception("%s: a message could not be handed on", c.endpoint)

    async def _send(self, c: _Conn, frames: list[bytes]) -> None:
        """Send a message on a connection, waiting while it takes none (not connected: ``IMMEDIATE``;
        woken by :meth:`_readable`, or by the hand-spoken connection when it is up).  Raises
        ``zmq.ZMQError`` or ``ConnectionError`` (the connection closed)."""
        z = c.zmtp
        if z is not None:
            while not z.send(frames):
                fut = self._loop.create_future()
                z.waiters.append(fut)
                await fut
            return
        while True:
            try:
                c.sock.send_multipart(frames, zmq.NOBLOCK)
                break
            except zmq.Again:
                fut = self._loop.create_future()
                c.writers.append(fut)
                self._loop.call_soon(self._readable, c)  # the failed send may have taken the descriptor's signal
                await fut
        # A send may have taken the socket's pending commands, and with them the descriptor's signal of a
        # message that arrived: look at the socket once more in this turn.
        self._loop.call_soon(self._readable, c)

    def _dispatch(self, c: _Conn, frames: list[bytes]) -> None:
        endpoint = c.endpoint
        err: BadReply | None = None
        rep: Any = None
        rid: Any = None
        if len(frames) != 2 or frames[0] != b"" or len(frames[1]) > self.max_reply_bytes:
            size = sum(len(f) for f in frames)
            err = BadReply(f"{endpoint} sent a reply of {max(0, len(frames) - 1)} frame(s), {size} bytes "
                           f"(one frame of at most {self.max_reply_bytes} bytes expected)")
        else:
            try:
                rep = strict_json(frames[1])
            except (ValueError, UnicodeDecodeError) as e:
                err = BadReply(f"{endpoint} sent a reply that is not strict JSON: {str(e)[:200]}")
            else:
                rid = rep.get("id") if isinstance(rep, dict) else None
        if err is None and type(rid) is int:
            fut = c.pending.pop(rid, None)
            if fut is not None:
                # Requests before it past their deadline will get no reply (a REP answers in order).
                while c.order and c.order[0] != rid and c.order[0] not in c.pending:
                    c.order.pop(0)
                if c.order and c.order[0] == rid:
                    c.order.pop(0)
                else:
                    try:
                        c.order.remove(rid)
                    except ValueError:
                        pass
                try:
                    result: Any = _check_reply(endpoint, rep)
                except (BadReply, DaemonRefused) as e:
                    result = e
                    if isinstance(e, BadReply):
                        self.bad_replies += 1
                if not fut.done():
                    fut.set_result(result)
                return
            if rid in c.order:  # its request's deadline passed: dropped
                c.order.remove(rid)
                self.late_replies += 1
                log.debug("%s: reply to request %d came after its deadline: dropped", endpoint, rid)
                return
        if err is None:
            err = BadReply(f"{endpoint} sent a reply whose id {str(rid)[:40]!r} answers no request sent")
        self.bad_replies += 1
        # A REP socket answers in order: this reply stands in the place of the oldest request unanswered.
        if c.order:
            fut = c.pending.pop(c.order.pop(0), None)
            if fut is not None and not fut.done():
                fut.set_result(err)

    # ------------------------------------------------------------------------- exchanges
    async def _exchange(self, router: str, endpoint: str, server_key: str | None, requests: list[dict[str, Any]],
                        callback: Callback, timeout_s: float | None = None) -> None:
        import asyncio

        results: list[Any] = []
        try:
            async with self._sem:
                self.in_flight += 1
                try:
                    results = await self._talk(endpoint, server_key, requests, timeout_s)
                finally:
                    self.in_flight -= 1
        except LinkDown as e:
            results = results or []
            results += [e] * (len(requests) - len(results))
        except asyncio.CancelledError:
            return
        try:
            callback(router, results)
        except BaseException:  # the callback's owner records its own failures
            log.exception("link callback failed")

    async def _talk(self, endpoint: str, server_key: str | None, requests: list[dict[str, Any]],
                    timeout_s: float | None = None) -> list[Any]:
        import asyncio

        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        loop = self._loop
        deadline = loop.time() + timeout_s
        c = self._conn(endpoint, server_key)
        c.last_used_s = loop.time()
        results: list[Any] = []
        sent: list[tuple[int, Any]] = []
        try:
            async with asyncio.timeout_at(deadline):  # one deadline for every send and reply
                for doc in requests:
                    self._seq += 1
                    rid = self._seq
                    fut = loop.create_future()
                    c.pending[rid] = fut
                    sent.append((rid, fut))
                    # Remembered as sent before it is: a send cut short by the deadline may have gone
                    # out all the same, and its reply must then be known as late, not as foreign.
                    c.order.append(rid)
                    if len(c.order) > MAX_UNANSWERED:
                        c.order.pop(0)
                    # Waits while the connection is not up (IMMEDIATE): nothing is queued for later.
                    await self._send(c, [b"", json.dumps({"v": API_VERSION, **doc, "id": rid}).encode()])
                    if c.stalled_since_s is None:
                        c.stalled_since_s = loop.time()
                for _, fut in sent:
                    res = await fut
                    results.append(res)
                    if isinstance(res, BadReply):
                        break
        except asyncio.TimeoutError:
            err = LinkDown(f"no answer from {endpoint} within {int(timeout_s * 1000)} ms")
            results += [err] * (len(requests) - len(results))
            stalled = c.stalled_since_s
            if stalled is not None and loop.time() - stalled >= self.stall_s and not c.closed:
                # Not one reply on the connection for stall_s while requests were waiting: the daemon
                # is hung or the connection half dead.  Drop what is queued toward it, connect again.
                self.resets += 1
                log.info("%s: no reply for %.1f s: connecting again", endpoint, loop.time() - stalled)
                self._drop(c)
        except (zmq.ZMQError, ConnectionError) as e:
            err = LinkDown(f"{endpoint}: {e}")
            results += [err] * (len(requests) - len(results))
        finally:
            for rid, fut in sent:  # unanswered: a reply that still comes is dropped as late
                c.pending.pop(rid, None)
                if not fut.done():
                    fut.cancel()
        if results and isinstance(results[-1], BadReply):
            results += [results[-1]] * (len(requests) - len(results))
        return results

    def close(self) -> None:
        """Stop the I/O thread (exchanges in flight get no callback) and close the sockets.  Closing
        again does nothing."""
        import asyncio

        with self._start_lock:
            if self._closed:
                return
            self._closed = True
            loop = self._loop
        if loop is None:
            if self._own_ctx:
                self.ctx.term()
            return

        async def _cancel() -> None:
            for c in list(self._conns.values()):
                if c.zmtp is not None:  # closed on the loop, so that their sockets close with it
                    c.closed = True
                    c.zmtp.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()
            await asyncio.sleep(0)

        try:
            asyncio.run_coroutine_threadsafe(_cancel(), loop).result(5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        # Close every kept connection with no linger (terminating the context would wait for an
        # open socket for ever).
        for c in list(self._conns.values()):
            c.closed = True
            if c.zmtp is not None:
                c.zmtp.close()  # (its transport is the loop's: gone with it)
            else:
                c.sock.close(0)
        self._conns.clear()
        if self._udp is not None:
            self._udp.close()
        if self._own_ctx:
            self.ctx.destroy(0)
        if self._thread is None or not self._thread.is_alive():
            loop.close()  # its selector and self-pipe now, not at garbage collection


def _bind_udp(addr: tuple[str, int]) -> tuple[socket.socket, str]:
    """The samples' UDP socket bound to ``(IP address, port)`` (port 0: a free one), non-blocking, and the
    address the daemons are told (``ADDRESS:PORT`` with the port bound, an IPv6 address in brackets).
    Raises ``OSError`` if it cannot be bound."""
    s = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RCVBUF_BYTES)
        s.bind(addr)
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    port = s.getsockname()[1]
    return s, (f"[{addr[0]}]:{port}" if ":" in addr[0] else f"{addr[0]}:{port}")


#: A VR name the policer stores: what its API's paths can address (the daemon's limit of
#: :data:`xtc.daemon.api.MAX_VR_NAME` characters, and only characters safe in a URL path and a log).
VR_PATTERN = r"^[A-Za-z0-9_.:-]{1,%d}$" % MAX_VR_NAME
VR_NAME_PATTERN = re.compile(VR_PATTERN)


def parse_vr_list(result: dict[str, Any], max_vrs: int) -> list[dict[str, Any]]:
    """The VRs of a daemon's ``list`` result, each validated with the daemon's published
    :class:`xtc.daemon.api.Instance` model; raises :class:`BadReply` naming the first problem
    (never echoing more than a short prefix of the input).

    Parameters
    ----------
    result : dict
        The reply's ``result``.
    max_vrs : int
        Most VRs accepted from one router; a longer list is refused whole.
    """
    vrs = result.get("vrs")
    if not isinstance(vrs, list):
        raise BadReply("the 'list' reply has no 'vrs' array")
    if len(vrs) > max_vrs:
        raise BadReply(f"the 'list' reply has {len(vrs)} VRs, more than the {max_vrs} accepted per router")
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, v in enumerate(vrs):
        try:
            inst = Instance.model_validate(v)
        except ValidationError as e:
            raise BadReply(f"vrs[{i}]: {_first_error(e)}") from None
        if not VR_NAME_PATTERN.fullmatch(inst.vr):
            raise BadReply(f"vrs[{i}]: VR name {inst.vr[:64]!r} does not match {VR_PATTERN}")
        if inst.vr in names:
            raise BadReply(f"vrs[{i}]: VR {inst.vr!r} listed twice")
        names.add(inst.vr)
        for k in ("setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent"):
            x = getattr(inst, k)
            if x is not None and not math.isfinite(x):
                raise BadReply(f"vrs[{i}].{k}: not a finite number")
        out.append({"vr": inst.vr, "state": inst.state, "present": True if inst.present is None else inst.present,
                    "setpoint_pps": inst.setpoint_pps, "forwarded_pps": inst.forwarded_pps,
                    "offered_pps": inst.offered_pps, "cap_percent": inst.cap_percent, "saturated": inst.saturated})
    return out
