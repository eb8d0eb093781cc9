"""What a test that builds real kernel objects needs of this host; the test is skipped, with the reason, without it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
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
def namespace_pair(stem: str) -> Iterator[tuple[str, str]]:
    """Two empty network namespaces ``<stem>-a`` and ``<stem>-b`` for a test to wire, deleted at the
    end, also when the test fails; the test is skipped without root, ``ip`` or the right to make one.

    Parameters
    ----------
    stem : str
        The namespaces' common prefix: the test's own, with a random part (``xtcil-3f2a1c``).
    """
    need_root_and_ip("network namespaces")
    a, b = f"{stem}-a", f"{stem}-b"
    try:
        subprocess.run(["ip", "netns", "add", a], check=True, capture_output=True, text=True, timeout=30)
        subprocess.run(["ip", "netns", "add", b], check=True, capture_output=True, text=True, timeout=30)
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", a], check=False, capture_output=True, timeout=30)
        pytest.skip(f"cannot create a network namespace: {e.stderr.strip()}")
    try:
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=30)


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


def cgroup_netns_lab_fixture(prefix: str) -> Any:
    """A pytest fixture giving a test its :func:`cgroup_netns_lab` (``netns_lab = cgroup_netns_lab_fixture("xtcc")``)."""
    @pytest.fixture
    def netns_lab() -> Iterator[Any]:
        with cgroup_netns_lab(prefix) as lab:
            yield lab

    return netns_lab


def forwarded_pps(vifs: Iterable[str], seconds: float) -> float:
    """Packets per second the interfaces received together over ``seconds`` (/proc/net/dev)."""
    return packet_rates_pps(vifs, seconds)[0]


def packet_rates_pps(vifs: Iterable[str], seconds: float) -> tuple[float, float]:
    """(received, sent) packets per second of the interfaces together over ``seconds`` (/proc/net/dev)."""
    import time

    from xtc_lab.lab.netlab import read_packet_counters

    vifs = tuple(vifs)
    c0, t0 = read_packet_counters(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = read_packet_counters(), time.monotonic()
    return tuple(sum(c1[v][k] - c0[v][k] for v in vifs) / (t1 - t0) for k in (0, 1))  # type: ignore[return-value]


def unlimited_pps_or_skip(vifs: Iterable[str], seconds: float = 3.0) -> float:
    """What an unlimited VR forwards (:func:`forwarded_pps`); the test is skipped under 20 kpps: a host
    that busy cannot show control."""
    free = forwarded_pps(vifs, seconds)
    if free < 20_000:
        pytest.skip(f"this host forwards only {free:.0f} pps through an unlimited VR: too busy to test control")
    return free


def tc_qdiscs(ifnames: Iterable[str]) -> str:
    """``tc qdisc show`` of the interfaces, without the reference counts (which other readers move)."""
    text = "".join(subprocess.run(["tc", "qdisc", "show", "dev", i], check=True, capture_output=True,
                                  text=True).stdout for i in ifnames)
    return re.sub(r"refcnt \d+ ", "", text)


def tc_queueing(ifnames: Iterable[str]) -> str:
    """The interfaces' queueing: ``tc qdisc show`` (as :func:`tc_qdiscs`) and the filters on their
    clsact hooks (``tc filter show ... ingress/egress``), without the program ids the kernel numbers."""
    out = [tc_qdiscs(ifnames)]
    for i in ifnames:
        for hook in ("ingress", "egress"):
            r = subprocess.run(["tc", "filter", "show", "dev", i, hook], check=False, capture_output=True, text=True)
            out.append(f"{i} {hook}: {r.stdout}")
    return re.sub(r" id \d+ ", " ", "".join(out))


def early_drop_limiters(ifnames: Iterable[str]) -> int:
    """How many of the interfaces carry early drop's limiter: the eBPF bucket's filter (handle 0xed0,
    named xtc_ed...) on the clsact egress, or the TBF root ``ed0:``."""
    n = 0
    for i in ifnames:
        q = subprocess.run(["tc", "qdisc", "show", "dev", i], check=False, capture_output=True, text=True).stdout
        f = subprocess.run(["tc", "filter", "show", "dev", i, "egress"], check=False, capture_output=True,
                           text=True).stdout
        n += "tbf ed0: root" in q or re.search(r"handle 0xed0 xtc_ed", f) is not None
    return n


@contextlib.contextmanager
def reachable_by_other_users(checkout: Path) -> Iterator[None]:
    """Let unprivileged users reach ``checkout`` while the block runs.  A clone under ``mktemp -d``
    (mode 0700, as CI makes it) is not reachable by ``nobody``: search permission (o+x) is granted on
    the directories above the checkout that lack it, and taken back after.  Not root: nothing changes
    (the tests that need it skip)."""
    changed = []
    for d in (checkout, *checkout.parents):
        mode = stat.S_IMODE(d.stat().st_mode)
        if not mode & stat.S_IXOTH:
            try:
                os.chmod(d, mode | stat.S_IXOTH)
            except PermissionError:
                break
            changed.append((d, mode))
    try:
        yield
    finally:
        for d, mode in reversed(changed):
            os.chmod(d, mode)
