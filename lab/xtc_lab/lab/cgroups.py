"""The lab's cgroups: the hierarchies a host has mounted (from ``/proc/<pid>/mountinfo``) and the
cgroups of the netns VRs (:class:`CpuCgroup`, made and removed here, used by
:class:`xtc_lab.lab.netlab.NetLab`).

One parser for the lab's three questions: where the v1 ``cpu`` hierarchy and the cgroup2 tree
are (:func:`cpu_cgroup_mounts`, to cap netns VRs), whether cgroup2 is mounted
beside v1 (:func:`hybrid_cgroup2_mount`, a trap for libvirt's LXC driver), and
which directory is a process's cpu cgroup (:func:`xtc_lab.lab.hog.cpu_cgroup_of`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# The parser is the product's (the cgroup backend reads the same table); the lab asks it its questions.
from xtc.host.mountinfo import V1_MOUNT_FLAGS, CgroupMount, unescape_mountinfo, parse_cgroup_mounts

__all__ = ["V1_MOUNT_FLAGS", "CgroupMount", "CpuCgroup", "LabError", "cgroup_pids", "cpu_cgroup_mounts",
           "create_cgroup", "find_cpu_cgroup", "hybrid_cgroup2_mount", "kill_pids", "lab_cgroups", "parse_cgroup_mounts", "remove_cgroup",
           "unescape_mountinfo"]


class LabError(RuntimeError):
    """A lab object could not be created, changed or removed (the reason is in the message)."""


@dataclass(frozen=True)
class CpuCgroup:
    """The root of the cgroup hierarchy whose cpu controller caps the lab's netns VRs.

    ``version`` 1: the v1 ``cpu`` hierarchy (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``);
    ``version`` 2: the unified hierarchy with the cpu controller enabled for children
    (``cpu.max``).  ``acct_root``: the v1 ``cpuacct`` hierarchy when it is mounted apart from
    ``cpu`` (this host), where each lab cgroup gets a twin of the same name, so that the VR's CPU
    time is accounted on its own (``cpuacct.usage``, read by the daemon's cgroup backend); None
    when the cpu group itself accounts (v2, or cpu and cpuacct mounted together).
    """

    version: int
    root: Path
    acct_root: Path | None = None

    @property
    def quota_file(self) -> str:
        """The file that holds a cgroup's CPU limit."""
        return "cpu.cfs_quota_us" if self.version == 1 else "cpu.max"

    def path(self, name: str) -> Path:
        """The directory of the cgroup ``name`` (a direct child of the root)."""
        if not name or "/" in name or name in (".", ".."):
            raise LabError(f"bad cgroup name {name!r}")
        return self.root / name

    def acct_path(self, name: str) -> Path | None:
        """The directory of the cpuacct twin of the cgroup ``name`` (None without ``acct_root``)."""
        self.path(name)  # the same checks
        return None if self.acct_root is None else self.acct_root / name


def cpu_cgroup_mounts(mountinfo_text: str) -> tuple[str | None, str | None]:
    """Mount points of the cgroup v1 hierarchy holding ``cpu`` and of the cgroup2 tree.

    Parameters
    ----------
    mountinfo_text
        Contents of ``/proc/self/mountinfo``.

    Returns
    -------
    tuple
        (v1 cpu mount point or None, cgroup2 mount point or None).  Whether the cgroup2 tree
        offers the cpu controller is not in mountinfo (see :func:`find_cpu_cgroup`).
    """
    mounts = parse_cgroup_mounts(mountinfo_text)
    v1 = next((m.mount_point for m in mounts if m.version == 1 and "cpu" in m.controllers), None)
    v2 = next((m.mount_point for m in mounts if m.version == 2), None)
    return v1, v2


def hybrid_cgroup2_mount(mountinfo_text: str) -> str | None:
    """The mount point of a cgroup2 tree mounted *beside* cgroup v1 in ``mountinfo_text`` (e.g.
    ``"/sys/fs/cgroup/unified"`` on a hybrid host); None on a pure cgroup v2 host (``/sys/fs/cgroup``
    itself is cgroup2) or a host without cgroup2."""
    cgroup2 = [m.mount_point for m in parse_cgroup_mounts(mountinfo_text) if m.version == 2]
    if "/sys/fs/cgroup" in cgroup2 or not cgroup2:
        return None
    return cgroup2[0]


def find_cpu_cgroup(mountinfo: Path = Path("/proc/self/mountinfo")) -> CpuCgroup:
    """The cgroup hierarchy in which the lab can cap netns VRs (v1 ``cpu`` first, else v2).

    Raises
    ------
    LabError
        No hierarchy offers a usable cpu controller (the message says what was found).
    """
    try:
        v1, v2 = cpu_cgroup_mounts(mountinfo.read_text())
    except OSError as e:
        raise LabError(f"cannot read {mountinfo}: {e}") from e
    if v1 is not None:
        root = Path(v1)
        if not (root / "cpu.cfs_quota_us").exists():
            raise LabError(f"the cgroup v1 cpu hierarchy at {root} has no cpu.cfs_quota_us (kernel without CFS bandwidth control)")
        acct = next((m.mount_point for m in parse_cgroup_mounts(mountinfo.read_text())
                     if m.version == 1 and "cpuacct" in m.controllers and "cpu" not in m.controllers), None)
        return CpuCgroup(1, root, Path(acct) if acct is not None else None)
    if v2 is None:
        raise LabError("no cgroup cpu controller: neither a cgroup v1 'cpu' hierarchy nor a cgroup2 tree is mounted")
    root = Path(v2)
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
        enabled = (root / "cgroup.subtree_control").read_text().split()
    except OSError as e:
        raise LabError(f"cannot read the cgroup2 controllers at {root}: {e}") from e
    if "cpu" not in controllers:
        raise LabError(f"the cgroup2 tree at {root} has no cpu controller (controllers: {' '.join(controllers) or 'none'})")
    if "cpu" not in enabled:
        raise LabError(f"the cpu controller is not enabled for children of {root}; "
                       f"enable it with: echo +cpu > {root / 'cgroup.subtree_control'}")
    return CpuCgroup(2, root)


def create_cgroup(cg: CpuCgroup, name: str) -> Path:
    """Create the cgroup ``name`` under ``cg`` (unlimited at first), and its cpuacct twin where
    cpuacct is mounted apart (:attr:`CpuCgroup.acct_root`); return the cpu group's directory."""
    d = cg.path(name)
    try:
        d.mkdir()
    except FileExistsError:
        raise LabError(f"cgroup {d} already exists") from None
    except OSError as e:
        raise LabError(f"cannot create cgroup {d}: {e}") from e
    if not (d / cg.quota_file).exists():
        _rmdir_quietly(d)
        raise LabError(f"cgroup {d} has no {cg.quota_file}: the cpu controller is not available there")
    twin = cg.acct_path(name)
    if twin is not None:
        try:
            twin.mkdir()
        except OSError as e:
            _rmdir_quietly(d)
            what = "already exists" if isinstance(e, FileExistsError) else f"cannot be created: {e}"
            raise LabError(f"cpuacct cgroup {twin} {what}") from None
    return d


def cgroup_pids(d: Path) -> list[int]:
    """Pids of the processes in cgroup directory ``d`` (empty if it does not exist)."""
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_pids(pids: list[int], timeout_s: float = 3.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                live.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while live and time.monotonic() < deadline:
            live = [p for p in live if not _is_gone(p)]
            time.sleep(0.02)
        pids = live
        if not pids:
            return


def _is_gone(pid: int) -> bool:
    """True if ``pid`` has exited: no such process, or a zombie."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def remove_cgroup(d: Path, timeout_s: float = 3.0) -> bool:
    """Kill the processes in cgroup ``d`` and remove it; True if it existed."""
    if not d.is_dir():
        return False
    kill_pids(cgroup_pids(d))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if time.monotonic() > deadline:
                raise LabError(f"cannot remove cgroup {d}: {e} (processes: {cgroup_pids(d)})") from e
            kill_pids(cgroup_pids(d), timeout_s=0.2)
            time.sleep(0.02)


def _rmdir_quietly(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


def lab_cgroups(prefix: str) -> list[Path]:
    """The cgroups named ``<prefix>-...`` in the host's cpu hierarchy and, where cpuacct is mounted
    apart, in the cpuacct hierarchy (none if there is no cpu hierarchy)."""
    try:
        cg = find_cpu_cgroup()
    except LabError:
        return []
    out: list[Path] = []
    for root in (cg.root, cg.acct_root):
        if root is None:
            continue
        try:
            out += sorted(d for d in root.iterdir() if d.is_dir() and d.name.startswith(prefix + "-"))
        except OSError:
            pass
    return out
