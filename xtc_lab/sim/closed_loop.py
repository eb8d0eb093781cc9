"""Closed loop on the simulated plant: one controller per VR, stepped once per control period.

Pure: the plant supplies simulated time; nothing here reads a clock or does I/O
(progress is reported through an optional callback).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .plant import Plant, PlantError

__all__ = ["StepController", "Trace", "run_closed_loop", "SetpointSchedule"]


class StepController(Protocol):
    """What the loop needs of a controller (the contract of :mod:`xtc.control`)."""

    def start(self, cap_percent: float) -> None: ...

    def step(self, measured_pps: float, setpoint_pps: float, offered_pps: float | None = None) -> float: ...


# t_s (end of the period just measured) -> setpoint per VR (pps).
SetpointSchedule = Callable[[float], np.ndarray]


@dataclass(frozen=True)
class Trace:
    """What happened, one row per control period.

    Attributes
    ----------
    t_s : numpy.ndarray, shape (K,)
        End of each period, seconds.
    measured_pps : numpy.ndarray, shape (K, N)
        Rate each VR forwarded over the period (what the meter reports), packets/s.
    clean_pps : numpy.ndarray, shape (K, N)
        The same without the plant's noise (the VR's achieved rate), packets/s.
    to_vr_pps : numpy.ndarray, shape (K, N)
        Rate Dom0 delivered to each VR over the period, packets/s.
    source_pps : numpy.ndarray, shape (K, N)
        Rate each source sent over the period, packets/s.
    setpoint_pps : numpy.ndarray, shape (K, N)
        Setpoint given to the controller at the end of the period, packets/s
        (NaN for an uncontrolled VR).  A change in row ``k`` acts from period ``k + 1``.
    cap_percent : numpy.ndarray, shape (K, N)
        Cap applied during the period, percent of one CPU.
    dom0_utilisation : numpy.ndarray, shape (K, G)
        Mean work asked of each Dom0 over its capacity (can exceed 1: the excess is cut).
    """

    t_s: np.ndarray
    measured_pps: np.ndarray
    clean_pps: np.ndarray
    to_vr_pps: np.ndarray
    source_pps: np.ndarray
    setpoint_pps: np.ndarray
    cap_percent: np.ndarray
    dom0_utilisation: np.ndarray

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (lists; NaN as None)."""

        def clean(a: np.ndarray) -> Any:
            return [[None if not np.isfinite(x) else round(float(x), 3) for x in row] for row in np.atleast_2d(a)]

        return {
            "t_s": [round(float(t), 3) for t in self.t_s],
            "measured_pps": clean(self.measured_pps),
            "clean_pps": clean(self.clean_pps),
            "to_vr_pps": clean(self.to_vr_pps),
            "source_pps": clean(self.source_pps),
            "setpoint_pps": clean(self.setpoint_pps),
            "cap_percent": clean(self.cap_percent),
            "dom0_utilisation": clean(self.dom0_utilisation),
        }


def run_closed_loop(
    plant: Plant,
    controllers: Sequence[StepController | None],
    setpoints: SetpointSchedule | Sequence[float] | np.ndarray,
    duration_s: float,
    control_period_s: float = 1.0,
    events: Callable[[Plant, float], None] | None = None,
    progress: Callable[[float], None] | None = None,
    pass_offered: bool = True,
) -> Trace:
    """Run the plant with a controller per VR for ``duration_s`` seconds.

    Every ``control_period_s`` the loop measures each VR's forwarded rate over
    the period, steps its controller with it and the setpoint, and applies the
    returned cap.  Controllers are activated (``start``) from the VR's current
    cap before the first period.

    Parameters
    ----------
    plant : Plant
    controllers : sequence
        One per VR; ``None`` leaves a VR uncontrolled.
    setpoints : callable or array_like
        Setpoint per VR in packets/s, fixed, or a function of the time (s) at
        the end of the period just measured.
    duration_s : float
        Simulated duration, seconds (whole control periods).
    control_period_s : float
        Control period, seconds (a whole number of plant sub-steps).
    events : callable, optional
        ``events(plant, t_s)`` is called at the start of every period
        (disturbances: hogs, offered-rate changes).
    progress : callable, optional
        Called with the fraction done after every period.
    pass_offered : bool
        Give controllers the rate delivered to the VR (``offered_pps``).
    """
    if len(controllers) != plant.n:
        raise PlantError(f"need one controller (or None) per VR: {plant.n} VRs, {len(controllers)} controllers")
    if not (control_period_s > 0) or not np.isfinite(control_period_s):
        raise PlantError(f"control_period_s must be > 0, got {control_period_s}")
    periods = int(round(duration_s / control_period_s))
    if periods < 1:
        raise PlantError(f"duration_s must cover at least one control period, got {duration_s}")
    if callable(setpoints):
        schedule: SetpointSchedule = setpoints
    else:
        fixed = np.asarray(setpoints, dtype=float)
        if fixed.shape != (plant.n,):
            raise PlantError(f"need one setpoint per VR ({plant.n}), got shape {fixed.shape}")
        schedule = lambda _t: fixed  # noqa: E731
    active = [i for i, c in enumerate(controllers) if c is not None]
    caps0 = plant.caps_percent
    for i in active:
        controllers[i].start(float(caps0[i]))  # type: ignore[union-attr]
    n = plant.n
    t = np.zeros(periods)
    meas = np.zeros((periods, n))
    meas_clean = np.zeros((periods, n))
    to_vr = np.zeros((periods, n))
    src = np.zeros((periods, n))
    sp = np.full((periods, n), np.nan)
    caps = np.zeros((periods, n))
    util = np.zeros((periods, len(plant.config.dom0s)))
    for k in range(periods):
        if events is not None:
            events(plant, plant.t_s)
        caps[k] = plant.caps_percent
        m = plant.measure(control_period_s)
        r = np.asarray(schedule(m.t_s), dtype=float)
        t[k] = m.t_s
        meas[k] = m.forwarded_pps
        meas_clean[k] = m.forwarded_clean_pps
        to_vr[k] = m.to_vr_pps
        src[k] = m.source_pps
        util[k] = m.dom0_utilisation
        for i in active:
            sp[k, i] = r[i]
            ctl = controllers[i]
            offered = float(m.to_vr_pps[i]) if pass_offered else None
            cap = ctl.step(float(m.forwarded_pps[i]), float(r[i]), offered_pps=offered)  # type: ignore[union-attr]
            plant.set_cap(i, cap)
        if progress is not None:
            progress((k + 1) / periods)
    return Trace(t, meas, meas_clean, to_vr, src, sp, caps, util)
