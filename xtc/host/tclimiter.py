"""Early drop's limiter on stock Linux: a TBF root qdisc on the host-side interface, over netlink.

:class:`TcLimiter` implements :class:`xtc.host.limiter.Limiter`.  The qdisc is
``tbf`` with root handle ``ed0:`` (how :meth:`TcLimiter.adopt` and :meth:`TcLimiter.remove`
recognise it), rate in bytes/s (``TCA_TBF_BURST`` sets the bucket exactly, as for the XCo gate's
leaves) and a queue of one bucket (``limit`` = burst bytes): a packet that does not fit is
dropped, not delayed, so a limiter that does not bind adds no queue.  Why TBF on the host's
egress into the VR and not an ingress drop: docs/design/early-drop.md (measured).

The messages are encoded by :mod:`xtc.host.tccodec` (pure) and go through the one netlink
adapter, :class:`xtc.host.netlink.RouteSocket`; the root-qdisc look-up and deletion are
:mod:`xtc.host.qdiscs`'s.  Netlink errors become :class:`~xtc.host.limiter.LimiterError` here.

With ``netns``, every operation happens in ``/run/netns/<netns>`` (tests; a host's VRs'
interfaces are in the host's namespace).

Public API
----------
TcLimiter(netns=None), ROOT_HANDLE
"""

from __future__ import annotations

from collections.abc import Iterable

from xtc.host import qdiscs, tccodec
from xtc.host.netlink import (
    NetlinkError,
    error_text,
    interface_index,
    open_route_socket,
)

from .limiter import LimiterError, LimiterSetting

__all__ = ["ROOT_HANDLE", "TcLimiter"]

#: Handle of the limiter's root TBF (major 0xed0, "early drop"): how a leftover is recognised.
ROOT_HANDLE = 0x0ED0_0000
#: Root qdiscs the kernel attaches by itself (handle 0): the limiter may replace these, nothing else.
_DEFAULT_KINDS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "")


def _setting(o: tccodec.TcObject) -> LimiterSetting | None:
    got = tccodec.tbf_parameters(o.raw)
    if got is None or got[0] <= 0:
        return None
    rate, buffer_ticks = got
    burst = round(buffer_ticks / qdiscs.ticks_per_us() * rate / 1e6)
    return LimiterSetting(rate_bytes_per_s=int(rate), burst_bytes=max(1, int(burst)))


class TcLimiter:
    """Early drop's limiters of one network namespace (the host's, or ``netns``)."""

    #: What the limit counts: bytes (``LimiterSetting.rate_bytes_per_s`` and ``burst_bytes``).
    counts = "bytes"

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        #: Interface name -> index, as last looked up (one name per index): the per-period read of
        #: the drop counters (:meth:`dropped_by_interface`) finds the limiters by index in one dump.
        self._indices: dict[str, int] = {}
        #: Interfaces this adapter put its limiter on (and has not removed since): changed in place.
        self._mine: set[str] = set()
        try:
            self._nl = open_route_socket(netns)
        except NetlinkError as e:
            raise LimiterError(f"early-drop limiter: {e}") from None

    def _where(self, ifname: str) -> str:
        return ifname + (f" (netns {self.netns})" if self.netns else "")

    def _fail(self, ifname: str, what: str, e: OSError) -> LimiterError:
        return LimiterError(f"{self._where(ifname)}: early-drop limiter: {what}: "
                            f"{e if isinstance(e, NetlinkError) else error_text(e.errno or 0)}")

    def _index(self, ifname: str) -> int | None:
        try:
            found = interface_index(ifname, self.netns)
        except NetlinkError as e:
            raise self._fail(ifname, "find the interface", e) from None
        if found is None:
            self._indices.pop(ifname, None)
        elif self._indices.get(ifname) != found:
            for other in [n for n, i in self._indices.items() if i == found]:
                del self._indices[other]  # an index the kernel gave another interface since
            self._indices[ifname] = found
        return found

    def _root(self, ifname: str, ifindex: int) -> tccodec.TcObject | None:
        try:
            return qdiscs.root_qdisc(self._nl, ifindex)
        except OSError as e:
            raise self._fail(ifname, "read qdiscs", e) from None

    @staticmethod
    def _ours(root: tccodec.TcObject | None) -> bool:
        return root is not None and root.handle == ROOT_HANDLE and root.kind == "tbf"

    def _send(self, ifname: str, what: str, command: str, ifindex: int, setting: LimiterSetting) -> None:
        burst = setting.burst_bytes
        msg = tccodec.encode_tbf(command, self._nl.next_seq(), ifindex=ifindex, handle=ROOT_HANDLE,
                                 parent=tccodec.TC_H_ROOT, rate_Bps=setting.rate_bytes_per_s, burst=burst, limit=burst)
        try:
            code, kmsg = self._nl.ack(msg, what)
        except OSError as e:
            raise self._fail(ifname, what, e) from None
        if code:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: {what}: {error_text(code, kmsg)}")

    def _require(self, ifname: str) -> tuple[int, tccodec.TcObject | None]:
        ifindex = self._index(ifname)
        if ifindex is None:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: no such interface")
        return ifindex, self._root(ifname, ifindex)

    def install(self, ifname: str, setting: LimiterSetting) -> bool:
        what = f"change tbf to {setting.rate_bytes_per_s} B/s"
        if ifname in self._mine:
            # Ours since we put it there: one change, no root look-up.  A change (no NLM_F_CREATE)
            # needs a root of our handle, else the kernel refuses and the full path below finds out why.
            ifindex = self._index(ifname)
            if ifindex is not None:
                try:
                    self._send(ifname, what, "change", ifindex, setting)
                    return False
                except LimiterError:
                    pass
            self._mine.discard(ifname)
        else:
            # Not known as ours: one add, no root look-up.  The kernel adds a root only over its own
            # default (handle 0); over any other root (someone else's, or a leftover of ours) it
            # refuses (EEXIST), and the full path below says why or changes our leftover.
            ifindex = self._index(ifname)
            if ifindex is not None:
                try:
                    self._send(ifname, f"add tbf {setting.rate_bytes_per_s} B/s", "add", ifindex, setting)
                    self._mine.add(ifname)
                    return True
                except LimiterError:
                    pass
        ifindex, root = self._require(ifname)
        if self._ours(root):
            self._send(ifname, what, "change", ifindex, setting)
            self._mine.add(ifname)
            return False
        if root is not None and (root.handle != 0 or root.kind not in _DEFAULT_KINDS):
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: the interface carries a "
                               f"{root.kind or '?'} root qdisc {root.handle >> 16:x}: that is not the kernel "
                               "default; not replaced (remove it, or leave early drop off for this VR)")
        self._send(ifname, f"add tbf {setting.rate_bytes_per_s} B/s", "add", ifindex, setting)
        self._mine.add(ifname)
        return True

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        ifindex, root = self._require(ifname)
        if not self._ours(root):
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: none to change")
        self._send(ifname, f"change tbf to {setting.rate_bytes_per_s} B/s", "change", ifindex, setting)

    def remove(self, ifname: str) -> bool:
        mine = ifname in self._mine
        self._mine.discard(ifname)
        ifindex = self._index(ifname)
        # One of ours: deleted without a root look-up (the kernel deletes a root only of the handle
        # asked for: EINVAL, "none", for any other).  Else only after seeing that the root is ours.
        if ifindex is None or not (mine or self._ours(self._root(ifname, ifindex))):
            return False
        try:
            return qdiscs.delete_root(self._nl, ifindex, ROOT_HANDLE, "delete root tbf ed0:")
        except OSError as e:
            raise self._fail(ifname, "delete root tbf ed0:", e) from None

    def park(self, ifname: str) -> bool:
        """A TBF that does not limit would still be a queue: it is removed."""
        return self.remove(ifname)

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        ifindex = self._index(ifname)
        if ifindex is None:
            return None
        root = self._root(ifname, ifindex)
        if root is None or not self._ours(root):
            return None
        return _setting(root), tccodec.queue_drops(root.raw)

    def dropped_packets(self, ifname: str) -> int | None:
        found = self.adopt(ifname)
        return None if found is None else found[1]

    def dropped_by_interface(self, ifnames: Iterable[str]) -> dict[str, int]:
        """One qdisc dump for every limiter: the kernel's qdisc dump ignores the interface index
        (docs/design/netlink.md), so the whole dump is read and the ``ed0:`` roots are picked out
        by index (the names' indices as last looked up; an interface re-created since has a new
        index and is missing from the answer until its limiter is installed again)."""
        by_index: dict[int, str] = {}
        for n in ifnames:
            i = self._indices.get(n)
            if i is None:
                i = self._index(n)
            if i is not None:
                by_index[i] = n
        if not by_index:
            return {}
        try:
            buf = qdiscs.dump_tc(self._nl, tccodec.RTM_GETQDISC, 0, what="dump qdiscs (early-drop counters)")
            found = tccodec.root_drops(buf, ROOT_HANDLE, "tbf")
        except OSError as e:
            raise LimiterError(f"early-drop limiter{f' (netns {self.netns})' if self.netns else ''}: "
                               f"read the drop counters: {e}") from None
        return {by_index[i]: d for i, d in found.items() if i in by_index}

    def close(self) -> None:
        self._nl.close()
