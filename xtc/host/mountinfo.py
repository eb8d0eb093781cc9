"""The cgroup hierarchies a host has mounted, from ``/proc/<pid>/mountinfo`` (pure).

The one parser of the mount table: the cgroup backend finds a VR's ``cpuacct`` group where that
hierarchy is mounted apart from ``cpu`` (:func:`xtc.host.cgroup.cpu_time_file`), and the testbed asks
it where to cap its VRs and which group a process is in (:mod:`xtc_lab.lab.cgroups`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["V1_MOUNT_FLAGS", "CgroupMount", "parse_cgroup_mounts"]

#: cgroup v1 super options that are not controllers (``name=`` and ``release_agent=`` have an "=").
V1_MOUNT_FLAGS = frozenset({"rw", "ro", "xattr", "clone_children", "noprefix", "cpuset_v2_mode", "favordynmods"})


@dataclass(frozen=True)
class CgroupMount:
    """One mounted cgroup hierarchy (from mountinfo).

    ``version`` 1 or 2; ``controllers`` the v1 controllers of the hierarchy (empty for v2);
    ``root`` the cgroup path mounted (``/`` unless a sub-tree is bind-mounted); ``mount_point``
    where it is mounted.
    """

    version: int
    controllers: frozenset[str]
    root: str
    mount_point: str


def unescape_mountinfo(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` for a space, ...)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and all(ch in "01234567" for ch in code):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_cgroup_mounts(mountinfo_text: str) -> list[CgroupMount]:
    """The cgroup hierarchies in ``/proc/<pid>/mountinfo`` text, in file order."""
    mounts = []
    for line in mountinfo_text.splitlines():
        left, sep, right = line.partition(" - ")
        fl, fr = left.split(), right.split()
        if not sep or len(fl) < 5 or len(fr) < 3:
            continue
        if fr[0] == "cgroup":
            ctrls = frozenset(o for o in fr[2].split(",") if o not in V1_MOUNT_FLAGS and "=" not in o)
            mounts.append(CgroupMount(1, ctrls, unescape_mountinfo(fl[3]), unescape_mountinfo(fl[4])))
        elif fr[0] == "cgroup2":
            mounts.append(CgroupMount(2, frozenset(), unescape_mountinfo(fl[3]), unescape_mountinfo(fl[4])))
    return mounts
