"""``xtc ctl``: a client of a running daemon's manager API (ZeroMQ REQ), and a sample watcher.

:class:`ManagerClient` is also what the policer and the tests use::

    with ManagerClient("ipc:///run/xtc/manager.sock") as c:
        c.call("activate", vr="vr1", setpoint_pps=20000)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import zmq

from xtc.service.curve import client_options

from .api import API_VERSION, SAMPLES_TOPIC, decode_samples

__all__ = ["ManagerClient", "ManagerError", "open_client", "format_table"]


def open_client(ctx: zmq.Context, endpoint: str, timeout_ms: int | None, curve_secret_file: str | Path | None,
                server_key: str | None, options: dict[int, int | bytes] | None = None,
                kind: int = zmq.REQ) -> zmq.Socket:
    """A socket connected to a daemon's endpoint, as every client of the daemon opens it: a REQ
    socket for the manager API by default, a DEALER or SUB socket with ``kind``.

    No linger, ``timeout_ms`` for sends and receives (None: no timeout, for sockets that are polled),
    the extra socket ``options`` (``zmq`` option -> value, set in that order before connecting),
    CURVE client keys when the daemon has a server key.  On failure nothing stays open
    (a socket made is closed) and the error is raised: also when no socket can be made at all (the
    context's socket limit, or the process's open files: ``EMFILE``), which is an error of this one
    connection, never of the caller's process.

    Parameters
    ----------
    ctx : zmq.Context
        Where the socket is made (a ``zmq.asyncio.Context`` makes an asyncio socket).
    endpoint : str
        The daemon's manager endpoint.
    timeout_ms : int or None
        Send and receive timeout, milliseconds (None: none).
    curve_secret_file : path or None
        The client's ``.key_secret`` file (used when ``server_key`` is set).
    server_key : str or None
        The daemon's CURVE public key (Z85), or None for a plain connection.
    options : dict, optional
        More socket options to set before connecting.
    kind : int
        The socket type (``zmq.REQ``, ``zmq.DEALER``, ``zmq.SUB``).

    Raises
    ------
    zmq.ZMQError, ValueError
        The socket could not be made, set up or connected (:class:`xtc.service.curve.CurveError` is a
        ValueError).
    """
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        if timeout_ms is not None:
            sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
            sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        for option, value in (options or {}).items():
            sock.setsockopt(option, value)
        if server_key:
            client_options(sock, curve_secret_file, server_key)  # type: ignore[arg-type]
        sock.connect(endpoint)
    except (zmq.ZMQError, ValueError):
        sock.close(0)
        raise
    return sock


class ManagerError(RuntimeError):
    """The daemon refused a request (``code``) or did not answer in time (``code`` = "timeout")."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _missing_socket_hint(endpoint: str) -> str:
    """Why an ``ipc://`` endpoint may not answer: its socket file does not exist (ZeroMQ waits silently)."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@"):
        return ""
    path = Path(endpoint[len("ipc://"):])
    if path.exists():
        return ""
    return f" (no socket {path}: is the daemon running, and is this its manager.endpoint?)"


class ManagerClient:
    """Requests to one daemon.  A timed-out socket is replaced, so the client stays usable.

    With ``curve_secret_file`` (the client's ``.key_secret``) and ``server_key`` (the daemon's Z85
    public key) the socket is a CURVE client.  Transport failures raise :class:`ManagerError` with
    code ``"timeout"`` (no answer in time) or ``"transport"`` (cannot connect, bad keys, socket error).
    """

    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 5.0,
        context: zmq.Context | None = None,
        curve_secret_file: str | Path | None = None,
        server_key: str | None = None,
    ):
        self.endpoint = endpoint
        self.timeout_ms = max(1, int(timeout_s * 1000))
        self.ctx = context or zmq.Context.instance()
        self.curve_secret_file = curve_secret_file
        self.server_key = server_key
        self._sock: zmq.Socket | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            if self.server_key and not self.curve_secret_file:
                raise ManagerError("transport", "the daemon has a CURVE server key but this client has no client key pair")
            try:
                self._sock = open_client(self.ctx, self.endpoint, self.timeout_ms, self.curve_secret_file,
                                         self.server_key)
            except (zmq.ZMQError, ValueError) as e:  # CurveError is a ValueError
                raise ManagerError("transport", f"cannot connect to {self.endpoint}: {e}") from None
        return self._sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> "ManagerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send_raw(self, data: bytes | list[bytes]) -> dict[str, Any]:
        """Send raw frames and return the decoded reply (raises ManagerError on timeout)."""
        s = self._socket()
        try:
            if isinstance(data, list):
                s.send_multipart(data)
            else:
                s.send(data)
            reply = s.recv()
        except zmq.Again:
            self.close()
            raise ManagerError("timeout", f"no answer from {self.endpoint} within {self.timeout_ms} ms"
                                          f"{_missing_socket_hint(self.endpoint)}") from None
        except zmq.ZMQError as e:
            self.close()
            raise ManagerError("transport", f"{self.endpoint}: {e}") from None
        return json.loads(reply)

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send a request; returns the whole reply (``ok`` true or false)."""
        doc = {"v": API_VERSION, "cmd": cmd, **fields}
        return self.send_raw(json.dumps(doc).encode())

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send a request; returns ``result`` or raises :class:`ManagerError`."""
        rep = self.request(cmd, **fields)
        if not rep.get("ok"):
            err = rep.get("error") or {}
            raise ManagerError(str(err.get("code")), str(err.get("message")))
        return rep["result"]


def watch_samples(pub_endpoint: str, vr: str | None = None, context: zmq.Context | None = None,
                  timeout_s: float | None = None, curve_secret_file: str | Path | None = None,
                  server_key: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield published samples (all VRs, or one), one per VR and period, until the timeout passes without one.

    The daemon publishes one ``samples`` message per period (:func:`xtc.daemon.api.decode_samples`);
    each VR's sample is yielded as a :class:`xtc.daemon.api.Sample` object.  With ``server_key``
    (and the client's ``curve_secret_file``) the subscription is a CURVE client, as
    :func:`open_client` makes it.
    """
    ctx = context or zmq.Context.instance()
    s = open_client(ctx, pub_endpoint, None, curve_secret_file, server_key,
                    options={zmq.SUBSCRIBE: SAMPLES_TOPIC}, kind=zmq.SUB)
    if timeout_s is not None:
        s.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    try:
        while True:
            try:
                topic, body = s.recv_multipart()
            except zmq.Again:
                return
            if topic != SAMPLES_TOPIC:
                continue
            for sample in decode_samples(body):
                if vr is None or sample["vr"] == vr:
                    yield sample
    finally:
        s.close(0)


def _fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v / scale:.{digits}f}"


def _early(ed: Any) -> str:
    """Early drop's column: the limit in place (kp/s), ``on`` (no limit now), ``-`` (off)."""
    if not isinstance(ed, dict) or not ed.get("on"):
        return "-"
    return "on" if ed.get("limit_pps") is None else _fmt(ed["limit_pps"], 1000)


def format_table(vrs: list[dict[str, Any]]) -> str:
    """The status table of ``xtc ctl status`` (rates in kp/s, caps in percent; EARLY: early drop's
    limit in place, ``on`` without one now, ``-`` off)."""
    head = (f"{'VR':<16} {'STATE':<9} {'SETPOINT':>9} {'FORWARDED':>9} {'OFFERED':>9} {'CAP%':>7} {'ORIG%':>7} "
            f"{'EARLY':>7}  NOTE")
    rows = [head, f"{'':<16} {'':<9} {'kp/s':>9} {'kp/s':>9} {'kp/s':>9} {'':>7} {'':>7} {'kp/s':>7}"]
    for v in vrs:
        orig = v.get("original_cap_percent")
        pending = v.get("restore_pending") is True
        orig_s = _fmt(orig) if orig is not None else ("unl." if v["state"] != "inactive" or pending else "-")
        note = []
        if pending:
            note.append("original cap to restore (restore pending, not controlled)")
        off = v.get("vr_off")
        if isinstance(off, dict):  # turned off by this daemon (vr_off): why; 'xtc ctl vr-on' brings it back
            note.append(f"turned off: {off.get('reason')}")
        elif not v.get("present", True):
            note.append("VR missing")
        sat = v.get("saturated")
        if sat == "cap_slack":
            note.append(f"below setpoint with cap {_fmt(v.get('cap_percent'), 1, 0)}% not used up (traffic- or host-limited)")
        elif sat:
            side = "below" if sat == "cap_max" else "above"
            note.append(f"saturated at cap {_fmt(v.get('cap_percent'), 1, 0)}% ({side} setpoint)")
        if v.get("lag_measured"):
            note.append(f"lag {v['lag']:.2f} measured")
        if v.get("actuation_error"):
            note.append(f"actuation: {v['actuation_error']}")
        rows.append(
            f"{v['vr']:<16} {v['state']:<9} {_fmt(v.get('setpoint_pps'), 1000):>9} {_fmt(v.get('forwarded_pps', v.get('measured_pps')), 1000):>9} "
            f"{_fmt(v.get('offered_pps'), 1000):>9} {_fmt(v.get('cap_percent')):>7} {orig_s:>7} "
            f"{_early(v.get('early_drop')):>7}  {'; '.join(note)}"
        )
    return "\n".join(rows)
