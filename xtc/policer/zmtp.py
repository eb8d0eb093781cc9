"""ZMTP 3.1 spoken by hand as a DEALER client, with the NULL or the CURVE mechanism: the policer's side of a
daemon link without libzmq (issue 50, docs/design/zmtp-link.md).

libzmq holds 68-91 KiB a connection once it has carried traffic (its pipes' chunks and its engine's
buffers), about 330 MB of an engine's 660 at 5,000 routers; a connection spoken here holds 6.5-9.6 KiB
(docs/results/2026-11-29-policer-zmtp-link).  The daemon's side stays libzmq: this speaks to its
ROUTER socket exactly as a libzmq DEALER does.

:class:`ZmtpClient` is the protocol alone (sans-I/O): bytes from the peer in (:meth:`ZmtpClient.receive`,
which returns the whole messages they completed), bytes for the peer out (:attr:`ZmtpClient.out`).  It reads
no socket and no clock; the link pool owns the socket, the timers and the reconnection.

What it follows:

- RFC 23/ZMTP (3.0): the greeting, frames, commands, READY's metadata.  The greeting is sent at once; the
  first command (READY, or CURVE's HELLO) only after the peer's whole greeting came: libzmq 4.3.5 drops a
  connection whose command arrives with the greeting (seen: 16-84 of 100).
- RFC 37/ZMTP 3.1: PING and PONG.  A peer's PING is answered; :meth:`ZmtpClient.ping` asks.
- RFC 26/CurveZMQ: HELLO, WELCOME, INITIATE with its vouch, READY, then every frame a MESSAGE box whose
  first byte carries the MORE and COMMAND flags; short nonces count up from 1 and a peer's must grow
  (a replayed or reordered box is refused).  The cryptography is libsodium's ``crypto_box`` (PyNaCl).

Bounds: one frame at most ``max_frame_bytes`` and one message at most ``max_message_bytes``, checked on the
frame's header before its body is kept (a peer that announces more is refused, and nothing of it is
buffered: libzmq bounds a frame, ``ZMQ_MAXMSGSIZE``, but keeps a message's frames until its last one).
Any breach of the protocol raises :class:`ZmtpError`; the connection is then useless and is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nacl.bindings import (crypto_box, crypto_box_afternm, crypto_box_beforenm, crypto_box_keypair, crypto_box_open,
                           crypto_box_open_afternm)
from nacl.exceptions import CryptoError
from zmq.utils import z85

from xtc.service.curve import CurveError, client_keys

__all__ = [
    "GREETING_BYTES",
    "SIGNATURE_BYTES",
    "CurveKeys",
    "ZmtpClient",
    "ZmtpConnection",
    "ZmtpError",
    "curve_keys",
    "parse_metadata",
]

log = logging.getLogger("xtc.policer.zmtp")

#: The greeting's first ten bytes, and the whole greeting's length (RFC 23).
SIGNATURE_BYTES = 10
GREETING_BYTES = 64
_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04
#: CURVE's plaintext flags (RFC 26, and libzmq's msg_t flags): MORE and COMMAND.
_C_MORE, _C_COMMAND = 0x01, 0x02
_SHORT = struct.Struct(">Q")
_BOX_MAC = 16


class ZmtpError(Exception):
    """The peer broke the protocol, refused us, or exceeded a bound: the connection is to be closed."""


@dataclass(frozen=True)
class CurveKeys:
    """A CURVE client's long-term keys and its server's public key, 32 bytes each (not Z85)."""

    public: bytes
    secret: bytes
    server: bytes

    def __post_init__(self) -> None:
        for name in ("public", "secret", "server"):
            if len(getattr(self, name)) != 32:
                raise ValueError(f"CURVE {name} key must be 32 bytes, got {len(getattr(self, name))}")


def _greeting(mechanism: bytes) -> bytes:
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x01" + mechanism.ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _command(name: bytes, body: bytes = b"") -> bytes:
    return bytes([len(name)]) + name + body


def _frame(flags: int, body: bytes) -> bytes:
    n = len(body)
    if n < 256:
        return bytes([flags, n]) + body
    return bytes([flags | _LONG]) + _SHORT.pack(n) + body


def _reason(error_body: bytes) -> str:
    """The reason an ERROR command gives (RFC 23: its length, then its text)."""
    reason = error_body[1:1 + error_body[0]].decode(errors="replace") if error_body else ""
    return reason or "no reason given"


def _metadata(props: dict[bytes, bytes]) -> bytes:
    return b"".join(bytes([len(k)]) + k + struct.pack(">I", len(v)) + v for k, v in props.items())


def parse_metadata(data: bytes) -> dict[bytes, bytes]:
    """READY's properties (name -> value); ZmtpError when they do not parse."""
    out: dict[bytes, bytes] = {}
    i = 0
    while i < len(data):
        n = data[i]
        if i + 1 + n + 4 > len(data):
            raise ZmtpError("malformed metadata in READY")
        name = data[i + 1:i + 1 + n]
        (size,) = struct.unpack_from(">I", data, i + 1 + n)
        start = i + 5 + n
        if start + size > len(data):
            raise ZmtpError("malformed metadata in READY")
        out[name.lower()] = data[start:start + size]
        i = start + size
    return out


#: The socket types a DEALER may talk to (RFC 28).
_PEERS_OF_DEALER = {b"ROUTER", b"DEALER", b"REP"}


class ZmtpClient:
    """One connection's protocol state, as a DEALER client (sans-I/O).

    Parameters
    ----------
    curve : CurveKeys, optional
        The CURVE mechanism with these keys; None: the NULL mechanism.
    max_frame_bytes : int
        The largest frame taken from the peer (its body, after CURVE's box is opened).
    max_message_bytes : int
        The largest message (all its frames) taken from the peer.
    """

    __slots__ = ("_buf", "_cn_public", "_cn_secret", "_greeted", "_nonce", "_parts", "_parts_bytes", "_peer_nonce",
                 "_precom", "_welcomed", "curve", "max_frame_bytes", "max_message_bytes", "out", "peer_type",
                 "peer_ttl_s", "pings_answered", "pongs", "ready")

    def __init__(self, curve: CurveKeys | None = None, max_frame_bytes: int = 1 << 20,
                 max_message_bytes: int | None = None) -> None:
        self.curve = curve
        self.max_frame_bytes = max_frame_bytes
        self.max_message_bytes = max_message_bytes if max_message_bytes is not None else max_frame_bytes
        #: Bytes for the peer, in order; the caller writes them and empties it.
        self.out = bytearray(_greeting(b"CURVE" if curve else b"NULL"))
        #: True once the handshake is done (messages may be sent).
        self.ready = False
        #: The peer's socket type (its READY's ``Socket-Type``), once ready (its other properties are not kept:
        #: a few hundred bytes a connection).
        self.peer_type = b""
        #: PONGs received (each PING of ours answered), and PINGs answered.
        self.pongs = 0
        self.pings_answered = 0
        #: The TTL of the peer's last PING, seconds (0: none asked).
        self.peer_ttl_s = 0.0
        self._buf = bytearray()
        self._greeted = False
        self._parts: list[bytes] = []
        self._parts_bytes = 0
        if curve is not None:
            self._cn_public, self._cn_secret = crypto_box_keypair()
            self._nonce = 1  # ours: HELLO 1, INITIATE 2, then the MESSAGEs
            self._peer_nonce = 0
            self._precom = b""
            self._welcomed = False

    # -- out --------------------------------------------------------------------------------------------

    def send(self, frames: list[bytes]) -> None:
        """Queue one message (its frames) for the peer.  Only once :attr:`ready`."""
        if not self.ready:
            raise ZmtpError("not connected yet: the handshake is not done")
        last = len(frames) - 1
        out = self.out
        if self.curve is None:
            for i, f in enumerate(frames):
                out += _frame(_MORE if i < last else 0, f)
        else:
            for i, f in enumerate(frames):
                out += _frame(0, self._box(bytes([_C_MORE if i < last else 0]) + f))

    def ping(self, ttl_s: float, context: bytes = b"") -> None:
        """Queue a PING (RFC 37): the peer answers with PONG, and may close the connection when it hears
        nothing for ``ttl_s``."""
        ttl = max(0, min(0xFFFF, int(ttl_s * 10)))
        self._send_command(_command(b"PING", struct.pack(">H", ttl) + context[:16]))

    def _send_command(self, cmd: bytes) -> None:
        if self.curve is None:
            self.out += _frame(_COMMAND, cmd)
        else:
            self.out += _frame(0, self._box(bytes([_C_COMMAND]) + cmd))

    def _box(self, plaintext: bytes) -> bytes:
        short = _SHORT.pack(self._nonce)
        self._nonce += 1
        return b"\x07MESSAGE" + short + crypto_box_afternm(plaintext, b"CurveZMQMESSAGEC" + short, self._precom)

    # -- in ---------------------------------------------------------------------------------------------

    def receive(self, data: bytes) -> list[list[bytes]]:
        """Take bytes from the peer; returns the whole messages they completed (each its frames), in order.
        Raises :class:`ZmtpError` (and keeps nothing more) when the peer breaks the protocol."""
        if self._buf:  # the rest of the last read, and this one: parsed as one ``bytes`` (slices are frames)
            self._buf += data
            data = bytes(self._buf)
            self._buf.clear()
        pos, n = 0, len(data)
        if not self._greeted:
            if n >= 1 and data[0] != 0xFF or n >= SIGNATURE_BYTES and data[9] != 0x7F:
                raise ZmtpError("not a ZMTP peer (bad signature)")
            if n < GREETING_BYTES:
                self._buf += data
                return []
            self._check_greeting(data[:GREETING_BYTES])
            pos = GREETING_BYTES
            self._greeted = True
            self._first_command()
        messages: list[list[bytes]] = []
        bound = self.max_frame_bytes + (64 if self.curve else 0)
        plain = self.curve is None
        unpack = _SHORT.unpack_from
        while n - pos >= 2:
            flags = data[pos]
            if flags & _LONG:
                if n - pos < 9:
                    break
                size, at = unpack(data, pos + 1)[0], pos + 9
            else:
                size, at = data[pos + 1], pos + 2
            if size > bound:
                raise ZmtpError(f"frame of {size} bytes over the bound of {bound}")
            end = at + size
            if end > n:
                break
            pos = end
            if plain and self.ready and flags & ~(_MORE | _LONG) == 0:  # a message's frame (the usual case)
                self._part(data[at:end], flags & _MORE, messages)
                continue
            if flags & ~(_MORE | _LONG | _COMMAND):
                raise ZmtpError(f"frame with reserved flags {flags:#04x}")
            self._frame(flags, data[at:end], messages)
        if pos < n:
            self._buf += data[pos:] if pos else data
        return messages

    def _check_greeting(self, g: bytes) -> None:
        if g[10] < 3:
            raise ZmtpError(f"peer speaks ZMTP {g[10]}.{g[11]}: 3.0 or later needed")
        mechanism = g[12:32].rstrip(b"\x00")
        want = b"CURVE" if self.curve else b"NULL"
        if mechanism != want:
            raise ZmtpError(f"peer's mechanism is {mechanism.decode(errors='replace')}, not {want.decode()}")

    def _first_command(self) -> None:
        if self.curve is None:
            self.out += _frame(_COMMAND, _command(b"READY", _metadata({b"Socket-Type": b"DEALER"})))
            return
        short = _SHORT.pack(self._nonce)
        self._nonce += 1
        signature = crypto_box(b"\x00" * 64, b"CurveZMQHELLO---" + short, self.curve.server, self._cn_secret)
        self.out += _frame(_COMMAND, _command(b"HELLO", b"\x01\x00" + b"\x00" * 72 + self._cn_public + short
                                              + signature))

    def _frame(self, flags: int, body: bytes, messages: list[list[bytes]]) -> None:
        if not self.ready:
            if not flags & _COMMAND:
                raise ZmtpError("a message before the handshake's end")
            self._handshake(body)
            return
        if self.curve is not None:
            if flags & _MORE:
                raise ZmtpError("a CURVE frame with the MORE flag outside its box")
            plain = self._open(body)
            flags = (_MORE if plain[0] & _C_MORE else 0) | (_COMMAND if plain[0] & _C_COMMAND else 0)
            body = plain[1:]
            if len(body) > self.max_frame_bytes:
                raise ZmtpError(f"frame of {len(body)} bytes over the bound of {self.max_frame_bytes}")
        if flags & _COMMAND:
            self._traffic_command(body)
            return
        self._part(body, flags & _MORE, messages)

    def _part(self, body: bytes, more: int, messages: list[list[bytes]]) -> None:
        """A message's frame: added to the message under way (bounded), which is whole without ``more``."""
        self._parts_bytes += len(body)
        if self._parts_bytes > self.max_message_bytes:
            raise ZmtpError(f"message of more than {self.max_message_bytes} bytes")
        self._parts.append(body)
        if not more:
            messages.append(self._parts)
            self._parts, self._parts_bytes = [], 0

    def _name(self, body: bytes) -> tuple[bytes, bytes]:
        if not body or len(body) < 1 + body[0]:
            raise ZmtpError("malformed command")
        return body[1:1 + body[0]], body[1 + body[0]:]

    def _handshake(self, body: bytes) -> None:
        name, rest = self._name(body)
        if name == b"ERROR":
            raise ZmtpError(f"peer refused the handshake: {_reason(rest)}")
        if self.curve is None:
            if name != b"READY":
                raise ZmtpError(f"unexpected {name.decode(errors='replace')} in the NULL handshake")
            self._peer_ready(rest)
        elif name == b"WELCOME" and not self._welcomed:
            self._welcome(rest)
        elif name == b"READY" and self._welcomed:
            self._curve_ready(rest)
        else:
            raise ZmtpError(f"unexpected {name.decode(errors='replace')} in the CURVE handshake")

    def _peer_ready(self, metadata: bytes) -> None:
        props = parse_metadata(metadata)
        kind = props.get(b"socket-type", b"")
        if kind not in _PEERS_OF_DEALER:
            raise ZmtpError(f"peer is a {kind.decode(errors='replace') or 'socket of no type'}: a DEALER "
                            f"talks to ROUTER, DEALER or REP")
        self.peer_type = kind
        self.ready = True

    def _welcome(self, rest: bytes) -> None:
        if len(rest) != 160:
            raise ZmtpError(f"WELCOME of {len(rest) + 8} bytes, not 168")
        try:
            plain = crypto_box_open(rest[16:], b"WELCOME-" + rest[:16], self.curve.server, self._cn_secret)
        except CryptoError:
            raise ZmtpError("WELCOME does not open with the server's key: not the daemon we know") from None
        server_short, cookie = plain[:32], plain[32:128]
        self._precom = crypto_box_beforenm(server_short, self._cn_secret)
        vouch_nonce = os.urandom(16)
        vouch = crypto_box(self._cn_public + self.curve.server, b"VOUCH---" + vouch_nonce, server_short,
                           self.curve.secret)
        meta = _metadata({b"Socket-Type": b"DEALER"})
        short = _SHORT.pack(self._nonce)
        self._nonce += 1
        box = crypto_box(self.curve.public + vouch_nonce + vouch + meta, b"CurveZMQINITIATE" + short,
                         server_short, self._cn_secret)
        self.out += _frame(_COMMAND, _command(b"INITIATE", cookie + short + box))
        self._welcomed = True

    def _curve_ready(self, rest: bytes) -> None:
        if len(rest) < 8 + _BOX_MAC:
            raise ZmtpError("READY too short")
        nonce = _SHORT.unpack_from(rest)[0]
        try:
            meta = crypto_box_open_afternm(rest[8:], b"CurveZMQREADY---" + rest[:8], self._precom)
        except CryptoError:
            raise ZmtpError("READY does not open with the connection's keys") from None
        self._peer_nonce = nonce
        self._peer_ready(meta)

    def _open(self, body: bytes) -> bytes:
        if len(body) < 16 + _BOX_MAC + 1 or body[:8] != b"\x07MESSAGE":
            raise ZmtpError("not a CURVE MESSAGE")
        nonce = _SHORT.unpack_from(body, 8)[0]
        if nonce <= self._peer_nonce:
            raise ZmtpError(f"CURVE nonce {nonce} not above the last ({self._peer_nonce}): a replayed box")
        try:
            plain = crypto_box_open_afternm(body[16:], b"CurveZMQMESSAGES" + body[8:16], self._precom)
        except CryptoError:
            raise ZmtpError("a MESSAGE box does not open") from None
        self._peer_nonce = nonce
        if not plain:
            raise ZmtpError("an empty MESSAGE box")
        return plain

    def _traffic_command(self, body: bytes) -> None:
        name, rest = self._name(body)
        if name == b"PING":
            if len(rest) < 2:
                raise ZmtpError("malformed PING")
            self.peer_ttl_s = struct.unpack_from(">H", rest)[0] / 10.0
            self._send_command(_command(b"PONG", rest[2:18]))
            self.pings_answered += 1
        elif name == b"PONG":
            self.pongs += 1
        elif name == b"ERROR":
            raise ZmtpError(f"peer sent ERROR: {_reason(rest)}")
        # other commands (SUBSCRIBE, CANCEL...) mean nothing to a DEALER: skipped, as libzmq does


def curve_keys(client_secret_file: str | Path, server_key_z85: str | bytes) -> CurveKeys:
    """A CURVE client's keys from its ``.key_secret`` file and its server's Z85 public key, as the libzmq path
    takes them (:func:`~xtc.service.curve.client_keys`: :class:`~xtc.service.curve.CurveError` names a bad
    one), decoded."""
    pub, sec, key = client_keys(client_secret_file, server_key_z85)
    try:
        return CurveKeys(z85.decode(pub), z85.decode(sec), z85.decode(key))
    except (ValueError, KeyError) as e:
        raise CurveError(f"a CURVE key does not decode: {e}") from None


def _address(endpoint: str) -> tuple[str, str | int]:
    """``("ipc", path)`` or ``(host, port)`` of a ``ipc://PATH`` or ``tcp://HOST:PORT`` endpoint
    (``ipc://@NAME``: Linux's abstract socket NAME, as libzmq reads it)."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        return "ipc", "\0" + path[1:] if path.startswith("@") else path
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://"):].rpartition(":")
        if host and port.isdigit():
            return host.strip("[]"), int(port)
    raise ValueError(f"endpoint {endpoint!r} is neither tcp://HOST:PORT nor ipc://PATH")


class ZmtpConnection(asyncio.Protocol):
    """A kept DEALER connection to one endpoint on an asyncio loop, made again whenever it is lost.

    It connects at once, and again after a loss or a failed attempt, waiting 0.1 s doubled each time up to
    ``reconnect_max_s`` (back to 0.1 s once a connection stayed up ``heartbeat_s``: a peer that breaks the
    protocol right after each handshake is not connected to ten times a second); an attempt that has not
    finished its handshake in ``handshake_s`` is given up.  Heartbeats (RFC 37): a PING every ``heartbeat_s``
    in which the peer or this side was silent, and the connection cut (then made again) when the peer has been
    silent for three.

    :meth:`send` queues a message only while the handshake is done (nothing waits for a peer that is down,
    as libzmq's ``IMMEDIATE``); ``waiters`` (futures) are woken when the connection comes up or its buffer
    drains.  ``on_message(frames)`` gets each message, at most ``batch`` in one turn of the loop (a burst
    waits, its reading paused, for the next turns: a daemon that floods its connection delays the others'
    messages by a batch, not by its burst); ``on_up()`` each time a handshake completes.
    A protocol error (:class:`ZmtpError`) is counted in :attr:`errors`, logged, and the connection cut.
    """

    __slots__ = ("_attempt", "_backlog", "_closed", "_ivl_s", "_last_rx_s", "_last_tx_s", "_next", "_paused",
                 "_timer", "_up_s", "address", "batch", "client", "curve", "endpoint", "errors", "handshake_s",
                 "handshakes", "heartbeat_s", "last_error", "last_loss", "loop", "losses", "max_frame_bytes",
                 "on_message", "on_up", "reconnect_max_s", "transport", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop, endpoint: str, curve: CurveKeys | None,
                 on_message: Callable[[list[bytes]], None], on_up: Callable[[], None] | None = None,
                 max_frame_bytes: int = 1 << 20, heartbeat_s: float = 5.0, reconnect_max_s: float = 5.0,
                 handshake_s: float | None = None, batch: int = 64) -> None:
        self.loop = loop
        self.endpoint = endpoint
        self.address = _address(endpoint)
        self.curve = curve
        self.on_message = on_message
        self.on_up = on_up
        self.max_frame_bytes = max_frame_bytes
        self.heartbeat_s = heartbeat_s
        self.reconnect_max_s = reconnect_max_s
        self.handshake_s = handshake_s if handshake_s is not None else max(1.0, 3 * heartbeat_s)
        self.batch = batch
        #: Messages read and not handed on yet, and the next one's index (a burst: see :meth:`_hand_on`).
        self._backlog: list[list[bytes]] = []
        self._next = 0
        self.client: ZmtpClient | None = None
        self.transport: asyncio.Transport | None = None
        self.waiters: list[asyncio.Future[None]] = []
        #: Handshakes completed, protocol errors, and connections lost (or attempts failed) since the start.
        self.handshakes = 0
        self.errors = 0
        self.losses = 0
        #: The last protocol error, and why the connection was last lost (or an attempt failed).
        self.last_error = ""
        self.last_loss = ""
        self._paused = False
        self._closed = False
        self._ivl_s = 0.1
        self._up_s = 0.0
        self._last_rx_s = 0.0
        self._last_tx_s = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._attempt: asyncio.Task[None] | None = None
        self._connect()

    @property
    def ready(self) -> bool:
        """The handshake is done and the connection takes messages now."""
        c = self.client
        return c is not None and c.ready and not self._paused

    def send(self, frames: list[bytes]) -> bool:
        """Queue one message; False (nothing queued) while the connection is not :attr:`ready`."""
        c, t = self.client, self.transport
        if c is None or t is None or not self.ready:
            return False
        c.send(frames)
        t.write(bytes(c.out))
        c.out.clear()
        self._last_tx_s = self.loop.time()
        return True

    def close(self) -> None:
        """Close for good: no reconnection; waiters get ``ConnectionError``."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._attempt is not None:
            self._attempt.cancel()
        if self.transport is not None:
            self.transport.abort()
        self._wake(ConnectionError(f"{self.endpoint}: connection closed"))

    # -- connecting ---------------------------------------------------------------------------------------

    def _connect(self) -> None:
        self._timer = None
        if not self._closed:
            self._attempt = self.loop.create_task(self._open())

    async def _open(self) -> None:
        host, port = self.address
        try:
            async with asyncio.timeout(self.handshake_s):
                if host == "ipc":
                    await self.loop.create_unix_connection(lambda: self, str(port))
                else:
                    await self.loop.create_connection(lambda: self, host, port)
        except (OSError, TimeoutError) as e:
            if self.transport is None and not self._closed:  # (connected, then lost: already handled)
                self._lost(f"cannot connect: {e}")
            return
        finally:
            self._attempt = None

    def _lost(self, why: str) -> None:
        if self._closed:  # closed by its owner: not a loss
            return
        self.losses += 1
        self.last_loss = why
        if self._up_s and self.loop.time() - self._up_s >= self.heartbeat_s:
            self._ivl_s = 0.1  # it was up a while: the next attempt soon; one cut soon after its handshake backs off
        self._up_s = 0.0
        log.debug("%s: %s; again in %.1f s", self.endpoint, why, self._ivl_s)
        if self._timer is not None:
            self._timer.cancel()
        if not self._closed:
            self._timer = self.loop.call_later(self._ivl_s, self._connect)
            self._ivl_s = min(2 * self._ivl_s, self.reconnect_max_s)

    def _check(self) -> None:
        """The heartbeat's timer (and the handshake's deadline)."""
        self._timer = None
        t, c = self.transport, self.client
        if t is None or c is None or self._closed:
            return
        now = self.loop.time()
        if not c.ready:
            t.abort()  # no handshake in handshake_s: given up (connection_lost reconnects)
            return
        if now - self._last_rx_s >= 3 * self.heartbeat_s:
            t.abort()
            return
        # A PING when the peer was silent (its PONG says it lives), and when we were: the TTL of our last PING
        # lets the peer cut a connection that is silent on our side, as libzmq's sockets PING every interval.
        if now - self._last_rx_s >= self.heartbeat_s or now - self._last_tx_s >= self.heartbeat_s:
            c.ping(3 * self.heartbeat_s)
            t.write(bytes(c.out))
            c.out.clear()
            self._last_tx_s = now
        self._timer = self.loop.call_later(self.heartbeat_s, self._check)

    def _wake(self, exc: BaseException | None) -> None:
        waiters, self.waiters = self.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc) if exc is not None else fut.set_result(None)

    # -- asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._closed:
            transport.abort()
            return
        self.transport = transport
        self.client = c = ZmtpClient(self.curve, max_frame_bytes=self.max_frame_bytes)
        self._last_rx_s = self._last_tx_s = self.loop.time()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(self.handshake_s, self._check)  # the handshake's deadline
        transport.write(bytes(c.out))
        c.out.clear()

    def data_received(self, data: bytes) -> None:
        c, t = self.client, self.transport
        if c is None or t is None:
            return
        was_ready = c.ready
        try:
            messages = c.receive(data)
        except ZmtpError as e:
            self.errors += 1
            self.last_error = str(e)
            log.warning("%s: %s: connection cut", self.endpoint, e)
            t.abort()
            return
        self._last_rx_s = self.loop.time()
        if c.out:
            t.write(bytes(c.out))
            c.out.clear()
        if c.ready and not was_ready:
            self.handshakes += 1
            self._up_s = self.loop.time()
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_later(self.heartbeat_s, self._check)
            self._wake(None)
            if self.on_up is not None:
                self.on_up()
        if messages:
            self._hand_on(messages, t)

    def _hand_on(self, messages: list[list[bytes]], t: asyncio.Transport) -> None:
        """Hand on the messages read, at most a batch now: the rest at the loop's next turns, reading paused
        meanwhile (:meth:`_more`)."""
        self._backlog, self._next = messages, 0
        self._more(t)

    def _more(self, t: asyncio.Transport) -> None:
        if self.transport is not t:  # lost meanwhile: the rest with it
            self._backlog = []
            return
        backlog, i = self._backlog, self._next
        on_message = self.on_message
        for m in backlog[i:i + self.batch]:
            on_message(m)
            if self.transport is not t:  # cut by the callee
                self._backlog = []
                return
        self._next = i + self.batch
        if self._next < len(backlog):
            t.pause_reading()  # (again: nothing)
            self.loop.call_soon(self._more, t)
        else:
            self._backlog = []
            t.resume_reading()  # (not paused: nothing)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.client = None
        self._paused = False
        self._lost(f"connection lost{f': {exc}' if exc else ''}")

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake(None)
