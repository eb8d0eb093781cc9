"""``xtc bench daemon`` on real kernel objects (root): veth in a namespace, cgroup v1 caps.

Runs the kernel path at a small size and checks that the daemon saw real counters (its VRs got
rates), wrote real caps, and that every namespace and cgroup directory it made is gone afterwards,
also when the run fails half-way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xtc_lab.bench import daemon_bench
from xtc_lab.bench.daemon_bench import CGROUP_V1_CPU, bench_daemon, bench_names

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces, veth pairs and cgroups")
    if not (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller at {CGROUP_V1_CPU}")


def _leftovers() -> list[str]:
    host_ns, vr_ns, cg = bench_names()
    return [p for p in (f"/run/netns/{host_ns}", f"/run/netns/{vr_ns}", str(cg)) if Path(p).exists()]


def test_kernel_path_measures_and_removes_everything() -> None:
    _need_root()
    row = bench_daemon(20, seconds=2.0, period_s=1.0, kernel=True)
    assert row["kernel_included"] is True and row["vrs"] == 20 and row["interfaces"] == 80
    assert "netlink" in row["counters"] and "cgroup v1" in row["caps"]
    assert 0.0 < row["core_percent"] < 100.0
    # The frames make each VR's rate wander 30% around its setpoint: caps move, at most once
    # per VR and period.
    assert 0 < row["cap_writes_per_s"] <= 20
    assert _leftovers() == []


def test_kernel_path_steady_workload_writes_no_cap() -> None:
    _need_root()
    row = bench_daemon(10, seconds=2.0, period_s=1.0, kernel=True, workload="steady")
    assert row["workload"] == "steady" and row["cap_writes_per_s"] == 0
    assert _leftovers() == []


def test_early_drop_puts_real_limiters_on_the_veth_ends_and_counts_them(monkeypatch) -> None:
    """``--early-drop``: the daemon's own limiter works on the bench's interfaces (limits in
    place, reads counted, no failure), this thread comes back to its namespace, nothing is left."""
    _need_root()
    home = os.stat("/proc/thread-self/ns/net").st_ino
    seen: list[str] = []
    real = daemon_bench._CountedLimiter.install

    def install(self, ifname, setting):  # the kernel's answer, checked from outside the daemon
        seen.append(ifname)
        return real(self, ifname, setting)

    monkeypatch.setattr(daemon_bench._CountedLimiter, "install", install)
    row = bench_daemon(10, seconds=2.0, period_s=1.0, kernel=True, workload="steady", early_drop=True)
    assert row["early_drop"] is True and row["limiter_failures"] == 0
    assert row["vrs_limited_at_end"] > 0 and row["limiter_ops_warmup"]["install"] == 4 * row["vrs_limited_at_end"]
    # every limiter's drop counter in one qdisc dump a period, no read per interface
    assert row["limiter_ops_per_s"]["dump"] == 1 and row["limiter_ops_per_s"]["read"] == 0
    assert seen and all(i.startswith("vif") for i in seen)
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    assert _leftovers() == []


def test_early_drop_needs_the_kernel_path() -> None:
    with pytest.raises(ValueError, match="--early-drop needs the kernel-included benchmark"):
        bench_daemon(2, seconds=1.0, kernel=False, early_drop=True)


def test_kernel_path_cleans_up_after_a_failure(monkeypatch) -> None:
    _need_root()

    def boom(*_a, **_k):
        raise RuntimeError("failed half-way")

    monkeypatch.setattr(daemon_bench, "_measure", boom)
    with pytest.raises(RuntimeError, match="half-way"):
        bench_daemon(5, seconds=1.0, period_s=1.0, kernel=True)
    assert _leftovers() == []
