"""The policer's side of the ZeroMQ link to the host daemons: the only module that talks to them.

The engine's link is :class:`LinkPool`: every exchange with every daemon in flight at once over one
event loop (one poller), each on a DEALER socket opened for it and closed at its end or deadline
(CURVE client when the router has a server key and the policer a key pair), so that no socket is
held per router and silent daemons delay no other.  :class:`DaemonLink` is one blocking REQ client
(tools and tests).
A daemon's reply is untrusted input: its size is bounded on the socket (``MAXMSGSIZE``: a bigger
frame drops the connection, seen here as no answer) and as a whole message (one frame of at most
``max_reply_bytes``), it must be strict JSON (no NaN, no Infinity, no duplicate keys, bounded
nesting) and a manager-API reply (:class:`xtc.daemon.api.OkReply` or
:class:`~xtc.daemon.api.ErrorReply`).  Errors are sorted here: :class:`LinkDown` (no answer,
transport failure) and :class:`BadReply` (an answer that is not a valid reply) mark the router
unreachable; :class:`DaemonRefused` (the daemon answered ``ok: false``) is a refused command.
"""

from __future__ import annotations

import errno

import json
import logging
import math
import re
import threading
from pathlib import Path
from typing import Any, Callable

import zmq
from pydantic import ValidationError

from xtc.daemon.api import (API_VERSION, MAX_VR_NAME, ErrorReply, Instance, OkReply, reject_json_constant,
                            unique_json_keys)
from xtc.daemon.ctl import open_client

log = logging.getLogger("xtc.policer.link")

__all__ = ["LinkDown", "parse_reply", "raise_open_files_limit", "BadReply", "DaemonRefused", "DaemonLink", "LinkPool", "DEFAULT_MAX_REPLY_BYTES",
           "strict_json", "parse_vr_list", "VR_PATTERN"]

DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024


class LinkDown(Exception):
    """The daemon did not answer (or not sensibly)."""


class BadReply(LinkDown):
    """The daemon answered with something that is not a valid manager-API reply (too big, not strict
    JSON, wrong schema).  Counted separately: a daemon that does this is misbehaving."""


class DaemonRefused(Exception):
    """The daemon answered with an error (``code`` from the manager API)."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


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


class LinkPool:
    """Every request to every daemon, in flight concurrently over one event loop (one poller).

    :meth:`exchange` sends a list of requests to one router's daemon on a DEALER socket of its own,
    opened for that exchange and closed when the replies are in or at the exchange's deadline
    (``timeout_s`` after it was sent): no socket is kept per router, and a daemon that does not
    answer holds up only its own exchange, whatever the number of silent ones.  At most
    ``max_in_flight`` exchanges are open at once (the others wait their turn, their deadline
    starting when they are sent); the ZeroMQ context's ``MAX_SOCKETS`` and the process's open-files
    limit are raised to match, and a socket that still cannot be opened (EMFILE) is an error of
    that router (:class:`LinkDown`), never of the process.  Each reply is checked as
    :class:`DaemonLink` does (one frame of at most ``max_reply_bytes``, strict JSON, a manager-API
    reply).

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
        Most exchanges open at once (default: what a third of the open-files limit allows, at most 8192).
    """

    def __init__(self, timeout_s: float, curve_secret_file: str | Path | None = None,
                 context: zmq.Context | None = None, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
                 max_in_flight: int | None = None):
        self.timeout_s = timeout_s
        self.curve_secret_file = curve_secret_file
        self.max_reply_bytes = max_reply_bytes
        nofile = raise_open_files_limit()
        self.max_in_flight = max_in_flight or max(16, min(8192, (nofile - 512) // 3))
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        try:
            self.ctx.set(zmq.MAX_SOCKETS, max(self.ctx.get(zmq.MAX_SOCKETS), self.max_in_flight + 64))
        except zmq.ZMQError:
            pass
        #: Sockets that could not be opened (EMFILE and the like) since the start.
        self.socket_errors = 0
        self.in_flight = 0
        self._seq = 0
        self._loop: Any = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        #: The DEALER sockets open now (made on the I/O thread's shadow context, which the
        #: context's own ``destroy`` does not see): closed by :meth:`close` whatever is in flight.
        self._sockets: set[Any] = set()
        self._tasks: set[Any] = set()

    # ------------------------------------------------------------------------- the I/O thread
    def _ensure_loop(self) -> Any:
        import asyncio

        with self._start_lock:
            if self._closed:
                raise RuntimeError("the link pool is closed")
            if self._loop is None:
                import zmq.asyncio

                self._actx = zmq.asyncio.Context.shadow(self.ctx)
                self._loop = asyncio.new_event_loop()
                self._sem = asyncio.Semaphore(self.max_in_flight)
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(self._loop)
                    self._loop.call_soon(ready.set)
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

    def _open(self, endpoint: str, server_key: str | None) -> Any:
        if server_key and not self.curve_secret_file:
            raise LinkDown("the daemon has a CURVE server key but the policer has no client key pair")
        try:
            s = open_client(self._actx, endpoint, None, self.curve_secret_file, server_key,
                            {zmq.MAXMSGSIZE: self.max_reply_bytes, zmq.RCVHWM: 64}, kind=zmq.DEALER)
        except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
            if isinstance(e, zmq.ZMQError) and e.errno == errno.EMFILE:
                self.socket_errors += 1  # too many sockets: this router's error, never the process's
            raise LinkDown(f"cannot connect to {endpoint}: {e}") from None
        self._sockets.add(s)
        return s

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
        s = self._open(endpoint, server_key)
        results: list[Any] = []
        deadline = self._loop.time() + timeout_s
        try:
            for doc in requests:
                self._seq += 1
                await s.send_multipart([b"", json.dumps({"v": API_VERSION, "id": self._seq, **doc}).encode()])
            async with asyncio.timeout_at(deadline):  # one deadline for every reply (no task per receive)
                while len(results) < len(requests):
                    frames = await s.recv_multipart(copy=True)
                    if len(frames) != 2 or frames[0] != b"" or len(frames[1]) > self.max_reply_bytes:
                        size = sum(len(f) for f in frames)
                        raise BadReply(f"{endpoint} sent a reply of {max(0, len(frames) - 1)} frame(s), {size} bytes "
                                       f"(one frame of at most {self.max_reply_bytes} bytes expected)")
                    try:
                        results.append(parse_reply(endpoint, frames[1]))
                    except (BadReply, DaemonRefused) as e:
                        results.append(e)
                        if isinstance(e, BadReply):
                            break
        except asyncio.TimeoutError:
            err = LinkDown(f"no answer from {endpoint} within {int(timeout_s * 1000)} ms")
            return results + [err] * (len(requests) - len(results))
        except BadReply as e:
            return results + [e] * (len(requests) - len(results))
        except zmq.ZMQError as e:
            err = LinkDown(f"{endpoint}: {e}")
            return results + [err] * (len(requests) - len(results))
        finally:
            s.close(0)
            self._sockets.discard(s)
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
        # An exchange submitted while closing (or one whose cancellation did not run before the
        # loop stopped) leaves its socket open, and terminating the context would wait for it
        # for ever: close what is left, with no linger.
        for sock in list(self._sockets):
            sock.close(0)
        self._sockets.clear()
        if self._own_ctx:
            self.ctx.destroy(0)


#: A VR name the policer stores: what its API's paths can address (the daemon's limit of
#: :data:`xtc.daemon.api.MAX_VR_NAME` characters, and only characters safe in a URL path and a log).
VR_PATTERN = r"^[A-Za-z0-9_.:-]{1,%d}$" % MAX_VR_NAME
_VR_NAME = re.compile(VR_PATTERN)


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
        if not _VR_NAME.fullmatch(inst.vr):
            raise BadReply(f"vrs[{i}]: VR name {inst.vr[:64]!r} does not match {VR_PATTERN}")
        if inst.vr in names:
            raise BadReply(f"vrs[{i}]: VR {inst.vr!r} listed twice")
        names.add(inst.vr)
        for k in ("setpoint_pps", "measured_pps", "offered_pps", "cap_percent"):
            x = getattr(inst, k)
            if x is not None and not math.isfinite(x):
                raise BadReply(f"vrs[{i}].{k}: not a finite number")
        out.append({"vr": inst.vr, "state": inst.state, "present": True if inst.present is None else inst.present,
                    "setpoint_pps": inst.setpoint_pps, "measured_pps": inst.measured_pps,
                    "offered_pps": inst.offered_pps, "cap_percent": inst.cap_percent, "saturated": inst.saturated})
    return out
