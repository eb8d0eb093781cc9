"""Collector: which interfaces belong to which VR, and each VR's packet rates.

Throughput and offered rate
---------------------------
The meter sees the *host side* of every VR interface (Xen's backend ``vif``
in Dom0, the host end of an LXC/QEMU veth or tap).  What the host *receives* on
those interfaces is what the VR sent out, so:

* ``rx_pps`` (the VR's **throughput**, the quantity XTC controls) = sum over the
  VR's interfaces of the host-side RX packet rates, packets/s;
* ``tx_pps`` (the **offered rate**) = sum over the VR's interfaces of the
  host-side TX packet rates, packets/s: what the host handed to the VR.

Resolvers (interfaces of one VR)
--------------------------------
* :class:`XenVifs`: Xen names a domain's backend interfaces ``vif<domid>.<n>``
  (and ``vif<domid>.<n>-emu`` for the emulated twin of an HVM guest, also
  counted: only one of the two carries traffic); the domid comes from libvirt
  (``dom.ID()``), the names from the interfaces the meter sees.
* :class:`LibvirtDomainInterfaces`: libvirt LXC/QEMU: the
  ``<interface><target dev=.../>`` names of the live domain XML.
* :class:`StaticInterfaces`: plain VRs (a process or namespace in a cgroup):
  the names listed in the configuration.

Re-resolution rule (follows a VR that reboots)
-----------------------------------------------
A VR's interface list is looked up again when (a) it was never looked up,
(b) the last lookup found the VR not running or libvirt unreachable, (c) any
interface of the last lookup is missing from the meter's current interface
set (a Xen reboot gives a new domid and so new vif names; an LXC restart
re-creates its veths), or (d) ``refresh_s`` seconds (default 10) have passed
(a hot-plugged interface).  Otherwise the cached list is used, so libvirt is
asked about once per ``refresh_s`` per VR in the steady state.

A VR sample has ``rx_pps``/``tx_pps`` None (no measurement: the controller
should hold its cap) when the VR is not running, has no interfaces, or any of
its interfaces has no rate yet (it just appeared: the meter needs two samples).

Public API
----------
Resolution, InterfaceResolver (Protocol), StaticInterfaces(interfaces),
XenVifs(conn, domain), LibvirtDomainInterfaces(conn, domain),
xen_vif_names(domid, present) -> tuple[str, ...] (pure),
needs_resolve(...) -> bool (pure, the rule above),
VRSample, Collector(refresh_s=10.0): ``add(vr, resolver)``, ``remove(vr)``,
``collect(now_s, rates, present=None) -> dict[str, VRSample]``,
``sample_vr(vr, now_s, rates, present=None) -> VRSample``.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from xtc.host.errors import HostAdapterError
from xtc.host.libvirt_conn import LibvirtConn
from xtc.daemon.meter import IfRates

__all__ = [
    "Resolution",
    "InterfaceResolver",
    "StaticInterfaces",
    "XenVifs",
    "LibvirtDomainInterfaces",
    "xen_vif_names",
    "needs_resolve",
    "VRSample",
    "Collector",
]

log = logging.getLogger(__name__)

_VIF_RE = re.compile(r"^vif(\d+)\.(\d+)(-emu)?$")


@dataclass(frozen=True, slots=True)
class Resolution:
    """Result of one interface lookup for a VR."""

    running: bool
    interfaces: tuple[str, ...] = ()
    reason: str = ""
    domid: int | None = None


class InterfaceResolver(Protocol):
    """Finds a VR's host-side interfaces; ``present`` = interfaces the meter sees now."""

    def resolve(self, present: frozenset[str]) -> Resolution: ...


def xen_vif_names(domid: int, present: Iterable[str]) -> tuple[str, ...]:
    """Xen backend interfaces of domain ``domid`` among ``present``, sorted by device number.

    Matches ``vif<domid>.<n>`` and ``vif<domid>.<n>-emu`` exactly (``vif1.0``
    is not an interface of domain 11).
    """
    found = []
    for name in present:
        m = _VIF_RE.match(name)
        if m and int(m.group(1)) == domid:
            found.append((int(m.group(2)), m.group(3) or "", name))
    return tuple(n for _, _, n in sorted(found))


class StaticInterfaces:
    """Interfaces fixed in the configuration (plain VRs). Always 'running'."""

    def __init__(self, interfaces: Iterable[str]) -> None:
        names = tuple(interfaces)
        if not names or any(not isinstance(n, str) or not n or "/" in n or n.strip() != n for n in names):
            raise ValueError(f"StaticInterfaces needs non-empty interface names, got {names!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"StaticInterfaces: duplicate interface names in {names!r}")
        self.interfaces = names

    def resolve(self, present: frozenset[str]) -> Resolution:
        return Resolution(True, self.interfaces)


class XenVifs:
    """Xen domain: domid from libvirt, then ``vif<domid>.<n>`` among the present interfaces."""

    def __init__(self, conn: LibvirtConn, domain: str) -> None:
        self.conn = conn
        self.domain = domain

    def resolve(self, present: frozenset[str]) -> Resolution:
        info = self.conn.domain_info(self.domain)
        if not info.running or info.domid is None:
            return Resolution(False, reason=info.reason or "domain has no domid")
        return Resolution(True, xen_vif_names(info.domid, present), domid=info.domid)


class LibvirtDomainInterfaces:
    """libvirt LXC/QEMU domain: ``<interface><target dev=.../>`` names of the live XML."""

    def __init__(self, conn: LibvirtConn, domain: str) -> None:
        self.conn = conn
        self.domain = domain

    def resolve(self, present: frozenset[str]) -> Resolution:
        info = self.conn.domain_info(self.domain)
        if not info.running:
            return Resolution(False, reason=info.reason)
        return Resolution(True, info.interfaces, domid=info.domid)


def needs_resolve(
    last: Resolution | None,
    last_time_s: float | None,
    now_s: float,
    present: frozenset[str],
    refresh_s: float,
) -> bool:
    """The re-resolution rule of the module docstring. Pure."""
    if last is None or last_time_s is None or not last.running:
        return True
    if now_s < last_time_s or now_s - last_time_s >= refresh_s:
        return True
    return any(name not in present for name in last.interfaces)


@dataclass(frozen=True, slots=True)
class VRSample:
    """One VR's rates over the meter window ending at ``t_end_s``.

    ``rx_pps``: throughput (packets/s the VR forwarded: host-side RX summed over
    its interfaces); ``tx_pps``: offered rate (host-side TX summed).  Both None
    when there is no complete measurement; ``reason`` says why.  ``span_s`` is
    the shortest averaging span among the interfaces.
    """

    vr: str
    running: bool
    rx_pps: float | None
    tx_pps: float | None
    interfaces: tuple[str, ...]
    missing: tuple[str, ...] = ()
    span_s: float | None = None
    t_end_s: float | None = None
    reason: str = ""

    @property
    def throughput_pps(self) -> float | None:
        return self.rx_pps

    @property
    def offered_pps(self) -> float | None:
        return self.tx_pps


class _Entry:
    __slots__ = ("resolver", "last", "last_time_s")

    def __init__(self, resolver: InterfaceResolver) -> None:
        self.resolver = resolver
        self.last: Resolution | None = None
        self.last_time_s: float | None = None


class Collector:
    """Keeps each VR's interface list and sums the meter's rates per VR.

    Parameters
    ----------
    refresh_s : float
        Longest time between two lookups of a VR's interfaces, seconds.
    """

    def __init__(self, refresh_s: float = 10.0) -> None:
        if not isinstance(refresh_s, (int, float)) or not math.isfinite(refresh_s) or refresh_s <= 0:
            raise ValueError(f"Collector: refresh_s must be a finite number > 0, got {refresh_s!r}")
        self.refresh_s = float(refresh_s)
        self._vrs: dict[str, _Entry] = {}
        #: Number of resolver calls made (for status and tests).
        self.lookups = 0

    @property
    def vrs(self) -> tuple[str, ...]:
        return tuple(self._vrs)

    def add(self, vr: str, resolver: InterfaceResolver) -> None:
        if not isinstance(vr, str) or not vr:
            raise ValueError(f"VR name must be a non-empty string, got {vr!r}")
        if vr in self._vrs:
            raise ValueError(f"VR {vr!r} is already collected")
        self._vrs[vr] = _Entry(resolver)

    def remove(self, vr: str) -> None:
        self._vrs.pop(vr, None)

    def interfaces_of(self, vr: str) -> tuple[str, ...]:
        """Interfaces of the last successful lookup (empty if none)."""
        e = self._vrs[vr]
        return e.last.interfaces if e.last else ()

    def sample_vr(
        self,
        vr: str,
        now_s: float,
        rates: Mapping[str, IfRates],
        present: frozenset[str] | None = None,
    ) -> VRSample:
        """One VR's sample; re-resolves its interfaces when the rule says so."""
        e = self._vrs[vr]
        if present is None:
            present = frozenset(rates)
        if needs_resolve(e.last, e.last_time_s, now_s, present, self.refresh_s):
            self.lookups += 1
            try:
                e.last = e.resolver.resolve(present)
            except HostAdapterError as exc:
                e.last = Resolution(False, reason=str(exc))
                log.warning("VR %s: interface lookup failed: %s", vr, exc)
            e.last_time_s = now_s
        res = e.last
        assert res is not None
        if not res.running:
            return VRSample(vr, False, None, None, (), reason=res.reason or "not running")
        if not res.interfaces:
            return VRSample(vr, True, None, None, (), reason="VR has no interfaces")
        missing = tuple(n for n in res.interfaces if n not in rates)
        if missing:
            return VRSample(
                vr, True, None, None, res.interfaces, missing,
                reason=f"no rate yet for {', '.join(missing)}",
            )
        rs = [rates[n] for n in res.interfaces]
        return VRSample(
            vr,
            True,
            rx_pps=sum(r.rx_pps for r in rs),
            tx_pps=sum(r.tx_pps for r in rs),
            interfaces=res.interfaces,
            span_s=min(r.span_s for r in rs),
            t_end_s=max(r.t_end_s for r in rs),
        )

    def collect(
        self,
        now_s: float,
        rates: Mapping[str, IfRates],
        present: frozenset[str] | None = None,
    ) -> dict[str, VRSample]:
        """Samples of every VR.

        Parameters
        ----------
        now_s : float
            Current time, seconds (same clock as the meter).
        rates : mapping of str to IfRates
            ``RateTracker.rates(window_s)``.
        present : frozenset of str, optional
            Interfaces the meter sees now (``RateTracker.interfaces``); defaults
            to the keys of ``rates``.
        """
        return {vr: self.sample_vr(vr, now_s, rates, present) for vr in self._vrs}
