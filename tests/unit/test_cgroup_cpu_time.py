"""The cgroup backend's CPU time (:meth:`CgroupBackend.read_cpu_ns`) on recorded cgroup files.

cgroup v2's cpu controller cannot be enabled on the lab host (it is bound to v1), so v2 is tested
here on files recorded from the kernel (tests/data/cgroup/README.md) laid out as a cgroup tree in
``tmp_path``; so is v1 with ``cpuacct`` mounted apart from ``cpu`` (the lab host's layout, through
its recorded mount table with the mount points moved into ``tmp_path``) and together with it.
The real v1 kernel files, with a busy process under a cap, are in tests/root/test_cgroup_cpu_time_real.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from xtc.daemon.config import CgroupVr
from xtc.host import cgroup_actuators
from xtc.host.cgroup import CgroupBackend, cpu_time_file, parse_cpu_time
from xtc.host.counters import ProcNetDevCounters

DATA = Path(__file__).resolve().parent.parent / "data" / "cgroup"
V2_CHILD = (DATA / "cpu.stat.v2-child-no-cpu-controller").read_bytes()
V1_USAGE = (DATA / "cpuacct.usage.v1").read_bytes()
#: The kernel's documented v2 format with the cpu controller enabled (Documentation/admin-guide/
#: cgroup-v2.rst; values made up): the throttling lines follow the usage lines.
V2_CPU_CONTROLLER = (b"usage_usec 123456789\nuser_usec 100000000\nsystem_usec 23456789\nnice_usec 0\n"
                     b"nr_periods 500\nnr_throttled 120\nthrottled_usec 9000000\nnr_bursts 0\nburst_usec 0\n")


def _backend(tmp_path: Path, vrs: dict[str, Path], mountinfo: Path | None = None) -> CgroupBackend:
    (tmp_path / "net_dev").write_text("Inter-|\n face |bytes packets errs drop fifo frame compressed multicast|"
                                      "bytes packets errs drop fifo colls carrier compressed\n")
    return CgroupBackend([CgroupVr(n, str(p), ("vif1.0",)) for n, p in vrs.items()],
                         ProcNetDevCounters(tmp_path / "net_dev"),
                         mountinfo=mountinfo if mountinfo is not None else tmp_path / "no-mountinfo")


def _v2_dir(root: Path, name: str, cpu_stat: bytes) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "cgroup.controllers").write_text("cpu memory pids\n")
    (d / "cpu.max").write_text("max 100000\n")
    (d / "cpu.stat").write_bytes(cpu_stat)
    return d


def _split_v1(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A v1 tree laid out as the lab host's: cpu and cpuacct mounted apart (recorded mount table)."""
    top = tmp_path / "sys-fs-cgroup"
    for h in ("cpu", "cpuacct", "memory"):
        (top / h).mkdir(parents=True)
    mi = tmp_path / "mountinfo"
    mi.write_text((DATA / "mountinfo.v1-split").read_text().replace("/sys/fs/cgroup", str(top)))
    return top / "cpu", top / "cpuacct", mi


def test_v2_usage_usec_times_1000(tmp_path: Path) -> None:
    a = _v2_dir(tmp_path, "a", V2_CHILD)
    b = _v2_dir(tmp_path, "b", V2_CPU_CONTROLLER)
    host = _backend(tmp_path, {"a": a, "b": b})
    try:
        assert host.read_cpu_ns(["a", "b"]) == {"a": 63383 * 1000, "b": 123456789 * 1000}
        # Cumulative: a later value of the same file is read, not a cached one.
        (a / "cpu.stat").write_bytes(V2_CHILD.replace(b"usage_usec 63383", b"usage_usec 2063383"))
        assert host.read_cpu_ns(["a"]) == {"a": 2063383 * 1000}
    finally:
        host.close()


def test_v1_with_cpuacct_mounted_apart_reads_the_twin_group(tmp_path: Path) -> None:
    cpu, cpuacct, mi = _split_v1(tmp_path)
    d = cpu / "machine" / "vr1"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("20000\n")
    twin = cpuacct / "machine" / "vr1"
    twin.mkdir(parents=True)
    (twin / "cpuacct.usage").write_bytes(V1_USAGE)
    (cpuacct / "cpuacct.usage").write_text("999999999999\n")  # the whole host: never this one
    host = _backend(tmp_path, {"vr1": d}, mountinfo=mi)
    try:
        assert host.read_cpu_ns(["vr1"]) == {"vr1": int(V1_USAGE)}
        assert cpu_time_file(d, mi.read_text) == (str(twin / "cpuacct.usage"), 1)
    finally:
        host.close()


def test_v1_with_cpu_and_cpuacct_together_reads_the_groups_own_file(tmp_path: Path) -> None:
    d = tmp_path / "cpu,cpuacct" / "vr1"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    (d / "cpuacct.usage").write_text("42\n")
    host = _backend(tmp_path, {"vr1": d})  # no mount table needed (and none readable)
    try:
        assert host.read_cpu_ns(["vr1"]) == {"vr1": 42}
    finally:
        host.close()


def test_a_group_without_a_cpuacct_twin_is_left_out_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import xtc.host.cgroup as cg

    clock = [1000.0]
    monkeypatch.setattr(cg.time, "monotonic", lambda: clock[0])
    looked: list[str] = []
    real_lookup = cg.cpu_time_file
    monkeypatch.setattr(cg, "cpu_time_file", lambda *a: looked.append(a[0]) or real_lookup(*a))
    cpu, cpuacct, mi = _split_v1(tmp_path)
    d = cpu / "xtc-lab-vr1"  # made only in the cpu hierarchy: its tasks count in cpuacct's root
    d.mkdir()
    (cpuacct / "cpuacct.usage").write_text("999999999999\n")
    host = _backend(tmp_path, {"vr1": d}, mountinfo=mi)
    try:
        with caplog.at_level(logging.WARNING, logger="xtc.host.cgroup"):
            assert host.read_cpu_ns(["vr1"]) == {}
            assert host.read_cpu_ns(["vr1"]) == {}
        msgs = [r.getMessage() for r in caplog.records]
        assert len(msgs) == 1 and "vr1" in msgs[0] and "xtc-lab-vr1" in msgs[0] and "cpuacct" in msgs[0], msgs
        assert len(looked) == 1  # not looked for again at once: the loop asks every period
        # Once the twin exists the VR is read, from the next lookup on (CPU_LOOKUP_RETRY_S later).
        (cpuacct / "xtc-lab-vr1").mkdir()
        (cpuacct / "xtc-lab-vr1" / "cpuacct.usage").write_text("7\n")
        clock[0] += cg.CPU_LOOKUP_RETRY_S - 1
        assert host.read_cpu_ns(["vr1"]) == {}
        clock[0] += 1
        assert host.read_cpu_ns(["vr1"]) == {"vr1": 7}
        assert len(looked) == 2
    finally:
        host.close()


@pytest.mark.parametrize("version, contents", [
    (1, b""), (1, b"-5\n"), (1, b"12 34\n"), (1, b"lots\n"),
    (2, b"user_usec 5\n"), (2, b"usage_usec\n"), (2, b"usage_usec -3\n"), (2, b"usage_usec 1.5\n"),
])
def test_bad_contents_leave_the_vr_out_with_a_warning_naming_the_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, version: int, contents: bytes) -> None:
    if version == 2:
        bad = _v2_dir(tmp_path, "bad", contents)
        f = bad / "cpu.stat"
    else:
        bad = tmp_path / "cpu,cpuacct" / "bad"
        bad.mkdir(parents=True)
        f = bad / "cpuacct.usage"
        f.write_bytes(contents)
    good = _v2_dir(tmp_path, "good", V2_CHILD)
    host = _backend(tmp_path, {"bad": bad, "good": good})
    try:
        with caplog.at_level(logging.WARNING, logger="xtc.host.cgroup"):
            assert host.read_cpu_ns(["bad", "good"]) == {"good": 63383000}  # the others are still read
        assert any(str(f) in r.getMessage() and "'bad'" in r.getMessage() for r in caplog.records), caplog.text
        with pytest.raises(ValueError, match=str(f).replace("\\", "\\\\")):
            parse_cpu_time(contents, version, str(f))
    finally:
        host.close()


def test_gone_unknown_and_returning_vrs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = _v2_dir(tmp_path, "a", V2_CHILD)
    host = _backend(tmp_path, {"a": a, "never": tmp_path / "never-made"})
    try:
        assert host.read_cpu_ns(["a", "never", "not-configured"]) == {"a": 63383000}
        with caplog.at_level(logging.WARNING, logger="xtc.host.cgroup"):
            shutil.rmtree(a)  # the VR stopped: its kept file is gone too
            assert host.read_cpu_ns(["a"]) == {}
            # Started again (a new group, a new counter): found and read afresh.
            _v2_dir(tmp_path, "a", b"usage_usec 5\n")
            assert host.read_cpu_ns(["a"]) == {"a": 5000}
        assert not caplog.records  # a VR that is not running is no problem to report
    finally:
        host.close()


def test_kept_descriptors_are_counted_and_given_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = {f"vr{i}": _v2_dir(tmp_path, f"vr{i}", b"usage_usec %d\n" % i) for i in range(4)}
    before = cgroup_actuators._CgroupBase.open_fds
    # Room for two kept descriptors only: the others are opened and closed on each read.
    monkeypatch.setattr(cgroup_actuators._CgroupBase, "fd_budget", before + 2)
    host = _backend(tmp_path, dirs)
    try:
        want = {f"vr{i}": i * 1000 for i in range(4)}
        assert host.read_cpu_ns(list(dirs)) == want
        assert host.read_cpu_ns(list(dirs)) == want
        assert cgroup_actuators._CgroupBase.open_fds == before + 2
    finally:
        host.close()
    assert cgroup_actuators._CgroupBase.open_fds == before


def test_read_cost_per_vr_is_small(tmp_path: Path) -> None:
    """1000 VRs read in well under a millisecond each (plain files here; on the kernel's cgroup
    files the cost is measured in tests/root/test_cgroup_cpu_time_real.py)."""
    dirs = {f"vr{i}": _v2_dir(tmp_path, f"vr{i}", V2_CHILD) for i in range(1000)}
    host = _backend(tmp_path, dirs)
    try:
        names = list(dirs)
        assert len(host.read_cpu_ns(names)) == 1000  # first read: finds and opens the files
        t0 = time.perf_counter()
        for _ in range(3):
            assert len(host.read_cpu_ns(names)) == 1000
        per_vr_us = (time.perf_counter() - t0) / 3 / 1000 * 1e6
        print(f"\nread_cpu_ns on files: {per_vr_us:.2f} us per VR (1000 VRs)")
        assert per_vr_us < 200.0
    finally:
        host.close()
    assert os.path.exists(tmp_path / "vr0" / "cpu.stat")
