"""The control laws: bounds, anti-windup, dead zone, bumpless start, bad input."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xtc.models
from xtc.control import KINDS, ControllerError, make_controller

PAPER = xtc.models.PAPER_MODEL


@pytest.mark.parametrize("kind", KINDS)
def test_default_cap_before_start_is_within_bounds(kind):
    c = make_controller(PAPER, kind)
    assert 1.0 <= c.cap_percent <= 100.0


def test_none_is_xtc():
    assert make_controller(PAPER).kind == "xtc"
    assert make_controller(PAPER, None).kind == "xtc"


def test_unknown_kind_is_refused():
    with pytest.raises(ControllerError, match="unknown controller kind"):
        make_controller(PAPER, "pid")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "measured, setpoint", [(float("nan"), 1e4), (-1.0, 1e4), (1e4, -5.0), (1e4, float("nan")), (float("inf"), 1e4), ("1", 1e4), (True, 1e4)]
)
def test_bad_input_raises_and_leaves_state_unchanged(kind, measured, setpoint):
    c = make_controller(PAPER, kind)
    c.start(30.0)
    c.step(50_000, 40_000)
    before = c.to_state()
    with pytest.raises(ControllerError):
        c.step(measured, setpoint)
    assert c.to_state() == before


def test_a_cpu_reading_that_is_no_number_raises_and_leaves_state_unchanged():
    """The one-row step makes its arrays before it steps: the lag probe's bookkeeping is not half done."""
    c = make_controller(PAPER, "xtc")
    c.start(100.0)
    for y in (100_000.0, 60_000.0, 45_000.0):  # a move from rest: the lag probe has work to do
        c.applied(c.step(y, 40_000.0, 100_000.0))
    before = c.to_state()
    with pytest.raises(ValueError):
        c.step(41_000.0, 40_000.0, 100_000.0, "a lot")  # type: ignore[arg-type]
    assert c.to_state() == before


@pytest.mark.parametrize("kind", ["pi", "deadbeat", "xtc"])
def test_bumpless_start_inside_dead_zone_keeps_the_cap(kind):
    c = make_controller(PAPER, kind)
    c.start(23.0)
    assert c.cap_percent == pytest.approx(23.0)
    # Measured equals setpoint: no move.
    assert c.step(60_000, 60_000) == pytest.approx(23.0)


def test_start_clamps_to_bounds():
    c = make_controller(PAPER, "deadbeat", cap_min_percent=3)
    c.start(1.0)
    assert c.cap_percent == 3.0
    with pytest.raises(ControllerError):
        c.start(float("nan"))


def test_paper_dead_zone_is_ten_percent():
    c = make_controller(PAPER, "pi")
    c.start(30.0)
    assert c.step(55_000, 50_000) < 30.0  # |e| = 10% of the setpoint: outside the zone, acts
    c2 = make_controller(PAPER, "pi")
    c2.start(30.0)
    assert c2.step(54_000, 50_000) == pytest.approx(30.0)  # 8%: inside
    c3 = make_controller(PAPER, "pi")
    c3.start(30.0)
    assert c3.step(60_000, 50_000) < 30.0  # 20%: acts


def test_paper_law_is_equation_2():
    c = make_controller(PAPER, "deadbeat")
    c.start(10.0)
    g = PAPER.deadbeat
    u = 1.0
    e1 = (40_000 - 20_000) / 1000
    u += g.ki * e1  # first step: e(k-1) taken equal to e(k)
    assert math.log10(c.step(20_000, 40_000)) == pytest.approx(u)
    e2 = (40_000 - 30_000) / 1000
    u += (g.kp + g.ki) * e2 - g.kp * e1
    assert math.log10(c.step(30_000, 40_000)) == pytest.approx(u)


@pytest.mark.parametrize("kind", ["pi", "deadbeat", "xtc"])
def test_no_windup_while_pinned(kind):
    """Pinned at the ceiling for a long time, the controller leaves it at once when the error reverses."""
    c = make_controller(PAPER, kind)
    c.start(50.0)
    for _ in range(500):
        assert c.step(10_000, 90_000) <= 100.0
    assert c.cap_percent == 100.0
    cap = c.step(100_000, 30_000)
    assert cap < 100.0


@pytest.mark.parametrize("kind", ["pi", "deadbeat", "xtc"])
def test_no_windup_at_the_floor(kind):
    c = make_controller(PAPER, kind, cap_min_percent=3)
    c.start(50.0)
    for _ in range(500):
        c.step(90_000, 1_000)
    assert c.cap_percent == 3.0
    assert c.step(500, 40_000) > 3.0


def test_xtc_does_not_raise_the_cap_when_the_vr_is_not_cap_limited():
    c = make_controller(PAPER)
    c.start(20.0)
    # The VR forwards all 5 kp/s it is offered; the setpoint of 50 kp/s is above the demand.
    for _ in range(20):
        cap = c.step(5_000, 50_000, offered_pps=5_000)
    assert cap == pytest.approx(20.0)
    # Without the offered rate the controller cannot know, and raises the cap.
    c2 = make_controller(PAPER)
    c2.start(20.0)
    assert c2.step(5_000, 50_000) > 20.0


def test_xtc_zero_traffic_is_finite():
    c = make_controller(PAPER)
    c.start(10.0)
    cap = c.step(0.0, 10_000)
    assert math.isfinite(cap) and 1 <= cap <= 100
    cap = c.step(0.0, 0.0)
    assert math.isfinite(cap) and 1 <= cap <= 100


def test_fixed_cap_follows_table_1():
    c = make_controller(PAPER, "fixed")
    assert c.step(0, 16_000) == pytest.approx(5.0)
    assert c.step(0, 65_000) == pytest.approx(20.0)
    assert c.step(0, 98_000) == pytest.approx(50.0)
    assert c.step(0, 8_000) == pytest.approx(2.5)
    assert c.step(0, 200_000) == pytest.approx(50.0)
    assert c.step(0, 0) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", KINDS)
def test_state_round_trip(kind):
    c = make_controller(PAPER, kind)
    c.start(40.0)
    for y in (30_000, 35_000, 42_000):
        c.step(y, 50_000)
    snap = c.to_state()
    d = make_controller(PAPER, kind)
    d.restore_state(snap)
    assert d.to_state() == snap
    assert d.step(44_000, 50_000) == c.step(44_000, 50_000)


@pytest.mark.parametrize("kind, key", [("xtc", "E_prev_decades"), ("pi", "e_prev_kpps"), ("deadbeat", "e_prev_kpps")])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "0.1", True, [0.1]])
def test_a_previous_error_that_is_no_finite_number_is_refused_and_changes_nothing(kind, key, bad):
    """A state file's previous error goes into the next step's proportional term: a NaN made every
    later cap NaN, an infinite one pinned the cap at a bound.  Refused (the daemon then restarts the
    controller from the VR's cap); the controller is as it was."""
    c = make_controller(PAPER, kind)
    c.start(40.0)
    c.step(30_000, 50_000)
    snap = c.to_state()
    d = make_controller(PAPER, kind)
    d.start(20.0)
    before = d.to_state()
    with pytest.raises(ControllerError, match=key):
        d.restore_state({**snap, key: bad})
    assert d.to_state() == before
    d.restore_state({**snap, key: None})  # none yet: the next step has no proportional kick
    assert math.isfinite(d.step(44_000, 50_000))


def test_restore_of_another_kind_is_refused():
    c = make_controller(PAPER, "pi")
    with pytest.raises(ControllerError):
        c.restore_state(make_controller(PAPER, "xtc").to_state())


rates = st.one_of(st.floats(0, 1e9, allow_nan=False), st.just(0.0), st.floats(0, 10))


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    cap_min=st.floats(1, 100),
    span=st.floats(0, 99),
    start=st.floats(0.01, 1000),
    seq=st.lists(st.tuples(rates, rates, st.one_of(st.none(), rates)), min_size=1, max_size=60),
)
def test_cap_is_always_finite_and_within_bounds(kind, cap_min, span, start, seq):
    cap_max = min(100.0, cap_min + span)
    c = make_controller(PAPER, kind, cap_min_percent=cap_min, cap_max_percent=cap_max)
    c.start(start)
    for measured, setpoint, offered in seq:
        cap = c.step(measured, setpoint, offered)
        assert math.isfinite(cap)
        assert cap_min - 1e-9 <= cap <= cap_max + 1e-9


def _noise_fraction(c) -> float:
    """The controller's estimate of the relative noise (standard deviation) of one period's rate."""
    return c.to_state()["noise_decades"] * math.log(10.0)


def _fine_band(c) -> float:
    """The fine band's half-width now, a fraction of the setpoint (XtcTuning.noise_band_sigmas)."""
    t = c.tuning
    return max(t.fine_band_fraction, t.noise_band_sigmas * _noise_fraction(c))


def test_xtc_noise_estimate_tracks_the_measurement_noise_and_a_step_still_acts():
    import numpy as np

    rng = np.random.default_rng(5)
    c = make_controller(PAPER)
    c.start(10.0)
    for _ in range(200):
        c.step(30_000 * (1 + 0.08 * rng.standard_normal()), 30_000)
    assert 0.05 < _noise_fraction(c) < 0.11
    assert _fine_band(c) > 0.10  # widened beyond 10%: noise alone does not trigger dead-beat moves
    before = c.cap_percent
    # A real disturbance (rate halves) is far outside the band: the cap moves by about a factor 2 at once.
    after = c.step(15_000, 30_000)
    assert after / before > 1.7


def test_xtc_quiet_measurement_keeps_the_band_at_ten_percent():
    c = make_controller(PAPER)
    c.start(10.0)
    for _ in range(50):
        c.step(30_000, 30_000)
    assert _fine_band(c) == pytest.approx(0.10)
