"""XTC's control core: pure controllers that turn a measured packet rate into the next CPU cap.

Public entry point::

    from xtc.control import make_controller
    ctl = make_controller(xtc.models.PAPER_MODEL)          # XTC's own controller
    ctl.start(current_cap_percent)                     # bumpless activation
    cap_percent = ctl.step(forwarded_pps, setpoint_pps)  # once per control period
    ctl.applied(cap_in_force_percent)                  # what the actuator put in force

Kinds:

``"pi"``
    The paper's PI (section 6): gains from the model file's ``[controller.pi]``
    (or pole placement), dead zone 10% of the setpoint, caps 1..100 (cap_min 1).
``"deadbeat"``
    The paper's dead-beat gains ``Kp = a/b``, ``Ki = (1-a)/b`` (section 7.2.1);
    pass ``cap_min_percent=3`` for section 7.2.3's variant.
``"fixed"``
    The paper's Fixed Cap baseline (Table 1 mapping, open loop).
``"xtc"`` (also ``None``, the default)
    The project's controller: a gain-scheduled PI in log-rate/log-cap space
    (:class:`~xtc.control.laws.XtcController`).

Nothing here reads a clock or does I/O; the daemon, the simulator and the
benchmarks drive the same objects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from xtc.models import CapBounds, ModelFile

from .period import PeriodError, deadbeat_gains, rescale_gains, rescale_model
from .bounded import ControllerError
from .laws import XtcController, XtcTuning
from .paper import FIXED_CAP_TABLE1, FixedCap, PaperPI

__all__ = [
    "Controller",
    "ControllerError",
    "PeriodError",
    "KINDS",
    "DEFAULT_KIND",
    "make_controller",
    "FIXED_CAP_TABLE1",
    "PaperPI",
    "FixedCap",
    "XtcController",
    "XtcTuning",
]

KINDS = ("xtc", "pi", "deadbeat", "fixed")
DEFAULT_KIND = "xtc"


class Controller(Protocol):
    """What every controller offers."""

    kind: str

    @property
    def cap_percent(self) -> float: ...

    def start(self, cap_percent: float) -> None: ...

    def step(self, forwarded_pps: float, setpoint_pps: float, offered_pps: float | None = None,
             cpu_percent: float | None = None) -> float:
        """The next cap, percent of one CPU, within the cap bounds; once per control period.

        Parameters
        ----------
        forwarded_pps : float
            Rate the VR forwarded over the last period, packets/s.
        setpoint_pps : float
            Wanted rate, packets/s.
        offered_pps : float, optional
            Rate offered to the VR over the last period, packets/s (None: unknown).
        cpu_percent : float, optional
            CPU the VR used over the last period, percent of one CPU (the host's accounting);
            None, NaN, infinite or negative: unknown.  A law that has no use for one ignores it.

        Raises
        ------
        ControllerError
            A rate that is not a finite number >= 0; the controller's state is unchanged.
        """
        ...

    def applied(self, cap_in_force_percent: float) -> None: ...

    def to_state(self) -> dict[str, Any]: ...

    def restore_state(self, state: dict[str, Any]) -> None: ...


def make_controller(
    model: ModelFile,
    kind: str | None = None,
    *,
    cap_min_percent: float | None = None,
    cap_max_percent: float | None = None,
    dead_zone_fraction: float | None = None,
    tuning: XtcTuning | None = None,
    period_s: float | None = None,
    lag_probe: bool | None = None,
) -> Controller:
    """Build a controller for a VR from a model file.

    Parameters
    ----------
    model : ModelFile
        The loaded model file (:func:`xtc.models.load_model`).
    kind : {"xtc", "pi", "deadbeat", "fixed"} or None
        None gives XTC's own controller (``"xtc"``).
    cap_min_percent, cap_max_percent : float, optional
        Cap bounds in percent of one CPU (1..100); default from the model file.
    dead_zone_fraction : float, optional
        Dead zone as a fraction of the setpoint; default: the model file's value
        (0.10, the paper's) for "pi"/"deadbeat", 0.02 for "xtc".
    tuning : XtcTuning, optional
        Tuning of the "xtc" controller.
    period_s : float, optional
        The control period the controller will be stepped at, seconds; default: the model's.
        Gains identified at the model's period are resampled to it (:mod:`xtc.control.period`:
        the same closed-loop poles in continuous time); a period the model cannot be resampled
        to raises :class:`PeriodError`.
    lag_probe : bool or None
        "xtc" only: True measures the VR's lag with a probe and uses it in transients
        (``XtcTuning.lag_probe``; docs/results/2026-11-26-control-settling/control-settling.md, "The lag
        probe"), False steps the law without a lag estimate, None (the default) keeps the
        tuning's (``XtcTuning``'s default: the probe on).  The daemon's ``[controller] lag_probe``.
    """
    k = DEFAULT_KIND if kind is None else kind
    if k not in KINDS:
        raise ControllerError(f"unknown controller kind {kind!r} (known: {', '.join(KINDS)})")
    caps = CapBounds(
        model.caps.cap_min_percent if cap_min_percent is None else cap_min_percent,
        model.caps.cap_max_percent if cap_max_percent is None else cap_max_percent,
    )
    if lag_probe and k != "xtc":
        raise ControllerError(f"lag_probe applies to the xtc controller only, not {k!r}")
    if dead_zone_fraction is not None and not (0.0 <= dead_zone_fraction < 1.0):
        raise ControllerError(f"dead_zone_fraction must be within 0..1, got {dead_zone_fraction}")
    if k == "fixed":
        return FixedCap(caps)
    period = model.model.period_s if period_s is None else period_s
    plant = rescale_model(model.model, period)
    if k in ("pi", "deadbeat"):
        if k == "pi":
            if model.pi is None:
                raise ControllerError(f"model {model.name!r} has no [controller.pi] gains")
            gains = rescale_gains(model.model, model.pi, period)
        else:
            base = model.deadbeat if model.deadbeat is not None else deadbeat_gains(model.model)
            gains = rescale_gains(model.model, base, period)
        dz = model.dead_zone_fraction if dead_zone_fraction is None else dead_zone_fraction
        return PaperPI(gains, caps, dz, kind=k)
    t = tuning or XtcTuning(design_lag=max(0.0, plant.a))
    if dead_zone_fraction is not None:
        t = replace(t, dead_zone_fraction=dead_zone_fraction)
    if lag_probe is not None:
        t = replace(t, lag_probe=lag_probe)
    return XtcController(plant, caps, t)
