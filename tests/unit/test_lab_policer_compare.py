"""The before/after fleet comparison's checks (xtc_lab.policer_compare), before any fleet starts."""

from __future__ import annotations

import json
import sys

import pytest

from xtc_lab import policer_compare


@pytest.fixture
def isolated_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 'before' run puts its tree first on this process's path and its children's: undone after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")


@pytest.mark.parametrize("argv", [[], ["/t", "sideways", "sqlite", "10", "1", "o.json"], ["/t", "after", "pg", "10"]])
def test_bad_arguments_print_the_usage_and_exit_2(argv, tmp_path, capsys) -> None:
    assert policer_compare.main(argv) == 2
    assert "BEFORE_TREE before|after" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_before_run_whose_tree_is_not_the_product_in_use_stops_before_the_fleet(isolated_path, tmp_path,
                                                                                    capsys) -> None:
    """The product was imported before the tree went on the path (here: by the test run), so the run
    would measure the installed policer as 'before': refused, nothing written."""
    out = tmp_path / "before.json"
    assert policer_compare.main([str(tmp_path / "tree"), "before", "sqlite", "10", "1", str(out)]) == 1
    assert "before: the policer in use is" in capsys.readouterr().err
    assert not out.exists()


def test_the_fleet_table_lists_the_runs_present_by_database_mode_and_side(tmp_path) -> None:
    run = {"engine_cpu_ms_per_measurement": 0.5, "database_cpu_ms_per_measurement": None, "measured_per_s": 900,
           "uptime_before": " 10:00:00 up 1 day,  load average: 1.50, 1.20, 1.00", "load_average_after": [2.004, 1, 1],
           "policy_cycle_ms": {"p99": 800.0}, "rss_mb": {"policer_engine": 170}}
    for name, db_ms in (("r5-after-pg-jitter", 0.25), ("r5-before-sqlite-steady", None), ("after-sqlite-jitter", 9.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps(run | {"database_cpu_ms_per_measurement": db_ms}))
    rows = policer_compare.fleet_table(tmp_path, "r5-")
    assert rows[2:] == [
        "| SQLite, steady, before | 0.5 ms | (in the engine) | 0.5 ms | 900 | 800.0 ms | 170 MB | 1.50 / 2.0 |",
        "| PostgreSQL, jitter 0.05, after | 0.5 ms | 0.25 ms | 0.75 ms | 900 | 800.0 ms | 170 MB | 1.50 / 2.0 |"]
    assert len(rows[0].split("|")) == len(rows[2].split("|"))


def test_cpu_per_call_warms_up_once_then_divides_by_the_calls() -> None:
    calls = []
    assert policer_compare.cpu_s_per_call(lambda: calls.append(sum(range(1000))), 10) >= 0.0
    assert len(calls) == 11


def test_profile_tables_show_each_run_and_each_groups_rounds_and_medians(tmp_path) -> None:
    def run(name: str, cpu: float, links: float) -> None:
        (tmp_path / f"{name}.json").write_text(json.dumps({
            "cpu_ms_per_measurement": {"plain": cpu}, "cycle_ms": {"p50": 100, "p99": 900}, "rss_mb": 160.0,
            "thread_cpu_ms_per_measurement": {"policer-links": links, "policer-worker": 0.02}}))

    run("pace1-0.01-steady", 0.2, 0.10)
    run("pace2-0.01-steady", 0.1, 0.06)
    run("pace3-0.01-steady", 0.3, 0.08)
    run("pace1-0.05-steady", 0.15, 0.05)
    (tmp_path / "other-0.01-steady.json").write_text("not a profile run")  # not matched by the pattern
    lines = policer_compare.profile_tables(tmp_path, "pace*-*-*.json", ("pace (s)", "mode"))
    assert lines[0].startswith("| round | pace (s) | mode | CPU / measurement (ms) |")
    assert "| 2 | 0.01 | steady | 0.1000 | 0.0000 | 0.0600 |" in "\n".join(lines)
    assert "| 0.01 | steady | 0.2000 / 0.1000 / 0.3000 | 0.2000 | 0.0800 | 0.0200 | 0.0000 |" in lines
    assert "| 0.05 | steady | 0.1500 | 0.1500 | 0.0500 | 0.0200 | 0.0000 |" in lines
    assert all(line.count("|") == lines[0].count("|") for line in lines[:6])
