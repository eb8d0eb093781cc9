"""``xtc bench daemon`` runs the daemon itself and reports what the issue's goals are stated in."""

from __future__ import annotations

import json

from xtc.cli import main
from xtc_lab.bench.daemon_bench import bench_daemon


def test_bench_daemon_runs_the_daemon_and_controls_every_vr() -> None:
    row = bench_daemon(20, seconds=3.0, period_s=1.0)
    assert row["vrs"] == 20 and row["period_s"] == 1.0 and row["daemon_seconds"] == 3.0
    assert row["kernel_included"] is False
    assert 0.0 < row["core_percent"] < 100.0
    # Every VR's rate wanders 30% around a setpoint it cannot hold by itself: the controllers
    # move the caps, so caps are written, but at most once per VR and period.
    assert 0 < row["cap_writes_per_s"] <= 20


def test_bench_daemon_json_rows(capsys) -> None:
    assert main(["bench", "daemon", "--vrs", "5", "--seconds", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["results"]
    assert {"vrs", "period_s", "core_percent", "kernel_included"} <= set(row)
