"""Early drop's limiter on stock Linux: a TBF root qdisc on the host-side interface, over netlink.

:class:`TcLimiter` implements :class:`xtc.host.limiter.Limiter`.  The qdisc is
``tbf`` with root handle ``ed0:`` (how :meth:`TcLimiter.adopt` and :meth:`TcLimiter.remove`
recognise it), rate in bytes/s (``TCA_TBF_BURST`` sets the bucket exactly, as for the XCo gate's
leaves) and a queue of one bucket (``limit`` = burst bytes): a packet that does not fit is
dropped, not delayed, so a limiter that does not bind adds no queue.  Why TBF on the host's
egress into the VR and not an ingress drop: docs/design/early-drop.md (measured).

The messages are encoded and sent with the XCo gate's netlink pieces (:mod:`xtc.host.tcgate`:
one netlink module, not a second copy); when that module is split into ``xtc.host.netlink`` (the
socket) and ``xtc.host.tccodec`` (the codec), this adapter moves onto them unchanged in behaviour.

With ``netns``, every operation happens in ``/run/netns/<netns>`` (tests; a host's VRs'
interfaces are in the host's namespace).

Public API
----------
TcLimiter(netns=None), ROOT_HANDLE, tbf_setting
"""

from __future__ import annotations

import socket
import struct

from xtc.host import tcgate as _tc

from .limiter import LimiterError, LimiterSetting

__all__ = ["ROOT_HANDLE", "TcLimiter", "tbf_setting"]

#: Handle of the limiter's root TBF (major 0xed0, "early drop"): how a leftover is recognised.
ROOT_HANDLE = 0x0ED0_0000
_DEFAULT_KINDS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "")
_QOPT = struct.Struct("=BBHhHI BBHhHI III")  # tc_tbf_qopt: rate, peakrate (tc_ratespec), limit, buffer, mtu


def tbf_setting(raw_message: bytes) -> LimiterSetting | None:
    """The rate and bucket of a dumped TBF qdisc message (None if it has no readable parameters)."""
    start = _tc._NLMSGHDR.size + _tc._TCMSG.size
    qopt = rate64 = None
    for t, a, b in _tc._attrs(raw_message, start, len(raw_message)):
        if t == _tc.TCA_OPTIONS:
            for nt, na, nb in _tc._attrs(raw_message, a, b):
                if nt == _tc._TCA_TBF_PARMS and nb - na >= _QOPT.size:
                    qopt = _QOPT.unpack_from(raw_message, na)
                elif nt == _tc.TCA_TBF_RATE64 and nb - na >= 8:
                    (rate64,) = struct.unpack_from("=Q", raw_message, na)
    if qopt is None:
        return None
    rate = max(qopt[5], rate64 or 0)
    buffer_ticks = qopt[13]
    if rate <= 0:
        return None
    burst = round(buffer_ticks / _tc._ticks_per_us() * rate / 1e6)
    return LimiterSetting(rate_bytes_per_s=int(rate), burst_bytes=max(1, int(burst)))


def _queue_drops(raw_message: bytes) -> int:
    """``drops`` of TCA_STATS2/TCA_STATS_QUEUE (struct gnet_stats_queue: qlen, backlog, drops, ...)."""
    start = _tc._NLMSGHDR.size + _tc._TCMSG.size
    for t, a, b in _tc._attrs(raw_message, start, len(raw_message)):
        if t == _tc.TCA_STATS2:
            for st, c, d in _tc._attrs(raw_message, a, b):
                if st == _tc.TCA_STATS_QUEUE and d - c >= 12:
                    return struct.unpack_from("=III", raw_message, c)[2]
    return 0


class TcLimiter:
    """Early drop's limiters of one network namespace (the host's, or ``netns``)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        try:
            self._nl = _tc.in_netns(netns, _tc._Rtnl)
        except _tc.GateError as e:
            raise LimiterError(f"early-drop limiter: {e}") from None

    def _where(self, ifname: str) -> str:
        return ifname + (f" (netns {self.netns})" if self.netns else "")

    def _index(self, ifname: str) -> int | None:
        def look() -> int | None:
            try:
                return socket.if_nametoindex(ifname)
            except OSError:
                return None
        return _tc.in_netns(self.netns, look)

    def _root(self, ifname: str, ifindex: int) -> _tc._TcObject | None:
        try:
            objs = _tc.decode_class_dump(self._nl.dump(_tc.RTM_GETQDISC, ifindex))
        except OSError as e:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: read qdiscs: "
                               f"{_tc._errtext(e.errno or 0, '')}") from None
        return next((o for o in objs if o.ifindex == ifindex and o.parent == _tc.TC_H_ROOT), None)

    def _ours(self, root: _tc._TcObject | None) -> bool:
        return root is not None and root.handle == ROOT_HANDLE and root.kind == "tbf"

    def _send(self, ifname: str, what: str, msg: bytes) -> None:
        seq = _tc._SEQ.unpack_from(msg, 8)[0]
        try:
            acks, _ = self._nl.transact([msg])
        except OSError as e:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: {what}: "
                               f"{_tc._errtext(e.errno or 0, '')}") from None
        code, kmsg = acks[seq]
        if code:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: {what}: {_tc._errtext(code, kmsg)}")

    def _tbf(self, command: str, ifindex: int, setting: LimiterSetting) -> bytes:
        rate = setting.rate_bytes_per_s
        burst = max(setting.burst_bytes, 1)
        msg = _tc.encode_tc(command, self._nl.next_seq(), kind="tbf", index=ifindex, handle=ROOT_HANDLE,
                            parent=_tc.TC_H_ROOT, rate=min(rate, _tc._U32_MAX), burst=burst, limit=burst)
        msg = _tc._append_option(msg, _tc.TCA_TBF_BURST, struct.pack("=I", burst))
        if rate > _tc._U32_MAX:
            msg = _tc._append_option(msg, _tc.TCA_TBF_RATE64, struct.pack("=Q", rate))
        return msg

    def _require(self, ifname: str) -> tuple[int, _tc._TcObject | None]:
        ifindex = self._index(ifname)
        if ifindex is None:
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: no such interface")
        return ifindex, self._root(ifname, ifindex)

    def install(self, ifname: str, setting: LimiterSetting) -> None:
        ifindex, root = self._require(ifname)
        if self._ours(root):
            self._send(ifname, f"change tbf to {setting.rate_bytes_per_s} B/s", self._tbf("change", ifindex, setting))
            return
        if root is not None and (root.handle != 0 or root.kind not in _DEFAULT_KINDS):
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: the interface carries a "
                               f"{root.kind or '?'} root qdisc {root.handle >> 16:x}: that is not the kernel "
                               "default; not replaced (remove it, or leave early drop off for this VR)")
        self._send(ifname, f"add tbf {setting.rate_bytes_per_s} B/s", self._tbf("add", ifindex, setting))

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        ifindex, root = self._require(ifname)
        if not self._ours(root):
            raise LimiterError(f"{self._where(ifname)}: early-drop limiter: none to change")
        self._send(ifname, f"change tbf to {setting.rate_bytes_per_s} B/s", self._tbf("change", ifindex, setting))

    def remove(self, ifname: str) -> bool:
        ifindex = self._index(ifname)
        if ifindex is None:
            return False
        if not self._ours(self._root(ifname, ifindex)):
            return False
        msg = _tc._encode_plain(_tc.RTM_DELQDISC, _tc.NLM_F_REQUEST | _tc.NLM_F_ACK, self._nl.next_seq(), ifindex,
                                ROOT_HANDLE, _tc.TC_H_ROOT)
        self._send(ifname, "delete root tbf ed0:", msg)
        return True

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        ifindex = self._index(ifname)
        if ifindex is None:
            return None
        root = self._root(ifname, ifindex)
        if not self._ours(root):
            return None
        assert root is not None
        return tbf_setting(root.raw), _queue_drops(root.raw)

    def dropped_packets(self, ifname: str) -> int | None:
        found = self.adopt(ifname)
        return None if found is None else found[1]

    def close(self) -> None:
        self._nl.close()
