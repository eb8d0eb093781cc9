"""The control period: a model identified at one period, used at another.  Pure (numpy only).

The log-cap model ``y(k+1) = a y(k) + b u(k)`` is the sampled form of a first-order plant: its
pole ``a`` is ``exp(-T / tau)`` for a period ``T``.  At a period ``T'`` the same plant has the pole
``a' = a ** (T'/T)`` and, with the same static gain ``b / (1 - a)``, ``b' = b (1 - a') / (1 - a)``.
A closed-loop pole ``p`` of the PI loop (Equation 3 of the paper) maps likewise to ``p ** (T'/T)``,
so the loop keeps its settling *time* (not its number of periods).  Poles on the negative real
axis have no such equivalent (they alternate sign every period) and are refused.

Gains are in decades of cap per kp/s of error, as everywhere in :mod:`xtc.control`.
"""

from __future__ import annotations

import cmath
import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from xtc.models import Gains, LogCapModel

__all__ = [
    "PeriodError",
    "MAX_PERIOD_RATIO",
    "gains_for_poles",
    "closed_loop_poles_of",
    "rescale_model",
    "rescale_gains",
    "deadbeat_gains",
]

#: A model is used at most this many times faster or slower than it was identified.
MAX_PERIOD_RATIO = 10.0


class PeriodError(ValueError):
    """A model or gains cannot be used at the requested control period (the message says why)."""


def _ratio(model: LogCapModel, period_s: float) -> float:
    if not (isinstance(period_s, (int, float)) and math.isfinite(period_s) and period_s > 0):
        raise PeriodError(f"control period must be a finite number of seconds > 0, got {period_s!r}")
    r = float(period_s) / model.period_s
    if not (1.0 / MAX_PERIOD_RATIO <= r <= MAX_PERIOD_RATIO):
        raise PeriodError(
            f"control period {period_s:g} s is {r:.3g} times the model's period {model.period_s:g} s; "
            f"a model is used within 1/{MAX_PERIOD_RATIO:g}..{MAX_PERIOD_RATIO:g} times its period: "
            f"fit a model at this period (xtc train)"
        )
    return r


def gains_for_poles(model: LogCapModel, poles: Sequence[complex]) -> Gains:
    """PI gains that put the closed-loop poles of Equation 3 at ``poles`` (closed form).

    Equation 3's denominator is ``z^2 + ((Kp+Ki) b - (a+1)) z + (a - Kp b)``; matching it with
    ``(z - p1)(z - p2)`` gives ``Kp = (a - p1 p2) / b`` and ``Ki = (a + 1 - p1 - p2) / b - Kp``.
    """
    p = np.asarray(poles, dtype=complex)
    if p.shape != (2,):
        raise ValueError(f"a PI on a first-order plant has exactly 2 closed-loop poles, got {p.size}")
    s = complex(p[0] + p[1])
    q = complex(p[0] * p[1])
    if abs(s.imag) > 1e-9 or abs(q.imag) > 1e-9:
        raise ValueError("complex poles must come as a conjugate pair")
    a, b = model.a, model.b_kpps_per_decade
    kp = (a - q.real) / b
    ki = (a + 1.0 - s.real) / b - kp
    return Gains(kp=float(kp), ki=float(ki))


def deadbeat_gains(model: LogCapModel) -> Gains:
    """The paper's dead-beat gains (section 7.2.1): ``Kp = a/b``, ``Ki = (1-a)/b`` (poles ``{0, a}``)."""
    return gains_for_poles(model, [0.0, model.a])


def closed_loop_poles_of(model: LogCapModel, gains: Gains) -> np.ndarray:
    """Roots of Equation 3's denominator for ``gains`` on ``model``."""
    a, b = model.a, model.b_kpps_per_decade
    return np.roots([1.0, (gains.kp + gains.ki) * b - (a + 1.0), a - gains.kp * b])


def rescale_model(model: LogCapModel, period_s: float) -> LogCapModel:
    """The same plant sampled every ``period_s`` seconds.

    Raises
    ------
    PeriodError
        ``period_s`` is not within :data:`MAX_PERIOD_RATIO` of the model's period, or the model's
        pole is negative (an oscillating sampled plant has no equivalent at another period).
    """
    r = _ratio(model, period_s)
    if r == 1.0:
        return model
    if model.a < 0:
        raise PeriodError(f"the model's pole a = {model.a:g} is negative: it cannot be resampled; fit a model at {period_s:g} s")
    a2 = model.a ** r
    b2 = model.b_kpps_per_decade * (1.0 - a2) / (1.0 - model.a)
    return replace(model, a=a2, b_kpps_per_decade=b2, period_s=float(period_s))


def rescale_gains(model: LogCapModel, gains: Gains, period_s: float) -> Gains:
    """Gains for ``period_s`` whose closed-loop poles are the model period's poles resampled.

    Raises
    ------
    PeriodError
        As :func:`rescale_model`, or a closed-loop pole of ``gains`` lies on the negative real
        axis or outside the unit circle (no equivalent loop at another period).
    """
    r = _ratio(model, period_s)
    if r == 1.0:
        return gains
    poles = closed_loop_poles_of(model, gains)
    mapped = []
    for p in poles:
        if abs(p) >= 1.0:
            raise PeriodError(f"the gains' closed-loop pole {complex(p):.4g} is not stable; they cannot be resampled")
        if abs(p.imag) < 1e-12 and p.real < -1e-12:
            raise PeriodError(
                f"the gains' closed-loop pole {p.real:.4g} is negative (the loop alternates every period): "
                f"they cannot be resampled to {period_s:g} s; design gains at that period (xtc train design)"
            )
        mapped.append(0.0 if abs(p) < 1e-12 else cmath.exp(r * cmath.log(complex(p))))
    return gains_for_poles(rescale_model(model, period_s), mapped)
