"""The lag probe (XtcTuning.lag_probe, make_controller(lag_probe=True), [controller] lag_probe)."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

import xtc.models
from xtc.control import ControllerError, make_controller
from xtc.control.estimate import LagEstimator
from xtc.control import bank, laws
from xtc.control.laws import XtcTuning
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.metrics import settling_periods
from xtc_lab.sim.run import run_loop

PAPER = xtc.models.PAPER_MODEL
A = PAPER.model.a


def _settle(plant, setpoints_kpps, lag_probe, noise=False, seed=1, duration_s=40):
    """Periods to stay within 10% from an uncapped start, per setpoint, and the trace."""
    bp = cb.BENCH_PLANTS[plant]
    sps = np.asarray(setpoints_kpps, dtype=float) * 1000.0
    tr = run_loop(cb._plant(bp, sps.size, seed, noise), lambda: make_controller(PAPER, lag_probe=lag_probe), sps,
                  duration_s, warmup_s=5.0)
    return [settling_periods(tr.clean_pps[:, i], sps[i], 0.10) for i in range(sps.size)], tr


# The starts the law without the probe took longest on (docs/results/2026-11-26-control-settling/control-settling.md, "The lag probe").
LAG_STARTS = [4, 10, 20, 65, 80]


@pytest.mark.parametrize("plant", ["laghalf", "lag4x", "grad-laghalf"])
def test_lag_plants_settle_from_uncapped_within_five_periods(plant):
    on, _ = _settle(plant, LAG_STARTS, True)
    assert max(on) <= 5, on
    off, _ = _settle(plant, LAG_STARTS, False)
    assert max(off) >= 6, off  # what the law without the probe does on the same plant


@pytest.mark.parametrize("plant", ["nominal", "fast2x", "slow2x", "gradual", "grad-fast2x", "hog15"])
def test_lag_free_plants_stay_within_five_periods(plant):
    sps = np.array([4, 10, 20, 45, 60, 75, 85], dtype=float)
    sps = sps[cb._reachable(cb.BENCH_PLANTS[plant], sps * 1000.0)]  # 4 kp/s is below cap 1 on 2x faster hardware
    on, _ = _settle(plant, sps, True)
    assert max(on) <= 5, on


def test_ten_percent_noise_keeps_the_steady_mean_within_three_percent():
    # A noisy hold, where the probe and its transient must not leave the mean off (the steady goal).
    bp = cb.BENCH_PLANTS["laghalf"]
    noisy = cb.BenchPlant("laghalf-noisy", "", replace(bp.vr, noise_rel=0.10))
    sps = np.array([10.0, 30.0, 60.0]) * 1000.0
    for lag_probe in (False, True):
        tr = run_loop(cb._plant(noisy, sps.size, 2, True), lambda: make_controller(PAPER, lag_probe=lag_probe), sps, 120,
                      warmup_s=5.0)
        means = tr.forwarded_pps[60:120].mean(axis=0)
        assert np.all(np.abs(means / sps - 1.0) <= 0.03), (lag_probe, means)


def test_one_probe_one_sample_and_the_lag_of_the_plant():
    kept = []

    def factory():
        kept.append(make_controller(PAPER, lag_probe=True))
        return kept[-1]

    run_loop(cb._plant(cb.BENCH_PLANTS["laghalf"], 1, 1, False), factory, np.array([10e3]), 20, warmup_s=5.0)
    stepped = [c for c in kept if c.steps]  # (the daemon core also makes one to check the factory)
    assert len(stepped) == 1
    le = stepped[0].lag_estimator
    assert le.probed and le.samples == 1
    assert le.lag == pytest.approx(0.432, abs=0.01)  # a time constant of half a period


def _stepped(c, ys, caps, r=10e3, offered=100e3):
    out = []
    for y, cap in zip(ys, caps):
        c.applied(cap)
        out.append(c.step(y, r, offered))
    return out


def test_state_round_trip_in_the_middle_of_a_transient():
    c = make_controller(PAPER, lag_probe=True)
    c.start(100.0)
    # Cap 100 at rest, the move to 10 and its lagging first period, the probe's period.
    caps = [100.0]
    for y in (99.9e3, 61.7e3, 36.6e3):
        caps.append(_stepped(c, [y], [caps[-1]])[0])
    assert c.lag_estimator.samples == 1 and c._transient
    d = make_controller(PAPER, lag_probe=True)
    d.restore_state(json.loads(json.dumps(c.to_state())))
    ys = [17.5e3, 10.0e3, 10.7e3, 10.6e3]
    a, b = [caps[-1]], [caps[-1]]
    for y in ys:
        a.append(_stepped(c, [y], [a[-1]])[0])
        b.append(_stepped(d, [y], [b[-1]])[0])
    assert a == b


def test_a_malformed_transient_state_is_ignored():
    c = make_controller(PAPER, lag_probe=True)
    c.start(50.0)
    s = c.to_state()
    for bad in ({"on": True, "age": -1, "setpoint_pps": 1e3}, {"on": True, "age": 1, "setpoint_pps": math.inf}, "junk",
                {"on": True, "age": 1.5, "setpoint_pps": None}):
        c.restore_state({**s, "transient": bad})
        assert not c._transient
    c.restore_state({**s, "lag_estimator": {**s["lag_estimator"], "probe_rest_pps": -5.0}})
    assert not c.lag_estimator.probed and c.lag_estimator.samples == 0


def test_the_estimator_takes_no_sample_from_ordinary_moves():
    est = LagEstimator(A)
    # A lag plant's periods after a move from rest and a follow-up move the controller chose freely
    # (the estimate without the probe took one sample here; it was removed: docs/design/control-law.md).
    for m, cap in ((99.9e3, 100.0), (61.7e3, 10.0), (21.2e3, 1.7), (6.4e3, 1.0)):
        est.update(m, math.log10(cap), 100e3)
    assert est.samples == 0


def test_lag_probe_is_for_the_xtc_controller_only():
    with pytest.raises(ControllerError, match="lag_probe"):
        make_controller(PAPER, "pi", lag_probe=True)
    make_controller(PAPER, "pi", lag_probe=False)  # nothing to switch off
    c = make_controller(PAPER, lag_probe=True)
    assert c.tuning.lag_probe
    d = make_controller(PAPER)  # on by default since 2026-11-25
    assert d.tuning.lag_probe
    assert XtcTuning().lag_probe is True
    off = make_controller(PAPER, lag_probe=False)
    assert not off.tuning.lag_probe
    # An explicit tuning is kept as given unless lag_probe says otherwise.
    assert not make_controller(PAPER, tuning=XtcTuning(design_lag=A, lag_probe=False)).tuning.lag_probe
    assert make_controller(PAPER, tuning=XtcTuning(design_lag=A, lag_probe=False), lag_probe=True).tuning.lag_probe


def _lag_plant_steps(c, cap0, periods, gain_pps_per_percent=1000.0, g=0.432, stray_at=None, r=10e3):
    """Steps ``c`` on a first-order lag plant (rate = gain x cap, first period's mean misses the
    fraction ``g`` of a move); at period ``stray_at`` the measured rate is 20% low (one noisy period)."""
    from xtc.control.estimate import pole_of_lag

    p = pole_of_lag(g)
    cap, x = cap0, gain_pps_per_percent * cap0
    for k in range(periods):
        f = gain_pps_per_percent * cap
        m = (1.0 - g) * f + g * x
        x = p * x + (1.0 - p) * f
        c.applied(cap)
        cap = c.step(0.8 * m if k == stray_at else m, r, 100e3)
    return cap


@pytest.mark.parametrize("window, probed", [(None, False), (10**6, True)])
def test_a_stray_period_at_the_setpoint_is_not_probed(window, probed, monkeypatch):
    # At its setpoint long after the activation, one period 20% low makes the law move the cap up by
    # more than 0.1 decade from rest, and the lag plant's next period moves the rate part of the way:
    # the shape of a probe candidate.  Outside the probe's window (the default) it is not probed.
    if window is not None:
        monkeypatch.setattr(bank, "PROBE_WINDOW_PERIODS", window)
    t = XtcTuning(design_lag=A)
    c = make_controller(PAPER, tuning=t)
    c.start(10.0)  # the setpoint's cap from the start: no large move in the window
    _lag_plant_steps(c, 10.0, 30, stray_at=20)
    assert c.lag_estimator.probed is probed
    # A setpoint step opens the window again: the probe is taken there.
    d = make_controller(PAPER, tuning=t)
    d.start(10.0)
    cap = _lag_plant_steps(d, 10.0, 20)
    assert not d.lag_estimator.probed
    _lag_plant_steps(d, cap, 6, r=30e3)
    assert d.lag_estimator.probed


def test_the_probes_window_is_kept_in_the_state_and_shut_without_it():
    c = make_controller(PAPER)
    c.start(10.0)
    _lag_plant_steps(c, 10.0, 2)
    s = json.loads(json.dumps(c.to_state()))
    assert s["transient"]["setpoint_age"] == 2
    d = make_controller(PAPER)
    d.restore_state(s)
    assert d._setpoint_age == 2
    old = {**s, "transient": {k: v for k, v in s["transient"].items() if k != "setpoint_age"}}
    d.restore_state(old)  # state from before the window was kept: no probe until the setpoint moves
    assert d._setpoint_age == laws.PROBE_WINDOW_PERIODS
    d.restore_state({**s, "transient": {**s["transient"], "setpoint_age": -1}})
    assert d._setpoint_age == laws.PROBE_WINDOW_PERIODS


@pytest.mark.parametrize("lag_probe", [None, False])
def test_the_measured_lag_is_in_the_instance_object_and_the_status(lag_probe):
    from xtc.daemon.api import Instance, Request
    from xtc.daemon.core import DaemonCore
    from xtc.daemon.ctl import format_table
    from xtc.daemon.loop import ControlLoop
    from xtc_lab.sim.host import SimClock, SimHost

    clock = SimClock()
    host = SimHost.for_plant(cb._plant(cb.BENCH_PLANTS["laghalf"], 1, 1, noise=False), clock=clock)
    core = DaemonCore(lambda: make_controller(PAPER, lag_probe=lag_probe), max_setpoint_pps=1e9)
    loop = ControlLoop(core, host)
    for _ in range(5):  # the plant's rate settled at the VR's cap (100%) before the activation
        host.advance()
        loop.period(clock.advance(1.0))
    name = sorted(core._names())[0]
    loop.handle(Request("activate", name, 10_000.0), clock())
    first = core.describe(name)
    for _ in range(8):
        loop.period(clock.advance(1.0))
    d = core.describe(name)
    Instance.model_validate(d)
    if lag_probe is False:
        assert first["lag"] is None and d["lag"] is None and d["lag_measured"] is None
        assert "lag" not in format_table([d]).splitlines()[-1]
        return
    assert first["lag"] == pytest.approx(A) and first["lag_measured"] is False  # the model's until measured
    assert d["lag_measured"] is True and d["lag"] == pytest.approx(0.432, abs=0.03)  # the plant's half-period lag
    assert f"lag {d['lag']:.2f} measured" in format_table([d])
