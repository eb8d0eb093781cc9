"""Where a sweep runs: the daemon's own host backends, as a :class:`SweepTarget`.

* ``libvirt``: :func:`libvirt_target`, :class:`xtc.host.libvirt.LibvirtBackend` restricted to
  one running domain (its cap: ``lxc``/``qemu`` quota or Xen ``cap``; its interfaces: the
  ``<target dev>`` of the live domain XML unless named).
* ``cgroup``: :func:`cgroup_target`, :class:`xtc.host.cgroup.CgroupBackend` with one VR, a cgroup
  directory (v1 or v2) and the host-side interfaces named on the command line.

Both read the counters as the daemon does (:func:`xtc.host.counters.counters_from_config`:
netlink, or the named ``/proc/net/dev``-format file), in real time; the traffic comes from
outside (a lab generator, a test bench), so the offered rate is recorded, not set.  The
simulated host is part of the testbed (``xtc_lab.sim.train``), which builds its own target on
its own clock.  A target's :attr:`SweepTarget.metadata` says what is swept, for the CSV's
``# key: value`` lines: the domain or cgroup, the interfaces and the exact setting before the
sweep (from :meth:`xtc.host.base.Host.snapshot`).  :func:`describe_hardware` is the default
``hardware`` line of a sweep recorded here.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from xtc.host.base import Host
from xtc.host.cgroup import CgroupBackend, CgroupTarget
from xtc.host.counters import counters_from_config
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import LibvirtConn
from xtc.training.collect import OfferedRate, RecordOnlyOffered
from xtc.training.sweep import TrainingError

__all__ = [
    "SweepTarget",
    "libvirt_target",
    "cgroup_target",
    "setting_before",
    "describe_hardware",
    "this_hardware",
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


@dataclass
class SweepTarget:
    """A VR on a host, and how a sweep of it runs (arguments of :func:`xtc.training.collect.run_sweep`).

    Attributes
    ----------
    host : xtc.host.base.Host
        The host; :meth:`close` closes it.
    vr : str
        The VR, as ``host.list_vrs()`` names it.
    metadata : dict of str to str
        What is swept, for the CSV's metadata.
    interfaces : tuple of str or None
        The interfaces to count, if not those ``host.list_vrs()`` reports.
    offered : OfferedRate
        Sets the offered rate (real hosts: only recorded).
    clock : callable
        The host's time, seconds.
    sleep : callable
        Lets that many seconds of the host's time pass.
    """

    host: Host
    vr: str
    metadata: dict[str, str] = field(default_factory=dict)
    interfaces: tuple[str, ...] | None = None
    offered: OfferedRate = field(default_factory=RecordOnlyOffered)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def close(self) -> None:
        self.host.close()


def setting_before(host: Host, vr: str) -> str:
    """The VR's exact cap setting now (:meth:`~xtc.host.base.Host.snapshot`), as one metadata value."""
    params = host.snapshot(vr).get("params")
    return format_setting(params if isinstance(params, Mapping) else {})


def libvirt_target(
    domain: str, uri: str = "lxc:///", kind: str | None = None, interfaces: Sequence[str] = (),
    proc_net_dev: str = "/proc/net/dev",
) -> SweepTarget:
    """A running libvirt domain as a sweep target (the daemon's libvirt backend, restricted to it).

    Parameters
    ----------
    domain : str
        Domain name; it must be running.
    uri : str
        libvirt connection URI.
    kind : {"lxc", "qemu", "xen"}, optional
        How its cap is written (``vcpu_quota`` per ``vcpu_period``, or Xen's ``cap``); default:
        from the connection's driver.
    interfaces : sequence of str
        Host-side interfaces to count; default: those the backend lists (the ``<target dev>`` of
        every ``<interface>`` in the live domain XML, Xen's ``vif<domid>.<n>``).
    proc_net_dev : str
        Counter file; the default means this host's counters (netlink, else ``/proc/net/dev``).

    Raises
    ------
    TrainingError
        The domain does not run, has no interfaces, or the kind is unknown.
    xtc.host.errors.HostAdapterError
        libvirt cannot be reached, the domain does not exist, or its setting cannot be read or
        could not be given back exactly.
    """
    if not domain:
        raise TrainingError("give the libvirt domain to sweep (--domain)")
    conn = LibvirtConn(uri)
    host: LibvirtBackend | None = None
    try:
        info = conn.domain_info(domain)
        if not info.running:
            raise TrainingError(f"libvirt domain '{domain}' at {uri} is not running ({info.reason}); start it first")
        if kind is None:
            kind = conn.driver_kind()
        if kind not in ("lxc", "qemu", "xen"):
            raise TrainingError(f"libvirt driver '{kind}' at {uri}: give --kind lxc, qemu or xen")
        host = LibvirtBackend(conn, kind, (domain,), counters_from_config(proc_net_dev))
        ifaces = tuple(interfaces) or host.list_vrs().get(domain, ())
        if not ifaces:
            raise TrainingError(f"libvirt domain '{domain}' has no <interface><target dev=...>; give --interfaces")
        meta = {"domain": domain, "uri": uri, "cap_kind": kind, "interfaces": ",".join(ifaces),
                "setting_before": setting_before(host, domain)}
    except BaseException:
        if host is not None:
            host.close()
        else:
            conn.close()
        raise
    return SweepTarget(host, domain, meta, tuple(interfaces) or None)


def cgroup_target(
    cgroup_dir: str, interfaces: Sequence[str], vr: str = "vr", proc_net_dev: str = "/proc/net/dev",
) -> SweepTarget:
    """A VR that is a cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) with named host-side interfaces.

    Parameters
    ----------
    cgroup_dir : str
        The VR's cgroup directory.
    interfaces : sequence of str
        Its host-side interfaces (their RX packets are what it forwarded).
    vr : str
        A name for it.
    proc_net_dev : str
        Counter file; the default means this host's counters (netlink, else ``/proc/net/dev``).

    Raises
    ------
    TrainingError
        The directory does not exist or no interface is named.
    xtc.host.errors.HostAdapterError
        The directory has no cpu controller, or its setting could not be given back exactly.
    """
    if not Path(cgroup_dir).is_dir():
        raise TrainingError(f"cgroup directory {cgroup_dir} does not exist")
    if not interfaces:
        raise TrainingError("--interfaces is required with --backend cgroup (the VR's host-side interfaces)")
    host = CgroupBackend((CgroupTarget(vr, str(cgroup_dir), tuple(interfaces)),), counters_from_config(proc_net_dev))
    try:
        meta = {"cgroup": str(cgroup_dir), "interfaces": ",".join(interfaces), "setting_before": setting_before(host, vr)}
    except BaseException:
        host.close()
        raise
    return SweepTarget(host, vr, meta)
