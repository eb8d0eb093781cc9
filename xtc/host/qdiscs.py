"""An interface's root qdisc over netlink: read it, put a recorded one back, remove ours.

Whoever takes over an interface's root qdisc (the XCo gate :mod:`xtc.host.tcgate`; a
per-interface rate limiter) records the root it found (:func:`root_qdisc`), puts it back when it
leaves (:func:`delete_root`, then :func:`put_back_root`), and, after a kill, has its root removed
by the clean-up (:func:`remove_root`: only a root of its own handle and kind, so that a root
someone else put there is left alone).  Deleting a root gives the device its kernel default
(``noqueue`` on veth and bridge ports, ``pfifo_fast``/``mq`` on NICs); a recorded original is
rebuilt from its kind and the options the kernel dumped.

Errors are :mod:`xtc.host.netlink`'s (:class:`~xtc.host.netlink.NetlinkError` and subclasses);
callers name them in their own (``GateError``).
"""

from __future__ import annotations

import errno
import socket

from xtc.host.netlink import (
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_ECHO,
    NLM_F_REPLACE,
    NLM_F_REQUEST,
    NetlinkError,
    NetlinkReplyError,
    RouteSocket,
    attr_str,
    in_netns,
)
from xtc.host.tccodec import (
    RTM_DELQDISC,
    RTM_GETQDISC,
    RTM_GETTFILTER,
    RTM_NEWQDISC,
    TC_H_CLSACT,
    TC_H_ROOT,
    TCA_KIND,
    TcFilter,
    TcObject,
    decode_filters,
    decode_tc_dump,
    encode_tcmsg,
)

__all__ = ["clsact_qdisc", "delete_root", "dump_tc", "filters", "put_back_root", "remove_root", "root_qdisc", "ticks_per_us"]


def dump_tc(nl: RouteSocket, msg_type: int, ifindex: int, parent: int = 0, what: str = "dump") -> memoryview:
    """One dump of qdiscs or classes (``msg_type`` RTM_GETQDISC/RTM_GETTCLASS) of ``ifindex``; a class
    dump with ``parent`` (a qdisc handle) holds only that qdisc's classes (the kernel skips the
    others).  The reply datagrams back to back, valid until the next dump on ``nl``."""
    seq = nl.next_seq()
    return nl.dump(encode_tcmsg(msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, ifindex, parent=parent), seq, what)


def root_qdisc(nl: RouteSocket, ifindex: int) -> TcObject | None:
    """The root qdisc of ``ifindex`` (None: the device has none, e.g. down without a default, or
    is gone).

    One get of the root (``RTM_GETQDISC`` with parent ``TC_H_ROOT``), not a dump: the kernel's
    qdisc dump ignores the interface index and returns the root of *every* interface, so with
    4,000 interfaces one look-up cost 28 ms of CPU (``xtc bench daemon --early-drop``,
    docs/design/early-drop.md).
    """
    return _qdisc_at(nl, ifindex, TC_H_ROOT, "get root qdisc")


def clsact_qdisc(nl: RouteSocket, ifindex: int) -> TcObject | None:
    """The qdisc on ``ifindex``'s ingress/clsact hook (kind ``clsact`` or ``ingress``; None: neither)."""
    return _qdisc_at(nl, ifindex, TC_H_CLSACT, "get clsact qdisc")


def _qdisc_at(nl: RouteSocket, ifindex: int, parent: int, what: str) -> TcObject | None:
    seq = nl.next_seq()
    try:
        got = nl.get(encode_tcmsg(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_ECHO, seq, ifindex, parent=parent),
                     seq, what)
    except NetlinkReplyError as e:
        if e.errno in (errno.ENOENT, errno.ENODEV, errno.EINVAL):
            return None
        raise
    for o in decode_tc_dump(got):
        if o.ifindex == ifindex and o.parent == parent:
            return o
    return None


def filters(nl: RouteSocket, ifindex: int, parent: int, what: str = "dump filters") -> list[TcFilter]:
    """The filters on ``parent`` (e.g. a clsact hook) of ``ifindex`` (a filter dump is per device);
    none when the device or the parent is gone."""
    seq = nl.next_seq()
    try:
        buf = nl.dump(encode_tcmsg(RTM_GETTFILTER, NLM_F_REQUEST | NLM_F_DUMP, seq, ifindex, parent=parent), seq, what)
    except NetlinkReplyError as e:
        if e.errno in (errno.ENOENT, errno.ENODEV, errno.EINVAL):
            return []
        raise
    return [f for f in decode_filters(buf) if f.ifindex == ifindex]


def delete_root(nl: RouteSocket, ifindex: int, handle: int, what: str = "delete root") -> bool:
    """Delete the root qdisc ``handle`` of ``ifindex``; False when there is none (``ENOENT`` or
    ``EINVAL``: the kernel's answers for a root that is gone).

    Raises
    ------
    NetlinkReplyError
        The kernel refused for another reason.
    """
    msg = encode_tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, handle, TC_H_ROOT)
    code, kmsg = nl.ack(msg, what)
    if code in (errno.ENOENT, errno.EINVAL):
        return False
    if code:
        raise NetlinkReplyError(code, what, kmsg)
    return True


def put_back_root(nl: RouteSocket, ifindex: int, original: TcObject | None) -> None:
    """Rebuild a recorded root (its kind and dumped options) unless it is the kernel's default
    (``noqueue``, no root) or a root of that kind is there already.

    Raises
    ------
    NetlinkReplyError
        The kernel refused.
    """
    if original is None or original.kind in ("", "noqueue"):
        return
    now = root_qdisc(nl, ifindex)
    if now is not None and now.kind == original.kind:
        return
    attrs = attr_str(TCA_KIND, original.kind) + original.options_attr()
    what = f"restore original root {original.kind}"
    msg = encode_tcmsg(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, nl.next_seq(),
                       ifindex, original.handle, TC_H_ROOT, 0, attrs)
    code, kmsg = nl.ack(msg, what)
    if code:
        raise NetlinkReplyError(code, what, kmsg)


def remove_root(ifname: str, netns: str | None, *, handle: int, kind: str) -> bool:
    """Remove the root qdisc of ``ifname`` (in ``/run/netns/<netns>`` when given) if it has this
    ``handle`` and ``kind`` (what a killed owner left); True when one was removed.

    Raises
    ------
    NetlinkError
        The namespace or the interface does not exist (``ENODEV``), or the kernel refused.
    """

    def open_nl() -> tuple[RouteSocket, int]:
        try:
            index = socket.if_nametoindex(ifname)
        except OSError:
            raise NetlinkError(errno.ENODEV, "no such interface") from None
        return RouteSocket(), index

    try:
        nl, ifindex = open_nl() if netns is None else in_netns(netns, open_nl)
    except NetlinkError:
        raise
    except OSError as e:
        raise NetlinkError(e.errno or errno.EIO, f"opening a netlink route socket: {e}") from None
    try:
        root = root_qdisc(nl, ifindex)
        if root is None or root.handle != handle or root.kind != kind:
            return False
        return delete_root(nl, ifindex, handle, f"delete root {kind} {handle >> 16:x}:")
    finally:
        nl.close()


_TICKS: list[float] = []


def ticks_per_us() -> float:
    """Kernel packet-scheduler ticks per microsecond (``/proc/net/psched``: t2us and us2t; 15.625
    today, and when the file cannot be read)."""
    if not _TICKS:
        try:
            with open("/proc/net/psched") as f:
                t2us, us2t = (int(x, 16) for x in f.read().split()[:2])
            _TICKS.append(t2us / us2t)
        except (OSError, ValueError):
            _TICKS.append(15.625)
    return _TICKS[0]
