"""The cgroup backend's CPU time on real kernel cgroups (root, cgroup v1).

A busy process in a throw-away v1 cgroup capped at 20% of one CPU (``cpu.cfs_quota_us``) must show
about 0.2 s of CPU per second in :meth:`CgroupBackend.read_cpu_ns`, the same as the kernel's
account of the process itself, while an uncapped busy process outside the group burns a whole CPU
(a reader that counted the whole host would see more than 1.0).  The group is made in the cpu
hierarchy and, where cpuacct is mounted apart (this host), in the cpuacct hierarchy too, as
libvirt and systemd make them; everything is removed afterwards, also on failure.

Also measures the cost of one read per VR over 1000 real groups.  cgroup v2 cannot be exercised
here (its cpu controller is bound to v1): see tests/unit/test_cgroup_cpu_time.py.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from xtc.daemon.config import CgroupVr
from xtc.host.actuators import CgroupV1Actuator
from xtc.host.cgroup import CgroupBackend, _v1_mounts
from xtc.host.counters import ProcNetDevCounters

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]

CAP_PERCENT = 20.0
WINDOW_S = 2.0


def _v1_roots() -> tuple[Path, Path]:
    """The mount points of the v1 hierarchies holding cpu and cpuacct (the same one if co-mounted)."""
    mounts = _v1_mounts(Path("/proc/self/mountinfo").read_text())
    cpu = next((Path(mp) for mp, root, opts in mounts if "cpu" in opts and root == "/"), None)
    acct = next((Path(mp) for mp, root, opts in mounts if "cpuacct" in opts and root == "/"), None)
    if cpu is None or acct is None or not (cpu / "cpu.cfs_quota_us").exists():
        pytest.skip("no cgroup v1 cpu and cpuacct hierarchies on this host")
    return cpu, acct


def _remove(d: Path) -> None:
    if not d.is_dir():
        return
    for _ in range(100):
        for pid in (d / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            d.rmdir()
            return
        except OSError:
            time.sleep(0.02)
    d.rmdir()  # raises with the reason


@pytest.fixture
def twin_groups() -> Iterator[tuple[Path, list[Path]]]:
    """A new group in the cpu hierarchy (the VR's path) and every directory made for it."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates cgroups")
    cpu, acct = _v1_roots()
    name = f"xtct-{secrets.token_hex(3)}"
    made: list[Path] = []
    try:
        for root in dict.fromkeys((cpu, acct)):  # once if co-mounted
            (root / name).mkdir()
            made.append(root / name)
        yield cpu / name, made
    finally:
        for d in made:
            _remove(d)


def _busy(groups: list[Path]) -> subprocess.Popen[bytes]:
    """A busy loop that first moves itself into ``groups`` (empty: stays where it is)."""
    moves = "".join(f"open({str(g / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n" for g in groups)
    code = f"import os, sys\n{moves}sys.stdout.write('ready\\n'); sys.stdout.flush()\nwhile True: pass\n"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    return p


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _host(tmp_path: Path, vrs: dict[str, Path]) -> CgroupBackend:
    (tmp_path / "net_dev").write_text("Inter-|\n face |bytes packets errs drop fifo frame compressed multicast|"
                                      "bytes packets errs drop fifo colls carrier compressed\n")
    return CgroupBackend([CgroupVr(n, str(d), ("vif1.0",)) for n, d in vrs.items()],
                         ProcNetDevCounters(tmp_path / "net_dev"))


def test_a_busy_vr_capped_at_20_percent_shows_20_percent_of_one_cpu(tmp_path: Path, twin_groups) -> None:
    vr_dir, made = twin_groups
    CgroupV1Actuator(vr_dir, "vr1").set_cap(CAP_PERCENT)
    host = _host(tmp_path, {"vr1": vr_dir})
    procs = []
    try:
        procs.append(_busy(made))  # the VR's only task
        procs.append(_busy([]))  # an uncapped busy process outside the VR: a whole CPU
        time.sleep(0.5)
        r0, p0, t0 = host.read_cpu_ns(["vr1"]), _proc_cpu_s(procs[0].pid), time.monotonic()
        time.sleep(WINDOW_S)
        r1, p1, t1 = host.read_cpu_ns(["vr1"]), _proc_cpu_s(procs[0].pid), time.monotonic()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        host.close()
    share = (r1["vr1"] - r0["vr1"]) / 1e9 / (t1 - t0)
    own = (p1 - p0) / (t1 - t0)
    print(f"\nVR capped at {CAP_PERCENT:g}%: read_cpu_ns shows {100 * share:.1f}% of one CPU; "
          f"the process's own CPU time {100 * own:.1f}%")
    assert 0.10 <= share <= 0.26, share  # ~ the cap; never 0, never the whole host (> 1 here)
    assert share == pytest.approx(own, abs=0.03)  # the kernel's account of the task itself (10 ms ticks)


def test_read_cost_per_vr_on_1000_real_groups(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates cgroups")
    cpu, acct = _v1_roots()
    tag = f"xtct-{secrets.token_hex(3)}"
    made: list[Path] = []
    host = None
    try:
        for root in dict.fromkeys((cpu, acct)):
            (root / tag).mkdir()
            made.append(root / tag)
        vrs = {}
        for i in range(1000):
            for root in dict.fromkeys((cpu, acct)):
                (root / tag / f"vr{i}").mkdir()
            vrs[f"vr{i}"] = cpu / tag / f"vr{i}"
        host = _host(tmp_path, vrs)
        names = list(vrs)
        t0 = time.perf_counter()
        first = host.read_cpu_ns(names)
        t1 = time.perf_counter()
        reps = 5
        for _ in range(reps):
            assert len(host.read_cpu_ns(names)) == 1000
        t2 = time.perf_counter()
        assert len(first) == 1000 and set(first.values()) == {0}  # empty groups have used nothing
        first_us, steady_us = (t1 - t0) / 1000 * 1e6, (t2 - t1) / reps / 1000 * 1e6
        print(f"\nread_cpu_ns, 1000 real v1 groups: first read {first_us:.1f} us per VR "
              f"(finds the cpuacct twin, opens the file), then {steady_us:.2f} us per VR")
        assert steady_us < 100.0
    finally:
        if host is not None:
            host.close()
        for top in made:
            for d in sorted(top.glob("vr*")):
                _remove(d)
            _remove(top)
