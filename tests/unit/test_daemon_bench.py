"""``xtc bench daemon`` runs the daemon itself and reports what the issue's goals are stated in.

These tests take the file path (synthetic ``/proc/net/dev``, caps recorded), which needs no root;
the kernel path is tested in tests/root/test_daemon_bench_kernel.py.
"""

from __future__ import annotations

import json

from xtc.cli import main
from xtc_lab.bench.daemon_bench import bench_daemon


def test_bench_daemon_runs_the_daemon_and_controls_every_vr() -> None:
    row = bench_daemon(20, seconds=3.0, period_s=1.0, kernel=False)
    assert row["vrs"] == 20 and row["period_s"] == 1.0 and row["daemon_seconds"] == 3.0
    assert row["kernel_included"] is False
    assert "synthetic" in row["counters"]
    assert 0.0 < row["core_percent"] < 100.0
    # Every VR's rate wanders 30% around a setpoint it cannot hold by itself: the controllers
    # move the caps, so caps are written, but at most once per VR and period.
    assert 0 < row["cap_writes_per_s"] <= 20


def test_bench_daemon_steady_workload_writes_no_cap() -> None:
    row = bench_daemon(20, seconds=3.0, period_s=1.0, kernel=False, workload="steady")
    assert row["workload"] == "steady"
    assert 0.0 < row["core_percent"] < 100.0
    # Every VR forwards its setpoint: inside the dead zone, no cap moves after the first write.
    assert row["cap_writes_per_s"] == 0


def test_bench_daemon_json_rows(capsys) -> None:
    assert main(["bench", "daemon", "--vrs", "5", "--seconds", "2", "--file", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    # One row per workload by default.
    assert [r["workload"] for r in doc["results"]] == ["steady", "moving"]
    assert main(["bench", "daemon", "--vrs", "5", "--seconds", "2", "--file", "--json", "--workload", "moving"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    (row,) = doc["results"]
    assert row["workload"] == "moving"
    assert {"vrs", "period_s", "core_percent", "kernel_included", "cap_writes_per_s"} <= set(row)
    assert row["kernel_included"] is False and doc["kernel_included"] is False
    # The output says that the kernel's cost is left out.
    assert "NOT included" in captured.err


def test_bench_daemon_breakdown_times_each_stage_within_the_total() -> None:
    from xtc.daemon import api
    from xtc_lab.bench.daemon_bench import _STAGES

    real = api.samples_message
    row = bench_daemon(20, seconds=3.0, period_s=1.0, kernel=False, breakdown=True)
    stages = row["breakdown_us_per_period"]
    assert {"counters", "meter", "core", "sample rows", "sample JSON", "metrics"} <= set(stages) <= {s[0] for s in _STAGES}
    total_us = row["core_percent"] / 100.0 * 1e6  # per second of daemon time = per period at 1 s
    # The stages follow one another (the indented one is part of the one above): their sum is within the total.
    assert 0 < sum(v for k, v in stages.items() if not k.startswith(" ")) <= total_us * 1.05
    assert api.samples_message is real  # the wrappers are gone afterwards


def test_bench_daemon_without_subscribers_builds_no_samples() -> None:
    row = bench_daemon(20, seconds=2.0, period_s=1.0, kernel=False, breakdown=True, subscribers=0)
    assert row["sample_subscribers"] == 0
    assert "sample rows" not in row["breakdown_us_per_period"] and "sample JSON" not in row["breakdown_us_per_period"]
    row = bench_daemon(20, seconds=2.0, period_s=1.0, kernel=False, breakdown=True, subscribers=2)
    assert row["sample_subscribers"] == 2 and row["breakdown_us_per_period"]["sample JSON"] > 0


def test_bench_daemon_xtc_noprobe_runs_the_daemon_without_the_lag_probe(tmp_path) -> None:
    from xtc_lab.bench.daemon_bench import _config

    assert _config(str(tmp_path), 1.0, "xtc-noprobe").controller.lag_probe is False
    assert _config(str(tmp_path), 1.0, "xtc").controller.lag_probe is None  # the default: the probe on
    row = bench_daemon(20, seconds=3.0, period_s=1.0, kernel=False, kind="xtc-noprobe")
    assert row["controller"] == "xtc-noprobe" and 0.0 < row["core_percent"] < 100.0
    assert 0 < row["cap_writes_per_s"] <= 20
