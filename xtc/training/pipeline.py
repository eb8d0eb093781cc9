"""Fit + design of a whole sweep in one call, the provenance record and the markdown report.

:func:`train_from_sweep` is pure (sweep, provenance and options in; a :class:`Training`
out).  Writing files is left to the caller (:mod:`xtc.training.cli`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from xtc.models import ModelFile
from xtc.training.analysis import (
    PAPER_PI_POLES,
    CapMinChoice,
    ControllerDesign,
    build_model_file,
    choose_cap_min,
    design_deadbeat,
    design_pi,
    operating_point_entry,
)
from xtc.training.fit import FitResult, fit_sweep, fit_sweeps, primary_offered_pps
from xtc.training.sweep import Sweep, TrainingError

__all__ = ["Training", "PoorFitError", "train_from_sweep", "provenance", "markdown_report"]


class PoorFitError(TrainingError):
    """The fit's R-squared is below the limit and writing it was not explicitly accepted."""


@dataclass(frozen=True)
class Training:
    """Everything one training run produced."""

    fit: FitResult
    pi: ControllerDesign
    deadbeat: ControllerDesign
    cap_min: CapMinChoice
    model_file: ModelFile
    other_fits: Mapping[float, FitResult] = field(default_factory=dict)
    failed_rates: Mapping[float, str] = field(default_factory=dict)


def provenance(sweep: Sweep, csv_path: str, sha256: str, date: str | None) -> dict[str, Any]:
    """The ``[fitted_on]`` table: the CSV, its hash, sample count, date and the CSV's metadata."""
    out: dict[str, Any] = {"csv": csv_path, "sha256": sha256, "samples": len(sweep)}
    d = date or sweep.metadata.get("date")
    if d:
        out["date"] = d
    for k in ("backend", "hardware", "traffic", "offered_pps_source", "packet_bytes", "period_s", "seed"):
        if k in sweep.metadata:
            out[k] = sweep.metadata[k]
    return out


def train_from_sweep(
    sweep: Sweep,
    fitted_on: Mapping[str, Any],
    name: str = "trained",
    offered_pps: float | None = None,
    poles: Sequence[complex] = PAPER_PI_POLES,
    useful_fraction: float = 0.10,
    plateau_tol_kpps: float = 1.0,
    method: str = "steps",
    accept_poor_fit: bool = False,
    cap_min_percent: float | None = None,
) -> Training:
    """Fit the sweep, design PI and dead-beat gains, choose cap_min, assemble the model file.

    ``cap_min_percent``: the model file's ``controller.cap_min_percent`` (default: the chosen cap_min,
    which is recorded under ``[extra.cap_min]`` either way).

    Raises
    ------
    TrainingError
        For unusable data (nothing to write).
    PoorFitError
        When R-squared is below 0.9 and ``accept_poor_fit`` is False.
    """
    if cap_min_percent is not None and not (1.0 <= cap_min_percent <= 100.0):
        raise TrainingError(f"--cap-min-percent {cap_min_percent:g} must be within 1..100 percent of one CPU")
    rate = primary_offered_pps(sweep) if offered_pps is None else offered_pps
    fit = fit_sweep(sweep, rate, plateau_tol_kpps=plateau_tol_kpps, method=method)
    if fit.poor and not accept_poor_fit:
        raise PoorFitError(
            f"poor fit: R^2 = {fit.r_squared:.4f} is below 0.9 at {rate:g} pps; the model would mislead the "
            "controller. Re-record with more samples per cap, or pass --accept-poor-fit to write it anyway"
        )
    pi = design_pi(fit.model, poles)
    db = design_deadbeat(fit.model)
    cap_min = choose_cap_min(fit.levels, rate, fit.model, useful_fraction)
    others, failed = fit_sweeps(sweep, plateau_tol_kpps=plateau_tol_kpps, method=method)  # type: ignore[arg-type]
    points: dict[str, dict[str, Any]] = {}
    for r, f in sorted(others.items()):
        try:
            points[f"offered_{int(round(r))}_pps"] = operating_point_entry(f, design_pi(f.model, poles), design_deadbeat(f.model))
        except TrainingError as e:
            failed[r] = str(e)
    desc = (
        f"Log-cap model fitted at {rate / 1e3:g} kp/s offered on {fitted_on.get('csv', 'a sweep')} "
        f"(R^2 {fit.r_squared:.4f}, method {method})."
        + (" A POOR fit (R^2 below 0.9), written because it was explicitly accepted." if fit.poor else "")
    )
    mf = build_model_file(name, fit, pi, db, cap_min, fitted_on, points if len(points) > 1 else None, desc,
                          cap_min_percent)
    return Training(fit, pi, db, cap_min, mf, {r: f for r, f in others.items() if r != rate}, failed)


def _fmt_poles(ps: Sequence[complex]) -> str:
    return ", ".join(f"{p.real:.4f}{p.imag:+.4f}j" if abs(p.imag) > 1e-12 else f"{p.real:.4f}" for p in ps)


def _margin(x: float) -> str:
    return "unbounded" if x == float("inf") else f"{x:.3g}"


def markdown_report(t: Training, plots: Mapping[str, str], model_path: str, csv_path: str) -> str:
    """A short markdown report of a training run (plots referenced by relative path)."""
    f = t.fit
    lines = [
        f"# XTC training report: {t.model_file.name}",
        "",
        f"Sweep: `{csv_path}` ({t.model_file.fitted_on.get('samples')} samples, sha256 "
        f"`{str(t.model_file.fitted_on.get('sha256', ''))[:16]}...`). Model file: `{model_path}`.",
        "",
        "## Fit (log-cap model, y(k+1) = a y(k) + b u(k))",
        "",
        "| offered (kp/s) | cap threshold (%) | a | b (kp/s/decade) | ybar (kp/s) | ubar | R^2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for fit in sorted([f, *t.other_fits.values()], key=lambda x: x.offered_pps):
        thr = "-" if fit.cap_threshold_percent is None else f"{fit.cap_threshold_percent:g}"
        mm = fit.model
        lines.append(
            f"| {fit.offered_pps / 1e3:g} | {thr} | {mm.a:.4f} +- {fit.a_stderr:.4f} | "
            f"{mm.b_kpps_per_decade:.3f} +- {fit.b_stderr:.3f} | {mm.ybar_kpps:.2f} | {mm.ubar_log10_cap:.3f} | "
            f"{fit.r_squared:.4f}{' (poor)' if fit.poor else ''} |"
        )
    for r, err in sorted(t.failed_rates.items()):
        lines.append(f"\nNot fitted at {r / 1e3:g} kp/s: {err}")
    for w in f.warnings:
        lines.append(f"\nWarning: {w}")
    lines += [
        "",
        f"The model file holds the fit at {f.offered_pps / 1e3:g} kp/s (the largest region of interest); "
        "the others are under `[extra.operating_points]`.",
        "",
        "## Controllers",
        "",
        "| controller | Kp | Ki | closed-loop poles | settling (2 %) | overshoot | stable for b x | stable for a x |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in (t.pi, t.deadbeat):
        mg = d.margins
        a_g = f"{mg.a_factor_min:.3g}..{_margin(mg.a_factor_max)}" + (" (up to a=1)" if mg.a_limited_by_plant else "")
        lines.append(
            f"| {d.name} | {d.gains.kp:.4e} | {d.gains.ki:.4e} | {_fmt_poles(d.poles)} | {d.settling_time_s:g} s | "
            f"{d.overshoot_percent:.1f} % | {mg.b_factor_min:.3g}..{_margin(mg.b_factor_max)} | {a_g} |"
        )
    lines += [
        "",
        "Margins: the range of factors on b (a as fitted) and on a (b as fitted) over which every closed-loop "
        "pole stays inside the unit circle (0 = any shrink; see stability-region.png for both at once).",
        "",
        "## cap_min",
        "",
        f"cap_min = {t.cap_min.cap_min_percent:g} %: the lowest cap forwarding {t.cap_min.useful_kpps:g} kp/s "
        f"({t.cap_min.method}, raw {t.cap_min.raw_cap_percent:.2f} %, rounded up). The model file's floor "
        f"(`controller.cap_min_percent`, kept by every controller) is {t.model_file.caps.cap_min_percent:g} %.",
        "",
        "## Plots",
        "",
    ]
    for title, path in plots.items():
        lines.append(f"![{title}]({path})")
        lines.append("")
    return "\n".join(lines)
