"""Early drop's limiter as a queue-less eBPF packet-rate bucket on the VR's host-side interface.

:class:`BpfLimiter` implements :class:`xtc.host.limiter.Limiter` with the program of
:mod:`xtc.host.bpfprog` (GCRA in packets/s with a credit in seconds; no queue): one program and two
maps (limits, drops; keyed by interface index) per adapter, loaded once through
:mod:`xtc.host.bpfsys`, attached as a direct-action ``cls_bpf`` filter on the ``clsact`` egress of
each limited interface (the host's hand-over to the VR: the veth's host end, Xen's vif) through the
one netlink module (:mod:`xtc.host.netlink`, messages from :mod:`xtc.host.tccodec`, look-ups from
:mod:`xtc.host.qdiscs`).  Why there and why this: docs/design/early-drop.md.

- **A limit change** is one map update (the interface's limits entry; its ``tat`` kept), no netlink.
- **The drop counters** of every limited interface come from one ``BPF_MAP_LOOKUP_BATCH`` of the
  drops map (:meth:`BpfLimiter.dropped_by_interface`): one system call a period for all VRs.
- **The mark**: the filter has priority and handle ``0xed0`` and the name ``xtc_ed`` (the clsact
  was there before) or ``xtc_ed+clsact`` (this limiter added the clsact): how a leftover of a
  killed daemon is recognised (:meth:`BpfLimiter.remove`), and whether its clsact goes with it.
- **Nothing left behind**: a removal deletes the filter, and the clsact only when the limiter added
  it and no other filter sits on it (someone else's clsact stays, with their filters); an
  ``ingress`` qdisc (which excludes clsact) is refused, not replaced.  A restart after SIGKILL finds
  the leftovers by their mark and removes them (the daemon installs fresh ones from the next
  period's rates: docs/design/early-drop.md); :func:`read_attached` reads a leftover's limit and
  counter through its program's id (``BPF_PROG_GET_FD_BY_ID``, ``BPF_OBJ_GET_INFO_BY_FD``,
  ``BPF_MAP_GET_FD_BY_ID``): what the lab and the tests read from outside the daemon.

Errors (``bpf()``'s and netlink's) become :class:`~xtc.host.limiter.LimiterError` naming the
interface and the operation.  With ``netns``, the interfaces are those of ``/run/netns/<netns>``.

Public API
----------
BpfLimiter(netns=None), read_attached, FILTER_PRIO, FILTER_HANDLE, NAME, NAME_OWNS_CLSACT
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from xtc.host import bpfprog, bpfsys, qdiscs, tccodec
from xtc.host.netlink import (
    NetlinkError,
    RouteSocket,
    error_text,
    interface_index,
    open_route_socket,
)

from .limiter import LimiterError, LimiterSetting

__all__ = ["FILTER_HANDLE", "FILTER_PRIO", "NAME", "NAME_OWNS_CLSACT", "BpfLimiter", "read_attached"]

#: The filter's priority and handle (``pref 3792``, ``handle 0xed0`` in ``tc filter show``).
FILTER_PRIO = FILTER_HANDLE = 0x0ED0
#: The filter's name when the clsact was there before, and when this limiter added it.
NAME, NAME_OWNS_CLSACT = "xtc_ed", "xtc_ed+clsact"
LIMITS_MAP, DROPS_MAP = "xtc_ed_limits", "xtc_ed_drops"
#: Interfaces one adapter can limit at once (map entries, allocated as they are used).
MAX_INTERFACES = 16384
_U64 = struct.Struct("<Q")
#: Interfaces whose drop counter did not move that one read looks up again (a re-created one is
#: then missing from the answer, and the daemon installs its limit again).
_INDEX_CHECKS_PER_READ = 8


@dataclass
class _On:
    ifindex: int
    owns_clsact: bool
    parked: bool = False  # attached, but without map entries: it passes every packet


def _ours(f: tccodec.TcFilter) -> bool:
    return f.kind == "bpf" and f.prio == FILTER_PRIO and f.handle == FILTER_HANDLE and f.bpf_name in (NAME, NAME_OWNS_CLSACT)


class BpfLimiter:
    """Early drop's eBPF limiters of one network namespace (the host's, or ``netns``)."""

    #: What the limit counts: packets (``LimiterSetting.rate_pps`` and ``burst_s``).
    counts = "packets"

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._on: dict[str, _On] = {}
        self._limits_fd = self._drops_fd = self._prog_fd = -1
        try:
            self._limits_fd = bpfsys.map_create(bpfsys.MAP_HASH, bpfprog.KEY_BYTES, bpfprog.LIMITS_VALUE_BYTES,
                                                MAX_INTERFACES, LIMITS_MAP, bpfsys.BPF_F_NO_PREALLOC)
            self._drops_fd = bpfsys.map_create(bpfsys.MAP_HASH, bpfprog.KEY_BYTES, bpfprog.DROPS_VALUE_BYTES,
                                               MAX_INTERFACES, DROPS_MAP, bpfsys.BPF_F_NO_PREALLOC)
            self._prog_fd = bpfsys.prog_load(bpfsys.PROG_SCHED_CLS, bpfprog.program(self._limits_fd, self._drops_fd),
                                             NAME)
            self._nl = open_route_socket(netns)
        except (bpfsys.BpfError, NetlinkError) as e:
            self._close_fds()
            raise LimiterError(f"early-drop limiter (bpf): {e}") from None
        self._batch = True  # BPF_MAP_LOOKUP_BATCH until the kernel says it has none
        self._last: dict[str, int] = {}  # each interface's drop counter at the last read
        self._turn = 0  # where the next read's index look-ups start among the idle interfaces

    # ------------------------------------------------------------------ helpers
    def _where(self, ifname: str) -> str:
        return ifname + (f" (netns {self.netns})" if self.netns else "")

    def _fail(self, ifname: str, what: str, e: OSError | str) -> LimiterError:
        text = e if isinstance(e, str) else (str(e) if isinstance(e, (NetlinkError, bpfsys.BpfError))
                                              else error_text(e.errno or 0))
        return LimiterError(f"{self._where(ifname)}: early-drop limiter (bpf): {what}: {text}")

    def _index(self, ifname: str) -> int | None:
        try:
            return interface_index(ifname, self.netns)
        except NetlinkError as e:
            raise self._fail(ifname, "find the interface", e) from None

    def _leftover(self, ifname: str, ifindex: int) -> tccodec.TcFilter | None:
        try:
            found = qdiscs.filters(self._nl, ifindex, tccodec.CLSACT_EGRESS, "dump egress filters")
        except OSError as e:
            raise self._fail(ifname, "read filters", e) from None
        return next((f for f in found if _ours(f)), None)

    def _forget_entries(self, ifindex: int) -> None:
        key = bpfprog.ifindex_key(ifindex)
        for fd in (self._limits_fd, self._drops_fd):
            try:
                bpfsys.map_delete(fd, key)
            except bpfsys.BpfError:
                pass

    @staticmethod
    def _rate(ifname: str, setting: LimiterSetting) -> bytes:
        if setting.rate_pps is None or setting.burst_s is None:
            raise LimiterError(f"{ifname}: early-drop limiter (bpf): the setting has no rate_pps/burst_s "
                               "(this limiter counts packets)")
        return bpfprog.limits_value(setting.rate_pps, setting.burst_s)

    # ------------------------------------------------------------------ Limiter
    def install(self, ifname: str, setting: LimiterSetting) -> bool:
        value = self._rate(ifname, setting)
        ifindex = self._index(ifname)
        if ifindex is None:
            gone = self._on.pop(ifname, None)
            if gone is not None:
                self._forget_entries(gone.ifindex)
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter (bpf): no such interface")
        key = bpfprog.ifindex_key(ifindex)
        on = self._on.get(ifname)
        if on is not None and on.ifindex == ifindex and on.parked:
            try:  # attached already, idle: its entries again (its counter from 0), no netlink
                bpfsys.map_update(self._drops_fd, key, _U64.pack(0))
                bpfsys.map_update(self._limits_fd, key, value)
            except bpfsys.BpfError as e:
                self._forget_entries(ifindex)
                raise self._fail(ifname, "set the limit", e) from None
            on.parked = False
            return True
        if on is not None and on.ifindex == ifindex:
            try:  # a change: one map update, the bucket's tat kept (no fresh credit on every change)
                old = bpfsys.map_lookup(self._limits_fd, key, bpfprog.LIMITS_VALUE_BYTES)
                tat = 0 if old is None else bpfprog.parse_limits_value(old)[2]
                bpfsys.map_update(self._limits_fd, key, bpfprog.limits_value(setting.rate_pps, setting.burst_s, tat),  # type: ignore[arg-type]
                                  bpfsys.BPF_EXIST)
                return False
            except bpfsys.BpfError as e:
                raise self._fail(ifname, f"change the limit to {setting.rate_pps:.0f} pps", e) from None
        if on is not None:  # the interface was re-created (a new index): its old entries go
            self._forget_entries(on.ifindex)
            del self._on[ifname]
        try:
            bpfsys.map_update(self._drops_fd, key, _U64.pack(0))
            bpfsys.map_update(self._limits_fd, key, value)
        except bpfsys.BpfError as e:
            self._forget_entries(ifindex)
            raise self._fail(ifname, "set the limit", e) from None
        try:
            owns = self._attach(ifname, ifindex)
        except LimiterError:
            self._forget_entries(ifindex)
            raise
        self._on[ifname] = _On(ifindex, owns)
        return True

    def _attach(self, ifname: str, ifindex: int) -> bool:
        """A clsact (unless there is one) and the filter on its egress; whether the clsact is ours."""
        try:
            code, kmsg = self._nl.ack(tccodec.encode_clsact("add", self._nl.next_seq(), ifindex), "add clsact")
            added = code == 0
            owns = added
            if code == errno.EEXIST:
                q = qdiscs.clsact_qdisc(self._nl, ifindex)
                if q is not None and q.kind != "clsact":
                    raise self._fail(ifname, "attach", f"the interface carries an {q.kind} qdisc, which excludes "
                                     "clsact: not replaced (remove it, or leave early drop off for this VR)")
                left = self._leftover(ifname, ifindex)
                owns = left is not None and left.bpf_name == NAME_OWNS_CLSACT  # a killed daemon's clsact
            elif code:
                raise self._fail(ifname, "add clsact", error_text(code, kmsg))
        except NetlinkError as e:
            raise self._fail(ifname, "add clsact", e) from None
        what = "attach the filter"
        try:
            code, kmsg = self._nl.ack(tccodec.encode_bpf_filter(
                self._nl.next_seq(), ifindex=ifindex, parent=tccodec.CLSACT_EGRESS, prio=FILTER_PRIO,
                handle=FILTER_HANDLE, prog_fd=self._prog_fd, name=NAME_OWNS_CLSACT if owns else NAME), what)
        except NetlinkError as e:
            code, kmsg = e.errno or errno.EIO, str(e)
        if code:
            if added:
                try:
                    self._nl.ack(tccodec.encode_clsact("del", self._nl.next_seq(), ifindex), "delete clsact")
                except NetlinkError:
                    pass
            raise self._fail(ifname, what, error_text(code, kmsg))
        return owns

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        on = self._on.get(ifname)
        if on is None or on.parked or self._index(ifname) != on.ifindex:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter (bpf): none to change")
        self.install(ifname, setting)

    def remove(self, ifname: str) -> bool:
        on = self._on.pop(ifname, None)
        ifindex = self._index(ifname)
        if on is not None and on.ifindex != ifindex:
            self._forget_entries(on.ifindex)  # gone with its interface
            on = None
        if ifindex is None:
            return False
        if on is not None:
            owns = on.owns_clsact
        else:
            left = self._leftover(ifname, ifindex)  # a killed daemon's, found by its mark
            if left is None:
                return False
            owns = left.bpf_name == NAME_OWNS_CLSACT
        what = "delete the filter"
        try:
            code, kmsg = self._nl.ack(tccodec.encode_filter_delete(
                self._nl.next_seq(), ifindex=ifindex, parent=tccodec.CLSACT_EGRESS, prio=FILTER_PRIO,
                handle=FILTER_HANDLE, kind="bpf"), what)
            if code and code not in (errno.ENOENT, errno.EINVAL):
                raise self._fail(ifname, what, error_text(code, kmsg))
            removed = code == 0
            if owns:
                rest = [f for hook in (tccodec.CLSACT_INGRESS, tccodec.CLSACT_EGRESS)
                        for f in qdiscs.filters(self._nl, ifindex, hook, "dump clsact filters")]
                if not rest:
                    what = "delete clsact"
                    code, kmsg = self._nl.ack(tccodec.encode_clsact("del", self._nl.next_seq(), ifindex), what)
                    if code and code not in (errno.ENOENT, errno.EINVAL):
                        raise self._fail(ifname, what, error_text(code, kmsg))
        except NetlinkError as e:
            raise self._fail(ifname, what, e) from None
        self._forget_entries(ifindex)
        return removed

    def park(self, ifname: str) -> bool:
        """Stop limiting on ``ifname`` by deleting its map entries only: the filter stays attached
        and passes every packet (one hash look-up each) until :meth:`remove` or the next install
        (then map updates again, no netlink).  Attaching and detaching a clsact filter is a
        netlink round trip or more each, and the kernel may wait for an RCU grace period when a
        hook gets its first filter or loses its last (measured: ``xtc bench daemon --early-drop``,
        docs/design/early-drop.md): a VR whose limit comes and goes should not pay that."""
        on = self._on.get(ifname)
        if on is None or on.parked or self._index(ifname) != on.ifindex:
            return self.remove(ifname)
        self._forget_entries(on.ifindex)
        on.parked = True
        self._last.pop(ifname, None)
        return True

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        on = self._on.get(ifname)
        if on is not None and on.parked:
            return None  # attached but idle: no limit
        if on is not None and on.ifindex == self._index(ifname):
            key = bpfprog.ifindex_key(on.ifindex)
            try:
                lim = bpfsys.map_lookup(self._limits_fd, key, bpfprog.LIMITS_VALUE_BYTES)
                drops = bpfsys.map_lookup(self._drops_fd, key, bpfprog.DROPS_VALUE_BYTES)
            except bpfsys.BpfError as e:
                raise self._fail(ifname, "read the limit", e) from None
            return _setting(lim), 0 if drops is None else _U64.unpack(drops)[0]
        ifindex = self._index(ifname)
        if ifindex is None:
            return None
        got = _read_leftover(self._nl, ifindex, lambda what, e: self._fail(ifname, what, e))
        if got is None:
            return None
        return _setting(got[0]), got[1]

    def dropped_packets(self, ifname: str) -> int | None:
        on = self._on.get(ifname)
        if on is None:
            return None
        try:
            v = bpfsys.map_lookup(self._drops_fd, bpfprog.ifindex_key(on.ifindex), bpfprog.DROPS_VALUE_BYTES)
        except bpfsys.BpfError as e:
            raise self._fail(ifname, "read the drop counter", e) from None
        return None if v is None else _U64.unpack(v)[0]

    def dropped_by_interface(self, ifnames: Iterable[str]) -> dict[str, int]:
        """Every limiter's drop counter in one ``BPF_MAP_LOOKUP_BATCH`` (a look-up per interface on a
        kernel without batches); only interfaces this adapter limits are in the answer.

        An interface re-created since its install (a VR that rebooted: a new index, the filter gone
        with the old device) is missing from the answer, so that the daemon installs it again: its
        old entry no longer counts, so the index is looked up again for the interfaces whose counter
        did not move since the last read, a few a read in turn (the daemon also installs a VR's
        limit again when its counters reset or its interfaces change: a reboot)."""
        by_index = {on.ifindex: n for n in ifnames if (on := self._on.get(n)) is not None and not on.parked}
        if not by_index:
            return {}
        try:
            got = self._read_drops(by_index)
        except bpfsys.BpfError as e:
            raise LimiterError(f"early-drop limiter (bpf){f' (netns {self.netns})' if self.netns else ''}: "
                               f"read the drop counters: {e}") from None
        idle = sorted(n for n, d in got.items() if self._last.get(n) == d)
        self._last = dict(got)
        if idle:  # a few of them each read, in turn: an index look-up costs a system call
            start = self._turn % len(idle)
            self._turn += _INDEX_CHECKS_PER_READ
            for n in (idle + idle)[start:start + min(_INDEX_CHECKS_PER_READ, len(idle))]:
                if self._index(n) != self._on[n].ifindex:
                    del got[n]
        return got

    def _read_drops(self, by_index: dict[int, str]) -> dict[str, int]:
        if self._batch:
            try:
                keys, values, count = bpfsys.map_dump_batch(self._drops_fd, bpfprog.KEY_BYTES,
                                                            bpfprog.DROPS_VALUE_BYTES, max(64, len(self._on) + 16))
                got = by_index.get
                return {n: d for i, d in zip(np.frombuffer(keys, "<u4", count).tolist(),
                                             np.frombuffer(values, "<u8", count).tolist(), strict=True)
                        if (n := got(i)) is not None}
            except bpfsys.BpfError as e:
                if e.errno not in (errno.EINVAL, errno.ENOTSUP, 524):  # 524: ENOTSUPP (kernel-internal)
                    raise
                self._batch = False
        out = {}
        for i, n in by_index.items():
            v = bpfsys.map_lookup(self._drops_fd, bpfprog.ifindex_key(i), bpfprog.DROPS_VALUE_BYTES)
            if v is not None:
                out[n] = _U64.unpack(v)[0]
        return out

    def _close_fds(self) -> None:
        for fd in (self._prog_fd, self._limits_fd, self._drops_fd):
            bpfsys.close(fd)
        self._prog_fd = self._limits_fd = self._drops_fd = -1

    def close(self) -> None:
        """The fds and the socket; attached filters keep the program and its maps (as they are)."""
        self._close_fds()
        nl = getattr(self, "_nl", None)
        if nl is not None:
            nl.close()


def _setting(limits: bytes | None) -> LimiterSetting | None:
    if limits is None:
        return None
    rate_pps, credit_s, _tat = bpfprog.parse_limits_value(limits)
    return LimiterSetting(rate_bytes_per_s=max(1, round(rate_pps)), burst_bytes=1, rate_pps=rate_pps, burst_s=credit_s)


def _read_leftover(nl: RouteSocket, ifindex: int, fail: object) -> tuple[bytes | None, int] | None:
    """The limits entry and drop count of ``ifindex`` in the maps of the limiter filter attached there
    (any process's), found through the filter's program id; None: no such filter."""
    try:
        found = [f for f in qdiscs.filters(nl, ifindex, tccodec.CLSACT_EGRESS, "dump egress filters") if _ours(f)]
    except OSError as e:
        raise fail("read filters", e) from None  # type: ignore[operator]
    if not found or not found[0].bpf_prog_id:
        return None
    fds: list[int] = []
    try:
        prog = bpfsys.prog_get_fd_by_id(found[0].bpf_prog_id)
        fds.append(prog)
        limits = drops = None
        for mid in bpfsys.prog_map_ids(prog):
            fd = bpfsys.map_get_fd_by_id(mid)
            fds.append(fd)
            name = bpfsys.map_info(fd).name
            if name == LIMITS_MAP:
                limits = fd
            elif name == DROPS_MAP:
                drops = fd
        key = bpfprog.ifindex_key(ifindex)
        lim = None if limits is None else bpfsys.map_lookup(limits, key, bpfprog.LIMITS_VALUE_BYTES)
        d = None if drops is None else bpfsys.map_lookup(drops, key, bpfprog.DROPS_VALUE_BYTES)
        return lim, 0 if d is None else _U64.unpack(d)[0]
    except bpfsys.BpfError as e:
        raise fail("read the attached program's maps", e) from None  # type: ignore[operator]
    finally:
        for fd in fds:
            bpfsys.close(fd)


def read_attached(ifname: str, netns: str | None = None) -> dict[str, float] | None:
    """The early-drop limiter attached to ``ifname`` by any process (a daemon, a killed one), read
    from outside it: ``{"rate_pps", "credit_s", "dropped_packets"}``; None when it carries none.

    Raises
    ------
    LimiterError
        The interface is missing or the kernel refused.
    """
    where = ifname + (f" (netns {netns})" if netns else "")

    def fail(what: str, e: object) -> LimiterError:
        return LimiterError(f"{where}: early-drop limiter (bpf): {what}: {e}")

    try:
        ifindex = interface_index(ifname, netns)
        if ifindex is None:
            raise LimiterError(f"{where}: early-drop limiter (bpf): no such interface")
        nl = open_route_socket(netns)
    except NetlinkError as e:
        raise fail("open", e) from None
    try:
        got = _read_leftover(nl, ifindex, fail)
    finally:
        nl.close()
    if got is None:
        return None
    lim, dropped = got
    out: dict[str, float] = {"dropped_packets": float(dropped)}
    if lim is not None:
        rate, credit, _ = bpfprog.parse_limits_value(lim)
        out.update(rate_pps=rate, credit_s=credit)
    return out
