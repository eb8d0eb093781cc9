"""Properties of the control laws, in the style of python-control's tests: closed-loop poles where
they were placed, the error decaying at the remaining pole, settling within N periods on seeded
plants (docs/design/control-law.md).  Each asserts on the law's behaviour, not on its code."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import xtc.models
from xtc.control import NoiseTuning, XtcTuning, make_controller
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
    and the step out of saturation off): the error decays at the pole ``a``, whatever the plant's
    speed ``c`` and the size of the step."""
    t = XtcTuning(design_lag=a, dead_zone_fraction=0.0, fine_band_fraction=0.0, noise=NoiseTuning(noise_band_sigmas=0.0),
                  saturation_model_step=False, lag_probe=False)
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
