"""Controller design: the paper's numbers, and properties on seeded random models."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

import xtc.models
from xtc.models import Gains, LogCapModel
from xtc.control import design

PAPER = xtc.models.PAPER_MODEL.model


def test_deadbeat_gains_reproduce_the_paper():
    g = design.deadbeat_gains(PAPER)
    assert_allclose(g.kp, 1.452e-3, rtol=1e-3)
    assert_allclose(g.ki, 14.419e-3, rtol=1e-3)
    # Closed form of section 7.2.1.
    assert_allclose(g.kp, PAPER.a / PAPER.b_kpps_per_decade, rtol=1e-12)
    assert_allclose(g.ki, (1 - PAPER.a) / PAPER.b_kpps_per_decade, rtol=1e-12)


def test_deadbeat_closed_loop_is_one_over_z():
    tf = design.closed_loop_tf(PAPER, design.deadbeat_gains(PAPER)).minreal()
    num = np.trim_zeros(np.ravel(tf.num[0][0]), "f")
    den = np.ravel(tf.den[0][0])
    assert_allclose(num, [1.0], atol=1e-9)
    assert_allclose(den, [1.0, 0.0], atol=1e-9)


def test_paper_pi_poles_match_equation_3():
    g = Gains(kp=-1.747e-3, ki=11.311e-3)
    a, b = PAPER.a, PAPER.b_kpps_per_decade
    # Equation 3's denominator, by hand.
    expected = np.roots([1.0, (g.kp + g.ki) * b - (a + 1), a - g.kp * b])
    poles = design.closed_loop_poles(PAPER, g)
    assert_allclose(np.sort_complex(poles), np.sort_complex(expected), atol=1e-12)
    # And from python-control's feedback of PI * plant.
    tf_poles = design.closed_loop_tf(PAPER, g).poles()
    assert_allclose(np.sort_complex(tf_poles), np.sort_complex(expected), atol=1e-9)
    # A stable, lightly damped complex pair at about 0.245 +- 0.377j (|p| = 0.449).
    assert_allclose(poles.real, [0.2445, 0.2445], atol=1e-3)
    assert_allclose(np.abs(poles.imag), [0.3766, 0.3766], atol=1e-3)
    assert np.all(np.abs(poles) < 1)


def test_paper_pi_step_response_is_stable_and_settles():
    m = design.step_metrics(PAPER, Gains(kp=-1.747e-3, ki=11.311e-3))
    assert m.stable
    assert_allclose(m.final_value, 1.0, atol=1e-9)
    assert 2 <= m.settling_periods <= 10


def _random_models(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield LogCapModel(
            a=float(rng.uniform(0.0, 0.95)),
            b_kpps_per_decade=float(rng.choice([-1, 1]) * rng.uniform(1.0, 200.0)),
            ybar_kpps=float(rng.uniform(5, 500)),
            ubar_log10_cap=float(rng.uniform(0.2, 1.9)),
        )


def _random_poles(rng):
    if rng.random() < 0.5:
        r, th = rng.uniform(0.0, 0.95), rng.uniform(0.05, np.pi - 0.05)
        p = r * np.exp(1j * th)
        return [p, np.conj(p)]
    return list(rng.uniform(-0.9, 0.95, size=2))


def test_poles_land_where_placed_on_random_models():
    rng = np.random.default_rng(20261121)
    for m in _random_models(200, seed=7):
        want = _random_poles(rng)
        g = design.pi_gains_by_pole_placement(m, want)
        got = design.closed_loop_poles(m, g)
        assert_allclose(np.sort_complex(got), np.sort_complex(np.asarray(want, complex)), atol=1e-7)
        assert_allclose(design.characteristic_polynomial(m, g), np.real(np.poly(want)), atol=1e-9)


def test_repeated_poles_are_placed_too():
    for m in _random_models(50, seed=8):
        g = design.pi_gains_by_pole_placement(m, [0.3, 0.3])
        assert_allclose(design.closed_loop_poles(m, g), [0.3, 0.3], atol=1e-6)


def _simulate(m, g, r, y0, u0, e0, n):
    """Equation 1 with Equation 2, in deviation variables."""
    y, u, e_prev = y0, u0, e0
    ys = []
    for _ in range(n):
        e = r - y
        u = u + (g.kp + g.ki) * e - g.kp * e_prev
        e_prev = e
        y = m.a * y + m.b_kpps_per_decade * u
        ys.append(y)
    return np.array(ys)


def test_deadbeat_settles_linear_model_in_two_steps_on_random_models():
    rng = np.random.default_rng(11)
    for m in _random_models(200, seed=9):
        r = float(rng.uniform(-50, 50))
        # From rest (the paper's F(z) = 1/z): the output is at the setpoint after one period.
        ys = _simulate(m, design.deadbeat_gains(m), r, 0.0, 0.0, 0.0, 10)
        assert_allclose(ys, r, atol=1e-8 * max(1, abs(r)))
        # Minimum-time gains (both poles at 0): from ANY initial state, settled after two periods.
        y0, u0, e0 = rng.uniform(-20, 20, size=3)
        ys = _simulate(m, design.minimum_time_gains(m), r, y0, u0, e0, 10)
        assert_allclose(ys[1:], r, atol=1e-7 * max(1, abs(r)))


def test_bad_pole_requests_are_refused():
    with pytest.raises(ValueError):
        design.pi_gains_by_pole_placement(PAPER, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError):
        design.pi_gains_by_pole_placement(PAPER, [0.1 + 0.2j, 0.3 - 0.1j])
    with pytest.raises(ValueError):
        design.pi_gains_by_pole_placement(PAPER, [float("nan"), 0.1])
