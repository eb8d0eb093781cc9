"""Lab only: an emulated Xen netback cost, X microseconds of host softirq work for every packet
delivered into a VR (``xtc lab run tcpudp --host-delivery-cost-us X``).

Why: the paper's premise (xtc-paper.txt, sections 1 and 7.3) is a Dom0 whose packet work is the
bottleneck: netback copies every packet into the guest, so a packet handed to a capped VR that
drops it costs Dom0 the copy, and early drop (issue 48) frees that.  On the lab's host a packet
delivered into a VR's full socket costs the host about 1.1 us and the host is not saturated under
XTC alone (docs/results/2026-11-27-early-drop-quiet/README.md): this module adds the missing cost,
so that early drop can be tried where the premise holds.  The product does not change.

Where: a direct-action ``cls_bpf`` filter on the ``clsact`` *ingress* of each VR-side end of the
VR's veths (``eth0``, ``eth1`` inside the VR's namespace): the first thing the kernel does with a
packet the host has handed over.  The product's early-drop limiter sits before it (the clsact
egress of the host-side end), so a packet the limiter drops never pays, as in Xen, where the vif's
qdisc comes before netback's copy.  The program runs in the NET_RX softirq of the CPU that received
the packet, in whatever task that softirq interrupted or ran after (on this lab mostly the sender's:
the generator for packets into ``eth0``), not in the VR's own context; see the results' README for
the one exception (TCP's ACKs into ``eth1``).

What: the program spins on ``bpf_ktime_get_ns()`` until ``cost_ns`` have passed since it started
(a bounded loop: at most :func:`max_iterations` clock reads, so the verifier can prove it ends),
then counts the packet, the nanoseconds it spent and whether the bound cut it short in its
interface's slot of an array map, and lets the packet go on (``TC_ACT_UNSPEC``).  A time-based spin
costs the same time on any CPU and its cost is read back exactly (the map), unlike a chain of
filters whose cost per packet would have to be measured on each host.

Pure parts: :func:`program`, :func:`max_iterations`, :func:`parse_slot`, :func:`check_cost_us`.
:class:`DeliveryCost` loads and attaches them (``bpf()`` through :mod:`xtc.host.bpfsys`, netlink
through :mod:`xtc.host.netlink` in the VR's namespace) and takes everything away again.

Units: us (the option), ns (the program and the map), packets.

Public API
----------
program, max_iterations, parse_slot, check_cost_us, Slot, DeliveryCost, attached, FILTER_PRIO, NAME
"""

from __future__ import annotations

import errno
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Self

from xtc.host import bpfsys, qdiscs, tccodec
from xtc.host.bpfprog import decode, insn
from xtc.host.netlink import (
    NetlinkError,
    RouteSocket,
    error_text,
    interface_index,
    open_route_socket,
)

__all__ = ["FILTER_PRIO", "NAME", "DeliveryCost", "Slot", "attached", "check_cost_us", "max_iterations",
           "parse_slot", "program"]

#: The filter's priority and handle on the clsact ingress (``pref 3077`` in ``tc filter show``) and name.
FILTER_PRIO = FILTER_HANDLE = 0x0C05
NAME = "xtc_lab_cost"
MAP_ARRAY = 2  # enum bpf_map_type BPF_MAP_TYPE_ARRAY
SLOT_BYTES = 24  # packets, spent_ns, cut_short (u64 each)
HELPER_MAP_LOOKUP_ELEM, HELPER_KTIME_GET_NS = 1, 5
TC_ACT_UNSPEC = -1
#: The largest cost the option takes, us (a Dom0 copy is a few us; beyond this the lab would stall).
MAX_COST_US = 50.0
#: No clock read takes less than this, ns: the loop's bound is the cost over it (it never binds in use).
MIN_NS_PER_READ = 4
_SLOT = struct.Struct("<QQQ")


def check_cost_us(cost_us: object, option: str = "--host-delivery-cost-us") -> float:
    """``cost_us`` as a float in (0, :data:`MAX_COST_US`]; ValueError naming ``option`` otherwise."""
    if isinstance(cost_us, bool) or not isinstance(cost_us, (int, float)) or not math.isfinite(cost_us) \
            or not 0 < cost_us <= MAX_COST_US:
        raise ValueError(f"{option} {cost_us!r}: want a number of microseconds in (0, {MAX_COST_US:g}]")
    return float(cost_us)


def max_iterations(cost_ns: int) -> int:
    """The loop's bound for ``cost_ns``: enough clock reads at :data:`MIN_NS_PER_READ` each, plus 64."""
    if isinstance(cost_ns, bool) or not isinstance(cost_ns, int) or not 0 < cost_ns <= MAX_COST_US * 1000:
        raise ValueError(f"cost_ns {cost_ns!r}: want 1..{int(MAX_COST_US * 1000)}")
    return cost_ns // MIN_NS_PER_READ + 64


def _ld_map(dst: int, map_fd: int) -> list[bytes]:
    return [insn(0x18, dst, 1, 0, map_fd), insn(0x00)]  # ld_imm64 of a map fd (BPF_PSEUDO_MAP_FD): two slots


def program(map_fd: int, slot: int, cost_ns: int) -> bytes:
    """The classifier: spin ``cost_ns`` on the clock, count the packet in ``slot`` of the array map
    ``map_fd`` (packets += 1, spent_ns += what it spent, cut_short += 1 if the bound ended the
    loop before ``cost_ns``), return ``TC_ACT_UNSPEC`` (the packet goes on)."""
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 2**31:
        raise ValueError(f"slot {slot!r}: want 0..2**31-1")
    n = max_iterations(cost_ns)
    code = [
        insn(0x85, 0, 0, 0, HELPER_KTIME_GET_NS),  # 0  r0 = now
        insn(0xBF, 7, 0),                          # 1  r7 = start
        insn(0xBF, 8, 0),                          # 2  r8 = start
        insn(0x07, 8, 0, 0, cost_ns),              # 3  r8 += cost: the deadline
        insn(0xB7, 9, 0, 0, n),                    # 4  r9 = the loop's bound
        insn(0x85, 0, 0, 0, HELPER_KTIME_GET_NS),  # 5  LOOP: r0 = now
        insn(0xAD, 0, 8, 1),                       # 6  if now < deadline goto 8
        insn(0x05, 0, 0, 2),                       # 7  goto DONE (10)
        insn(0x17, 9, 0, 0, 1),                    # 8  r9 -= 1
        insn(0x55, 9, 0, -5, 0),                   # 9  if r9 != 0 goto LOOP (5)
        insn(0xBF, 6, 0),                          # 10 DONE: r6 = now
        insn(0x1F, 6, 7),                          # 11 r6 -= start: ns spent
        insn(0x62, 10, 0, -4, slot),               # 12 key (fp-4) = slot
        *_ld_map(1, map_fd),                       # 13,14 r1 = the map
        insn(0xBF, 2, 10),                         # 15 r2 = fp
        insn(0x07, 2, 0, 0, -4),                   # 16 r2 = &key
        insn(0x85, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),  # 17 r0 = lookup(map, &key)
        insn(0x15, 0, 0, 5, 0),                    # 18 if r0 == 0 goto OUT (24)
        insn(0xB7, 1, 0, 0, 1),                    # 19 r1 = 1
        insn(0xDB, 0, 1, 0, 0),                    # 20 lock slot.packets += 1
        insn(0xDB, 0, 6, 8, 0),                    # 21 lock slot.spent_ns += r6
        insn(0x55, 9, 0, 1, 0),                    # 22 if r9 != 0 goto OUT (24): the deadline ended it
        insn(0xDB, 0, 1, 16, 0),                   # 23 lock slot.cut_short += 1
        insn(0xB7, 0, 0, 0, TC_ACT_UNSPEC),        # 24 OUT: r0 = -1 (the packet goes on)
        insn(0x95),                                # 25 exit
    ]
    return b"".join(code)


#: Instructions in :func:`program` (the ``ld_imm64`` counts two).
INSN_COUNT = len(decode(program(0, 0, 1000)))


@dataclass(frozen=True)
class Slot:
    """One interface's count: packets that paid the cost, the ns they spent, those the bound cut short."""

    packets: int
    spent_ns: int
    cut_short: int


def parse_slot(value: bytes) -> Slot:
    """A map slot's three counters."""
    return Slot(*_SLOT.unpack(value[:SLOT_BYTES]))


def attached(ifname: str, netns: str | None) -> bool:
    """Whether ``ifname`` (in ``netns``) carries the cost filter on its clsact ingress."""
    with open_route_socket(netns) as nl:
        ifindex = interface_index(ifname, netns)
        if ifindex is None:
            return False
        return any(f.kind == "bpf" and f.prio == FILTER_PRIO and f.bpf_name == NAME
                   for f in qdiscs.filters(nl, ifindex, tccodec.CLSACT_INGRESS, "dump ingress filters"))


@dataclass
class DeliveryCost:
    """The emulated delivery cost on ``ifnames`` of network namespace ``netns`` (a VR's own ends)."""

    netns: str
    ifnames: Sequence[str]
    cost_us: float
    _map_fd: int = field(default=-1, repr=False)
    _prog_fds: list[int] = field(default_factory=list, repr=False)
    _on: dict[str, int] = field(default_factory=dict, repr=False)  # ifname -> index, where a clsact was added

    def __post_init__(self) -> None:
        self.cost_us = check_cost_us(self.cost_us)
        if not self.ifnames:
            raise ValueError(f"delivery cost in {self.netns}: no interface named")

    @property
    def cost_ns(self) -> int:
        return round(self.cost_us * 1000)

    def install(self) -> None:
        """The map, a program per interface, and on each interface a clsact with the filter on its
        ingress.  An interface that has a clsact or ingress qdisc already is refused (nothing of ours is
        left: what was installed before the error is removed)."""
        try:
            self._map_fd = bpfsys.map_create(MAP_ARRAY, 4, SLOT_BYTES, len(self.ifnames), NAME)
            with open_route_socket(self.netns) as nl:
                for slot, ifname in enumerate(self.ifnames):
                    self._attach(nl, slot, ifname)
        except BaseException:
            self.remove()
            raise

    def _attach(self, nl: RouteSocket, slot: int, ifname: str) -> None:
        where = f"delivery cost on {ifname} (netns {self.netns})"
        code_ = program(self._map_fd, slot, self.cost_ns)
        try:  # without a log: the loop's verification logs more than the log buffer holds
            prog = bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, code_, NAME, verifier_log=False)
        except bpfsys.BpfError:
            try:  # again with the log, for the verifier's reason
                bpfsys.close(bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, code_, NAME))
            except bpfsys.BpfError as e2:
                e = e2
            raise OSError(e.errno, f"{where}: the kernel refused the program: {e}") from None
        self._prog_fds.append(prog)
        ifindex = interface_index(ifname, self.netns)
        if ifindex is None:
            raise OSError(errno.ENODEV, f"{where}: no such interface")
        code, kmsg = nl.ack(tccodec.encode_clsact("add", nl.next_seq(), ifindex), "add clsact")
        if code == errno.EEXIST:
            raise OSError(code, f"{where}: the interface has a clsact or ingress qdisc already: not touched")
        if code:
            raise OSError(code, f"{where}: add clsact: {error_text(code, kmsg)}")
        self._on[ifname] = ifindex
        code, kmsg = nl.ack(tccodec.encode_bpf_filter(nl.next_seq(), ifindex=ifindex, parent=tccodec.CLSACT_INGRESS,
                                                        prio=FILTER_PRIO, handle=FILTER_HANDLE, prog_fd=prog, name=NAME),
                          "attach the filter")
        if code:
            raise OSError(code, f"{where}: attach the filter: {error_text(code, kmsg)}")

    def counts(self) -> dict[str, Slot]:
        """Each interface's counters so far (all zero before :meth:`install` or after :meth:`remove`)."""
        out = {}
        for slot, ifname in enumerate(self.ifnames):
            v = None if self._map_fd < 0 else bpfsys.map_lookup(self._map_fd, struct.pack("<I", slot), SLOT_BYTES)
            out[ifname] = Slot(0, 0, 0) if v is None else parse_slot(v)
        return out

    def remove(self) -> None:
        """Delete the clsact this added on each interface (its filter goes with it; an interface that is
        gone took them along), close the program and map fds.  Safe to call again."""
        errors = []
        if self._on:
            try:
                with open_route_socket(self.netns) as nl:
                    for ifname, ifindex in list(self._on.items()):
                        code, kmsg = nl.ack(tccodec.encode_clsact("del", nl.next_seq(), ifindex), "delete clsact")
                        if code and code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
                            errors.append(f"{ifname}: {error_text(code, kmsg)}")
                        del self._on[ifname]
            except NetlinkError as e:
                if e.errno != errno.ENOENT:  # the namespace itself is gone: so is everything in it
                    errors.append(str(e))
                self._on.clear()
        for fd in self._prog_fds:
            bpfsys.close(fd)
        self._prog_fds.clear()
        bpfsys.close(self._map_fd if self._map_fd >= 0 else None)
        self._map_fd = -1
        if errors:
            raise OSError(errno.EIO, f"delivery cost in {self.netns}: cannot remove: {'; '.join(errors)}")

    def __enter__(self) -> Self:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
