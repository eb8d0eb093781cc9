"""The hosts a sweep can run on, built from the daemon's own adapters.

* ``sim``: :class:`xtc.daemon.sim_backend.SimBackend` (the simulated plant behind the
  daemon's meter path); the offered rate is the plant's source rate.
* ``libvirt``: a libvirt domain's cap through :func:`xtc.daemon.actuators.make_actuator`
  (``lxc``/``qemu`` quota or ``xen`` cap), its interfaces from the live domain XML, the
  counters from ``/proc/net/dev``.
* ``cgroup``: a cgroup directory's quota (v1 or v2) and interfaces named on the command line.

For the real hosts the traffic comes from outside (a lab generator, a test bench): the
offered rate is recorded, not set.  :class:`ActuatorHost` turns an actuator plus a counter
source into the small host interface that :func:`training.collect.run_sweep` needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from training.collect import OfferedRate, RecordOnlyOffered
from training.sweep import TrainingError

__all__ = ["ActuatorHost", "SimOffered", "make_sim_host", "make_libvirt_host", "make_cgroup_host"]


class ActuatorHost:
    """One VR behind a cap actuator, with the host-side interfaces whose counters are read."""

    def __init__(self, name: str, vr: str, actuator, source, interfaces: Sequence[str]) -> None:  # noqa: ANN001
        self.name = name
        self.vr = vr
        self.actuator = actuator
        self.source = source
        self.interfaces = tuple(interfaces)

    def counter_source(self):  # noqa: ANN201
        return self.source

    def discover(self) -> dict[str, tuple[str, ...]]:
        return {self.vr: self.interfaces}

    def read_cap(self, vr: str) -> float | None:
        return self.actuator.read_cap()

    def write_cap(self, vr: str, cap_percent: float) -> None:
        self.actuator.set_cap(cap_percent)

    def restore_cap(self, vr: str, cap_percent: float | None) -> None:
        # The actuator recorded the original setting on its first write and restores it exactly.
        self.actuator.restore()

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        return None


class SimOffered:
    """Sets the offered rate of a simulated VR's source."""

    def __init__(self, backend) -> None:  # noqa: ANN001
        self.backend = backend

    def set_offered_pps(self, vr: str, offered_pps: float) -> None:
        self.backend.plant.set_offered(self.backend.vr_names.index(vr), offered_pps)


def make_sim_host(vr: str = "vr1", seed: int = 1, traffic: str = "udp", offered_pps: float = 100_000.0):  # noqa: ANN201
    """A simulated host with one VR (no root needed); returns ``(host, offered_setter)``."""
    from xtc.daemon.config import SimVr
    from xtc.daemon.sim_backend import SimBackend

    if traffic not in ("udp", "tcp"):
        raise TrainingError(f"--traffic must be udp or tcp, got {traffic!r}")
    backend = SimBackend((SimVr(name=vr, offered_pps=offered_pps, traffic=traffic),), seed=seed, hypervisor_path=None)
    return backend, SimOffered(backend)


def make_libvirt_host(
    domain: str, uri: str = "lxc:///", kind: str = "lxc", interfaces: Sequence[str] = (),
    proc_net_dev: str = "/proc/net/dev",
) -> tuple[ActuatorHost, OfferedRate]:
    """A libvirt domain (``kind`` lxc, qemu or xen); interfaces default to the live XML's targets."""
    from xtc.daemon.actuators import make_actuator
    from xtc.daemon.libvirt_conn import LibvirtConn
    from xtc.daemon.meter import ProcNetDevSource

    conn = LibvirtConn(uri)
    ifaces = tuple(interfaces)
    if not ifaces:
        info = conn.domain_info(domain)
        if not info.running:
            raise TrainingError(f"libvirt domain '{domain}' is not running ({info.reason}); start it first")
        ifaces = tuple(info.interfaces)
        if not ifaces:
            raise TrainingError(f"libvirt domain '{domain}' has no <interface><target dev=...>; give --interfaces")
    act = make_actuator(kind, domain, conn=conn)
    return ActuatorHost(f"libvirt-{kind}", domain, act, ProcNetDevSource(proc_net_dev), ifaces), RecordOnlyOffered()


def make_cgroup_host(
    cgroup_dir: str, interfaces: Sequence[str], vr: str = "vr", proc_net_dev: str = "/proc/net/dev",
) -> tuple[ActuatorHost, OfferedRate]:
    """A VR that is a cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) with named host-side interfaces."""
    from xtc.daemon.actuators import make_actuator
    from xtc.daemon.meter import ProcNetDevSource

    if not Path(cgroup_dir).is_dir():
        raise TrainingError(f"cgroup directory {cgroup_dir} does not exist")
    if not interfaces:
        raise TrainingError("--interfaces is required with --backend cgroup (the VR's host-side interfaces)")
    act = make_actuator("cgroup", vr, cgroup_dir=cgroup_dir)
    return ActuatorHost("cgroup", vr, act, ProcNetDevSource(proc_net_dev), interfaces), RecordOnlyOffered()
