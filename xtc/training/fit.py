"""Fit the log-cap model ``y(k+1) = a y(k) + b u(k)`` to a cap sweep (section 5 of the XTC paper).

The steps, all pure (a :class:`~xtc.training.sweep.Sweep` in, a :class:`FitResult` out):

1. **Per-cap levels.**  For each distinct cap, the mean and spread of the forwarded
   rate over the samples taken after the settle time (``settling == 0``).
2. **Cap threshold** (:func:`find_cap_threshold`).  The paper picks the cap "after
   which the Achieved Throughput varies less than 1 kp/s".  Rule used here: the
   threshold is the lowest swept cap ``c_t`` such that the per-cap means of all caps
   ``>= c_t`` lie within ``plateau_tol_kpps`` (default 1 kp/s) of each other, i.e.
   ``max - min < tol``, and that plateau has at least two caps.  If only the highest
   cap qualifies, no plateau was observed: there is no threshold and every cap is kept
   (with a warning).  If every cap qualifies, the throughput does not change with the
   cap and nothing can be fitted.
3. **Region of interest.**  The samples at caps strictly below the threshold.  (With
   the paper's sweep, caps 5, 10, ..., 55 below a threshold of 60, the mean of
   ``log10(cap)`` is exactly the paper's ``ubar = 1.39``, which is how the paper's
   region reads.)
4. **Operating point.**  ``ybar`` and ``ubar`` are the means of the forwarded rate
   (kp/s) and of ``log10(cap)`` over the settled samples of the region.
5. **Regression.**  The sweep, in recording order, is one time series: each cap is a
   step of the input, followed by its transient (settling) and settled samples.
   SweepSample ``i`` measured the rate while cap ``c_i`` was in force, so, as in the
   control loop (the cap computed at ``k`` is in force until ``k+1``)::

       y_i - ybar = a (y_{i-1} - ybar) + b (log10(c_i) - ubar)

   for every pair of consecutive samples of the same offered rate that are both in
   the region.  Two estimators, both with ``numpy.linalg.lstsq`` and no intercept
   (the paper's ``mldivide`` on offset variables):

   * ``method="steps"`` (default): the static gain ``G = b / (1 - a)`` is the
     least-squares slope of the settled per-cap means against ``log10(cap)``; the
     pole comes from the transients: after a step from a settled level ``m_prev`` to
     a level ``m_new``, the first sample has moved ``(1 - a)`` of the way, so
     ``1 - a`` is the least-squares slope of ``y_first - m_prev`` on
     ``m_new - m_prev`` over all steps; then ``b = (1 - a) G``.  The settled levels
     are used as measured, so a curved cap-to-throughput relation (the real one is
     only roughly linear in ``log10(cap)``) does not leak into ``a``.
   * ``method="samples"``: one least-squares fit of the equation above over all
     pairs.  Unbiased when the plant really is the linear model with noise in the
     equation; on a curved plant, the many within-cap pairs let ``a y(k)`` absorb
     the curvature and ``a`` comes out too large (on the simulated plant at
     100 kp/s: 0.67, where ``steps`` gives 0.34; the plant's 1 s averages of its
     0.42 s lag move about 62 % of a step in the first period, i.e. ``a`` near 0.38).

   ``R^2 = 1 - SS_res / SS_tot`` of the one-step predictions over all pairs, for
   either estimator (the paper's Figure 4 plots these predictions).  A fitted ``a``
   slightly below 0 (within two standard errors) is set to 0 (``b = G``).  With
   ``steps``, an ``a`` down to ``-0.5`` is also set to 0, with a warning: the first
   sample after a step went past the new level (up to 1.5 times the step), which a
   plant that follows its cap within one period shows when that sample is noisy or
   the cap change itself gives a short burst of CPU (a CFS quota change refills the
   current period's runtime); 0 is the pole of such a plant.  Below that (or below
   two standard errors with ``samples``), or ``a >= 1``, is an error.

Units: rates in the model are kp/s (the CSV is packets/s), ``u`` in decades of cap.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from xtc.models import LogCapModel, ModelError
from xtc.training.sweep import Sweep, TrainingError

__all__ = [
    "CapLevel",
    "FitResult",
    "cap_levels",
    "find_cap_threshold",
    "fit_sweep",
    "fit_sweeps",
    "primary_offered_pps",
    "R_SQUARED_POOR",
]

R_SQUARED_POOR = 0.9
"""Fits with R-squared below this are reported as poor and are not written without an explicit flag."""

STEPS_OVERSHOOT_LIMIT = 0.5
"""With ``method="steps"``, a fitted ``a`` in ``[-STEPS_OVERSHOOT_LIMIT, 0)`` is taken as 0 (see the module docstring)."""


@dataclass(frozen=True)
class CapLevel:
    """Settled throughput at one cap.

    Parameters
    ----------
    cap_percent : float
        The cap, percent of one CPU.
    mean_kpps, std_kpps : float
        Mean and sample standard deviation of the settled forwarded rate, kp/s.
    n : int
        Number of settled samples.
    """

    cap_percent: float
    mean_kpps: float
    std_kpps: float
    n: int


@dataclass(frozen=True)
class FitResult:
    """The log-cap model fitted at one offered rate, with what it was fitted on.

    ``y_actual_kpps`` / ``y_estimated_kpps`` are the regression targets and the
    model's one-step predictions, absolute (``ybar`` added back), kp/s: the data of
    the residual plot (the paper's Figure 4).
    """

    offered_pps: float
    model: LogCapModel
    r_squared: float
    a_stderr: float
    b_stderr: float
    cap_threshold_percent: float | None
    levels: tuple[CapLevel, ...]
    region_caps_percent: tuple[float, ...]
    n_pairs: int
    n_samples: int
    y_actual_kpps: np.ndarray = field(repr=False)
    y_estimated_kpps: np.ndarray = field(repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def poor(self) -> bool:
        """True when R-squared is below :data:`R_SQUARED_POOR`."""
        return self.r_squared < R_SQUARED_POOR

    def summary(self) -> str:
        """A few lines of text describing the fit."""
        m = self.model
        thr = "none (no plateau)" if self.cap_threshold_percent is None else f"{self.cap_threshold_percent:g} %"
        lines = [
            f"offered rate        {self.offered_pps / 1e3:g} kp/s",
            f"cap threshold       {thr}",
            f"region (caps %)     {', '.join(f'{c:g}' for c in self.region_caps_percent)}",
            f"a                   {m.a:.4f} +- {self.a_stderr:.4f}",
            f"b                   {m.b_kpps_per_decade:.4f} +- {self.b_stderr:.4f} kp/s per decade of cap",
            f"ybar, ubar          {m.ybar_kpps:.2f} kp/s, {m.ubar_log10_cap:.3f} (cap {10 ** m.ubar_log10_cap:.1f} %)",
            f"R^2                 {self.r_squared:.4f}{'  (POOR: below %.2f)' % R_SQUARED_POOR if self.poor else ''}",
            f"pairs / samples     {self.n_pairs} / {self.n_samples}",
        ]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def cap_levels(sweep: Sweep, offered_pps: float) -> tuple[CapLevel, ...]:
    """Settled throughput per cap at one offered rate, sorted by cap.

    Samples flagged as settling are left out; a cap with only settling samples uses them all.
    """
    by_cap: dict[float, list[float]] = {}
    settling_only: dict[float, list[float]] = {}
    for s in sweep.samples:
        if s.offered_pps != offered_pps:
            continue
        target = settling_only if s.settling else by_cap
        target.setdefault(s.cap_percent, []).append(s.forwarded_pps / 1e3)
    for cap, vals in settling_only.items():
        by_cap.setdefault(cap, vals)
    out = []
    for cap in sorted(by_cap):
        vals = by_cap[cap]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        out.append(CapLevel(cap, statistics.fmean(vals), sd, len(vals)))
    return tuple(out)


def find_cap_threshold(levels: tuple[CapLevel, ...] | list[CapLevel], plateau_tol_kpps: float = 1.0) -> float | None:
    """The cap threshold: lowest cap from which on the settled throughput varies less than a tolerance.

    Parameters
    ----------
    levels : sequence of CapLevel
        Settled throughput per cap, sorted by cap (see :func:`cap_levels`).
    plateau_tol_kpps : float
        The plateau's allowed spread (max - min of the per-cap means), kp/s. The paper uses 1 kp/s.

    Returns
    -------
    float or None
        The threshold cap (percent), or None when only the highest cap qualifies (no plateau seen).
        Equal to the lowest cap when the throughput does not change over the whole sweep.
    """
    if plateau_tol_kpps <= 0 or not math.isfinite(plateau_tol_kpps):
        raise TrainingError(f"plateau tolerance must be > 0 kp/s, got {plateau_tol_kpps}")
    if len(levels) < 2:
        return None
    means = [lv.mean_kpps for lv in levels]
    best = len(levels) - 1
    for j in range(len(levels) - 1, -1, -1):
        tail = means[j:]
        if max(tail) - min(tail) < plateau_tol_kpps:
            best = j
        else:
            break
    if best == len(levels) - 1:
        return None
    return levels[best].cap_percent


def primary_offered_pps(sweep: Sweep) -> float:
    """The offered rate the main model is fitted at: the highest one (largest region of interest, as in the paper)."""
    return max(sweep.offered_rates_pps)


def fit_sweep(
    sweep: Sweep,
    offered_pps: float | None = None,
    plateau_tol_kpps: float = 1.0,
    min_caps: int = 3,
    min_pairs: int = 10,
    method: str = "steps",
) -> FitResult:
    """Fit ``a``, ``b``, ``ybar``, ``ubar`` to the part of a sweep below its cap threshold.

    Parameters
    ----------
    sweep : Sweep
        Samples in recording order.
    offered_pps : float, optional
        Which offered rate to fit (packets/s); default :func:`primary_offered_pps`.
    plateau_tol_kpps : float
        Tolerance of the cap-threshold rule, kp/s (see :func:`find_cap_threshold`).
    min_caps : int
        Fewest distinct caps required below the threshold.
    min_pairs : int
        Fewest regression pairs (consecutive samples in the region) required.
    method : {"steps", "samples"}
        How ``a`` and ``b`` are estimated (see the module docstring).

    Returns
    -------
    FitResult

    Raises
    ------
    TrainingError
        When the throughput does not change with the cap, too few caps or samples lie
        below the threshold, or the data do not describe a stable first-order plant.
    """
    if offered_pps is None:
        offered_pps = primary_offered_pps(sweep)
    sub = sweep.for_offered(offered_pps)  # raises for an unknown rate
    levels = cap_levels(sub, offered_pps)
    warnings: list[str] = []
    span = max(lv.mean_kpps for lv in levels) - min(lv.mean_kpps for lv in levels)
    if len(levels) < 2:
        raise TrainingError(
            f"offered {offered_pps:g} pps: the sweep has a single cap ({levels[0].cap_percent:g} %); "
            "sweep several caps, e.g. --caps 5:100:5"
        )
    threshold = find_cap_threshold(levels, plateau_tol_kpps)
    if threshold is not None and threshold == levels[0].cap_percent:
        raise TrainingError(
            f"offered {offered_pps:g} pps: the throughput does not change with the cap (settled means span only "
            f"{span:.3f} kp/s over caps {levels[0].cap_percent:g}..{levels[-1].cap_percent:g} %, less than the "
            f"{plateau_tol_kpps:g} kp/s plateau tolerance). The VR is not CPU-bound at these caps: offer a higher "
            "rate, sweep lower caps, or check that the cap is really applied to the process that forwards"
        )
    if threshold is None:
        warnings.append(
            f"no plateau: the throughput still changes between the two highest caps; all caps up to "
            f"{levels[-1].cap_percent:g} % are used (sweep higher caps to find the threshold)"
        )
        region_caps = tuple(lv.cap_percent for lv in levels)
    else:
        region_caps = tuple(lv.cap_percent for lv in levels if lv.cap_percent < threshold)
    if len(region_caps) < min_caps:
        thr = f"{threshold:g} %" if threshold is not None else "none"
        raise TrainingError(
            f"offered {offered_pps:g} pps: only {len(region_caps)} cap(s) below the cap threshold ({thr}); "
            f"need at least {min_caps}. Sweep more caps below the threshold (e.g. --caps 2:{threshold or 100:g}:2)"
        )

    arr = sweep.arrays()
    on_rate = arr["offered_pps"] == offered_pps
    region_set = set(region_caps)
    in_region = on_rate & np.array([c in region_set for c in arr["cap_percent"]])
    y_kpps = arr["forwarded_pps"] / 1e3
    u = np.log10(arr["cap_percent"])
    settled = in_region & ~arr["settling"]
    if not settled.any():
        settled = in_region
    ybar = float(np.mean(y_kpps[settled]))
    ubar = float(np.mean(u[settled]))
    idx = np.nonzero(in_region[1:] & in_region[:-1])[0] + 1  # sample i with i-1 also in region
    if len(idx) < max(min_pairs, 3):
        raise TrainingError(
            f"offered {offered_pps:g} pps: only {len(idx)} pairs of consecutive samples below the threshold; "
            f"need at least {max(min_pairs, 3)}. Record more samples per cap (--samples) or more caps"
        )
    target = y_kpps[idx] - ybar
    x = np.column_stack([y_kpps[idx - 1] - ybar, u[idx] - ubar])
    n = len(idx)
    if method == "samples":
        a, b, a_se, b_se = _fit_samples(x, target, offered_pps)
    elif method == "steps":
        level_of = {lv.cap_percent: lv.mean_kpps for lv in levels}
        got = _fit_steps(arr, in_region, level_of, ybar, ubar, region_caps)
        if got is None:
            warnings.append("fewer than 2 cap steps with their first sample in the region; fitted by --method samples")
            a, b, a_se, b_se = _fit_samples(x, target, offered_pps)
        else:
            a, b, a_se, b_se = got
    else:
        raise TrainingError(f"unknown fit method {method!r}; use 'steps' or 'samples'")
    resid = target - x @ np.array([a, b])
    a_orig = a
    if a < 0:
        within_noise = a > -2 * a_se - 1e-12
        if within_noise or (method == "steps" and a >= -STEPS_OVERSHOOT_LIMIT):
            if within_noise:
                warnings.append(f"fitted a = {a:.4f} (+- {a_se:.4f}) is below 0 within noise; set to 0 and b refitted")
            else:
                warnings.append(
                    f"fitted a = {a:.4f} (+- {a_se:.4f}): the first sample after a cap step went on average "
                    f"{-a:.0%} of the step past the new level; the rate follows the cap within one period, so a "
                    "is set to 0 and b refitted"
                )
            a = 0.0
            if method == "samples":
                xb = x[:, 1]
                b = float(xb @ target / (xb @ xb))
                b_se = float(math.sqrt(float((target - b * xb) @ (target - b * xb)) / max(n - 1, 1) / float(xb @ xb)))
            else:
                b = b / (1.0 - a_orig)
            resid = target - x @ np.array([a, b])
        else:
            raise TrainingError(
                f"offered {offered_pps:g} pps: fitted a = {a:.4f} (+- {a_se:.4f}) is negative: the samples do not "
                "behave like a first-order plant (they oscillate from one sample to the next). Use a longer sample "
                "period or more samples per cap"
            )
    if a >= 1:
        raise TrainingError(
            f"offered {offered_pps:g} pps: fitted a = {a:.4f} >= 1 (an unstable or integrating plant); "
            "the throughput drifts within a cap step. Check the traffic source and re-record the sweep"
        )
    if b <= 0:
        raise TrainingError(
            f"offered {offered_pps:g} pps: fitted b = {b:.4f} kp/s per decade is not positive: in this sweep more "
            "cap does not give more throughput. Check the cap actuator and the meter"
        )
    ss_res = float(resid @ resid)
    ss_tot = float(np.sum((target - target.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    durations = arr["duration_s"][on_rate]
    period = float(np.median(durations))
    if np.any(np.abs(durations - period) > 0.1 * period):
        warnings.append(f"sample durations vary by more than 10 % around {period:g} s")
    try:
        model = LogCapModel(a=a, b_kpps_per_decade=b, ybar_kpps=ybar, ubar_log10_cap=ubar, period_s=period)
    except ModelError as e:
        raise TrainingError(f"offered {offered_pps:g} pps: the fitted model is invalid: {e}") from None
    y_est = x @ np.array([a, b]) + ybar
    return FitResult(
        offered_pps=offered_pps,
        model=model,
        r_squared=r2,
        a_stderr=a_se,
        b_stderr=b_se,
        cap_threshold_percent=threshold,
        levels=levels,
        region_caps_percent=region_caps,
        n_pairs=n,
        n_samples=int(in_region.sum()),
        y_actual_kpps=target + ybar,
        y_estimated_kpps=y_est,
        warnings=tuple(warnings),
    )


def _fit_samples(x: np.ndarray, target: np.ndarray, offered_pps: float) -> tuple[float, float, float, float]:
    """Plain least squares of the one-step equation over all pairs: ``a, b`` and their standard errors."""
    theta, _, rank, _ = np.linalg.lstsq(x, target, rcond=None)
    if rank < 2:
        raise TrainingError(
            f"offered {offered_pps:g} pps: the regression is degenerate (rank {rank}); the samples below the "
            "threshold do not vary enough. Sweep more distinct caps"
        )
    n = len(target)
    resid = target - x @ theta
    sigma2 = float(resid @ resid) / max(n - 2, 1)
    cov = sigma2 * np.linalg.inv(x.T @ x)
    return float(theta[0]), float(theta[1]), float(math.sqrt(cov[0, 0])), float(math.sqrt(cov[1, 1]))


def _fit_steps(
    arr: dict[str, np.ndarray],
    in_region: np.ndarray,
    level_of: dict[float, float],
    ybar: float,
    ubar: float,
    region_caps: tuple[float, ...],
) -> tuple[float, float, float, float] | None:
    """Static gain from the settled levels, pole from the first sample after each cap step.

    Returns ``a, b, a_stderr, b_stderr`` or None when there are fewer than two usable steps.
    """
    caps = np.array(region_caps, dtype=float)
    lv = np.array([level_of[c] for c in region_caps])
    xu = (np.log10(caps) - ubar).reshape(-1, 1)
    g_theta, _, _, _ = np.linalg.lstsq(xu, lv - ybar, rcond=None)
    g = float(g_theta[0])
    g_res = (lv - ybar) - xu[:, 0] * g
    g_se = float(math.sqrt(float(g_res @ g_res) / max(len(caps) - 1, 1) / float(xu[:, 0] @ xu[:, 0])))
    cap = arr["cap_percent"]
    first = np.nonzero(
        in_region[1:] & in_region[:-1] & (arr["sample_index"][1:] == 0) & (cap[1:] != cap[:-1])
        & (arr["offered_pps"][1:] == arr["offered_pps"][:-1])
    )[0] + 1
    if len(first) < 2:
        return None
    prev_level = np.array([level_of[c] for c in cap[first - 1]])
    new_level = np.array([level_of[c] for c in cap[first]])
    step = (new_level - prev_level).reshape(-1, 1)
    moved = arr["forwarded_pps"][first] / 1e3 - prev_level
    k_theta, _, _, _ = np.linalg.lstsq(step, moved, rcond=None)  # fraction of the step done in one period = 1 - a
    one_minus_a = float(k_theta[0])
    k_res = moved - step[:, 0] * one_minus_a
    a_se = float(math.sqrt(float(k_res @ k_res) / max(len(first) - 1, 1) / float(step[:, 0] @ step[:, 0])))
    a = 1.0 - one_minus_a
    b = one_minus_a * g
    b_se = float(math.hypot(one_minus_a * g_se, g * a_se))
    return a, b, a_se, b_se


def fit_sweeps(sweep: Sweep, **kwargs: float) -> tuple[dict[float, FitResult], dict[float, str]]:
    """Fit every offered rate of a sweep.

    Returns the fits that succeeded and, for the others, the error message, both keyed by offered rate (pps).
    """
    fits: dict[float, FitResult] = {}
    errors: dict[float, str] = {}
    for rate in sorted(sweep.offered_rates_pps):
        try:
            fits[rate] = fit_sweep(sweep, rate, **kwargs)  # type: ignore[arg-type]
        except TrainingError as e:
            errors[rate] = str(e)
    return fits, errors
