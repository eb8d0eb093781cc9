"""Controller design from a fitted model: gains, step response, robustness, cap_min, model file.

Built on :mod:`xtc.control.design` (python-control): PI gains by pole placement,
dead-beat gains, Equation 3's closed loop, its poles and step metrics.  Pure: the
date and the data's provenance are arguments.

Robustness to model mismatch
    The gains are designed for ``(a, b)``; the real plant may be ``(fa * a, fb * b)``.
    :func:`stability_grid` marks, on a grid of factors, whether every closed-loop pole
    stays inside the unit circle; :func:`mismatch_margins` finds by bisection how far
    ``b`` (with ``a`` nominal) and ``a`` (with ``b`` nominal) can move.  For a fixed
    factor on one parameter the stable set in the other is an interval (Jury's
    conditions on ``z^2 + c1 z + c0`` are linear in ``a`` and ``b``), so bisection
    from the nominal point finds its ends.  ``a`` is kept within the plant's own
    validity ``0 <= a < 1``.

cap_min (section 7.2.2)
    :func:`choose_cap_min`: the lowest cap at which the VR still forwards a useful,
    controllable rate, taken as ``useful_fraction`` (default 10 %) of the offered rate.
    The cap is interpolated linearly in ``log10(cap)`` between the swept caps whose
    settled throughput brackets that rate, or, when even the lowest swept cap forwards
    more, extrapolated in ``log10(cap)`` along the line through the two lowest swept
    caps (the fitted model's line when there is only one); then rounded up to a whole
    percent (so that the rate at cap_min is at least the useful rate).  Sweep caps
    below the expected cap_min (e.g. ``--caps 1,2,3,4,5:100:5``) to interpolate
    rather than extrapolate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import control
import numpy as np

from xtc.models import CapBounds, Gains, LogCapModel, ModelFile, PAPER_MODEL
from xtc.training.fit import CapLevel, FitResult
from xtc.training.sweep import TrainingError
from xtc.control.design import (
    closed_loop_poles,
    closed_loop_tf,
    deadbeat_gains,
    pi_gains_by_pole_placement,
    step_metrics,
)

__all__ = [
    "PAPER_PI_POLES",
    "ControllerDesign",
    "MismatchMargins",
    "CapMinChoice",
    "is_stable",
    "stability_grid",
    "mismatch_margins",
    "design_controller",
    "step_response",
    "choose_cap_min",
    "parse_poles",
    "operating_point_entry",
    "build_model_file",
]

PAPER_PI_POLES: tuple[complex, complex] = tuple(  # type: ignore[assignment]
    complex(p) for p in closed_loop_poles(PAPER_MODEL.model, PAPER_MODEL.pi)  # type: ignore[arg-type]
)
"""Closed-loop poles of the paper's PI gains on the paper's model (about 0.244 +- 0.377j): the default targets."""


def _perturbed(model: LogCapModel, fa: float, fb: float) -> LogCapModel:
    return LogCapModel(
        a=model.a * fa,
        b_kpps_per_decade=model.b_kpps_per_decade * fb,
        ybar_kpps=model.ybar_kpps,
        ubar_log10_cap=model.ubar_log10_cap,
        period_s=model.period_s,
    )


def is_stable(model: LogCapModel, gains: Gains, fa: float = 1.0, fb: float = 1.0) -> bool:
    """Whether the loop with ``gains`` is stable on the plant ``(fa * a, fb * b)``."""
    return bool(np.all(np.abs(closed_loop_poles(_perturbed(model, fa, fb), gains)) < 1.0))


def stability_grid(
    model: LogCapModel, gains: Gains, a_factors: Sequence[float], b_factors: Sequence[float]
) -> np.ndarray:
    """Boolean grid ``[i_b, i_a]``: stable on the plant ``(a_factors[i_a] * a, b_factors[i_b] * b)``.

    Factors that would make ``a`` leave ``0..1`` are marked unstable (not a valid plant).
    """
    out = np.zeros((len(b_factors), len(a_factors)), dtype=bool)
    for j, fa in enumerate(a_factors):
        if not (0.0 <= model.a * fa < 1.0):
            continue
        for i, fb in enumerate(b_factors):
            out[i, j] = fb > 0 and is_stable(model, gains, fa, fb)
    return out


def _bisect(stable_at, lo: float, hi: float, iters: int = 60) -> float:  # noqa: ANN001
    """``lo`` stable, ``hi`` unstable: the boundary between them."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if stable_at(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class MismatchMargins:
    """How far the plant may drift from the model before the loop goes unstable (factors).

    ``b_factor_max`` is ``inf`` and ``b_factor_min`` 0 when no bound was found within the
    search range (1e-4 .. 1e4).  ``a_factor_max`` is capped by the plant's own limit
    ``a < 1`` (``a_limited_by_plant`` then True).
    """

    b_factor_min: float
    b_factor_max: float
    a_factor_min: float
    a_factor_max: float
    a_limited_by_plant: bool


def mismatch_margins(model: LogCapModel, gains: Gains) -> MismatchMargins:
    """Stability margins of ``gains`` against a drift of ``b`` (``a`` nominal) and of ``a`` (``b`` nominal)."""
    if not is_stable(model, gains):
        raise TrainingError("the nominal closed loop is unstable; choose other poles")
    b_stable = lambda f: is_stable(model, gains, 1.0, f)  # noqa: E731
    b_max = math.inf if b_stable(1e4) else _bisect(b_stable, 1.0, 1e4)
    b_min = 0.0 if b_stable(1e-4) else 1.0 / _bisect(lambda g: b_stable(1.0 / g), 1.0, 1e4)
    if model.a == 0:
        return MismatchMargins(b_min, b_max, 0.0, math.inf, True)
    a_limit = (1.0 - 1e-9) / model.a
    a_stable = lambda f: is_stable(model, gains, f, 1.0)  # noqa: E731
    if a_stable(a_limit):
        a_max, limited = a_limit, True
    else:
        a_max, limited = _bisect(a_stable, 1.0, a_limit), False
    a_min = 0.0 if a_stable(0.0) else 1.0 - _bisect(lambda d: a_stable(1.0 - d), 0.0, 1.0)
    return MismatchMargins(b_min, b_max, a_min, a_max, limited)


@dataclass(frozen=True)
class ControllerDesign:
    """A designed controller: its gains, closed-loop poles, step response metrics and margins."""

    name: str
    gains: Gains
    poles: tuple[complex, ...]
    settling_time_s: float
    overshoot_percent: float
    margins: MismatchMargins


def parse_poles(text: str) -> tuple[complex, complex]:
    """Two poles from ``"0.5,0.6"`` or ``"0.24+0.38j"`` (the conjugate is added) or ``"0.24+0.38j,0.24-0.38j"``."""
    try:
        parts = [complex(p.strip().replace(" ", "")) for p in text.split(",") if p.strip()]
    except ValueError:
        raise TrainingError(f"bad --poles '{text}': give two poles, e.g. 0.5,0.6 or 0.24+0.38j") from None
    if len(parts) == 1 and parts[0].imag != 0:
        parts = [parts[0], parts[0].conjugate()]
    if len(parts) != 2:
        raise TrainingError(f"bad --poles '{text}': a PI loop has exactly two closed-loop poles")
    for p in parts:
        if abs(p) >= 1:
            raise TrainingError(f"pole {p} is not strictly inside the unit circle: the loop would be unstable")
    if parts[0].imag != 0 or parts[1].imag != 0:
        if not np.isclose(parts[0], parts[1].conjugate()):
            raise TrainingError(f"complex poles must be a conjugate pair, got {parts[0]} and {parts[1]}")
    return parts[0], parts[1]


def design_controller(model: LogCapModel, name: str, gains: Gains) -> ControllerDesign:
    """Analyse ``gains`` on ``model``: poles, 2 % settling time, overshoot, mismatch margins."""
    sm = step_metrics(model, gains)
    if not sm.stable:
        raise TrainingError(f"{name}: the closed loop is unstable on the fitted model")
    poles = tuple(complex(p) for p in closed_loop_poles(model, gains))
    return ControllerDesign(
        name=name,
        gains=gains,
        poles=poles,
        settling_time_s=sm.settling_periods * model.period_s,
        overshoot_percent=100.0 * sm.overshoot_fraction,
        margins=mismatch_margins(model, gains),
    )


def design_pi(model: LogCapModel, poles: Sequence[complex] = PAPER_PI_POLES) -> ControllerDesign:
    """PI by pole placement (default: the paper's pole locations)."""
    try:
        gains = pi_gains_by_pole_placement(model, list(poles))
    except ValueError as e:
        raise TrainingError(f"pole placement failed: {e}") from None
    return design_controller(model, "pi", gains)


def design_deadbeat(model: LogCapModel) -> ControllerDesign:
    """The paper's dead-beat controller (section 7.2.1)."""
    return design_controller(model, "deadbeat", deadbeat_gains(model))


def step_response(model: LogCapModel, gains: Gains, horizon_periods: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Time (s) and output of Equation 3's response to a unit setpoint step (``control.step_response``)."""
    t = np.arange(horizon_periods + 1) * model.period_s
    resp = control.step_response(closed_loop_tf(model, gains), T=t)
    return np.asarray(resp.time), np.asarray(resp.outputs).ravel()


__all__ += ["design_pi", "design_deadbeat"]


@dataclass(frozen=True)
class CapMinChoice:
    """The chosen cap_min (percent), the useful rate it targets (kp/s) and how it was found."""

    cap_min_percent: float
    useful_kpps: float
    method: str  # "interpolated" | "extrapolated"
    raw_cap_percent: float


def choose_cap_min(
    levels: Sequence[CapLevel], offered_pps: float, model: LogCapModel, useful_fraction: float = 0.10
) -> CapMinChoice:
    """cap_min: the lowest cap forwarding ``useful_fraction`` of the offered rate (see the module docstring)."""
    if not (0 < useful_fraction < 1):
        raise TrainingError(f"--useful-fraction must be within (0, 1), got {useful_fraction}")
    target = useful_fraction * offered_pps / 1e3
    lv = sorted(levels, key=lambda x: x.cap_percent)
    if lv and lv[0].mean_kpps >= target:
        if len(lv) >= 2 and lv[1].mean_kpps > lv[0].mean_kpps:
            # Local slope of the two lowest swept caps, in log10(cap).
            x0, x1 = math.log10(lv[0].cap_percent), math.log10(lv[1].cap_percent)
            slope = (lv[1].mean_kpps - lv[0].mean_kpps) / (x1 - x0)
            raw = 10 ** (x0 - (lv[0].mean_kpps - target) / slope)
        else:
            raw = model.cap_for_kpps(target)
        raw = min(raw, lv[0].cap_percent)
        method = "extrapolated"
    else:
        raw = math.nan
        for lo, hi in zip(lv, lv[1:]):
            if lo.mean_kpps < target <= hi.mean_kpps:
                x0, x1 = math.log10(lo.cap_percent), math.log10(hi.cap_percent)
                frac = (target - lo.mean_kpps) / (hi.mean_kpps - lo.mean_kpps)
                raw = 10 ** (x0 + frac * (x1 - x0))
                break
        if math.isnan(raw):
            raise TrainingError(
                f"the VR never forwards {target:g} kp/s ({useful_fraction:.0%} of the offered rate) in this sweep; "
                "lower --useful-fraction or check the sweep"
            )
        method = "interpolated"
    cap_min = float(min(max(math.ceil(raw - 1e-9), 1), 100))
    return CapMinChoice(cap_min, target, method, float(raw))


def operating_point_entry(fit: FitResult, pi: ControllerDesign, deadbeat: ControllerDesign) -> dict[str, Any]:
    """One offered rate's model and gains, as stored under ``extra.operating_points``."""
    m = fit.model
    entry: dict[str, Any] = {
        "offered_pps": float(fit.offered_pps),
        "a": m.a,
        "b_kpps_per_decade": m.b_kpps_per_decade,
        "ybar_kpps": m.ybar_kpps,
        "ubar_log10_cap": m.ubar_log10_cap,
        "r_squared": fit.r_squared,
        "pairs": fit.n_pairs,
        "pi_kp_decades_per_kpps": pi.gains.kp,
        "pi_ki_decades_per_kpps": pi.gains.ki,
        "deadbeat_kp_decades_per_kpps": deadbeat.gains.kp,
        "deadbeat_ki_decades_per_kpps": deadbeat.gains.ki,
    }
    if fit.cap_threshold_percent is not None:
        entry["cap_threshold_percent"] = fit.cap_threshold_percent
    return entry


def build_model_file(
    name: str,
    fit: FitResult,
    pi: ControllerDesign,
    deadbeat: ControllerDesign,
    cap_min: CapMinChoice,
    fitted_on: Mapping[str, Any],
    operating_points: Mapping[str, Mapping[str, Any]] | None = None,
    description: str = "",
    cap_min_percent: float | None = None,
) -> ModelFile:
    """The model file for ``fit`` with its gains, cap_min and provenance.

    ``controller.cap_min_percent`` (the floor every controller of the daemon keeps to) is the chosen
    cap_min, or ``cap_min_percent`` when given (e.g. 1, the actuator's floor, as in the
    paper's model file); the chosen cap_min is kept under ``[extra.cap_min]`` either way.
    """
    extra: dict[str, Any] = {
        "fit": {
            "a_stderr": fit.a_stderr,
            "b_stderr": fit.b_stderr,
            "pairs": fit.n_pairs,
            "region_caps_percent": [float(c) for c in fit.region_caps_percent],
        },
        "cap_min": {
            "chosen_percent": cap_min.cap_min_percent,
            "useful_kpps": cap_min.useful_kpps,
            "method": cap_min.method,
            "raw_cap_percent": cap_min.raw_cap_percent,
        },
        "design": {
            "pi_poles_real": [p.real for p in pi.poles],
            "pi_poles_imag": [p.imag for p in pi.poles],
            "pi_settling_time_s": pi.settling_time_s,
            "pi_overshoot_percent": pi.overshoot_percent,
            "pi_b_factor_max": _finite_or_str(pi.margins.b_factor_max),
            "deadbeat_settling_time_s": deadbeat.settling_time_s,
            "deadbeat_b_factor_max": _finite_or_str(deadbeat.margins.b_factor_max),
        },
    }
    if operating_points:
        extra["operating_points"] = {k: dict(v) for k, v in operating_points.items()}
    try:
        return ModelFile(
            name=name,
            model=fit.model,
            caps=CapBounds(cap_min_percent=cap_min.cap_min_percent if cap_min_percent is None else cap_min_percent,
                           cap_max_percent=100.0),
            pi=pi.gains,
            deadbeat=deadbeat.gains,
            r_squared=fit.r_squared,
            cap_threshold_percent=fit.cap_threshold_percent,
            fitted_on=dict(fitted_on),
            description=description,
            extra=extra,
        )
    except ValueError as e:
        raise TrainingError(f"the model file would be invalid: {e}") from None


def _finite_or_str(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"
