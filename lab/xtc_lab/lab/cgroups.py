"""The cgroup hierarchies a host has mounted, from ``/proc/<pid>/mountinfo`` (pure).

One parser for the lab's three questions: where the v1 ``cpu`` hierarchy and the cgroup2 tree
are (:func:`xtc_lab.lab.netlab.cpu_cgroup_mounts`, to cap netns VRs), whether cgroup2 is mounted
beside v1 (:func:`xtc_lab.lab.libvirtd.hybrid_cgroup2_mount`, a trap for libvirt's LXC driver), and
which directory is a process's cpu cgroup (:func:`xtc_lab.lab.hog.cpu_cgroup_of`).
"""

from __future__ import annotations

# The parser is the product's (the cgroup backend reads the same table); the lab asks it its questions.
from xtc.host.mountinfo import V1_MOUNT_FLAGS, CgroupMount, unescape_mountinfo, parse_cgroup_mounts

__all__ = ["V1_MOUNT_FLAGS", "CgroupMount", "parse_cgroup_mounts", "unescape_mountinfo"]
