"""The cgroup backend: VRs are cgroups (v1 ``cpu`` or v2 ``cpu.max``), with no hypervisor.

For hosts without libvirt, and for the lab's netns VRs (``xtc lab up --mode netns``): a VR is
whatever runs in one cgroup directory (e.g. a forwarder process in a network namespace), and
its traffic is counted on host-side interfaces named in the configuration::

    [daemon]
    backend = "cgroup"

    [[cgroup.vr]]
    name = "vr1"
    path = "/sys/fs/cgroup/cpu/xtc-lab-vr1"   # the VR's cgroup directory (v1 cpu or v2)
    interfaces = ["vif123.0", "vif123.1"]    # host-side interfaces: their RX packets are what it forwarded

Glue only: the cap arithmetic, the refusals and the errors live in the actuators
(:class:`~xtc.host.actuators.CgroupV1Actuator`, :class:`~xtc.host.actuators.CgroupV2Actuator`)
and the counters in :mod:`xtc.host.counters` (netlink, or the ``proc_net_dev`` file).

- VRs: those of the configuration whose cgroup directory exists now.  A directory that
  disappears (the VR stopped) makes the VR absent, and every cap read or write on it raises
  :class:`~xtc.host.errors.VRNotRunning`; the daemon reports the VR missing and carries on.
- Caps: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us`` (v1) or ``cpu.max`` (v2), whichever the
  directory has, the period kept as found.  XTC never writes "no limit" (-1, ``max``) except
  when restoring an original that was unlimited.
- Originals: :meth:`CgroupBackend.snapshot` is the actuator's exact record
  (``{"backend": "cgroup1", "target": "<dir>", "params": {"cpu.cfs_period_us": 100000,
  "cpu.cfs_quota_us": -1}}`` or ``{"backend": "cgroup2", ..., "params": {"cpu.max": "max 100000"}}``);
  :meth:`CgroupBackend.restore_cap` writes exactly that back, also in a daemon started after a
  SIGKILL.  Without a record it restores the original the actuator took before its own first
  write (exact), or else the cap in percent (keeping the period found now).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from .actuators import DEFAULT_REFRESH_S, CapActuator, CgroupV1Actuator, CgroupV2Actuator, make_actuator, refresh_of
from .base import ActuatorCaps
from xtc.daemon.config import CgroupVr, DaemonConfig
from .errors import ActuatorError, VRNotRunning
from .counters import CounterSource, counters_from_config
from .ifcounters import IfCounters

__all__ = ["CgroupBackend"]


class CgroupBackend(ActuatorCaps):
    """The :class:`~xtc.host.base.Backend` of VRs that are cgroups.

    Parameters
    ----------
    vrs
        The VRs: name, cgroup directory, host-side interfaces.
    counters
        Where the interfaces' counters are read.
    cap_min_percent, cap_max_percent
        Bounds every written cap is clamped to, percent of one CPU.
    refresh_s : float
        Seconds an actuator trusts the setting it last read (the daemon's ``reassert_period_s``):
        see :mod:`xtc.host.actuators`.
    """

    name = "cgroup"
    restore_prefers_own_original = True

    def __init__(self, vrs: Sequence[CgroupVr], counters: CounterSource,
                 cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 refresh_s: float = DEFAULT_REFRESH_S) -> None:
        self.vrs: dict[str, CgroupVr] = {v.name: v for v in vrs}
        if len(self.vrs) != len(vrs):
            raise ValueError("a VR is named twice")
        self.counters = counters
        self.counter_bits = counters.counter_bits
        self.cap_min = cap_min_percent
        self.cap_max = cap_max_percent
        self.refresh_s = refresh_s
        self._acts: dict[str, CapActuator] = {}
        self._groups: tuple[dict[str, list[tuple[str, str, str]]], list[tuple[str, str]]] | None = None

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> CgroupBackend:
        return cls(cfg.cgroup.vr, counters_from_config(cfg.daemon.proc_net_dev),
                   refresh_s=refresh_of(cfg.daemon.reassert_period_s))

    def read_counters(self) -> Mapping[str, IfCounters]:
        return self.counters.read()

    def list_vrs(self) -> dict[str, tuple[str, ...]]:
        """The VRs whose cgroup directory exists (what ``os.path.isdir`` of each path says).

        One directory listing per parent directory instead of a ``stat`` per VR (a stat on the
        cgroup file system costs about 10 us: 10 ms per listing at 1000 VRs).  A path whose parent
        cannot be listed, or whose last component is not a plain name, is tested alone.
        """
        if self._groups is None:
            self._groups = _by_parent(self.vrs)
        groups, alone = self._groups
        isdir = os.path.isdir
        present = {name for name, path in alone if isdir(path)}
        for parent, members in groups.items():
            try:
                with os.scandir(parent) as it:
                    dirs = {e.name for e in it if e.is_dir()}
            except OSError:
                present.update(name for name, path, _ in members if isdir(path))
                continue
            present.update(name for name, _, base in members if base in dirs)
        return {name: v.interfaces for name, v in self.vrs.items() if name in present}

    def _act(self, vr: str) -> CapActuator:
        spec = self.vrs.get(vr)
        if spec is None:
            raise VRNotRunning(vr, "not a VR of this daemon's [[cgroup.vr]] list")
        a = self._acts.get(vr)
        if a is not None:
            return a
        d = Path(spec.path)
        if not d.is_dir():
            raise VRNotRunning(vr, f"cgroup {d} does not exist")
        if not ((d / CgroupV2Actuator.FILE).exists() or (d / CgroupV1Actuator.QUOTA).exists()):
            raise ActuatorError(f"cgroup {d} of VR {vr!r} has neither cpu.max nor cpu.cfs_quota_us: no cpu controller there")
        a = make_actuator("cgroup", vr, cgroup_dir=d, cap_min=self.cap_min, cap_max=self.cap_max)
        a.refresh_s = self.refresh_s
        self._acts[vr] = a
        return a

    def close(self) -> None:
        for a in self._acts.values():
            close = getattr(a, "close", None)
            if close is not None:
                close()
        self.counters.close()


def _by_parent(vrs: Mapping[str, CgroupVr]) -> tuple[dict[str, list[tuple[str, str, str]]], list[tuple[str, str]]]:
    """The VRs' cgroup paths by parent directory, ``{parent: [(vr, path, last component)]}``, and
    those to test alone, ``[(vr, path)]`` (last component ``.``, ``..`` or none, e.g. ``/``)."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    alone: list[tuple[str, str]] = []
    for name, v in vrs.items():
        parent, base = os.path.split(v.path.rstrip("/"))
        if base in ("", ".", "..") or not parent:
            alone.append((name, v.path))
        else:
            groups.setdefault(parent, []).append((name, v.path, base))
    return groups, alone
