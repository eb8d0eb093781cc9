"""``xtc bench control``: every controller on the nominal plant and on mismatched plants.

Seeded and deterministic (the same seed gives the same JSON), pure simulation.

Controllers: ``pi``, ``deadbeat``, ``deadbeat-capmin3``, ``fixed`` (Table 1,
open loop), ``xtc`` (the project's controller, ``make_controller(kind=None)``, the lag probe
on) and ``xtc-noprobe`` (the same law without the lag probe, the default before 2026-11-25),
all built from the paper's model file.

Every run is the daemon's own loop (:func:`xtc_lab.sim.run.run_loop`: ``ControlLoop`` over the
simulated host, its meter reading the counters once per period, setpoints as manager requests).

Plants (one UDP flow at 100 kp/s offered, 64-byte packets, exact caps unless said):

========== ====================================================================
nominal    the plant calibrated to the paper (Table 1, pole a = 0.0915)
fast2x     hardware twice as fast (twice the packets per percent of CPU)
slow2x     hardware twice as slow
lag4x      achieved-rate time constant 4x the model's (about 0.37 s)
laghalf    achieved-rate time constant half a period (0.5 s)
hog15      a CPU hog takes 15% of the VR's CPU all the time
gradual    a knee that bends gradually into saturation (exponent 2; also grad-fast2x,
           grad-slow2x, grad-laghalf)
xen-int    the host puts whole percents in force (Xen's credit scheduler); the controller dithers
           (xen-grad: the same on the gradual knee)
========== ====================================================================

Settling (``worst_settling_periods``) is judged over every setpoint the plant can reach with caps
1..100: from the uncapped start (the hog run before the hog), the step to it and the step back;
on integer caps the judged rate is the trailing mean of :data:`DITHER_WINDOW` periods (and hog
recovery likewise), ``settle_window_periods`` in the JSON.

Scenarios, each run as one vectorised plant with one VR per grid setpoint
(independent hosts), starting uncapped (cap 100) with the plant settled:

*hold* (120 s, with the plant's noise): the setpoint is held from activation;
the **steady part** is 60..120 s.

*step* (180 s, noise-free plant): setpoint 50 kp/s until 60 s, the grid
setpoint from 60 to 120 s, 50 kp/s again from 120 s: a step from 50 to every
grid point and back.

*hog* (120 s, noise-free plant): the setpoint is held from activation; at 60 s
a CPU hog taking 15% more of the VR's CPU starts (on ``hog15`` the hog goes
from 15% to 30%).

The step and hog scenarios run without noise so that settling and recovery
measure the loop, not the jitter (which ``rel_rmse`` and the steady error
measure on the noisy hold run).

Metrics per controller and plant:

``lowest_held_kpps``
    Lowest grid setpoint from which every higher grid setpoint is held within
    5% (mean measured rate over the steady part).  ``null``: not even the highest.
``worst_settling_periods``
    Over both steps (to the grid point and back to 50) for every grid setpoint
    from ``lowest_held_kpps`` up: the worst number of control periods from the
    step until the VR's achieved rate stays within 10% of the new
    setpoint until the next step (1 = from the first period on).  ``null``:
    some step never settles.
``worst_steady_error``
    Worst relative error of the steady-part mean over the grid setpoints the
    plant can reach at all (between its rates at cap 1 and cap 100).
``rel_rmse``
    Mean relative RMSE (the paper's oscillation measure: RMSE around the mean,
    over the mean) of the measured rate over the steady part, for the grid
    setpoints from 20 to 95 kp/s; ``rel_rmse_fixed`` is Fixed Cap's on the same
    plant and setpoints and ``rel_rmse_vs_fixed`` the ratio.  ``rel_rmse_exact_cap``
    is the open loop's at the cap that gives each setpoint on that plant (its curve
    known, :class:`ExactCap`): the plant's own noise at the setpoints, which no
    controller holding them goes below.  Fixed Cap can be under it where it holds
    the wrong rate (2x faster hardware: twice the setpoint, less drop noise).
``worst_hog_recovery_periods``
    For the grid setpoints held within 5% in the 10 s before the hog (and
    reachable with it): the worst number of periods the hog keeps the achieved
    rate out of 5% of the setpoint before it stays back within it (0 = never left).
    ``null``: some never come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

import xtc.models
from xtc.control.paper import FixedCap
from xtc.models import CapBounds, ModelFile
from xtc_lab.sim.experiments import ControllerSpec, controller_spec
from xtc_lab.sim.metrics import lowest_held_setpoint, recovery_periods, relative_error, relative_rmse, settling_periods
from xtc_lab.sim.plant import NOMINAL_TAU_S, CapacityCurve, Dom0Config, Plant, PlantConfig, VRConfig, udp
from xtc_lab.sim.run import LoopTrace, run_loop

__all__ = [
    "BenchPlant",
    "BENCH_PLANTS",
    "BENCH_CONTROLLERS",
    "DEFAULT_GRID_KPPS",
    "ScenarioTimes",
    "run_control_bench",
    "bench_table",
    "bench_plot",
    "add_control",
]

OFFERED_PPS = 100_000.0
DEFAULT_GRID_KPPS: tuple[float, ...] = (3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95)
BENCH_CONTROLLERS: tuple[str, ...] = ("pi", "deadbeat", "deadbeat-capmin3", "fixed", "xtc", "xtc-noprobe")
HOLD_BAND = 0.05
SETTLE_BAND = 0.10
HOG_BAND = 0.05
HOG_STEP = 0.15
STEP_BASE_KPPS = 50.0
RMSE_RANGE_KPPS = (20.0, 95.0)
STEADY_GOAL = 0.03


@dataclass(frozen=True)
class BenchPlant:
    """A plant variant: the VR's parameters and the quantum of the caps the host puts in force."""

    name: str
    description: str
    vr: VRConfig
    cap_step_percent: float | None = None


_NOMINAL_VR = VRConfig(traffic=udp(OFFERED_PPS), initial_cap_percent=100.0)
#: A curve that bends gradually into saturation (knee exponent 2 instead of Table 1's 4.7): at 90% of
#: the offered rate its elasticity d log y / d log cap is 0.19 (Table 1's curve: 0.39).
GRADUAL_CURVE = CapacityCurve(knee_sharpness=2.0)
_GRADUAL_VR = replace(_NOMINAL_VR, curve=GRADUAL_CURVE)
#: Periods of the trailing mean that judges settling and hog recovery on integer caps (the rate of
#: one period sits on one of two levels up to 2x apart at the lowest setpoints; 10 periods average
#: the dither to within 10% at every reachable grid setpoint).
DITHER_WINDOW = 10

BENCH_PLANTS: dict[str, BenchPlant] = {
    p.name: p
    for p in (
        BenchPlant("nominal", "calibrated to the paper (sharp knee)", _NOMINAL_VR),
        BenchPlant("fast2x", "hardware 2x faster", replace(_NOMINAL_VR, speed_factor=2.0)),
        BenchPlant("slow2x", "hardware 2x slower", replace(_NOMINAL_VR, speed_factor=0.5)),
        BenchPlant("lag4x", "time constant 4x the model's", replace(_NOMINAL_VR, tau_s=4 * NOMINAL_TAU_S)),
        BenchPlant("laghalf", "time constant half a period", replace(_NOMINAL_VR, tau_s=0.5)),
        BenchPlant("hog15", "15% CPU hog in the VR", replace(_NOMINAL_VR, hog_fraction=0.15)),
        BenchPlant("gradual", "gradual saturation knee", _GRADUAL_VR),
        BenchPlant("grad-fast2x", "gradual knee, hardware 2x faster", replace(_GRADUAL_VR, speed_factor=2.0)),
        BenchPlant("grad-slow2x", "gradual knee, hardware 2x slower", replace(_GRADUAL_VR, speed_factor=0.5)),
        BenchPlant("grad-laghalf", "gradual knee, time constant half a period", replace(_GRADUAL_VR, tau_s=0.5)),
        BenchPlant("xen-int", "integer caps (Xen)", _NOMINAL_VR, cap_step_percent=1.0),
        BenchPlant("xen-grad", "integer caps, gradual knee", _GRADUAL_VR, cap_step_percent=1.0),
    )
}


@dataclass(frozen=True)
class ScenarioTimes:
    """Timeline of the scenarios, seconds (whole control periods of 1 s)."""

    steady_from_s: int = 60
    disturb_at_s: int = 120
    end_s: int = 180
    settle_plant_s: float = 5.0

    def __post_init__(self) -> None:
        if not (0 < self.steady_from_s < self.disturb_at_s < self.end_s):
            raise ValueError("need 0 < steady_from_s < disturb_at_s < end_s")


class ExactCap:
    """The open loop at the cap that gives each setpoint on ``bp`` (its noise-free curve inverted by
    interpolation on caps 1..100): the reference for ``rel_rmse_exact_cap``.  Not a controller a host
    could run (it knows the plant)."""

    label = "exact-cap"

    def __init__(self, bp: BenchPlant):
        caps = np.concatenate([np.linspace(1.0, 10.0, 91), np.linspace(10.1, 100.0, 900)])
        y = bp.vr.curve.forwarded_pps(caps, OFFERED_PPS, bp.vr.speed_factor, bp.vr.hog_fraction)
        rows: list[tuple[float, float]] = []
        for c, yk in zip(caps.tolist(), np.asarray(y, dtype=float).tolist()):
            if not rows or yk / 1000.0 > rows[-1][0] + 1e-9:  # strictly rising rows only (saturation is flat)
                rows.append((yk / 1000.0, c))
        self.table = tuple(rows)

    def make(self, model: ModelFile) -> FixedCap:
        return FixedCap(CapBounds(1.0, 100.0), self.table)


def _hold_rmse(spec: Any, bp: BenchPlant, sps: np.ndarray, seed: int, tm: ScenarioTimes, model: ModelFile) -> float:
    """Mean relative RMSE of the hold run's steady part over the setpoints of ``RMSE_RANGE_KPPS``."""
    hold = _hold(spec, bp, sps, seed, tm, model, lambda f: None)
    y = hold.forwarded_pps[tm.steady_from_s : tm.disturb_at_s]
    inr = (sps >= RMSE_RANGE_KPPS[0] * 1000) & (sps <= RMSE_RANGE_KPPS[1] * 1000)
    return float(np.mean([relative_rmse(y[:, i]) for i in np.flatnonzero(inr)])) if np.any(inr) else math.nan


def _plant(bp: BenchPlant, n: int, seed: int, noise: bool = True) -> PlantConfig:
    vr = bp.vr if noise else replace(bp.vr, noise_rel=0.0, noise_drop_rel=0.0)
    vrs = tuple(replace(vr, dom0=i) for i in range(n))
    return PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=1e9),) * n, seed=seed)


def _reachable(bp: BenchPlant, setpoints_pps: np.ndarray, hog_extra: float = 0.0) -> np.ndarray:
    curve = bp.vr.curve
    hog = bp.vr.hog_fraction + hog_extra
    lo = float(curve.forwarded_pps(1.0, OFFERED_PPS, bp.vr.speed_factor, hog))
    hi = float(curve.forwarded_pps(100.0, OFFERED_PPS, bp.vr.speed_factor, hog))
    return (setpoints_pps >= lo) & (setpoints_pps <= hi)


def _loop(spec: ControllerSpec, bp: BenchPlant, n: int, seed: int, noise: bool, tm: ScenarioTimes, model: ModelFile,
         setpoints: Any, duration_s: float, prog: Callable[[float], None], events: Any = None) -> LoopTrace:
    return run_loop(
        _plant(bp, n, seed, noise), lambda: spec.make(model), setpoints, duration_s,
        cap_step_percent=bp.cap_step_percent, warmup_s=tm.settle_plant_s, events=events, progress=prog,
    )


def _hold(spec: ControllerSpec, bp: BenchPlant, sps: np.ndarray, seed: int, tm: ScenarioTimes, model: ModelFile, prog: Callable[[float], None]) -> LoopTrace:
    return _loop(spec, bp, sps.size, seed, True, tm, model, sps, tm.disturb_at_s, prog)


def _hog(spec: ControllerSpec, bp: BenchPlant, sps: np.ndarray, seed: int, tm: ScenarioTimes, model: ModelFile, prog: Callable[[float], None]) -> LoopTrace:
    hog_after = min(0.95, bp.vr.hog_fraction + HOG_STEP)

    def events(p: Plant, t_s: float) -> None:
        if abs(t_s - tm.steady_from_s) < 1e-6:
            for i in range(p.n):
                p.set_hog(i, hog_after)

    return _loop(spec, bp, sps.size, seed, False, tm, model, sps, tm.disturb_at_s, prog, events=events)


def _steps(spec: ControllerSpec, bp: BenchPlant, sps: np.ndarray, seed: int, tm: ScenarioTimes, model: ModelFile, prog: Callable[[float], None]) -> LoopTrace:
    base = np.full(sps.size, STEP_BASE_KPPS * 1000.0)

    def schedule(t_s: float) -> np.ndarray:
        return sps if tm.steady_from_s - 1e-6 <= t_s < tm.disturb_at_s - 1e-6 else base

    return _loop(spec, bp, sps.size, seed, False, tm, model, schedule, tm.end_s, prog)


def _evaluate(bp: BenchPlant, grid_kpps: Sequence[float], hold: Any, step: Any, hog: Any, tm: ScenarioTimes) -> dict[str, Any]:
    sps = np.asarray(grid_kpps, dtype=float) * 1000.0
    a, b = tm.steady_from_s, tm.disturb_at_s
    y_steady = hold.forwarded_pps[a:b]
    means = y_steady.mean(axis=0)
    errs = np.array([relative_error(means[i : i + 1], sps[i]) for i in range(sps.size)])
    rr = np.array([relative_rmse(y_steady[:, i]) for i in range(sps.size)])
    lowest = lowest_held_setpoint(sps, means, HOLD_BAND)
    reach = _reachable(bp, sps)
    worst_err = float(np.max(errs[reach])) if np.any(reach) else math.nan
    in_rmse = (sps >= RMSE_RANGE_KPPS[0] * 1000.0) & (sps <= RMSE_RANGE_KPPS[1] * 1000.0)
    rel_rmse = float(np.mean(rr[in_rmse])) if np.any(in_rmse) else math.nan

    w = DITHER_WINDOW if bp.cap_step_percent else 1
    settle_to: list[int | None] = []
    settle_back: list[int | None] = []
    settle_start: list[int | None] = []
    recov: list[int | None] = []
    base = STEP_BASE_KPPS * 1000.0
    for i in range(sps.size):
        settle_start.append(settling_periods(hog.clean_pps[:a, i], sps[i], SETTLE_BAND, window=w))
        settle_to.append(settling_periods(step.clean_pps[a:b, i], sps[i], SETTLE_BAND, window=w))
        settle_back.append(settling_periods(step.clean_pps[b:, i], base, SETTLE_BAND, window=w))
        if w == 1:
            recov.append(recovery_periods(hog.clean_pps[a:, i], sps[i], HOG_BAND))
        else:
            recov.append(settling_periods(hog.clean_pps[a:, i], sps[i], HOG_BAND, window=w))
    # Settling is judged on every setpoint the plant can reach with caps in range (and the step
    # back to 50 kp/s from each of them).
    sel = [i for i in range(sps.size) if reach[i]]
    vals = [settle_to[i] for i in sel] + [settle_back[i] for i in sel] + [settle_start[i] for i in sel]
    worst_settle = None if (not vals or any(v is None for v in vals)) else max(v for v in vals if v is not None)
    reach_hog = _reachable(bp, sps, HOG_STEP)
    before = hog.clean_pps[a - 10 : a].mean(axis=0)
    held = np.abs(before - sps) <= HOLD_BAND * sps
    sel_h = [i for i in range(sps.size) if held[i] and reach_hog[i]]
    if not sel_h:
        worst_recov: int | None = None
    else:
        rv = [recov[i] for i in sel_h]
        worst_recov = None if any(v is None for v in rv) else max(v for v in rv if v is not None)
    unheld = [float(sps[i] / 1000.0) for i in sel if errs[i] > STEADY_GOAL]
    return {
        "lowest_held_kpps": None if lowest is None else lowest / 1000.0,
        "worst_settling_periods": worst_settle,
        "worst_steady_error": worst_err,
        "rel_rmse": rel_rmse,
        "worst_hog_recovery_periods": worst_recov,
        "hog_recovery_setpoints": len(sel_h),
        "settle_window_periods": w,
        "reachable_not_within_3pct_kpps": unheld,
        "per_setpoint": {
            "mean_kpps": (means / 1000.0).tolist(),
            "relative_error": errs.tolist(),
            "relative_rmse": rr.tolist(),
            "settling_to_periods": settle_to,
            "settling_back_periods": settle_back,
            "settling_from_uncapped_periods": settle_start,
            "hog_recovery_periods": recov,
            "reachable": reach.tolist(),
        },
    }


def run_control_bench(
    seed: int = 1,
    grid_kpps: Sequence[float] = DEFAULT_GRID_KPPS,
    controllers: Sequence[str] = BENCH_CONTROLLERS,
    plants: Sequence[str] = tuple(BENCH_PLANTS),
    times: ScenarioTimes = ScenarioTimes(),
    model: ModelFile = xtc.models.PAPER_MODEL,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns a JSON-able dict (see the module docstring for the metrics).

    Parameters
    ----------
    seed : int
        Seed of the plants' noise (the same for every controller: common random numbers).
    grid_kpps : sequence of float
        Setpoint grid, kp/s (within 0..100, offered 100 kp/s).
    controllers : sequence of str
        Labels from :data:`xtc_lab.sim.experiments.PAPER_CONTROLLERS`.
    plants : sequence of str
        Names from :data:`BENCH_PLANTS`.
    """
    grid = [float(g) for g in grid_kpps]
    if not grid or any(not (0 < g < OFFERED_PPS / 1000.0) for g in grid):
        raise ValueError(f"grid setpoints must be within (0, {OFFERED_PPS / 1000:g}) kp/s")
    specs = [controller_spec(c) for c in controllers]
    for p in plants:
        if p not in BENCH_PLANTS:
            raise ValueError(f"unknown plant {p!r} (known: {', '.join(BENCH_PLANTS)})")
    sps = np.asarray(grid) * 1000.0
    results: dict[str, dict[str, Any]] = {s.label: {} for s in specs}
    total = len(specs) * len(plants) * 3
    done = 0
    for spec in specs:
        for pname in plants:
            bp = BENCH_PLANTS[pname]
            label = f"{spec.label} on {pname}"

            runs = []
            for scenario in (_hold, _steps, _hog):

                def prog(f: float, lb: str = label, d: int = done) -> None:
                    if progress is not None:
                        progress(lb, (d + f) / total)

                runs.append(scenario(spec, bp, sps, seed, times, model, prog))
                done += 1
            results[spec.label][pname] = _evaluate(bp, grid, runs[0], runs[1], runs[2], times)
    # Relative RMSE next to Fixed Cap's on the same plant.
    fixed = results.get("fixed")
    fixed_rr: dict[str, float] = {}
    if fixed is None and any(s.kind != "fixed" for s in specs):
        fx = controller_spec("fixed")
        fixed_rr = {p: _hold_rmse(fx, BENCH_PLANTS[p], sps, seed, times, model) for p in plants}
    else:
        fixed_rr = {p: fixed[p]["rel_rmse"] for p in plants} if fixed else {}
    exact_rr = {p: _hold_rmse(ExactCap(BENCH_PLANTS[p]), BENCH_PLANTS[p], sps, seed, times, model) for p in plants}
    for lab in results:
        for pname in plants:
            r = results[lab][pname]
            fr = fixed_rr.get(pname, math.nan)
            r["rel_rmse_fixed"] = fr
            r["rel_rmse_exact_cap"] = exact_rr[pname]
            r["rel_rmse_vs_fixed"] = r["rel_rmse"] / fr if fr and math.isfinite(fr) and fr > 0 else math.nan
    if progress is not None:
        progress("control bench done", 1.0)
    return {
        "benchmark": "control",
        "seed": seed,
        "model": model.name,
        "offered_kpps": OFFERED_PPS / 1000.0,
        "grid_kpps": grid,
        "controllers": [s.label for s in specs],
        "plants": {p: BENCH_PLANTS[p].description for p in plants},
        "scenarios": {
            "hold": f"setpoint held from activation (cap 100), plant noise on; steady part {times.steady_from_s}..{times.disturb_at_s} s",
            "hog": f"noise-free; setpoint held from activation; +{HOG_STEP:.0%} CPU hog from {times.steady_from_s} s to {times.disturb_at_s} s",
            "step": f"noise-free; {STEP_BASE_KPPS:g} kp/s until {times.steady_from_s} s, grid setpoint until {times.disturb_at_s} s, "
            f"{STEP_BASE_KPPS:g} kp/s until {times.end_s} s",
            "bands": {"held": HOLD_BAND, "settled": SETTLE_BAND, "hog_recovered": HOG_BAND},
            "rel_rmse_range_kpps": list(RMSE_RANGE_KPPS),
        },
        "results": results,
    }


_METRICS = (
    ("lowest_held_kpps", "lowest held", "{:g}"),
    ("worst_settling_periods", "settle", "{:d}"),
    ("worst_steady_error", "ss err", "{:.1%}"),
    ("rel_rmse", "rel RMSE", "{:.3f}"),
    ("rel_rmse_vs_fixed", "vs fixed", "{:.2f}"),
    ("rel_rmse_exact_cap", "exact cap", "{:.3f}"),
    ("worst_hog_recovery_periods", "hog recov", "{:d}"),
)


def _cell(v: Any, fmt: str) -> str:
    if v is None:
        return "never" if "d" in fmt else "-"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan"
    return fmt.format(v)


def bench_table(data: dict[str, Any]) -> str:
    """A readable table of :func:`run_control_bench`'s result."""
    head = f"{'controller':<18}{'plant':<9}" + "".join(f"{t:>12}" for _, t, _ in _METRICS)
    lines = [
        f"Control benchmark: UDP {data['offered_kpps']:g} kp/s offered, grid {data['grid_kpps'][0]:g}..{data['grid_kpps'][-1]:g} kp/s, seed {data['seed']}",
        "lowest held: lowest setpoint from which all higher are held within 5%; settle: worst periods to stay within 10%",
        "after a step 50 <-> setpoint; ss err: worst steady error over reachable setpoints; rel RMSE: mean for 20..95 kp/s;",
        "vs fixed: ratio to Fixed Cap's; hog recov: worst periods out of 5% after a +15% CPU hog starts ('never' = does not recover)",
        "",
        head,
        "-" * len(head),
    ]
    for lab, per_plant in data["results"].items():
        for pname, r in per_plant.items():
            lines.append(f"{lab:<18}{pname:<9}" + "".join(f"{_cell(r[k], f):>12}" for k, _, f in _METRICS))
    return "\n".join(lines)


def bench_plot(data: dict[str, Any], path: Any) -> None:
    """Write a PNG summary: one panel per metric, grouped bars per plant and controller."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ctls = list(data["results"])
    plants = list(data["plants"])
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    x = np.arange(len(plants))
    w = 0.8 / max(1, len(ctls))
    for ax, (key, title, _) in zip(axes.flat, _METRICS):
        for j, c in enumerate(ctls):
            vals = []
            for p in plants:
                v = data["results"][c][p][key]
                vals.append(np.nan if v is None else float(v))
            ax.bar(x + (j - (len(ctls) - 1) / 2) * w, vals, w, label=c)
            # Mark "never"/"none" with a cross at the top.
            for k, v in enumerate(vals):
                if not np.isfinite(v):
                    ax.plot(x[k] + (j - (len(ctls) - 1) / 2) * w, 0, "kx")
        ax.set_title(title + (" (x = never / none)" if key in ("worst_settling_periods", "worst_hog_recovery_periods", "lowest_held_kpps") else ""))
        ax.set_xticks(x, plants, fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(ctls), fontsize=9)
    fig.suptitle(f"xtc bench control (seed {data['seed']})")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def add_control(sub: Any) -> None:
    """Add ``control`` to the ``xtc bench`` subcommands."""
    p = sub.add_parser("control", help="benchmark every controller on nominal and mismatched simulated plants")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--seed", type=int, default=1, help="noise seed (default 1)")
    p.add_argument("--grid-kpps", default=None, help="comma-separated setpoint grid, kp/s (default 3..95)")
    p.add_argument("--controllers", default=None, help=f"comma-separated subset of {','.join(BENCH_CONTROLLERS)}")
    p.add_argument("--plants", default=None, help=f"comma-separated subset of {','.join(BENCH_PLANTS)}")
    p.add_argument("--out", default="out/bench/control", help="directory for the PNG summary and JSON (default out/bench/control)")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=_run)


def _run(args: Any) -> int:
    import json
    import sys
    from pathlib import Path

    from xtc_lab.sim.experiments import StderrProgress, jsonable

    kw: dict[str, Any] = {"seed": args.seed}
    try:
        if args.grid_kpps:
            kw["grid_kpps"] = sorted(float(t) for t in args.grid_kpps.split(",") if t.strip())
        if args.controllers:
            kw["controllers"] = [t.strip() for t in args.controllers.split(",") if t.strip()]
        if args.plants:
            kw["plants"] = [t.strip() for t in args.plants.split(",") if t.strip()]
        progress = StderrProgress(enabled=not args.quiet)
        data = run_control_bench(progress=progress, **kw)
        progress.done()
    except ValueError as e:
        print(f"xtc bench control: {e}", file=sys.stderr)
        return 2
    data = jsonable(data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "control.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if not args.no_plot:
        bench_plot(data, out / "control.png")
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(bench_table(data))
        print(f"\nwrote {out / 'control.json'}" + ("" if args.no_plot else f", {out / 'control.png'}"))
    return 0
