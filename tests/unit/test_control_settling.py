"""XTC's controller: leaving saturation from an uncapped start (cap 100), and a disturbance inside the fine band."""

import math

import numpy as np
import pytest

import xtc.models
from xtc.control import make_controller
from xtc.control.laws import XtcTuning

PAPER = xtc.models.PAPER_MODEL


def _ctl(**tuning):
    c = make_controller(PAPER, "xtc", tuning=XtcTuning(design_lag=PAPER.model.a, **tuning))
    c.start(100.0)
    return c


def test_saturated_step_uses_the_models_elasticity_at_its_operating_point():
    # 99.9 of 100 kp/s forwarded at cap 100, 85 kp/s wanted: E = log10(85 / 99.9) over the model's elasticity
    # at its operating point, b / (1 - a) / (ybar ln 10) = 0.385: cap 66; elasticity 1 alone would say cap 85.
    m = PAPER.model
    e0 = m.static_gain_kpps_per_decade / (m.ybar_kpps * math.log(10.0))
    assert e0 == pytest.approx(0.3854, abs=1e-4)
    cap = _ctl().step(99_900.0, 85_000.0, 100_000.0)
    assert cap == pytest.approx(100.0 * 10.0 ** (math.log10(85.0 / 99.9) / e0), rel=1e-9)
    assert cap < 67.0


def test_no_model_step_when_the_cap_limits_or_the_offered_rate_is_unknown():
    # Forwarding 85% of what is offered (below descent_fraction, 0.9): the cap is the limit, the
    # elasticity-1 step stands.
    assert _ctl().step(99_900.0, 85_000.0, 117_500.0) == pytest.approx(85.0 * 100 / 99.9)
    assert _ctl().step(99_900.0, 85_000.0, None) == pytest.approx(85.0 * 100 / 99.9)
    # Upwards (setpoint above what is forwarded) nothing changes either: the cap is not raised.
    assert _ctl().step(99_900.0, 120_000.0, 100_000.0) == pytest.approx(100.0)


def test_saturated_step_does_not_depend_on_the_rate_scale():
    # The same situation at 10 kp/s and at 1 Mp/s offered (hardware 10x slower or faster): the same cap.
    caps = [_ctl().step(0.999 * off, 0.85 * off, off) for off in (10_000.0, 100_000.0, 1_000_000.0)]
    assert caps[0] == pytest.approx(caps[1], rel=1e-12) and caps[2] == pytest.approx(caps[1], rel=1e-12)


@pytest.mark.parametrize("plant, most", [("nominal", 5), ("fast2x", 6)])
def test_settles_from_uncapped_near_the_knee(plant, most):
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.experiments import controller_spec
    from xtc_lab.sim.metrics import settling_periods

    sps = np.array([80.0, 85.0, 90.0]) * 1000.0
    tr = cb._hog(controller_spec("xtc"), cb.BENCH_PLANTS[plant], sps, 1, cb.ScenarioTimes(), PAPER, lambda f: None)
    settle = [settling_periods(tr.clean_pps[:60, i], sps[i], 0.10) for i in range(sps.size)]
    # Before the model's step out of saturation: 7, 8, 7 (nominal) and 10, 12, 13 (2x faster).
    assert all(s is not None and s <= most for s in settle), settle


def _fine_moves(measured_fractions, **tuning):
    """Caps after stepping at 50 kp/s with measured = fraction x setpoint, from cap 20 (offered unknown)."""
    c = make_controller(PAPER, "xtc", tuning=XtcTuning(design_lag=PAPER.model.a, **tuning))
    c.start(20.0)
    return [c.step(f * 50_000.0, 50_000.0) for f in measured_fractions]


def test_a_persistent_error_inside_the_fine_band_keeps_the_gentle_gain_on_a_quiet_rate():
    # 8% low twice on a quiet rate: the gentle gain 0.3 both times (the persistence band, 1, is only
    # ever the noise band: PERSIST_BAND_FRACTION).
    E = math.log10(1 / 0.92)
    caps = _fine_moves([1.0, 0.92, 0.92])
    assert caps[0] == pytest.approx(20.0)
    assert caps[1] == pytest.approx(20.0 * 10 ** (0.3 * E))
    assert caps[2] == pytest.approx(caps[1] * 10 ** (0.3 * E))


@pytest.mark.parametrize("plant", ["nominal", "hog15", "grad-fast2x"])
def test_hog_near_the_knee_recovers(plant, most=5):
    """Within the goal, 5 periods (with a persistence band of 5%, no longer a tuning, within 2)."""
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.experiments import controller_spec
    from xtc_lab.sim.metrics import recovery_periods

    spec = controller_spec("xtc")
    sps = np.array([45.0, 75.0, 80.0, 85.0]) * 1000.0
    tr = cb._hog(spec, cb.BENCH_PLANTS[plant], sps, 1, cb.ScenarioTimes(), PAPER, lambda f: None)
    rec = [recovery_periods(tr.clean_pps[60:, i], sps[i], 0.05) for i in range(sps.size)]
    # With the gentle gain alone inside the fine band: 3 (nominal, 75-85), 4 (hog15, 85), 3-4 (grad-fast2x, 45).
    assert all(v is not None and v <= most for v in rec), rec


def test_descent_rule_steps_from_the_top_cap_and_goes_on_only_after_such_a_step():
    # Gradual knee: 95.6 of 100 kp/s at cap 100 (below the 97% of the saturation step), 70 wanted.
    e0 = 0.38544
    d = _ctl()
    assert d.step(95_600.0, 70_000.0, 100_000.0) == pytest.approx(100.0 * 10.0 ** (math.log10(70 / 95.6) / e0), rel=1e-3)
    # It goes on while 90% is forwarded after such a step...
    cap1 = d.cap_percent
    assert d.step(92_000.0, 70_000.0, 100_000.0) == pytest.approx(cap1 * 10.0 ** (math.log10(70 / 92) / e0), rel=1e-3)
    # ...and ends with the first step that is not one (here: 85% forwarded: the dead-beat step).
    cap2, kp = d.cap_percent, d.kp
    beat = (kp + 1.0) * math.log10(70 / 85) - kp * math.log10(70 / 92)
    assert d.step(85_000.0, 70_000.0, 100_000.0) == pytest.approx(cap2 * 10.0**beat, rel=1e-9)
    # Below the top cap without a descent: the elasticity-1 step.
    c = make_controller(PAPER, "xtc", tuning=XtcTuning(design_lag=PAPER.model.a))
    c.start(40.0)
    assert c.step(95_600.0, 70_000.0, 100_000.0) == pytest.approx(40.0 * 70 / 95.6, rel=1e-9)


@pytest.mark.parametrize("probe, most", [(False, 4), (True, 5)])
def test_gradual_knee_from_uncapped_with_the_descent_rule(probe, most):
    # With the lag probe (the default) the descent's first move is followed by the probe's hedge (a
    # gradual knee's flat curve looks like a lag for one period): one period more at 70 kp/s.
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.metrics import settling_periods

    class Spec:
        def make(self, model):
            return make_controller(model, "xtc", tuning=XtcTuning(design_lag=model.model.a, lag_probe=probe))

    sps = np.array([65.0, 70.0, 75.0]) * 1000.0
    tr = cb._hog(Spec(), cb.BENCH_PLANTS["gradual"], sps, 1, cb.ScenarioTimes(steady_from_s=15, disturb_at_s=16, end_s=17), PAPER, lambda f: None)
    settle = [settling_periods(tr.clean_pps[:15, i], sps[i], 0.10) for i in range(sps.size)]
    assert max(settle) == most, settle


def test_fast_hardware_from_uncapped_with_the_repeated_saturation_step(most=4):
    # 2x faster hardware: the knee at half the model's cap; at 85-90 kp/s the model's steps took 4-5 periods
    # to reach it (6 to settle: SATURATION_REPEAT_FACTOR 1).
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.metrics import settling_periods

    class Spec:
        def make(self, model):
            return make_controller(model, "xtc")

    sps = np.array([85.0, 90.0]) * 1000.0
    tr = cb._hog(Spec(), cb.BENCH_PLANTS["fast2x"], sps, 1, cb.ScenarioTimes(steady_from_s=15, disturb_at_s=16, end_s=17), PAPER, lambda f: None)
    settle = [settling_periods(tr.clean_pps[:15, i], sps[i], 0.10) for i in range(sps.size)]
    assert max(settle) == most, settle


def test_repeated_saturation_step_only_after_a_saturation_step_that_showed_nothing():
    c = _ctl()
    e0 = c.saturation_elasticity
    cap0 = 100.0 * 10.0 ** (math.log10(85 / 99.9) / e0)
    assert c.step(99_900.0, 85_000.0, 100_000.0) == pytest.approx(cap0, rel=1e-3)
    c.applied(c.cap_percent)
    # Still offered-limited after it: twice the model's step.
    assert c.step(99_800.0, 85_000.0, 100_000.0) == pytest.approx(cap0 * 10.0 ** (2 * math.log10(85 / 99.8) / e0), rel=1e-3)
    # On a whole-percent actuator (the cap in force not the one wanted) the model's step.
    q = _ctl()
    q.step(99_900.0, 85_000.0, 100_000.0)
    want = q.wanted_cap_percent
    got = float(round(want)) + 0.4
    q.applied(got)
    q.step(99_800.0, 85_000.0, 100_000.0)
    # (the law judges the rate the wanted cap would have given: 99.8 kp/s x want / got)
    assert q.wanted_cap_percent == pytest.approx(want * 10.0 ** (math.log10(85 / (99.8 * want / got)) / e0), rel=1e-6)


def test_fine_band_descent_steps_from_the_top_cap_while_offered_limited():
    # 2x faster hardware at cap 100: 98.7 of 100 kp/s measured, 95 wanted: 3.8% off, inside the 10%
    # fine band, whose gentle gain (0.3, elasticity 1) took 1.2% off the cap per period where the
    # knee is at cap 20.  The fine band's descent takes the model's step, E / e0.
    d = _ctl()
    e0 = d.saturation_elasticity
    assert e0 == pytest.approx(0.3854, abs=1e-4)
    E = math.log10(95 / 98.7)
    assert d.step(98_700.0, 95_000.0, 100_000.0) == pytest.approx(100.0 * 10.0 ** (E / e0), rel=1e-9)
    # It goes on while the VR forwards >= 97% of its offered rate (the model's step, not twice it)...
    cap1 = d.cap_percent
    d.applied(cap1)
    E2 = math.log10(95 / 98.0)
    assert d.step(98_000.0, 95_000.0, 100_000.0) == pytest.approx(cap1 * 10.0 ** (E2 / e0), rel=1e-9)
    # ...and ends with the first period below it (96.95%: the gentle gain), for good.
    cap2 = d.cap_percent
    d.applied(cap2)
    assert d.step(96_950.0, 95_000.0, 100_000.0) == pytest.approx(cap2 * 10.0 ** (0.3 * math.log10(95 / 96.95)), rel=1e-9)
    cap3 = d.cap_percent
    d.applied(cap3)
    assert d.step(98_000.0, 95_000.0, 100_000.0) == pytest.approx(cap3 * 10.0 ** (0.3 * E2), rel=1e-9)
    # Below the top cap without a descent (a noise sample above 97% in steady state): the gentle gain.
    c = make_controller(PAPER, "xtc", tuning=XtcTuning(design_lag=PAPER.model.a))
    c.start(25.0)
    assert c.step(98_000.0, 95_000.0, 100_000.0) == pytest.approx(25.0 * 10.0 ** (0.3 * E2), rel=1e-9)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_hardware_holds_95_kpps_within_3pct(seed):
    # Issue 12's steady goal on 2x faster hardware at 95 kp/s (the hold scenario, with the plant's
    # noise): 0.5-1.6% with the fine band's descent (3.5-3.9% without it, when it was a tuning: the cap
    # still descending from 100 to the knee at cap 20 after 120 s).
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.metrics import relative_error

    class Spec:
        def make(self, model):
            return make_controller(model, "xtc")

    sps = np.array([90.0, 95.0]) * 1000.0
    tr = cb._hold(Spec(), cb.BENCH_PLANTS["fast2x"], sps, seed, cb.ScenarioTimes(), PAPER, lambda f: None)
    means = tr.forwarded_pps[60:120].mean(axis=0)
    errs = [relative_error(means[i : i + 1], sps[i]) for i in range(sps.size)]
    assert max(errs) <= cb.STEADY_GOAL, errs
