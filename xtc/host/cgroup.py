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
- CPU time: :meth:`CgroupBackend.read_cpu_ns` reads the kernel's own accounting of the VR's
  cgroup: v2 ``usage_usec`` of ``cpu.stat`` (times 1000), v1 ``cpuacct.usage`` (ns).  In v1 the
  ``cpuacct`` controller may be mounted with ``cpu`` (``/sys/fs/cgroup/cpu,cpuacct``, the VR's
  directory has ``cpuacct.usage`` itself) or apart from it (``/sys/fs/cgroup/cpuacct``): then the
  cgroup of the same path in the cpuacct hierarchy is read (found through
  ``/proc/self/mountinfo``), which is where libvirt, systemd and cgcreate put a group's tasks.  A VR
  whose group has no such twin (its tasks are accounted only in the hierarchy's root) is left
  out, with one warning.  The file is found once per VR and its descriptor kept open (a ``pread``,
  about 2 us, instead of an open/read/close, about 10 us), within the descriptor budget the
  actuators share.
- Originals: :meth:`CgroupBackend.snapshot` is the actuator's exact record
  (``{"backend": "cgroup1", "target": "<dir>", "params": {"cpu.cfs_period_us": 100000,
  "cpu.cfs_quota_us": -1}}`` or ``{"backend": "cgroup2", ..., "params": {"cpu.max": "max 100000"}}``);
  :meth:`CgroupBackend.restore_cap` writes exactly that back, also in a daemon started after a
  SIGKILL.  Without a record it restores the original the actuator took before its own first
  write (exact), or else the cap in percent (keeping the period found now).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .actuators import (
    DEFAULT_REFRESH_S,
    STALE_FD_ERRNOS,
    CapActuator,
    CgroupV1Actuator,
    CgroupV2Actuator,
    make_actuator,
    release_kept_fd,
    reserve_kept_fd,
)
from .base import ActuatorCaps
from .errors import ActuatorError, VRNotRunning
from .mountinfo import parse_cgroup_mounts
from .counters import CounterSource
from .ifcounters import IfCounters

__all__ = ["CgroupBackend", "cpu_time_file", "parse_cpu_time", "MOUNTINFO"]

log = logging.getLogger(__name__)

#: The mount table read to find the v1 ``cpuacct`` hierarchy when it is mounted apart from ``cpu``.
MOUNTINFO = "/proc/self/mountinfo"


#: How long a VR whose CPU accounting file was not found is left out before it is looked for again, s.
CPU_LOOKUP_RETRY_S = 30.0

@dataclass(frozen=True)
class CgroupTarget:
    """One VR as the cgroup backend sees it: its name, its cgroup directory (absolute) and the
    host-side interfaces it forwards on (the daemon's ``[[cgroup.vr]]`` tables, validated there,
    have these attributes and serve as they are)."""

    name: str
    path: str
    interfaces: tuple[str, ...]


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
    mountinfo : str or path-like
        The mount table (default :data:`MOUNTINFO`), read when a v1 VR's CPU time is first looked
        for and its directory has no ``cpuacct.usage`` of its own.
    """

    name = "cgroup"
    restore_prefers_own_original = True

    def __init__(self, vrs: Sequence[CgroupTarget], counters: CounterSource,
                 cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 refresh_s: float = DEFAULT_REFRESH_S, mountinfo: str | os.PathLike[str] = MOUNTINFO,
                 cfs_period_us: int = 0) -> None:
        self.vrs: dict[str, CgroupTarget] = {v.name: v for v in vrs}
        if len(self.vrs) != len(vrs):
            raise ValueError("a VR is named twice")
        self.counters = counters
        self.counter_bits = counters.counter_bits
        self.cap_min_percent = cap_min_percent
        self.cap_max_percent = cap_max_percent
        self.refresh_s = refresh_s
        #: The CFS period written with each quota (0: each VR's own; :func:`~xtc.host.actuators.period_for`).
        self.cfs_period_us = cfs_period_us
        self._acts: dict[str, CapActuator] = {}
        self._groups: tuple[dict[str, list[tuple[str, str, str]]], list[tuple[str, str]]] | None = None
        self.mountinfo = str(mountinfo)
        # VR -> its CPU-time file, found on first read; VR -> the problem last warned about.
        self._cpu_files: dict[str, _CpuTimeFile] = {}
        #: VR -> when (monotonic s) its accounting file was last looked for and not found: looked
        #: for again only after :data:`CPU_LOOKUP_RETRY_S` (a lookup reads the mount table and stats
        #: the hierarchies, about 0.1 ms; the loop asks every period for every VR short of its setpoint).
        self._cpu_missing: dict[str, float] = {}
        self._cpu_problems: dict[str, str] = {}

    def read_counters(self) -> Mapping[str, IfCounters]:
        return self.counters.read()

    def configured_vrs(self) -> frozenset[str]:
        """The VRs of ``[[cgroup.vr]]``."""
        return frozenset(self.vrs)

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

    def read_cpu_ns(self, vrs: Iterable[str]) -> dict[str, int]:
        """Cumulative CPU time (ns) of each of ``vrs`` from its cgroup's accounting file.

        v2: ``usage_usec`` of ``cpu.stat`` times 1000; v1: ``cpuacct.usage`` of the VR's group in
        the cpuacct hierarchy (see the module docstring).  Left out of the result: a name that is
        not a configured VR and a VR whose cgroup directory does not exist (not running), silently;
        a VR whose file cannot be found, cannot be read or does not hold a counter, with one
        warning naming the file (repeated only when the problem changes), as a malformed line of
        ``/proc/net/dev`` is skipped and reported.  Never raises for one VR: there is no
        backend-wide failure here, every VR has its own file.
        """
        out: dict[str, int] = {}
        files = self._cpu_files
        mount_table: list[str] = []  # read at most once per call, and only if needed

        def mountinfo() -> str:
            if not mount_table:
                mount_table.append(self._read_mountinfo())
            return mount_table[0]

        missing = self._cpu_missing
        now = time.monotonic()
        for vr in vrs:
            f = files.get(vr)
            if f is None:
                spec = self.vrs.get(vr)
                if spec is None:
                    continue
                if missing and now - missing.get(vr, -math.inf) < CPU_LOOKUP_RETRY_S:
                    continue
                try:
                    path, version = cpu_time_file(spec.path, mountinfo)
                except FileNotFoundError:
                    continue  # no cgroup directory: not running
                except LookupError as e:
                    self._cpu_problem(vr, str(e))
                    missing[vr] = time.monotonic()
                    continue
                missing.pop(vr, None)
                f = files[vr] = _CpuTimeFile(path, version)
            try:
                ns = f.read_ns()
            except FileNotFoundError:
                # Gone (the VR stopped, or its cgroup was removed): found again when it is back.
                f.close()
                del files[vr]
                if os.path.isdir(self.vrs[vr].path):
                    self._cpu_problem(vr, f"{f.path} does not exist")
                continue
            except OSError as e:
                self._cpu_problem(vr, f"cannot read {f.path}: {e.strerror or e}")
                continue
            except ValueError as e:  # the message names the file
                self._cpu_problem(vr, str(e))
                continue
            out[vr] = ns
            if self._cpu_problems:
                self._cpu_problems.pop(vr, None)
        return out

    def _read_mountinfo(self) -> str:
        with open(self.mountinfo, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read()

    def _cpu_problem(self, vr: str, message: str) -> None:
        if self._cpu_problems.get(vr) != message:
            self._cpu_problems[vr] = message
            log.warning("CPU time of VR %r left out: %s", vr, message)

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
        a = make_actuator("cgroup", vr, cgroup_dir=d, cap_min_percent=self.cap_min_percent, cap_max_percent=self.cap_max_percent,
                          cfs_period_us=self.cfs_period_us)
        a.refresh_s = self.refresh_s
        self._acts[vr] = a
        return a

    def close(self) -> None:
        for f in self._cpu_files.values():
            f.close()
        self._cpu_files.clear()
        for a in self._acts.values():
            close = getattr(a, "close", None)
            if close is not None:
                close()
        self.counters.close()


def _by_parent(vrs: Mapping[str, CgroupTarget]) -> tuple[dict[str, list[tuple[str, str, str]]], list[tuple[str, str]]]:
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


# ------------------------------------------------------------------------------------ CPU time
def _v1_mounts(mountinfo_text: str) -> list[tuple[str, str, frozenset[str]]]:
    """The cgroup v1 hierarchies of a mount table: ``(mount point, cgroup root, controllers)``."""
    return [(m.mount_point, m.root, m.controllers) for m in parse_cgroup_mounts(mountinfo_text) if m.version == 1]


def _under(path: str, top: str) -> str | None:
    """``path`` relative to the directory ``top`` (``"."`` for ``top`` itself), None if outside it."""
    if path == top:
        return "."
    prefix = top.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def cpu_time_file(cgroup_dir: str | os.PathLike[str], mountinfo: Callable[[], str]) -> tuple[str, int]:
    """The file holding the cumulative CPU time of the tasks of ``cgroup_dir``, and its cgroup version.

    - v2 (the directory has ``cgroup.controllers``): its ``cpu.stat`` (``usage_usec``);
    - v1 with ``cpuacct`` mounted together with ``cpu``: its own ``cpuacct.usage``;
    - v1 with ``cpuacct`` mounted apart: ``cpuacct.usage`` of the group of the same cgroup path
      in the cpuacct hierarchy (both found in the mount table ``mountinfo()``).

    Parameters
    ----------
    cgroup_dir
        The VR's cgroup directory (as configured: e.g. in the v1 ``cpu`` hierarchy).
    mountinfo
        Returns the text of ``/proc/self/mountinfo``; called only in the last case.

    Returns
    -------
    tuple of (str, int)
        The file's path and 1 or 2.

    Raises
    ------
    FileNotFoundError
        The directory does not exist (the VR is not running).
    LookupError
        The directory exists but no such file was found; the message says what was looked for.
    """
    d = os.fspath(cgroup_dir)
    if not os.path.isdir(d):
        raise FileNotFoundError(errno.ENOENT, "no such cgroup directory", d)
    if os.path.exists(os.path.join(d, "cgroup.controllers")):
        stat = os.path.join(d, "cpu.stat")
        if not os.path.exists(stat):
            raise LookupError(f"cgroup v2 directory {d} has no cpu.stat")
        return stat, 2
    own = os.path.join(d, "cpuacct.usage")
    if os.path.exists(own):
        return own, 1
    real = os.path.realpath(d)
    try:
        mounts = _v1_mounts(mountinfo())
    except OSError as e:
        raise LookupError(f"{d} has no cpuacct.usage and the mount table cannot be read: {e.strerror or e}") from None
    # The hierarchy the directory is in (the longest mount point above it), and the cgroup path.
    best: tuple[str, str] | None = None
    for mount_point, root, _ in mounts:
        rel = _under(real, mount_point)
        if rel is not None and (best is None or len(mount_point) > len(best[0])):
            best = (mount_point, os.path.normpath(os.path.join(root, rel)))
    acct = [(mp, root) for mp, root, opts in mounts if "cpuacct" in opts]
    if best is None or not acct:
        what = "is in no cgroup v1 hierarchy" if best is None else "has no cpuacct hierarchy mounted beside it"
        raise LookupError(f"{d} has no cpuacct.usage and {what}")
    for mount_point, root in acct:
        rel = _under(best[1], root)
        if rel is not None:
            f = os.path.normpath(os.path.join(mount_point, rel, "cpuacct.usage"))
            if os.path.exists(f):
                return f, 1
    raise LookupError(f"{d} has no cpuacct.usage and the cpuacct hierarchy has no group {best[1]} "
                      f"(its tasks are accounted only in a parent group)")


def parse_cpu_time(data: bytes, version: int, where: str) -> int:
    """Nanoseconds from the bytes of ``cpuacct.usage`` (v1) or ``cpu.stat`` (v2, ``usage_usec``).

    Raises
    ------
    ValueError
        The contents are not a non-negative decimal counter (v1), or have no such ``usage_usec``
        line (v2); the message names ``where`` (the file).
    """
    if version == 1:
        text = data.strip()
        if text.isdigit():
            return int(text)
        raise ValueError(f"{where}: expected a count of nanoseconds, got {data[:40]!r}")
    for line in data.splitlines():
        if line.startswith(b"usage_usec"):
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"usage_usec" and parts[1].isdigit():
                return int(parts[1]) * 1000
            raise ValueError(f"{where}: bad usage_usec line {line[:60]!r}")
    raise ValueError(f"{where}: no usage_usec line in {data[:60]!r}")


class _CpuTimeFile:
    """One VR's CPU-time file, its descriptor kept open while the shared budget allows."""

    __slots__ = ("path", "version", "fd")

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version
        self.fd: int | None = None

    def read_ns(self) -> int:
        """The file's counter, ns.  FileNotFoundError: the file (its cgroup) is gone."""
        return parse_cpu_time(self._read(), self.version, self.path)

    def _read(self) -> bytes:
        fd = self.fd
        if fd is not None:
            try:
                if os.fstat(fd).st_nlink == 0:
                    # Removed (a plain file; the cgroup file system answers ENODEV instead).
                    raise OSError(errno.ENOENT, "removed while kept open")
                return os.pread(fd, 4096, 0)
            except OSError as e:
                self.close()
                if e.errno not in STALE_FD_ERRNOS:
                    raise
            # The group was removed (and perhaps made again): open the file afresh, once.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENODEV):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.path) from None
            raise
        kept = reserve_kept_fd()
        if kept:
            self.fd = fd
        try:
            return os.pread(fd, 4096, 0)
        except OSError as e:
            if kept:
                self.close()
            if e.errno in STALE_FD_ERRNOS:  # removed between the open and the read
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.path) from None
            raise
        finally:
            if not kept:
                os.close(fd)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            release_kept_fd()
            try:
                os.close(fd)
            except OSError:
                pass
