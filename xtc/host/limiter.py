"""Early drop's limiter on a VR's host-side interface: the contract (no I/O here), beside its
adapters in the host layer: the queue-less eBPF packet-rate bucket (:mod:`xtc.host.bpflimiter`, the
default) and the TBF root qdisc (:mod:`xtc.host.tclimiter`).

A limiter caps what the host *hands* a VR through one of its host-side interfaces (the host's
egress, i.e. the direction into the VR): packets beyond its rate are dropped by the host before
it delivers them (issue 48; docs/design/early-drop.md).  On a libvirt LXC or cgroup host that
interface is the host end of the VR's veth; on Xen it is the VR's ``vif<domid>.<n>`` (the host
side of netback): the same limiter applies on that name, nothing else changes.

The limiter never replaces queueing someone else put on the interface, and :meth:`Limiter.remove`
leaves exactly what was there before the install: the TBF refuses an interface whose root qdisc is
not the kernel's default (or its own) and gives the kernel default root back; the eBPF bucket adds
a filter to the interface's ``clsact`` egress (adding the clsact only when there is none) and takes
away what it added.  What a killed daemon left behind is recognised by the limiter's own mark (the
TBF's root handle, the filter's priority, handle and name; :meth:`Limiter.adopt`).

Public API
----------
LimiterSetting, Limiter, LimiterError, XEN_VIF_PATTERN, is_xen_vif
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .errors import HostAdapterError

__all__ = ["XEN_VIF_PATTERN", "Limiter", "LimiterError", "LimiterSetting", "is_xen_vif"]

#: A Xen netback interface's host-side name (``vif<domid>.<n>``); LXC domains of the lab can take it too.
XEN_VIF_PATTERN = re.compile(r"vif(\d+)\.(\d+)")


def is_xen_vif(ifname: str) -> bool:
    """True for a Xen-style host-side interface name (``vif3.0``; not ``vif3.0-emu``, the HVM tap)."""
    return XEN_VIF_PATTERN.fullmatch(ifname) is not None


class LimiterError(HostAdapterError):
    """A limiter operation failed; the message names the interface, the operation and the kernel's error.
    Nothing was changed on the interface unless the message says so."""


@dataclass(frozen=True)
class LimiterSetting:
    """A limiter's rate and bucket, both ways: in bytes (``rate_bytes_per_s``, ``burst_bytes``: a
    limiter that counts bytes, the TBF, from the measured mean packet size) and in packets
    (``rate_pps``, and ``burst_s``: the credit in seconds at that rate; a limiter that counts packets,
    the eBPF bucket, needs them).  A limiter uses the pair it counts in (its ``counts``)."""

    rate_bytes_per_s: int
    burst_bytes: int
    rate_pps: float | None = None
    burst_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("rate_bytes_per_s", "burst_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"limiter {name} must be a positive integer, got {v!r}")
        for name in ("rate_pps", "burst_s"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")):
                raise ValueError(f"limiter {name} must be a positive number, got {v!r}")


class Limiter(Protocol):
    """Install, change, find and remove the limiter on host-side interfaces (one per interface)."""

    #: What the limit counts: ``"bytes"`` (a qdisc: :class:`xtc.host.tclimiter.TcLimiter`) or
    #: ``"packets"`` (:class:`xtc.host.bpflimiter.BpfLimiter`).
    counts: str

    def install(self, ifname: str, setting: LimiterSetting) -> bool | None:
        """Put the limiter on ``ifname`` (or change the one there).  Returns True when it was put on
        (its drop counter starts from 0), False when the one there was changed (its counter goes
        on), None when the adapter cannot tell.  Raises :class:`LimiterError` when the interface is
        missing, carries someone else's root qdisc, or the kernel refuses."""
        ...

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        """Change the limiter on ``ifname``; :class:`LimiterError` if there is none or the kernel refuses."""
        ...

    def remove(self, ifname: str) -> bool:
        """Remove the limiter from ``ifname``: the kernel default root comes back.  False if there
        was none (or the interface is gone: its queueing went with it)."""
        ...

    def park(self, ifname: str) -> bool:
        """Stop limiting on ``ifname`` while the VR keeps early drop on: the adapter may leave its
        hook attached, idle (passing every packet), so that the next install is cheap; :meth:`remove`
        takes it away.  False if there was no limiter.  (The TBF removes.)"""
        ...

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        """The limiter found on ``ifname`` (e.g. left by a killed daemon): ``(setting or None when
        unreadable, packets it dropped so far)``; None when the interface has none."""
        ...

    def dropped_packets(self, ifname: str) -> int | None:
        """Packets the limiter on ``ifname`` dropped so far (None: no limiter there)."""
        ...

    def dropped_by_interface(self, ifnames: Iterable[str]) -> dict[str, int]:
        """Packets the limiters on ``ifnames`` dropped so far, in one read for all of them (one
        qdisc dump a period, not a read per interface); an interface missing from the answer has
        no limiter (or is gone)."""
        ...

    def close(self) -> None:
        """Release what the adapter holds (its netlink socket); the limiters stay as they are."""
        ...
