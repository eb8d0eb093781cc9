"""XTC's controller leaving saturation: the first moves from an uncapped start (cap 100)."""


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


def test_saturated_step_is_the_models_step():
    # 99.9 of 100 kp/s forwarded at cap 100, 85 kp/s wanted: the model's static gain b / (1 - a) says
    # (85 - 99.9) / 69.35 decades, i.e. cap 61; elasticity 1 alone would say cap 85.
    g = PAPER.model.static_gain_kpps_per_decade
    cap = _ctl().step(99_900.0, 85_000.0, 100_000.0)
    assert cap == pytest.approx(100.0 * 10.0 ** ((85.0 - 99.9) / g), rel=1e-9)
    assert cap < 62.0
    assert _ctl(saturation_model_step=False).step(99_900.0, 85_000.0, 100_000.0) == pytest.approx(85.0 * 100 / 99.9)


def test_no_model_step_when_the_cap_limits_or_the_offered_rate_is_unknown():
    # Forwarding 90% of what is offered: the cap is the limit, the elasticity-1 step stands.
    assert _ctl().step(99_900.0, 85_000.0, 111_000.0) == pytest.approx(85.0 * 100 / 99.9)
    assert _ctl().step(99_900.0, 85_000.0, None) == pytest.approx(85.0 * 100 / 99.9)


def test_model_step_never_smaller_than_the_elasticity_one_step():
    # At a low offered rate the model's kp/s step is short: the log step (larger) stands.
    assert _ctl().step(10_000.0, 5_000.0, 10_000.0) == pytest.approx(50.0)


@pytest.mark.parametrize("plant", ["nominal", "fast2x"])
def test_settles_from_uncapped_near_the_knee_within_5_periods(plant):
    from xtc_lab.bench import control_bench as cb
    from xtc_lab.sim.experiments import controller_spec
    from xtc_lab.sim.metrics import settling_periods

    sps = np.array([80.0, 85.0, 90.0]) * 1000.0
    tr = cb._hog(controller_spec("xtc"), cb.BENCH_PLANTS[plant], sps, 1, cb.ScenarioTimes(), PAPER, lambda f: None)
    settle = [settling_periods(tr.clean_pps[:60, i], sps[i], 0.10) for i in range(sps.size)]
    # Before the model's step out of saturation: 7, 8, 7 (nominal) and 10, 12, 13 (2x faster).
    assert all(s is not None and s <= 5 for s in settle), settle
