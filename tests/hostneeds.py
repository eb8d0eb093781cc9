"""What a test that builds real kernel objects needs of this host; the test is skipped, with the reason, without it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from typing import Any

import pytest


def need_root_and_ip(creates: str) -> None:
    """Skip the calling test unless it runs as root and iproute2's ``ip`` is installed.

    Parameters
    ----------
    creates : str
        What the test creates, for the skip reason (``"network namespaces"``).
    """
    if os.geteuid() != 0:
        pytest.skip(f"needs root: creates {creates}")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")


@contextlib.contextmanager
def cgroup_netns_lab(prefix: str) -> Iterator[Any]:
    """A lab of netns VRs with cgroups of their own (xtc_lab's NetLab, under a random name from
    ``prefix``), torn down at the end, also on failure; the test is skipped without root or a usable
    cgroup cpu controller."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates namespaces, bridges and cgroups")
    from xtc_lab.lab.netlab import LabError, NetLab, find_cpu_cgroup, random_prefix

    try:
        find_cpu_cgroup()
    except LabError as e:
        pytest.skip(f"no usable cgroup cpu controller: {e}")
    lab = NetLab(prefix=random_prefix(prefix))
    try:
        yield lab
    finally:
        lab.teardown()


def tc_qdiscs(ifnames: Iterable[str]) -> str:
    """``tc qdisc show`` of the interfaces, without the reference counts (which other readers move)."""
    text = "".join(subprocess.run(["tc", "qdisc", "show", "dev", i], check=True, capture_output=True,
                                  text=True).stdout for i in ifnames)
    return re.sub(r"refcnt \d+ ", "", text)
