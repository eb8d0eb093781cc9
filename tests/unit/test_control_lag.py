"""The lag estimate (xtc.control.estimate.LagEstimator) and XtcTuning.lag_estimate."""

import math
import random

import numpy as np
import pytest

import xtc.models
from xtc.control import make_controller
from xtc.control.estimate import LagEstimator, pole_of_lag
from xtc.control.laws import XtcTuning
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.metrics import settling_periods
from xtc_lab.sim.plant import averaged_pole
from xtc_lab.sim.run import run_loop

PAPER = xtc.models.PAPER_MODEL
A = PAPER.model.a


@pytest.mark.parametrize("tau_s", [0.05, 0.0915, 0.37, 0.5, 1.0])
def test_pole_of_lag_inverts_the_period_mean(tau_s):
    g = averaged_pole(tau_s)
    assert pole_of_lag(g) == pytest.approx(math.exp(-1.0 / tau_s), abs=1e-6)


def _periods(caps, tau_s, kpps_per_percent=3.27, offered=100e3, noise=0.0, seed=0, sub=100):
    """Period means of a first-order VR (rate proportional to the cap, capped by the offered rate)."""
    rng = random.Random(seed)
    x = min(offered, kpps_per_percent * 1e3 * caps[0])
    out = []
    for cap in caps:
        target = min(offered, kpps_per_percent * 1e3 * cap)
        acc = 0.0
        for _ in range(sub):
            x += (target - x) * (1.0 - math.exp(-1.0 / sub / tau_s))
            acc += x
        out.append(acc / sub * (1.0 + noise * rng.gauss(0.0, 1.0)))
    return out


def _feed(est, caps, rates, offered=100e3, noise=0.0):
    for cap, m in zip(caps, rates):
        est.update(m, math.log10(cap), offered, noise)


@pytest.mark.parametrize("tau_s", [0.37, 0.5])
@pytest.mark.parametrize("caps", [[100.0, 10.0, 1.7, 3.0, 3.0], [100.0, 10.0, 3.4, 3.1, 5.0], [15.0, 1.5, 1.0, 1.0]])
def test_the_lag_of_a_move_from_rest(tau_s, caps):
    est = LagEstimator(A)
    _feed(est, caps, _periods(caps, tau_s))
    assert est.confident
    assert est.lag == pytest.approx(averaged_pole(tau_s), abs=0.03)


def test_the_models_lag_when_nothing_moved_enough_or_the_rate_was_limited():
    est = LagEstimator(A)
    caps = [30.0, 28.0, 27.0, 27.0, 26.0]  # moves under 0.1 decade
    _feed(est, caps, _periods(caps, 0.5))
    assert not est.confident and est.lag == A
    caps = [100.0, 60.0, 40.0, 40.0]  # the VR still forwards all it is offered after the move
    est = LagEstimator(A)
    _feed(est, caps, _periods(caps, 0.5, kpps_per_percent=20.0))
    assert not est.confident and est.lag == A


def test_no_sample_from_a_start_on_a_knee():
    # 95% of the offered rate at the start: a gradual knee, whose shape the sample cannot tell from a lag
    est = LagEstimator(A)
    caps = [100.0, 31.0, 13.0, 10.0]
    rates = _periods(caps, 0.0915)
    rates[0] = 95.6e3
    _feed(est, caps, rates)
    assert not est.confident


def test_ten_percent_noise_does_not_make_a_lag_up():
    """On a VR without a lag, 1 s rates scattering by 10%: the estimate says so or says nothing."""
    wrong = used = 0
    for seed in range(200):
        est = LagEstimator(A)
        caps = [100.0, 10.0, 1.7, 3.0, 3.0, 3.0]
        _feed(est, caps, _periods(caps, 0.0915, noise=0.10, seed=seed), noise=0.10)
        used += est.confident
        wrong += est.confident and est.lag >= A + XtcTuning().lag_margin
    assert wrong <= 10  # 5% of the runs at most
    assert used >= 100  # and it does speak: a 1-decade move stands out of 10% noise


def test_state_round_trip():
    est = LagEstimator(A)
    caps = [100.0, 10.0, 1.7]
    _feed(est, caps, _periods(caps, 0.5))
    twin = LagEstimator(A)
    twin.restore_state(est.to_state())
    for cap, m in zip([3.0, 3.0], [10e3, 9.9e3]):
        assert est.update(m, math.log10(cap), 100e3) == twin.update(m, math.log10(cap), 100e3)
        assert (est.lag, est.settled_pps) == (twin.lag, twin.settled_pps)
    twin.restore_state({"hist": "junk"})
    assert twin.lag == A and not twin.confident


def test_controller_state_keeps_the_lag():
    t = XtcTuning(design_lag=A, lag_estimate=True, lag_probe=False)  # the lag measured without the probe
    c = make_controller(PAPER, tuning=t)
    c.start(100.0)
    for y, cap in zip([99.9e3, 61.7e3, 21.2e3], [100.0, 10.0, 1.7]):
        c.applied(cap)
        c.step(y, 10e3, 100e3)
    assert c.lag_estimator.confident
    d = make_controller(PAPER, tuning=t)
    d.restore_state(c.to_state())
    assert d.lag_estimator.lag == c.lag_estimator.lag
    assert d.step(10.2e3, 10e3, 100e3) == c.step(10.2e3, 10e3, 100e3)


def _settle_from_uncapped(plant, setpoints_kpps, lag_estimate, noise=False, seed=1):
    bp = cb.BENCH_PLANTS[plant]
    sps = np.asarray(setpoints_kpps, dtype=float) * 1000.0
    t = XtcTuning(design_lag=A, lag_estimate=lag_estimate, lag_probe=False)
    tr = run_loop(cb._plant(bp, sps.size, seed, noise), lambda: make_controller(PAPER, tuning=t), sps, 40, warmup_s=5.0)
    return [settling_periods(tr.clean_pps[:, i], sps[i], 0.10) for i in range(sps.size)], tr


@pytest.mark.parametrize("plant", ["laghalf", "lag4x"])
def test_lag_plants_settle_from_uncapped_with_the_lag_measured(plant):
    sps = [5, 8, 10, 12]
    off, _ = _settle_from_uncapped(plant, sps, False)
    on, _ = _settle_from_uncapped(plant, sps, True)
    assert max(on) <= 6, on  # the goal is 5: not met at every setpoint (docs/results/2026-11-26-control-settling/control-settling.md)
    assert max(off) >= 8, off  # what the model's lag gives (docs/results/2026-11-26-control-settling/control-settling.md)


@pytest.mark.parametrize("plant", ["nominal", "gradual", "fast2x", "slow2x"])
def test_plants_without_a_lag_are_not_changed(plant):
    # at these setpoints and seed (a false lag is measured now and then elsewhere: docs/results/2026-11-26-control-settling/control-settling.md)
    sps = [5, 10, 20, 45, 70, 85]
    off, tr_off = _settle_from_uncapped(plant, sps, False, noise=True)
    on, tr_on = _settle_from_uncapped(plant, sps, True, noise=True)
    assert on == off
    assert np.array_equal(tr_on.forwarded_pps, tr_off.forwarded_pps)
