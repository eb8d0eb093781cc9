"""Properties of the control laws, in the style of python-control's tests: closed-loop poles where
they were placed, the error decaying at the remaining pole, settling within N periods on seeded
plants (docs/design/control-law.md).  Each asserts on the law's behaviour, not on its code."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import xtc.models
from xtc.control import XtcTuning, make_controller
from xtc.control.bank import ControllerBank
from xtc.control.estimate import pole_of_lag
from xtc.control.period import closed_loop_poles_of, deadbeat_gains, gains_for_poles
from xtc_lab.bench import control_bench as cb
from xtc_lab.sim.metrics import settling_periods
from xtc_lab.sim.run import run_loop

PAPER = xtc.models.PAPER_MODEL
M = PAPER.model


@pytest.mark.parametrize("poles", [[0.0, M.a], [0.2, 0.3], [0.5, 0.0], [0.1, 0.6]])
def test_the_paper_pi_places_the_closed_loop_poles_asked_for(poles):
    assert_allclose(np.sort(closed_loop_poles_of(M, gains_for_poles(M, poles))), np.sort(poles), atol=1e-9)


@pytest.mark.parametrize("step_kpps", [5.0, -8.0, 2.0])
def test_the_paper_deadbeat_error_decays_at_the_remaining_pole(step_kpps):
    """On the paper's own plant (Equation 1, no dead zone) the dead-beat gains put the poles at
    {0, a}: from rest, after a setpoint step, each period's error is about ``a`` times the last (the
    model file's gains are the dead-beat ones rounded: exactly its dominant pole)."""
    assert_allclose(np.sort(closed_loop_poles_of(M, deadbeat_gains(M))), [0.0, M.a], atol=1e-12)
    ctl = make_controller(PAPER, "deadbeat", dead_zone_fraction=0.0)
    poles = np.sort(closed_loop_poles_of(M, ctl.gains).real)
    assert_allclose(poles, [0.0, M.a], atol=2e-3)
    ctl.start(10.0 ** M.ubar_log10_cap)
    dy, r = 0.0, M.ybar_kpps + step_kpps
    errs = []
    for _ in range(8):
        y = M.ybar_kpps + dy
        cap = ctl.step(y * 1000.0, r * 1000.0)
        ctl.applied(cap)
        errs.append(r - y)
        dy = M.a * dy + M.b_kpps_per_decade * (math.log10(cap) - M.ubar_log10_cap)
    e = np.array(errs)
    assert_allclose(e[1:] / e[:-1], M.a, rtol=2e-2)
    assert_allclose(e[4:] / e[3:-1], poles[-1], rtol=1e-3)
    assert abs(e[-1]) < 1e-6 * abs(step_kpps)


@pytest.mark.parametrize("a", [0.0915, 0.3, 0.6])
@pytest.mark.parametrize("ratio", [2.5, 0.2])
def test_the_xtc_law_is_deadbeat_in_log_space(a, ratio):
    """XTC's gains (``Kp = a / (1 - a)``, ``Ki = 1``) on the normalised plant
    ``Y(k+1) = a Y(k) + (1 - a) (U(k) + c)`` (logs of rate and cap; the gentle band, the dead zone
    and the step out of saturation, which needs the offered rate, off): the error decays at the pole ``a``, whatever the plant's
    speed ``c`` and the size of the step."""
    t = XtcTuning(design_lag=a, dead_zone_fraction=0.0, fine_band_fraction=0.0, noise_band_sigmas=0.0, lag_probe=False)
    ctl = make_controller(PAPER, tuning=t)
    ctl.start(10.0)
    c = math.log10(2e3)  # 2 kp/s per percent of one CPU
    Y, R = math.log10(10.0) + c, math.log10(10.0 * ratio) + c
    errs = []
    for _ in range(8):
        cap = ctl.step(10.0 ** Y, 10.0 ** R)
        ctl.applied(cap)
        errs.append(R - Y)
        Y = a * Y + (1.0 - a) * (math.log10(cap) + c)
    e = np.array(errs)
    assert_allclose(e[1:] / e[:-1], a, rtol=1e-6)


@pytest.mark.parametrize("plant", ["nominal", "fast2x", "slow2x", "lag4x", "laghalf"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_default_law_settles_within_five_periods_from_uncapped(plant, seed):
    """The default controller (``make_controller``, the lag probe on) on the bench's seeded plants,
    noiseless, from the uncapped start: within 10% of the setpoint in at most 5 periods, and the
    mean of the last 10 periods within 3%."""
    sps = np.array([10.0, 20.0, 50.0, 85.0]) * 1000.0
    tr = run_loop(cb._plant(cb.BENCH_PLANTS[plant], sps.size, seed, False), lambda: make_controller(PAPER), sps, 30,
                  warmup_s=5.0)
    settle = [settling_periods(tr.clean_pps[:, i], sps[i], 0.10) for i in range(sps.size)]
    assert all(s is not None and s <= 5 for s in settle), settle
    assert_allclose(tr.clean_pps[-10:].mean(axis=0), sps, rtol=0.03)


def _lagged_plants(n: int, seed: int):
    """``n`` seeded VRs below their knee: the rate a cap settles to is ``k`` pps per percent of one CPU,
    reached with a first-order lag whose first period misses the fraction ``g`` (as the bench's lag
    plants; :class:`~xtc.control.estimate.LagEstimator`'s equations)."""
    rng = np.random.default_rng(seed)
    k = rng.uniform(300.0, 3000.0, n)
    g = rng.choice([0.0, 0.0915, 0.345, 0.432], n)
    p = np.array([pole_of_lag(v) for v in g])
    return k, g, p


def _step_plants(k, g, p, x, caps):
    """One period of :func:`_lagged_plants` at ``caps``: (the period's mean rate, the next state)."""
    f = k * caps
    return (1.0 - g) * f + g * x, p * x + (1.0 - p) * f


@pytest.mark.parametrize("kind", ["xtc", "xtc-noprobe", "deadbeat"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_bank_of_seeded_plants_settles_each_row_as_if_alone(kind, seed):
    """Twelve VRs on seeded plants of different speeds and lags, stepped together by one bank on its
    rows (the daemon's period): each row's caps those of the same VR stepped alone (the rows do not
    leak), and from the uncapped start every VR within 10% of its setpoint by period 6 with the lag
    probe, by period 10 without (the lag's overshoot: docs/design/control-law.md).  The paper's
    dead-beat is designed for the paper's plant only: no settling asserted."""
    n, periods = 12, 14
    k, g, p = _lagged_plants(n, seed)
    sps = np.random.default_rng(seed + 100).uniform(0.1, 0.6, n) * k * 100.0
    make = (lambda: make_controller(PAPER, "xtc", lag_probe=False)) if kind == "xtc-noprobe" else \
        (lambda: make_controller(PAPER, kind, dead_zone_fraction=0.02 if kind == "deadbeat" else None))
    together = [make() for _ in range(n)]
    alone = [make() for _ in range(n)]
    for c in together + alone:
        c.start(100.0)
    bank = ControllerBank.like(together[0])
    rows = bank.rows(together)
    x_t, x_a = k * 100.0, k * 100.0
    caps_t, caps_a = np.full(n, 100.0), np.full(n, 100.0)
    rates = []
    for _ in range(periods):
        y_t, x_t = _step_plants(k, g, p, x_t, caps_t)
        y_a, x_a = _step_plants(k, g, p, x_a, caps_a)
        caps_t, ok = bank.step(together, y_t, sps, rows=rows)
        assert ok.all()
        caps_t, _ = bank.applied(together, caps_t, rows=rows)
        caps_a = np.array([c.step(y, r) for c, y, r in zip(alone, y_a.tolist(), sps.tolist())])
        for c, cap in zip(alone, caps_a.tolist()):
            c.applied(cap)
        assert_allclose(caps_t, caps_a, rtol=1e-12)
        rates.append(y_t)
    settle = [settling_periods(np.array(rates)[:, i], sps[i], 0.10) for i in range(n)]
    if kind != "deadbeat":
        limit = 6 if kind == "xtc" else 10
        assert all(s is not None and s <= limit for s in settle), (settle, g.tolist())


def test_a_row_saved_and_restored_continues_as_before():
    """A controller whose state lives in a bank's rows, saved (``to_state``, the daemon's state file)
    mid-transient and restored into a new controller, commands the same caps from then on."""
    k, g, p = _lagged_plants(6, 7)
    sps = 0.3 * k * 100.0
    ctls = [make_controller(PAPER) for _ in range(6)]
    for c in ctls:
        c.start(100.0)
    bank = ControllerBank.like(ctls[0])
    rows = bank.rows(ctls)
    x, caps = k * 100.0, np.full(6, 100.0)
    for _ in range(3):  # the probe and the observer's transient are under way
        y, x = _step_plants(k, g, p, x, caps)
        caps, _ = bank.step(ctls, y, sps, rows=rows)
        caps, _ = bank.applied(ctls, caps, rows=rows)
    twins = [make_controller(PAPER) for _ in range(6)]
    for t, c in zip(twins, ctls):
        t.restore_state(json.loads(json.dumps(c.to_state())))
    x_t, caps_t = x.copy(), caps.copy()
    for _ in range(8):
        y, x = _step_plants(k, g, p, x, caps)
        caps, _ = bank.step(ctls, y, sps, rows=rows)
        caps, _ = bank.applied(ctls, caps, rows=rows)
        y_t, x_t = _step_plants(k, g, p, x_t, caps_t)
        caps_t = np.array([t.step(a, r) for t, a, r in zip(twins, y_t.tolist(), sps.tolist())])
        for t, cap in zip(twins, caps_t.tolist()):
            t.applied(cap)
        assert_allclose(caps_t, caps, rtol=1e-12)


@pytest.mark.parametrize("kind", ["xtc", "pi"])
def test_the_bank_refuses_bad_rates_and_changes_nothing_there(kind):
    """A NaN, infinite or negative rate is not stepped (``ok`` False) and leaves that row's state as it
    was; the other rows step."""
    ctls = [make_controller(PAPER, kind) for _ in range(4)]
    for c in ctls:
        c.start(30.0)
    bank = ControllerBank.like(ctls[0])
    before = [c.to_state() for c in ctls]
    caps, ok = bank.step(ctls, np.array([1e4, math.nan, 1e4, 1e4]), np.array([2e4, 2e4, -1.0, 2e4]),
                         np.array([math.nan, math.nan, math.nan, -5.0]))
    assert ok.tolist() == [True, False, False, False]
    assert math.isfinite(caps[0]) and np.isnan(caps[1:]).all()
    assert [c.to_state() for c in ctls[1:]] == before[1:]
    assert ctls[0].to_state() != before[0]
    caps, done = bank.applied(ctls, np.array([10.0, 0.0, math.inf, math.nan]))
    assert done.tolist() == [True, False, False, False]


def test_a_copy_of_a_row_is_its_own():
    """``copy.deepcopy`` of a controller on a bank's rows is a controller with the same state whose steps
    leave the original alone (the lab copies controllers)."""
    ctls = [make_controller(PAPER) for _ in range(3)]
    for c in ctls:
        c.start(50.0)
    bank = ControllerBank.like(ctls[0])
    rows = bank.rows(ctls)
    bank.step(ctls, np.full(3, 2e4), np.full(3, 3e4), rows=rows)
    twin = copy.deepcopy(ctls[1])
    assert twin.to_state() == ctls[1].to_state()
    state = ctls[1].to_state()
    twin.step(1e4, 3e4)
    assert ctls[1].to_state() == state and twin.to_state() != state
