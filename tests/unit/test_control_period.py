"""Controllers know their period and the cap in force: resampled gains, refusals, dithering."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.control import PeriodError, make_controller
from xtc.control.design import pi_gains_by_pole_placement
from xtc.control.period import (
    MAX_PERIOD_RATIO,
    closed_loop_poles_of,
    deadbeat_gains,
    gains_for_poles,
    rescale_gains,
    rescale_model,
)
from xtc.models import PAPER_MODEL, CapBounds, LogCapModel

PAPER = PAPER_MODEL.model


@settings(max_examples=100, deadline=None)
@given(
    a=st.floats(min_value=0.0, max_value=0.95),
    b=st.floats(min_value=1.0, max_value=200.0),
    r=st.floats(min_value=0.0, max_value=0.9),
    theta=st.floats(min_value=0.0, max_value=3.0),
)
def test_closed_form_gains_place_the_poles_as_python_control_does(a: float, b: float, r: float, theta: float) -> None:
    m = LogCapModel(a=a, b_kpps_per_decade=b, ybar_kpps=50.0, ubar_log10_cap=1.0)
    poles = [r * complex(math.cos(theta), math.sin(theta)), r * complex(math.cos(theta), -math.sin(theta))]
    ours = gains_for_poles(m, poles)
    np.testing.assert_allclose(sorted(closed_loop_poles_of(m, ours), key=lambda p: (p.real, p.imag)),
                               sorted(poles, key=lambda p: (p.real, p.imag)), atol=1e-6)
    if abs(poles[0] - poles[1]) > 1e-3:
        ref = pi_gains_by_pole_placement(m, poles)
        assert ours.kp == pytest.approx(ref.kp, rel=1e-6, abs=1e-12)
        assert ours.ki == pytest.approx(ref.ki, rel=1e-6, abs=1e-12)


def test_deadbeat_closed_form_is_the_papers() -> None:
    g = deadbeat_gains(PAPER)
    assert g.kp == pytest.approx(1.452e-3, rel=1e-3)
    assert g.ki == pytest.approx(14.419e-3, rel=1e-3)


@pytest.mark.parametrize("period_s", [0.25, 0.5, 2.0, 5.0])
def test_resampled_model_keeps_the_plant(period_s: float) -> None:
    m = rescale_model(PAPER, period_s)
    # Same continuous pole and the same static gain b / (1 - a).
    assert math.log(m.a) / period_s == pytest.approx(math.log(PAPER.a) / PAPER.period_s)
    assert m.b_kpps_per_decade / (1 - m.a) == pytest.approx(PAPER.b_kpps_per_decade / (1 - PAPER.a))
    assert m.period_s == period_s


@pytest.mark.parametrize("period_s", [0.2, 0.5, 3.0])
def test_resampled_pi_keeps_its_poles_in_continuous_time(period_s: float) -> None:
    g = rescale_gains(PAPER, PAPER_MODEL.pi, period_s)
    before = closed_loop_poles_of(PAPER, PAPER_MODEL.pi)
    after = closed_loop_poles_of(rescale_model(PAPER, period_s), g)
    want = [complex(p) ** (period_s / PAPER.period_s) for p in before]
    key = lambda p: (round(p.real, 9), round(p.imag, 9))  # noqa: E731
    np.testing.assert_allclose(sorted(after, key=key), sorted(want, key=key), atol=1e-9)


def test_same_period_changes_nothing() -> None:
    assert rescale_gains(PAPER, PAPER_MODEL.pi, 1.0) == PAPER_MODEL.pi
    assert rescale_model(PAPER, 1.0) is PAPER


@pytest.mark.parametrize("period_s", [PAPER.period_s * MAX_PERIOD_RATIO * 1.01, PAPER.period_s / MAX_PERIOD_RATIO / 1.01])
def test_a_period_too_far_from_the_models_is_refused_with_the_reason(period_s: float) -> None:
    with pytest.raises(PeriodError, match="model's period"):
        make_controller(PAPER_MODEL, "pi", period_s=period_s)


def test_gains_with_a_negative_pole_are_not_resampled() -> None:
    g = gains_for_poles(PAPER, [-0.5, 0.2])
    with pytest.raises(PeriodError, match="negative"):
        rescale_gains(PAPER, g, 0.5)


def test_controllers_built_for_another_period_differ_as_the_plant_does() -> None:
    fast = make_controller(PAPER_MODEL, "deadbeat", period_s=0.5)
    nominal = make_controller(PAPER_MODEL, "deadbeat")
    exact = deadbeat_gains(rescale_model(PAPER, 0.5))
    # The model file's gains are the paper's, rounded to 4 digits: their pole "at 0" is at about
    # 1e-4, which the resampling maps to 1e-2 (a square root), hence 2% and not exact.
    assert fast.gains.kp == pytest.approx(exact.kp, rel=0.02)
    assert fast.gains.ki == pytest.approx(exact.ki, rel=0.02)
    assert fast.gains != nominal.gains
    xtc = make_controller(PAPER_MODEL, "xtc", period_s=0.5)
    assert xtc.tuning.design_lag == pytest.approx(PAPER.a ** 0.5)


# ------------------------------------------------------------------------------ cap in force
def quantise(cap: float) -> float:
    """Xen's credit scheduler: a whole percent, at least 1."""
    return float(max(1, round(cap)))


@pytest.mark.parametrize("kind", ["xtc", "pi", "deadbeat", "fixed"])
@pytest.mark.parametrize("wanted", [1.3, 2.5, 3.7, 14.2, 57.5])
def test_whole_percent_caps_average_to_the_wanted_cap(kind: str, wanted: float) -> None:
    ctl = make_controller(PAPER_MODEL, kind)
    ctl.start(wanted)
    in_force = []
    for _ in range(200):
        got = quantise(ctl.cap_percent)
        ctl.applied(got)
        in_force.append(got)
    assert ctl.wanted_cap_percent == pytest.approx(wanted)
    assert np.mean(in_force) == pytest.approx(wanted, abs=0.02)
    # It dithers between the two neighbouring whole percents only.
    assert set(in_force) <= {math.floor(wanted), math.ceil(wanted)}


def test_an_exact_actuator_sees_exactly_the_wanted_cap() -> None:
    ctl = make_controller(PAPER_MODEL, "xtc")
    ctl.start(33.3)
    for _ in range(5):
        assert ctl.cap_percent == pytest.approx(33.3)
        ctl.applied(ctl.cap_percent)


def test_a_cap_far_from_the_command_restarts_the_law_from_it() -> None:
    """The actuator held the VR at 40% while the law wanted 80%: no wind-up, it continues from 40."""
    ctl = make_controller(PAPER_MODEL, "pi")
    ctl.start(80.0)
    ctl.applied(40.0)
    assert ctl.cap_percent == pytest.approx(40.0)
    assert ctl.to_state()["carry_percent"] == 0.0


def test_state_round_trip_keeps_the_carry_and_refuses_a_bad_one() -> None:
    ctl = make_controller(PAPER_MODEL, "xtc", cap_min_percent=1.0)
    ctl.start(3.4)
    ctl.applied(3.0)
    st = ctl.to_state()
    assert st["carry_percent"] == pytest.approx(0.4)
    other = make_controller(PAPER_MODEL, "xtc")
    other.restore_state(st)
    assert other.cap_percent == pytest.approx(ctl.cap_percent)
    with pytest.raises(ValueError, match="carry"):
        other.restore_state({**st, "carry_percent": float("nan")})


def test_caps_stay_within_bounds_whatever_the_actuator_reports() -> None:
    ctl = make_controller(PAPER_MODEL, "xtc")
    caps = CapBounds(1.0, 100.0)
    ctl.start(1.0)
    for got in (1.0, 2.0, 1.0, 100.0, 1.0, 1.4):
        ctl.applied(got)
        assert caps.cap_min_percent <= ctl.cap_percent <= caps.cap_max_percent
