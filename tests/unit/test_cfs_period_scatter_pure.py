"""The pure parts of lab/xtc_lab/bench/cfs_period_scatter.py (the measurement itself needs root and libvirt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xtc_lab.bench.cfs_period_scatter import forwarder_pids, main, summary


def test_summary_is_the_mean_and_the_population_cv() -> None:
    s = summary([950.0, 1050.0, 1000.0, 1000.0], [4.0, 4.0, 3.0, 5.0])
    assert s["mean_pps"] == 1000.0 and s["rate_cv"] == pytest.approx(0.0354, abs=1e-4)
    assert s["share_within_10pct_of_mean"] == 1.0
    assert s["mean_cpu_percent"] == 4.0 and s["cpu_cv"] == pytest.approx(0.1768, abs=1e-4)
    assert summary([800.0, 1200.0], [1.0, 1.0])["share_within_10pct_of_mean"] == 0.0


def test_forwarder_pids_by_comm(tmp_path: Path) -> None:
    for pid, comm in [(10, "xtc-forwarder-c\n"), (11, "xtc-udpsend-5cb\n"), (12, "forwarder\n")]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm)
    (tmp_path / "self").mkdir()
    assert sorted(forwarder_pids(tmp_path)) == [10, 12]


@pytest.mark.parametrize("argv", [["--periods", "500"], ["--caps", "0"], ["--seconds", "1"]])
def test_bad_arguments_are_refused_before_anything_runs(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
