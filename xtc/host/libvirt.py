"""The libvirt backend: VRs are running libvirt domains (Xen, LXC or QEMU).

Glue only: the errors, reconnects and cap arithmetic live in the adapters it uses
(:class:`~xtc.host.libvirt_conn.LibvirtConn`, :func:`~xtc.host.actuators.make_actuator`,
:func:`~xtc.daemon.collector.xen_vif_names`, :class:`~xtc.daemon.meter.ProcNetDevSource`).

- VRs: the running domains (or only those listed in ``[libvirt] domains``).
- Interfaces: the ``<interface><target dev=.../>`` names of the live XML (LXC/QEMU), or Xen's
  ``vif<domid>.<n>`` among the interfaces the meter saw last.
- Caps: Xen ``cap`` for ``xen://`` URIs, ``vcpu_quota``/``vcpu_period`` otherwise.
- Originals: :meth:`LibvirtBackend.read_original` is the actuator's exact record of the
  setting (``OriginalCap.to_dict()``: e.g. ``{"backend": "libvirt-quota", "target": "vr1",
  "params": {"vcpu_period": 50000, "vcpu_quota": -1}}``, or Xen's ``{"cap": 0}``).  The daemon
  persists it and :meth:`LibvirtBackend.restore_cap` hands it to ``actuator.adopt_original``
  and ``restore()``, which write exactly those values back, also in a daemon started after a
  SIGKILL, whose actuators never saw the original.  Only without a record (a state file from
  before records were kept) is the original rebuilt from the percentage
  (``actuator.original_from_cap``, keeping the period found now).
"""

from __future__ import annotations

from typing import Any

from .actuators import CapActuator, make_actuator
from .base import ActuatorCaps
from xtc.daemon.collector import xen_vif_names
from xtc.daemon.config import DaemonConfig
from .libvirt_conn import LibvirtConn
from xtc.daemon.meter import CounterTable, IfCounters, ProcNetDevSource

__all__ = ["LibvirtBackend"]


class _RememberingSource:
    """``/proc/net/dev`` reader that remembers the interface names of the last read (for Xen)."""

    def __init__(self, path: str):
        self.src = ProcNetDevSource(path)
        self.names: frozenset[str] = frozenset()
        self._names: tuple[str, ...] = ()

    def read(self) -> dict[str, IfCounters]:
        return self.read_table().to_dict()

    def read_table(self) -> CounterTable:
        t = self.src.read_table()
        if t.names is not self._names:  # the parser hands back the same tuple while nothing changes
            self._names = t.names
            self.names = frozenset(t.names)
        return t


class LibvirtBackend(ActuatorCaps):
    """The :class:`~xtc.host.base.Backend` of a libvirt host."""

    name = "libvirt"

    def __init__(self, conn: LibvirtConn, kind: str, domains: tuple[str, ...], proc_net_dev: str,
                 cap_min_percent: float = 1.0, cap_max_percent: float = 100.0):
        self.conn = conn
        self.kind = kind
        self.domains = domains
        self.source = _RememberingSource(proc_net_dev)
        self.cap_min = cap_min_percent
        self.cap_max = cap_max_percent
        self._acts: dict[str, CapActuator] = {}

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> "LibvirtBackend":
        uri = cfg.libvirt.uri
        kind = "xen" if uri.startswith("xen") else ("lxc" if uri.startswith("lxc") else "qemu")
        return cls(LibvirtConn(uri), kind, cfg.libvirt.domains, cfg.daemon.proc_net_dev)

    def counter_source(self) -> _RememberingSource:
        return self.source

    def discover(self) -> dict[str, tuple[str, ...]]:
        def running(c: Any) -> list[str]:
            return [d.name() for d in c.listAllDomains(0) if d.isActive()]

        names = self.conn.call("list domains", running)
        if self.domains:
            names = [n for n in names if n in self.domains]
        out: dict[str, tuple[str, ...]] = {}
        for n in names:
            info = self.conn.domain_info(n)
            if not info.running:
                continue
            ifs = info.interfaces
            if self.kind == "xen" and info.domid is not None:
                ifs = xen_vif_names(info.domid, self.source.names) or ifs
            out[n] = tuple(ifs)
        return out

    def _act(self, vr: str) -> CapActuator:
        a = self._acts.get(vr)
        if a is None:
            a = make_actuator(self.kind, vr, conn=self.conn)
            self._acts[vr] = a
        return a

    def tick(self, now_s: float) -> None:
        pass

    def close(self) -> None:
        self.conn.close()

