"""Training plots (matplotlib, Agg backend): the paper's Figures 3 and 4, step responses, stability region.

Each function returns a :class:`matplotlib.figure.Figure`; :func:`save` writes it as PNG
and closes it.  No pyplot state is used, so the functions are safe in tests and servers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from xtc.models import LogCapModel
from xtc.training.analysis import ControllerDesign, stability_grid, step_response
from xtc.training.fit import CapLevel, FitResult

__all__ = ["throughput_vs_cap", "residual_plot", "step_responses", "stability_region", "save"]


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG to ``path`` and return the path."""
    p = Path(path)
    fig.savefig(p, format="png", dpi=110, bbox_inches="tight")
    return p


def throughput_vs_cap(
    levels_by_offered: Mapping[float, Sequence[CapLevel]],
    thresholds: Mapping[float, float | None] | None = None,
    title: str = "Throughput vs cap (cf. Figure 3)",
) -> Figure:
    """Settled forwarded rate (mean +- std, kp/s) against the cap, one curve per offered rate."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for offered, levels in sorted(levels_by_offered.items()):
        caps = [lv.cap_percent for lv in levels]
        ax.errorbar(caps, [lv.mean_kpps for lv in levels], yerr=[lv.std_kpps for lv in levels],
                    marker="o", ms=3, capsize=2, label=f"{offered / 1e3:g} kp/s offered")
        thr = (thresholds or {}).get(offered)
        if thr is not None:
            ax.axvline(thr, ls=":", lw=1, color=ax.lines[-1].get_color())
    ax.set_xlabel("cap (% of one CPU)")
    ax.set_ylabel("forwarded rate (kp/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def residual_plot(fit: FitResult, title: str | None = None) -> Figure:
    """Estimated vs actual throughput of the one-step predictions, with the unit slope (cf. Figure 4)."""
    fig = Figure(figsize=(4.8, 4.6))
    ax = fig.add_subplot()
    y, yh = fit.y_actual_kpps, fit.y_estimated_kpps
    ax.plot(y, yh, ".", ms=4, alpha=0.7, label="samples")
    lo, hi = float(min(y.min(), yh.min())), float(max(y.max(), yh.max()))
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="unit slope")
    ax.set_xlabel("actual throughput (kp/s)")
    ax.set_ylabel("estimated throughput (kp/s)")
    ax.set_title(title or f"Residual plot, {fit.offered_pps / 1e3:g} kp/s, R$^2$ = {fit.r_squared:.4f}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_aspect("equal", adjustable="datalim")
    return fig


def step_responses(model: LogCapModel, designs: Sequence[ControllerDesign], horizon_periods: int = 20) -> Figure:
    """Closed-loop responses (Equation 3) to a unit setpoint step, one per design."""
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for d in designs:
        t, y = step_response(model, d.gains, horizon_periods)
        ax.step(t, y, where="post", label=f"{d.name}: settles in {d.settling_time_s:g} s, "
                f"overshoot {d.overshoot_percent:.1f} %")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("output / setpoint step")
    ax.set_title("Closed-loop step response")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def stability_region(
    model: LogCapModel,
    designs: Sequence[ControllerDesign],
    a_factors: np.ndarray | None = None,
    b_factors: np.ndarray | None = None,
) -> Figure:
    """Region of plant drift ``(a * fa, b * fb)`` in which each design stays stable (contour of the grid)."""
    if a_factors is None:
        a_max = min(12.0, 0.999 / model.a) if model.a > 0 else 12.0
        a_factors = np.linspace(0.0, a_max, 61)
    if b_factors is None:
        b_factors = np.logspace(-1.5, 1.5, 61)
    fig = Figure(figsize=(6.0, 4.6))
    ax = fig.add_subplot()
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for k, d in enumerate(designs):
        grid = stability_grid(model, d.gains, a_factors, b_factors).astype(float)
        c = colors[k % len(colors)]
        ax.contourf(a_factors, b_factors, grid, levels=[0.5, 1.5], colors=[c], alpha=0.18)
        ax.contour(a_factors, b_factors, grid, levels=[0.5], colors=[c])
        ax.plot([], [], color=c, label=f"{d.name}: stable inside")
    ax.plot([1.0], [1.0], "k+", ms=10, label="fitted model")
    ax.set_yscale("log")
    ax.set_xlabel("factor on a")
    ax.set_ylabel("factor on b")
    ax.set_title("Stability against model mismatch")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig
