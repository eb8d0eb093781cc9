"""The hosts a sweep can run on, built from the daemon's own adapters.

* ``sim``: :class:`xtc_lab.sim.host.SimBackend` (the simulated plant behind the
  daemon's meter path); the offered rate is the plant's source rate.
* ``libvirt``: a libvirt domain's cap through :func:`xtc.host.actuators.make_actuator`
  (``lxc``/``qemu`` quota or ``xen`` cap), its interfaces from the live domain XML, the
  counters from ``/proc/net/dev``.
* ``cgroup``: a cgroup directory's quota (v1 or v2) and interfaces named on the command line.

For the real hosts the traffic comes from outside (a lab generator, a test bench): the
offered rate is recorded, not set.  :class:`ActuatorHost` turns an actuator plus a counter
source into the small host interface that :func:`xtc.training.collect.run_sweep` needs, and
says what it is (:meth:`ActuatorHost.metadata`: the domain or cgroup, its interfaces and
its scheduler setting before the sweep) for the CSV's metadata.
:func:`describe_hardware` is the default ``hardware`` line of a sweep recorded here.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Mapping, Sequence

from xtc.training.collect import OfferedRate, RecordOnlyOffered
from xtc.training.sweep import TrainingError

__all__ = [
    "ActuatorHost",
    "SimOffered",
    "make_sim_host",
    "make_libvirt_host",
    "make_cgroup_host",
    "describe_hardware",
    "format_setting",
]


def describe_hardware(cpuinfo_text: str, cpus: int | None, kernel: str, hostname: str = "") -> str:
    """One line naming the machine a sweep ran on (pure: the caller reads ``/proc/cpuinfo``).

    >>> describe_hardware("model name\t: Intel(R) Xeon(R) CPU E5440\n", 2, "6.1.0")
    '2 CPUs (Intel(R) Xeon(R) CPU E5440), Linux 6.1.0'
    """
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo_text.splitlines()
                  if ln.startswith("model name") and ":" in ln), "") or "unknown CPU model"
    n = f"{cpus} CPUs" if cpus else "unknown number of CPUs"
    host = f"{hostname}: " if hostname else ""
    return f"{host}{n} ({model}), Linux {kernel}"


def this_hardware(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """:func:`describe_hardware` of the machine this runs on."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        text = ""
    return describe_hardware(text, os.cpu_count(), platform.release())


def format_setting(values: Mapping[str, object]) -> str:
    """A scheduler setting as one metadata value, e.g. ``vcpu_period=100000 vcpu_quota=-1``."""
    return " ".join(f"{k}={v}" for k, v in sorted(values.items()))


class ActuatorHost:
    """One VR behind a cap actuator, with the host-side interfaces whose counters are read.

    The actuator's setting at construction is kept (:attr:`setting_before`) for the CSV's
    metadata; the actuator itself records the exact original on its first write and
    gives it back in :meth:`restore_cap`.
    """

    def __init__(self, name: str, vr: str, actuator, source, interfaces: Sequence[str],  # noqa: ANN001
                 details: Mapping[str, str] | None = None, conn=None) -> None:  # noqa: ANN001
        self.name = name
        self.vr = vr
        self.actuator = actuator
        self.source = source
        self.interfaces = tuple(interfaces)
        self.details = dict(details or {})
        self.conn = conn
        try:
            self.setting_before = format_setting(actuator.current_setting().values)
        except ValueError as e:  # a setting that could not be given back after the sweep
            raise TrainingError(f"{name} VR '{vr}': its current cap setting cannot be restored afterwards: {e}") from None

    def metadata(self) -> dict[str, str]:
        """What was swept, for the CSV's ``# key: value`` lines."""
        return {**self.details, "interfaces": ",".join(self.interfaces), "setting_before": self.setting_before}

    def counter_source(self):  # noqa: ANN201
        return self.source

    def discover(self) -> dict[str, tuple[str, ...]]:
        return {self.vr: self.interfaces}

    def read_cap(self, vr: str) -> float | None:
        return self.actuator.read_cap()

    def write_cap(self, vr: str, cap_percent: float) -> float:
        """Set the cap; return the cap in force as the host reads it back (percent of one CPU)."""
        return self.actuator.set_cap(cap_percent)

    def restore_cap(self, vr: str, cap_percent: float | None) -> None:
        # The actuator recorded the original setting on its first write and restores it exactly.
        self.actuator.restore()

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class SimOffered:
    """Sets the offered rate of a simulated VR's source."""

    def __init__(self, backend) -> None:  # noqa: ANN001
        self.backend = backend

    def set_offered_pps(self, vr: str, offered_pps: float) -> None:
        self.backend.plant.set_offered(self.backend.vr_names.index(vr), offered_pps)


def make_sim_host(vr: str = "vr1", seed: int = 1, traffic: str = "udp", offered_pps: float = 100_000.0):  # noqa: ANN201
    """A simulated host with one VR (no root needed); returns ``(host, offered_setter)``."""
    from xtc.daemon.config import SimVr
    from xtc_lab.sim.host import SimBackend

    if traffic not in ("udp", "tcp"):
        raise TrainingError(f"--traffic must be udp or tcp, got {traffic!r}")
    backend = SimBackend((SimVr(name=vr, offered_pps=offered_pps, traffic=traffic),), seed=seed, hypervisor_path=None)
    return backend, SimOffered(backend)


def make_libvirt_host(
    domain: str, uri: str = "lxc:///", kind: str | None = None, interfaces: Sequence[str] = (),
    proc_net_dev: str = "/proc/net/dev",
) -> tuple[ActuatorHost, OfferedRate]:
    """A running libvirt domain as a sweep host.

    Parameters
    ----------
    domain : str
        Domain name; it must be running.
    uri : str
        libvirt connection URI.
    kind : {"lxc", "qemu", "xen"}, optional
        How its cap is written (``vcpu_quota`` per ``vcpu_period``, ``global_quota`` per
        ``global_period``, or Xen's ``cap``); default: from the connection's driver.
    interfaces : sequence of str
        Host-side interfaces to count; default: the ``<target dev>`` of every
        ``<interface>`` in the live domain XML.
    proc_net_dev : str
        Counter file.

    Raises
    ------
    TrainingError
        The domain does not exist or does not run, has no interfaces, or the kind is unknown.
    xtc.host.errors.HostAdapterError
        libvirt cannot be reached, or the domain's scheduler parameters cannot be read.
    """
    from xtc.host.actuators import make_actuator
    from xtc.host.libvirt_conn import LibvirtConn
    from xtc.daemon.meter import ProcNetDevSource

    if not domain:
        raise TrainingError("give the libvirt domain to sweep (--domain)")
    conn = LibvirtConn(uri)
    try:
        info = conn.domain_info(domain)
        if not info.running:
            raise TrainingError(f"libvirt domain '{domain}' at {uri} is not running ({info.reason}); start it first")
        ifaces = tuple(interfaces) or tuple(info.interfaces)
        if not ifaces:
            raise TrainingError(f"libvirt domain '{domain}' has no <interface><target dev=...>; give --interfaces")
        if kind is None:
            kind = conn.driver_kind()
        if kind not in ("lxc", "qemu", "xen"):
            raise TrainingError(f"libvirt driver '{kind}' at {uri}: give --kind lxc, qemu or xen")
        act = make_actuator(kind, domain, conn=conn)
        details = {"domain": domain, "uri": uri, "cap_kind": kind}
        host = ActuatorHost(f"libvirt-{kind}", domain, act, ProcNetDevSource(proc_net_dev), ifaces, details, conn)
    except BaseException:
        conn.close()
        raise
    return host, RecordOnlyOffered()


def make_cgroup_host(
    cgroup_dir: str, interfaces: Sequence[str], vr: str = "vr", proc_net_dev: str = "/proc/net/dev",
) -> tuple[ActuatorHost, OfferedRate]:
    """A VR that is a cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) with named host-side interfaces."""
    from xtc.host.actuators import make_actuator
    from xtc.daemon.meter import ProcNetDevSource

    if not Path(cgroup_dir).is_dir():
        raise TrainingError(f"cgroup directory {cgroup_dir} does not exist")
    if not interfaces:
        raise TrainingError("--interfaces is required with --backend cgroup (the VR's host-side interfaces)")
    act = make_actuator("cgroup", vr, cgroup_dir=cgroup_dir)
    host = ActuatorHost("cgroup", vr, act, ProcNetDevSource(proc_net_dev), interfaces, {"cgroup": str(cgroup_dir)})
    return host, RecordOnlyOffered()
