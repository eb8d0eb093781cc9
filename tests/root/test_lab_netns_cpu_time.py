"""A lab netns VR's CPU time through the cgroup backend (root, cgroup v1).

The lab puts a netns VR's forwarder in its own cgroup of the cpu hierarchy and, where cpuacct is
mounted apart (this host), in a twin group of the cpuacct hierarchy, so that the VR's CPU time is
accounted on its own.  The lab's CPU hog at 100% in the VR, under a 20% cap, must then show about
20% of one CPU in :meth:`CgroupBackend.read_cpu_ns`, the same as the hog's own CPU time; teardown
must remove both groups.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from xtc.daemon.config import CgroupVr
from xtc.host.cgroup import CgroupBackend
from xtc.host.counters import ProcNetDevCounters

pytestmark = [pytest.mark.root, pytest.mark.timeout(90)]


def test_a_lab_netns_vr_has_its_own_cpu_time(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates namespaces, bridges and cgroups")
    from xtc_lab.lab.hog import hog_in_vr
    from xtc_lab.lab.netlab import LabError, NetLab, find_cpu_cgroup, random_prefix

    try:
        cg = find_cpu_cgroup()
    except LabError as e:
        pytest.skip(f"no usable cgroup cpu controller: {e}")
    if cg.version != 1:
        pytest.skip("cgroup v2 host: the cpu group accounts itself (tests/unit/test_cgroup_cpu_time.py)")
    lab = NetLab(prefix=random_prefix("xtcc"))
    made: list[Path] = []
    try:
        vr = lab.add_netns_vr(cgroup=True)
        assert vr.cgroup is not None
        made += [Path(vr.cgroup)] + ([cg.acct_root / vr.name] if cg.acct_root is not None else [])
        assert all(d.is_dir() for d in made)
        assert vr.process is not None
        for d in made:  # the forwarder is in both groups
            assert str(vr.process.pid) in (d / "cgroup.procs").read_text().split()
        (Path(vr.cgroup) / "cpu.cfs_quota_us").write_text("20000")  # of the default 100 ms period
        (tmp_path / "net_dev").write_text("Inter-|\n face |\n")
        host = CgroupBackend([CgroupVr(vr.name, vr.cgroup, vr.vifs)], ProcNetDevCounters(tmp_path / "net_dev"))
        try:
            with hog_in_vr(lab, vr, 100.0) as hog:
                assert (hog.accounting is not None) == (cg.acct_root is not None)
                time.sleep(0.5)
                r0, h0, t0 = host.read_cpu_ns([vr.name]), hog.cpu_seconds(), time.monotonic()
                time.sleep(2.0)
                r1, h1, t1 = host.read_cpu_ns([vr.name]), hog.cpu_seconds(), time.monotonic()
        finally:
            host.close()
        share = (r1[vr.name] - r0[vr.name]) / 1e9 / (t1 - t0)
        own = (h1 - h0) / (t1 - t0)
        print(f"\nnetns VR capped at 20%: read_cpu_ns {100 * share:.1f}% of one CPU, the hog's own {100 * own:.1f}%")
        assert 0.10 <= share <= 0.26, share
        assert share == pytest.approx(own, abs=0.04)  # the idle forwarder adds next to nothing
    finally:
        lab.teardown()
    assert not any(d.exists() for d in made), made
