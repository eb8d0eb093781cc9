"""Controller design for the log-cap model, with python-control.

The paper's PI law in velocity form (Equation 2)::

    u(k) = u(k-1) + (Kp + Ki) e(k) - Kp e(k-1),   e = r - y   (kp/s)

is the positional PI ``u(k) = Kp e(k) + Ki sum_{j<=k} e(j)``.  With the plant
``y(k+1) = a y(k) + b u(k)`` and the integrator state ``s(k+1) = s(k) + e(k)``,
the loop is the state-feedback problem::

    x = [y, s],  A = [[a, 0], [-1, 1]],  B = [[b], [0]],  u = -K x,
    K = [Kp + Ki, -Ki]

whose closed-loop characteristic polynomial is the denominator of the paper's
Equation 3, ``z^2 + z[(Kp+Ki) b - (a+1)] + (a - Kp b)``.  Pole placement is done
with :func:`control.place` (distinct poles) or :func:`control.acker` (repeated
poles) on that system.

Gains are in decades of cap per kp/s of error (the paper's units): ``u`` is
``log10(cap_percent)``, ``y`` and ``e`` are in kp/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import control
import numpy as np

from xtc.models import Gains, LogCapModel

__all__ = [
    "augmented_system",
    "pi_gains_by_pole_placement",
    "deadbeat_gains",
    "minimum_time_gains",
    "closed_loop_tf",
    "closed_loop_poles",
    "characteristic_polynomial",
    "StepMetrics",
    "step_metrics",
]


def augmented_system(model: LogCapModel) -> tuple[np.ndarray, np.ndarray]:
    """State matrices ``(A, B)`` of the plant augmented with the PI's integrator."""
    a, b = model.a, model.b_kpps_per_decade
    A = np.array([[a, 0.0], [-1.0, 1.0]])
    B = np.array([[b], [0.0]])
    return A, B


def pi_gains_by_pole_placement(model: LogCapModel, poles: Sequence[complex]) -> Gains:
    """PI gains that put the closed-loop poles of Equation 3 at ``poles``.

    Parameters
    ----------
    model : LogCapModel
        The plant (``a`` dimensionless, ``b`` in kp/s per decade of cap).
    poles : sequence of two complex
        Desired closed-loop poles in the z-plane (a conjugate pair or two reals),
        each strictly inside the unit circle for a stable loop.

    Returns
    -------
    Gains
        ``kp``, ``ki`` in decades of cap per kp/s.
    """
    p = np.asarray(poles, dtype=complex)
    if p.shape != (2,):
        raise ValueError(f"a PI on a first-order plant has exactly 2 closed-loop poles, got {p.size}")
    if not np.all(np.isfinite(p)):
        raise ValueError("poles must be finite")
    if abs(p[0].imag) > 1e-12 or abs(p[1].imag) > 1e-12:
        if not np.isclose(p[0], np.conj(p[1])):
            raise ValueError("complex poles must come as a conjugate pair")
    A, B = augmented_system(model)
    if np.isclose(p[0], p[1]):
        K = control.acker(A, B, p)
    else:
        K = control.place(A, B, p)
    K = np.real_if_close(np.asarray(K, dtype=complex)).real.ravel()
    ki = -K[1]
    kp = K[0] - ki
    return Gains(kp=float(kp), ki=float(ki))


def deadbeat_gains(model: LogCapModel) -> Gains:
    """The paper's dead-beat gains (section 7.2.1): ``Kp = a/b``, ``Ki = (1-a)/b``.

    They place the closed-loop poles at ``{0, a}``; the pole at ``a`` cancels the
    zero of Equation 3, so that ``F(z) = 1/z``: from rest, the output reaches a
    setpoint step in one period.  (Pole placement with python-control; the daemon uses the
    closed form :func:`xtc.control.period.deadbeat_gains`, and the tests check they agree.)
    """
    return pi_gains_by_pole_placement(model, [0.0, model.a])


def minimum_time_gains(model: LogCapModel) -> Gains:
    """Gains that place both closed-loop poles at the origin.

    Every state of the linear loop then settles in two periods from any initial
    condition (``(A - BK)^2 = 0``), not only from rest.
    """
    return pi_gains_by_pole_placement(model, [0.0, 0.0])


def characteristic_polynomial(model: LogCapModel, gains: Gains) -> np.ndarray:
    """Coefficients ``[1, c1, c0]`` of Equation 3's denominator."""
    a, b = model.a, model.b_kpps_per_decade
    return np.array([1.0, (gains.kp + gains.ki) * b - (a + 1.0), a - gains.kp * b])


def closed_loop_tf(model: LogCapModel, gains: Gains) -> control.TransferFunction:
    """The closed loop ``Y(z)/R(z)`` of Equation 3, built from the plant and the PI with python-control."""
    dt = model.period_s
    a, b = model.a, model.b_kpps_per_decade
    plant = control.tf([b], [1.0, -a], dt)
    pi = control.tf([gains.kp + gains.ki, -gains.kp], [1.0, -1.0], dt)
    return control.feedback(pi * plant, 1)


def closed_loop_poles(model: LogCapModel, gains: Gains) -> np.ndarray:
    """Closed-loop poles (roots of Equation 3's denominator), sorted by magnitude."""
    A, B = augmented_system(model)
    K = np.array([[gains.kp + gains.ki, -gains.ki]])
    poles = np.linalg.eigvals(A - B @ K)
    return poles[np.argsort(np.abs(poles))]


@dataclass(frozen=True)
class StepMetrics:
    """Step response of the linear closed loop.

    ``settling_periods`` counts control periods until the output stays within
    ``band`` (relative) of its final value; ``overshoot_fraction`` is the peak
    excess over the final value, relative.
    """

    settling_periods: int
    overshoot_fraction: float
    final_value: float
    stable: bool


def step_metrics(model: LogCapModel, gains: Gains, band: float = 0.02, horizon: int = 200) -> StepMetrics:
    """Settling time and overshoot of a unit setpoint step through Equation 3."""
    poles = closed_loop_poles(model, gains)
    stable = bool(np.all(np.abs(poles) < 1.0))
    sys = closed_loop_tf(model, gains)
    t = np.arange(horizon) * model.period_s
    resp = control.step_response(sys, T=t)
    y = np.asarray(resp.outputs).ravel()
    if not stable or not np.all(np.isfinite(y)):
        return StepMetrics(settling_periods=horizon, overshoot_fraction=float("inf"), final_value=float("nan"), stable=False)
    final = float(np.asarray(control.dcgain(sys)).ravel()[0])
    outside = np.nonzero(np.abs(y - final) > band * abs(final))[0]
    settling = 0 if outside.size == 0 else int(outside[-1] + 1)
    overshoot = max(0.0, float((y.max() - final) / abs(final)))
    return StepMetrics(settling_periods=settling, overshoot_fraction=overshoot, final_value=final, stable=True)
