"""The daemon overhead benchmark runs and reports consistent numbers."""

from __future__ import annotations

from xtc_lab.bench.daemon_bench import bench_daemon


def test_bench_daemon_small():
    r = bench_daemon(5, seconds=1.0)
    assert r["vrs"] == 5 and r["interfaces"] == 20
    assert r["core_percent"] > 0
    assert abs(r["core_percent"] - r["meter_core_percent"] - r["control_core_percent"]) < 1e-9
    # Rates wander by 30% around setpoints of 40 kp/s: controllers must decide some writes.
    assert r["cap_writes_per_s"] > 0
