"""The lag estimate (xtc.control.estimate.LagEstimator) outside the probe (tests/unit/test_control_lag_probe.py)."""

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
def test_no_sample_without_the_probe(tau_s, caps):
    """Samples come from the probe alone: a move from rest the controller did not arm says nothing
    (the samples from any move were removed with ``lag_estimate``: docs/design/control-law.md)."""
    est = LagEstimator(A)
    _feed(est, caps, _periods(caps, tau_s))
    assert not est.confident and est.lag == A


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


def test_a_state_written_with_the_removed_gain_estimator_still_loads():
    """State files written before 2026-11-26 have an ``estimator`` key (the removed GainEstimator):
    it is ignored, and the controller continues as from the same state without it.  (Not as ``c``
    itself: a round trip in the middle of the probe's transient is not exact, on main as well.)"""
    c = make_controller(PAPER)
    c.start(100.0)
    for y, cap in zip([99.9e3, 61.7e3, 21.2e3], [100.0, 10.0, 1.7]):
        c.applied(cap)
        c.step(y, 10e3, 100e3)
    state = c.to_state()
    assert "estimator" not in state
    old = {**state, "estimator": {"theta": [0.09, 0.9], "P": [[1.0, 0.0], [0.0, 10.0]], "prev": None,
                                  "dY_prev": 0.0, "updates": 0, "age": 10**9}}
    d, e = make_controller(PAPER), make_controller(PAPER)
    d.restore_state(old)
    e.restore_state(state)
    assert d.to_state() == e.to_state() == state
    assert d.step(10.2e3, 10e3, 100e3) == e.step(10.2e3, 10e3, 100e3)
