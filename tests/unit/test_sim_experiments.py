"""The paper's experiments on the simulated plant, on short runs, and ``xtc simulate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xtc.models
from xtc.control import make_controller
from xtc_lab.sim.closed_loop import run_closed_loop
from xtc_lab.sim.experiments import PaperActuation, calibrate_dom0_capacity, sweep, tcpudp
from xtc_lab.sim.plant import Dom0Config, Plant, PlantConfig, PlantError, VRConfig, tcp


def test_paper_actuation_reproduces_the_paper_operating_ranges() -> None:
    # From cap 1 with integer caps, PI cannot leave cap 1 below about 19 kp/s, dead-beat below about 15.
    r = sweep(seed=2, duration_s=40.0, runs=1, setpoints_kpps=(10, 17, 30), controllers=("pi", "deadbeat"), warmup_s=20.0)
    pi = r.data["controllers"]["pi"]["achieved_kpps"]
    db = r.data["controllers"]["deadbeat"]["achieved_kpps"]
    assert pi[0] < 5 and pi[1] < 5  # stuck at cap 1 (about 3.3 kp/s)
    assert db[0] < 5 and abs(db[1] - 17) < 2
    assert abs(pi[2] - 30) < 3 and abs(db[2] - 30) < 3
    # With exact caps the same controllers do reach 10 kp/s.
    r2 = sweep(seed=2, duration_s=40.0, runs=1, setpoints_kpps=(10,), controllers=("pi",), actuation="exact", warmup_s=20.0)
    assert abs(r2.data["controllers"]["pi"]["achieved_kpps"][0] - 10) < 1.5


def test_paper_actuation_rounds_and_resyncs_the_controller() -> None:
    ctl = PaperActuation(make_controller(xtc.models.PAPER_MODEL, kind="pi"))
    ctl.start(1.0)
    cap = ctl.step(3_300.0, 15_000.0)
    assert cap == 1.0  # the move is below log10(1.5): rounds back to 1
    assert ctl.inner.cap_percent == pytest.approx(1.0)
    cap = ctl.step(3_300.0, 40_000.0)
    assert cap >= 2.0 and cap == round(cap)


def test_closed_loop_holds_a_setpoint_and_validates_input() -> None:
    plant = Plant(PlantConfig(vrs=(VRConfig(),), seed=1))
    tr = run_closed_loop(plant, [make_controller(xtc.models.PAPER_MODEL, kind="deadbeat")], [40_000.0], 40.0)
    assert tr.measured_pps.shape == (40, 1)
    assert abs(tr.measured_pps[20:, 0].mean() - 40_000.0) < 4_000.0
    assert np.all((tr.cap_percent >= 1.0) & (tr.cap_percent <= 100.0))
    with pytest.raises(PlantError):
        run_closed_loop(plant, [], [1.0], 10.0)
    with pytest.raises(PlantError):
        run_closed_loop(plant, [None], [1.0, 2.0], 10.0)


def test_dom0_calibration_hits_the_target() -> None:
    vrs = [VRConfig(traffic=tcp(60_000.0))] * 6
    cap = calibrate_dom0_capacity(vrs, 78.0, duration_s=20.0)
    p = Plant(PlantConfig(vrs=tuple(vrs), dom0s=(Dom0Config(cap),), seed=1))
    p.advance(10.0)
    assert p.measure(20.0).forwarded_pps.sum() / 1000.0 == pytest.approx(78.0, rel=0.01)


def test_tcpudp_xtc_gives_tcp_less_than_udp_loses() -> None:
    r = tcpudp(seed=1, duration_s=30.0, runs=1, controllers=("xtc",), warmup_s=15.0, calibration_s=20.0)
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
