"""XTC's own control law (:class:`XtcController`, tuned by :class:`XtcTuning`).

The law is pure: no I/O and no clock.  It is stepped once per
control period with the measured rate and the setpoint, both in packets/s (pps),
and returns the next cap in percent of one CPU, always finite and within
``[cap_min_percent, cap_max_percent]``.  A bad input (NaN, infinite or negative
rate) raises :class:`ValueError` and leaves the controller's state unchanged.  The law itself is
written once, on arrays, in :mod:`xtc.control.bank` (a controller's own step is one row of it); the
paper's controllers are in :mod:`xtc.control.paper`, what all controllers share in
:mod:`xtc.control.bounded`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from xtc.models import CapBounds, LogCapModel

from .bounded import BoundedController, ControllerError, check_rate, previous_error
from .estimate import LagEstimator

__all__ = [
    "ControllerError",
    "XtcController",
    "XtcTuning",
]


LN10 = math.log(10.0)
#: A cap in force within 0.1% of the wanted one counts as exact (decades).
EXACT_DECADES = math.log10(1.001)


#: The law's constants that no configuration, CLI or named variant sets (``XtcTuning`` fields until
#: 2026-11-26).  What each does and why it has its value: docs/design/control-law.md, "The law's constants".
#:
#: The noise estimate: its start (relative standard deviation of one period's rate) and the newest
#: sample's weight in its moving average.
NOISE_INITIAL_FRACTION = 0.02
NOISE_SMOOTHING = 0.1
#: The band, a fraction of the setpoint, beyond which a persistent error gets the dead-beat gains.
PERSIST_BAND_FRACTION = 1.0
#: The step out of saturation also applies from this fraction of the offered rate; a repeated one is
#: this many times the model's step.
DESCENT_FRACTION = 0.9
SATURATION_REPEAT_FACTOR = 2.0
#: The lag probe: the largest lag its comparison assumes, the disagreement (decades) at which it holds
#: the cap, and the periods after an activation or a setpoint move in which a move can be a candidate.
PROBE_LAG_MAX = 0.45
PROBE_DISAGREEMENT_DECADES = 0.15
PROBE_WINDOW_PERIODS = 6
#: The observer's transient: at most this many periods, until the predicted mean and the settled rate
#: are within this fraction of the setpoint; the settled rate it aims for within these fractions of it.
TRANSIENT_PERIODS = 5
TRANSIENT_END_FRACTION = 0.02
OBSERVER_TARGET_BOUNDS = (0.5, 2.0)


@dataclass(frozen=True)
class XtcTuning:
    """Tuning of :class:`XtcController` (who sets which field: docs/design/control-law.md, "XtcTuning: 9 fields").

    Attributes
    ----------
    design_lag : float
        Plant pole the loop is designed for, dimensionless
        (0 <= design_lag < 1); :func:`make_controller` passes the model's ``a``.
    dead_zone_fraction : float
        No actuation while ``|setpoint - measured|`` is below this fraction of
        the setpoint.
    max_step_decades : float
        Largest change of ``log10(cap)`` in one period (rate limit).
    unconstrained_fraction : float
        The VR counts as not cap-limited when it forwards at least this
        fraction of its offered rate; the cap is then not raised, unless the
        VR's CPU use says that the cap binds (``cap_bound_fraction``).
    cap_bound_fraction : float
        With a CPU reading (``cpu_percent`` of :meth:`XtcController.step`), the cap binds when the VR
        used at least this fraction of the cap in force over the last period; a cap that binds is
        raised even where ``unconstrained_fraction`` would hold it.  0 switches the reading off.
    fine_band_fraction : float
        Within this relative error the controller uses the gentle integral
        gain ``fine_gain`` instead of the dead-beat gains.
    fine_gain : float
        Integral gain (decades of cap per decade of rate) inside the fine band.
    noise_band_sigmas : float
        The fine band widens to this many estimated noise standard deviations
        when the measurement is noisier than ``fine_band_fraction`` allows.
    lag_probe : bool
        Measure each VR's lag with one probe per activation and step the transients that follow
        with it (docs/design/control-law.md, "Measured lag"); False steps the law without a lag
        estimate (``xtc-noprobe``, ``[controller] lag_probe = false``).
    """

    design_lag: float = 0.0915
    dead_zone_fraction: float = 0.02
    max_step_decades: float = 1.0
    unconstrained_fraction: float = 0.97
    cap_bound_fraction: float = 0.8
    fine_band_fraction: float = 0.10
    fine_gain: float = 0.3
    noise_band_sigmas: float = 2.5
    lag_probe: bool = True


class XtcController(BoundedController):
    """XTC's own controller: a dead-beat PI in log-rate / log-cap space, with a noise-adaptive fine band,
    steps out of saturation and the lag probe (the law and the reasons for each rule:
    docs/design/control-law.md, "The law").

    A one-row view of the law: :meth:`step` runs :class:`~xtc.control.bank.ControllerBank`'s law on
    this controller's row, where its state lives (docs/design/control-law.md, "One law; where the
    state lives").  Here: the parameters, the checks of the inputs, the state file's record and the
    lag estimator (which the bank updates).
    """

    kind = "xtc"

    def __init__(self, model: LogCapModel, caps: CapBounds, tuning: XtcTuning | None = None):
        super().__init__(caps)
        self.model = model
        self.tuning = tuning or XtcTuning(design_lag=model.a)
        t = self.tuning
        if not (0.0 <= t.design_lag < 1.0):
            raise ControllerError(f"design_lag must be within 0..1, got {t.design_lag}")
        if not (t.max_step_decades > 0):
            raise ControllerError(f"max_step_decades must be > 0, got {t.max_step_decades}")
        self.kp = t.design_lag / (1.0 - t.design_lag)
        self.ki = 1.0
        self.lag_estimator = LagEstimator(t.design_lag)
        self._reset_memory()
        e0 = model.static_gain_kpps_per_decade / (model.ybar_kpps * LN10)
        #: The model's elasticity at its operating point, for the step out of saturation (0: none).
        self.saturation_elasticity = e0 if 0.0 < e0 < 1.0 else 0.0

    def _reset_memory(self) -> None:
        """The law's memory at activation (its columns: :data:`~xtc.control.bank._COLUMNS`;
        ``_setpoint_age``: periods since it or a setpoint move, up to :data:`PROBE_WINDOW_PERIODS`)."""
        self._E_prev: float | None = None
        self._descent = False
        self._transient = False
        self._transient_age = 0
        self._r_prev: float | None = None
        self._setpoint_age = 0
        self._noise_log = NOISE_INITIAL_FRACTION / math.log(10.0)
        self.lag_estimator.reset()

    def step(self, forwarded_pps: float, setpoint_pps: float, offered_pps: float | None = None,
             cpu_percent: float | None = None) -> float:
        """Next cap (:meth:`xtc.control.Controller.step`).  ``offered_pps`` enables the "not cap-limited"
        guard; ``cpu_percent`` at least ``cap_bound_fraction`` of the cap in force overrules it."""
        y, r = check_rate("forwarded_pps", forwarded_pps), check_rate("setpoint_pps", setpoint_pps)
        offered = math.nan if offered_pps is None else check_rate("offered_pps", offered_pps)
        from .bank import ControllerBank  # bank.py builds on this module: the law's one home

        return ControllerBank(self).step_one(self, y, r, offered, math.nan if cpu_percent is None else cpu_percent)

    def cap_bound(self, cpu_percent: float | None) -> bool | None:
        """Whether a VR that used ``cpu_percent`` (percent of one CPU) over the last period was held
        by the cap in force (it used at least ``cap_bound_fraction`` of it); None when that is not
        known (no reading, NaN, infinite or negative, or ``cap_bound_fraction`` 0)."""
        f = self.tuning.cap_bound_fraction
        if cpu_percent is None or not 0.0 <= cpu_percent < math.inf or f <= 0.0:
            return None
        return cpu_percent >= f * 10.0 ** self._u_force

    def to_state(self) -> dict[str, Any]:
        s = super().to_state()
        s["E_prev_decades"] = self._E_prev
        s["noise_decades"] = self._noise_log
        s["force_decades"] = self._u_force
        s["quant_decades"] = self._quant_decades
        if self.tuning.lag_probe:
            s["lag_estimator"] = self.lag_estimator.to_state()
            s["transient"] = {"on": self._transient, "age": self._transient_age, "setpoint_pps": self._r_prev,
                              "setpoint_age": self._setpoint_age}
        s["descent"] = self._descent
        return s

    def restore_state(self, state: Mapping[str, Any]) -> None:
        e_prev = previous_error(state, "E_prev_decades")
        super().restore_state(state)
        self._E_prev = e_prev
        n = state.get("noise_decades")
        if n is not None and math.isfinite(float(n)) and float(n) > 0:
            self._noise_log = float(n)
        f, q = state.get("force_decades"), state.get("quant_decades")
        if f is not None and math.isfinite(float(f)):
            self._u_force = float(f)
        if q is not None and math.isfinite(float(q)) and abs(float(q)) <= 1.0:
            self._quant_decades = float(q)
        self._descent = state.get("descent") is True  # (anything else: no descent under way)
        tr = state.get("transient")
        self._transient, self._transient_age, self._r_prev = False, 0, None
        # Without a recorded age (state written before it was kept, or malformed) the window is shut:
        # no probe until the setpoint moves.
        self._setpoint_age = PROBE_WINDOW_PERIODS
        if isinstance(tr, Mapping):
            age, rp, sa = tr.get("age"), tr.get("setpoint_pps"), tr.get("setpoint_age")
            if type(age) is int and age >= 0 and (rp is None or (isinstance(rp, (int, float)) and math.isfinite(rp) and rp >= 0)):
                self._transient, self._transient_age = tr.get("on") is True, age
                self._r_prev = None if rp is None else float(rp)
                if type(sa) is int and 0 <= sa <= PROBE_WINDOW_PERIODS:
                    self._setpoint_age = sa
        lag = state.get("lag_estimator")
        self.lag_estimator.restore_state(lag if isinstance(lag, Mapping) else {})  # ({}: a reset)
