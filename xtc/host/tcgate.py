"""The XCo gate on a real uplink: stock Linux queueing (HTB + TBF + u32) over netlink.

:class:`TcGate` implements :class:`xtc.host.gate.Gate`.  The tree it puts on the uplink::

    root  htb 7c0:   (default class 7c0:1)
      7c0:1    htb class, rate = ceil = link      -> pfifo 1001:   unknown flows, ICMP, wake frames
      7c0:N    htb class, rate = ceil = link      -> tbf   (0x1000+N):   one per destination host (N >= 2)
      7c0:M    htb class, rate = ceil = link      -> (default pfifo):  one per small flow (unheld)

Filters on ``7c0:`` (u32): prio 1 sends IPv4 protocol 1 (ICMP) and prio 2 IPv6 next header 58
(ICMPv6, without extension headers) to ``7c0:1``; with ``pass_tcp_control`` (the default) prio 3
and 4 send TCP packets shorter than :data:`TCP_CONTROL_BYTES` (pure ACKs, SYN, FIN, RST) there
too, so that holding a flow never holds the acknowledgements of the opposite flow; prio 10 (IPv4, Ethernet protocol 0x0800) and
prio 11 (IPv6, 0x86DD) hold one filter per VM-to-VM flow matching its source AND destination
address.  A flow starts *small*: its filter points at a class of its own, never held, whose
counters say how much it has sent; :meth:`TcGate.move_to_dest` (the agent calls it when the flow
has sent more than its small-flow threshold) points the filter at the class of the flow's
destination host instead (``RTM_NEWTFILTER`` with ``NLM_F_REPLACE``: the u32 node keeps its
match) and deletes the flow's own class (packets still queued there for the link, if any, are
dropped with it).  One class per destination for the large flows (not per flow) keeps a
timeslice turn at two TBF changes and one drain, and the counter dump at one class per
destination (plus the small flows), whatever the number of VMs.

A destination's state is its TBF leaf's parameters: ``OPEN`` = the link rate with a burst of
``open_burst_bytes``; ``CLOSED`` = a few bytes per second (``closed_rate_bps``) with a burst of
``closed_burst_bytes`` (one whole frame, MTU + 18: TBF drops packets bigger than its burst, so it
cannot be smaller); a rate limit = that rate with a burst of ``max(closed_burst_bytes,
rate_burst_us at the rate)`` (1 ms by default).  Every TBF change refills the bucket, so closing a class lets up to
``closed_burst_bytes`` through after it closes (one full-size packet, or several small ones: on
a paced flow whose queue is empty at the close, they left 1-2 ms later, in someone else's slot).
So right after a close :meth:`TcGate.set_states` sends *drain frames* into the class: frames
of the device's MTU from the packet socket, IP from the source to the destination of the class's
first flow,
protocol 253, TTL 1, to the locally administered MAC of the wake frames (the peer drops them);
they take the refilled tokens (or, behind held packets, wait in the queue and leave at the next
open).  ``drain_on_close=False`` turns this off.  A TBF change does not wake the device, so after every change :meth:`TcGate.set_states` sends one 60-byte frame (Ethernet type 0x88B5,
local experimental, to the locally administered MAC ``02:00:00:00:07:c0``) out of the uplink; it
goes through the default class and the peer drops it.

The root's handle ``7c0:`` is how :func:`cleanup` recognises what a killed gate left behind: an
HTB root with that handle is removed, which gives the device its kernel default qdisc back
(``noqueue`` on veth and bridge ports, ``pfifo_fast``/``mq`` on NICs); the original options are
only known to the gate that recorded them (:meth:`TcGate.restore`).

Messages are encoded by pyroute2 (its tc plugins and request filters: :func:`encode_tc`), once
per kind of message (the class, the TBF leaf OPEN and CLOSED, one TBF leaf for every rate, a
flow's u32 filter per address family), then copied with the handle, parent and sequence number
patched (and a rate's rate and burst written in: :func:`_set_tbf_rate`; a flow's node, class and
addresses: :func:`_set_u32_filter`), so that after :meth:`TcGate.install` neither add_dest nor add_flow waits for
pyroute2's encoders (0.2-1 ms each); pyroute2 has no ``TCA_TBF_BURST``, which is appended here (without
it the kernel derives the largest packet from the buffer in ticks, and a closed leaf drops every
packet).  They go out on a raw ``NETLINK_ROUTE`` socket this module owns.  The hot path
(:meth:`TcGate.set_states`) sends the cached TBF "change" messages of every changed destination in one
``send`` (the batch itself cached per change set), without ``NLM_F_ACK``: the kernel has applied
them when ``send`` returns and has queued an error message for each refused one only; it sends
the wake frame (and drain frames), then reads the errors already queued and names the destination of
each (with the kernel's extended-ACK text).  Stats are one ``RTM_GETTCLASS`` dump of the root's
classes, decoded here (:func:`decode_class_counters`: each HTB class's bytes/packets sent, and
its leaf's queue length and backlog); :meth:`TcGate.counters` (the agent's poll) decodes the same
dump by word offsets learnt once (:class:`CounterTable`) into arrays.  :meth:`TcGate.quiet` (asked
before a poll's dump while the last found nothing queued) reads the HTB root alone, one
``RTM_GETQDISC`` with ``NLM_F_ECHO``: nothing queued under it and few bytes let out since the last
dump, and the dump can be skipped.

Measured on this 2-core host with one class per flow (the shape before), shared and loaded (load
average 7-9; ``python -m xtc_lab.xco.gate_bench``, 64 classes, veth): class + filter set-up p50
0.3-0.5 ms (p99 9-19 ms); a one-class set_states 12-16 us p50, 64 changes in one call 0.32-0.44 ms
(5-7 us each); stats 0.3-0.46 ms; directive to the first packet out p50 36-46 us, p99 0.11 ms in
the quieter runs and 9-15 ms when other work held the CPU or the rtnl lock.

With ``netns``, the sockets are opened inside ``/run/netns/<netns>`` (a helper thread enters it
with ``setns``), so every operation happens there.

Public API
----------
TcGate(ifname, *, link_bps, netns=None, ...)  (install, add_dest, add_flow, move_to_dest, set_states,
    counters, quiet, stats, restore, close)
cleanup(ifname, netns=None) -> bool
ROOT_HANDLE
"""

from __future__ import annotations

import errno as _errno
import fcntl
import ipaddress
import math
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from xtc.host.netns import NETNS_DIR, NetnsOpenError, run_in_netns
from .gate import CLOSED, OPEN, DestStats, Flow, GateError

__all__ = [
    "DEFAULT_CLASS",
    "ROOT_HANDLE",
    "WAKE_ETHERTYPE",
    "CounterTable",
    "TcGate",
    "class_counter_words",
    "cleanup",
    "decode_class_counters",
    "decode_class_dump",
    "default_open_burst_bytes",
    "drain_frame",
    "encode_tc",
    "link_gso_max_segs",
]

#: Handle of our root HTB qdisc (major 0x7c0): how :func:`cleanup` recognises it.
ROOT_HANDLE = 0x07C0_0000
#: The default (unheld) class: unknown flows, ICMP, wake frames.
DEFAULT_CLASS = ROOT_HANDLE | 1
_LEAF_MAJOR_BASE = 0x1000  # leaf qdisc of class 7c0:N is (0x1000 + N):
_FIRST_CLASS_MINOR = 2
_MAX_CLASS_MINOR = 0x0FFF  # leaf majors 0x1000 + minor stay below 0x2000
_MAX_FILTER_NODE = 0x0FFF  # u32 node ids are 12 bits
#: Ethernet type of the wake frame (IEEE local experimental 1).
WAKE_ETHERTYPE = 0x88B5
_WAKE_DST = bytes.fromhex("0200000007c0")
_PRIO_ICMP4, _PRIO_ICMP6, _PRIO_FLOW4, _PRIO_FLOW6 = 1, 2, 10, 11
_PRIO_TCP_CONTROL4, _PRIO_TCP_CONTROL6 = 3, 4
#: TCP packets shorter than this, bytes (IPv4 total length, IPv6 payload length; a power of two,
#: matched by a mask), go to the default class with ``pass_tcp_control``: pure ACKs, SYN, FIN,
#: RST (40-92 bytes with options).  Data segments are longer than that.
TCP_CONTROL_BYTES = 128
ETH_P_IP, ETH_P_IPV6, ETH_P_ALL = 0x0800, 0x86DD, 0x0003
TC_H_ROOT = 0xFFFF_FFFF

# linux/netlink.h, linux/rtnetlink.h
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_ECHO = 0x1, 0x2, 0x4, 0x8
NLM_F_DUMP = 0x300
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE = 0x100, 0x200, 0x400
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER = 44, 45
TCA_KIND, TCA_OPTIONS, TCA_STATS2 = 1, 2, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
TCA_TBF_RATE64 = 4
TCA_TBF_BURST = 6
#: The kernel's largest ``gso_max_segs`` (``GSO_MAX_SEGS``).
_GSO_MAX_SEGS = 65535
#: The fastest rate a gate takes, bits/s (10 Tb/s; the kernel's 64-bit rates).  A TBF's 32-bit rate
#: field ends at 34 Gb/s: above it the rate goes in ``TCA_TBF_RATE64`` (HTB's in ``TCA_HTB_RATE64``).
MAX_RATE_BPS = 10**13
_U32_MAX = 2**32 - 1
TCA_U32_CLASSID, TCA_U32_SEL = 1, 5
#: struct tc_u32_sel before its keys (flags, offshift, nkeys, pad, offmask, off, offoff, hoff, hmask), bytes.
_U32_SEL_HEAD = 16
_U32_KEY_SIZE = 16
_SIOCGIFMTU = 0x8921
SOL_NETLINK, NETLINK_CAP_ACK, NETLINK_EXT_ACK = 270, 10, 11
NLMSGERR_ATTR_MSG = 1

_NLMSGHDR = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_NLATTR = struct.Struct("=HH")
_SEQ = struct.Struct("=I")
_LEN_TYPE = struct.Struct("=IH")
_ERR = struct.Struct("=i")

_COMMANDS = {
    "add": (RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL),
    "replace": (RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE),
    "change": (RTM_NEWQDISC, NLM_F_REPLACE),
    "del": (RTM_DELQDISC, 0),
    "add-class": (RTM_NEWTCLASS, NLM_F_CREATE | NLM_F_EXCL),
    "del-class": (RTM_DELTCLASS, 0),
    "add-filter": (RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ECHO),
    "del-filter": (RTM_DELTFILTER, 0),
}


def _align4(n: int) -> int:
    return (n + 3) & ~3


# --------------------------------------------------------------------------- encoding


def encode_tc(command: str, seq: int, **kwarg: object) -> bytes:
    """Encode one tc request with pyroute2 (its tc plugins and request filters); no socket.

    Parameters
    ----------
    command : str
        One of ``add``, ``replace``, ``change``, ``del``, ``add-class``, ``del-class``,
        ``add-filter``, ``del-filter``.
    seq : int
        Sequence number written into the header (patched later on the hot path).
    **kwarg
        What ``IPRoute.tc`` takes: ``kind``, ``index``, ``handle``, ``parent``, rates...

    Returns
    -------
    bytes
        One whole netlink message asking for an ACK.
    """
    from pyroute2.iproute.linux import get_arguments_processor
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    msg_type, flags = _COMMANDS[command]
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


def _ext_ack_text(buf: Any, off: int, mlen: int) -> str:
    """The kernel's message in the ``NLMSG_ERROR`` at ``off`` (``mlen`` bytes), "" if none: with
    ``NETLINK_CAP_ACK`` only the request's header follows the error code, then the ext-ack TLVs."""
    for atype, a, b in _attrs(buf, off + 20 + 16, off + mlen):
        if atype == NLMSGERR_ATTR_MSG:
            return bytes(buf[a:b]).rstrip(b"\0").decode("utf-8", "replace")
    return ""


def _append_option(msg: bytes, atype: int, payload: bytes) -> bytes:
    """Append an attribute inside the message's TCA_OPTIONS (its last attribute); fix the lengths.

    pyroute2's TBF encoder has no ``TCA_TBF_BURST``; without it the kernel derives the largest
    packet from the buffer in ticks, which at a few bytes per second drops every packet.
    """
    start = _NLMSGHDR.size + _TCMSG.size
    last = None
    for t, a, _b in _attrs(msg, start, len(msg)):
        last = (t, a - 4)
    if last is None or last[0] != TCA_OPTIONS:
        raise ValueError("no trailing TCA_OPTIONS attribute to extend")
    extra = _NLATTR.pack(4 + len(payload), atype) + payload
    extra += b"\0" * (_align4(len(extra)) - len(extra))
    out = bytearray(msg) + extra
    at = last[1]
    (olen,) = struct.unpack_from("=H", out, at)
    struct.pack_into("=H", out, at, _align4(olen) + len(extra))
    struct.pack_into("=I", out, 0, len(out))
    return bytes(out)


def _set_u32_filter(msg: bytearray, seq: int, node: int, classid: int, addresses: bytes) -> None:
    """Write a sequence number, a u32 node, a class and the keys' values (``addresses``: the source's
    and the destination's packed bytes, in the order of :func:`_u32_keys`) into an encoded "add u32
    filter" message of one flow, in place.

    Raises
    ------
    ValueError
        If the message is not such a filter (no class id, no selector, or not one 32-bit key for
        each 4 bytes of ``addresses``).
    """
    _SEQ.pack_into(msg, 8, seq)
    struct.pack_into("=I", msg, _NLMSGHDR.size + 8, node)  # tcmsg handle
    opts = next(((a, b) for t, a, b in _attrs(msg, _NLMSGHDR.size + _TCMSG.size, len(msg)) if t == TCA_OPTIONS), None)
    if opts is None:
        raise ValueError("not a u32 filter message: no TCA_OPTIONS")
    nested = {t: (a, b) for t, a, b in _attrs(msg, *opts)}
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


#: The rate the rate template is encoded with (:meth:`TcGate._tbf`; any rate below 34 Gb/s would do).
_RATE_TEMPLATE_BPS = 8_000_000
_TCA_TBF_PARMS = 1
_TC_LINKLAYER_ETHERNET = 1


def _set_tbf_rate(msg: bytearray, rate_Bps: int, burst: int) -> None:
    """Write a rate (bytes/s, < 2**32) and a burst (bytes) into an encoded TBF message, in place.

    The kernel's ``tbf_change`` takes the rate from ``tc_tbf_qopt.rate.rate`` and, given
    ``TCA_TBF_BURST``, derives the bucket from the burst; the rate table is read only to detect
    the link layer of a rate spec that does not name it, so the spec is marked Ethernet (the
    table encoded for another rate is then not consulted).
    """
    start = _NLMSGHDR.size + _TCMSG.size
    parms = burst_at = None
    for t, a, b in _attrs(msg, start, len(msg)):
        if t == TCA_OPTIONS:
            for nt, na, nb in _attrs(msg, a, b):
                if nt == _TCA_TBF_PARMS and nb - na >= 36:
                    parms = na
                elif nt == TCA_TBF_BURST and nb - na >= 4:
                    burst_at = na
    if parms is None or burst_at is None:
        raise ValueError("not a TBF message with TCA_TBF_PARMS and TCA_TBF_BURST")
    # struct tc_ratespec: cell_log u8, linklayer u8, overhead u16, cell_align s16, mpu u16, rate u32
    msg[parms + 1] = _TC_LINKLAYER_ETHERNET
    struct.pack_into("=I", msg, parms + 8, rate_Bps)
    struct.pack_into("=I", msg, burst_at, burst)


def _encode_plain(msg_type: int, flags: int, seq: int, ifindex: int, handle: int = 0, parent: int = 0, info: int = 0,
                  attrs: bytes = b"") -> bytes:
    body = _TCMSG.pack(0, ifindex, handle, parent, info) + attrs
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body


def _attrs(buf: bytes | memoryview, off: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(type, payload start, payload end) of each attribute in ``buf[off:end]``."""
    while off + 4 <= end:
        alen, atype = _NLATTR.unpack_from(buf, off)
        if alen < 4 or off + alen > end:
            break
        yield atype & 0x3FFF, off + 4, off + alen
        off += _align4(alen)


def _messages(buf: bytearray, n: int) -> Iterator[tuple[int, int, int, int]]:
    """(offset, length, type, sequence number) of each netlink message in ``buf[:n]``, up to the
    first with a length shorter than a header."""
    off = 0
    while off + 16 <= n:
        mlen, mtype, _flags, seq, _pid = _NLMSGHDR.unpack_from(buf, off)
        if mlen < 16:
            return
        yield off, mlen, mtype, seq
        off += _align4(mlen)


@dataclass(frozen=True)
class _TcObject:
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
        start = _NLMSGHDR.size + _TCMSG.size
        for atype, a, b in _attrs(self.raw, start, len(self.raw)):
            if atype == TCA_OPTIONS:
                return self.raw[a - 4 : b] + b"\0" * (_align4(b - a + 4) - (b - a + 4))
        return b""


def decode_class_dump(buf: bytes | memoryview) -> list[_TcObject]:
    """Decode the qdisc/class messages of a dump (any number of whole messages).

    Counters come from ``TCA_STATS2``: ``TCA_STATS_BASIC`` (bytes, packets; packets from
    ``TCA_STATS_PKT64`` when present) and ``TCA_STATS_QUEUE`` (qlen, backlog).
    """
    out: list[_TcObject] = []
    off, end = 0, len(buf)
    while off + _NLMSGHDR.size <= end:
        mlen, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, off)
        if mlen < _NLMSGHDR.size or off + mlen > end:
            raise GateError(f"netlink: malformed dump message of {mlen} bytes")
        if mtype in (RTM_NEWQDISC, RTM_NEWTCLASS):
            body = off + _NLMSGHDR.size
            _fam, ifindex, handle, parent, _info = _TCMSG.unpack_from(buf, body)
            kind = ""
            sb = sp = ql = bl = 0
            for atype, a, b in _attrs(buf, body + _TCMSG.size, off + mlen):
                if atype == TCA_KIND:
                    kind = bytes(buf[a:b]).rstrip(b"\0").decode("ascii", "replace")
                elif atype == TCA_STATS2:
                    for stype, c, d in _attrs(buf, a, b):
                        if stype == TCA_STATS_BASIC and d - c >= 12:
                            sb, p32 = struct.unpack_from("=QI", buf, c)
                            sp = sp or p32
                        elif stype == TCA_STATS_PKT64 and d - c >= 8:
                            (sp,) = struct.unpack_from("=Q", buf, c)
                        elif stype == TCA_STATS_QUEUE and d - c >= 8:
                            ql, bl = struct.unpack_from("=II", buf, c)
            out.append(_TcObject(mtype, ifindex, handle, parent, kind, bytes(buf[off : off + mlen]), sb, sp, ql, bl))
        off += _align4(mlen)
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
            raise GateError(f"netlink: malformed dump message of {mlen} bytes")
        if mtype == RTM_NEWTCLASS and handle & 0xFFFF0000 == qdisc:
            stats: dict[int, tuple[int, int]] = {}
            a, mend = off + 36, off + mlen
            while a + 4 <= mend:
                alen, atype = _NLATTR.unpack_from(buf, a)
                if alen < 4:
                    break
                if atype & 0x3FFF == TCA_STATS2:
                    c, cend = a + 4, a + alen
                    while c + 4 <= cend:
                        slen, stype = _NLATTR.unpack_from(buf, c)
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
    dump: the hot path of :meth:`TcGate.stats`.

    Returns
    -------
    dict
        ``{class handle: (sent bytes, sent packets, backlog bytes, backlog packets)}``.
    """
    out = {}
    for _off, handle, st in _class_stats2(buf, qdisc):
        sb = sp = ql = bl = 0
        at, n = st.get(TCA_STATS_BASIC, (0, 0))
        if n >= 12:
            sb, sp = _QI.unpack_from(buf, at)
        at, n = st.get(TCA_STATS_PKT64, (0, 0))
        if n >= 8:
            (sp,) = struct.unpack_from("=Q", buf, at)
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
    attributes stay (the counters change, not their places), so :class:`CounterTable` decodes
    the next dumps by these offsets alone.
    """
    out = {}
    for off, handle, st in _class_stats2(buf, qdisc):
        basic, queue = st.get(TCA_STATS_BASIC, (0, 0)), st.get(TCA_STATS_QUEUE, (0, 0))
        out[handle] = ((off + 24) // 4, basic[0] // 4 if basic[1] >= 12 else -1,
                       queue[0] // 4 if queue[1] >= 8 else -1)
    return out


class CounterTable:
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

    def _learn(self, buf: bytes) -> None:
        words = class_counter_words(buf, self.qdisc)
        rows = []
        for h in self.handles.tolist():
            w = words.get(h)
            if w is None or w[1] < 0 or w[2] < 0:
                raise GateError(f"class {h >> 16:x}:{h & 0xFFFF:x} missing from the dump (or without counters)")
            rows.append(w)
        idx = np.array(rows, dtype=np.intp).reshape(-1, 3)
        n = len(idx)
        self._idx = np.concatenate([idx[:, 0], idx[:, 1], idx[:, 1] + 1, idx[:, 2], idx[:, 2] + 1])
        self._n = n
        self.length = len(buf)
        self.relearned += 1

    def decode(self, buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(sent_bytes, backlog_bytes, backlog_packets)``, int64 arrays in the order of ``handles``."""
        if len(buf) % 4:
            buf = buf + bytes(4 - len(buf) % 4)
        if len(buf) != self.length:
            self._learn(buf)
        n = self._n
        v = np.frombuffer(buf, dtype="<u4")[self._idx].astype(np.int64)  # one gather
        if (v[:n] != self.handles).any():
            self._learn(buf)
            v = np.frombuffer(buf, dtype="<u4")[self._idx].astype(np.int64)
        return v[n : 2 * n] | (v[2 * n : 3 * n] << 32), v[4 * n :], v[3 * n : 4 * n]


def _root_counter_offsets(buf: bytes | bytearray, off: int, mlen: int) -> tuple[int, int]:
    """Offsets (from the message's start) of the sent bytes (u64) and of the queue length and
    backlog (two u32) in one RTM_NEWQDISC message's TCA_STATS2."""
    basic = queue = -1
    for atype, a, b in _attrs(buf, off + 36, off + mlen):
        if atype == TCA_STATS2:
            for stype, c, d in _attrs(buf, a, b):
                if stype == TCA_STATS_BASIC and d - c >= 8:
                    basic = c - off
                elif stype == TCA_STATS_QUEUE and d - c >= 8:
                    queue = c - off
    if basic < 0 or queue < 0:
        raise GateError("netlink: root qdisc without byte or queue counters")
    return basic, queue


# --------------------------------------------------------------------------- namespaces

_T = TypeVar("_T")


def in_netns(netns: str | None, factory: Callable[[], _T]) -> _T:
    """Call ``factory`` inside ``/run/netns/<netns>`` (a helper thread that enters it), or here."""
    if netns is None:
        return factory()
    if not netns or "/" in netns:
        raise GateError(f"netns {netns!r}: not a network namespace name")
    try:
        return run_in_netns(os.path.join(NETNS_DIR, netns), factory, f"xtc-tcgate-{netns}")[0]
    except NetnsOpenError as e:
        raise GateError(f"netns {netns!r}: cannot open: {e.strerror}") from None


# --------------------------------------------------------------------------- netlink socket


class _Rtnl:
    """A raw NETLINK_ROUTE socket: send batches, read ACKs (with extended ACK messages), dump."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
            try:
                self.sock.setsockopt(SOL_NETLINK, opt, 1)
            except OSError:  # pragma: no cover - kernels before 4.12
                pass
        self.sock.bind((0, 0))
        self.seq = 1
        self._buf = bytearray(1 << 20)
        self._root_layout: dict[int, tuple[int, int]] = {}  # read_root_counters: length -> offsets

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0x7FFF_FFFF or 1
        return self.seq

    def transact(self, messages: list[bytes | bytearray]) -> tuple[dict[int, tuple[int, str]], list[tuple[int, int]]]:
        """Send whole messages (one ``send``) and read one ACK per message.

        Returns ``{seq: (errno, kernel message)}`` (errno 0 for success) and, for each echoed
        new filter (``NLM_F_ECHO``), ``(seq, filter handle)``.
        """
        if not messages:
            return {}, []
        seqs = [_SEQ.unpack_from(m, 8)[0] for m in messages]
        return self.send_batch(b"".join(messages) if len(messages) > 1 else messages[0], seqs)

    def send_batch(self, payload: bytes | bytearray, seqs: list[int]) -> tuple[dict[int, tuple[int, str]], list[tuple[int, int]]]:
        """Send ``payload`` (whole messages with sequence numbers ``seqs``) and read their ACKs.

        The kernel has applied every message when ``send`` returns (rtnetlink runs in the
        sender's context).
        """
        pending = set(seqs)
        self.sock.send(payload)
        acks: dict[int, tuple[int, str]] = {}
        echoed: list[tuple[int, int]] = []
        buf = self._buf
        while pending:
            for off, mlen, mtype, seq in _messages(buf, self.sock.recv_into(buf)):
                if mtype == NLMSG_ERROR and seq in pending:
                    (err,) = _ERR.unpack_from(buf, off + 16)
                    acks[seq] = (-err, _ext_ack_text(buf, off, mlen) if err else "")
                    pending.discard(seq)
                elif mtype == RTM_NEWTFILTER and seq in pending:
                    echoed.append((seq, _TCMSG.unpack_from(buf, off + 16)[2]))  # the filter's handle
        return acks, echoed

    def read_errors(self, seqs: list[int]) -> dict[int, tuple[int, str]]:
        """The error messages already queued for messages ``seqs`` sent without NLM_F_ACK
        (rtnetlink answers in ``send``): ``{seq: (errno, kernel message)}``, empty when all passed."""
        out: dict[int, tuple[int, str]] = {}
        want = set(seqs)
        buf = self._buf
        while True:
            try:
                n = self.sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return out
            for off, mlen, mtype, seq in _messages(buf, n):
                if mtype == NLMSG_ERROR and seq in want:
                    (err,) = _ERR.unpack_from(buf, off + 16)
                    if err:
                        out[seq] = (-err, _ext_ack_text(buf, off, mlen))

    def read_root_counters(self, seq: int) -> tuple[int, int, int]:
        """The answer to an ``RTM_GETQDISC`` of one qdisc sent with ``seq`` and ``NLM_F_ECHO``:
        its ``(sent bytes, queue length, backlog bytes)`` (other messages queued are skipped)."""
        buf = self._buf
        while True:
            for off, mlen, mtype, mseq in _messages(buf, self.sock.recv_into(buf)):
                if mseq == seq:
                    if mtype == NLMSG_ERROR:
                        (err,) = _ERR.unpack_from(buf, off + 16)
                        raise OSError(-err, os.strerror(-err))
                    if mtype == RTM_NEWQDISC:
                        # where the counters lie, learnt once per message length (the layout of
                        # one qdisc's message stays while its options do)
                        at = self._root_layout.get(mlen)
                        if at is None:
                            at = self._root_layout[mlen] = _root_counter_offsets(buf, off, mlen)
                        (sent,) = _U64.unpack_from(buf, off + at[0])
                        qlen, backlog = _U32X2.unpack_from(buf, off + at[1])
                        return sent, qlen, backlog

    def dump(self, msg_type: int, ifindex: int, parent: int = 0) -> bytes:
        """One dump of qdiscs or classes (``msg_type`` RTM_GETQDISC/RTM_GETTCLASS) of ``ifindex``;
        a class dump with ``parent`` (a qdisc handle) holds only that qdisc's classes (the kernel
        skips the others: for the gate, the TBF leaves' own classes, half the messages).

        Returns the reply datagrams concatenated (whole messages; NLMSG_DONE included).
        """
        seq = self.next_seq()
        self.sock.send(_encode_plain(msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, ifindex, parent=parent))
        chunks: list[bytes] = []
        buf = self._buf
        head = _LEN_TYPE.unpack_from
        recv = self.sock.recv_into
        while True:
            n = recv(buf)
            off = 0
            done = False
            while off + 16 <= n:  # the agent's hot path: only lengths and types, in a tight loop
                mlen, mtype = head(buf, off)
                if mlen < 16:
                    raise GateError("netlink: malformed dump reply")
                if mtype < 16 and _SEQ.unpack_from(buf, off + 8)[0] == seq:  # NLMSG_ERROR, NLMSG_DONE
                    if mtype == NLMSG_ERROR:
                        (err,) = _ERR.unpack_from(buf, off + 16)
                        raise OSError(-err, os.strerror(-err))
                    done = done or mtype == NLMSG_DONE
                off += (mlen + 3) & ~3
            chunks.append(bytes(buf[:n]))
            if done:
                return b"".join(chunks) if len(chunks) > 1 else chunks[0]

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- the gate


def _errtext(code: int, kernel_msg: str) -> str:
    name = _errno.errorcode.get(code, str(code))
    text = f"{name} ({os.strerror(code)})"
    return f"{text}: {kernel_msg}" if kernel_msg else text


#: A destination's recorded state while it is open for a byte budget (``open_for_us``): not ``OPEN``,
#: so that a plain ``OPEN`` (a fail-open) is a change again.
_BUDGET = -2


def _state_text(state: int) -> str:
    return ("OPEN" if state == OPEN else "CLOSED" if state == CLOSED else "OPEN for a byte budget" if state == _BUDGET
            else f"{state} bit/s")


def _u32_keys(flow: Flow) -> list[str]:
    """u32 keys (value/mask+offset into the IP header) matching the flow's source and destination."""
    keys = []
    if flow.src.version == 4:
        for addr, at in ((flow.src, 12), (flow.dst, 16)):
            keys.append(f"0x{int(addr):08x}/0xffffffff+{at}")
    else:
        for addr, at in ((flow.src, 8), (flow.dst, 24)):
            packed = addr.packed
            for i in range(4):
                keys.append(f"0x{packed[4 * i:4 * i + 4].hex()}/0xffffffff+{at + 4 * i}")
    return keys


@dataclass
class _FlowEntry:
    """A flow's u32 filter handle and, while it is small, the minor of its own class (else 0)."""

    filter_handle: int
    minor: int


@dataclass
class _DestEntry:
    """A destination host's class: its minor, state, large flows (in the order moved in) and drain frame."""

    dest: int
    minor: int
    state: int
    flows: list[Flow]
    drain: bytes = b""  # the drain frame (built at the first close; from the first flow)


@dataclass
class _Plan:
    """One :meth:`TcGate.set_states` batch: the destinations that change, in order, and their messages."""

    entries: list[_DestEntry]
    states: list[int]
    batch: bytes  # the TBF change messages (without NLM_F_ACK), sequence numbers patched per call
    offsets: list[int]  # where each message's sequence number is
    closing: list[_DestEntry]


#: IP protocol / IPv6 next header of drain frames (253: RFC 3692 experimentation).
DRAIN_IP_PROTO = 253


def drain_frame(flow: Flow, src_mac: bytes, frame_bytes: int) -> bytes:
    """A ``frame_bytes``-byte Ethernet frame that the gate's u32 filter puts in ``flow``'s class.

    Ethernet to the wake frames' locally administered MAC (no host has it: whoever receives it
    drops it as not for itself), IP from ``flow.src`` to ``flow.dst``, protocol 253, TTL 1.
    """
    if flow.src.version == 4:
        n = frame_bytes - 14
        head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, n, 0, 0x4000, 1, DRAIN_IP_PROTO, 0,
                           flow.src.packed, flow.dst.packed)
        words = struct.unpack("!10H", head)
        c = sum(words)
        c = (c & 0xFFFF) + (c >> 16)
        c = (c & 0xFFFF) + (c >> 16)
        head = head[:10] + struct.pack("!H", ~c & 0xFFFF) + head[12:]
        return _WAKE_DST + src_mac + struct.pack("!H", ETH_P_IP) + head + bytes(n - 20)
    n = frame_bytes - 14 - 40
    head = struct.pack("!IHBB16s16s", 6 << 28, n, DRAIN_IP_PROTO, 1, flow.src.packed, flow.dst.packed)
    return _WAKE_DST + src_mac + struct.pack("!H", ETH_P_IPV6) + head + bytes(n)


def default_open_burst_bytes(link_bps: int, mtu: int = 1500) -> int:
    """The default burst of ``OPEN``, bytes: 1 ms at ``link_bps`` (bits/s), at least two frames
    of ``mtu`` (2 x (MTU + 18))."""
    return max(2 * (mtu + 18), link_bps // 8 // 1000)


class TcGate:
    """Per-destination gating on one uplink with HTB + TBF + u32 (see the module's docstring).

    Parameters
    ----------
    ifname : str
        The uplink (in ``netns`` when given).
    link_bps : int
        The link's rate in bits/s: the rate and ceiling of every class, and the rate of ``OPEN``.
    netns : str, optional
        Name of a network namespace (``/run/netns/<netns>``) holding ``ifname``.
    closed_rate_bps : int
        The rate of ``CLOSED`` in bits/s (raised if needed so that the TBF buffer, in kernel
        ticks, fits in 32 bits).
    closed_burst_bytes : int, optional
        The burst of ``CLOSED`` (and the least burst of a rate limit), in bytes: at least the
        largest frame, else TBF drops bigger packets instead of holding them; default the
        device's MTU + 18 (Ethernet header and a VLAN tag).  This is also what a class lets out
        at the moment it closes (the TBF change refills the bucket).
    open_burst_bytes : int, optional
        The burst of ``OPEN`` in bytes: what an opening class may send at once on top of the link
        rate (it lands in the next switch's queue on top of what the previous sender left there);
        default 1 ms at the link rate, at least two frames (2 x (MTU + 18)).  At least
        ``closed_burst_bytes`` (TBF drops a packet bigger than its burst).
    rate_burst_us : int
        A rate limit's burst as time at its rate, microseconds (at least ``closed_burst_bytes``):
        what a rate-limited class that went idle may send at once when its packets come back, so
        a flow that started late, or stalled, catches up that much.  The next switch's port holds
        the sum: with the rates of a link summing to its rate, up to ``rate_burst_us`` of the link
        on top of what is queued there (and every rate change refills the bucket).  Default 1 ms.
    queue_limit_bytes : int
        How many bytes a destination's leaf holds while closed before it drops.
    default_limit_packets : int
        Queue length of the default class's pfifo.
    drain_on_close : bool
        Send drain frames into a destination's class right after it closes, so that the refilled
        bucket does not let its next packets out (see the module docstring).
    pass_tcp_control : bool
        TCP packets shorter than :data:`TCP_CONTROL_BYTES` (pure ACKs, SYN, FIN, RST) are never
        held (u32 filters at prio 3 and 4 into the default class).  A TCP flow held in its slices
        is fine; its acknowledgements held in the opposite direction's slices stall it (measured
        on Figure 16's 13 TCP flows, whose 13 ACK streams the scheduler also had to fit into 10).
    gso_max_segs : int, optional
        While installed, the device's ``gso_max_segs`` (``IFLA_GSO_MAX_SEGS``) is set to this,
        and :meth:`restore` puts the recorded value back (:func:`cleanup`, after a kill, the
        kernel's default: the device's ``tso_max_segs``).  1 makes the TCP of the sockets that
        send through the device hand the gate frames rather than GSO packets of up to 64 KB: a
        slot budget's TBF leaf takes a packet whole, and one bigger than what is left of the
        budget waits for the rest of the slice (see :meth:`set_states`).  Only locally sent
        packets are affected: a forwarded GSO packet (a KVM guest's, or one GRO built) reaches
        the qdisc whole whatever the setting.  None leaves the device as it is.

    Raises
    ------
    GateError
        The namespace or interface does not exist, or a parameter is out of range.
    """

    def __init__(
        self,
        ifname: str,
        *,
        link_bps: int,
        netns: str | None = None,
        closed_rate_bps: int = 64,
        closed_burst_bytes: int | None = None,
        open_burst_bytes: int | None = None,
        rate_burst_us: int = 1000,
        queue_limit_bytes: int = 4 << 20,
        default_limit_packets: int = 1000,
        drain_on_close: bool = True,
        gso_max_segs: int | None = None,
        pass_tcp_control: bool = True,
    ) -> None:
        self.ifname = ifname
        self.netns = netns
        where = f"{ifname}" + (f" (netns {netns})" if netns else "")
        self._where = where
        if not 8_000 <= link_bps <= MAX_RATE_BPS:
            raise GateError(f"{where}: link_bps {link_bps} out of range [8000, {MAX_RATE_BPS}]")
        if closed_burst_bytes is not None and closed_burst_bytes < 64:
            raise GateError(f"{where}: closed_burst_bytes {closed_burst_bytes} < 64")
        if not 1 <= rate_burst_us <= 1_000_000:
            raise GateError(f"{where}: rate_burst_us {rate_burst_us} out of range [1, 1000000]")
        #: A rate limit's burst as time at its rate, microseconds (see the class's docstring).
        self.rate_burst_us = int(rate_burst_us)
        if gso_max_segs is not None and not 1 <= gso_max_segs <= _GSO_MAX_SEGS:
            raise GateError(f"{where}: gso_max_segs {gso_max_segs} out of range [1, {_GSO_MAX_SEGS}]")
        self.pass_tcp_control = pass_tcp_control
        #: The device's ``gso_max_segs`` while installed (None: left as it is).
        self.gso_max_segs = gso_max_segs
        #: The device's ``gso_max_segs`` before :meth:`install` changed it (None: not changed).
        self._original_gso_max_segs: int | None = None
        self.link_bps = int(link_bps)
        self.queue_limit_bytes = int(queue_limit_bytes)
        self.default_limit_packets = int(default_limit_packets)

        def open_sockets() -> tuple[_Rtnl, socket.socket, int, bytes, int]:
            try:
                index = socket.if_nametoindex(ifname)
            except OSError:
                raise GateError(f"{where}: no such interface") from None
            nl = _Rtnl()
            pk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
            pk.bind((ifname, 0))
            mac = pk.getsockname()[4][:6].ljust(6, b"\0")
            ifreq = fcntl.ioctl(pk.fileno(), _SIOCGIFMTU, struct.pack("16si12x", ifname.encode(), 0))
            return nl, pk, index, mac, struct.unpack_from("16si", ifreq)[1]

        try:
            self._nl, self._pk, self.ifindex, mac, self.mtu = in_netns(netns, open_sockets)
        except GateError:
            raise
        except OSError as e:
            raise GateError(f"{where}: cannot open sockets: {e.strerror or e}") from None
        # TBF drops a packet bigger than its burst: one whole frame (MTU + Ethernet + VLAN tag).
        self.closed_burst_bytes = int(closed_burst_bytes or self.mtu + 18)
        self.open_burst_bytes = int(open_burst_bytes or default_open_burst_bytes(self.link_bps, self.mtu))
        self.closed_rate_bps = max(int(closed_rate_bps), 8 * _least_rate_Bps(self.closed_burst_bytes))
        self._wake = _WAKE_DST + mac + struct.pack("!H", WAKE_ETHERTYPE) + b"xco-wake".ljust(46, b"\0")
        self._mac = mac
        #: Send drain frames into a flow's class when it closes (see the module docstring).
        self.drain_on_close = drain_on_close
        #: Wake and drain frames the qdisc dropped (ENOBUFS: their class was full).
        self.frames_dropped = 0
        self._drains = max(1, math.ceil((self.closed_burst_bytes - 63) / (self.mtu + 14)))
        self._dests: dict[int, _DestEntry] = {}
        self._flows: dict[Flow, _FlowEntry] = {}
        self._table: tuple[Sequence[int], Sequence[Flow], CounterTable] | None = None  # counters(): dests, small, offsets
        self._cache: dict[tuple[int, int], bytes] = {}  # (minor, state) -> encoded TBF change (no ACK)
        self._plans: dict[tuple, _Plan] = {}  # set_states' argument -> its batch
        self._templates: dict[tuple, bytes] = {}  # pyroute2's encoding, before handle/parent/seq
        self._original: _TcObject | None = None
        #: quiet(): the root's sent bytes at the last probe that said "read the classes"
        self._root_sent_base: int | None = None
        self._get_root: bytearray | None = None
        self._installed = False
        self._closed = False
        if self.open_burst_bytes < self.closed_burst_bytes:
            self.close()
            raise GateError(f"{where}: open_burst_bytes {self.open_burst_bytes} < one frame "
                            f"({self.closed_burst_bytes} bytes: TBF would drop bigger packets)")

    # ------------------------------------------------------------------ helpers

    def _fail(self, what: str, code: int, kmsg: str, flow: Flow | None = None, dest: int | None = None) -> GateError:
        f = f" flow {flow.src}->{flow.dst}" if flow is not None else f" dest host {dest}" if dest is not None else ""
        return GateError(f"{self._where}:{f} {what}: {_errtext(code, kmsg)}")

    def _run(self, items: list[tuple[str, bytes]], flow: Flow | None = None, dest: int | None = None) -> None:
        """Send messages (what, bytes) and raise on the first failed one."""
        try:
            acks, _ = self._nl.transact([m for _, m in items])
        except OSError as e:
            raise self._fail(items[0][0], e.errno or 0, "", flow, dest) from None
        for what, m in items:
            code, kmsg = acks.get(_SEQ.unpack_from(m, 8)[0], (0, ""))
            if code:
                raise self._fail(what, code, kmsg, flow, dest)

    def _tc(self, command: str, **kwarg: object) -> bytes:
        return encode_tc(command, self._nl.next_seq(), index=self.ifindex, **kwarg)

    def _patched(self, key: tuple, make: Callable[[], bytes], handle: int, parent: int) -> bytes:
        """A message encoded once per ``key`` by pyroute2, with its sequence, handle and parent set."""
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = make()
        out = bytearray(template)
        _SEQ.pack_into(out, 8, self._nl.next_seq())
        struct.pack_into("=II", out, _NLMSGHDR.size + 8, handle, parent)  # tcmsg handle, parent
        return bytes(out)

    def _tbf(self, command: str, minor: int, state: int) -> bytes:
        """The TBF leaf message of class ``7c0:minor`` in ``state``.

        OPEN and CLOSED: pyroute2 encodes each once.  A rate: one message encoded once per command,
        its rate and burst written in (:func:`_set_tbf_rate`): pyroute2 computes TBF's rate table in
        Python, 1-5 ms for each new rate, and rate mode sends new rates at every event."""
        if state in (OPEN, CLOSED) or state // 8 > _U32_MAX:
            handle, parent = (_LEAF_MAJOR_BASE + minor) << 16, ROOT_HANDLE | minor
            return self._patched(("tbf", command, state), lambda: self._encode_tbf(command, state), handle, parent)
        return self._tbf_rate(command, minor, state // 8, self._rate_burst(state))

    def _tbf_rate(self, command: str, minor: int, rate_Bps: int, burst: int) -> bytes:
        """The TBF leaf message of class ``7c0:minor`` at ``rate_Bps`` (< 2**32) with ``burst`` bytes:
        the rate template, encoded once per command, with both written in."""
        handle, parent = (_LEAF_MAJOR_BASE + minor) << 16, ROOT_HANDLE | minor
        msg = bytearray(self._patched(("tbf-rate", command), lambda: self._encode_tbf(command, _RATE_TEMPLATE_BPS),
                                      handle, parent))
        _set_tbf_rate(msg, rate_Bps, burst)
        return bytes(msg)

    def _rate_burst(self, rate_bps: int) -> int:
        """A rate limit's burst, bytes: the closed burst, or :attr:`rate_burst_us` at the rate if more."""
        return max(self.closed_burst_bytes, rate_bps * self.rate_burst_us // 8_000_000)

    def _encode_tbf(self, command: str, state: int) -> bytes:
        if state == OPEN:
            rate_bps, burst = self.link_bps, self.open_burst_bytes
        elif state == CLOSED:
            rate_bps, burst = self.closed_rate_bps, self.closed_burst_bytes
        else:
            rate_bps = int(state)
            burst = self._rate_burst(rate_bps)
        rate_Bps = rate_bps // 8
        msg = self._tc(command, kind="tbf", handle=_LEAF_MAJOR_BASE << 16, parent=ROOT_HANDLE,
                       rate=min(rate_Bps, _U32_MAX), burst=burst, limit=self.queue_limit_bytes)
        msg = _append_option(msg, TCA_TBF_BURST, struct.pack("=I", burst))
        if rate_Bps > _U32_MAX:  # above 34 Gb/s: the kernel takes the larger of the two rates
            msg = _append_option(msg, TCA_TBF_RATE64, struct.pack("=Q", rate_Bps))
        return msg

    def _check_state(self, state: int, dest: int) -> None:
        if not isinstance(state, int) or not (state in (OPEN, CLOSED) or 8 <= state <= MAX_RATE_BPS):
            raise GateError(f"{self._where}: dest host {dest}: bad state {state!r}")

    def _root(self) -> _TcObject | None:
        try:
            objs = decode_class_dump(self._nl.dump(RTM_GETQDISC, self.ifindex))
        except OSError as e:
            raise self._fail("dump qdiscs", e.errno or 0, "") from None
        for o in objs:
            if o.ifindex == self.ifindex and o.parent == TC_H_ROOT:
                return o
        return None

    def _flow_filter(self, flow: Flow, node: int, classid: int) -> bytes:
        """The "add u32 filter" message of ``flow`` (node ``node``, pointing at ``classid``).

        pyroute2 encodes it once per address family (about 0.2 ms: its u32 plugin parses the keys'
        text); each flow's copy has its sequence, node, class and addresses written in
        (:func:`_set_u32_filter`), the same bytes pyroute2 would give for that flow."""
        out = bytearray(self._flow_filter_template(flow.src.version == 4))
        _set_u32_filter(out, self._nl.next_seq(), node, classid, flow.src.packed + flow.dst.packed)
        return bytes(out)

    def _flow_filter_template(self, v4: bool) -> bytes:
        template = self._templates.get(("u32", v4))
        if template is None:
            zero = ipaddress.ip_address("0.0.0.0" if v4 else "::")
            template = self._templates["u32", v4] = self._tc(
                "add-filter", kind="u32", parent=ROOT_HANDLE, prio=_PRIO_FLOW4 if v4 else _PRIO_FLOW6,
                protocol=ETH_P_IP if v4 else ETH_P_IPV6, handle=0, target=ROOT_HANDLE,
                keys=_u32_keys(Flow(zero, zero, 0)))
        return template

    def _htb_class(self, minor: int) -> bytes:
        def make() -> bytes:
            return self._tc("add-class", kind="htb", handle=ROOT_HANDLE, parent=ROOT_HANDLE,
                            rate=self.link_bps // 8, ceil=self.link_bps // 8, burst=self.open_burst_bytes,
                            cburst=self.open_burst_bytes, quantum=60000, mtu=2048)

        return self._patched(("class",), make, ROOT_HANDLE | minor, ROOT_HANDLE)

    # ------------------------------------------------------------------ Gate

    def install(self) -> None:
        """Record the uplink's root qdisc and put the HTB root, default class, ICMP (and TCP control)
        filters on.

        Raises
        ------
        GateError
            Already installed, our root already there (run :func:`cleanup`), or the kernel refused.
        """
        if self._installed:
            raise GateError(f"{self._where}: gate already installed")
        original = self._root()
        if original is not None and original.handle == ROOT_HANDLE and original.kind == "htb":
            raise GateError(f"{self._where}: an XCo gate root (7c0:) is already installed; run cleanup() first")
        self._original = original
        steps = [
            ("replace root htb 7c0:", self._tc("replace", kind="htb", handle=ROOT_HANDLE, parent=TC_H_ROOT,
                                              default=1, r2q=10)),
            ("add default class 7c0:1", self._htb_class(1)),
            ("add default pfifo", self._tc("add", kind="pfifo", handle=(_LEAF_MAJOR_BASE + 1) << 16,
                                           parent=DEFAULT_CLASS, limit=self.default_limit_packets)),
            ("add ICMP filter", self._tc("add-filter", kind="u32", parent=ROOT_HANDLE, prio=_PRIO_ICMP4,
                                         protocol=ETH_P_IP, target=DEFAULT_CLASS,
                                         keys=["0x00010000/0x00ff0000+8"])),
            ("add ICMPv6 filter", self._tc("add-filter", kind="u32", parent=ROOT_HANDLE, prio=_PRIO_ICMP6,
                                           protocol=ETH_P_IPV6, target=DEFAULT_CLASS,
                                           keys=["0x00003a00/0x0000ff00+4"])),
        ]
        if self.pass_tcp_control:
            short = (0xFFFF & ~(TCP_CONTROL_BYTES - 1))
            steps += [
                # IPv4: total length (bytes 2-3) below TCP_CONTROL_BYTES and protocol 6
                ("add TCP control filter", self._tc("add-filter", kind="u32", parent=ROOT_HANDLE,
                                                    prio=_PRIO_TCP_CONTROL4, protocol=ETH_P_IP, target=DEFAULT_CLASS,
                                                    keys=[f"0x00000000/0x{short:08x}+0", "0x00060000/0x00ff0000+8"])),
                # IPv6: payload length (bytes 4-5) below it and next header 6 (no extension headers)
                ("add TCPv6 control filter", self._tc("add-filter", kind="u32", parent=ROOT_HANDLE,
                                                      prio=_PRIO_TCP_CONTROL6, protocol=ETH_P_IPV6, target=DEFAULT_CLASS,
                                                      keys=[f"0x00000600/0x{short << 16 | 0xff00:08x}+4"])),
            ]
        for v4 in (True, False):  # encoded now, so that no add_dest or add_flow pays for pyroute2
            self._flow_filter_template(v4)
        for state in (OPEN, CLOSED):
            self._tbf("add", _FIRST_CLASS_MINOR, state)
        try:
            self._run(steps[:1])
            self._installed = True
            for step in steps[1:]:
                self._run([step])
            if self.gso_max_segs is not None:
                before, _ = link_gso_max_segs(self.ifname, self.netns, self.gso_max_segs)
                if before != self.gso_max_segs:
                    self._original_gso_max_segs = before
        except GateError:
            if self._installed:
                self._delete_root()
                self._installed = False
            raise

    def add_dest(self, dest: int, state: int = OPEN) -> None:
        """Give destination host ``dest`` an HTB class and a TBF leaf in ``state`` (no flows yet).

        Raises
        ------
        GateError
            Not installed, the destination is already there, a bad state, no class left, or the
            kernel refused (then nothing of the destination is left).
        """
        self._require_installed()
        if dest in self._dests:
            raise GateError(f"{self._where}: dest host {dest} already added")
        self._check_state(state, dest)
        minor = self._free_minor()
        if minor is None:
            raise GateError(f"{self._where}: dest host {dest}: no class left (max {_MAX_CLASS_MINOR - 1})")
        steps = [("add class", self._htb_class(minor)), ("add tbf leaf", self._tbf("add", minor, state))]
        try:
            acks, _ = self._nl.transact([m for _, m in steps])
        except OSError as e:
            raise self._fail("add dest", e.errno or 0, "", dest=dest) from None
        failed = [(what, acks[_SEQ.unpack_from(m, 8)[0]]) for what, m in steps if acks[_SEQ.unpack_from(m, 8)[0]][0]]
        if failed:
            if not acks[_SEQ.unpack_from(steps[0][1], 8)[0]][0]:
                self._delete_class(minor, dest, strict=False)
            what, (code, kmsg) = failed[0]
            raise self._fail(what, code, kmsg, dest=dest)
        self._dests[dest] = _DestEntry(dest, minor, state, [])
        self._table = None

    def _free_minor(self) -> int | None:
        used = {e.minor for e in self._dests.values()} | {e.minor for e in self._flows.values()}
        return next((m for m in range(_FIRST_CLASS_MINOR, _MAX_CLASS_MINOR + 1) if m not in used), None)

    def add_flow(self, flow: Flow) -> None:
        """Give ``flow`` a class of its own, never held (the flow is small), and a u32 filter
        matching its source AND destination pointing at it.

        Raises
        ------
        GateError
            Not installed, the flow is already there, its destination host not added, mixed
            address families, no class or filter node left, or the kernel refused (then nothing
            of the flow is left).
        """
        self._require_installed()
        if flow in self._flows:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst} already added")
        if flow.src.version != flow.dst.version:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst} mixes IPv4 and IPv6")
        if flow.dest_host not in self._dests:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst}: dest host {flow.dest_host} not added")
        minor = self._free_minor()
        if minor is None:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst}: no class left (max {_MAX_CLASS_MINOR - 1})")
        used = {e.filter_handle & 0xFFF for e in self._flows.values()}  # u32 handle: htid 12 bits, hash 8, node 12
        node = next((n for n in range(1, _MAX_FILTER_NODE + 1) if n not in used), None)
        if node is None:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst}: no filter left (max {_MAX_FILTER_NODE})")
        v4 = flow.src.version == 4
        steps = [
            ("add class", self._htb_class(minor)),
            ("add u32 filter", self._flow_filter(flow, node, ROOT_HANDLE | minor)),
        ]
        try:
            acks, echoed = self._nl.transact([m for _, m in steps])
        except OSError as e:
            raise self._fail("add flow", e.errno or 0, "", flow) from None
        class_seq, filter_seq = (_SEQ.unpack_from(m, 8)[0] for _, m in steps)
        fh = next((h for sq, h in echoed if sq == filter_seq), 0)
        failed = [(what, acks[_SEQ.unpack_from(m, 8)[0]]) for what, m in steps if acks[_SEQ.unpack_from(m, 8)[0]][0]]
        if failed or not fh:
            if not acks[filter_seq][0] and fh:
                self._delete_filter(v4, fh, flow, strict=False)
            if not acks[class_seq][0]:
                self._delete_class(minor, flow.dest_host, strict=False)
            if not failed:
                raise self._fail("add u32 filter (no echo)", _errno.EPROTO, "", flow)
            what, (code, kmsg) = failed[0]
            raise self._fail(what, code, kmsg, flow)
        self._flows[flow] = _FlowEntry(fh, minor)
        self._table = None

    def move_to_dest(self, flow: Flow) -> None:
        """Point the (small) flow's filter at its destination's class and delete its own class:
        from now on the flow is gated with its destination.

        Raises
        ------
        GateError
            The flow is unknown or already moved, or the kernel refused (the flow stays small
            if the filter could not be changed).
        """
        self._require_installed()
        e = self._flows.get(flow)
        if e is None:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst} unknown")
        if not e.minor:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst} already moved to dest host {flow.dest_host}")
        dest = self._dests[flow.dest_host]
        prio, proto = (_PRIO_FLOW4, ETH_P_IP) if flow.src.version == 4 else (_PRIO_FLOW6, ETH_P_IPV6)
        options = _NLATTR.pack(8, TCA_U32_CLASSID) + struct.pack("=I", ROOT_HANDLE | dest.minor)
        msg = _encode_plain(RTM_NEWTFILTER, NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE, self._nl.next_seq(),
                            self.ifindex, e.filter_handle, ROOT_HANDLE, (prio << 16) | socket.htons(proto),
                            _attr_str(TCA_KIND, "u32") + _NLATTR.pack(4 + len(options), TCA_OPTIONS) + options)
        self._run([(f"point u32 filter at dest host {flow.dest_host}", msg)], flow)
        own, e.minor = e.minor, 0
        dest.flows.append(flow)
        self._table = None
        self._delete_class(own, flow.dest_host, strict=True, flow=flow)

    def remove_flow(self, flow: Flow) -> None:
        """Remove the flow's filter (its packets go through the default class again) and its own
        class if it is still small."""
        self._require_installed()
        e = self._flows.get(flow)
        if e is None:
            raise GateError(f"{self._where}: flow {flow.src}->{flow.dst} unknown")
        self._delete_filter(flow.src.version == 4, e.filter_handle, flow, strict=True)
        del self._flows[flow]
        self._table = None
        if e.minor:
            self._delete_class(e.minor, flow.dest_host, strict=True, flow=flow)
        else:
            entry = self._dests[flow.dest_host]
            entry.flows.remove(flow)
            entry.drain = b""  # built again, from the first flow left, at the next close

    def remove_dest(self, dest: int) -> None:
        """Remove the filters of the destination's flows and its class (its leaf and held packets go with it)."""
        self._require_installed()
        entry = self._dests.get(dest)
        if entry is None:
            raise GateError(f"{self._where}: dest host {dest} unknown")
        for flow in [f for f in self._flows if f.dest_host == dest]:
            self.remove_flow(flow)
        self._delete_class(entry.minor, dest, strict=True)
        del self._dests[dest]
        self._table = None
        for key in [k for k in self._cache if k[0] == entry.minor]:
            del self._cache[key]
        self._plans.clear()

    def _delete_filter(self, v4: bool, fh: int, flow: Flow, strict: bool) -> None:
        prio, proto = (_PRIO_FLOW4, ETH_P_IP) if v4 else (_PRIO_FLOW6, ETH_P_IPV6)
        info = (prio << 16) | socket.htons(proto)
        msg = _encode_plain(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, self._nl.next_seq(), self.ifindex, fh,
                            ROOT_HANDLE, info, _attr_str(TCA_KIND, "u32"))
        try:
            self._run([("delete u32 filter", msg)], flow)
        except GateError:
            if strict:
                raise

    def _delete_class(self, minor: int, dest: int, strict: bool, flow: Flow | None = None) -> None:
        msg = _encode_plain(RTM_DELTCLASS, NLM_F_REQUEST | NLM_F_ACK, self._nl.next_seq(), self.ifindex,
                            ROOT_HANDLE | minor, ROOT_HANDLE)
        try:
            self._run([("delete class", msg)], flow, None if flow is not None else dest)
        except GateError:
            if strict:
                raise

    def set_states(self, states: Mapping[int, int], open_for_us: Mapping[int, int] | None = None) -> None:
        """Change the TBF leaves of the destinations whose state changes (one send), then wake the uplink.

        ``open_for_us`` (see :meth:`xtc.host.gate.Gate.set_states`): an ``OPEN`` destination named
        there gets a TBF leaf whose bucket is what the link carries in that many microseconds
        (:meth:`slot_budget_bytes`) at a rate of a few bytes per second, so that the kernel holds
        it once the bytes are spent; the class's HTB parent still paces it at the link rate.

        Raises
        ------
        GateError
            A destination is unknown or a state is invalid (nothing sent), or the kernel refused a
            change (the others were applied; the message names every destination that failed).
        """
        plan = None if open_for_us else self._plans.get(tuple(states.items()))  # a slice's turn again
        if plan is None or any(e.state == st for e, st in zip(plan.entries, plan.states)):
            plan = self._plan(states, open_for_us)
            if plan is None:
                return
        nl = self._nl
        batch = bytearray(plan.batch)
        before = [e.state for e in plan.entries]
        seqs = []
        for off in plan.offsets:
            seq = nl.next_seq()
            _SEQ.pack_into(batch, off, seq)
            seqs.append(seq)
        try:
            # No ACK asked: rtnetlink applies the batch in send() and queues an error message for
            # a refused change only (the ACKs would be built and read for nothing).
            nl.sock.send(batch)
            self._frame(self._wake, None)
            if self.drain_on_close:
                for entry in plan.closing:
                    self._send_drain(entry)
            failed = nl.read_errors(seqs)
        except OSError as e:
            raise GateError(f"{self._where}: set_states: {_errtext(e.errno or 0, '')}") from None
        for entry, state in zip(plan.entries, plan.states):
            entry.state = state
        if failed:
            errors = []
            for entry, state, old, seq in zip(plan.entries, plan.states, before, seqs):
                if seq in failed:
                    entry.state = old
                    code, kmsg = failed[seq]
                    errors.append(f"dest host {entry.dest} to {_state_text(state)}: {_errtext(code, kmsg)}")
            raise GateError(f"{self._where}: set_states: " + "; ".join(errors))

    def slot_budget_bytes(self, open_for_us: int, from_closed: bool) -> int:
        """The bucket of a destination opened for ``open_for_us`` microseconds, bytes: what the link
        carries in that time, plus ``open_burst_bytes`` when the class was closed (its HTB parent has
        saved that burst up and sends it at once); at least one frame (TBF drops bigger packets)."""
        b = self.link_bps * max(0, open_for_us) // 8_000_000
        if from_closed:
            b += self.open_burst_bytes
        return max(self.closed_burst_bytes, min(b, _U32_MAX))

    def _plan(self, states: Mapping[int, int], open_for_us: Mapping[int, int] | None = None) -> _Plan | None:
        """The batch of TBF changes for ``states`` (the destinations whose state changes), cached
        while the same ``states`` come again (a timeslice agent's turns repeat); an ``OPEN``
        destination of ``open_for_us`` gets its byte budget (:meth:`slot_budget_bytes`, at the
        least rate that bucket allows: a few bytes a second), and such a batch is not cached."""
        changes: list[tuple[_DestEntry, int, bytes]] = []
        dests = self._dests
        cache = self._cache
        budgeted = False
        for dest, state in states.items():
            entry = dests.get(dest)
            if entry is None:
                raise GateError(f"{self._where}: dest host {dest} unknown")
            if open_for_us and state == OPEN and dest in open_for_us:
                budget = self.slot_budget_bytes(int(open_for_us[dest]), entry.state == CLOSED)
                rate_Bps = max(self.closed_rate_bps // 8, _least_rate_Bps(budget))
                changes.append((entry, _BUDGET, _without_ack(self._tbf_rate("change", entry.minor, rate_Bps, budget))))
                budgeted = True
                continue
            if entry.state == state:
                continue
            key = (entry.minor, state)
            msg = cache.get(key)
            if msg is None:
                self._check_state(state, dest)
                if len(cache) > 16 * (len(dests) + 16):  # many distinct rate limits
                    cache.clear()
                    self._plans.clear()
                    self._templates = {k: v for k, v in self._templates.items() if k[0] != "tbf" or k[-1] in (OPEN, CLOSED)}
                msg = cache[key] = _without_ack(self._tbf("change", entry.minor, state))
            changes.append((entry, state, msg))
        if not changes:
            return None
        offsets, off = [], 0
        for c in changes:
            offsets.append(off + 8)
            off += len(c[2])
        plan = _Plan([c[0] for c in changes], [c[1] for c in changes], b"".join(c[2] for c in changes), offsets,
                     [c[0] for c in changes if c[1] == CLOSED])
        if len(changes) == len(states) and not budgeted:
            if len(self._plans) > 4 * len(dests) + 64:
                self._plans.clear()
            self._plans[tuple(states.items())] = plan
        return plan

    def _frame(self, frame: bytes, proto: int | None) -> None:
        """Send a wake or drain frame.  A frame the qdisc drops (ENOBUFS: the class it falls into is
        full, as a held class flooded by a UDP sender is) is counted in :attr:`frames_dropped`, not
        raised: the enqueue attempt has run the qdisc all the same (the wake), and a full class has
        no room for what a refilled bucket would let out early either.  Raising here would leave
        the destinations' recorded states behind the kernel's (the batch was applied)."""
        try:
            if proto is None:
                self._pk.send(frame)
            else:
                self._pk.sendto(frame, (self.ifname, proto))
        except OSError as e:
            if e.errno != _errno.ENOBUFS:
                raise
            self.frames_dropped += 1

    def _send_drain(self, entry: _DestEntry) -> None:
        if not entry.flows:  # no filter points at the class: nothing can be queued there
            return
        if not entry.drain:
            entry.drain = drain_frame(entry.flows[0], self._mac, self.mtu + 14)
        proto = ETH_P_IP if entry.drain[12:14] == b"\x08\x00" else ETH_P_IPV6
        for _ in range(self._drains):  # skb->protocol must be IP for the u32 filter to match
            self._frame(entry.drain, proto)

    def wake(self) -> None:
        """Send one wake frame out of the uplink (what :meth:`set_states` does after a change)."""
        try:
            self._frame(self._wake, None)
        except OSError as e:
            raise GateError(f"{self._where}: wake frame: {_errtext(e.errno or 0, '')}") from None

    def stats(self) -> dict[int, DestStats]:
        """Every destination's sent bytes/packets and backlog, from one RTM_GETTCLASS dump."""
        self._require_installed()
        try:
            counters = decode_class_counters(self._nl.dump(RTM_GETTCLASS, self.ifindex, ROOT_HANDLE), ROOT_HANDLE)
        except OSError as e:
            raise self._fail("dump classes", e.errno or 0, "") from None
        out = {}
        for dest, entry in self._dests.items():
            c = counters.get(ROOT_HANDLE | entry.minor)
            if c is None:
                raise self._fail("stats: class missing", _errno.ENOENT, "", dest=dest)
            out[dest] = DestStats(*c)
        return out

    def counters(self, dests: Sequence[int], small: Sequence[Flow] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Sent bytes, backlog bytes and backlog packets of the classes of ``dests``, and sent bytes
        of the own classes of the ``small`` flows (int64 arrays in those orders), from one
        RTM_GETTCLASS dump decoded by a :class:`CounterTable` (kept while ``dests`` and ``small``
        are the same sequence objects and no class is added or removed)."""
        self._require_installed()
        t = self._table
        if t is None or t[0] is not dests or t[1] is not small:
            try:
                handles = [ROOT_HANDLE | self._dests[d].minor for d in dests]
            except KeyError as e:
                raise GateError(f"{self._where}: dest host {e.args[0]} unknown") from None
            for f in small:
                e = self._flows.get(f)
                if e is None or not e.minor:
                    raise GateError(f"{self._where}: flow {f.src}->{f.dst} {'unknown' if e is None else 'not small'}")
                handles.append(ROOT_HANDLE | e.minor)
            t = self._table = (dests, small, CounterTable(handles, ROOT_HANDLE))
        try:
            sent, bb, bp = t[2].decode(self._nl.dump(RTM_GETTCLASS, self.ifindex, ROOT_HANDLE))
        except OSError as e:
            raise self._fail("dump classes", e.errno or 0, "") from None
        except GateError as e:
            raise GateError(f"{self._where}: counters: {e}") from None
        n = len(dests)
        return sent[:n], bb[:n], bp[:n], sent[n:]

    def quiet(self, headroom_bytes: int | None = None) -> bool:
        """Whether a class dump can be skipped: True when nothing at all is queued under the gate's
        root (its HTB qdisc counts every class's packets) and, with ``headroom_bytes``, the root
        has let out at most that many bytes since the last probe that returned False.

        One ``RTM_GETQDISC`` of the root (``NLM_F_ECHO``: one message back, about 19 us of thread
        CPU against 55 us for the class dump and 25 us more to decode it, 64 flows, veth).  The
        agent asks before each counter read: when True every class has nothing queued, and no
        small flow can have passed its threshold if ``headroom_bytes`` is the threshold minus the
        most any small flow had sent at the last :meth:`counters` (every byte a class lets out
        the root lets out too; wake and drain frames count, which can only ask for a read more).
        When False, the caller reads :meth:`counters` (the base for the next headroom is this
        probe's, taken before that read: bytes sent in between are counted twice, never missed).

        Raises
        ------
        GateError
            The gate is not installed, or the kernel refused.
        """
        self._require_installed()
        nl = self._nl
        req = self._get_root
        if req is None:  # prebuilt once; its sequence number patched per call
            req = self._get_root = bytearray(_encode_plain(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ECHO, 0, self.ifindex,
                                                           ROOT_HANDLE, TC_H_ROOT))
        seq = nl.next_seq()
        _SEQ.pack_into(req, 8, seq)
        try:
            nl.sock.send(req)
            sent, qlen, backlog = nl.read_root_counters(seq)
        except OSError as e:
            raise self._fail("get root qdisc", e.errno or 0, "") from None
        base = self._root_sent_base
        if qlen == 0 and backlog == 0 and base is not None and (headroom_bytes is None or sent - base <= headroom_bytes):
            return True
        self._root_sent_base = sent
        return False

    def states(self) -> dict[int, int]:
        """The state each destination is in, as last set (-2: open for a byte budget)."""
        return {d: e.state for d, e in self._dests.items()}

    def restore(self) -> None:
        """Remove our root and give the uplink its original root qdisc back (idempotent).

        Deleting our root gives the kernel default; when the recorded original is something
        else, it is put back from the recorded kind and options.  The device's ``gso_max_segs``
        goes back to what it was, also when the root's restore fails.
        """
        if not self._installed:
            return
        if self._closed:
            raise GateError(f"{self._where}: gate closed before restore; run cleanup()")
        try:
            self._restore_root()
        finally:
            if self._original_gso_max_segs is not None:
                link_gso_max_segs(self.ifname, self.netns, self._original_gso_max_segs)
                self._original_gso_max_segs = None

    def _restore_root(self) -> None:
        self._delete_root()
        self._installed = False
        self._root_sent_base = None
        self._flows.clear()
        self._dests.clear()
        self._cache.clear()
        self._plans.clear()
        orig = self._original
        if orig is None or orig.kind in ("", "noqueue"):
            return
        now = self._root()
        if now is not None and now.kind == orig.kind:
            return
        attrs = _attr_str(TCA_KIND, orig.kind) + orig.options_attr()
        msg = _encode_plain(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
                            self._nl.next_seq(), self.ifindex, orig.handle, TC_H_ROOT, 0, attrs)
        self._run([(f"restore original root {orig.kind}", msg)])

    def _delete_root(self) -> None:
        msg = _encode_plain(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, self._nl.next_seq(), self.ifindex,
                            ROOT_HANDLE, TC_H_ROOT)
        try:
            self._run([("delete root htb 7c0:", msg)])
        except GateError as e:
            if "ENOENT" not in str(e) and "EINVAL" not in str(e):
                raise

    def close(self) -> None:
        """Close the sockets (does not restore)."""
        if not self._closed:
            self._closed = True
            self._nl.close()
            self._pk.close()

    def _require_installed(self) -> None:
        if not self._installed:
            raise GateError(f"{self._where}: gate not installed")

    def __enter__(self) -> TcGate:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.restore()
        finally:
            self.close()


def _attr_str(atype: int, value: str) -> bytes:
    data = value.encode() + b"\0"
    a = _NLATTR.pack(4 + len(data), atype) + data
    return a + b"\0" * (_align4(len(a)) - len(a))


_TICKS: list[float] = []


def _without_ack(msg: bytes) -> bytes:
    """``msg`` with ``NLM_F_ACK`` cleared: the hot path reads only the errors rtnetlink queues."""
    m = bytearray(msg)
    struct.pack_into("=H", m, 6, struct.unpack_from("=H", m, 6)[0] & ~NLM_F_ACK)
    return bytes(m)


def _least_rate_Bps(burst: int) -> int:
    """The least rate (bytes/s) at which a TBF bucket of ``burst`` bytes fits: TBF's buffer is
    burst/rate in ticks (1/64 us here: /proc/net/psched) as a u32."""
    return math.ceil(burst * 1e6 * _ticks_per_us() / (2**32 - 1)) + 1


def _ticks_per_us() -> float:
    """Kernel scheduler ticks per microsecond (/proc/net/psched: t2us and us2t; 15.625 today)."""
    if not _TICKS:
        try:
            with open("/proc/net/psched") as f:
                t2us, us2t = (int(x, 16) for x in f.read().split()[:2])
            _TICKS.append(t2us / us2t)
        except (OSError, ValueError):
            _TICKS.append(15.625)
    return _TICKS[0]


def cleanup(ifname: str, netns: str | None = None, gso_max_segs: int | None = None) -> bool:
    """Remove what a killed gate left on ``ifname``: an HTB root with handle ``7c0:``.

    The device gets its kernel default root qdisc back (the recorded original died with the
    gate), and, when the gate was made with ``gso_max_segs`` and the device still has that
    value, its kernel default ``gso_max_segs`` (its ``tso_max_segs``).  Returns True when
    something was removed.

    Raises
    ------
    GateError
        The namespace or interface does not exist, or the kernel refused.
    """
    where = f"{ifname}" + (f" (netns {netns})" if netns else "")

    def open_nl() -> tuple[_Rtnl, int]:
        try:
            index = socket.if_nametoindex(ifname)
        except OSError:
            raise GateError(f"{where}: no such interface") from None
        return _Rtnl(), index

    nl, ifindex = in_netns(netns, open_nl)
    try:
        root = next((o for o in decode_class_dump(nl.dump(RTM_GETQDISC, ifindex))
                     if o.ifindex == ifindex and o.parent == TC_H_ROOT), None)
        if root is None or root.handle != ROOT_HANDLE or root.kind != "htb":
            return False
        msg = _encode_plain(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, ROOT_HANDLE, TC_H_ROOT)
        acks, _ = nl.transact([msg])
        code, kmsg = acks[_SEQ.unpack_from(msg, 8)[0]]
        if code:
            raise GateError(f"{where}: cleanup: delete root htb 7c0:: {_errtext(code, kmsg)}")
    except OSError as e:
        raise GateError(f"{where}: cleanup: {_errtext(e.errno or 0, '')}") from None
    finally:
        nl.close()
    if gso_max_segs is not None:
        now, default = link_gso_max_segs(ifname, netns)
        if now == gso_max_segs and default is not None and default != now:
            link_gso_max_segs(ifname, netns, default)
    return True


def link_gso_max_segs(ifname: str, netns: str | None = None, set_to: int | None = None) -> tuple[int, int | None]:
    """The device's ``gso_max_segs`` and ``tso_max_segs`` (None where the kernel does not report
    it), read before ``set_to``, when given, is written (``RTM_NEWLINK`` with ``IFLA_GSO_MAX_SEGS``;
    pyroute2, set-up only).

    Raises
    ------
    GateError
        The namespace or interface does not exist, or the kernel refused (named).
    """
    where = f"{ifname}" + (f" (netns {netns})" if netns else "")

    def op() -> tuple[int, int | None]:
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        with IPRoute() as ipr:
            try:
                idx = ipr.link_lookup(ifname=ifname)
                if not idx:
                    raise GateError(f"{where}: no such interface")
                link = ipr.link("get", index=idx[0])[0]
                gso, tso = link.get_attr("IFLA_GSO_MAX_SEGS"), link.get_attr("IFLA_TSO_MAX_SEGS")
                if gso is None:
                    raise GateError(f"{where}: the kernel does not report gso_max_segs")
                if set_to is not None and set_to != gso:
                    ipr.link("set", index=idx[0], gso_max_segs=int(set_to))
            except NetlinkError as e:
                what = f"set gso_max_segs {set_to}" if set_to is not None else "read gso_max_segs"
                kmsg = str(e.args[1]) if len(e.args) > 1 and e.args[1] != os.strerror(e.code) else ""
                raise GateError(f"{where}: {what}: {_errtext(e.code, kmsg)}") from None
            return int(gso), (int(tso) if tso is not None else None)

    return in_netns(netns, op)

