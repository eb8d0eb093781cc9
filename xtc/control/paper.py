"""The paper's controllers: its PI and dead-beat law (:class:`PaperPI`) and Fixed Cap (:class:`FixedCap`).

The references XTC's own law (:mod:`xtc.control.laws`) is measured against (``xtc bench control``,
controllers ``pi``, ``deadbeat``, ``deadbeat-capmin3`` and ``fixed``).  Pure: no I/O and no clock.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from xtc.models import CapBounds, Gains

from .bounded import BoundedController, ControllerError, check_rate, previous_error

__all__ = ["PaperPI", "FixedCap", "FIXED_CAP_TABLE1"]


class PaperPI(BoundedController):
    """The paper's PI law in log-cap space (Equation 2), also used for dead-beat gains.

    ``u(k) = u(k-1) + (Kp + Ki) e(k) - Kp e(k-1)`` with ``u = log10(cap)`` and
    ``e = setpoint - measured`` in kp/s.  No actuation while ``|e|`` is below
    ``dead_zone_fraction`` of the setpoint (section 6).  ``u`` is clamped to
    ``[log10 cap_min, log10 cap_max]`` after every step, which in this velocity
    form is the anti-windup: the state is the cap itself, so it cannot run away
    while the cap is pinned at a bound.

    At activation (:meth:`start`), the previous error is taken equal to the
    first measured error, so the first move is ``Ki e(k)``: no proportional kick.
    """

    def __init__(self, gains: Gains, caps: CapBounds, dead_zone_fraction: float = 0.10, kind: str = "pi"):
        super().__init__(caps)
        self.gains = gains
        self.dead_zone_fraction = dead_zone_fraction
        self.kind = kind
        self._e_prev: float | None = None

    def _reset_memory(self) -> None:
        self._e_prev = None

    def step(self, forwarded_pps: float, setpoint_pps: float, offered_pps: float | None = None,
             cpu_percent: float | None = None) -> float:
        """Next cap (percent of one CPU) from the measured and wanted forwarding rate (pps).

        ``offered_pps`` and ``cpu_percent`` are accepted for interface compatibility and ignored
        (the paper's law does not use them).
        """
        y = check_rate("forwarded_pps", forwarded_pps)
        r = check_rate("setpoint_pps", setpoint_pps)
        if offered_pps is not None:
            check_rate("offered_pps", offered_pps)
        from .bank import ControllerBank  # bank.py builds on this module: the law's one home

        return ControllerBank(self).step_one(self, y, r)

    def to_state(self) -> dict[str, Any]:
        s = super().to_state()
        s["e_prev_kpps"] = self._e_prev
        return s

    def restore_state(self, state: Mapping[str, Any]) -> None:
        e_prev = previous_error(state, "e_prev_kpps")
        super().restore_state(state)
        self._e_prev = e_prev


# Table 1 of the paper: setpoint (kp/s) -> cap (%), measured at 100 kp/s UDP offered.
FIXED_CAP_TABLE1: tuple[tuple[float, float], ...] = (
    (16.0, 5.0),
    (32.0, 10.0),
    (50.0, 15.0),
    (65.0, 20.0),
    (77.0, 25.0),
    (85.0, 30.0),
    (91.0, 35.0),
    (94.0, 40.0),
    (96.0, 45.0),
    (98.0, 50.0),
)


class FixedCap(BoundedController):
    """The paper's Fixed Cap baseline: a static setpoint -> cap mapping (Table 1).

    The cap is interpolated linearly between table rows; below the first row it
    is extrapolated through the origin (throughput is about proportional to the
    cap there), above the last row it is the last row's cap.  The measurement is
    ignored: this is open-loop control, the reference a feedback controller must
    match for noise and beat under disturbances.
    """

    kind = "fixed"

    def __init__(self, caps: CapBounds, table: Sequence[tuple[float, float]] = FIXED_CAP_TABLE1):
        super().__init__(caps)
        rows = sorted((float(s), float(c)) for s, c in table)
        if len(rows) < 2:
            raise ControllerError("a Fixed Cap table needs at least two rows")
        self.table = tuple(rows)

    def cap_for_setpoint(self, setpoint_pps: float) -> float:
        s = setpoint_pps / 1000.0
        rows = self.table
        if s <= rows[0][0]:
            cap = rows[0][1] * s / rows[0][0]
        elif s >= rows[-1][0]:
            cap = rows[-1][1]
        else:
            for (s0, c0), (s1, c1) in zip(rows, rows[1:]):
                if s0 <= s <= s1:
                    cap = c0 + (c1 - c0) * (s - s0) / (s1 - s0)
                    break
        return self._clamp_cap(max(cap, self.caps.cap_min_percent))

    def step(self, forwarded_pps: float, setpoint_pps: float, offered_pps: float | None = None,
             cpu_percent: float | None = None) -> float:
        check_rate("forwarded_pps", forwarded_pps)
        r = check_rate("setpoint_pps", setpoint_pps)
        if offered_pps is not None:
            check_rate("offered_pps", offered_pps)
        self._u = self._clamp_u(math.log10(self.cap_for_setpoint(r)))
        self.steps += 1
        return self.cap_percent
