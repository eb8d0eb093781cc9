"""The paper's experiments on the simulated plant, on short runs, and ``xtc simulate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xtc.models
from xtc.control import make_controller
from xtc_lab.sim.experiments import RunSettings, calibrate_dom0_capacity, sweep, tcpudp
from xtc_lab.sim.run import run_loop
from xtc_lab.sim.plant import Dom0Config, Plant, PlantConfig, PlantError, VRConfig, tcp


def test_integer_caps_dither_where_the_paper_stuck_at_cap_1() -> None:
    # The paper's PI and dead-beat, started at cap 1 on whole-percent caps, could not leave cap 1
    # below 20 / 15 kp/s.  The product's loop tells the controller the cap in force; it dithers.
    rs = RunSettings(seed=2, duration_s=60.0, runs=1, warmup_s=30.0)
    r = sweep(rs, setpoints_kpps=(10, 17, 30), controllers=("pi", "deadbeat"))
    for name in ("pi", "deadbeat"):
        got = r.data["controllers"][name]["achieved_kpps"]
        assert got[0] > 8.0 and abs(got[1] - 17) < 2 and abs(got[2] - 30) < 3, (name, got)


def test_run_loop_is_the_daemon_loop_with_requests_and_whole_percent_caps() -> None:
    vrs = (VRConfig(initial_cap_percent=1.0, dom0=0), VRConfig(dom0=1))
    plant = PlantConfig(vrs=vrs, dom0s=(Dom0Config(1e9), Dom0Config(1e9)), seed=1)
    deadbeat = lambda: make_controller(xtc.models.PAPER_MODEL, kind="deadbeat")  # noqa: E731

    def setpoints(t_s: float) -> list[float | None]:
        return [10_000.0 if t_s <= 40.0 else 12_000.0, None]  # the second VR has no XTC instance

    tr = run_loop(plant, deadbeat, setpoints, 80.0, cap_step_percent=1.0, names=("a", "b"))
    assert tr.vrs == ("a", "b") and tr.forwarded_pps.shape == (80, 2)
    assert tr.t_s[0] == 1.0 and tr.t_s[-1] == 80.0
    assert np.isnan(tr.setpoint_pps[:, 1]).all() and np.all(tr.cap_percent[:, 1] == 100.0)
    assert tr.setpoint_pps[39, 0] == 10_000.0 and tr.setpoint_pps[40, 0] == 12_000.0
    # Whole percents in force; the commands between them dither, so the mean rate is the setpoint.
    assert np.all(tr.cap_percent[:, 0] == np.round(tr.cap_percent[:, 0]))
    assert len(set(tr.cap_percent[20:40, 0])) >= 2
    assert abs(tr.clean_pps[20:40, 0].mean() - 10_000.0) < 500.0
    assert abs(tr.clean_pps[60:, 0].mean() - 12_000.0) < 600.0
    # The meter's rates are the plant's, noise included.
    assert abs(tr.forwarded_pps[20:, 0].mean() / tr.clean_pps[20:, 0].mean() - 1.0) < 0.03
    with pytest.raises(PlantError):
        run_loop(plant, deadbeat, [1.0], 10.0)


def test_dom0_calibration_hits_the_target() -> None:
    vrs = [VRConfig(traffic=tcp(60_000.0))] * 6
    cap = calibrate_dom0_capacity(vrs, 78.0, duration_s=20.0)
    p = Plant(PlantConfig(vrs=tuple(vrs), dom0s=(Dom0Config(cap),), seed=1))
    p.advance(10.0)
    assert p.measure(20.0).forwarded_pps.sum() / 1000.0 == pytest.approx(78.0, rel=0.01)


def test_tcpudp_xtc_gives_tcp_less_than_udp_loses() -> None:
    r = tcpudp(RunSettings(seed=1, duration_s=30.0, runs=1, warmup_s=15.0), controllers=("xtc",), calibration_s=20.0)
    w = r.data["without_xtc"]
    x = r.data["with"]["xtc"]
    assert w["udp_kpps"] > w["tcp_kpps"]  # UDP does not back off
    assert abs(x["udp_kpps"] - 20.0) < 2.0
    assert x["tcp_kpps"] > w["tcp_kpps"] + 3.0
    assert x["tcp_gain_kpps"] < x["udp_loss_kpps"]  # Dom0 still spends work on dropped UDP packets
    assert x["dom0_wasted_share"] > 0.1


def test_cli_writes_json_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xtc.cli import main

    rc = main(["simulate", "sweep", "--quiet", "--duration-s", "20", "--runs", "1", "--setpoints-kpps", "30,60", "--controllers", "deadbeat", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "deadbeat" in out
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["setpoints_kpps"] == [30.0, 60.0]
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert main(["simulate", "sweep", "--quiet", "--controllers", "nope", "--out", str(tmp_path)]) == 2
