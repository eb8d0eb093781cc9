"""The policer's side of the ZeroMQ link to the host daemons: the only module that talks to them.

One :class:`DaemonLink` per router: a REQ socket (CURVE client when the router has a server key and
the policer a key pair), replaced after a timeout so that a daemon that comes back is found again.
A daemon's reply is untrusted input: its size is bounded on the socket (``MAXMSGSIZE``: a bigger
frame drops the connection, seen here as no answer) and as a whole message (one frame of at most
``max_reply_bytes``), it must be strict JSON (no NaN, no Infinity, no duplicate keys, bounded
nesting) and a manager-API reply (:class:`xtc.daemon.api.OkReply` or
:class:`~xtc.daemon.api.ErrorReply`).  Errors are sorted here: :class:`LinkDown` (no answer,
transport failure) and :class:`BadReply` (an answer that is not a valid reply) mark the router
unreachable; :class:`DaemonRefused` (the daemon answered ``ok: false``) is a refused command.
"""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path
from typing import Any

import zmq
from pydantic import ValidationError

from xtc.daemon.api import API_VERSION, MAX_VR_NAME, ErrorReply, Instance, OkReply

__all__ = ["LinkDown", "BadReply", "DaemonRefused", "DaemonLink", "LinkPool", "DEFAULT_MAX_REPLY_BYTES",
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k[:64]!r}")
            seen.add(k)
    return d


def _finite(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise ValueError(f"number {text[:32]} is out of range")
    return f


def strict_json(data: bytes | str) -> Any:
    """Parse JSON strictly: no NaN/Infinity, no number that overflows a float, no duplicate keys.

    Raises ValueError (also for nesting too deep to parse)."""
    try:
        return json.loads(data, parse_constant=_no_constant, object_pairs_hook=_no_duplicates, parse_float=_finite)
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
            s = self.ctx.socket(zmq.REQ)
            try:
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
                s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
                s.setsockopt(zmq.MAXMSGSIZE, self.max_reply_bytes)  # per frame, checked while receiving
                s.setsockopt(zmq.RCVHWM, 4)
                if self.server_key:
                    from xtc.daemon.curve import client_options

                    client_options(s, self.curve_secret_file, self.server_key)  # type: ignore[arg-type]
                s.connect(self.endpoint)
            except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
                s.close(0)
                raise LinkDown(f"cannot connect to {self.endpoint}: {e}") from None
            self._sock = s
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
        try:
            rep = strict_json(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadReply(f"{self.endpoint} sent a reply that is not strict JSON: {str(e)[:200]}") from None
        try:
            if isinstance(rep, dict) and rep.get("ok") is False:
                err = ErrorReply.model_validate(rep).error
                raise DaemonRefused(err.code, err.message[:1000])
            return OkReply.model_validate(rep).result
        except ValidationError as e:
            raise BadReply(f"{self.endpoint} sent a reply that is not a manager-API reply: {_first_error(e)}") from None


def _first_error(e: ValidationError) -> str:
    """A short description of a validation error that never includes the input."""
    err = e.errors(include_input=False, include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"])[:200]
    return f"{loc or '<reply>'}: {err['msg'][:200]} ({e.error_count()} problem(s))"


class LinkPool:
    """One :class:`DaemonLink` per router, rebuilt when its endpoint or keys change."""

    def __init__(self, timeout_s: float, curve_secret_file: str | Path | None = None,
                 context: zmq.Context | None = None, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES):
        self.timeout_s = timeout_s
        self.curve_secret_file = curve_secret_file
        self.max_reply_bytes = max_reply_bytes
        self.ctx = context or zmq.Context.instance()
        self._links: dict[str, DaemonLink] = {}
        self._lock = threading.Lock()

    def get(self, router: str, endpoint: str, server_key: str | None) -> DaemonLink:
        with self._lock:
            link = self._links.get(router)
            if link is None or link.endpoint != endpoint or link.server_key != server_key:
                if link is not None:
                    link.close()
                link = DaemonLink(endpoint, self.timeout_s, self.curve_secret_file, server_key, self.ctx,
                                  self.max_reply_bytes)
                self._links[router] = link
            return link

    def close(self) -> None:
        with self._lock:
            for link in self._links.values():
                link.close()
            self._links.clear()


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
                    "offered_pps": inst.offered_pps, "cap_percent": inst.cap_percent})
    return out
