"""Online estimate of a VR's local loop gain (elasticity) and lag from its own recent moves.  Pure.

In log coordinates (``Y = log10 rate``, ``U = log10 cap in force``) a VR near an operating point is
``Y(k) = a Y(k-1) + b U(k) + c``: ``a`` is the (period-averaged) lag pole, ``b / (1 - a)`` the local
elasticity ``d log y / d log cap`` (1 in the proportional region, a third or less near
saturation), ``c`` whatever the hardware and a hog make of it.  The increments remove ``c``::

    dY(k) = a dY(k-1) + b dU(k)

and :class:`GainEstimator` fits ``theta = (a, b)`` by recursive least squares with exponential
forgetting.  Guards:

- Excitation: a period whose cap did not move by at least ``min_move_decades`` (and by more than
  ``excitation_sigmas`` times the rate's noise in decades) is not used: it says nothing about the
  gain, only about noise and disturbances (a hog, a change of the offered rate).
- Sanity: an estimate is used only if ``a`` is within ``[0, a_max]`` and the elasticity within
  ``[elasticity_min, elasticity_max]``; the elasticity is clamped to that range.
- Confidence: at least ``min_updates`` excited periods since the estimate was last reset, and the
  last one within ``max_age`` periods (the operating point may have moved since).
- Otherwise the model's values (``fallback_lag``, elasticity 1) are returned.

How it degrades.  The controller divides its step by the estimated elasticity ``e_hat``; with the
true local elasticity ``e`` the loop gain is multiplied by ``e / e_hat``.  An over-estimate
(``e_hat > e``) only slows the loop (by that factor; the fallback 1 is the largest value, hence the
slowest but never unstable choice).  An under-estimate speeds it up: a gentle integral gain ``g``
stays stable while ``g e / e_hat < 2``, the dead-beat step (gain 1) overshoots when
``e_hat < e`` and oscillates without decaying when ``e_hat <= e / 2``.  The clamp
``elasticity_min`` bounds the harm; the controller also limits how far one estimate may move the
cap beyond the model's step (see :class:`xtc.control.laws.XtcController`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["EstimatorTuning", "GainEstimator"]


@dataclass(frozen=True)
class EstimatorTuning:
    """Tuning of :class:`GainEstimator` (dimensionless unless said).

    Attributes
    ----------
    forgetting : float
        RLS forgetting factor per excited period (0 < forgetting <= 1).
    min_move_decades : float
        Smallest change of ``log10(cap in force)`` that counts as excitation, decades.
    excitation_sigmas : float
        A move must also exceed this many standard deviations of the rate's noise, in decades.
    min_updates : int
        Excited periods needed before the estimate is used.
    max_age : int
        The estimate is used for at most this many periods after the last excited one.
    elasticity_min, elasticity_max : float
        Range of the elasticity estimate that is used (clamped to it).
    a_max : float
        Largest lag pole believed.
    use_lag : bool
        Design for the estimated lag pole (False: always the model's).
    """

    forgetting: float = 0.8
    min_move_decades: float = 0.01
    excitation_sigmas: float = 2.0
    min_updates: int = 1
    max_age: int = 30
    elasticity_min: float = 0.1
    elasticity_max: float = 1.0
    a_max: float = 0.8
    use_lag: bool = True


class GainEstimator:
    """Recursive least squares on ``dY(k) = a dY(k-1) + b dU(k)`` (see the module docstring).

    Parameters
    ----------
    fallback_lag : float
        The model's pole ``a``, used until (and whenever) the data do not say enough.
    tuning : EstimatorTuning, optional
    """

    def __init__(self, fallback_lag: float, tuning: EstimatorTuning | None = None):
        if not (0.0 <= fallback_lag < 1.0):
            raise ValueError(f"fallback_lag must be within 0..1, got {fallback_lag}")
        self.fallback_lag = float(fallback_lag)
        self.tuning = tuning or EstimatorTuning()
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new activation, a restart from another cap)."""
        a0 = self.fallback_lag
        self._theta = [a0, 1.0 - a0]
        self._P = [[1.0, 0.0], [0.0, 10.0]]
        self._prev: tuple[float, float] | None = None  # (Y, U) of the last period
        self._dY_prev = 0.0
        self.updates = 0
        self.age = 10**9

    def update(self, log_rate: float, log_cap: float, noise_decades: float = 0.0) -> bool:
        """Feed one period: ``log10`` of the rate measured and of the cap in force during it.

        Returns True if the period was used (the cap moved enough), False otherwise.
        """
        if not (math.isfinite(log_rate) and math.isfinite(log_cap)):
            return False
        used = False
        if self._prev is not None:
            Y0, U0 = self._prev
            dY, dU = log_rate - Y0, log_cap - U0
            t = self.tuning
            threshold = max(t.min_move_decades, t.excitation_sigmas * math.sqrt(2.0) * max(noise_decades, 0.0))
            if abs(dU) >= threshold:
                self._rls(self._dY_prev, dU, dY)
                self.updates += 1
                self.age = 0
                used = True
            else:
                self.age += 1
            self._dY_prev = dY
        self._prev = (log_rate, log_cap)
        return used

    def _rls(self, x1: float, x2: float, y: float) -> None:
        lam = self.tuning.forgetting
        P = self._P
        Px = [P[0][0] * x1 + P[0][1] * x2, P[1][0] * x1 + P[1][1] * x2]
        den = lam + x1 * Px[0] + x2 * Px[1]
        k = [Px[0] / den, Px[1] / den]
        err = y - (self._theta[0] * x1 + self._theta[1] * x2)
        self._theta = [self._theta[0] + k[0] * err, self._theta[1] + k[1] * err]
        P = [[(P[i][j] - k[i] * Px[j]) / lam for j in range(2)] for i in range(2)]
        # Keep P bounded (no excitation in one direction must not blow it up).
        for i in range(2):
            P[i][i] = min(P[i][i], 100.0)
        self._P = P

    @property
    def confident(self) -> bool:
        """True if the data say enough for the estimate to be used."""
        t = self.tuning
        a, b = self._theta
        if self.updates < t.min_updates or self.age > t.max_age:
            return False
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return -0.05 <= a <= t.a_max and b > 0

    @property
    def lag(self) -> float:
        """The lag pole to design for (the model's unless confident), within ``[0, a_max]``."""
        if not (self.tuning.use_lag and self.confident):
            return self.fallback_lag
        return min(self.tuning.a_max, max(0.0, self._theta[0]))

    @property
    def elasticity(self) -> float:
        """The local elasticity to design for (1 unless confident), within the tuning's range."""
        if not self.confident:
            return 1.0
        t = self.tuning
        e = self._theta[1] / (1.0 - min(t.a_max, max(0.0, self._theta[0])))
        return min(t.elasticity_max, max(t.elasticity_min, e))

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable state."""
        return {"theta": list(self._theta), "P": [list(r) for r in self._P], "prev": None if self._prev is None else list(self._prev),
                "dY_prev": self._dY_prev, "updates": self.updates, "age": min(self.age, 10**9)}

    def restore_state(self, s: Mapping[str, Any]) -> None:
        """Restore :meth:`to_state`'s output (a malformed one resets the estimator)."""
        try:
            theta = [float(v) for v in s["theta"]]
            P = [[float(v) for v in row] for row in s["P"]]
            prev = s.get("prev")
            if len(theta) != 2 or len(P) != 2 or any(len(r) != 2 for r in P):
                raise ValueError
            if not all(math.isfinite(v) for v in theta + P[0] + P[1]):
                raise ValueError
            self._theta, self._P = theta, P
            self._prev = None if prev is None else (float(prev[0]), float(prev[1]))
            self._dY_prev = float(s.get("dY_prev", 0.0))
            self.updates = int(s.get("updates", 0))
            self.age = int(s.get("age", 10**9))
        except (KeyError, TypeError, ValueError, IndexError):
            self.reset()
