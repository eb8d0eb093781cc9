"""Metrics of a control run, on per-period series of rates (packets/s).

All functions are pure and work on one VR's series (1-D arrays, one sample per
control period).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = [
    "relative_rmse",
    "relative_error",
    "periods_to_stay_within",
    "settling_periods",
    "recovery_periods",
    "lowest_held_setpoint",
    "confidence_half_width",
]


def _series(y: Sequence[float] | np.ndarray, name: str = "series") -> np.ndarray:
    a = np.asarray(y, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D series, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def relative_rmse(achieved_pps: Sequence[float] | np.ndarray) -> float:
    """Relative RMSE as the XTC paper defines it (section 7.1).

    The RMSE of the achieved rate around its own mean (its oscillation), divided
    by that mean: ``sqrt(mean((y - mean(y))**2)) / mean(y)``.  Dimensionless;
    ``nan`` if the mean is 0.
    """
    y = _series(achieved_pps, "achieved_pps")
    m = float(np.mean(y))
    if m == 0:
        return math.nan
    return float(np.sqrt(np.mean((y - m) ** 2)) / m)


def relative_error(achieved_pps: Sequence[float] | np.ndarray, setpoint_pps: float) -> float:
    """Steady-state relative error ``|mean(y) - r| / r`` (dimensionless)."""
    y = _series(achieved_pps, "achieved_pps")
    if not (setpoint_pps > 0):
        raise ValueError(f"setpoint_pps must be > 0, got {setpoint_pps}")
    return float(abs(np.mean(y) - setpoint_pps) / setpoint_pps)


def periods_to_stay_within(y_pps: Sequence[float] | np.ndarray, setpoint_pps: float, band: float) -> int | None:
    """Index of the first sample from which ``y`` stays within ``band`` (relative) of the setpoint.

    Returns ``0`` if every sample is within the band, ``None`` if the last one is not.
    """
    y = _series(y_pps, "y_pps")
    if not (setpoint_pps > 0) or not (band > 0):
        raise ValueError("setpoint_pps and band must be > 0")
    inside = np.abs(y - setpoint_pps) <= band * setpoint_pps
    if not inside[-1]:
        return None
    outside = np.flatnonzero(~inside)
    return 0 if outside.size == 0 else int(outside[-1]) + 1


def settling_periods(
    y_after_step_pps: Sequence[float] | np.ndarray, setpoint_pps: float, band: float = 0.10, window: int = 1
) -> int | None:
    """Settling time after a setpoint step, in control periods (the one definition, simulator and lab).

    Parameters
    ----------
    y_after_step_pps : array_like
        One rate per control period, packets/s; element 0 is the rate over the first period
        after the controller was given the new setpoint, the last is the last period before the
        next step (or the end).
    setpoint_pps : float
        The new setpoint, packets/s.
    band : float
        Relative band around the setpoint (0.10 = 10%); its edges are inside.
    window : int
        The rate judged is the trailing mean of ``window`` periods (1: each period's own rate;
        the lab uses 3, a real VR's one-period rates scattering by several percent); it exists
        from period ``window`` on.

    Returns
    -------
    int or None
        The number of periods from the step to the end of the first period from which the
        judged rate stays within the band: ``window`` if it is there from the first judged
        period on (1 is the best a sampled loop can do), ``None`` if it is not there at the end.
    """
    y = _series(y_after_step_pps, "y_after_step_pps")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if y.size < window:
        return None
    judged = np.convolve(y, np.ones(window) / window, mode="valid")
    j = periods_to_stay_within(judged, setpoint_pps, band)
    return None if j is None else j + window


def recovery_periods(y_from_disturbance_pps: Sequence[float] | np.ndarray, setpoint_pps: float, band: float = 0.05) -> int | None:
    """Periods a disturbance keeps the rate out of ``band`` before it stays back within it.

    ``y_from_disturbance_pps[0]`` is the rate over the first period with the
    disturbance.  0 if the rate never leaves the band, ``None`` if it is
    outside at the end.
    """
    return periods_to_stay_within(y_from_disturbance_pps, setpoint_pps, band)


def lowest_held_setpoint(
    setpoints_pps: Sequence[float] | np.ndarray, mean_achieved_pps: Sequence[float] | np.ndarray, tolerance: float = 0.05
) -> float | None:
    """Lowest grid setpoint from which every higher grid setpoint is held within ``tolerance``.

    Parameters
    ----------
    setpoints_pps : array_like
        The grid, packets/s (any order).
    mean_achieved_pps : array_like
        Mean achieved rate at each setpoint, packets/s.
    tolerance : float
        Relative tolerance (0.05 = 5%).

    Returns
    -------
    float or None
        The setpoint (pps), or ``None`` if even the highest one is not held.
    """
    r = _series(setpoints_pps, "setpoints_pps")
    y = _series(mean_achieved_pps, "mean_achieved_pps")
    if r.shape != y.shape:
        raise ValueError("setpoints_pps and mean_achieved_pps must have the same length")
    order = np.argsort(r)
    r, y = r[order], y[order]
    held = np.abs(y - r) <= tolerance * r
    if not held[-1]:
        return None
    bad = np.flatnonzero(~held)
    first = 0 if bad.size == 0 else int(bad[-1]) + 1
    return float(r[first])


def confidence_half_width(samples: Sequence[float] | np.ndarray, level: float = 0.95) -> float:
    """Half width of the Student-t confidence interval of the mean (0 for one sample)."""
    x = _series(samples, "samples")
    if x.size < 2:
        return 0.0
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, x.size - 1) * np.std(x, ddof=1) / math.sqrt(x.size))
