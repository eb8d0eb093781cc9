"""Pure encoder and decoder of the rtnetlink messages the counter reader needs.

Bytes in, values out: no sockets here (the adapter is
:class:`xtc.host.counters.NetlinkCounters`).  Two dumps are spoken:

* ``RTM_GETSTATS`` with the filter mask ``IFLA_STATS_LINK_64`` only: one
  ``RTM_NEWSTATS`` message per interface carrying ``struct rtnl_link_stats64``
  (64-bit counters), keyed by ifindex;
* ``RTM_GETLINK``: one ``RTM_NEWLINK`` message per interface, of which only
  the ifindex and ``IFLA_IFNAME`` are kept (the ifindex -> name map).

Netlink messages are self-delimiting and the kernel never splits one across
datagrams, so every decoder here takes a buffer holding any number of whole
messages: one datagram, or several datagrams concatenated (the recorded test
files are stored that way).

Public API
----------
encode_getstats_dump(seq, filter_mask=STATS_FILTER_LINK_64) -> bytes
encode_getlink_dump(seq) -> bytes
decode_stats_into(buf, into, seq=None) -> DumpStatus
    Adds ``ifindex -> IfCounters`` to ``into`` for every stats message in
    ``buf`` (messages of any shape).
decode_stats_dump(buf, seq=None) -> dict[int, IfCounters]
decode_stats_arrays(buf, seq=None) -> (StatsArrays, DumpStatus)
    Hot path of the control loop: a whole dump (datagrams concatenated) to
    one array per counter, in dump order; the messages of the exact
    ``IFLA_STATS_LINK_64``-only shape are read at fixed offsets with one
    numpy view, anything else through :func:`decode_stats_into`.
is_stats_datagram(buf, msg_len) -> bool
    Whether a datagram holds only stats messages of one length (no
    ``NLMSG_DONE``: more datagrams follow).
decode_link_into(buf, into, seq=None) -> DumpStatus
decode_link_dump(buf, seq=None) -> dict[int, str]
DumpStatus
    What a buffer said about the dump: finished (``NLMSG_DONE`` seen),
    interrupted (``NLM_F_DUMP_INTR``: the interface list changed during
    the dump), messages ignored for a foreign sequence number.
NetlinkDecodeError
    The bytes are not a well-formed reply (truncated, bad lengths, a message
    of an unexpected type, an attribute too short).
NetlinkReplyError
    The kernel answered with an error (``NLMSG_ERROR`` or an error in
    ``NLMSG_DONE``); ``errno`` is the positive error number.

Counter mapping
---------------
``IfCounters`` fields come from ``struct rtnl_link_stats64`` exactly as the
kernel prints them in ``/proc/net/dev`` (net/core/net-procfs.c), so the two
sources agree: ``rx_drops = rx_dropped + rx_missed_errors`` (modulo 2**64,
as the kernel's u64 sum), ``tx_drops = tx_dropped``; packets and bytes are
copied.

Only the first 16 counters of the struct (128 bytes, up to
``rx_missed_errors``) are read; every kernel since 2.6.35 sends at least 23.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from xtc.host.ifcounters import IfCounters
from xtc.host.netlink import (
    HDR_LEN,
    NLA_TYPE_MASK,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    NLM_F_DUMP,
    NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
    NetlinkDecodeError,
    NetlinkReplyError,
    align4,
    header,
    iter_attrs,
)

__all__ = [
    "NLMSG_ERROR",
    "NLMSG_DONE",
    "RTM_NEWLINK",
    "RTM_GETLINK",
    "RTM_NEWSTATS",
    "RTM_GETSTATS",
    "IFLA_IFNAME",
    "IFLA_STATS_LINK_64",
    "STATS_FILTER_LINK_64",
    "DumpStatus",
    "NetlinkDecodeError",
    "NetlinkReplyError",
    "encode_getstats_dump",
    "encode_getlink_dump",
    "decode_stats_into",
    "decode_stats_dump",
    "decode_stats_arrays",
    "is_stats_datagram",
    "stats_run_bytes",
    "stats_msg_len",
    "StatsArrays",
    "decode_link_into",
    "decode_link_dump",
]

# linux/netlink.h: xtc.host.netlink's (NLMSG_ERROR, NLMSG_DONE, NLM_F_*), imported above
# linux/rtnetlink.h
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWSTATS = 92
RTM_GETSTATS = 94
# linux/if_link.h
IFLA_IFNAME = 3
IFLA_STATS_LINK_64 = 1
#: ``filter_mask`` bit asking for IFLA_STATS_LINK_64 only.
STATS_FILTER_LINK_64 = 1 << (IFLA_STATS_LINK_64 - 1)

_IFSTATSMSG = struct.Struct("=BBHII")  # family, pad1, pad2, ifindex, filter_mask
_IFINFOMSG = struct.Struct("=BBHiII")  # family, pad, type, index, flags, change
_I32 = struct.Struct("=i")
_HDR_LEN = HDR_LEN  # 16
_STATS_ATTRS_AT = _HDR_LEN + _IFSTATSMSG.size  # 28
_LINK_ATTRS_AT = _HDR_LEN + _IFINFOMSG.size  # 32
#: Bytes of rtnl_link_stats64 that are read (16 u64 counters, up to rx_missed_errors).
STATS64_MIN_LEN = 16 * 8
_U64_MASK = 2**64 - 1

# struct rtnl_link_stats64 counters used, at their offsets inside the struct:
# rx_packets 0, tx_packets 8, rx_bytes 16, tx_bytes 24, rx_dropped 48,
# tx_dropped 56, rx_missed_errors 120.
_STATS64 = struct.Struct("=4Q16x2Q56xQ")
# One whole RTM_NEWSTATS message as a dump with filter IFLA_STATS_LINK_64
# sends it: nlmsghdr (len, type, flags, seq; pid skipped), if_stats_msg
# (ifindex; the rest skipped), the one nlattr header, then the counters.
_FAST = struct.Struct("=IHHI4x" "4xI4x" "HH" "4Q16x2Q56xQ")
_FAST_LEN = _FAST.size  # 160


# Building IfCounters through its slot descriptors is what the frozen
# dataclass's __init__ does (object.__setattr__ on each slot), without the
# per-field attribute lookups: half the cost on the hot path.
_new_object = object.__new__
(
    _set_rx_packets,
    _set_tx_packets,
    _set_rx_bytes,
    _set_tx_bytes,
    _set_rx_drops,
    _set_tx_drops,
) = (
    IfCounters.__dict__[name].__set__
    for name in ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_drops", "tx_drops")
)


# NetlinkDecodeError (malformed bytes) and NetlinkReplyError (the kernel's error) are
# xtc.host.netlink's: one error family for every netlink user.


@dataclass(slots=True)
class DumpStatus:
    """What the messages of one buffer said about the dump they belong to.

    Attributes
    ----------
    done : bool
        ``NLMSG_DONE`` was seen: the dump is complete.
    interrupted : bool
        A message carried ``NLM_F_DUMP_INTR``: the kernel's interface list
        changed during the dump, which may have missed or repeated interfaces.
    foreign : int
        Messages skipped because their sequence number was not the request's
        (left over from an earlier, abandoned dump).
    messages : int
        Messages of the expected type decoded.
    """

    done: bool = False
    interrupted: bool = False
    foreign: int = 0
    messages: int = 0


def _encode_dump_request(msg_type: int, seq: int, body: bytes) -> bytes:
    if not 0 <= seq <= 0xFFFFFFFF:
        raise ValueError(f"netlink sequence number must be a u32, got {seq}")
    return NLMSGHDR.pack(_HDR_LEN + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def encode_getstats_dump(seq: int, filter_mask: int = STATS_FILTER_LINK_64) -> bytes:
    """The ``RTM_GETSTATS`` dump request of every interface.

    Parameters
    ----------
    seq : int
        Sequence number (u32) the replies will carry.
    filter_mask : int
        ``IFLA_STATS_FILTER_BIT`` mask; the default asks for the 64-bit link
        counters only.

    Returns
    -------
    bytes
        One netlink message: ``nlmsghdr`` + ``struct if_stats_msg`` (28 bytes).
    """
    return _encode_dump_request(RTM_GETSTATS, seq, _IFSTATSMSG.pack(0, 0, 0, 0, filter_mask))


def encode_getlink_dump(seq: int) -> bytes:
    """The ``RTM_GETLINK`` dump request of every interface (``nlmsghdr`` + ``ifinfomsg``)."""
    return _encode_dump_request(RTM_GETLINK, seq, _IFINFOMSG.pack(0, 0, 0, 0, 0, 0))


_header = header


def _control(
    buf: bytes | bytearray | memoryview, off: int, mlen: int, mtype: int, context: str
) -> bool:
    """Handle NLMSG_DONE / NLMSG_ERROR; True when the dump is done."""
    if mlen < _HDR_LEN + 4:
        raise NetlinkDecodeError(f"{context}: message type {mtype} at byte {off} too short ({mlen} bytes)")
    (code,) = _I32.unpack_from(buf, off + _HDR_LEN)
    if code < 0:
        raise NetlinkReplyError(-code, context)
    if mtype == NLMSG_ERROR:
        # An acknowledgement (code 0) is not an answer to a dump request.
        raise NetlinkDecodeError(f"{context}: unexpected acknowledgement at byte {off}")
    return True


def _attrs(
    buf: bytes | bytearray | memoryview, start: int, end: int, off: int
) -> dict[int, tuple[int, int]]:
    """Attribute type -> (payload offset, payload length) of the attributes in [start, end) (the
    first of a type wins); an attribute running past ``end`` raises :class:`NetlinkDecodeError`."""
    out: dict[int, tuple[int, int]] = {}
    for atype, a, b in iter_attrs(buf, start, end, off):
        out.setdefault(atype, (a, b - a))
    return out


def decode_stats_into(
    buf: bytes | bytearray | memoryview,
    into: dict[int, IfCounters],
    seq: int | None = None,
) -> DumpStatus:
    """Decode the ``RTM_NEWSTATS`` messages of ``buf`` into ``into``.

    Parameters
    ----------
    buf : bytes-like
        Whole netlink messages (one datagram of the dump, or several).
    into : dict of int to IfCounters
        Receives ``ifindex -> counters``; a later message for the same
        ifindex replaces an earlier one.
    seq : int, optional
        The request's sequence number; messages with another are skipped and
        counted in ``DumpStatus.foreign``.  None accepts every message.

    Returns
    -------
    DumpStatus

    Raises
    ------
    NetlinkDecodeError
        A length that runs past the buffer, a message of an unexpected type,
        a stats message without a long enough ``IFLA_STATS_LINK_64``.
    NetlinkReplyError
        The kernel reported an error (e.g. ``EOPNOTSUPP`` from a kernel
        without ``RTM_GETSTATS``, before 4.7).
    """
    status = DumpStatus()
    end = len(buf)
    off = 0
    fast = _FAST.unpack_from
    cls = IfCounters
    new_object = _new_object
    set_rxp, set_txp, set_rxb = _set_rx_packets, _set_tx_packets, _set_rx_bytes
    set_txb, set_rxd, set_txd = _set_tx_bytes, _set_rx_drops, _set_tx_drops
    while off < end:
        if off + _FAST_LEN <= end:
            mlen, mtype, mflags, mseq, ifindex, alen, atype, rxp, txp, rxb, txb, rxd, txd, rxm = fast(
                buf, off
            )
            # The exact shape of a LINK_64-only reply: one attribute, type 1,
            # at least 16 counters, nothing after it.
            if (
                mtype == RTM_NEWSTATS
                and (atype & NLA_TYPE_MASK) == IFLA_STATS_LINK_64
                and alen >= 4 + STATS64_MIN_LEN
                and mlen == _STATS_ATTRS_AT + ((alen + 3) & ~3)
                and off + mlen <= end
            ):
                if seq is not None and mseq != seq:
                    status.foreign += 1
                else:
                    if mflags & NLM_F_DUMP_INTR:
                        status.interrupted = True
                    counters = new_object(cls)
                    set_rxp(counters, rxp)
                    set_txp(counters, txp)
                    set_rxb(counters, rxb)
                    set_txb(counters, txb)
                    set_rxd(counters, (rxd + rxm) & _U64_MASK)
                    set_txd(counters, txd)
                    into[ifindex] = counters
                    status.messages += 1
                off += mlen
                continue
        off = _decode_stats_slow(buf, off, end, into, seq, status)
    return status


def _decode_stats_slow(
    buf: bytes | bytearray | memoryview,
    off: int,
    end: int,
    into: dict[int, IfCounters],
    seq: int | None,
    status: DumpStatus,
) -> int:
    """Decode one message of any shape at ``off`` by walking its attributes; return the next offset."""
    mlen, mtype, mflags, mseq = _header(buf, off, end)
    nxt = off + align4(mlen)
    if seq is not None and mseq != seq:
        status.foreign += 1
        return nxt
    if mflags & NLM_F_DUMP_INTR:
        status.interrupted = True
    if mtype in (NLMSG_DONE, NLMSG_ERROR):
        status.done = _control(buf, off, mlen, mtype, "RTM_GETSTATS dump")
        return nxt
    if mtype != RTM_NEWSTATS:
        raise NetlinkDecodeError(
            f"message at byte {off} has type {mtype}, expected RTM_NEWSTATS ({RTM_NEWSTATS})"
        )
    if mlen < _STATS_ATTRS_AT:
        raise NetlinkDecodeError(f"RTM_NEWSTATS at byte {off} too short for if_stats_msg ({mlen} bytes)")
    _, _, _, ifindex, _ = _IFSTATSMSG.unpack_from(buf, off + _HDR_LEN)
    attrs = _attrs(buf, off + _STATS_ATTRS_AT, off + mlen, off)
    where = attrs.get(IFLA_STATS_LINK_64)
    if where is None:
        raise NetlinkDecodeError(f"RTM_NEWSTATS at byte {off} (ifindex {ifindex}) has no IFLA_STATS_LINK_64")
    at, length = where
    if length < STATS64_MIN_LEN:
        raise NetlinkDecodeError(
            f"IFLA_STATS_LINK_64 of ifindex {ifindex} has {length} bytes, at least {STATS64_MIN_LEN} needed"
        )
    rxp, txp, rxb, txb, rxd, txd, rxm = _STATS64.unpack_from(buf, at)
    into[ifindex] = IfCounters(rxp, txp, rxb, txb, (rxd + rxm) & _U64_MASK, txd)
    status.messages += 1
    return nxt


def decode_stats_dump(buf: bytes | bytearray | memoryview, seq: int | None = None) -> dict[int, IfCounters]:
    """Decode a whole ``RTM_GETSTATS`` dump reply.

    Parameters
    ----------
    buf : bytes-like
        Every datagram of the reply, concatenated.
    seq : int, optional
        See :func:`decode_stats_into`.

    Returns
    -------
    dict of int to IfCounters
        Counters per ifindex, in dump order.

    Raises
    ------
    NetlinkDecodeError
        Malformed bytes, or no ``NLMSG_DONE`` at the end (a truncated dump), or
        the dump was interrupted.
    NetlinkReplyError
        The kernel reported an error.
    """
    out: dict[int, IfCounters] = {}
    status = decode_stats_into(buf, out, seq)
    _check_complete(status, "RTM_GETSTATS")
    return out


def _check_complete(status: DumpStatus, what: str) -> None:
    if not status.done:
        raise NetlinkDecodeError(f"{what} dump truncated: no NLMSG_DONE after {status.messages} messages")
    if status.interrupted:
        raise NetlinkDecodeError(f"{what} dump interrupted (NLM_F_DUMP_INTR): the interface list changed")


def decode_link_into(
    buf: bytes | bytearray | memoryview, into: dict[int, str], seq: int | None = None
) -> DumpStatus:
    """Decode the ``RTM_NEWLINK`` messages of ``buf`` into ``into`` (ifindex -> name).

    Parameters
    ----------
    buf : bytes-like
        Whole netlink messages.
    into : dict of int to str
        Receives ``ifindex -> interface name``.
    seq : int, optional
        See :func:`decode_stats_into`.

    Returns
    -------
    DumpStatus

    Raises
    ------
    NetlinkDecodeError
        Malformed bytes, a message of another type, a link without a
        NUL-terminated ``IFLA_IFNAME``.
    NetlinkReplyError
        The kernel reported an error.
    """
    status = DumpStatus()
    end = len(buf)
    off = 0
    while off < end:
        mlen, mtype, mflags, mseq = _header(buf, off, end)
        nxt = off + align4(mlen)
        if seq is not None and mseq != seq:
            status.foreign += 1
        elif mtype in (NLMSG_DONE, NLMSG_ERROR):
            status.done = _control(buf, off, mlen, mtype, "RTM_GETLINK dump")
        elif mtype != RTM_NEWLINK:
            raise NetlinkDecodeError(
                f"message at byte {off} has type {mtype}, expected RTM_NEWLINK ({RTM_NEWLINK})"
            )
        else:
            if mflags & NLM_F_DUMP_INTR:
                status.interrupted = True
            if mlen < _LINK_ATTRS_AT:
                raise NetlinkDecodeError(f"RTM_NEWLINK at byte {off} too short for ifinfomsg ({mlen} bytes)")
            index = _IFINFOMSG.unpack_from(buf, off + _HDR_LEN)[3]
            where = _attrs(buf, off + _LINK_ATTRS_AT, off + mlen, off).get(IFLA_IFNAME)
            if where is None:
                raise NetlinkDecodeError(f"RTM_NEWLINK at byte {off} (ifindex {index}) has no IFLA_IFNAME")
            at, length = where
            raw = bytes(buf[at : at + length])
            nul = raw.find(b"\0")
            if nul <= 0:
                raise NetlinkDecodeError(
                    f"IFLA_IFNAME of ifindex {index} is not a NUL-terminated name: {raw[:20]!r}"
                )
            # surrogateescape: any bytes the kernel allows in a name survive,
            # exactly as the /proc/net/dev reader decodes them.
            into[index] = raw[:nul].decode("utf-8", "surrogateescape")
            status.messages += 1
        off = nxt
    return status


def decode_link_dump(buf: bytes | bytearray | memoryview, seq: int | None = None) -> dict[int, str]:
    """Decode a whole ``RTM_GETLINK`` dump reply into ifindex -> name.

    Raises :class:`NetlinkDecodeError` on malformed bytes, a truncated (no
    ``NLMSG_DONE``) or interrupted dump, :class:`NetlinkReplyError` on a
    kernel error.
    """
    out: dict[int, str] = {}
    status = decode_link_into(buf, out, seq)
    _check_complete(status, "RTM_GETLINK")
    return out


# ------------------------------------------------------------------------------ arrays

#: Offsets of the fields of one LINK_64-only RTM_NEWSTATS message (those :data:`_FAST` reads).
_ARRAY_FIELDS = (
    ("len", "=u4", 0), ("type", "=u2", 4), ("flags", "=u2", 6), ("seq", "=u4", 8),
    ("ifindex", "=u4", 20), ("alen", "=u2", 28), ("atype", "=u2", 30),
    ("rx_packets", "=u8", 32), ("tx_packets", "=u8", 40), ("rx_bytes", "=u8", 48), ("tx_bytes", "=u8", 56),
    ("rx_dropped", "=u8", 80), ("tx_dropped", "=u8", 88), ("rx_missed", "=u8", 152),
)
_dtypes: dict[int, np.dtype] = {}


def _stats_dtype(msg_len: int) -> np.dtype:
    """A numpy record of one stats message of ``msg_len`` bytes (fields at fixed offsets)."""
    dt = _dtypes.get(msg_len)
    if dt is None:
        names, formats, offsets = zip(*_ARRAY_FIELDS)
        dt = _dtypes[msg_len] = np.dtype({"names": list(names), "formats": list(formats),
                                          "offsets": list(offsets), "itemsize": msg_len})
    return dt


@dataclass(frozen=True, slots=True)
class StatsArrays:
    """The counters of one ``RTM_GETSTATS`` dump, one array per field, one row per interface.

    Attributes
    ----------
    ifindex : numpy.ndarray of int64
        Interface index of each row, in dump order, each at most once.
    rx_packets, tx_packets, rx_bytes, tx_bytes, rx_drops, tx_drops : numpy.ndarray of uint64
        The :class:`~xtc.host.ifcounters.IfCounters` fields of each row (same mapping).
    """

    ifindex: np.ndarray
    rx_packets: np.ndarray
    tx_packets: np.ndarray
    rx_bytes: np.ndarray
    tx_bytes: np.ndarray
    rx_drops: np.ndarray
    tx_drops: np.ndarray

    def __len__(self) -> int:
        return len(self.ifindex)


def stats_msg_len(buf: bytes | bytearray | memoryview) -> int:
    """Length (bytes) of the first message of ``buf`` when it has the exact LINK_64-only shape, else 0."""
    if len(buf) < _FAST_LEN:
        return 0
    mlen, mtype, _, _, _, alen, atype = _FAST.unpack_from(buf, 0)[:7]
    if (mtype == RTM_NEWSTATS and (atype & NLA_TYPE_MASK) == IFLA_STATS_LINK_64 and alen >= 4 + STATS64_MIN_LEN
            and mlen == _STATS_ATTRS_AT + ((alen + 3) & ~3) and mlen <= len(buf)):
        return mlen
    return 0


def stats_run_bytes(buf: bytes | bytearray | memoryview) -> int:
    """Bytes of the leading run of LINK_64-only ``RTM_NEWSTATS`` messages of one length in ``buf``
    (0 when the first message is not one): what a dump's reader need not look at for its end."""
    mlen = stats_msg_len(buf)
    if not mlen:
        return 0
    recs = np.frombuffer(buf, dtype=_stats_dtype(mlen), count=len(buf) // mlen)
    good = (recs["len"] == mlen) & (recs["type"] == RTM_NEWSTATS)
    return mlen * (len(good) if good.all() else int(np.argmin(good)))


def is_stats_datagram(buf: bytes | bytearray | memoryview, msg_len: int) -> bool:
    """True when ``buf`` is only RTM_NEWSTATS messages of ``msg_len`` bytes each (0: never).

    A datagram that ends the dump (``NLMSG_DONE`` or an error after the stats) is never one: a
    control message is shorter than a stats message, so the lengths no longer add up.
    """
    n = len(buf)
    if msg_len <= 0 or n == 0 or n % msg_len:
        return False
    lens = np.frombuffer(buf, dtype=_stats_dtype(msg_len), count=n // msg_len)
    return bool((lens["len"] == msg_len).all() and (lens["type"] == RTM_NEWSTATS).all())


def _arrays_from_dict(d: dict[int, IfCounters]) -> StatsArrays:
    def col(name: str) -> np.ndarray:
        return np.fromiter((getattr(c, name) for c in d.values()), dtype=np.uint64, count=len(d))

    return StatsArrays(np.fromiter(d.keys(), dtype=np.int64, count=len(d)), col("rx_packets"), col("tx_packets"),
                       col("rx_bytes"), col("tx_bytes"), col("rx_drops"), col("tx_drops"))


def decode_stats_arrays(buf: bytes | bytearray | memoryview, seq: int | None = None) -> tuple[StatsArrays, DumpStatus]:
    """Decode a whole ``RTM_GETSTATS`` reply (its datagrams concatenated) into arrays.

    Same values, errors and :class:`DumpStatus` as :func:`decode_stats_into` over the same bytes
    (a later message for an ifindex replaces an earlier one; messages with another ``seq`` are
    skipped and counted), returned as :class:`StatsArrays` in dump order.  The leading run of
    messages of the exact LINK_64-only shape and one length is read through one numpy view of
    ``buf`` (no per-message Python); whatever follows (``NLMSG_DONE``, an error, another shape)
    goes through :func:`decode_stats_into`.

    Parameters
    ----------
    buf : bytes-like
        Whole netlink messages.
    seq : int, optional
        The request's sequence number (None accepts every message).

    Returns
    -------
    StatsArrays, DumpStatus
    """
    status = DumpStatus()
    mlen = stats_msg_len(buf)
    k = 0
    if mlen:
        recs = np.frombuffer(buf, dtype=_stats_dtype(mlen), count=len(buf) // mlen)
        alen0 = recs["alen"][0]
        good = ((recs["len"] == mlen) & (recs["type"] == RTM_NEWSTATS) & (recs["alen"] == alen0)
                & ((recs["atype"] & NLA_TYPE_MASK) == IFLA_STATS_LINK_64))
        # Every record up to the first bad one is a message (each starts where the last ended).
        k = len(good) if good.all() else int(np.argmin(good))
        recs = recs[:k]
        if bool((recs["flags"] & NLM_F_DUMP_INTR).any()):
            mine = recs if seq is None else recs[recs["seq"] == seq]
            status.interrupted = bool((mine["flags"] & NLM_F_DUMP_INTR).any())
        if seq is not None:
            mine_mask = recs["seq"] == seq
            if not mine_mask.all():
                status.foreign += int(k - mine_mask.sum())
                recs = recs[mine_mask]
        status.messages += len(recs)
        fast = StatsArrays(recs["ifindex"].astype(np.int64), recs["rx_packets"].copy(), recs["tx_packets"].copy(),
                           recs["rx_bytes"].copy(), recs["tx_bytes"].copy(),
                           recs["rx_dropped"] + recs["rx_missed"],  # u64 sum modulo 2**64, as the kernel's
                           recs["tx_dropped"].copy())
    rest: dict[int, IfCounters] = {}
    if k * mlen < len(buf):
        tail = decode_stats_into(memoryview(buf)[k * mlen:], rest, seq)
        status.done = tail.done
        status.interrupted = status.interrupted or tail.interrupted
        status.foreign += tail.foreign
        status.messages += tail.messages
    if not mlen:
        return _arrays_from_dict(rest), status
    idx = fast.ifindex
    if rest or (len(idx) > 1 and not bool((idx[1:] > idx[:-1]).all()) and len(np.unique(idx)) != len(idx)):
        # Repeated ifindexes or a tail of other shapes: the dict's rules (last message wins, order of first).
        merged: dict[int, IfCounters] = {}
        cols = [a.tolist() for a in (fast.rx_packets, fast.tx_packets, fast.rx_bytes, fast.tx_bytes,
                                     fast.rx_drops, fast.tx_drops)]
        for i, ix in enumerate(idx.tolist()):
            merged[ix] = IfCounters(*(c[i] for c in cols))
        merged.update(rest)
        return _arrays_from_dict(merged), status
    return fast, status
