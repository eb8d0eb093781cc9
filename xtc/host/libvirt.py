"""The libvirt backend: VRs are running libvirt domains (Xen, LXC or QEMU).

Glue only: the errors, reconnects and cap arithmetic live in the adapters it uses
(:class:`~xtc.host.libvirt_conn.LibvirtConn`, :func:`~xtc.host.actuators.make_actuator`,
:func:`xen_vif_names`, the counter sources of :mod:`xtc.host.counters`).

- VRs: the running domains (or only those listed in ``[libvirt] domains``).
- Interfaces: the ``<interface><target dev=.../>`` names of the live XML (LXC/QEMU), or Xen's
  ``vif<domid>.<n>`` among the interfaces whose counters were read last.
- Counters: netlink ``RTM_GETSTATS`` (``/proc/net/dev`` where netlink is not available, or the
  file ``[daemon] proc_net_dev`` names when it is not the default).
- CPU time: :meth:`LibvirtBackend.read_cpu_ns`, one bulk stats call per read
  (``virDomainListGetStats``, ``cpu.time``: all vCPUs, Xen, QEMU/KVM) or, where the driver has no
  bulk stats (upstream libvirt's LXC driver), one ``virDomainGetInfo`` per domain
  (:meth:`~xtc.host.libvirt_conn.LibvirtConn.cpu_time_ns`).
- Caps: Xen ``cap`` for ``xen://`` URIs, ``vcpu_quota``/``vcpu_period`` for ``lxc://``, and for QEMU
  (any other URI) ``vcpu_quota``/``vcpu_period`` on the guest's one vCPU: the VR's own CPU, with the
  emulator thread that moves its packets outside the cap (measured: docs/results/2026-11-26-qemu-cap).
- Originals: :meth:`LibvirtBackend.snapshot` is the actuator's exact record of the
  setting (``OriginalCap.to_dict()``: e.g. ``{"backend": "libvirt-quota", "target": "vr1",
  "params": {"vcpu_period": 50000, "vcpu_quota": -1}}``, or Xen's ``{"cap": 0}``).  The daemon
  persists it and :meth:`LibvirtBackend.restore_cap` hands it to ``actuator.adopt_original``
  and ``restore()``, which write exactly those values back, also in a daemon started after a
  SIGKILL, whose actuators never saw the original.  Only without a record (a state file from
  before records were kept) is the original rebuilt from the percentage
  (``actuator.original_from_cap``, keeping the period found now).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from .actuators import DEFAULT_REFRESH_S, CapActuator, make_actuator
from .base import ActuatorCaps
from .counters import CounterSource
from .ifcounters import IfCounters
from .libvirt_conn import LibvirtConn

__all__ = ["LibvirtBackend", "xen_vif_names"]

#: ``VIR_DOMAIN_XML_INACTIVE``: a domain's XML as configured (no ids, no generated names).
_XML_INACTIVE = 2

_VIF_RE = re.compile(r"^vif(\d+)\.(\d+)(-emu)?$")


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


class LibvirtBackend(ActuatorCaps):
    """The :class:`~xtc.host.base.Backend` of a libvirt host."""

    name = "libvirt"

    def __init__(self, conn: LibvirtConn, kind: str, domains: tuple[str, ...], counters: CounterSource,
                 cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 refresh_s: float = DEFAULT_REFRESH_S, cfs_period_us: int = 0):
        self.conn = conn
        self.kind = kind
        self.domains = domains
        self.counters = counters
        self.counter_bits = counters.counter_bits
        self._seen: frozenset[str] = frozenset()
        self.cap_min_percent = cap_min_percent
        self.cap_max_percent = cap_max_percent
        #: Seconds an actuator trusts the setting it last read (see :mod:`xtc.host.actuators`).
        self.refresh_s = refresh_s
        #: The CFS period written with each quota (0: each VR's own; :func:`~xtc.host.actuators.period_for`).
        self.cfs_period_us = cfs_period_us
        if cfs_period_us and kind == "xen":
            raise ValueError("Xen's credit scheduler has no CFS period: cfs_period_us must be 0 with Xen")
        self._acts: dict[str, CapActuator] = {}

    @classmethod
    def for_uri(cls, uri: str, domains: Iterable[str], counters: CounterSource, refresh_s: float = DEFAULT_REFRESH_S,
                cfs_period_us: int = 0) -> "LibvirtBackend":
        """The backend of a libvirt connection URI; its driver (``xen``, ``lxc``, else ``qemu``) from
        the URI's scheme."""
        kind = "xen" if uri.startswith("xen") else ("lxc" if uri.startswith("lxc") else "qemu")
        return cls(LibvirtConn(uri), kind, domains, counters, refresh_s=refresh_s, cfs_period_us=cfs_period_us)

    def read_counters(self) -> Mapping[str, IfCounters]:
        c = self.counters.read()
        if len(c) != len(self._seen) or not self._seen.issuperset(c):
            self._seen = frozenset(c)
        return c

    def configured_vrs(self) -> frozenset[str] | None:
        """``[libvirt] domains``; None when it is empty (every running domain is a VR)."""
        return frozenset(self.domains) or None

    def list_vrs(self) -> dict[str, tuple[str, ...]]:
        # One listing call; XML only for new or restarted domains (LibvirtConn.running_domains).
        infos = self.conn.running_domains()
        if self.domains:
            infos = [i for i in infos if i.name in self.domains]
        out: dict[str, tuple[str, ...]] = {}
        for info in infos:
            n = info.name
            ifs = info.interfaces
            if self.kind == "xen" and info.domid is not None:
                if not self._seen:
                    self.read_counters()
                ifs = xen_vif_names(info.domid, self._seen) or ifs
            out[n] = tuple(ifs)
        return out

    def read_cpu_ns(self, vrs: Iterable[str]) -> Mapping[str, int]:
        """Cumulative CPU time (ns) of each of ``vrs`` that is a running domain (and, with ``[libvirt]
        domains``, one of those): libvirt's ``cpu.time``, the hypervisor's own account of all the
        domain's vCPUs (Xen), its cgroup's (QEMU/KVM, LXC).  See
        :meth:`~xtc.host.libvirt_conn.LibvirtConn.cpu_time_ns` for the calls made and the errors.
        """
        names = [v for v in vrs if v in self.domains] if self.domains else vrs
        return self.conn.cpu_time_ns(names)

    def power_off(self, vr: str) -> dict[str, Any]:
        """Turn the domain off at once (``virDomainDestroy``: the policer's last punishment, a VR
        that would not back off is not asked to shut down).  Returns what :meth:`power_on` needs:
        whether the domain is defined (persistent), and, when it is transient (gone once off),
        its live XML to create it again."""

        def off(dom: Any) -> dict[str, Any]:
            persistent = bool(dom.isPersistent())
            xml = None if persistent else dom.XMLDesc(_XML_INACTIVE)  # its configuration, no run-time parts
            dom.destroy()
            return {"backend": "libvirt", "domain": vr, "persistent": persistent, "xml": xml}

        return self.conn.with_domain(vr, off, "turn the VR off (destroy)")

    def power_on(self, vr: str, record: Mapping[str, Any]) -> None:
        """Start the domain again: ``create`` a defined one, ``createXML`` a transient one from the
        XML :meth:`power_off` kept.  ValueError for a record that is not one of this backend's."""
        if record.get("backend") != "libvirt" or record.get("domain") != vr or not isinstance(record.get("persistent"), bool):
            raise ValueError(f"not a libvirt power-off record of domain {vr!r}: {str(dict(record))[:200]}")
        xml = record.get("xml")
        if not record["persistent"] and not isinstance(xml, str):
            raise ValueError(f"power-off record of transient domain {vr!r} has no XML to create it from")

        def on(conn: Any) -> None:
            if record["persistent"]:
                conn.lookupByName(vr).create()
            else:
                conn.createXML(xml, 0)

        self.conn.call(f"turn the VR on (start domain {vr!r})", on, vr=vr)

    def _act(self, vr: str) -> CapActuator:
        a = self._acts.get(vr)
        if a is None:
            a = make_actuator(self.kind, vr, conn=self.conn, cfs_period_us=self.cfs_period_us)
            a.refresh_s = self.refresh_s
            self._acts[vr] = a
        return a

    def close(self) -> None:
        self.conn.close()
        self.counters.close()

