"""The XTC paper's experiments (section 7) on the simulated plant.

Each experiment is a pure function of its parameters and seed that returns an
:class:`ExperimentResult` (JSON-able data, a readable table, and a plot built on
demand).  ``xtc simulate <name>`` (:mod:`xtc_lab.sim.cli`) runs them and writes the
files.

Experiments
-----------
``sweep``      Setpoint sweep at 100 kp/s UDP (Figures 5, 9, 11, 13): achieved
               rate and relative RMSE vs setpoint for PI, dead-beat, dead-beat
               with cap_min 3 and the project's controller.
``fixedcap``   Fixed Cap (Table 1) vs feedback, with and without a 15% CPU hog
               (Figure 6).
``sixvr``      Six TCP VRs on one Dom0, configurations A and B (Figure 15,
               Table 2), Dom0 calibrated so the aggregate without XTC is 78 kp/s.
``tcpudp``     A TCP VR beside a UDP VR at 100 kp/s; XTC at 20 (UDP) / 80 (TCP)
               kp/s (Figure 17).

Every run is the daemon's own loop (:func:`xtc_lab.sim.run.run_loop`).

Actuation.  ``actuation="paper"``: the host puts Xen's whole percents in force, as on the paper's
prototype; the loop reports the cap in force to the controller, which carries the rounding into
its next command (:meth:`xtc.control.Controller.applied`), so it dithers between the two
neighbouring caps.  The paper's prototype did not: its controller, started at cap 1, could not
leave cap 1 at low setpoints (section 7.1), which gave its operating ranges (PI 20, dead-beat
15 kp/s).  The product's loop does not reproduce that failure.  ``actuation="exact"`` puts the
controller's cap in force as is (libvirt LXC/QEMU quotas, cgroups).

Why one file: it is the catalogue of the paper's experiments on the simulated plant, one short
pure function each over the same result type and plant set-up; a module per experiment would
hold a few dozen lines and import the rest from here.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import xtc.models
from xtc.models import ModelFile

from xtc.control import Controller

from .metrics import confidence_half_width, relative_rmse
from .plant import Dom0Config, Plant, PlantConfig, VRConfig, tcp, udp
from .run import LoopTrace, run_loop

__all__ = [
    "ControllerSpec",
    "CONTROLLER_ALIASES",
    "PAPER_CONTROLLERS",
    "controller_spec",
    "ExperimentResult",
    "RunSettings",
    "EXPERIMENTS",
    "sweep",
    "fixedcap",
    "sixvr",
    "tcpudp",
    "calibrate_dom0_capacity",
    "StderrProgress",
]

Progress = Callable[[str, float], None]


# ----------------------------------------------------------------------------------------------
# Controllers
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ControllerSpec:
    """A controller of :func:`xtc.control.make_controller` with a label.

    ``kind`` None is the project's own controller; ``lag_probe`` None its default (the lag probe
    on), False the law without it (``xtc-noprobe``).
    """

    label: str
    kind: str | None
    cap_min_percent: float | None = None
    lag_probe: bool | None = None

    def make(self, model: ModelFile = xtc.models.PAPER_MODEL) -> Controller:
        from xtc.control import make_controller

        return make_controller(model, kind=self.kind, cap_min_percent=self.cap_min_percent, lag_probe=self.lag_probe)


PAPER_CONTROLLERS: dict[str, ControllerSpec] = {
    s.label: s
    for s in (
        ControllerSpec("pi", "pi"),
        ControllerSpec("deadbeat", "deadbeat"),
        ControllerSpec("deadbeat-capmin3", "deadbeat", 3.0),
        ControllerSpec("fixed", "fixed"),
        ControllerSpec("xtc", None),
        ControllerSpec("xtc-noprobe", None, lag_probe=False),
    )
}


#: Older spellings of a label still accepted where a user may have written one (docs/design/names.md).
CONTROLLER_ALIASES: dict[str, str] = {"deadbeat+capmin3": "deadbeat-capmin3"}


def controller_spec(label: str) -> ControllerSpec:
    """The spec for a label of :data:`PAPER_CONTROLLERS` or :data:`CONTROLLER_ALIASES` (ValueError naming the
    known ones)."""
    try:
        return PAPER_CONTROLLERS[CONTROLLER_ALIASES.get(label, label)]
    except KeyError:
        raise ValueError(f"unknown controller {label!r} (known: {', '.join(PAPER_CONTROLLERS)})") from None


def _cap_step(actuation: str) -> float | None:
    """The quantum of the caps in force for an ``actuation`` ("paper": whole percents; "exact": none)."""
    if actuation not in ("paper", "exact"):
        raise ValueError(f"actuation must be 'paper' or 'exact', got {actuation!r}")
    return 1.0 if actuation == "paper" else None


def _run(spec: ControllerSpec, plant: PlantConfig, setpoints: Any, rs: "RunSettings", label: str,
         warmup_s: float = 0.0, early_drop: Sequence[bool] | None = None) -> LoopTrace:
    return run_loop(plant, lambda: spec.make(rs.model), setpoints, rs.duration_s,
                    cap_step_percent=_cap_step(rs.actuation), warmup_s=warmup_s,
                    progress=lambda f: rs.progress(label, f), early_drop=early_drop)


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------
@dataclass
class ExperimentResult:
    """What an experiment produced."""

    name: str
    params: dict[str, Any]
    data: dict[str, Any]
    table: str
    plot: Callable[[Any], None] | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"experiment": self.name, "params": self.params, **self.data}

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``<name>.json`` and ``<name>.png`` into ``out_dir``; returns the paths."""
        import json

        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = [d / f"{self.name}.json"]
        paths[0].write_text(json.dumps(jsonable(self.to_json()), indent=2) + "\n", encoding="utf-8")
        if self.plot is not None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=(11, 4.5))
            self.plot(fig)
            fig.tight_layout()
            png = d / f"{self.name}.png"
            fig.savefig(png, dpi=100)
            plt.close(fig)
            paths.append(png)
        return paths


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return None if not math.isfinite(f) else round(f, 6)
    if isinstance(x, np.integer):
        return int(x)
    return x


class StderrProgress:
    """A one-line progress display on stderr (``\\r`` updated, finished with a newline)."""

    def __init__(self, stream: Any = None, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._last = ""

    def __call__(self, label: str, fraction: float) -> None:
        if not self.enabled:
            return
        width = 30
        done = int(round(width * max(0.0, min(1.0, fraction))))
        line = f"\r{label:<40.40s} [{'#' * done}{'.' * (width - done)}] {int(100 * fraction):3d}%"
        if line != self._last:
            self.stream.write(line)
            self.stream.flush()
            self._last = line

    def done(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()
            self._last = ""


def _noop(_label: str, _f: float) -> None:
    return None


@dataclass(frozen=True)
class RunSettings:
    """What every experiment takes: the noise, the length and repetitions of its runs, the actuation.

    Attributes
    ----------
    seed : int
        Seed of the plant's noise.
    duration_s : float
        Seconds per run (the paper's 120).
    runs : int
        Repetitions per point, as independent hosts (different noise).
    actuation : str
        ``"paper"`` (whole-percent caps in force, as on Xen) or ``"exact"``.
    warmup_s : float or None
        Seconds at the start of each run left out of the means; None: the experiment's own default.
    model : ModelFile
        The log-cap model the controllers are designed from.
    progress : callable
        ``progress(label, fraction)``, called as the runs go.
    """

    seed: int = 1
    duration_s: float = 120.0
    runs: int = 3
    actuation: str = "paper"
    warmup_s: float | None = None
    model: ModelFile = xtc.models.PAPER_MODEL
    progress: Progress = _noop

    def skip_s(self, default_warmup_s: float) -> int:
        """Trace samples (seconds) left out of the means: the warm-up, checked against the run's length."""
        warmup = default_warmup_s if self.warmup_s is None else self.warmup_s
        skip = int(round(warmup))
        if not (0 <= skip < self.duration_s):
            raise ValueError("warmup_s must be within [0, duration_s)")
        return skip

    def params(self, default_warmup_s: float, **extra: Any) -> dict[str, Any]:
        """The JSON ``params`` of a result: these settings (the warm-up in force) and ``extra``."""
        return dict(seed=self.seed, duration_s=self.duration_s, runs=self.runs, actuation=self.actuation,
                    warmup_s=default_warmup_s if self.warmup_s is None else self.warmup_s,
                    model=self.model.name, **extra)


def _independent_plant(vrs: Sequence[VRConfig], seed: int, dom0: Dom0Config | None = None) -> PlantConfig:
    """One VR per Dom0 (independent hosts side by side, for vectorised runs)."""
    d = dom0 or Dom0Config(capacity_pps=1e9)
    vrs = tuple(replace(v, dom0=i) for i, v in enumerate(vrs))
    return PlantConfig(vrs=vrs, dom0s=tuple(d for _ in vrs), seed=seed)


def _setpoint_runs(
    spec: ControllerSpec, vr: VRConfig, setpoints_pps: np.ndarray, rs: RunSettings, skip_s: int, label: str,
) -> tuple[LoopTrace, dict[str, list[float]]]:
    """One ``vr`` per setpoint in ``setpoints_pps`` (each setpoint repeated ``runs`` times in a row), on
    independent hosts, under ``spec``; the trace and the mean and 95% CI over the runs at each setpoint.

    Parameters
    ----------
    setpoints_pps : numpy.ndarray
        Setpoints, packets/s, each repeated ``rs.runs`` times consecutively.
    skip_s : int
        Seconds (trace samples) at the start left out of the means and of the relative RMSE.

    Returns
    -------
    tuple
        The :class:`LoopTrace` and ``achieved_kpps``, ``achieved_ci_kpps`` (kp/s), ``relative_rmse``
        and ``relative_rmse_ci``, one value per setpoint.
    """
    plant = _independent_plant([vr] * setpoints_pps.size, rs.seed)
    tr = _run(spec, plant, setpoints_pps, rs, label)
    y = tr.forwarded_pps[skip_s:]
    mean = (y.mean(axis=0) / 1000.0).reshape(-1, rs.runs)
    rr = np.array([relative_rmse(y[:, j]) for j in range(setpoints_pps.size)]).reshape(-1, rs.runs)
    return tr, {
        "achieved_kpps": [float(np.mean(m)) for m in mean],
        "achieved_ci_kpps": [confidence_half_width(m) for m in mean],
        "relative_rmse": [float(np.mean(r)) for r in rr],
        "relative_rmse_ci": [confidence_half_width(r) for r in rr],
    }


# ----------------------------------------------------------------------------------------------
# sweep
# ----------------------------------------------------------------------------------------------
SWEEP_SETPOINTS_KPPS = (5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 95)
SWEEP_CONTROLLERS = ("pi", "deadbeat", "deadbeat-capmin3", "xtc")


def sweep(
    rs: RunSettings = RunSettings(),
    *,
    setpoints_kpps: Sequence[float] = SWEEP_SETPOINTS_KPPS,
    controllers: Sequence[str] = SWEEP_CONTROLLERS,
    offered_kpps: float = 100.0,
    initial_cap_percent: float = 1.0,
) -> ExperimentResult:
    """Setpoint sweep (Figures 5, 9, 11, 13): achieved rate and relative RMSE vs setpoint.

    One UDP flow at ``offered_kpps`` through one VR, ``rs.runs`` repetitions per setpoint
    (different noise), ``rs.duration_s`` per run; the first ``rs.warmup_s`` (default 10 s) are
    left out of the mean and the RMSE.
    """
    specs = [controller_spec(c) for c in controllers]
    sps = np.repeat(np.asarray(setpoints_kpps, dtype=float) * 1000.0, rs.runs)
    skip = rs.skip_s(10.0)
    out: dict[str, Any] = {"setpoints_kpps": list(setpoints_kpps), "controllers": {}}
    for ci, spec in enumerate(specs):
        vr = VRConfig(traffic=udp(offered_kpps * 1000.0), initial_cap_percent=initial_cap_percent)
        label = f"sweep {spec.label} ({ci + 1}/{len(specs)})"
        tr, summary = _setpoint_runs(spec, vr, sps, rs, skip, label)
        mean = tr.forwarded_pps[skip:].mean(axis=0).reshape(-1, rs.runs)
        caps = tr.cap_percent[skip:].mean(axis=0).reshape(-1, rs.runs)
        out["controllers"][spec.label] = {
            **summary,
            "mean_cap_percent": [float(np.mean(c)) for c in caps],
            "lowest_held_kpps": _lowest_within(setpoints_kpps, [float(np.mean(m)) / 1000.0 for m in mean], 0.10),
        }
    rs.progress("sweep done", 1.0)
    params = rs.params(10.0, offered_kpps=offered_kpps, initial_cap_percent=initial_cap_percent)
    out["paper"] = {"operating_range_kpps": {"pi": 20, "deadbeat": 15, "deadbeat-capmin3": 10}}
    table = _sweep_table(out)
    return ExperimentResult("sweep", params, out, table, plot=lambda fig: _sweep_plot(fig, out))


def _lowest_within(setpoints: Sequence[float], achieved: Sequence[float], tol: float) -> float | None:
    from .metrics import lowest_held_setpoint

    return lowest_held_setpoint(setpoints, achieved, tol)


def _sweep_table(out: dict[str, Any]) -> str:
    sps = out["setpoints_kpps"]
    names = list(out["controllers"])
    lines = ["Achieved rate (kp/s) and relative RMSE vs setpoint, UDP 100 kp/s offered", ""]
    head = f"{'setpoint':>9} " + " ".join(f"{n:>22}" for n in names)
    lines += [head, "-" * len(head)]
    for i, s in enumerate(sps):
        cells = []
        for n in names:
            c = out["controllers"][n]
            cells.append(f"{c['achieved_kpps'][i]:7.1f} ±{c['achieved_ci_kpps'][i]:4.1f}  rr {c['relative_rmse'][i]:5.3f}")
        lines.append(f"{s:>9g} " + " ".join(f"{x:>22}" for x in cells))
    lines.append("")
    lines.append(
        "lowest setpoint held within 10% (paper: PI 20, dead-beat 15, dead-beat+cap_min 3 10 kp/s): "
        + ", ".join(f"{n} {out['controllers'][n]['lowest_held_kpps']}" for n in names)
    )
    return "\n".join(lines)


def _sweep_plot(fig: Any, out: dict[str, Any]) -> None:
    sps = out["setpoints_kpps"]
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(sps, sps, "k:", label="setpoint")
    for n, c in out["controllers"].items():
        ax1.errorbar(sps, c["achieved_kpps"], yerr=c["achieved_ci_kpps"], marker="o", ms=3, capsize=2, label=n)
        ax2.errorbar(sps, c["relative_rmse"], yerr=c["relative_rmse_ci"], marker="o", ms=3, capsize=2, label=n)
    ax1.set_xlabel("throughput setpoint (kp/s)")
    ax1.set_ylabel("achieved throughput (kp/s)")
    ax2.set_xlabel("throughput setpoint (kp/s)")
    ax2.set_ylabel("relative RMSE")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    ax1.set_title("achieved (cf. Fig. 5a/9a/11a/13a)")
    ax2.set_title("oscillation (cf. Fig. 5b/9b/11b/13b)")


# ----------------------------------------------------------------------------------------------
# fixedcap
# ----------------------------------------------------------------------------------------------
FIXEDCAP_SETPOINTS_KPPS = (16, 32, 50, 65, 77, 85, 91, 94, 96, 98)


def fixedcap(
    rs: RunSettings = RunSettings(),
    *,
    controllers: Sequence[str] = ("fixed", "pi", "xtc"),
    hog_fraction: float = 0.15,
    initial_cap_percent: float = 1.0,
) -> ExperimentResult:
    """Fixed Cap (Table 1) vs feedback at the Table 1 setpoints, without and with a CPU hog (Figure 6).

    The first ``rs.warmup_s`` (default 10 s) of each run are left out of the means.
    """
    specs = [controller_spec(c) for c in controllers]
    sp_k = FIXEDCAP_SETPOINTS_KPPS
    sps = np.repeat(np.asarray(sp_k, dtype=float) * 1000.0, rs.runs)
    skip = rs.skip_s(10.0)
    out: dict[str, Any] = {"setpoints_kpps": list(sp_k), "hog_fraction": hog_fraction, "results": {}}
    total = 2 * len(specs)
    done = 0
    for hog in (0.0, hog_fraction):
        key = "no_hog" if hog == 0 else "hog"
        out["results"][key] = {}
        for spec in specs:
            vr = VRConfig(traffic=udp(100_000.0), initial_cap_percent=initial_cap_percent, hog_fraction=hog)
            label = f"fixedcap {key} {spec.label} ({done + 1}/{total})"
            _, out["results"][key][spec.label] = _setpoint_runs(spec, vr, sps, rs, skip, label)
            done += 1
    rs.progress("fixedcap done", 1.0)
    params = rs.params(10.0, hog_fraction=hog_fraction)
    lines = [f"Fixed Cap vs feedback at the Table 1 setpoints (UDP 100 kp/s); hog = {hog_fraction:.0%} of the VR's CPU", ""]
    names = [s.label for s in specs]
    head = f"{'setpoint':>9} | " + " ".join(f"{n + ' rr':>12}" for n in names) + " | " + " ".join(
        f"{n + ' hog':>14}" for n in names
    )
    lines += [head + "   (rr: relative RMSE without hog; hog: achieved kp/s with hog)", "-" * len(head)]
    for i, s in enumerate(sp_k):
        a = " ".join(f"{out['results']['no_hog'][n]['relative_rmse'][i]:>12.3f}" for n in names)
        b = " ".join(f"{out['results']['hog'][n]['achieved_kpps'][i]:>14.1f}" for n in names)
        lines.append(f"{s:>9g} | {a} | {b}")
    return ExperimentResult("fixedcap", params, out, "\n".join(lines), plot=lambda fig: _fixedcap_plot(fig, out))


def _fixedcap_plot(fig: Any, out: dict[str, Any]) -> None:
    sps = out["setpoints_kpps"]
    ax1, ax2 = fig.subplots(1, 2)
    for n, c in out["results"]["no_hog"].items():
        ax1.errorbar(sps, c["relative_rmse"], yerr=c["relative_rmse_ci"], marker="o", ms=3, capsize=2, label=n)
    ax2.plot(sps, sps, "k:", label="setpoint")
    for n, c in out["results"]["hog"].items():
        ax2.errorbar(sps, c["achieved_kpps"], yerr=c["achieved_ci_kpps"], marker="o", ms=3, capsize=2, label=n)
    ax1.set_title("relative RMSE, no disturbance (cf. Fig. 6a)")
    ax2.set_title(f"achieved with a {out['hog_fraction']:.0%} CPU hog (cf. Fig. 6b)")
    for ax in (ax1, ax2):
        ax.set_xlabel("throughput setpoint (kp/s)")
        ax.legend(fontsize=8)
    ax1.set_ylabel("relative RMSE")
    ax2.set_ylabel("achieved throughput (kp/s)")


# ----------------------------------------------------------------------------------------------
# Dom0 calibration, sixvr, tcpudp
# ----------------------------------------------------------------------------------------------
def _uncontrolled_aggregate_kpps(vrs: Sequence[VRConfig], capacity_pps: float, seed: int, duration_s: float, rx_work_fraction: float) -> float:
    plant = Plant(PlantConfig(vrs=tuple(vrs), dom0s=(Dom0Config(capacity_pps, rx_work_fraction),), seed=seed))
    plant.advance(10.0)
    m = plant.measure(duration_s)
    return float(m.forwarded_pps.sum() / 1000.0)


def calibrate_dom0_capacity(
    vrs: Sequence[VRConfig],
    target_kpps: float,
    seed: int = 1,
    duration_s: float = 60.0,
    rx_work_fraction: float = 0.6,
    tolerance: float = 0.005,
) -> float:
    """Dom0 capacity (traversals/s) at which the uncontrolled ``vrs`` forward ``target_kpps`` in aggregate.

    Secant iterations on the simulated aggregate (it grows about in proportion to
    the capacity); raises ValueError if the target cannot be reached.
    """
    c0 = 100_000.0
    a0 = _uncontrolled_aggregate_kpps(vrs, c0, seed, duration_s, rx_work_fraction)
    c1 = c0 * target_kpps / max(a0, 1e-9)
    for _ in range(8):
        a1 = _uncontrolled_aggregate_kpps(vrs, c1, seed, duration_s, rx_work_fraction)
        if abs(a1 - target_kpps) <= tolerance * target_kpps:
            return c1
        slope = (a1 - a0) / (c1 - c0) if c1 != c0 else a1 / c1
        if slope <= 0:
            break
        c0, a0 = c1, a1
        c1 = max(1_000.0, c1 + (target_kpps - a1) / slope)
    raise ValueError(f"cannot calibrate Dom0 capacity to an aggregate of {target_kpps} kp/s (got {a1:.1f} at {c1:.0f})")


def _shared_dom0_runs(
    group: Sequence[VRConfig], capacity_pps: float, spec: ControllerSpec | None,
    setpoints_kpps: Sequence[float] | None, rs: RunSettings, label: str,
    early_drop: Sequence[bool] | None = None, limiter_work_fraction: float | None = None,
) -> LoopTrace:
    """``rs.runs`` independent hosts, each the VRs of ``group`` on one Dom0, under ``spec`` (None: without XTC).

    Parameters
    ----------
    capacity_pps : float
        Each Dom0's capacity, traversals/s (the default ``rx_work_fraction``).
    setpoints_kpps : sequence of float or None
        The setpoint of each VR of ``group``, kp/s (not used without XTC).
    early_drop : sequence of bool, optional
        Per VR of ``group``: its activation asks for early drop (issue 48).
    limiter_work_fraction : float, optional
        Dom0's work per packet an early-drop limiter drops (default: :class:`Dom0Config`'s).

    Returns
    -------
    LoopTrace
        Host ``r``'s VRs are columns ``r * len(group)`` onwards, in the order of ``group``.
    """
    vrs = tuple(replace(v, dom0=r) for r in range(rs.runs) for v in group)
    dom0 = Dom0Config(capacity_pps) if limiter_work_fraction is None else Dom0Config(
        capacity_pps, limiter_work_fraction=limiter_work_fraction)
    plant = PlantConfig(vrs=vrs, dom0s=(dom0,) * rs.runs, seed=rs.seed)
    if spec is None:
        sps = np.full(len(vrs), np.nan)  # no XTC instance
    else:
        sps = np.tile(np.asarray(setpoints_kpps, dtype=float) * 1000.0, rs.runs)
    ed = None if early_drop is None else [bool(e) for _ in range(rs.runs) for e in early_drop]
    return _run(spec or controller_spec("fixed"), plant, sps, rs, label, warmup_s=5.0, early_drop=ed)


SIXVR_CONFIGS_KPPS: dict[str, tuple[float, ...]] = {
    "A": (10, 10, 10, 10, 10, 28),
    "B": (22, 18, 14, 8, 8, 8),
}


def sixvr(
    rs: RunSettings = RunSettings(),
    *,
    controllers: Sequence[str] = ("deadbeat-capmin3", "xtc"),
    target_aggregate_kpps: float = 78.0,
    tcp_max_kpps: float = 60.0,
    calibration_s: float = 60.0,
) -> ExperimentResult:
    """Six VRs with one TCP flow each on one Dom0: without XTC, and with configurations A and B.

    Figure 15 and Table 2.  Dom0's capacity is calibrated first so that the
    aggregate without XTC is ``target_aggregate_kpps`` (the paper's 77.97).
    Each run is repeated ``rs.runs`` times as independent hosts (different noise); the first
    ``rs.warmup_s`` (default 20 s) are left out of the means.
    """
    specs = [controller_spec(c) for c in controllers]
    tcp_vr = VRConfig(traffic=tcp(tcp_max_kpps * 1000.0))
    skip = rs.skip_s(20.0)
    rs.progress("sixvr: calibrating Dom0", 0.0)
    capacity = calibrate_dom0_capacity([tcp_vr] * 6, target_aggregate_kpps, seed=rs.seed, duration_s=calibration_s)

    def run(spec: ControllerSpec | None, setpoints_kpps: Sequence[float] | None, label: str) -> dict[str, Any]:
        tr = _shared_dom0_runs([tcp_vr] * 6, capacity, spec, setpoints_kpps, rs, label)
        per_vr = (tr.forwarded_pps[skip:].mean(axis=0) / 1000.0).reshape(rs.runs, 6)
        agg = per_vr.sum(axis=1)
        return {
            "setpoints_kpps": None if setpoints_kpps is None else list(setpoints_kpps),
            "achieved_kpps": per_vr.mean(axis=0).tolist(),
            "achieved_ci_kpps": [confidence_half_width(per_vr[:, i]) for i in range(6)],
            "aggregate_kpps": float(agg.mean()),
            "aggregate_ci_kpps": confidence_half_width(agg),
            "dom0_utilisation": float(tr.dom0_utilisation[skip:].mean()),
        }

    out: dict[str, Any] = {"dom0_capacity_pps": capacity, "without_xtc": run(None, None, "sixvr without XTC"), "with": {}}
    for spec in specs:
        out["with"][spec.label] = {}
        for cfg, sp in SIXVR_CONFIGS_KPPS.items():
            out["with"][spec.label][cfg] = run(spec, sp, f"sixvr {spec.label} config {cfg}")
    rs.progress("sixvr done", 1.0)
    out["paper"] = {"aggregate_kpps": {"without_xtc": 77.97, "A": 74.96, "B": 75.49}}
    params = rs.params(20.0, target_aggregate_kpps=target_aggregate_kpps, tcp_max_kpps=tcp_max_kpps)
    lines = [f"Six TCP VRs on one Dom0 (capacity calibrated to {capacity:.0f} traversals/s)", ""]
    w = out["without_xtc"]
    lines.append(f"{'without XTC':<28} per VR {_fmt(w['achieved_kpps'])}  aggregate {w['aggregate_kpps']:6.2f} ± {w['aggregate_ci_kpps']:.2f}  (paper 77.97)")
    for n, cfgs in out["with"].items():
        for cfg, r in cfgs.items():
            lines.append(
                f"{n + ' config ' + cfg:<28} per VR {_fmt(r['achieved_kpps'])}  aggregate {r['aggregate_kpps']:6.2f} ± {r['aggregate_ci_kpps']:.2f}"
                f"  (paper {out['paper']['aggregate_kpps'][cfg]})"
            )
            lines.append(f"{'':<28} setpts {_fmt(r['setpoints_kpps'])}")
    return ExperimentResult("sixvr", params, out, "\n".join(lines), plot=lambda fig: _sixvr_plot(fig, out))


def _fmt(xs: Sequence[float]) -> str:
    return " ".join(f"{x:5.1f}" for x in xs)


def _sixvr_plot(fig: Any, out: dict[str, Any]) -> None:
    axes = fig.subplots(1, 2, sharey=True)
    x = np.arange(6)
    names = list(out["with"])
    width = 0.8 / (len(names) + 2)
    for ax, cfg in zip(axes, ("A", "B")):
        ax.bar(x - width * (len(names) + 1) / 2, out["without_xtc"]["achieved_kpps"], width, label="without XTC")
        sp = out["with"][names[0]][cfg]["setpoints_kpps"] if names else None
        if sp:
            ax.bar(x - width * (len(names) - 1) / 2, sp, width, label="setpoint", color="0.7")
        for j, n in enumerate(names):
            r = out["with"][n][cfg]
            ax.bar(x + width * (j + 1 - (len(names) - 1) / 2), r["achieved_kpps"], width, yerr=r["achieved_ci_kpps"], label=f"with {n}")
        ax.set_title(f"configuration {cfg} (cf. Fig. 15)")
        ax.set_xticks(x, [f"VR{i + 1}" for i in x])
        ax.legend(fontsize=7)
    axes[0].set_ylabel("achieved throughput (kp/s)")


def tcpudp(
    rs: RunSettings = RunSettings(),
    *,
    controllers: Sequence[str] = ("deadbeat-capmin3", "xtc"),
    udp_kpps: float = 100.0,
    tcp_max_kpps: float = 100.0,
    setpoints_kpps: tuple[float, float] = (20.0, 80.0),
    target_aggregate_kpps: float = 100.0,
    calibration_s: float = 60.0,
    early_drop: bool = True,
    limiter_work_fraction: float | None = None,
) -> ExperimentResult:
    """A UDP VR (100 kp/s, never backs off) beside a TCP VR on one Dom0 (Figure 17).

    Dom0's capacity is calibrated so that the aggregate without XTC is
    ``target_aggregate_kpps`` (the paper's "approximately 100 kp/s" with 524-byte
    packets).  Then XTC holds the UDP VR at ``setpoints_kpps[0]`` and the TCP VR
    at ``setpoints_kpps[1]``.  Reports what Dom0 still spends on UDP packets the
    capped VR drops.  The first ``rs.warmup_s`` (default 20 s) are left out of the means.

    With ``early_drop`` (issue 48) each controller also runs with early drop asked for both
    VRs (``with_early_drop``): the daemon's own limiter policy on the plant's limiter, which
    drops the UDP VR's excess before delivery at ``limiter_work_fraction`` of a traversal per
    packet (default :class:`Dom0Config`'s) instead of ``rx_work_fraction``: Figure 17 three
    ways, beside the lab's ``xtc lab run tcpudp --tcpudp-phases``.
    """
    specs = [controller_spec(c) for c in controllers]
    if limiter_work_fraction is not None:
        Dom0Config(limiter_work_fraction=limiter_work_fraction)  # checked before the long part: PlantError names it
    pair = (VRConfig(traffic=udp(udp_kpps * 1000.0)), VRConfig(traffic=tcp(tcp_max_kpps * 1000.0)))
    skip = rs.skip_s(20.0)
    rs.progress("tcpudp: calibrating Dom0", 0.0)
    capacity = calibrate_dom0_capacity(pair, target_aggregate_kpps, seed=rs.seed, duration_s=calibration_s)
    rxw = Dom0Config().rx_work_fraction

    limw = Dom0Config().limiter_work_fraction if limiter_work_fraction is None else limiter_work_fraction

    def run(spec: ControllerSpec | None, label: str, early: bool = False) -> dict[str, Any]:
        tr = _shared_dom0_runs(pair, capacity, spec, setpoints_kpps, rs, label, early_drop=(True, True) if early else None,
                               limiter_work_fraction=limw)
        assert tr.delivered_pps is not None and tr.limiter_dropped_pps is not None
        fwd = (tr.forwarded_pps[skip:].mean(axis=0) / 1000.0).reshape(rs.runs, 2)
        to_vr = (tr.delivered_pps[skip:].mean(axis=0) / 1000.0).reshape(rs.runs, 2)
        lim = (tr.limiter_dropped_pps[skip:].mean(axis=0) / 1000.0).reshape(rs.runs, 2)
        # Dom0 traversals/s spent on UDP packets no VR forwards: delivered and dropped by the VR, or dropped by its limiter
        wasted = (to_vr[:, 0] - fwd[:, 0]) * rxw + lim[:, 0] * limw
        agg = fwd.sum(axis=1)
        return {
            "udp_limiter_dropped_kpps": float(lim[:, 0].mean()),
            "tcp_limiter_dropped_kpps": float(lim[:, 1].mean()),
            "dom0_utilisation": float(tr.dom0_utilisation[skip:].mean()),
            "udp_kpps": float(fwd[:, 0].mean()),
            "udp_ci_kpps": confidence_half_width(fwd[:, 0]),
            "tcp_kpps": float(fwd[:, 1].mean()),
            "tcp_ci_kpps": confidence_half_width(fwd[:, 1]),
            "aggregate_kpps": float(agg.mean()),
            "udp_delivered_to_vr_kpps": float(to_vr[:, 0].mean()),
            "dom0_wasted_kpps": float(wasted.mean()),
            "dom0_wasted_share": float((wasted * 1000.0 / capacity).mean()),
        }

    out: dict[str, Any] = {"dom0_capacity_pps": capacity, "setpoints_kpps": {"udp": setpoints_kpps[0], "tcp": setpoints_kpps[1]}}
    out["without_xtc"] = run(None, "tcpudp without XTC")
    out["with"] = {s.label: run(s, f"tcpudp {s.label}") for s in specs}
    if early_drop:
        out["with_early_drop"] = {s.label: run(s, f"tcpudp {s.label} + early drop", early=True) for s in specs}
        out["limiter_work_fraction"] = limw
        out["rx_work_fraction"] = rxw
    rs.progress("tcpudp done", 1.0)
    out["paper"] = {"without_xtc_aggregate_kpps": 100, "with_xtc_aggregate_kpps": 68, "tcp_gain_kpps": 16, "udp_loss_kpps": 49}
    w = out["without_xtc"]
    lines = [f"TCP VR beside a UDP VR at {udp_kpps:g} kp/s (Dom0 capacity calibrated to {capacity:.0f} traversals/s)", ""]
    lines.append(f"{'':<24}{'UDP':>8}{'TCP':>8}{'aggregate':>11}{'TCP gain':>10}{'UDP loss':>10}{'Dom0 wasted':>13}")
    lines.append(f"{'without XTC':<24}{w['udp_kpps']:8.1f}{w['tcp_kpps']:8.1f}{w['aggregate_kpps']:11.1f}{'':>10}{'':>10}{w['dom0_wasted_share']:12.0%}")
    for n, r in [*out["with"].items(), *((f"{k} + early drop", v) for k, v in out.get("with_early_drop", {}).items())]:
        r["tcp_gain_kpps"] = r["tcp_kpps"] - w["tcp_kpps"]
        r["udp_loss_kpps"] = w["udp_kpps"] - r["udp_kpps"]
        lines.append(
            f"{'with ' + n:<24}{r['udp_kpps']:8.1f}{r['tcp_kpps']:8.1f}{r['aggregate_kpps']:11.1f}"
            f"{r['tcp_gain_kpps']:10.1f}{r['udp_loss_kpps']:10.1f}{r['dom0_wasted_share']:12.0%}"
            f"   UDP handed {r['udp_delivered_to_vr_kpps']:.1f}, limiter dropped {r['udp_limiter_dropped_kpps']:.1f} kp/s"
        )
    lines.append(f"{'paper (XTC)':<24}{20:8.0f}{'':>8}{68:11.0f}{16:10.0f}{49:10.0f}")
    lines.append(f"setpoints: UDP {setpoints_kpps[0]:g} kp/s, TCP {setpoints_kpps[1]:g} kp/s")
    if early_drop:
        lines.append(f"early drop: a packet the limiter drops costs Dom0 {limw:g} of a traversal, one delivered to the VR "
                     f"{rxw:g} (the VR then drops it)")
    params = rs.params(20.0, udp_kpps=udp_kpps, tcp_max_kpps=tcp_max_kpps, setpoints_kpps=list(setpoints_kpps),
                       target_aggregate_kpps=target_aggregate_kpps, early_drop=early_drop,
                       limiter_work_fraction=limw if early_drop else None)
    return ExperimentResult("tcpudp", params, out, "\n".join(lines), plot=lambda fig: _tcpudp_plot(fig, out))


def _tcpudp_plot(fig: Any, out: dict[str, Any]) -> None:
    ax = fig.subplots(1, 1)
    groups = ([("without XTC", out["without_xtc"])] + [(f"with {n}", r) for n, r in out["with"].items()]
              + [(f"with {n} + early drop", r) for n, r in out.get("with_early_drop", {}).items()])
    x = np.arange(2)
    width = 0.8 / (len(groups) + 1)
    for j, (lab, r) in enumerate(groups):
        ax.bar(x + j * width, [r["udp_kpps"], r["tcp_kpps"]], width, yerr=[r["udp_ci_kpps"], r["tcp_ci_kpps"]], label=lab)
    sp = out["setpoints_kpps"]
    ax.bar(x + len(groups) * width, [sp["udp"], sp["tcp"]], width, color="0.7", label="setpoint")
    ax.set_xticks(x + width * len(groups) / 2, ["UDP VR", "TCP VR"])
    ax.set_ylabel("achieved throughput (kp/s)")
    ax.set_title("TCP beside UDP on one Dom0 (cf. Fig. 17)")
    ax.legend(fontsize=8)


EXPERIMENTS: dict[str, Callable[..., ExperimentResult]] = {
    "sweep": sweep,
    "fixedcap": fixedcap,
    "sixvr": sixvr,
    "tcpudp": tcpudp,
}
