"""The tc codec: traffic-control messages (qdiscs, classes, filters) to bytes and dumps back to
values.  Pure: no socket, no file (the socket is :class:`xtc.host.netlink.RouteSocket`; the framing
is :mod:`xtc.host.netlink`'s).

Encoding
--------
:func:`encode_tc` encodes any request ``IPRoute.tc`` knows (pyroute2's tc plugins and request
filters: every kind pyroute2 has: ``htb``, ``tbf``, ``pfifo``, ``ingress``, ``clsact``, ``netem``,
``u32``/``matchall``/``bpf`` filters, ``police``/``gact`` actions...) without a socket, once; the
hot paths copy that message and write the few fields that change into it:

* :func:`set_handles` (a message's sequence number, tcmsg handle and parent),
* :func:`set_tbf_rate` (a TBF message's rate and burst),
* :func:`set_u32_filter` (a u32 filter's node, class and key values),
* :func:`without_ack` (clear ``NLM_F_ACK``: a batch whose errors alone are read).

:func:`encode_tbf` is a whole TBF qdisc message as the kernel needs it (pyroute2 has no
``TCA_TBF_BURST``: it is appended, else the kernel derives the largest packet from the buffer in
ticks and a slow leaf drops every packet; rates above 34 Gb/s go in ``TCA_TBF_RATE64``).
:func:`encode_tcmsg` is a message written by hand (deletes, gets, a filter's class change).

To add a qdisc kind: encode it with :func:`encode_tc` (its keyword arguments are ``IPRoute.tc``'s);
if its messages are sent often, encode once and patch the fields that change with a writer like
:func:`set_tbf_rate` (find the attribute with :func:`xtc.host.netlink.iter_attrs`), and test the
writer against pyroute2's own encoding (tests/unit/test_tccodec.py does it for TBF and u32).

Decoding
--------
:func:`decode_tc_dump` (qdisc and class messages of a dump, with kind, options and counters),
:func:`decode_class_counters` (the counters of one qdisc's classes), :class:`ClassCounterTable` (the
same, by word offsets learnt once: numpy gathers on the hot path), :func:`root_counter_offsets`
(where a qdisc message's counters lie).

Why one file: it is the one codec of rtnetlink's traffic-control family, for the XCo gate, early
drop's TBF and its eBPF filter alike; its encoders share the message templates and the attribute
writers, its decoders the dump walk, and its tests check both against pyroute2's own encoding.

TBF arithmetic
--------------
:func:`least_rate_Bps`: the least rate at which a TBF bucket fits (its buffer, in ticks, is a u32);
the ticks per microsecond come from ``/proc/net/psched`` (:func:`xtc.host.qdiscs.ticks_per_us`).
"""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from xtc.host.netlink import (
    HDR_LEN,
    NLATTR,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_ECHO,
    NLM_F_EXCL,
    NLM_F_REPLACE,
    NLM_F_REQUEST,
    NLMSGHDR,
    NetlinkDecodeError,
    align4,
    attr,
    attr_str,
    iter_attrs,
)

__all__ = [
    "CLSACT_EGRESS",
    "CLSACT_HANDLE",
    "CLSACT_INGRESS",
    "COMMANDS",
    "RTM_GETTFILTER",
    "TC_H_CLSACT",
    "TcFilter",
    "decode_filters",
    "encode_bpf_filter",
    "encode_clsact",
    "encode_filter_delete",
    "ETH_P_ALL",
    "ETH_P_IP",
    "ETH_P_IPV6",
    "MAX_RATE_BPS",
    "RTM_DELQDISC",
    "RTM_DELTCLASS",
    "RTM_DELTFILTER",
    "RTM_GETQDISC",
    "RTM_GETTCLASS",
    "RTM_NEWQDISC",
    "RTM_NEWTCLASS",
    "RTM_NEWTFILTER",
    "TCA_KIND",
    "TCA_OPTIONS",
    "TCA_STATS2",
    "TCA_TBF_BURST",
    "TCA_TBF_RATE64",
    "TCMSG",
    "TC_H_ROOT",
    "U32_MAX",
    "ClassCounterTable",
    "TcObject",
    "append_option",
    "class_counter_words",
    "decode_class_counters",
    "decode_tc_dump",
    "encode_tbf",
    "encode_tc",
    "encode_tcmsg",
    "filter_info",
    "least_rate_Bps",
    "queue_drops",
    "qdisc_counters",
    "root_drops",
    "root_counter_offsets",
    "set_handles",
    "set_tbf_rate",
    "set_u32_filter",
    "tbf_parameters",
    "u32_address_keys",
    "u32_class_change",
    "without_ack",
]

ETH_P_IP, ETH_P_IPV6, ETH_P_ALL = 0x0800, 0x86DD, 0x0003
TC_H_ROOT = 0xFFFF_FFFF
# linux/rtnetlink.h
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER = 44, 45
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
# linux/pkt_sched.h, linux/pkt_cls.h
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 4, 6
TCA_U32_CLASSID, TCA_U32_SEL = 1, 5
TC_LINKLAYER_ETHERNET = 1
#: The fastest rate the codec takes, bits/s (10 Tb/s; the kernel's 64-bit rates).  A TBF's 32-bit
#: rate field ends at 34 Gb/s: above it the rate goes in ``TCA_TBF_RATE64``.
MAX_RATE_BPS = 10**13
U32_MAX = 2**32 - 1
#: struct tc_u32_sel before its keys (flags, offshift, nkeys, pad, offmask, off, offoff, hoff, hmask), bytes.
_U32_SEL_HEAD = 16
_U32_KEY_SIZE = 16

TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_BODY = HDR_LEN + TCMSG.size  # 36: where a tc message's attributes start

#: ``encode_tc`` commands: (message type, flags besides NLM_F_REQUEST | NLM_F_ACK).
COMMANDS = {
    "add": (RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL),
    "replace": (RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE),
    "change": (RTM_NEWQDISC, NLM_F_REPLACE),
    "del": (RTM_DELQDISC, 0),
    "add-class": (RTM_NEWTCLASS, NLM_F_CREATE | NLM_F_EXCL),
    "del-class": (RTM_DELTCLASS, 0),
    "add-filter": (RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO),
    "del-filter": (RTM_DELTFILTER, 0),
}


# --------------------------------------------------------------------------- encoding


def encode_tc(command: str, seq: int, **kwarg: object) -> bytes:
    """Encode one tc request with pyroute2 (its tc plugins and request filters); no socket.

    Parameters
    ----------
    command : str
        One of :data:`COMMANDS`: ``add``, ``replace``, ``change``, ``del``, ``add-class``,
        ``del-class``, ``add-filter``, ``del-filter``.
    seq : int
        Sequence number written into the header (patched later on the hot path).
    **kwarg
        What ``IPRoute.tc`` takes: ``kind``, ``index``, ``handle``, ``parent``, rates...

    Returns
    -------
    bytes
        One whole netlink message asking for an ACK.
    """
    # pyroute2 (xtc[net]) is loaded only by whoever encodes tc messages: the daemon never does.
    from pyroute2.iproute.linux import get_arguments_processor
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    msg_type, flags = COMMANDS[command]
    rf = get_arguments_processor("tc", command, dict(kwarg))
    msg = tcmsg()
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | flags
    msg["header"]["sequence_number"] = seq
    msg["header"]["pid"] = 0
    for field in msg.fields:
        msg[field[0]] = rf.get_value(field[0], default=0, mode="field")
    for key, value in rf.items():
        nla = type(msg).name2nla(key)
        if msg.valid_nla(nla) and value is not None:
            msg["attrs"].append([nla, value])
    if "attrs" in rf:
        msg["attrs"].extend(rf["attrs"])
    msg.encode()
    return bytes(msg.data[: msg["header"]["length"]])


def encode_tcmsg(msg_type: int, flags: int, seq: int, ifindex: int, handle: int = 0, parent: int = 0, info: int = 0,
                 attrs: bytes = b"") -> bytes:
    """A tc message written by hand: header, ``struct tcmsg``, then ``attrs`` (encoded attributes)."""
    body = TCMSG.pack(0, ifindex, handle, parent, info) + attrs
    return NLMSGHDR.pack(HDR_LEN + len(body), msg_type, flags, seq, 0) + body


def encode_tbf(command: str, seq: int, *, ifindex: int, handle: int, parent: int, rate_Bps: int, burst: int,
               limit: int) -> bytes:
    """A TBF qdisc message (``command`` as :func:`encode_tc`) at ``rate_Bps`` bytes/s with a bucket of
    ``burst`` bytes and ``limit`` bytes of queue, carrying ``TCA_TBF_BURST`` (and ``TCA_TBF_RATE64``
    above 34 Gb/s: the kernel takes the larger of the two rates)."""
    msg = encode_tc(command, seq, index=ifindex, kind="tbf", handle=handle, parent=parent,
                    rate=min(rate_Bps, U32_MAX), burst=burst, limit=limit)
    msg = append_option(msg, TCA_TBF_BURST, struct.pack("=I", burst))
    if rate_Bps > U32_MAX:
        msg = append_option(msg, TCA_TBF_RATE64, struct.pack("=Q", rate_Bps))
    return msg


def append_option(msg: bytes, atype: int, payload: bytes) -> bytes:
    """Append an attribute inside the message's ``TCA_OPTIONS`` (its last attribute); fix the lengths.

    Raises
    ------
    ValueError
        The message's last attribute is not ``TCA_OPTIONS``.
    """
    last = None
    for t, a, _b in iter_attrs(msg, _BODY, len(msg)):
        last = (t, a - 4)
    if last is None or last[0] != TCA_OPTIONS:
        raise ValueError("no trailing TCA_OPTIONS attribute to extend")
    extra = NLATTR.pack(4 + len(payload), atype) + payload
    extra += b"\0" * (align4(len(extra)) - len(extra))
    out = bytearray(msg) + extra
    at = last[1]
    (olen,) = struct.unpack_from("=H", out, at)
    struct.pack_into("=H", out, at, align4(olen) + len(extra))
    struct.pack_into("=I", out, 0, len(out))
    return bytes(out)


def set_handles(msg: bytearray, seq: int, handle: int, parent: int) -> None:
    """Write a sequence number, a tcmsg handle and parent into an encoded tc message, in place."""
    struct.pack_into("=I", msg, 8, seq)
    struct.pack_into("=II", msg, HDR_LEN + 8, handle, parent)


def without_ack(msg: bytes) -> bytes:
    """``msg`` with ``NLM_F_ACK`` cleared (a batch whose refused messages alone are answered)."""
    m = bytearray(msg)
    struct.pack_into("=H", m, 6, struct.unpack_from("=H", m, 6)[0] & ~NLM_F_ACK)
    return bytes(m)


def set_tbf_rate(msg: bytearray, rate_Bps: int, burst: int) -> None:
    """Write a rate (bytes/s, < 2**32) and a burst (bytes) into an encoded TBF message, in place.

    The kernel's ``tbf_change`` takes the rate from ``tc_tbf_qopt.rate.rate`` and, given
    ``TCA_TBF_BURST``, derives the bucket from the burst; the rate table is read only to detect
    the link layer of a rate spec that does not name it, so the spec is marked Ethernet (the
    table encoded for another rate is then not consulted).

    Raises
    ------
    ValueError
        Not a TBF message with ``TCA_TBF_PARMS`` and ``TCA_TBF_BURST``.
    """
    parms = burst_at = None
    for t, a, b in iter_attrs(msg, _BODY, len(msg)):
        if t == TCA_OPTIONS:
            for nt, na, nb in iter_attrs(msg, a, b):
                if nt == TCA_TBF_PARMS and nb - na >= 36:
                    parms = na
                elif nt == TCA_TBF_BURST and nb - na >= 4:
                    burst_at = na
    if parms is None or burst_at is None:
        raise ValueError("not a TBF message with TCA_TBF_PARMS and TCA_TBF_BURST")
    # struct tc_ratespec: cell_log u8, linklayer u8, overhead u16, cell_align s16, mpu u16, rate u32
    msg[parms + 1] = TC_LINKLAYER_ETHERNET
    struct.pack_into("=I", msg, parms + 8, rate_Bps)
    struct.pack_into("=I", msg, burst_at, burst)


def u32_address_keys(src_packed: bytes, dst_packed: bytes) -> list[str]:
    """u32 keys (value/mask+offset into the IP header, as pyroute2 takes them) matching a source and
    a destination address (packed: 4 bytes each for IPv4, 16 for IPv6)."""
    if len(src_packed) == 4:
        return [f"0x{src_packed.hex()}/0xffffffff+12", f"0x{dst_packed.hex()}/0xffffffff+16"]
    keys = []
    for packed, at in ((src_packed, 8), (dst_packed, 24)):
        for i in range(4):
            keys.append(f"0x{packed[4 * i:4 * i + 4].hex()}/0xffffffff+{at + 4 * i}")
    return keys


def set_u32_filter(msg: bytearray, seq: int, node: int, classid: int, addresses: bytes) -> None:
    """Write a sequence number, a u32 node, a class and the keys' values (``addresses``: the source's
    and the destination's packed bytes, in the order of :func:`u32_address_keys`) into an encoded
    "add u32 filter" message of one flow, in place.

    Raises
    ------
    ValueError
        If the message is not such a filter (no class id, no selector, or not one 32-bit key for
        each 4 bytes of ``addresses``).
    """
    struct.pack_into("=I", msg, 8, seq)
    struct.pack_into("=I", msg, HDR_LEN + 8, node)  # tcmsg handle
    opts = next(((a, b) for t, a, b in iter_attrs(msg, _BODY, len(msg)) if t == TCA_OPTIONS), None)
    if opts is None:
        raise ValueError("not a u32 filter message: no TCA_OPTIONS")
    nested = {t: (a, b) for t, a, b in iter_attrs(msg, *opts)}
    if TCA_U32_CLASSID not in nested or TCA_U32_SEL not in nested:
        raise ValueError("not a u32 filter message: no class id or no selector")
    sel, end = nested[TCA_U32_SEL]
    nkeys = msg[sel + 2]
    if nkeys * 4 != len(addresses) or sel + _U32_SEL_HEAD + nkeys * _U32_KEY_SIZE > end:
        raise ValueError(f"u32 selector has {nkeys} keys for {len(addresses)} address bytes")
    struct.pack_into("=I", msg, nested[TCA_U32_CLASSID][0], classid)
    for i in range(nkeys):  # struct tc_u32_key {__be32 mask; __be32 val; int off; int offmask;}
        at = sel + _U32_SEL_HEAD + i * _U32_KEY_SIZE + 4
        msg[at:at + 4] = addresses[4 * i:4 * i + 4]


def u32_class_change(seq: int, ifindex: int, filter_handle: int, parent: int, prio: int, protocol: int,
                     classid: int) -> bytes:
    """The message pointing an existing u32 filter node at another class (``NLM_F_REPLACE``: the
    node keeps its match)."""
    options = NLATTR.pack(8, TCA_U32_CLASSID) + struct.pack("=I", classid)
    return encode_tcmsg(RTM_NEWTFILTER, NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE, seq, ifindex, filter_handle,
                        parent, (prio << 16) | socket.htons(protocol),
                        _attr_kind("u32") + NLATTR.pack(4 + len(options), TCA_OPTIONS) + options)


def _attr_kind(kind: str) -> bytes:
    data = kind.encode() + b"\0"
    a = NLATTR.pack(4 + len(data), TCA_KIND) + data
    return a + b"\0" * (align4(len(a)) - len(a))


def filter_info(prio: int, protocol: int) -> int:
    """A filter's tcmsg ``info``: its priority and protocol (network byte order)."""
    return (prio << 16) | socket.htons(protocol)


# --------------------------------------------------------------------------- TBF arithmetic


def least_rate_Bps(burst: int, ticks_per_us: float) -> int:
    """The least rate (bytes/s) at which a TBF bucket of ``burst`` bytes fits: TBF's buffer is
    burst/rate in scheduler ticks (``ticks_per_us`` of them a microsecond) as a u32."""
    return math.ceil(burst * 1e6 * ticks_per_us / U32_MAX) + 1


# --------------------------------------------------------------------------- decoding


@dataclass(frozen=True)
class TcObject:
    """One RTM_NEWQDISC/RTM_NEWTCLASS message of a dump."""

    msg_type: int
    ifindex: int
    handle: int
    parent: int
    kind: str
    raw: bytes  # the whole message
    sent_bytes: int = 0
    sent_packets: int = 0
    qlen: int = 0
    backlog: int = 0

    def options_attr(self) -> bytes:
        """The TCA_OPTIONS attribute (header included) as the kernel dumped it, or ``b""``."""
        for atype, a, b in iter_attrs(self.raw, _BODY, len(self.raw)):
            if atype == TCA_OPTIONS:
                return self.raw[a - 4 : b] + b"\0" * (align4(b - a + 4) - (b - a + 4))
        return b""


def _tc_messages(buf: bytes | memoryview, types: tuple[int, ...]) -> Iterator[tuple[int, int, int, tuple[int, ...]]]:
    """``(offset, length, type, tcmsg)`` of each whole message of ``types`` in a dump, ``tcmsg`` its
    header's (family, ifindex, handle, parent, info); its attributes lie from ``offset + _BODY``.

    Raises
    ------
    NetlinkDecodeError
        A message's length runs past the buffer, or one of ``types`` ends before its tcmsg header.
    """
    off, end = 0, len(buf)
    while off + HDR_LEN <= end:
        mlen, mtype, _flags, _seq, _pid = NLMSGHDR.unpack_from(buf, off)
        if mlen < HDR_LEN or off + mlen > end:
            raise NetlinkDecodeError(f"netlink: malformed dump message of {mlen} bytes")
        if mtype in types:
            if mlen < _BODY:
                raise NetlinkDecodeError(f"netlink: malformed tc message of {mlen} bytes (its header needs {_BODY})")
            yield off, mlen, mtype, TCMSG.unpack_from(buf, off + HDR_LEN)
        off += align4(mlen)


def decode_tc_dump(buf: bytes | memoryview) -> list[TcObject]:
    """Decode the qdisc/class messages of a dump (any number of whole messages).

    Counters come from ``TCA_STATS2``: ``TCA_STATS_BASIC`` (bytes, packets; packets from
    ``TCA_STATS_PKT64`` when present) and ``TCA_STATS_QUEUE`` (qlen, backlog).

    Raises
    ------
    NetlinkDecodeError
        A message's length runs past the buffer, or ends before its tcmsg header.
    """
    out: list[TcObject] = []
    for off, mlen, mtype, (_fam, ifindex, handle, parent, _info) in _tc_messages(buf, (RTM_NEWQDISC, RTM_NEWTCLASS)):
        kind = ""
        sb = sp = ql = bl = 0
        for atype, a, b in iter_attrs(buf, off + _BODY, off + mlen):
            if atype == TCA_KIND:
                kind = bytes(buf[a:b]).rstrip(b"\0").decode("ascii", "replace")
            elif atype == TCA_STATS2:
                for stype, c, d in iter_attrs(buf, a, b):
                    if stype == TCA_STATS_BASIC and d - c >= 12:
                        sb, p32 = struct.unpack_from("=QI", buf, c)
                        sp = sp or p32
                    elif stype == TCA_STATS_PKT64 and d - c >= 8:
                        (sp,) = struct.unpack_from("=Q", buf, c)
                    elif stype == TCA_STATS_QUEUE and d - c >= 8:
                        ql, bl = struct.unpack_from("=II", buf, c)
        out.append(TcObject(mtype, ifindex, handle, parent, kind, bytes(buf[off : off + mlen]), sb, sp, ql, bl))
    return out


_CLASS_HEAD = struct.Struct("=IH10x8xII4x")  # nlmsghdr len, type; tcmsg handle, parent
_U32X2 = struct.Struct("=II")
_QI = struct.Struct("=QI")
_U64 = struct.Struct("=Q")


def _class_stats2(buf: bytes | memoryview, qdisc: int) -> Iterator[tuple[int, int, dict[int, tuple[int, int]]]]:
    """Each class of qdisc ``qdisc`` in an RTM_GETTCLASS dump: ``(message offset, class handle,
    {TCA_STATS_* type: (payload offset, payload length)})`` of its TCA_STATS2 attribute."""
    off, end = 0, len(buf)
    head = _CLASS_HEAD.unpack_from
    while off + 36 <= end:
        mlen, mtype, handle, _parent = head(buf, off)
        if mlen < 16 or off + mlen > end:
            raise NetlinkDecodeError(f"netlink: malformed dump message of {mlen} bytes")
        if mtype == RTM_NEWTCLASS and handle & 0xFFFF0000 == qdisc:
            stats: dict[int, tuple[int, int]] = {}
            a, mend = off + 36, off + mlen
            while a + 4 <= mend:
                alen, atype = NLATTR.unpack_from(buf, a)
                if alen < 4:
                    break
                if atype & 0x3FFF == TCA_STATS2:
                    c, cend = a + 4, a + alen
                    while c + 4 <= cend:
                        slen, stype = NLATTR.unpack_from(buf, c)
                        if slen < 4:
                            break
                        stats[stype] = (c + 4, slen - 4)
                        c += (slen + 3) & ~3
                    break
                a += (alen + 3) & ~3
            yield off, handle, stats
        off += (mlen + 3) & ~3


def decode_class_counters(buf: bytes | memoryview, qdisc: int) -> dict[int, tuple[int, int, int, int]]:
    """The counters of the classes of qdisc ``qdisc`` (its handle, ``major:0``) in an RTM_GETTCLASS
    dump.

    Returns
    -------
    dict
        ``{class handle: (sent bytes, sent packets, backlog bytes, backlog packets)}``.

    Raises
    ------
    NetlinkDecodeError
        A message's length runs past the buffer.
    """
    out = {}
    for _off, handle, st in _class_stats2(buf, qdisc):
        sb = sp = ql = bl = 0
        at, n = st.get(TCA_STATS_BASIC, (0, 0))
        if n >= 12:
            sb, sp = _QI.unpack_from(buf, at)
        at, n = st.get(TCA_STATS_PKT64, (0, 0))
        if n >= 8:
            (sp,) = _U64.unpack_from(buf, at)
        at, n = st.get(TCA_STATS_QUEUE, (0, 0))
        if n >= 8:
            ql, bl = _U32X2.unpack_from(buf, at)
        out[handle] = (sb, sp, bl, ql)
    return out


def class_counter_words(buf: bytes | memoryview, qdisc: int) -> dict[int, tuple[int, int, int]]:
    """Where the counters of each class of qdisc ``qdisc`` lie in an RTM_GETTCLASS dump, in 32-bit
    words from the start: ``{class handle: (handle word, sent-bytes word (u64, two words),
    qlen word (backlog bytes follow))}``; -1 for a counter the class has not.

    The kernel lays a device's class dump out the same way each time while its classes and their
    attributes stay (the counters change, not their places), so :class:`ClassCounterTable` decodes
    the next dumps by these offsets alone.
    """
    out = {}
    for off, handle, st in _class_stats2(buf, qdisc):
        basic, queue = st.get(TCA_STATS_BASIC, (0, 0)), st.get(TCA_STATS_QUEUE, (0, 0))
        out[handle] = ((off + 24) // 4, basic[0] // 4 if basic[1] >= 12 else -1,
                       queue[0] // 4 if queue[1] >= 8 else -1)
    return out


class ClassCounterTable:
    """Decodes the sent bytes and queue of given classes from RTM_GETTCLASS dumps by precomputed
    word offsets (numpy gathers: no per-class Python), re-learning the offsets when a dump's length
    or a class handle at its offset differs from the last layout.

    Parameters
    ----------
    handles : sequence of int
        The classes wanted, in the order of the arrays returned.
    qdisc : int
        Their qdisc's handle (``major:0``).
    """

    def __init__(self, handles: Iterable[int], qdisc: int) -> None:
        self.handles = np.asarray(list(handles), dtype=np.uint32)
        self.qdisc = qdisc
        self.length = -1
        self.relearned = 0

    def _learn(self, buf: bytes | memoryview) -> None:
        words = class_counter_words(buf, self.qdisc)
        rows = []
        for h in self.handles.tolist():
            w = words.get(h)
            if w is None or w[1] < 0 or w[2] < 0:
                raise NetlinkDecodeError(f"class {h >> 16:x}:{h & 0xFFFF:x} missing from the dump (or without counters)")
            rows.append(w)
        idx = np.array(rows, dtype=np.intp).reshape(-1, 3)
        n = len(idx)
        self._idx = np.concatenate([idx[:, 0], idx[:, 1], idx[:, 1] + 1, idx[:, 2], idx[:, 2] + 1])
        self._n = n
        self.length = len(buf)
        self.relearned += 1

    def decode(self, buf: bytes | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(sent_bytes, backlog_bytes, backlog_packets)``, int64 arrays in the order of ``handles``.

        Raises
        ------
        NetlinkDecodeError
            A class is missing from the dump, or has no counters.
        """
        if len(buf) % 4:
            buf = bytes(buf) + bytes(4 - len(buf) % 4)
        if len(buf) != self.length:
            self._learn(buf)
        n = self._n
        v = np.frombuffer(buf, dtype="<u4")[self._idx].astype(np.int64)  # one gather
        if (v[:n] != self.handles).any():
            self._learn(buf)
            v = np.frombuffer(buf, dtype="<u4")[self._idx].astype(np.int64)
        return v[n : 2 * n] | (v[2 * n : 3 * n] << 32), v[4 * n :], v[3 * n : 4 * n]


def root_counter_offsets(buf: bytes | bytearray, off: int, mlen: int) -> tuple[int, int]:
    """Offsets (from the message's start) of the sent bytes (u64) and of the queue length and
    backlog (two u32) in one RTM_NEWQDISC message's TCA_STATS2.

    Raises
    ------
    NetlinkDecodeError
        The message has no byte or no queue counters.
    """
    basic = queue = -1
    for atype, a, b in iter_attrs(buf, off + _BODY, off + mlen):
        if atype == TCA_STATS2:
            for stype, c, d in iter_attrs(buf, a, b):
                if stype == TCA_STATS_BASIC and d - c >= 8:
                    basic = c - off
                elif stype == TCA_STATS_QUEUE and d - c >= 8:
                    queue = c - off
    if basic < 0 or queue < 0:
        raise NetlinkDecodeError("netlink: root qdisc without byte or queue counters")
    return basic, queue


def qdisc_counters(buf: bytes | bytearray, off: int, at: tuple[int, int]) -> tuple[int, int, int]:
    """``(sent bytes, queue length, backlog bytes)`` of the qdisc message at ``off`` whose counters
    lie at ``at`` (:func:`root_counter_offsets`)."""
    (sent,) = _U64.unpack_from(buf, off + at[0])
    qlen, backlog = _U32X2.unpack_from(buf, off + at[1])
    return sent, qlen, backlog


# --------------------------------------------------------------------------- TBF read-back (early drop)

#: struct tc_tbf_qopt: rate and peakrate (struct tc_ratespec: cell_log, linklayer, overhead,
#: cell_align, mpu, rate), then limit, buffer (ticks), mtu.
_TBF_QOPT = struct.Struct("=BBHhHI BBHhHI III")


def tbf_parameters(raw: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(rate bytes/s, buffer in scheduler ticks)`` of one dumped TBF qdisc message (the 64-bit
    rate when the message has it); None when it has no TBF parameters."""
    qopt = rate64 = None
    for t, a, b in iter_attrs(raw, _BODY, len(raw)):
        if t == TCA_OPTIONS:
            for nt, na, nb in iter_attrs(raw, a, b):
                if nt == TCA_TBF_PARMS and nb - na >= _TBF_QOPT.size:
                    qopt = _TBF_QOPT.unpack_from(raw, na)
                elif nt == TCA_TBF_RATE64 and nb - na >= 8:
                    (rate64,) = struct.unpack_from("=Q", raw, na)
    if qopt is None:
        return None
    return max(qopt[5], rate64 or 0), qopt[13]


_TC_HEAD = struct.Struct("=IH10x4xiII")  # nlmsghdr len, type; tcmsg ifindex, handle, parent


def _root_layout(buf: bytes | bytearray | memoryview, off: int, mlen: int) -> tuple[bytes, int]:
    """The kind and the offset (from the message's start) of the drop counter of one qdisc message
    (-1: no queue statistics)."""
    kind, at = b"", -1
    for atype, a, b in iter_attrs(buf, off + _BODY, off + mlen):
        if atype == TCA_KIND:
            kind = bytes(buf[a:b]).rstrip(b"\0")
        elif atype == TCA_STATS2:
            for st, c, d in iter_attrs(buf, a, b):
                if st == TCA_STATS_QUEUE and d - c >= 12:
                    at = c + 8 - off
    return kind, at


def root_drops(buf: bytes | bytearray | memoryview, handle: int, kind: str) -> dict[int, int]:
    """``{ifindex: packets dropped}`` of every root qdisc of ``handle`` and ``kind`` in a qdisc dump
    (early drop's limiters: one dump a period for all of them).  A later message for an ifindex
    overrides an earlier one (a leftover of an abandoned dump comes first).

    Only those messages are looked at further, and by a layout learnt once per message length (the
    kind's and the drop counter's offsets, checked on every message: the kind's bytes and the
    counter's attribute header; a message that does not fit is parsed in full): 2,400 limiters'
    counters in a few milliseconds rather than 40 (parsing each message's attributes).

    Raises
    ------
    NetlinkDecodeError
        A message's length runs past the buffer.
    """
    out: dict[int, int] = {}
    want = kind.encode("ascii")
    kind_attr = struct.pack("=HH", 4 + len(want) + 1, TCA_KIND) + want + b"\0"
    layouts: dict[int, int] = {}  # message length -> offset of the drop counter (-1: none)
    off, end = 0, len(buf)
    head = _TC_HEAD.unpack_from
    u32 = _U32.unpack_from
    hh = _U16X2.unpack_from
    while off + _BODY <= end:
        mlen, mtype, ifindex, h, parent = head(buf, off)
        if mlen < HDR_LEN or off + mlen > end:
            raise NetlinkDecodeError(f"netlink: malformed dump message of {mlen} bytes")
        if mtype == RTM_NEWQDISC and h == handle and parent == TC_H_ROOT:
            at = layouts.get(mlen)
            # TCA_KIND is the first attribute of a qdisc message; the counter sits in TCA_STATS_QUEUE
            fits = (at is not None and buf[off + _BODY: off + _BODY + len(kind_attr)] == kind_attr
                    and (at < 0 or hh(buf, off + at - 12)[1] == TCA_STATS_QUEUE))
            if not fits:
                found, at = _root_layout(buf, off, mlen)
                if found != want:
                    off += align4(mlen)
                    continue
                if buf[off + _BODY: off + _BODY + len(kind_attr)] == kind_attr and (
                        at < 0 or hh(buf, off + at - 12)[1] == TCA_STATS_QUEUE):
                    layouts[mlen] = at
            out[ifindex] = u32(buf, off + at)[0] if at >= 0 else 0
        off += align4(mlen)
    return out


_U32X3 = struct.Struct("=III")
_U32 = struct.Struct("=I")
_U16X2 = struct.Struct("=HH")


def queue_drops(raw: bytes | bytearray | memoryview) -> int:
    """Packets a dumped qdisc dropped (``TCA_STATS2``/``TCA_STATS_QUEUE``, struct gnet_stats_queue:
    qlen, backlog, drops, ...); 0 when the message carries no queue statistics."""
    for t, a, b in iter_attrs(raw, _BODY, len(raw)):
        if t == TCA_STATS2:
            for st, c, d in iter_attrs(raw, a, b):
                if st == TCA_STATS_QUEUE and d - c >= 12:
                    return struct.unpack_from("=III", raw, c)[2]
    return 0


# --------------------------------------------------------------------------- clsact and cls_bpf
# Early drop's eBPF limiter (xtc.host.bpflimiter): a clsact qdisc and a cls_bpf filter on its egress.

#: clsact's parent and handle (the same as ingress's: a device has one or the other), and its two hooks.
TC_H_CLSACT = 0xFFFF_FFF1
CLSACT_HANDLE = 0xFFFF_0000
CLSACT_INGRESS, CLSACT_EGRESS = 0xFFFF_FFF2, 0xFFFF_FFF3
RTM_GETTFILTER = 46
# linux/pkt_cls.h: TCA_BPF_*
TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS, TCA_BPF_ID = 6, 7, 8, 11
TCA_BPF_FLAG_ACT_DIRECT = 1


def encode_clsact(command: str, seq: int, ifindex: int) -> bytes:
    """Add (``"add"``: fails with ``EEXIST`` when the device has a clsact or an ingress qdisc) or
    delete (``"del"``) the clsact qdisc of ``ifindex``."""
    msg_type, flags = {"add": (RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL), "del": (RTM_DELQDISC, 0)}[command]
    return encode_tcmsg(msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, seq, ifindex, CLSACT_HANDLE, TC_H_CLSACT,
                        attrs=attr_str(TCA_KIND, "clsact"))


def encode_bpf_filter(seq: int, *, ifindex: int, parent: int, prio: int, handle: int, prog_fd: int, name: str) -> bytes:
    """A direct-action ``cls_bpf`` filter of program ``prog_fd`` named ``name`` on ``parent`` (a clsact
    hook) at ``prio``/``handle``, all protocols; created, or its program and name replaced when a
    filter of that handle is there (``NLM_F_CREATE`` without ``NLM_F_EXCL``)."""
    opts = (attr(TCA_BPF_FD, struct.pack("=I", prog_fd)) + attr_str(TCA_BPF_NAME, name)
            + attr(TCA_BPF_FLAGS, struct.pack("=I", TCA_BPF_FLAG_ACT_DIRECT)))
    return encode_tcmsg(RTM_NEWTFILTER, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, seq, ifindex, handle, parent,
                        filter_info(prio, ETH_P_ALL), attr_str(TCA_KIND, "bpf") + attr(TCA_OPTIONS, opts))


def encode_filter_delete(seq: int, *, ifindex: int, parent: int, prio: int, handle: int, kind: str,
                         protocol: int = ETH_P_ALL) -> bytes:
    """Delete the filter ``handle`` of ``kind`` at ``prio`` on ``parent``."""
    return encode_tcmsg(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, seq, ifindex, handle, parent,
                        filter_info(prio, protocol), attr_str(TCA_KIND, kind))


@dataclass(frozen=True)
class TcFilter:
    """One filter of a filter dump: where it is, its kind, and a cls_bpf filter's name and program id."""

    ifindex: int
    parent: int
    handle: int
    prio: int
    protocol: int  # host byte order
    kind: str
    bpf_name: str = ""
    bpf_prog_id: int = 0


def decode_filters(buf: bytes | memoryview) -> list[TcFilter]:
    """The filters of an ``RTM_GETTFILTER`` dump (a priority's head message, handle 0, included).

    Raises
    ------
    NetlinkDecodeError
        A message's length runs past the buffer, or ends before its tcmsg header.
    """
    out: list[TcFilter] = []
    for off, mlen, _mtype, (_fam, ifindex, handle, parent, info) in _tc_messages(buf, (RTM_NEWTFILTER,)):
        kind, name, prog_id = "", "", 0
        for atype, a, b in iter_attrs(buf, off + _BODY, off + mlen):
            if atype == TCA_KIND:
                kind = bytes(buf[a:b]).rstrip(b"\0").decode("ascii", "replace")
            elif atype == TCA_OPTIONS:
                for ot, c, d in iter_attrs(buf, a, b):
                    if ot == TCA_BPF_NAME:
                        name = bytes(buf[c:d]).rstrip(b"\0").decode("ascii", "replace")
                    elif ot == TCA_BPF_ID and d - c >= 4:
                        (prog_id,) = struct.unpack_from("=I", buf, c)
        out.append(TcFilter(ifindex, parent, handle, info >> 16, socket.ntohs(info & 0xFFFF), kind, name, prog_id))
    return out
