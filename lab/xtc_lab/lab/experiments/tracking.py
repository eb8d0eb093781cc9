"""Setpoint tracking on a real VR: the paper's PI, dead-beat, dead-beat with cap_min, and XTC's controller.

The paper (section 7.1, Figures 5 and 9-14) steps the throughput setpoint of one VR that forwards a
100 kp/s UDP flow and reports, per controller, the lowest setpoint it can hold: PI from 20 kp/s,
dead-beat from 15 kp/s, dead-beat with cap_min = 3 from 10 kp/s.  Here one VR (LXC, or netns:
below) forwards a steady stream of 64-byte UDP packets (``--offered-pps``); for each controller an
``xtc daemon`` (``[controller] kind``) holds it at setpoints from 10% to 90% of the offered rate,
``--hold`` seconds each.  The forwarded rate is read from the host-side counters here, not from
the daemon.  Per setpoint: the mean over the second half of the hold (the steady state), its error,
and the settling time (control periods of 1 s until the mean of three 1 s rates stays within 5%).

``--work``/``--work-factor`` make the forwarder dearer or cheaper per frame (a VR on other hardware);
``--fractions`` picks the setpoints.  ``--vr-mode netns`` runs the same on a VR that is the
forwarder in a network namespace and a cgroup of its own, capped by the daemon's cgroup backend
(``cpu.cfs_quota_us``, or ``cpu.max`` on cgroup v2) instead of an LXC domain's ``vcpu_quota``.  With the same model file at every factor, the report's second
goal is the one of the lab's other-hardware check: every mean within 3% and every steady 1 s rate within
10% of its setpoint; the report also gives the plant's gain (forwarded pps per percent of cap) measured.

The controllers use the lab's fitted model (``xtc/models/lab.toml``, from ``xtc lab run capsweep``)
when there is one, else the paper's; ``--model`` picks another.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from pathlib import Path
from collections.abc import Callable
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.harness import (LAB_MODEL_FILE, controller_model, LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean,
                             measure_with_generator, save_figure, wait_with_progress)
from xtc_lab.lab.traffic import start_udp_stream
from xtc_lab.sim.experiments import CONTROLLER_ALIASES
from xtc_lab.sim.metrics import settling_periods

TITLE = "setpoint tracking with the paper's PI, dead-beat, dead-beat+cap_min and XTC's controller"
PAPER = "Figures 5, 9-14"
#: VR kinds (``--kind``; ``--vr-mode`` is the older spelling of lxc/netns).
KINDS = ("lxc", "netns", "qemu")

#: (label, [controller] kind, cap_min_percent, lag_probe: None for the daemon's default)
CONTROLLERS: dict[str, tuple[str, float | None, bool | None]] = {
    "pi": ("pi", None, None),
    "deadbeat": ("deadbeat", None, None),
    "deadbeat-capmin3": ("deadbeat", 3.0, None),
    "xtc": ("xtc", None, None),
    "xtc-noprobe": ("xtc", None, False),  # [controller] lag_probe = false
}
#: Lowest setpoint each controller holds in the paper (100 kp/s UDP; section 7.1), kp/s.
PAPER_LOWEST_KPPS = {"pi": 20.0, "deadbeat": 15.0, "deadbeat-capmin3": 10.0, "xtc": None, "xtc-noprobe": None}
FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
QUICK_FRACTIONS = (0.5, 0.2)
TOLERANCE = 0.05
#: The other-hardware goal: steady mean within this of the setpoint ...
MEAN_GOAL = 0.03
#: ... and every steady 1 s rate within this.
RATE_GOAL = 0.10
#: Settling judges the trailing mean of this many 1 s rates (one period's rate scatters by several percent).
SETTLING_WINDOW = 3


#: How the report names the VR of each ``--vr-mode``.
_VR_WORDS = {"lxc": "LXC VR (capped through libvirt's vcpu_quota)",
             "netns": "netns VR (the forwarder in a namespace and a cgroup of its own, capped through the cgroup)",
             "qemu": "QEMU VR (the guest kernel forwards; capped through libvirt's vcpu_quota)"}


def vr_mode_of(kind: str | None, vr_mode: str) -> str:
    """The VR of a tracking run from ``--kind`` (None: not given) and ``--vr-mode``.

    Raises
    ------
    ValueError
        Naming both options when they ask for different VRs.
    """
    if kind is None:
        return vr_mode
    if vr_mode != "lxc" and vr_mode != kind:
        raise ValueError(f"--kind {kind} and --vr-mode {vr_mode} ask for different VRs: give one of them")
    if kind not in KINDS:
        raise ValueError(f"--kind {kind}: tracking runs on {', '.join(KINDS)} VRs")
    return kind


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tracking")
    g.add_argument("--controllers", default=None,
                   help=f"comma-separated, from {', '.join(CONTROLLERS)} (default: all; quick: xtc)")
    g.add_argument("--hold", type=float, default=15.0, help="seconds per setpoint (default 15; quick: 8)")
    g.add_argument("--fractions", default=None,
                   help="comma-separated setpoints as fractions of the offered rate, each in (0, 1) "
                        f"(default {','.join(f'{f:g}' for f in FRACTIONS)}; quick: {','.join(f'{f:g}' for f in QUICK_FRACTIONS)})")
    g.add_argument("--model", default=None,
                   help="model file for the controllers (default xtc/models/lab.toml if present, else the paper's)")
    g.add_argument("--vr-mode", choices=("lxc", "netns"), default="lxc",
                   help="the VR: an LXC domain capped through libvirt (default), or the forwarder in a network "
                        "namespace and a cgroup of its own, capped through the cgroup (no libvirt)")


# ------------------------------------------------------------------------------ pure analysis
def parse_fractions(text: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    """Setpoint fractions from ``--fractions`` ("0.05,0.5,0.95"); ``default`` when None.

    Raises
    ------
    ValueError
        Naming ``--fractions``: not numbers, or one outside (0, 1).
    """
    if text is None:
        return default
    try:
        out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--fractions {text!r}: want comma-separated numbers, e.g. 0.05,0.5,0.95") from None
    if not out or not all(0.0 < f < 1.0 for f in out):
        raise ValueError(f"--fractions {text!r}: want one or more fractions of the offered rate, each in (0, 1)")
    return out


def summarise_step(t_s: list[float], rate_pps: list[float], t0_s: float, t1_s: float,
                   setpoint_pps: float, cap_percent: list[float | None] | None = None) -> dict[str, Any]:
    """Steady state of one setpoint step: mean over the second half of [t0, t1], its relative error, the
    scatter of the 1 s rates around it (standard deviation / setpoint: a limit cycle shows here, not in
    the mean), the share of those 1 s rates within :data:`RATE_GOAL` of the setpoint, the settling time
    and, given the caps, the plant's gain (mean forwarded pps / mean cap in force, pps per percent)."""
    half = t0_s + (t1_s - t0_s) / 2
    steady = [r for t, r in zip(t_s, rate_pps) if half <= t <= t1_s]
    m = mean(steady)
    within = [abs(r - setpoint_pps) <= RATE_GOAL * setpoint_pps for r in steady]
    caps = [c for t, c in zip(t_s, cap_percent or []) if half <= t <= t1_s and c is not None]
    gain = m / mean(caps) if steady and caps and mean(caps) > 0 else math.nan
    sd = math.sqrt(mean([(r - m) ** 2 for r in steady])) if len(steady) > 1 else math.nan
    # The recorder's 1 s samples are the daemon's control periods (period_s = 1).
    after = [r for t, r in zip(t_s, rate_pps) if t0_s < t <= t1_s]
    settling = settling_periods(after, setpoint_pps, TOLERANCE, window=SETTLING_WINDOW) if after else None
    err = (m - setpoint_pps) / setpoint_pps if steady else math.nan
    return {"setpoint_pps": setpoint_pps, "mean_pps": m, "rel_error": err, "rel_scatter": sd / setpoint_pps,
            "within_tolerance": bool(steady) and abs(err) <= TOLERANCE,
            "rates_within_10pct": sum(within) / len(within) if within else math.nan,
            "pps_per_cap_percent": gain,
            "settling_periods": settling}


def lowest_held(steps: list[dict[str, Any]]) -> float | None:
    """The lowest setpoint from which every higher one was held within the tolerance (pps)."""
    ok = None
    for s in sorted(steps, key=lambda s: -s["setpoint_pps"]):
        if not s["within_tolerance"]:
            break
        ok = s["setpoint_pps"]
    return ok


# ------------------------------------------------------------------------------ the run
class SampleTap:
    """The daemon's own view, one row per control period: a thread subscribed to its ``samples`` PUB
    (``xtc-samples/2``) keeps ``[t_s, t_unix_s, period_s, forwarded_pps, offered_pps, cap_percent]`` of ``vr``,
    ``t_s`` the receive time on ``clock`` (the recorder's, s).

    Beside the host-side 1 s rates it shows what the controller was told (a late period, a short read).
    """

    def __init__(self, endpoint: str, vr: str, clock: Callable[[], float]):
        import threading

        import zmq

        self.rows: list[list[float | None]] = []
        self._stop = threading.Event()
        self._sock = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, b"samples")
        self._sock.setsockopt(zmq.RCVTIMEO, 200)
        self._sock.connect(endpoint)
        self._vr = vr
        self._clock = clock
        self._thread = threading.Thread(target=self._run, name="sample-tap", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        from xtc.daemon.api import decode_samples

        while not self._stop.is_set():
            try:
                _topic, body = self._sock.recv_multipart()
            except zmq.Again:
                continue
            for smp in decode_samples(body):
                if smp["vr"] == self._vr:
                    self.rows.append([round(self._clock(), 3), smp["t_unix_s"], smp["period_s"], smp["forwarded_pps"], smp["offered_pps"],
                                      smp["cap_percent"]])

    def close(self) -> list[list[float | None]]:
        """Stop the thread; return the rows."""
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._sock.close(linger=0)
        return self.rows



def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    names = [CONTROLLER_ALIASES.get(c.strip(), c.strip())
             for c in (args.controllers or ("xtc" if ctx.quick else ",".join(CONTROLLERS))).split(",") if c.strip()]
    bad = [n for n in names if n not in CONTROLLERS]
    if bad:
        raise ValueError(f"unknown controllers {bad}: choose from {', '.join(CONTROLLERS)}")
    fractions = parse_fractions(getattr(args, "fractions", None), QUICK_FRACTIONS if ctx.quick else FRACTIONS)
    hold_s = min(args.hold, 8.0) if ctx.quick else args.hold
    if hold_s < 4:
        raise ValueError(f"--hold {hold_s:g}: want at least 4 s")
    model = controller_model(getattr(args, "model", None))
    total_s = len(names) * (len(fractions) * hold_s + 10) + 20
    result: dict[str, Any] = {"title": TITLE, "paper": PAPER, "offered_pps": ctx.offered_pps, "hold_s": hold_s,
                              "model": "xtc/models/lab.toml" if model == str(LAB_MODEL_FILE) else model, "tolerance": TOLERANCE, "fractions": list(fractions),
                              "work_iters": ctx.work_iters, "work_factor": ctx.work_factor,
                              "vr_mode": vr_mode_of(getattr(args, "kind", None), getattr(args, "vr_mode", "lxc")),
                              "controllers": {}}
    with experiment_lab(result, 1, work_iters=ctx.work_iters, work_factor=ctx.work_factor,
                        mode=result["vr_mode"], say=ctx.say) as (lab, workdir, caps):
        vr = lab.vrs[0]
        with start_udp_stream(lab, vr, ctx.offered_pps, duration_s=total_s):
            wait_with_progress(2.0, "stream starting", ctx.say)
            free_pps, offered_seen, sent = measure_with_generator(lab, vr, 3.0)
            ctx.say(f"unlimited VR forwards {free_pps:.0f} pps of {offered_seen:.0f} pps handed to it "
                    f"({sent:.0f} pps sent by the generator)")
            result["free_pps"], result["offered_seen_pps"] = free_pps, offered_seen
            result["generator_sent_pps"] = sent
            base = min(free_pps, offered_seen)
            setpoints = [round(f * base, -2) for f in fractions]
            for name in names:
                kind, cap_min, lag_probe = CONTROLLERS[name]
                ctx.say(f"-- controller {name}: setpoints {', '.join(f'{s / 1000:g}k' for s in setpoints)} pps, "
                        f"{hold_s:g} s each")
                load_before = os.getloadavg()[0]
                setting_before = _scheduler_setting(lab, vr)
                with LabDaemon(workdir / name, lab.uri, [vr if vr.kind == "netns" else vr.name], kind=kind, model=model,
                               cap_min_percent=cap_min, lag_probe=lag_probe, cfs_period_us=ctx.cfs_period_us) as d, Recorder([vr], dt_s=1.0, caps=caps) as rec:
                    tap = SampleTap(d.pub_endpoint, vr.name, rec.now)
                    steps_t = []
                    for i, sp in enumerate(setpoints):
                        t0 = rec.mark(f"setpoint {sp:.0f}")
                        if i == 0:
                            d.activate(vr.name, sp)
                        else:
                            d.setpoint(vr.name, sp)
                        wait_with_progress(hold_s, f"{name} at {sp / 1000:g} kp/s", ctx.say)
                        steps_t.append((t0, rec.now(), sp))
                    daemon_rows = tap.close()
                setting_after = _scheduler_setting(lab, vr)  # the daemon has stopped: it gave the caps back
                s = rec.series[vr.name]
                steps = [summarise_step(s.t_s, s.forwarded_pps, t0, t1, sp, s.cap_percent) for t0, t1, sp in steps_t]
                for st in steps:
                    ctx.say(f"   {name} {st['setpoint_pps']:.0f} pps: mean {st['mean_pps']:.0f} "
                            f"({100 * st['rel_error']:+.1f}%), settled after {st['settling_periods']} periods")
                result["controllers"][name] = {"kind": kind, "cap_min_percent": cap_min, "steps": steps,
                                               "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                                               "setting_before": setting_before, "setting_after": setting_after,
                                               "restored_exactly": (None if setting_before is None or setting_after is None
                                                                    else setting_before == setting_after),
                                               "lowest_held_pps": lowest_held(steps), "recording": rec.to_json(),
                                               "daemon_samples": {"fields": ["t_s", "t_unix_s", "period_s", "forwarded_pps",
                                                                             "offered_pps", "cap_percent"],
                                                                  "rows": daemon_rows}}
        caps.close()
    return _outcome(result, ctx)


def _scheduler_setting(lab: Any, vr: Any) -> dict[str, Any] | None:
    """A libvirt VR's scheduler parameters (its cap among them); None for a netns VR, or when they
    cannot be read (e.g. libvirtd restarted under the lab's connection: the run is kept, the check
    is left open)."""
    import libvirt

    from xtc_lab.lab.netlab import LabError

    if vr.kind == "netns":
        return None
    try:
        return dict(lab.domain(vr).schedulerParameters())
    except (LabError, libvirt.libvirtError):
        return None


def rerender(json_path: Path) -> Outcome:
    """The outcome of a recorded run (its JSON), with the analysis of this version recomputed."""
    import json

    result = json.loads(Path(json_path).read_text())
    for c in result["controllers"].values():
        s = next(iter(c["recording"]["series"].values()))
        marks = c["recording"]["marks"]
        ends = [m["t_s"] for m in marks[1:]] + [s["t_s"][-1]]
        c["steps"] = [summarise_step(s["t_s"], s["forwarded_pps"], m["t_s"], end, st["setpoint_pps"], s["cap_percent"])
                      for m, end, st in zip(marks, ends, c["steps"])]
        c["lowest_held_pps"] = lowest_held(c["steps"])
    return _outcome(result, None)


def _outcome(result: dict[str, Any], ctx: RunContext | None) -> Outcome:
    rows = []
    for name, c in result["controllers"].items():
        errs = [abs(s["rel_error"]) for s in c["steps"] if not math.isnan(s["rel_error"])]
        settle = [s["settling_periods"] for s in c["steps"] if s["settling_periods"] is not None]
        scatter = [s.get("rel_scatter", math.nan) for s in c["steps"]]
        scatter = [x for x in scatter if not math.isnan(x)]
        lowest = c["lowest_held_pps"]
        paper = PAPER_LOWEST_KPPS.get(name)
        rows.append((name, "-" if paper is None else f"{paper:g} kp/s of 100 ({paper:g}%)",
                     "none" if lowest is None else f"{lowest / 1000:.1f} kp/s ({100 * lowest / result['offered_pps']:.0f}%)",
                     f"{100 * max(errs):.1f}%" if errs else "-",
                     f"{100 * max(scatter):.1f}%" if scatter else "-",
                     f"{max(settle)} periods" if settle else "-",
                     f"{sum(1 for s in c['steps'] if s['settling_periods'] is None)}/{len(c['steps'])}"))
    per_step = []
    for name, c in result["controllers"].items():
        for s in c["steps"]:
            per_step.append((name, f"{s['setpoint_pps']:.0f}", f"{s['mean_pps']:.0f}", f"{100 * s['rel_error']:+.1f}%",
                             f"{100 * s.get('rel_scatter', math.nan):.1f}%",
                             f"{100 * s.get('rates_within_10pct', math.nan):.0f}%",
                             f"{s.get('pps_per_cap_percent', math.nan):.0f}",
                             "-" if s["settling_periods"] is None else f"{s['settling_periods']:.0f}"))
    fr = result.get("fractions", FRACTIONS)
    work = (f"Forwarder work: {result.get('work_iters', 0)} busy-work iterations per frame x factor "
            f"{result.get('work_factor', 1.0):g}.\n" if "work_iters" in result else "")
    md = f"""# Setpoint tracking on a real VR ({PAPER})

One {_VR_WORDS[result.get('vr_mode', 'lxc')]} forwarding {result['offered_pps']:.0f} pps of 64-byte UDP offered ({result['offered_seen_pps']:.0f} pps
reached the VR; unlimited it forwarded {result['free_pps']:.0f} pps); the daemon holds it at setpoints from
{100 * min(fr):g}% to {100 * max(fr):g}% of that, {result['hold_s']:g} s each, with each controller in turn (model: `{result['model']}`).
Steady state = mean of the 1 s rates over the second half of each hold; tolerance {100 * TOLERANCE:g}%.
Scatter = standard deviation of those 1 s rates / setpoint: a controller in a limit cycle can have a
small mean error and a large scatter. 1 s within 10% = share of the steady 1 s rates within 10% of the
setpoint. Gain = steady mean rate / mean cap in force (pps per percent of one CPU).
{work}
{markdown_table(['controller', 'paper: lowest setpoint held', 'lab: lowest held (within 5%, and all above)',
                 'largest steady error (mean)', 'largest scatter of 1 s rates (sd/setpoint)', 'slowest settling',
                 'never settled'], rows)}

Per setpoint:

{markdown_table(['controller', 'setpoint (pps)', 'mean (pps)', 'error', 'scatter', '1 s within 10%', 'gain (pps/%)',
                 'settling (periods)'], per_step)}
"""
    goals = []
    if "xtc" in result["controllers"]:
        steps = result["controllers"]["xtc"]["steps"]
        worst = max((abs(s["rel_error"]) for s in steps), default=math.nan)
        goals.append(Goal(f"XTC's controller holds every setpoint from {100 * min(s['setpoint_pps'] for s in steps) / result['offered_pps']:.0f}% "
                          f"to {100 * max(s['setpoint_pps'] for s in steps) / result['offered_pps']:.0f}% of the offered rate within 5%",
                          f"worst steady error {100 * worst:.1f}% over {len(steps)} setpoints",
                          all(s["within_tolerance"] for s in steps)))
        shares = [s.get("rates_within_10pct", math.nan) for s in steps]
        goals.append(Goal(f"XTC's controller: every steady mean within {100 * MEAN_GOAL:g}% and every steady 1 s rate "
                          f"within {100 * RATE_GOAL:g}% of its setpoint",
                          f"worst mean error {100 * worst:.1f}%; steady 1 s rates within 10%: "
                          f"{100 * mean(shares):.0f}% on average, worst setpoint {100 * min(shares):.0f}%",
                          worst <= MEAN_GOAL and all(x == 1.0 for x in shares)))

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ctrls = result["controllers"]
        fig, axes = plt.subplots(len(ctrls) + 1, 1, figsize=(10, 2.6 * (len(ctrls) + 1)), squeeze=False)
        for ax, (name, c) in zip(axes[:, 0], ctrls.items()):
            s = next(iter(c["recording"]["series"].values()))
            ax.plot(s["t_s"], [r / 1000 for r in s["forwarded_pps"]], label="forwarded", color="tab:blue")
            ts, sps = [], []
            for st, m in zip(c["steps"], c["recording"]["marks"]):
                ts.append(m["t_s"])
                sps.append(st["setpoint_pps"] / 1000)
            if ts:
                ax.step(ts + [s["t_s"][-1] if s["t_s"] else ts[-1]], sps + [sps[-1]], where="post",
                        color="black", ls="--", label="setpoint")
            ax.set_ylabel("kp/s")
            ax.set_title(f"{name}", fontsize=10)
            ax2 = ax.twinx()
            ax2.plot(s["t_s"], [float("nan") if c_ is None else c_ for c_ in s["cap_percent"]], color="tab:orange",
                     alpha=0.6, label="cap")
            ax2.set_ylabel("cap (% CPU)")
            ax.legend(loc="upper left", fontsize=8)
        ax = axes[-1, 0]
        for name, c in ctrls.items():
            ax.plot([s["setpoint_pps"] / 1000 for s in c["steps"]], [100 * s["rel_error"] for s in c["steps"]],
                    "o-", label=name)
        ax.axhspan(-100 * TOLERANCE, 100 * TOLERANCE, color="green", alpha=0.1)
        ax.set_xlabel("setpoint (kp/s)")
        ax.set_ylabel("steady error (%)")
        ax.set_xlim(left=0)
        ax.legend(fontsize=8)
        axes[-2, 0].set_xlabel("time (s)")
        save_figure(fig, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)


# ------------------------------------------------------------------------------ issue 49's tracking report
def vm_tracking_report(runs: list[tuple[str, dict[str, Any]]], controller: str = "xtc") -> dict[str, Any]:
    """The tracking report of issue 49 from ``tracking.json`` documents of one VR kind.

    ``runs`` are (model label, document) pairs, e.g. ``("default", doc)``; the report is
    ``{"kind", "accel", "runs": [{"model", "uncapped_kpps", "load_avg_1m", "rows": [{"setpoint_pps",
    "steady_mean_pps", "settle_periods"}, ...]}, ...]}`` with the rows of ``controller``.

    Raises
    ------
    ValueError
        The documents are of different VR kinds or accelerators, or one lacks ``controller``.
    """
    if not runs:
        raise ValueError("no tracking runs")
    kinds = {doc.get("vr_mode", "lxc") for _m, doc in runs}
    accels = {doc.get("accel") for _m, doc in runs}
    if len(kinds) != 1 or len(accels) != 1:
        raise ValueError(f"tracking runs of different VRs: kinds {sorted(kinds)}, accels {sorted(map(str, accels))}")
    out_runs = []
    for label, doc in runs:
        c = doc.get("controllers", {}).get(controller)
        if c is None:
            raise ValueError(f"tracking run '{label}' has no controller '{controller}'")
        out_runs.append({"model": label, "model_file": doc.get("model"), "controller": controller,
                         "uncapped_kpps": round(doc["free_pps"] / 1000.0, 3),
                         "generator_sent_kpps": (round(doc["generator_sent_pps"] / 1000.0, 3)
                                                 if doc.get("generator_sent_pps") is not None else None),
                         "load_avg_1m": c.get("load_avg_1m"), "caps_restored_exactly": c.get("restored_exactly"),
                         "rows": [{"setpoint_pps": s["setpoint_pps"], "steady_mean_pps": round(s["mean_pps"], 1),
                                   "settle_periods": s["settling_periods"]} for s in c["steps"]]})
    return {"kind": kinds.pop(), "accel": accels.pop(), "runs": out_runs}


def first_entry(after: list[float], setpoint: float, band: float = 0.05, window: int = 3) -> int | None:
    """Periods from a step to the end of the first trailing ``window`` mean within ``band`` of ``setpoint``
    (the controller's speed, whether or not the noise lets the rate stay there); None: never."""
    for i in range(window - 1, len(after)):
        m = statistics.mean(after[i - window + 1:i + 1])
        if abs(m - setpoint) <= band * setpoint:
            return i + 1
    return None


def step_noise_stats(doc: dict[str, Any], controller: str = "xtc") -> list[dict[str, Any]]:
    """Per setpoint step of ``controller`` in a ``tracking.json`` document, beside the experiment's
    settling rule, what bounds any judgement of a noisy plant: the standard deviation of the steady
    1 s rates (the second half of the hold), the standard error of the steady mean (sd / sqrt(n)),
    the first period at which the 3-sample mean enters the 5% band (:func:`first_entry`) and the
    caps in force (median and standard deviation, percent)."""
    c = doc["controllers"][controller]
    series = next(iter(c["recording"]["series"].values()))
    marks = [m["t_s"] for m in c["recording"]["marks"]] + [math.inf]
    out = []
    for k, s in enumerate(c["steps"]):
        t0, t1 = marks[k], min(marks[k + 1], marks[k] + doc["hold_s"])
        sp = s["setpoint_pps"]
        after = [r for t, r in zip(series["t_s"], series["forwarded_pps"]) if t0 < t <= t1]
        steady = [r for t, r in zip(series["t_s"], series["forwarded_pps"]) if t0 + (t1 - t0) / 2 <= t <= t1]
        caps = [cp for t, cp in zip(series["t_s"], series["cap_percent"]) if t0 + (t1 - t0) / 2 <= t <= t1 and cp is not None]
        sd = statistics.pstdev(steady) if len(steady) > 1 else math.nan
        out.append({"setpoint_pps": sp, "mean_error_percent": round(100 * s["rel_error"], 2),
                    "rate_sd_percent": round(100 * sd / sp, 1),
                    "mean_se_percent": round(100 * sd / sp / math.sqrt(len(steady)), 2), "n_steady": len(steady),
                    "settle_periods": s["settling_periods"], "first_entry_periods": first_entry(after, sp),
                    "cap_median_percent": round(statistics.median(caps), 2) if caps else None,
                    "cap_sd_percent": round(statistics.pstdev(caps), 2) if len(caps) > 1 else None})
    return out


def step_noise_table(steps: list[dict[str, Any]]) -> str:
    """:func:`step_noise_stats`'s rows as a Markdown table."""
    lines = ["| setpoint kp/s | mean error % | 1 s sd % | SE of mean % | settle (rule) | first entry | cap median % |",
             "|---|---|---|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {s['setpoint_pps'] / 1000:.1f} | {s['mean_error_percent']:+.1f} | {s['rate_sd_percent']} | "
                     f"{s['mean_se_percent']} | {s['settle_periods'] if s['settle_periods'] is not None else '-'} | "
                     f"{s['first_entry_periods'] if s['first_entry_periods'] is not None else '-'} | "
                     f"{s['cap_median_percent']} |")
    return "\n".join(lines)


def plot_vm_tracking(rep: dict[str, Any], path: Path, title: str,
                     noise: dict[str, dict[str, Any]] | None = None) -> None:
    """Issue 49's figure of a :func:`vm_tracking_report`: per run, the steady mean's error by setpoint
    (the goal: within 3%) and the settling periods (the goal: 5).  With ``noise`` (by the report's
    ``run``: ``{"steps": step_noise_stats(...)}``) the errors carry bars of 95% of the mean's noise
    and the first entry into the band is drawn beside the settling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for r in rep["runs"]:
        sp = [x["setpoint_pps"] / 1000 for x in r["rows"]]
        err = [100 * (x["steady_mean_pps"] - x["setpoint_pps"]) / x["setpoint_pps"] for x in r["rows"]]
        st = [x["settle_periods"] if x["settle_periods"] is not None else float("nan") for x in r["rows"]]
        if noise is None:
            a1.plot(sp, err, "o-", label=r["model"])
            a2.plot(sp, st, "o-", label=r["model"])
            continue
        steps = noise[r["run"]]["steps"]
        se = [1.96 * s["mean_se_percent"] for s in steps]
        first = [s["first_entry_periods"] if s["first_entry_periods"] is not None else float("nan") for s in steps]
        line = a1.errorbar(sp, err, yerr=se, fmt="o-", capsize=3, label=f"{r['run']} (bars: 95 % of the mean's noise)")
        a2.plot(sp, st, "o-", color=line[0].get_color(), label=f"{r['run']}: settled (rule)")
        a2.plot(sp, first, "s--", mfc="none", color=line[0].get_color(), label=f"{r['run']}: first entry")
    a1.axhspan(-3, 3, color="green", alpha=0.1, label="goal: within 3%")
    a1.set_ylabel("steady mean error (%)")
    a1.legend(fontsize=8)
    a2.axhline(5, color="green", ls="--", label="goal: 5 periods")
    a2.set_ylabel("settling (periods; gap = never)" if noise is None else "periods (gap = never)")
    a2.set_xlabel("setpoint (kp/s)")
    a2.legend(fontsize=8)
    a1.set_title(title, fontsize=10)
    save_figure(fig, path)


# ------------------------------------------------------------------------------ other hardware
def factor_summary(results: list[dict[str, Any]]) -> Outcome:
    """Compare XTC's tracking runs made at different forwarder work factors (same model file).

    Parameters
    ----------
    results
        ``tracking.json`` documents, each with ``work_factor`` and an ``xtc`` controller.

    Returns
    -------
    Outcome
        ``result`` = one row per factor (gain in pps per percent of cap, worst mean error, shares of
        1 s rates within 10%), the markdown table, a plot and one goal per factor.
    """
    rows, goals, table = [], [], []
    for r in sorted(results, key=lambda r: r.get("work_factor", 1.0)):
        steps = r["controllers"]["xtc"]["steps"]
        errs = [abs(s["rel_error"]) for s in steps]
        shares = [s["rates_within_10pct"] for s in steps]
        gains = sorted(s["pps_per_cap_percent"] for s in steps if not math.isnan(s["pps_per_cap_percent"]))
        series = r["controllers"]["xtc"].get("recording", {}).get("series", {})
        offered = next(iter(series.values()))["offered_pps"] if series else []
        short = sum(1 for o in offered if o < 0.9 * r["offered_pps"]) / len(offered) if offered else math.nan
        row = {"work_factor": r.get("work_factor", 1.0), "work_iters": r.get("work_iters", 0),
               "offered_pps": r["offered_pps"], "free_pps": r["free_pps"], "model": r["model"],
               "setpoints_pps": [s["setpoint_pps"] for s in steps],
               "setpoint_fractions": [s["setpoint_pps"] / min(r["free_pps"], r["offered_seen_pps"]) for s in steps],
               "rel_errors": [s["rel_error"] for s in steps], "shares_within_10pct": shares,
               "worst_abs_error": max(errs), "mean_abs_error": mean(errs), "mean_share_within_10pct": mean(shares),
               "min_share_within_10pct": min(shares),
               "median_gain_pps_per_cap_percent": gains[len(gains) // 2] if gains else math.nan,
               "offered_short_share": short,
               "load_avg_1m_at_start": r.get("host", {}).get("load_avg_1m"), "command": r.get("command")}
        rows.append(row)
        table.append((f"{row['work_factor']:g}", f"{row['work_iters']}", f"{row['median_gain_pps_per_cap_percent']:.0f}",
                      f"{row['free_pps']:.0f} / {row['offered_pps']:.0f}",
                      f"{100 * min(row['setpoint_fractions']):.0f}-{100 * max(row['setpoint_fractions']):.0f}%",
                      f"{100 * row['worst_abs_error']:.1f}%", f"{100 * row['mean_abs_error']:.1f}%",
                      f"{100 * row['mean_share_within_10pct']:.0f}% (worst {100 * row['min_share_within_10pct']:.0f}%)",
                      f"{100 * short:.0f}%", f"{row['load_avg_1m_at_start']}"))
        goals.append(Goal(f"factor {row['work_factor']:g}: every steady mean within {100 * MEAN_GOAL:g}%, every steady 1 s "
                          f"rate within {100 * RATE_GOAL:g}% of its setpoint",
                          f"worst mean error {100 * row['worst_abs_error']:.1f}%, 1 s rates within 10%: "
                          f"{100 * row['mean_share_within_10pct']:.0f}% (worst setpoint {100 * row['min_share_within_10pct']:.0f}%)",
                          row["worst_abs_error"] <= MEAN_GOAL and row["min_share_within_10pct"] == 1.0))
    ref = next((x for x in rows if x["work_factor"] == 1.0), None)
    for x in rows:
        x["gain_vs_factor_1"] = (x["median_gain_pps_per_cap_percent"] / ref["median_gain_pps_per_cap_percent"]
                                 if ref else math.nan)
    md = ("| work factor | busy-work iterations (x factor) | gain (pps per % cap, median) | unlimited / offered pps | "
          "setpoints (of the unlimited rate) | worst mean error | mean abs error | steady 1 s rates within 10% | "
          "1 s with offered < 90% (sender starved) | load (1 min) at start |\n|" + "---|" * 10 + "\n" + "\n".join("| " + " | ".join(t) + " |" for t in table) + "\n")

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        for x in rows:
            fr = [100 * f for f in x["setpoint_fractions"]]
            lab = f"factor {x['work_factor']:g} ({x['median_gain_pps_per_cap_percent']:.0f} pps/%)"
            a1.plot(fr, [100 * e for e in x["rel_errors"]], "o-", label=lab)
            a2.plot(fr, [100 * s for s in x["shares_within_10pct"]], "o-", label=lab)
        a1.axhspan(-100 * MEAN_GOAL, 100 * MEAN_GOAL, color="green", alpha=0.1)
        a1.set_ylabel("steady mean error (%)")
        a1.legend(fontsize=8)
        a2.set_ylabel("1 s rates within 10% (%)")
        a2.set_xlabel("setpoint (% of the unlimited rate)")
        a2.set_ylim(-5, 105)
        save_figure(fig, path)

    return Outcome(result={"factors": rows}, report_md=md, plot=plot, goals=goals)


if __name__ == "__main__":  # python -m xtc_lab.lab.experiments.tracking OUT_DIR RUN.json...
    import json
    import sys

    out = Path(sys.argv[1])
    o = factor_summary([json.loads(Path(p).read_text()) for p in sys.argv[2:]])
    out.mkdir(parents=True, exist_ok=True)
    (out / "labcost.json").write_text(json.dumps(o.result, indent=1) + "\n")
    (out / "labcost-table.md").write_text(o.report_md + "\n" + "\n".join(
        f"- {g.goal}: {g.measured} -- {'met' if g.met else 'NOT met'}" for g in o.goals) + "\n")
    o.plot(out / "labcost.png")
    print(o.report_md)
