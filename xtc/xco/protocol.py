"""The XCo wire protocol, version 1: compact binary messages over UDP (docs/xco-protocol.md).

Every message is one UDP datagram: a 24-byte header, then a body that depends on the type.  All
integers are big-endian (network order)::

    header  ">2sBBIIIQ"  magic b"XC", version (1), type, host id, session, seq, t_us

- ``host`` is the sender's host id (its index in the topology both ends load; a directive carries
  the id of the host it is sent to).  ``session`` is chosen at random by a host when it starts
  (register) and by the controller when it starts (directives); ``seq`` counts the messages of a
  session from 1 and must grow; ``t_us`` is the sender's wall clock, microseconds since the Unix
  epoch (hosts and controller are assumed synchronised, NTP or PTP, within the controller's
  ``clock_window_us``).

Types and bodies (host -> controller unless said otherwise):

==========  ====  ==========================================================================
register    1     topology digest (8 bytes), name (u8 length + UTF-8), VM addresses (u16 count,
                  then for each: u8 family 4 or 6, 4 or 16 bytes)
backlog     2     u16 count, then that many u32 destination host ids
giveup      3     u32 destination host id
heartbeat   4     (empty)
leave       5     (empty)
directive   6     controller -> host.  u8 kind: 0 = timeslice: u32 destination (0xFFFFFFFF =
                  hold), u64 start_us, u32 length_us (0 for a hold); 1 = rates: u64 start_us,
                  u16 count, then (u32 destination, u64 rate_bps) per flow (rate 0 = stop);
                  2 = timeslice with a rate (hybrid mode): u32 destination (never a hold),
                  u64 start_us, u32 length_us, u64 rate_bps (> 0): send to the destination for
                  the slice at no more than that rate
welcome     7     controller -> host, the answer to a register: u32 slice_us, u8 mode (0
                  timeslice, 1 rate, 2 hybrid), u32 heartbeat_interval_us
ack         8     controller -> host, the answer to a heartbeat: u32 seq of the heartbeat, u16
                  count, then that many u32 destination host ids: the host's backlog as the
                  controller holds it (added in protocol 1 without a version change: an end
                  that does not know it drops it as malformed)
demand      9     rate mode: u16 count (>= 1), then (u32 destination, u64 bound_bps) per flow:
                  the flow sends less than its rate allows and needs at most ``bound_bps``
                  (0 = no bound: it uses its rate).  Added in protocol 1 like ack; the
                  controller ignores it in the other modes
==========  ====  ==========================================================================

:func:`decode` is strict: it returns a message object or raises :class:`DecodeError` with a
reason (``malformed``, ``version``); the semantic checks (unknown host, stale, replay, ...) are the
controller's (:mod:`xtc.xco.controller`).  Nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from dataclasses import dataclass
from typing import Union

__all__ = [
    "VERSION", "MAGIC", "HEADER", "HOLD", "MAX_DATAGRAM", "DecodeError",
    "Header", "Register", "Backlog", "GiveUp", "Heartbeat", "Leave", "Directive", "RateDirective",
    "Welcome", "Ack", "Demand", "Message", "encode", "decode", "topology_digest", "wall_us",
]

VERSION = 1
MAGIC = b"XC"
HEADER = struct.Struct(">2sBBIIIQ")
HOLD = 0xFFFFFFFF
#: Largest datagram either end sends or accepts, bytes (fits in one Ethernet jumbo frame; a
#: backlog of 2,000 destinations or a rate directive of 600 flows).
MAX_DATAGRAM = 8192
MAX_NAME_BYTES = 64


def wall_us() -> int:
    """The clock of the headers' timestamps: wall time, microseconds since the Unix epoch."""
    return time.time_ns() // 1000


T_REGISTER, T_BACKLOG, T_GIVEUP, T_HEARTBEAT, T_LEAVE, T_DIRECTIVE, T_WELCOME, T_ACK, T_DEMAND = range(1, 10)
TYPE_NAMES = {1: "register", 2: "backlog", 3: "giveup", 4: "heartbeat", 5: "leave", 6: "directive", 7: "welcome",
              8: "ack", 9: "demand"}
MODES = ("timeslice", "rate", "hybrid")

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_TS = struct.Struct(">BIQI")
_TS_RATED = struct.Struct(">BIQIQ")
_RATE_HEAD = struct.Struct(">BQH")
_FLOW = struct.Struct(">IQ")
_WELCOME = struct.Struct(">IBI")
_ACK_HEAD = struct.Struct(">IH")


class DecodeError(ValueError):
    """A datagram that is not a valid message; ``reason`` is ``"malformed"`` or ``"version"``."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True, slots=True)
class Header:
    """What every message carries: sender (or addressee) host id, session, seq, send time (us)."""

    host: int
    session: int
    seq: int
    t_us: int


@dataclass(frozen=True, slots=True)
class Register:
    header: Header
    topology: bytes  # 8-byte digest of the topology file (:func:`topology_digest`)
    name: str
    vms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Backlog:
    header: Header
    dests: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GiveUp:
    header: Header
    dest: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    header: Header


@dataclass(frozen=True, slots=True)
class Leave:
    header: Header


@dataclass(frozen=True, slots=True)
class Directive:
    """Timeslice directive: send to ``dest`` (None = hold) from ``start_us`` for ``length_us``;
    in hybrid mode a slice may carry ``rate_bps``, the most the host may send in it (bits/s)."""

    header: Header
    dest: int | None
    start_us: int
    length_us: int
    rate_bps: int | None = None


@dataclass(frozen=True, slots=True)
class RateDirective:
    """Rate directive: from ``start_us`` each listed flow ``(dest, rate_bps)`` has that rate."""

    header: Header
    start_us: int
    rates: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Welcome:
    header: Header
    slice_us: int
    mode: str
    heartbeat_interval_us: int


@dataclass(frozen=True, slots=True)
class Ack:
    """The answer to a heartbeat: its ``seq``, and the host's backlog (destination ids) as the
    controller holds it."""

    header: Header
    seq: int
    backlog: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Demand:
    """Rate mode: ``(dest, bound_bps)`` per flow: the most the flow needs now, bits/s (0 = no
    bound, it uses the rate it has)."""

    header: Header
    demands: tuple[tuple[int, int], ...]


Message = Union[Register, Backlog, GiveUp, Heartbeat, Leave, Directive, RateDirective, Welcome, Ack, Demand]


def topology_digest(text: bytes) -> bytes:
    """The 8-byte digest of a topology file's bytes (SHA-256, first 8 bytes) both ends compare."""
    import hashlib

    return hashlib.sha256(text).digest()[:8]


def _head(t: int, h: Header) -> bytes:
    return HEADER.pack(MAGIC, VERSION, t, h.host, h.session, h.seq, h.t_us)


def encode(m: Message) -> bytes:
    """The datagram of a message.

    Raises
    ------
    ValueError
        If a field does not fit its wire type (struct.error) or the datagram exceeds
        :data:`MAX_DATAGRAM`.
    """
    h = m.header
    try:
        if isinstance(m, Directive):
            dest = HOLD if m.dest is None else m.dest
            if dest == HOLD and m.dest is not None:
                raise ValueError("destination id 0xFFFFFFFF is reserved for hold")
            if m.rate_bps is None:
                out = _head(T_DIRECTIVE, h) + _TS.pack(0, dest, m.start_us, m.length_us)
            elif m.dest is None or m.rate_bps <= 0:
                raise ValueError("a slice's rate must be positive, and a hold has none")
            else:
                out = _head(T_DIRECTIVE, h) + _TS_RATED.pack(2, dest, m.start_us, m.length_us, m.rate_bps)
        elif isinstance(m, Backlog):
            out = _head(T_BACKLOG, h) + _U16.pack(len(m.dests)) + struct.pack(f">{len(m.dests)}I", *m.dests)
        elif isinstance(m, GiveUp):
            out = _head(T_GIVEUP, h) + _U32.pack(m.dest)
        elif isinstance(m, Heartbeat):
            out = _head(T_HEARTBEAT, h)
        elif isinstance(m, Leave):
            out = _head(T_LEAVE, h)
        elif isinstance(m, RateDirective):
            out = _head(T_DIRECTIVE, h) + _RATE_HEAD.pack(1, m.start_us, len(m.rates)) + b"".join(
                _FLOW.pack(d, r) for d, r in m.rates)
        elif isinstance(m, Demand):
            if not m.demands:
                raise ValueError("a demand report names at least one flow")
            out = _head(T_DEMAND, h) + _U16.pack(len(m.demands)) + b"".join(_FLOW.pack(d, r) for d, r in m.demands)
        elif isinstance(m, Register):
            name = m.name.encode("utf-8")
            if not 0 < len(name) <= MAX_NAME_BYTES or len(m.topology) != 8:
                raise ValueError("name must be 1..64 bytes of UTF-8 and the topology digest 8 bytes")
            parts = [_head(T_REGISTER, h), m.topology, _U8.pack(len(name)), name, _U16.pack(len(m.vms))]
            for a in m.vms:
                ip = ipaddress.ip_address(a)
                parts.append(_U8.pack(ip.version) + ip.packed)
            out = b"".join(parts)
        elif isinstance(m, Welcome):
            out = _head(T_WELCOME, h) + _WELCOME.pack(m.slice_us, MODES.index(m.mode), m.heartbeat_interval_us)
        elif isinstance(m, Ack):
            out = _head(T_ACK, h) + _ACK_HEAD.pack(m.seq, len(m.backlog)) + struct.pack(
                f">{len(m.backlog)}I", *m.backlog)
        else:
            raise ValueError(f"not a message: {m!r}")
    except struct.error as e:
        raise ValueError(f"field out of range: {e}") from None
    if len(out) > MAX_DATAGRAM:
        raise ValueError(f"message of {len(out)} bytes exceeds {MAX_DATAGRAM}")
    return out


def _bad(detail: str) -> DecodeError:
    return DecodeError("malformed", detail)


def decode(data: bytes) -> Message:
    """Parse one datagram, strictly: exact lengths, no trailing bytes, valid fields.

    Raises
    ------
    DecodeError
        ``reason`` ``"version"`` for a well-formed header of another protocol version, else
        ``"malformed"``.  Never any other exception, whatever the bytes.
    """
    n = len(data)
    if n < HEADER.size:
        raise _bad(f"{n} bytes, shorter than the header")
    if n > MAX_DATAGRAM:
        raise _bad(f"{n} bytes, longer than {MAX_DATAGRAM}")
    magic, ver, t, host, session, seq, t_us = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise _bad("bad magic")
    if ver != VERSION:
        raise DecodeError("version", f"version {ver}, this end speaks {VERSION}")
    if seq == 0:
        raise _bad("seq 0 (sequence numbers start at 1)")
    h = Header(host, session, seq, t_us)
    body = memoryview(data)[HEADER.size:]
    b = len(body)
    if t == T_HEARTBEAT or t == T_LEAVE:
        if b:
            raise _bad(f"{TYPE_NAMES[t]} with a {b}-byte body")
        return Heartbeat(h) if t == T_HEARTBEAT else Leave(h)
    if t == T_GIVEUP:
        if b != 4:
            raise _bad(f"giveup body of {b} bytes (want 4)")
        return GiveUp(h, _U32.unpack_from(body)[0])
    if t == T_BACKLOG:
        if b < 2:
            raise _bad("backlog without a count")
        (k,) = _U16.unpack_from(body)
        if k == 0 or b != 2 + 4 * k:
            raise _bad(f"backlog of {k} destinations in a {b}-byte body")
        return Backlog(h, struct.unpack_from(f">{k}I", body, 2))
    if t == T_DIRECTIVE:
        if b < 1:
            raise _bad("directive without a kind")
        kind = body[0]
        if kind == 0:
            if b != _TS.size:
                raise _bad(f"timeslice directive body of {b} bytes (want {_TS.size})")
            _, dest, start, length = _TS.unpack_from(body)
            if dest == HOLD and length:
                raise _bad("a hold has no slice length")
            return Directive(h, None if dest == HOLD else dest, start, length)
        if kind == 1:
            if b < _RATE_HEAD.size:
                raise _bad("rate directive too short")
            _, start, k = _RATE_HEAD.unpack_from(body)
            if b != _RATE_HEAD.size + _FLOW.size * k:
                raise _bad(f"rate directive of {k} flows in a {b}-byte body")
            rates = tuple(_FLOW.unpack_from(body, _RATE_HEAD.size + _FLOW.size * i) for i in range(k))
            return RateDirective(h, start, rates)
        if kind == 2:
            if b != _TS_RATED.size:
                raise _bad(f"rated timeslice directive body of {b} bytes (want {_TS_RATED.size})")
            _, dest, start, length, rate = _TS_RATED.unpack_from(body)
            if dest == HOLD or rate == 0:
                raise _bad("a rated slice needs a destination and a rate above 0")
            return Directive(h, dest, start, length, rate)
        raise _bad(f"directive kind {kind}")
    if t == T_WELCOME:
        if b != _WELCOME.size:
            raise _bad(f"welcome body of {b} bytes")
        slice_us, mode, hb = _WELCOME.unpack_from(body)
        if mode >= len(MODES) or slice_us == 0:
            raise _bad("welcome with a bad mode or slice")
        return Welcome(h, slice_us, MODES[mode], hb)
    if t == T_ACK:
        if b < _ACK_HEAD.size:
            raise _bad("ack too short")
        acked, k = _ACK_HEAD.unpack_from(body)
        if acked == 0 or b != _ACK_HEAD.size + 4 * k:
            raise _bad(f"ack of seq {acked} with {k} destinations in a {b}-byte body")
        return Ack(h, acked, struct.unpack_from(f">{k}I", body, _ACK_HEAD.size))
    if t == T_DEMAND:
        if b < 2:
            raise _bad("demand without a count")
        (k,) = _U16.unpack_from(body)
        if k == 0 or b != 2 + _FLOW.size * k:
            raise _bad(f"demand of {k} flows in a {b}-byte body")
        return Demand(h, tuple(_FLOW.unpack_from(body, 2 + _FLOW.size * i) for i in range(k)))
    if t == T_REGISTER:
        if b < 8 + 1:
            raise _bad("register too short")
        digest = bytes(body[:8])
        ln = body[8]
        if not 0 < ln <= MAX_NAME_BYTES or b < 9 + ln + 2:
            raise _bad("register name length")
        try:
            name = bytes(body[9:9 + ln]).decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("register name is not UTF-8") from None
        off = 9 + ln
        (k,) = _U16.unpack_from(body, off)
        off += 2
        vms = []
        for _ in range(k):
            if off >= b:
                raise _bad("register truncated in the VM addresses")
            fam = body[off]
            size = {4: 4, 6: 16}.get(fam)
            if size is None or off + 1 + size > b:
                raise _bad(f"register VM address family {fam}")
            raw = bytes(body[off + 1:off + 1 + size])
            vms.append(str(ipaddress.IPv4Address(raw) if fam == 4 else ipaddress.IPv6Address(raw)))
            off += 1 + size
        if off != b:
            raise _bad(f"{b - off} trailing bytes after register")
        return Register(h, digest, name, tuple(vms))
    raise _bad(f"unknown message type {t}")
