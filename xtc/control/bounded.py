"""What every controller shares: the input checks, the cap bounds and the cap in force.  Pure.

:class:`BoundedController` keeps the law's state ``u = log10(cap)`` within the cap bounds, starts
bumplessly from the VR's cap and carries the difference between the cap wanted and the cap in force
(:meth:`BoundedController.applied`).  XTC's law (:mod:`xtc.control.laws`) and the paper's controllers
(:mod:`xtc.control.paper`) derive from it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from xtc.models import CapBounds

__all__ = ["ControllerError", "BoundedController", "check_rate", "check_cap", "previous_error", "FLOAT_MAX"]

#: The largest finite float: ``0.0 <= v <= FLOAT_MAX`` is False for NaN, infinities and negatives.
FLOAT_MAX = 1.7976931348623157e308


class ControllerError(ValueError):
    """Bad input to a controller (the controller's state is unchanged)."""


def check_rate(name: str, value: Any) -> float:
    """Validate a rate in pps: a finite number >= 0 (a finite float >= 0, the meter's every value, as it is)."""
    if type(value) is float and 0.0 <= value <= FLOAT_MAX:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControllerError(f"{name} must be a number of packets/s, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ControllerError(f"{name} must be finite, got {v}")
    if v < 0:
        raise ControllerError(f"{name} must be >= 0 packets/s, got {v}")
    return v


def check_cap(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControllerError(f"{name} must be a cap in percent of one CPU, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ControllerError(f"{name} must be a finite cap > 0 percent, got {v}")
    return v


def previous_error(state: Mapping[str, Any], key: str) -> float | None:
    """A state file's previous error (``state[key]``; None or absent: none yet), which the next step's
    proportional term multiplies: a finite number, or :class:`ControllerError` naming the key."""
    v = state.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ControllerError(f"state has {key} = {v!r} (must be a finite number or null)")
    return float(v)


class BoundedController:
    """Common cap bookkeeping: bounds, clamping, bumpless start, the cap in force.

    The law's state is ``u = log10(cap)``, the cap the controller *wants*.  The actuator may put a
    slightly different cap in force (a Xen cap is a whole percent, a quota a whole number of
    microseconds); the control loop reports it every period through :meth:`applied`.  The
    difference is carried into the next period's command (first-order error feedback, as in a
    sigma-delta modulator), so that on a quantising actuator the command dithers between the two
    neighbouring caps and their mean is the cap wanted; on an exact actuator the carry stays 0.
    When the cap in force is far from the command (the actuator is pinned at a bound of its own,
    or somebody else set the cap), the law restarts from the cap in force instead (anti-windup).
    """

    kind = "base"
    #: A carry larger than this (percent of one CPU, or this fraction of the cap in force, the
    #: larger) is not quantisation: the law restarts from the cap in force.
    CARRY_LIMIT_PERCENT = 1.0
    CARRY_LIMIT_FRACTION = 0.05

    def __init__(self, caps: CapBounds):
        self.caps = caps
        self._u_min = math.log10(caps.cap_min_percent)
        self._u_max = math.log10(caps.cap_max_percent)
        # Until started, a controller sits at the top of its range (what an uncontrolled VR has).
        self._u = self._u_max
        self._carry = 0.0
        # log10 of the cap in force during the period now being measured, and log10(wanted / in force)
        # for it (decades; 0 on an exact actuator): what the quantisation did to that period.
        self._u_force = self._u_max
        self._quant_decades = 0.0
        self.steps = 0

    @property
    def cap_percent(self) -> float:
        """The cap to command now, percent of one CPU (the wanted cap plus the carried residue)."""
        return self._clamp_cap(10.0 ** self._u + self._carry)

    @property
    def wanted_cap_percent(self) -> float:
        """The cap the law wants, percent of one CPU (what the commanded caps average to)."""
        return self._clamp_cap(10.0 ** self._u)

    def _clamp_u(self, u: float) -> float:
        return min(self._u_max, max(self._u_min, u))

    def _clamp_cap(self, cap: float) -> float:
        return min(self.caps.cap_max_percent, max(self.caps.cap_min_percent, cap))

    def start(self, cap_percent: float) -> None:
        """Bumpless activation: continue from the VR's current cap (clamped to the bounds)."""
        cap = check_cap("cap_percent", cap_percent)
        self._u = self._clamp_u(math.log10(cap))
        self._carry = 0.0
        self._u_force = math.log10(cap)
        self._quant_decades = 0.0
        self._reset_memory()

    def applied(self, cap_in_force_percent: float) -> None:
        """The cap the actuator put in force for the last command, percent of one CPU.

        Called by the control loop after every write (and with the cap read back when nothing
        was written).  See the class docstring for what it does with the difference.
        """
        got = check_cap("cap_in_force_percent", cap_in_force_percent)
        want = 10.0 ** self._u
        carry = self._carry + want - got
        limit = max(self.CARRY_LIMIT_PERCENT, self.CARRY_LIMIT_FRACTION * got)
        self._u_force = math.log10(got)
        if abs(carry) > limit:
            self._u = self._clamp_u(math.log10(got))
            self._carry = 0.0
            self._quant_decades = 0.0
        else:
            self._carry = carry
            self._quant_decades = math.log10(want) - math.log10(got)

    def _reset_memory(self) -> None:  # pragma: no cover - overridden
        pass

    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of the controller's state (for the daemon's state file)."""
        return {"kind": self.kind, "u": self._u, "steps": self.steps, "carry_percent": self._carry}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore a snapshot taken with :meth:`to_state` (the kind must match)."""
        if state.get("kind") != self.kind:
            raise ControllerError(f"state is for controller kind {state.get('kind')!r}, not {self.kind!r}")
        u = float(state["u"])
        if not math.isfinite(u):
            raise ControllerError("state has a non-finite u")
        carry = float(state.get("carry_percent", 0.0))
        if not math.isfinite(carry) or abs(carry) > 100.0:
            raise ControllerError(f"state has a carry of {carry!r} percent (must be finite, |carry| <= 100)")
        self._u = self._clamp_u(u)
        self._carry = carry
        self.steps = int(state.get("steps", 0))
