"""The XCo gate on a real uplink: stock Linux queueing (HTB + TBF + u32) over netlink.

Why one file: :class:`TcGate` is one class with one job, the :class:`xtc.host.gate.Gate`
contract, whose methods share one state: the destinations, the flows and the caches of encoded
messages.  The bytes are :mod:`xtc.host.tccodec`'s, the socket :mod:`xtc.host.netlink`'s, the root
bookkeeping and clean-up :mod:`xtc.host.qdiscs`'s.

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
HTB root with that handle is removed (:func:`xtc.host.qdiscs.remove_root`), which gives the device its kernel default qdisc back
(``noqueue`` on veth and bridge ports, ``pfifo_fast``/``mq`` on NICs); the original options are
only known to the gate that recorded them (:meth:`TcGate.restore`).

Messages are encoded by pyroute2 (its tc plugins and request filters:
:func:`xtc.host.tccodec.encode_tc`), once
per kind of message (the class, the TBF leaf OPEN and CLOSED, one TBF leaf for every rate, a
flow's u32 filter per address family), then copied with the handle, parent and sequence number
patched (and a rate's rate and burst written in: :func:`xtc.host.tccodec.set_tbf_rate`; a flow's node, class and
addresses: :func:`xtc.host.tccodec.set_u32_filter`), so that after :meth:`TcGate.install` neither add_dest nor add_flow waits for
pyroute2's encoders (0.2-1 ms each); pyroute2 has no ``TCA_TBF_BURST``, which the codec appends
(:func:`xtc.host.tccodec.encode_tbf`; without it the kernel derives the largest packet from the
buffer in ticks, and a closed leaf drops every packet).  They go out on the one netlink adapter,
:class:`xtc.host.netlink.RouteSocket` (docs/design/netlink.md says why not pyroute2's socket).  The hot path
(:meth:`TcGate.set_states`) sends the cached TBF "change" messages of every changed destination in one
``send`` (the batch itself cached per change set), without ``NLM_F_ACK``: the kernel has applied
them when ``send`` returns and has queued an error message for each refused one only; it sends
the wake frame (and drain frames), then reads the errors already queued and names the destination of
each (with the kernel's extended-ACK text).  Stats are one ``RTM_GETTCLASS`` dump of the root's
classes, decoded by :func:`xtc.host.tccodec.decode_class_counters` (each HTB class's bytes/packets
sent, and its leaf's queue length and backlog); :meth:`TcGate.counters` (the agent's poll) decodes
the same dump by word offsets learnt once (:class:`xtc.host.tccodec.ClassCounterTable`) into arrays.  :meth:`TcGate.quiet` (asked
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
in_netns(netns, factory)  (call ``factory`` inside a namespace; a bad one is a GateError)
link_gso_max_segs, drain_frame, default_open_burst_bytes, ROOT_HANDLE, DEFAULT_CLASS, TCP_CONTROL_BYTES
"""


from __future__ import annotations

import errno as _errno
import fcntl
import ipaddress
import math
import os
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from xtc.host.gate import CLOSED, OPEN, DestStats, Flow, GateError
from xtc.host.netlink import (
    NLM_F_ACK,
    NLM_F_ECHO,
    NLM_F_REQUEST,
    NetlinkDecodeError,
    NetlinkError,
    RouteSocket,
    attr_str,
    error_text,
    set_seq,
)
from xtc.host.netlink import in_netns as _netlink_in_netns
from xtc.host.qdiscs import (
    delete_root,
    dump_tc,
    put_back_root,
    remove_root,
    root_qdisc,
    ticks_per_us,
)
from xtc.host.tccodec import (
    ETH_P_IP,
    ETH_P_IPV6,
    MAX_RATE_BPS,
    RTM_DELTCLASS,
    RTM_DELTFILTER,
    RTM_GETQDISC,
    RTM_GETTCLASS,
    TC_H_ROOT,
    TCA_KIND,
    U32_MAX,
    ClassCounterTable,
    TcObject,
    decode_class_counters,
    encode_tbf,
    encode_tc,
    encode_tcmsg,
    filter_info,
    least_rate_Bps,
    qdisc_counters,
    root_counter_offsets,
    set_handles,
    set_tbf_rate,
    set_u32_filter,
    u32_address_keys,
    u32_class_change,
    without_ack,
)

__all__ = [
    "DEFAULT_CLASS",
    "MAX_RATE_BPS",
    "ROOT_HANDLE",
    "TCP_CONTROL_BYTES",
    "WAKE_ETHERTYPE",
    "TcGate",
    "cleanup",
    "default_open_burst_bytes",
    "drain_frame",
    "in_netns",
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
#: The kernel's largest ``gso_max_segs`` (``GSO_MAX_SEGS``).
_GSO_MAX_SEGS = 65535
_SIOCGIFMTU = 0x8921
#: The rate the rate template is encoded with (:meth:`TcGate._tbf`; any rate below 34 Gb/s would do).
_RATE_TEMPLATE_BPS = 8_000_000

_T = TypeVar("_T")
_SEQ = struct.Struct("=I")  # nlmsghdr's sequence number, at byte 8


def _seq_of(msg: bytes | bytearray) -> int:
    """The sequence number of an encoded message."""
    return _SEQ.unpack_from(msg, 8)[0]


def in_netns(netns: str | None, factory: Callable[[], _T]) -> _T:
    """Call ``factory`` inside ``/run/netns/<netns>`` (a helper thread that enters it), or here;
    a bad or missing namespace is a :class:`GateError`."""
    if netns is None:
        return factory()
    try:
        return _netlink_in_netns(netns, factory)
    except NetlinkError as e:  # the namespace's name or file
        raise GateError(str(e)) from None


# --------------------------------------------------------------------------- the gate


#: A destination's recorded state while it is open for a byte budget (``open_for_us``): not ``OPEN``,
#: so that a plain ``OPEN`` (a fail-open) is a change again.
_BUDGET = -2


def _state_text(state: int) -> str:
    return ("OPEN" if state == OPEN else "CLOSED" if state == CLOSED else "OPEN for a byte budget" if state == _BUDGET
            else f"{state} bit/s")


def _u32_keys(flow: Flow) -> list[str]:
    """u32 keys (value/mask+offset into the IP header) matching the flow's source and destination."""
    return u32_address_keys(flow.src.packed, flow.dst.packed)


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

        def open_sockets() -> tuple[RouteSocket, socket.socket, int, bytes, int]:
            try:
                index = socket.if_nametoindex(ifname)
            except OSError:
                raise GateError(f"{where}: no such interface") from None
            nl = RouteSocket(buffer_bytes=1 << 20)
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
        self.closed_rate_bps = max(int(closed_rate_bps), 8 * least_rate_Bps(self.closed_burst_bytes, ticks_per_us()))
        self._wake = _WAKE_DST + mac + struct.pack("!H", WAKE_ETHERTYPE) + b"xco-wake".ljust(46, b"\0")
        self._mac = mac
        #: Send drain frames into a flow's class when it closes (see the module docstring).
        self.drain_on_close = drain_on_close
        #: Wake and drain frames the qdisc dropped (ENOBUFS: their class was full).
        self.frames_dropped = 0
        self._drains = max(1, math.ceil((self.closed_burst_bytes - 63) / (self.mtu + 14)))
        self._dests: dict[int, _DestEntry] = {}
        self._flows: dict[Flow, _FlowEntry] = {}
        self._table: tuple[Sequence[int], Sequence[Flow], ClassCounterTable] | None = None  # counters(): dests, small, offsets
        self._cache: dict[tuple[int, int], bytes] = {}  # (minor, state) -> encoded TBF change (no ACK)
        self._plans: dict[tuple, _Plan] = {}  # set_states' argument -> its batch
        self._templates: dict[tuple, bytes] = {}  # pyroute2's encoding, before handle/parent/seq
        self._original: TcObject | None = None
        #: quiet(): the root's sent bytes at the last probe that said "read the classes"
        self._root_sent_base: int | None = None
        self._get_root: bytearray | None = None
        self._root_layout: dict[int, tuple[int, int]] = {}  # quiet(): message length -> counter offsets
        self._installed = False
        self._closed = False
        if self.open_burst_bytes < self.closed_burst_bytes:
            self.close()
            raise GateError(f"{where}: open_burst_bytes {self.open_burst_bytes} < one frame "
                            f"({self.closed_burst_bytes} bytes: TBF would drop bigger packets)")

    # ------------------------------------------------------------------ helpers

    def _fail(self, what: str, code: int, kmsg: str, flow: Flow | None = None, dest: int | None = None) -> GateError:
        f = f" flow {flow.src}->{flow.dst}" if flow is not None else f" dest host {dest}" if dest is not None else ""
        return GateError(f"{self._where}:{f} {what}: {error_text(code, kmsg)}")

    def _run(self, items: list[tuple[str, bytes]], flow: Flow | None = None, dest: int | None = None) -> None:
        """Send messages (what, bytes) and raise on the first failed one."""
        try:
            acks, _ = self._nl.transact([m for _, m in items])
        except OSError as e:
            raise self._fail(items[0][0], e.errno or 0, "", flow, dest) from None
        for what, m in items:
            code, kmsg = acks.get(_seq_of(m), (0, ""))
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
        set_handles(out, self._nl.next_seq(), handle, parent)
        return bytes(out)

    def _tbf(self, command: str, minor: int, state: int) -> bytes:
        """The TBF leaf message of class ``7c0:minor`` in ``state``.

        OPEN and CLOSED: pyroute2 encodes each once.  A rate: one message encoded once per command,
        its rate and burst written in (:func:`xtc.host.tccodec.set_tbf_rate`): pyroute2 computes TBF's rate table in
        Python, 1-5 ms for each new rate, and rate mode sends new rates at every event."""
        if state in (OPEN, CLOSED) or state // 8 > U32_MAX:
            handle, parent = (_LEAF_MAJOR_BASE + minor) << 16, ROOT_HANDLE | minor
            return self._patched(("tbf", command, state), lambda: self._encode_tbf(command, state), handle, parent)
        return self._tbf_rate(command, minor, state // 8, self._rate_burst(state))

    def _tbf_rate(self, command: str, minor: int, rate_Bps: int, burst: int) -> bytes:
        """The TBF leaf message of class ``7c0:minor`` at ``rate_Bps`` (< 2**32) with ``burst`` bytes:
        the rate template, encoded once per command, with both written in."""
        handle, parent = (_LEAF_MAJOR_BASE + minor) << 16, ROOT_HANDLE | minor
        msg = bytearray(self._patched(("tbf-rate", command), lambda: self._encode_tbf(command, _RATE_TEMPLATE_BPS),
                                      handle, parent))
        set_tbf_rate(msg, rate_Bps, burst)
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
        return encode_tbf(command, self._nl.next_seq(), ifindex=self.ifindex, handle=_LEAF_MAJOR_BASE << 16,
                          parent=ROOT_HANDLE, rate_Bps=rate_bps // 8, burst=burst, limit=self.queue_limit_bytes)

    def _check_state(self, state: int, dest: int) -> None:
        if not isinstance(state, int) or not (state in (OPEN, CLOSED) or 8 <= state <= MAX_RATE_BPS):
            raise GateError(f"{self._where}: dest host {dest}: bad state {state!r}")

    def _root(self) -> TcObject | None:
        try:
            return root_qdisc(self._nl, self.ifindex)
        except OSError as e:
            raise self._fail("dump qdiscs", e.errno or 0, "") from None

    def _flow_filter(self, flow: Flow, node: int, classid: int) -> bytes:
        """The "add u32 filter" message of ``flow`` (node ``node``, pointing at ``classid``).

        pyroute2 encodes it once per address family (about 0.2 ms: its u32 plugin parses the keys'
        text); each flow's copy has its sequence, node, class and addresses written in
        (:func:`xtc.host.tccodec.set_u32_filter`), the same bytes pyroute2 would give for that flow."""
        out = bytearray(self._flow_filter_template(flow.src.version == 4))
        set_u32_filter(out, self._nl.next_seq(), node, classid, flow.src.packed + flow.dst.packed)
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
        failed = [(what, acks[_seq_of(m)]) for what, m in steps if acks[_seq_of(m)][0]]
        if failed:
            if not acks[_seq_of(steps[0][1])][0]:
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
        class_seq, filter_seq = (_seq_of(m) for _, m in steps)
        fh = next((h for sq, h in echoed if sq == filter_seq), 0)
        failed = [(what, acks[_seq_of(m)]) for what, m in steps if acks[_seq_of(m)][0]]
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
        msg = u32_class_change(self._nl.next_seq(), self.ifindex, e.filter_handle, ROOT_HANDLE, prio, proto,
                               ROOT_HANDLE | dest.minor)
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
        msg = encode_tcmsg(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, self._nl.next_seq(), self.ifindex, fh,
                           ROOT_HANDLE, filter_info(prio, proto), attr_str(TCA_KIND, "u32"))
        try:
            self._run([("delete u32 filter", msg)], flow)
        except GateError:
            if strict:
                raise

    def _delete_class(self, minor: int, dest: int, strict: bool, flow: Flow | None = None) -> None:
        msg = encode_tcmsg(RTM_DELTCLASS, NLM_F_REQUEST | NLM_F_ACK, self._nl.next_seq(), self.ifindex,
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
            set_seq(batch, seq, off - 8)
            seqs.append(seq)
        try:
            # No ACK asked: rtnetlink applies the batch in send() and queues an error message for
            # a refused change only (the ACKs would be built and read for nothing).
            nl.send(batch)
            self._frame(self._wake, None)
            if self.drain_on_close:
                for entry in plan.closing:
                    self._send_drain(entry)
            failed = nl.read_errors(seqs)
        except OSError as e:
            raise GateError(f"{self._where}: set_states: {error_text(e.errno or 0, '')}") from None
        for entry, state in zip(plan.entries, plan.states):
            entry.state = state
        if failed:
            errors = []
            for entry, state, old, seq in zip(plan.entries, plan.states, before, seqs):
                if seq in failed:
                    entry.state = old
                    code, kmsg = failed[seq]
                    errors.append(f"dest host {entry.dest} to {_state_text(state)}: {error_text(code, kmsg)}")
            raise GateError(f"{self._where}: set_states: " + "; ".join(errors))

    def slot_budget_bytes(self, open_for_us: int, from_closed: bool) -> int:
        """The bucket of a destination opened for ``open_for_us`` microseconds, bytes: what the link
        carries in that time, plus ``open_burst_bytes`` when the class was closed (its HTB parent has
        saved that burst up and sends it at once); at least one frame (TBF drops bigger packets)."""
        b = self.link_bps * max(0, open_for_us) // 8_000_000
        if from_closed:
            b += self.open_burst_bytes
        return max(self.closed_burst_bytes, min(b, U32_MAX))

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
                rate_Bps = max(self.closed_rate_bps // 8, least_rate_Bps(budget, ticks_per_us()))
                changes.append((entry, _BUDGET, without_ack(self._tbf_rate("change", entry.minor, rate_Bps, budget))))
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
                msg = cache[key] = without_ack(self._tbf("change", entry.minor, state))
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
            raise GateError(f"{self._where}: wake frame: {error_text(e.errno or 0, '')}") from None

    def stats(self) -> dict[int, DestStats]:
        """Every destination's sent bytes/packets and backlog, from one RTM_GETTCLASS dump."""
        self._require_installed()
        try:
            counters = decode_class_counters(dump_tc(self._nl, RTM_GETTCLASS, self.ifindex, ROOT_HANDLE), ROOT_HANDLE)
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
        RTM_GETTCLASS dump decoded by a :class:`ClassCounterTable` (kept while ``dests`` and ``small``
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
            t = self._table = (dests, small, ClassCounterTable(handles, ROOT_HANDLE))
        try:
            sent, bb, bp = t[2].decode(dump_tc(self._nl, RTM_GETTCLASS, self.ifindex, ROOT_HANDLE))
        except NetlinkDecodeError as e:
            raise GateError(f"{self._where}: counters: {e}") from None
        except OSError as e:
            raise self._fail("dump classes", e.errno or 0, "") from None
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
            req = self._get_root = bytearray(encode_tcmsg(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ECHO, 0, self.ifindex,
                                                          ROOT_HANDLE, TC_H_ROOT))
        seq = nl.next_seq()
        set_seq(req, seq)
        try:
            nl.send(req)
            buf, off, mlen = nl.reply(seq)
            # where the counters lie, learnt once per message length (the layout of one qdisc's
            # message stays while its options do)
            at = self._root_layout.get(mlen)
            if at is None:
                at = self._root_layout[mlen] = root_counter_offsets(buf, off, mlen)
            sent, qlen, backlog = qdisc_counters(buf, off, at)
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
        try:
            put_back_root(self._nl, self.ifindex, self._original)
        except OSError as e:
            raise GateError(f"{self._where}: {e}") from None

    def _delete_root(self) -> None:
        """Delete our root (gone already: nothing to do)."""
        try:
            delete_root(self._nl, self.ifindex, ROOT_HANDLE, "delete root htb 7c0:")
        except OSError as e:
            raise GateError(f"{self._where}: {e}") from None

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
    try:
        if not remove_root(ifname, netns, handle=ROOT_HANDLE, kind="htb"):
            return False
    except NetlinkError as e:
        if e.errno == _errno.ENODEV:
            raise GateError(f"{where}: no such interface") from None
        raise GateError(f"{where}: cleanup: {e}") from None
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
        from pyroute2.netlink.exceptions import NetlinkError as Pyroute2NetlinkError

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
            except Pyroute2NetlinkError as e:
                what = f"set gso_max_segs {set_to}" if set_to is not None else "read gso_max_segs"
                kmsg = str(e.args[1]) if len(e.args) > 1 and e.args[1] != os.strerror(e.code) else ""
                raise GateError(f"{where}: {what}: {error_text(e.code, kmsg)}") from None
            return int(gso), (int(tso) if tso is not None else None)

    return in_netns(netns, op)


