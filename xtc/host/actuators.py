"""Actuators: set a VR's CPU cap (percent of one CPU) through one small interface.

This module is the public face: the contract below, :func:`make_actuator` and every public name.
The code lives in three modules with one job each: :mod:`xtc.host.actuator_base` (the contract,
:class:`OriginalCap`, the write-on-change logic every backend shares, the quota arithmetic),
:mod:`xtc.host.libvirt_actuators` (Xen, LXC, QEMU) and :mod:`xtc.host.cgroup_actuators` (cgroup v1
and v2, with the budget of kept file descriptors).

Public API
----------
CapActuator (Protocol)
    ``vr``, ``backend``, ``cap_min_percent``, ``cap_max_percent``;
    ``read_cap() -> float | None`` (current cap in percent of one CPU, None = unlimited);
    ``set_cap(cap_percent) -> float`` (clamp, write only on change, return the cap
    read back from the hypervisor/kernel);
    ``original() -> OriginalCap | None``; ``adopt_original(record)``;
    ``current_setting() -> OriginalCap`` (the setting now, as a record, without writing);
    ``restore() -> bool`` (write the original back exactly; True if anything was written);
    ``original_from_cap(cap_percent | None) -> OriginalCap`` (a record for a daemon
    that persisted only a cap in percent).
OriginalCap
    Serialisable record of a VR's setting before XTC touched it:
    ``to_dict()`` / ``OriginalCap.from_dict(d)`` (JSON-friendly).
XenCapActuator(conn, domain, cap_min_percent=1, cap_max_percent=100)
    libvirt + Xen credit scheduler, parameter ``cap``.
LibvirtQuotaActuator(conn, domain, cap_min_percent=1, cap_max_percent=100, quota_param="vcpu_quota", period_param="vcpu_period")
    libvirt LXC, ``vcpu_quota`` us per ``vcpu_period`` us; QEMU the same on the guest's one
    vCPU (:class:`QemuVcpuQuotaActuator`; the emulator thread stays outside the cap).
CgroupV1Actuator(cgroup_dir, vr=None, ...)
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in a cgroup v1 cpu directory.
CgroupV2Actuator(cgroup_dir, vr=None, ...)
    ``cpu.max`` (``"quota period"`` or ``"max period"``) in a cgroup v2 directory.
make_actuator(kind, vr, *, conn=None, cgroup_dir=None, cap_min_percent=1, cap_max_percent=100) -> CapActuator
    kind in ``"xen"``, ``"lxc"``, ``"qemu"``, ``"cgroup1"``, ``"cgroup2"``, ``"cgroup"``
    (v1 or v2, whichever files the directory has).
clamp_cap(cap_percent, cap_min_percent, cap_max_percent) -> float
    The pure clamp with its input checks.

Common behaviour
----------------
* ``cap_percent`` must be a real finite number (NaN, inf, bools and strings are
  refused with :class:`ValueError`/:class:`TypeError`, and nothing is written);
  it is clamped to ``[cap_min_percent, cap_max_percent]`` where ``1 <= cap_min_percent <= cap_max_percent <= 100``.
* ``set_cap`` writes only if the wanted value differs from the setting in
  force, then reads back what was accepted and returns that cap.  The setting
  it compares with is the one it last read or read back, trusted for
  ``refresh_s`` seconds (default 30, the daemon's ``reassert_period_s``): a
  write then costs the write and one read-back (cgroup v1: of the quota only;
  the kernel reports the quota it accepted, the period is the one remembered).
  When the remembered setting says no write is needed, the setting is read
  again to make sure (so a VR reboot or a change behind XTC's back that the
  daemon re-asserts against is always seen).  After ``refresh_s``, after any
  failure and before the first write (the original) everything is read again,
  as before every write: a period changed behind XTC's back is therefore
  noticed at the next write after ``refresh_s``, and the daemon re-asserts
  every cap at least every ``reassert_period_s``.
* The first ``set_cap`` on a VR records the setting it found as the
  *original*.  ``original()`` returns it for the daemon to persist;
  ``adopt_original(record)`` (after a daemon restart) replaces it so that
  ``restore()`` gives back the true original, not a cap XTC set before it
  was killed.  ``restore()`` forgets the original once it is written back.
  ``current_setting()`` is the record of the setting now (what the first
  ``set_cap`` would record): a daemon takes it before its first write and
  persists it, so that not even a crash between the two can lose it.
* Xen: ``cap`` is an integer; 0 means UNLIMITED in Xen.  ``set_cap`` rounds to
  the nearest integer inside the bounds and can never produce 0 (the write
  path refuses a 0 except from ``restore()`` of an original 0).
* Quota backends write ``quota_us = round(cap/100 * period_us)``, at least
  1000 us (the kernel's and libvirt's minimum), keeping the period as found;
  with ``cfs_period_us`` (the daemon's ``[daemon] cfs_period_us``) they write
  that period with each quota instead, doubled where the quota would be under
  1 ms (:func:`period_for`), and restore the original period with the quota.
  An unlimited quota (-1 / ``max``, 0, absent, or libvirt's huge "no limit"
  numbers) reads as ``None``.

Errors: :class:`~xtc.host.errors.VRNotRunning` (domain or cgroup gone),
:class:`~xtc.host.errors.ActuatorError` (refused write, nonsense read-back),
:class:`~xtc.host.errors.HypervisorUnavailable`,
:class:`~xtc.host.errors.LibvirtOperationError`.
"""

from __future__ import annotations

import os
from pathlib import Path

from xtc.host.actuator_base import (
    CAP_CEILING_PERCENT,
    CAP_FLOOR_PERCENT,
    DEFAULT_REFRESH_S,
    LIBVIRT_QUOTA_MAX,
    PERIOD_MAX_US,
    PERIOD_MIN_US,
    QUOTA_MIN_US,
    CapActuator,
    OriginalCap,
    check_cfs_period,
    clamp_cap,
    period_for,
    quota_for,
    refresh_of,
)
from xtc.host.cgroup_actuators import (
    FD_RESERVE,
    STALE_FD_ERRNOS,
    CgroupFileStale,
    CgroupV1Actuator,
    CgroupV2Actuator,
    release_kept_fd,
    reserve_kept_fd,
)
from xtc.host.libvirt_actuators import LibvirtQuotaActuator, QemuVcpuQuotaActuator, XenCapActuator
from xtc.host.libvirt_conn import LibvirtConn

__all__ = [
    "CapActuator",
    "OriginalCap",
    "XenCapActuator",
    "LibvirtQuotaActuator",
    "QemuVcpuQuotaActuator",
    "CgroupV1Actuator",
    "CgroupV2Actuator",
    "CgroupFileStale",
    "make_actuator",
    "clamp_cap",
    "quota_for",
    "CAP_FLOOR_PERCENT",
    "CAP_CEILING_PERCENT",
    "QUOTA_MIN_US",
    "PERIOD_MIN_US",
    "PERIOD_MAX_US",
    "LIBVIRT_QUOTA_MAX",
    "period_for",
    "check_cfs_period",
    "DEFAULT_REFRESH_S",
    "refresh_of",
    "FD_RESERVE",
    "STALE_FD_ERRNOS",
    "reserve_kept_fd",
    "release_kept_fd",
]


def make_actuator(
    kind: str,
    vr: str,
    *,
    conn: LibvirtConn | None = None,
    cgroup_dir: str | os.PathLike[str] | None = None,
    cap_min_percent: float = 1.0,
    cap_max_percent: float = 100.0,
    cfs_period_us: int = 0,
) -> CapActuator:
    """Build the actuator for a VR of the given kind.

    Parameters
    ----------
    kind : str
        ``"xen"``, ``"lxc"``, ``"qemu"`` (need ``conn``; ``vr`` is the domain
        name; qemu uses ``vcpu_quota``/``vcpu_period``, the guest's own vCPU, see
        :class:`QemuVcpuQuotaActuator`), ``"cgroup1"``, ``"cgroup2"`` or ``"cgroup"`` (need ``cgroup_dir``;
        ``"cgroup"`` picks v2 if the directory has ``cpu.max``, else v1).
    cfs_period_us : int
        Quota actuators (all but Xen): 0 keeps the CFS period found (the default); otherwise the
        period written with each quota, doubled where the quota would be under 1 ms
        (:func:`period_for`).  Xen has no such period: anything but 0 is refused there.
    """
    if kind in ("xen", "lxc", "qemu"):
        if conn is None:
            raise ValueError(f"actuator kind {kind!r} needs a libvirt connection")
        if kind == "xen":
            if cfs_period_us:
                raise ValueError("Xen's credit scheduler has no CFS period: cfs_period_us must be 0 with Xen")
            return XenCapActuator(conn, vr, cap_min_percent, cap_max_percent)
        if kind == "lxc":
            return LibvirtQuotaActuator(conn, vr, cap_min_percent, cap_max_percent, cfs_period_us=cfs_period_us)
        return QemuVcpuQuotaActuator(conn, vr, cap_min_percent, cap_max_percent, cfs_period_us=cfs_period_us)
    if kind in ("cgroup", "cgroup1", "cgroup2"):
        if cgroup_dir is None:
            raise ValueError(f"actuator kind {kind!r} needs cgroup_dir")
        if kind == "cgroup":
            kind = "cgroup2" if (Path(cgroup_dir) / CgroupV2Actuator.FILE).exists() else "cgroup1"
        cls = CgroupV2Actuator if kind == "cgroup2" else CgroupV1Actuator
        return cls(cgroup_dir, vr, cap_min_percent, cap_max_percent, cfs_period_us)
    raise ValueError(
        f"unknown actuator kind {kind!r}; expected xen, lxc, qemu, cgroup, cgroup1 or cgroup2"
    )
