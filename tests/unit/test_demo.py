"""The demo's closed loop holds both VRs near their setpoints and writes its outputs."""

import json

from xtc.cli import main
from xtc_lab.demo import _summary, run_demo


def test_demo_loop_holds_both_setpoints():
    result = run_demo(duration_s=40, seed=3)
    summary = _summary(result)
    for name in ("red", "blue"):
        assert summary[name]["worst_mean_error_fraction"] < 0.05, summary
    for row in result["periods"]:
        assert all(1.0 <= c <= 100.0 for c in row["cap_percent"])


def test_demo_command_writes_json_and_png(tmp_path, capsys):
    rc = main(["demo", "--sim", "--duration-s", "12", "--speed", "0", "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "demo.json").read_text())
    assert len(data["periods"]) == 12
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert "red" in capsys.readouterr().out
