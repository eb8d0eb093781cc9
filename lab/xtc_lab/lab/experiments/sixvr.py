"""Traffic differentiation between six VRs with one daemon (the paper's Figure 15 and Table 2).

The paper (section 7.3) runs six VRs, each forwarding one TCP flow, behind a Dom0 that forwards
about 78 kp/s in aggregate (about 13 kp/s per VR without XTC), then divides those 78 kp/s
unevenly with XTC: configuration A (10 kp/s for five VRs, 28 for the sixth) and B (22, 18, 14,
8, 8, 8).  Table 2: 77.97 kp/s aggregate without XTC, 74.96 with A, 75.49 with B (a loss of
about 4-5%), and the VRs with the highest setpoints fall short most.

Here six LXC VRs, each between its own generator and receiver, each with its own stream
(``--sixvr-traffic``):

* ``udp`` (the default): a steady 64-byte UDP stream (``udpsend``) of ``--sixvr-offered-pps``
  (default 30000, more than any setpoint).  The paper used TCP flows, which adapt their rate,
  where a UDP source keeps offering what the VR drops.  So that the host is the bottleneck, as
  Dom0 was, and one VR can still reach the largest share (28/78 of the aggregate) of its own
  offered rate, the forwarders do per-packet work (``--sixvr-work``, default 6000 iterations
  for UDP: on the 2-core development host six VRs then forward about 55-70 kp/s of 180
  offered, ~11 kp/s each, close to the paper's 78 and 13; with no work the host forwards well
  over 150 kp/s and one sender cannot push a VR past 28/78 of that).
* ``tcp``: one iperf3 TCP flow per VR (524-byte segments, one segment per packet; see
  :func:`xtc_lab.lab.traffic.start_tcp_stream`), as in the paper; no per-packet work by default.
  The flows adapt to what the host forwards (about 58 kp/s in aggregate on the development
  host, data segments and ACKs counted, as the daemon counts them), so the host is the
  bottleneck as Dom0 was.

1. Without XTC: every VR unlimited; per-VR rates and the aggregate.
2. Configuration A, then B: one ``xtc daemon`` controls all six, with setpoints = the paper's
   shares (out of 78) of the aggregate measured in step 1.
3. Without XTC again (the daemon stopped: every VR unlimited once more).  The development host
   is shared, and what it forwards drifts by several percent within minutes as other work comes
   and goes; the aggregate loss of A and B is therefore stated against the mean of steps 1 and 3
   (the runs without XTC that bracket them) and, beside it, against step 1 alone.

Per VR the mean over the last ``--sixvr-measure-s`` of each phase, the error to its setpoint,
the daemon's saturation flag (read every 2 s), where its frames were lost (its forwarder's socket
drops, CFS throttling, CPU: :mod:`xtc_lab.lab.drops`), the aggregate and its loss against step 1;
the forwarders' receive buffer is ``--sixvr-rcvbuf`` (see :data:`DEFAULT_RCVBUF_BYTES`); optionally (``--sixvr-ping-interval-s``) a ping
probe through every VR during each measurement (the paper's Figure 16).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from xtc_lab.lab import inputdrop
from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.drops import counter_delta, loss_snapshot, net_core_sysctls, vr_drops
from xtc_lab.lab.harness import controller_model, LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean, wait_with_progress, save_figure
from xtc_lab.lab.hog import vr_forwarder_pids
from xtc_lab.lab.probe import PingRun, start_ping
from xtc_lab.lab.traffic import start_tcp_stream, start_udp_stream

TITLE = "traffic differentiation between six VRs (configurations A and B) with one daemon"
PAPER = "Figure 15, Table 2"
N_VRS = 6
PAPER_AGGREGATE_KPPS = 78.0
#: The paper's setpoints, kp/s out of its 78 kp/s aggregate.
CONFIGS: dict[str, tuple[float, ...]] = {
    "A": (10.0, 10.0, 10.0, 10.0, 10.0, 28.0),
    "B": (22.0, 18.0, 14.0, 8.0, 8.0, 8.0),
}
#: Table 2: aggregate throughput (kp/s, mean and 95% confidence half-width).
PAPER_TABLE2 = {"without": (77.97, 0.07), "A": (74.96, 1.06), "B": (75.49, 0.85)}
TOLERANCE = 0.05
AGGREGATE_LOSS_GOAL = 0.03
#: Receive buffer of the forwarders' packet sockets, bytes (0: the kernel's default, 212992 bytes,
#: about 250 frames).  Measured with TCP (docs/results/2026-11-26-lab/sixvr-tcp/README.md): with the default a capped
#: forwarder's sockets drop 5-11% of the segments it receives (TCP's losses), so the VR forwards
#: 89-95% of what the host hands it and XTC's controller sees a VR held back by its cap; with
#: 2 MiB they drop none, the flows queue instead, the VR forwards 100% of what it is handed, the
#: controller takes it for a VR that forwards all it is offered and never raises its cap (the
#: anti-windup of ``xtc/control/laws.py``), and every VR ends 10-22% under its setpoint.  So the
#: default stays the kernel's.
DEFAULT_RCVBUF_BYTES = 0
#: Seconds between two readings of the daemon's saturation flag during a measurement.
SATURATION_POLL_S = 2.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sixvr")
    g.add_argument("--sixvr-traffic", choices=("udp", "tcp"), default="udp",
                   help="one UDP stream (udpsend, default) or one TCP flow (iperf3, as in the paper) per VR")
    g.add_argument("--sixvr-offered-pps", type=float, default=30_000.0,
                   help="UDP packets/s offered to each of the six VRs (default 30000; not used with tcp)")
    g.add_argument("--sixvr-work", type=int, default=None,
                   help="busy-work iterations per frame in the six forwarders (default 6000 with udp, 0 with tcp; "
                        "see the module doc)")
    g.add_argument("--sixvr-settle-s", type=float, default=None,
                   help="seconds to settle before each measurement (default 25; quick 8; without XTC 3)")
    g.add_argument("--sixvr-measure-s", type=float, default=None, help="seconds measured per phase (default 20; quick 4)")
    g.add_argument("--sixvr-ping-interval-s", type=float, default=None,
                   help="ping probe through every VR during each measurement, s between requests "
                        "(default 0.01; quick: 0, no probe)")
    g.add_argument("--sixvr-rcvbuf", type=int, default=DEFAULT_RCVBUF_BYTES,
                   help="receive buffer of the forwarders' packet sockets, bytes (default 0: the kernel's default, "
                        "about 250 frames; a larger one hides the cap from XTC's meter with TCP, see the module doc)")
    g.add_argument("--sixvr-model", default=None,
                   help="model file for XTC's controller (default xtc/models/lab.toml if present, else the paper's)")
    g.add_argument("--sixvr-early-drop", action="store_true",
                   help="ask for early drop with every activation (issue 48: the daemon's limiter drops a capped VR's "
                        "excess on its host-side vif); each phase then records what the limiters dropped and the "
                        "host's CPU")
    g.add_argument("--sixvr-no-lag-probe", action="store_true",
                   help="XTC's controller with [controller] lag_probe = false (the law without the lag probe, the "
                        "default before 2026-11-25; docs/results/2026-11-26-control-settling/control-settling.md, 'The lag probe')")


# ------------------------------------------------------------------------------ pure analysis
def scaled_setpoints(config: str, aggregate_pps: float) -> list[float]:
    """The paper's setpoints of ``config`` scaled from its 78 kp/s to ``aggregate_pps`` (pps, rounded to 10)."""
    if config not in CONFIGS:
        raise ValueError(f"unknown configuration {config!r}: choose from {', '.join(CONFIGS)}")
    if not aggregate_pps > 0:
        raise ValueError(f"aggregate_pps must be positive, got {aggregate_pps!r}")
    return [round(s / PAPER_AGGREGATE_KPPS * aggregate_pps, -1) for s in CONFIGS[config]]


def summarise_phase(per_vr_pps: list[float], setpoints_pps: list[float] | None,
                    aggregate_without_pps: float | None) -> dict[str, Any]:
    """Aggregate, per-VR errors and the aggregate's loss against ``aggregate_without_pps`` (no XTC)."""
    agg = sum(per_vr_pps)
    out: dict[str, Any] = {"per_vr_pps": per_vr_pps, "aggregate_pps": agg}
    if setpoints_pps is not None:
        if len(setpoints_pps) != len(per_vr_pps):
            raise ValueError("one setpoint per VR")
        errs = [(r - s) / s for r, s in zip(per_vr_pps, setpoints_pps)]
        out.update(setpoints_pps=setpoints_pps, rel_errors=errs, worst_error=max(abs(e) for e in errs),
                   within_tolerance=[abs(e) <= TOLERANCE for e in errs])
    if aggregate_without_pps:
        out["aggregate_loss"] = 1.0 - agg / aggregate_without_pps
    return out


def shortfalls(phase: dict[str, Any], caps_in_window: list[list[float]],
               tolerance: float = TOLERANCE) -> list[dict[str, Any]]:
    """The VRs of a phase that fell more than ``tolerance`` short of their setpoint, and why.

    ``caps_in_window`` holds each VR's recorded caps (percent of one CPU) during the phase's
    measurement.  ``at_cap_max``: the cap reached the largest, 100% of one CPU (99 or more), so
    XTC could give that VR no more.  Otherwise the cap was not what held it back (XTC's
    controller does not raise the cap of a VR that forwards all it is offered, see
    ``xtc/control/laws.py``): its stream was limited elsewhere.
    """
    out = []
    for i, (err, caps) in enumerate(zip(phase["rel_errors"], caps_in_window)):
        if err < -tolerance:
            top = max(caps, default=None)
            out.append({"vr": i + 1, "error": err, "cap_mean_percent": mean(caps) if caps else None,
                        "cap_max_percent": top, "at_cap_max": top is not None and top >= 99.0})
    return out


def caps_in_window(recording: dict[str, Any], vrs: list[str], t0_s: float, t1_s: float) -> list[list[float]]:
    """Each VR's recorded caps (percent of one CPU) in (t0, t1] of a :class:`Recorder` recording."""
    out = []
    for name in vrs:
        s = recording["series"][name]
        out.append([c for t, c in zip(s["t_s"], s["cap_percent"]) if t0_s < t <= t1_s and c is not None])
    return out


def cap_warnings(result: dict[str, Any]) -> list[str]:
    """What the recorded caps say is wrong with a run (empty when nothing is).

    Under XTC every VR must have a cap most of the time; without XTC none may have one.  A cap
    that cannot be read means libvirt was unreachable (e.g. libvirtd restarted by other work on
    the host): the daemon could not actuate either, so that phase's numbers are not XTC's.
    """
    out = []
    vrs, rec, ph = result["vrs"], result["recording"], result["phases"]
    checks = [("without", "without XTC (before)", False), *[(c, f"configuration {c}", True) for c in CONFIGS],
              ("without_after", "without XTC (after)", False)]
    for key, label, controlled in checks:
        p = ph.get(key)
        if p is None:
            continue
        caps = caps_in_window(rec, vrs, p["t0_s"], p["t1_s"])
        n = [sum(1 for t in rec["series"][v]["t_s"] if p["t0_s"] < t <= p["t1_s"]) for v in vrs]
        if controlled:
            bad = [f"VR{i + 1}" for i, (c, k) in enumerate(zip(caps, n)) if k and len(c) < 0.5 * k]
            if bad:
                out.append(f"{label}: no cap could be read for {', '.join(bad)} during most of the measurement "
                           "(libvirt unreachable, e.g. libvirtd restarted by other work on the host): the daemon "
                           "could not control them, so these numbers are not XTC's")
        else:
            bad = [f"VR{i + 1} ({max(c):.0f}%)" for i, c in enumerate(caps) if c]
            if bad:
                out.append(f"{label}: {', '.join(bad)} had a cap where none should be (the original was not "
                           "restored): these numbers are not those of unlimited VRs")
    return out


# ------------------------------------------------------------------------------ the run

def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    traffic = getattr(args, "sixvr_traffic", "udp")
    if traffic not in ("udp", "tcp"):
        raise ValueError(f"--sixvr-traffic {traffic!r}: want udp or tcp")
    offered = float(getattr(args, "sixvr_offered_pps", 30_000.0))
    work_arg = getattr(args, "sixvr_work", None)
    work = int(work_arg) if work_arg is not None else (6000 if traffic == "udp" else 0)
    settle_s = getattr(args, "sixvr_settle_s", None) or (8.0 if ctx.quick else 25.0)
    measure_s = getattr(args, "sixvr_measure_s", None) or (4.0 if ctx.quick else 20.0)
    ping_arg = getattr(args, "sixvr_ping_interval_s", None)
    ping_interval = float(ping_arg) if ping_arg is not None else (0.0 if ctx.quick else 0.01)
    if not 1_000 <= offered <= 500_000:
        raise ValueError(f"--sixvr-offered-pps {offered:g} out of range 1000..500000")
    if work < 0:
        raise ValueError(f"--sixvr-work {work} must be >= 0")
    if settle_s < 2 or measure_s < 2:
        raise ValueError(f"--sixvr-settle-s {settle_s:g} / --sixvr-measure-s {measure_s:g}: want at least 2 s each")
    if ping_interval and not 0.002 <= ping_interval <= 1.0:
        raise ValueError(f"--sixvr-ping-interval-s {ping_interval:g}: want 0 (no probe) or 0.002..1")
    rcvbuf = int(getattr(args, "sixvr_rcvbuf", DEFAULT_RCVBUF_BYTES) or 0)
    if rcvbuf and not 4096 <= rcvbuf <= 1 << 30:
        raise ValueError(f"--sixvr-rcvbuf {rcvbuf}: want 0 (the kernel's default) or 4096..{1 << 30} bytes")
    model = controller_model(getattr(args, "sixvr_model", None))
    free_settle = 3.0
    # ping may send more slowly than 1 / interval and so outlast measure_s: room for that (the
    # streams are stopped when the run ends anyway).
    total_s = 2 * (2 * (free_settle + measure_s) + len(CONFIGS) * (settle_s + measure_s)) + 40
    result: dict[str, Any] = {"title": TITLE, "paper": PAPER, "paper_table2_kpps": PAPER_TABLE2,
                              "paper_configs_kpps": CONFIGS, "traffic": traffic,
                              "offered_pps_per_vr": offered if traffic == "udp" else None, "work_iters": work, "model": model,
                              "lag_probe": not getattr(args, "sixvr_no_lag_probe", False), "settle_s": settle_s,
                              "measure_s": measure_s, "ping_interval_s": ping_interval, "tolerance": TOLERANCE,
                              "rcvbuf_bytes_asked": rcvbuf or None, "sysctl": net_core_sysctls(),
                              "load_avg_1m_start": round(os.getloadavg()[0], 2), "phases": {},
                              "early_drop": bool(getattr(args, "sixvr_early_drop", False))}
    ctx.say(f"building {N_VRS} VRs (forwarder work {work} iterations per frame, receive buffer "
            f"{rcvbuf or 'the kernel default'})")
    with experiment_lab(result, 0) as (lab, workdir, caps), ExitStack() as streams:
        for _ in range(N_VRS):
            lab.add_vr(work_iters=work, rcvbuf_bytes=rcvbuf or None)
        vrs = lab.vrs
        pids = {vr.name: vr_forwarder_pids(lab, vr)[0] for vr in vrs}
        vifs = {vr.name: vr.vifs for vr in vrs}
        for vr in vrs:
            if traffic == "udp":
                streams.enter_context(start_udp_stream(lab, vr, offered, duration_s=total_s))
            else:
                streams.enter_context(start_tcp_stream(lab, vr, duration_s=total_s))
        ctx.say(f"{N_VRS} UDP streams of {offered:.0f} pps started ({N_VRS * offered:.0f} pps offered in all)"
                if traffic == "udp" else f"{N_VRS} TCP flows started (iperf3, 524-byte segments)")
        with Recorder(vrs, dt_s=1.0, caps=caps) as rec:

            def measure(label: str, daemon: LabDaemon | None = None) -> dict[str, Any]:
                load_1m = os.getloadavg()[0]
                t0 = rec.mark(f"measure {label}")
                snap0 = loss_snapshot(vrs, pids, ())
                ed0, cpu0, m0 = inputdrop.early_drop_drops(vifs), inputdrop.host_cpu_ticks(), time.monotonic()
                pings: list[PingRun] = []
                if ping_interval:
                    pings = [start_ping(lab, vr.tg_ns, vr.tr_addr, interval_s=ping_interval, duration_s=measure_s)
                             for vr in vrs]
                flags: list[list[str | None]] = [[] for _ in vrs]
                if daemon is None:
                    wait_with_progress(measure_s, f"measuring {label}", ctx.say)
                else:  # the daemon's saturation flag, read every SATURATION_POLL_S
                    left = measure_s
                    while left > 1e-6:
                        step = min(SATURATION_POLL_S, left)
                        wait_with_progress(step, f"measuring {label}", lambda _m: None)
                        left -= step
                        for i, vr in enumerate(vrs):
                            flags[i].append(_saturated(daemon.call("status", vr=vr.name)))
                drops = vr_drops(counter_delta(snap0, loss_snapshot(vrs, pids, ())), vifs)
                ed1, cpu1, m1 = inputdrop.early_drop_drops(vifs), inputdrop.host_cpu_ticks(), time.monotonic()
                rtts = [p.result().summary() for p in pings]  # the rates below cover the probes' whole time
                t1 = rec.now()
                per_vr, offered_seen, cap_means = [], [], []
                for vr in vrs:
                    s = rec.series[vr.name]
                    per_vr.append(mean([r for t, r in zip(s.t_s, s.forwarded_pps) if t0 < t <= t1]))
                    offered_seen.append(mean([r for t, r in zip(s.t_s, s.offered_pps) if t0 < t <= t1]))
                    cs = [c for t, c in zip(s.t_s, s.cap_percent) if t0 < t <= t1 and c is not None]
                    cap_means.append(mean(cs) if cs else None)
                sd = [drops[vr.name]["socket_drop_pps"] for vr in vrs]
                ctx.say(f"   socket drops {', '.join(f'{x:.0f}' for x in sd)} pps; load {load_1m:.2f}")
                out = {"t0_s": t0, "t1_s": t1, "per_vr_pps": per_vr, "offered_pps": offered_seen,
                       "cap_percent": cap_means, "ping": rtts, "load_avg_1m": round(load_1m, 2),
                       "drops": [drops[vr.name] for vr in vrs], "backlog_drop_pps": drops["host"]["backlog_drop_pps"],
                       "limiter_dropped_pps": [inputdrop.drops_between(ed0[vr.name], ed1[vr.name]) / (m1 - m0)
                                               for vr in vrs],
                       "host_cpu_percent": inputdrop.host_cpu_percent(cpu0, cpu1, os.cpu_count() or 1)}
                if daemon is not None:
                    out["saturated"] = [max(set(f), key=f.count) if f else None for f in flags]
                    out["saturated_share"] = [sum(1 for x in f if x == "cap_max") / len(f) if f else 0.0 for f in flags]
                    # every flag's share of the readings (cap_max, cap_min, cap_slack)
                    out["flag_shares"] = [{k: f.count(k) / len(f) for k in sorted(set(f) - {None})} if f else {}
                                          for f in flags]
                return out

            ctx.say(f"-- without XTC: settle {free_settle:g} s, measure {measure_s:g} s")
            wait_with_progress(free_settle, "streams starting", ctx.say)
            m = measure("without XTC")
            without = {**m, **summarise_phase(m["per_vr_pps"], None, None)}
            result["phases"]["without"] = without
            agg0 = without["aggregate_pps"]
            ctx.say(f"   without XTC: {', '.join(f'{r / 1000:.1f}' for r in m['per_vr_pps'])} kp/s, "
                    f"aggregate {agg0 / 1000:.1f} kp/s of {sum(m['offered_pps']) / 1000:.1f} offered")
            raw: dict[str, tuple[dict[str, Any], list[float]]] = {}
            with LabDaemon(workdir / "xtc", lab.uri, [vr.name for vr in vrs], kind="xtc", model=model,
                           lag_probe=result["lag_probe"], cfs_period_us=ctx.cfs_period_us) as d:
                for i, cfg in enumerate(CONFIGS):
                    sps = scaled_setpoints(cfg, agg0)
                    ctx.say(f"-- configuration {cfg}: setpoints {', '.join(f'{s / 1000:.1f}' for s in sps)} kp/s; "
                            f"settle {settle_s:g} s, measure {measure_s:g} s")
                    rec.mark(f"configuration {cfg}")
                    for vr, sp in zip(vrs, sps):
                        if i == 0:
                            d.activate(vr.name, sp, early_drop=True if result["early_drop"] else None)
                        else:
                            d.setpoint(vr.name, sp)
                    wait_with_progress(settle_s, f"configuration {cfg} settling", ctx.say)
                    m = measure(f"configuration {cfg}", d)
                    raw[cfg] = (m, sps)
                    ph = summarise_phase(m["per_vr_pps"], sps, agg0)
                    ctx.say(f"   {cfg}: {', '.join(f'{r / 1000:.1f}' for r in m['per_vr_pps'])} kp/s "
                            f"(worst error {100 * ph['worst_error']:.1f}%), aggregate {ph['aggregate_pps'] / 1000:.1f} "
                            f"kp/s ({100 * ph['aggregate_loss']:.1f}% less than without XTC before)")
            ctx.say(f"-- without XTC again (daemon stopped): settle {free_settle:g} s, measure {measure_s:g} s")
            rec.mark("daemon stopped")
            wait_with_progress(free_settle, "caps restored", ctx.say)
            m = measure("without XTC, after")
            after = {**m, **summarise_phase(m["per_vr_pps"], None, agg0)}
            result["phases"]["without_after"] = after
            reference = (agg0 + after["aggregate_pps"]) / 2
            result["reference_aggregate_pps"] = reference
            ctx.say(f"   without XTC after: aggregate {after['aggregate_pps'] / 1000:.1f} kp/s "
                    f"({100 * (after['aggregate_pps'] / agg0 - 1):+.1f}% against before); reference "
                    f"{reference / 1000:.1f} kp/s")
            for cfg, (m, sps) in raw.items():
                result["phases"][cfg] = {**m, **summarise_phase(m["per_vr_pps"], sps, reference),
                                         "aggregate_loss_vs_before": 1.0 - sum(m["per_vr_pps"]) / agg0}
        result["recording"] = rec.to_json()
        result["vrs"] = [vr.name for vr in vrs]
        caps.close()
    return _outcome(result)


def _early_drop_md(result: Mapping[str, Any]) -> str:
    """Per phase: what the host handed the VRs, what early drop's limiters dropped, and the host's CPU."""
    rows = []
    for key, ph in result["phases"].items():
        if "limiter_dropped_pps" not in ph:
            continue
        hc = ph.get("host_cpu_percent") or {}
        rows.append((key, f"{sum(ph['offered_pps']):.0f}", f"{sum(ph['limiter_dropped_pps']):.0f}",
                     " / ".join(f"{x:.0f}" for x in ph["limiter_dropped_pps"]), f"{ph['aggregate_pps']:.0f}",
                     f"{hc.get('softirq', math.nan):.0f}", f"{hc.get('system', math.nan):.0f}",
                     f"{hc.get('idle', math.nan):.0f}", f"{ph.get('load_avg_1m', math.nan)}"))
    if not rows:
        return ""
    return (f"\nEarly drop {'asked for every VR' if result.get('early_drop') else 'off'} (issue 48): what the host "
            "handed the six VRs (host TX of their vifs), what the limiters (the eBPF bucket, or `tbf ed0:`) dropped before handing, "
            "and the host's CPU (percent of one CPU):\n\n"
            + markdown_table(["phase", "handed (pps)", "limiters dropped (pps)", "per VR", "forwarded (pps)",
                              "host softirq %", "host system %", "host idle %", "load"], rows) + "\n")


def _outcome(result: dict[str, Any]) -> Outcome:
    ph = result["phases"]
    w = ph["without"]
    wa = ph["without_after"]
    agg0 = w["aggregate_pps"]
    ref = result["reference_aggregate_pps"]
    per_vr_rows = []
    for i in range(N_VRS):
        row: list[Any] = [f"VR{i + 1}", f"{w['per_vr_pps'][i]:.0f}"]
        for cfg in CONFIGS:
            p = ph[cfg]
            row += [f"{CONFIGS[cfg][i]:g} → {p['setpoints_pps'][i]:.0f}", f"{p['per_vr_pps'][i]:.0f}",
                    f"{100 * p['rel_errors'][i]:+.1f}%", "-" if p["cap_percent"][i] is None else f"{p['cap_percent'][i]:.1f}",
                    _sat_cell(p, i)]
        per_vr_rows.append(row)
    agg_rows = [("without XTC (before)", f"{PAPER_TABLE2['without'][0]:.2f} ± {PAPER_TABLE2['without'][1]:.2f}", "-",
                 f"{agg0:.0f}", "-", "-")]
    for cfg in CONFIGS:
        paper, ci = PAPER_TABLE2[cfg]
        agg_rows.append((cfg, f"{paper:.2f} ± {ci:.2f}", f"{100 * (1 - paper / PAPER_TABLE2['without'][0]):.1f}%",
                         f"{ph[cfg]['aggregate_pps']:.0f}", f"{100 * ph[cfg]['aggregate_loss']:.1f}%",
                         f"{100 * ph[cfg]['aggregate_loss_vs_before']:.1f}%"))
    agg_rows.append(("without XTC (after)", "-", "-", f"{wa['aggregate_pps']:.0f}",
                     f"{100 * (1 - wa['aggregate_pps'] / ref):.1f}%", f"{100 * (1 - wa['aggregate_pps'] / agg0):.1f}%"))
    rtt_md = ""
    if w.get("ping"):
        rtt_rows = []
        for i in range(N_VRS):
            rtt_rows.append([f"VR{i + 1}"] + [f"{_ms(ph[k]['ping'][i]['avg_rtt_ms'])} ({100 * _nz(ph[k]['ping'][i]['loss_ratio']):.0f}%)"
                                              for k in ("without", *CONFIGS)])
        rtt_md = ("\nPing probe through each VR during each measurement (average RTT in ms, probe loss in brackets; "
                  "the paper's Figure 16, with TCP flows: at most about 70 ms):\n\n"
                  + markdown_table(["VR", "without XTC (before)", *[f"configuration {c}" for c in CONFIGS]], rtt_rows) + "\n")
    if result.get("traffic", "udp") == "udp":
        traffic_md = (f"Six LXC VRs, each offered {result['offered_pps_per_vr']:.0f} pps of 64-byte UDP "
                      f"({N_VRS * result['offered_pps_per_vr']:.0f} pps in all; the paper used one TCP flow per VR)")
    else:
        traffic_md = ("Six LXC VRs, each forwarding one TCP flow (iperf3, 524-byte segments, one segment per packet; "
                      "forwarded = data segments and ACKs, as the paper's)")
    short_lines = []
    for cfg in CONFIGS:
        caps = caps_in_window(result["recording"], result["vrs"], ph[cfg]["t0_s"], ph[cfg]["t1_s"])
        for sf in shortfalls(ph[cfg], caps):
            why = ("its cap reached the largest, 100% of one CPU, so XTC could give it no more; what it still lacked, "
                   "the host did not forward"
                   if sf["at_cap_max"] else
                   "its cap stayed below the largest: the cap did not hold it back (XTC does not raise the cap of a VR "
                   "that forwards all it is offered); its stream was limited elsewhere on the host")
            cap = "-" if sf["cap_mean_percent"] is None else f"{sf['cap_mean_percent']:.0f}%"
            short_lines.append(f"- configuration {cfg}, VR{sf['vr']}: {100 * sf['error']:+.1f}% (mean cap {cap}); {why}.")
    short_md = ("\nShort of the setpoint by more than 5%:\n\n" + "\n".join(short_lines) + "\n") if short_lines else ""
    warnings = result["warnings"] = cap_warnings(result)
    warn_md = "".join(f"\n**Warning:** {w}.\n" for w in warnings)
    md = f"""# Traffic differentiation between six VRs ({PAPER})
{warn_md}
{traffic_md}, forwarders doing {result['work_iters']} busy-work iterations per frame
(socket receive buffer {result.get('rcvbuf_bytes_asked') or 'the kernel default'}{'' if not result.get('rcvbuf_bytes_asked') else ' bytes'};
1-minute load average {result.get('load_avg_1m_start', '?')} at the run's start), so that the host is the
bottleneck as the paper's Dom0 was.  **Without XTC the host forwarded {agg0 / 1000:.1f} kp/s in
aggregate** (the paper's Dom0: {PAPER_TABLE2['without'][0]:.2f}).  With XTC (one daemon, six instances) the paper's setpoints
are scaled by {agg0 / 1000:.1f} / {PAPER_AGGREGATE_KPPS:g}.  Means over the last {result['measure_s']:g} s of each phase,
after {result['settle_s']:g} s to settle.

Aggregate throughput (Table 2):

{markdown_table(['configuration', 'paper (kp/s)', 'paper: loss vs without', 'lab (pps)',
                 f'lab: loss vs without (mean of before and after, {ref:.0f} pps)', 'lab: loss vs without before'], agg_rows)}

Per VR (Figure 15): setpoint as paper kp/s → lab pps, achieved pps, error, mean cap (% of one CPU):

{markdown_table(['VR', 'without XTC (pps)', *[h for c in CONFIGS for h in (f'{c}: setpoint', f'{c}: achieved', f'{c}: error', f'{c}: cap', f'{c}: flag')]], per_vr_rows)}

"flag": the daemon's saturation flag (`saturated` in `xtc ctl status`), read every {SATURATION_POLL_S:g} s of the
measurement, with the share of readings that said so ("-": never): **cap_max** (the cap sat at 100% with the
rate more than 3% under the setpoint for 5 periods: the setpoint is out of reach), **cap_slack** (the rate more
than 3% under the setpoint for 5 periods while the VR used less than 0.8 of its cap: its traffic or the host,
not its cap, is the limit).  A VR counts as flagged when at least half of the readings said so.
{_drops_md(result)}
{_early_drop_md(result)}
{rtt_md}
Without XTC after A and B the host forwarded {wa['aggregate_pps'] / 1000:.1f} kp/s
({100 * (wa['aggregate_pps'] / agg0 - 1):+.1f}% against before): the drift of the shared host over the run.

Paper: XTC differentiates the VRs; the achieved rates fall a little short of the highest setpoints, and the aggregate
loses about 4-5% against the run without XTC.
{short_md}"""
    goals = []
    for cfg in CONFIGS:
        p = ph[cfg]
        goals.append(Goal(f"configuration {cfg}: every VR within 5% of its setpoint",
                          f"worst error {100 * p['worst_error']:.1f}% ({sum(p['within_tolerance'])}/{N_VRS} within)",
                          all(p["within_tolerance"])))
        if "saturated" in p:
            flagged = _flagged(p)
            missed = [f"VR{i + 1}" for i, ok in enumerate(p["within_tolerance"]) if not ok]
            unflagged = [v for v in missed if not flagged[int(v[2:]) - 1]]
            goals.append(Goal(f"configuration {cfg}: every VR within 5% of its setpoint or flagged by the daemon",
                              f"outside 5%: {', '.join(missed) or 'none'}; of those not flagged: {', '.join(unflagged) or 'none'}",
                              not unflagged))
        goals.append(Goal(f"configuration {cfg}: aggregate loss against no XTC under {100 * AGGREGATE_LOSS_GOAL:.0f}%",
                          f"{100 * p['aggregate_loss']:.1f}% ({p['aggregate_pps']:.0f} vs {ref:.0f} pps, the mean of the "
                          f"runs without XTC before and after; {100 * p['aggregate_loss_vs_before']:.1f}% vs before alone)",
                          p["aggregate_loss"] < AGGREGATE_LOSS_GOAL))

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np

        fig, axes = plt.subplots(1, len(CONFIGS) + 1, figsize=(13, 4),
                                 gridspec_kw={"width_ratios": [3] * len(CONFIGS) + [2]})
        x = np.arange(N_VRS)
        for ax, cfg in zip(axes, CONFIGS):
            p = ph[cfg]
            ax.bar(x - 0.27, [r / 1000 for r in w["per_vr_pps"]], 0.27, label="without XTC", color="tab:gray")
            ax.bar(x, [r / 1000 for r in p["per_vr_pps"]], 0.27, label="with XTC", color="tab:blue")
            ax.bar(x + 0.27, [s / 1000 for s in p["setpoints_pps"]], 0.27, label="setpoint", color="tab:orange")
            ax.set_xticks(x, [f"VR{i + 1}" for i in range(N_VRS)])
            ax.set_ylabel("kp/s")
            ax.set_title(f"({cfg.lower()}) configuration {cfg}", fontsize=10)
            ax.legend(fontsize=8)
        ax = axes[-1]
        labels = ["without", *CONFIGS, "without_after"]
        lab_k = [ph[k]["aggregate_pps"] / 1000 for k in labels]
        paper_k = [PAPER_TABLE2[k][0] if k in PAPER_TABLE2 else math.nan for k in labels]
        xx = np.arange(len(labels))
        ax.bar(xx - 0.2, [v / (ref / 1000) * 100 for v in lab_k], 0.4, label=f"lab ({ref / 1000:.1f} kp/s = 100)")
        ax.bar(xx + 0.2, [v / paper_k[0] * 100 for v in paper_k], 0.4, label="paper (77.97 kp/s = 100)")
        ax.set_xticks(xx, ["without\n(before)", *CONFIGS, "without\n(after)"])
        shown = [v for v in [*(x / (ref / 1000) * 100 for x in lab_k), *(x / paper_k[0] * 100 for x in paper_k)]
                 if math.isfinite(v)]
        ax.set_ylim(min(80.0, min(shown) - 5), max(105.0, max(shown) + 3))
        ax.set_ylabel("aggregate, % of without XTC")
        ax.set_title("Table 2: aggregate", fontsize=10)
        ax.legend(fontsize=8)
        save_figure(fig, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)


def _flag_shares(p: dict[str, Any], i: int) -> dict[str, float]:
    """VR ``i``'s flags and their shares of the readings (records before ``flag_shares``: cap_max only)."""
    if "flag_shares" in p:
        return dict(p["flag_shares"][i])
    share = (p.get("saturated_share") or [0.0] * (i + 1))[i]
    return {"cap_max": share} if share else {}


def _flagged(p: dict[str, Any]) -> list[bool]:
    """Per VR: flagged (any flag) in at least half of the measurement's readings."""
    return [sum(_flag_shares(p, i).values()) >= 0.5 for i in range(len(p["saturated"]))]


def _sat_cell(p: dict[str, Any], i: int) -> str:
    if p.get("saturated") is None:
        return "n/a"
    shares = _flag_shares(p, i)
    if not shares:
        return "-"
    return ", ".join(f"**{k}** ({100 * v:.0f}%)" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))


def _drops_md(result: dict[str, Any]) -> str:
    """Where each VR lost frames in each phase (socket drops, throttling, CPU), as a markdown section."""
    ph = result["phases"]
    keys = [k for k in ("without", *CONFIGS, "without_after") if k in ph and ph[k].get("drops")]
    if not keys:
        return ""
    rows = []
    for k in keys:
        p = ph[k]
        for i, d in enumerate(p["drops"]):
            rows.append([k if i == 0 else "", f"VR{i + 1}", f"{d['received_pps']:.0f}",
                         f"{d['socket_drop_pps']:.0f} ({100 * d['socket_drop_share']:.1f}%)",
                         f"{d['socket_drop_eth0_pps']:.0f}", f"{d['host_tx_drop_pps']:.0f}",
                         f"{d['cpu_share']:.2f}", f"{100 * d['throttled_share']:.0f}%",
                         f"{p['backlog_drop_pps']:.0f}" if i == 0 else "", f"{p['load_avg_1m']:.2f}" if i == 0 else ""])
    rb = ph[keys[0]]["drops"][0].get("rcvbuf_bytes")
    asked = result.get("rcvbuf_bytes_asked")
    return (f"""
Where each VR's frames were lost during each measurement (both directions: data segments in at eth0, ACKs at eth1);
the forwarders' packet sockets asked for {'the kernel default' if not asked else f'{asked} bytes'} of receive buffer
(`ss` reports rb {rb} bytes on eth0). "socket drops" = frames the forwarder's receive queue had no room for
(`ss -0 -m` in the VR's namespace, skmem `d`; in brackets the share of what the VR received), "data" = of those on
eth0 (the TCP data direction); "host tx drops" = the host's veth could not hand a frame to the VR; CPU = forwarder
CPU seconds per second; throttled = share of the VR's CFS periods (100 ms) throttled; backlog = the host's per-CPU
input backlog drops (pps); load = the 1-minute load average at the measurement's start.

""" + markdown_table(["phase", "VR", "received (pps)", "socket drops (pps)", "data (pps)", "host tx drops (pps)",
                      "CPU", "throttled", "backlog", "load"], rows) + "\n")


def _saturated(reply: dict[str, Any]) -> str | None:
    """The ``saturated`` member of a daemon's status reply (an instance object, maybe wrapped)."""
    if "saturated" in reply:
        return reply["saturated"]
    for v in reply.values():
        if isinstance(v, dict) and "saturated" in v:
            return v["saturated"]
    return None


def _ms(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"


def _nz(x: float | None) -> float:
    return 0.0 if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
