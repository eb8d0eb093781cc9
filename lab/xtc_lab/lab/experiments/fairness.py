"""Fairness between a VR with one TCP flow and a VR with n flows, without and with XTC (the paper's Figure 18).

The paper (section 7.4) gives one VR 1 TCP flow and the other n flows and measures the
*min-max ratio* (the lower VR throughput over the higher; 1 = fair).  Without XTC, Xen's
round-robin I/O lets the VR with more flows take more (the ratio falls as n grows); with XTC,
setpoints of half the aggregate measured without XTC keep the ratio near 1, at a small cost
in aggregate throughput (Figure 18 (a) and (b)).

Here two LXC VRs of the lab share the host kernel (the lab's Dom0): VR 1 forwards one iperf3
TCP flow, VR 2 ``n`` parallel flows (``--fairness-flows``, default 1, 2, 4, 8; quick: 1 and 4),
all with the paper's 524-byte segments, one segment per packet (see :mod:`xtc_lab.lab.traffic`).
For each ``n``: without XTC (both VRs unlimited), then with an ``xtc daemon`` holding both VRs
at half of that aggregate; each measured for ``--fairness-hold`` seconds (the XTC phase after
the controllers settle), then the VRs are deactivated (their caps restored).

Throughput is what XTC controls: packets/s forwarded by a VR, summed over both vifs (data
segments and ACKs).  Each VR's CPU (libvirt) and the host's (``/proc/stat``) are recorded per
phase, to tell a VR held back by its cap from one held back by the host or its TCP senders.

Units: packets/s (pps; kp/s in the report), percent of one CPU, seconds.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.experiments.tcpudp import (
    PhaseTimes,
    goodput_in_window,
    lost_in_vr_text,
    min_max_ratio,
    outside_load_note,
    run_phase,
    summarise_phase,
)
from xtc_lab.lab.harness import LabDaemon, Recorder, RunContext, controller_model, experiment_lab, markdown_table, save_figure
from xtc_lab.lab.netlab import VR, LabError
from xtc_lab.lab.traffic import (MAX_TCP_FLOWS, PAPER_TCP_FRAME_BYTES, TcpResult, start_streams, start_tcp_stream,
                                 tcp_mss_for_frame)

TITLE = "fairness between a VR with 1 TCP flow and a VR with n flows, without and with XTC"
PAPER = "Figure 18"

FLOWS = (1, 2, 4, 8)
QUICK_FLOWS = (1, 4)
#: With XTC the min-max ratio should be at least this (the paper: near 1).
FAIR_RATIO = 0.9
#: With XTC the aggregate should keep at least this share of the aggregate without (the paper: "a small reduction").
AGGREGATE_KEPT = 0.9


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fairness")
    g.add_argument("--fairness-flows", default=None,
                   help="comma-separated flow counts of the second VR (default 1,2,4,8; quick: 1,4)")
    g.add_argument("--fairness-hold", type=float, default=15.0,
                   help="seconds measured per phase (default 15; quick: a third, at least 4)")


def parse_flows(text: str | None, quick: bool) -> list[int]:
    """The flow counts to run: ``text`` ("1,2,4") or the defaults; each 1..128, no repeats."""
    if text is None:
        return list(QUICK_FLOWS if quick else FLOWS)
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise ValueError(f"--fairness-flows: {part!r} is not an integer") from None
        if not 1 <= n <= MAX_TCP_FLOWS:
            raise ValueError(f"--fairness-flows: {n} out of range 1..{MAX_TCP_FLOWS}")
        if n in out:
            raise ValueError(f"--fairness-flows: {n} given twice")
        out.append(n)
    if not out:
        raise ValueError("--fairness-flows: no flow counts given")
    return out


# ------------------------------------------------------------------------------ pure analysis
def fairness_point(n: int, without: Mapping[str, Any], with_xtc: Mapping[str, Any],
                   setpoint_pps: float) -> dict[str, Any]:
    """Figure 18's numbers for one ``n``: min-max ratios and aggregates without and with XTC.

    ``without`` and ``with_xtc`` hold ``{"one": {...}, "many": {...}}`` VR summaries with
    ``forwarded_pps`` (VR 1 has one flow, VR 2 ``n``).
    """
    fw = [without["one"]["forwarded_pps"], without["many"]["forwarded_pps"]]
    fx = [with_xtc["one"]["forwarded_pps"], with_xtc["many"]["forwarded_pps"]]
    agg_wo, agg_w = sum(fw), sum(fx)
    return {
        "flows": n, "flow_ratio": float(n), "setpoint_pps": setpoint_pps,
        "min_max_without": min_max_ratio(fw), "min_max_with": min_max_ratio(fx),
        "aggregate_without_pps": agg_wo, "aggregate_with_pps": agg_w,
        "aggregate_kept": agg_w / agg_wo if agg_wo > 0 else math.nan,
        "many_share_without": fw[1] / agg_wo if agg_wo > 0 else math.nan,
        "many_share_with": fx[1] / agg_w if agg_w > 0 else math.nan,
    }


def is_capped(cap_percent: float | None) -> bool:
    """True if XTC held a VR's cap below 95% of a CPU (mean over the measured window).

    A cap above the forwarder's mean CPU use still limits it: the quota is enforced per
    100 ms period, so it clips the bursts in which the forwarder catches up.
    """
    return cap_percent is not None and not math.isnan(cap_percent) and cap_percent < 95


def unfairness_grows(points: Sequence[Mapping[str, Any]]) -> bool | None:
    """The paper's observation: without XTC, the min-max ratio at the most flows is below that at the fewest.

    None with fewer than two flow counts.
    """
    pts = sorted(points, key=lambda p: p["flows"])
    if len(pts) < 2:
        return None
    return bool(pts[-1]["min_max_without"] < pts[0]["min_max_without"])


# ------------------------------------------------------------------------------ the run
def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    flows = parse_flows(args.fairness_flows, ctx.quick)
    hold_s = ctx.phase(args.fairness_hold)
    if hold_s < 4:
        raise ValueError(f"--fairness-hold {args.fairness_hold:g}: want at least 4 s")
    warm_s, settle_s = (2.0, 6.0) if ctx.quick else (3.0, 10.0)
    frame = PAPER_TCP_FRAME_BYTES
    mss = tcp_mss_for_frame(frame)
    model = controller_model(getattr(args, "model", None))
    result: dict[str, Any] = {
        "title": TITLE, "paper": PAPER, "flows": flows, "frame_bytes": frame, "tcp_mss_bytes": mss,
        "hold_s": hold_s, "warm_s": warm_s, "settle_s": settle_s, "model": model, "n_cpus": os.cpu_count() or 1,
        "throughput": "packets/s forwarded, summed over both vifs of a VR (data segments and ACKs)",
        "points": [], "phases": {},
    }
    ctx.say(f"two VRs: 1 TCP flow vs n = {', '.join(map(str, flows))} flows ({frame}-byte segments); "
            f"{hold_s:g} s measured per phase")
    with experiment_lab(result, 2, work_iters=ctx.work_iters) as (lab, workdir, caps):
        one_vr, many_vr = lab.vrs
        result["vrs"] = {"one": one_vr.name, "many": many_vr.name}
        with LabDaemon(workdir / "xtcd", lab.uri, [one_vr.name, many_vr.name], kind="xtc", model=model,
                       cfs_period_us=ctx.cfs_period_us) as d, \
                Recorder([one_vr, many_vr], dt_s=1.0, caps=caps) as rec:
            dpid = None if d.proc is None else d.proc.pid
            for i, n in enumerate(flows):
                def streams(duration_s: float, n: int = n) -> list[Any]:
                    return start_streams(
                        lambda: start_tcp_stream(lab, one_vr, duration_s, flows=1, frame_bytes=frame),
                        lambda: start_tcp_stream(lab, many_vr, duration_s, flows=n, frame_bytes=frame))

                ctx.say(f"-- [{i + 1}/{len(flows)}] 1 vs {n} flows, without XTC")
                label = f"n={n} without XTC"
                times, res, cpu = run_phase(ctx, lab, rec, label, streams, warm_s, 0.0, hold_s, daemon_pid=dpid)
                without = _phase_summary(rec, times, res, cpu, one_vr, many_vr)
                agg = without["one"]["forwarded_pps"] + without["many"]["forwarded_pps"]
                if not agg > 0:
                    raise LabError(f"the VRs forwarded nothing with 1 vs {n} flows; the lab's traffic did not flow")
                sp = round(agg / 2, -2)
                _say(ctx, label, without)
                ctx.say(f"-- [{i + 1}/{len(flows)}] 1 vs {n} flows, with XTC (both VRs at {sp:.0f} pps)")
                label = f"n={n} with XTC"

                def activate(sp: float = sp) -> None:
                    d.activate(one_vr.name, sp)
                    d.activate(many_vr.name, sp)

                try:
                    times, res, cpu = run_phase(ctx, lab, rec, label, streams, warm_s, settle_s, hold_s,
                                                on_warm=activate, daemon_pid=dpid)
                finally:
                    for vr in (one_vr, many_vr):
                        try:
                            d.call("deactivate", vr=vr.name)  # original (unlimited) cap back
                        except Exception as e:  # noqa: BLE001 - not active (activation failed): nothing to restore
                            ctx.say(f"   deactivate {vr.name}: {e}")
                with_xtc = _phase_summary(rec, times, res, cpu, one_vr, many_vr)
                _say(ctx, label, with_xtc)
                result["phases"][str(n)] = {"without": without, "with": with_xtc}
                result["points"].append(fairness_point(n, without, with_xtc, sp))
                p = result["points"][-1]
                ctx.say(f"   n={n}: min-max {p['min_max_without']:.2f} -> {p['min_max_with']:.2f}, aggregate "
                        f"{p['aggregate_without_pps']:.0f} -> {p['aggregate_with_pps']:.0f} pps")
        caps.close()
        result["recording"] = rec.to_json()
    return _outcome(result)


def _phase_summary(rec: Recorder, times: PhaseTimes, res: Sequence[TcpResult], cpu: Mapping[str, Any],
                   one_vr: VR, many_vr: VR) -> dict[str, Any]:
    out = summarise_phase(rec, times, cpu, {"one": one_vr, "many": many_vr})
    for key, r in (("one", res[0]), ("many", res[1])):
        out[key]["goodput_bits_per_s"] = goodput_in_window(r, times.start_s, *times.window_s(rec.dt_s))
        out[key]["iperf3"] = {"flows": r.flows, "seconds": r.seconds, "received_bits_per_s": r.received_bits_per_s,
                              "retransmits": r.retransmits, "flow_min_max_ratio": r.flow_min_max_ratio}
    return out


def _say(ctx: RunContext, label: str, ph: Mapping[str, Any]) -> None:
    ctx.say(f"   {label}: 1-flow VR {ph['one']['forwarded_pps']:.0f} pps (CPU {ph['one']['cpu_percent']:.0f}%), "
            f"n-flow VR {ph['many']['forwarded_pps']:.0f} pps (CPU {ph['many']['cpu_percent']:.0f}%)")


# ------------------------------------------------------------------------------ report
def _f(v: float, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _k(vr: Mapping[str, Any]) -> str:
    return _f(vr["forwarded_pps"] / 1000, "{:.1f}")


def _outcome(result: dict[str, Any]) -> Outcome:
    pts = result["points"]
    rows = [(f"1:{p['flows']}", _f(p["min_max_without"]), _f(p["min_max_with"]),
             _f(p["aggregate_without_pps"] / 1000, "{:.1f}"), _f(p["aggregate_with_pps"] / 1000, "{:.1f}"),
             _f(100 * (p["aggregate_kept"] - 1), "{:+.1f}%"),
             _f(100 * p["many_share_without"], "{:.0f}%"), _f(100 * p["many_share_with"], "{:.0f}%")) for p in pts]
    detail = []
    for n, ph in result["phases"].items():
        for label, key in (("without", "without"), ("with XTC", "with")):
            x = ph[key]
            hc = x["host_cpu_percent"]
            detail.append((f"1:{n}", label, _f(x["one"]["forwarded_pps"] / 1000, "{:.1f}"),
                           _f(x["many"]["forwarded_pps"] / 1000, "{:.1f}"),
                           _f(x["one"]["cap_percent"], "{:.0f}"), _f(x["many"]["cap_percent"], "{:.0f}"),
                           _f(x["one"]["cpu_percent"], "{:.0f}"), _f(x["many"]["cpu_percent"], "{:.0f}"),
                           _f(x["one"]["goodput_bits_per_s"] / 1e6, "{:.0f}"),
                           _f(x["many"]["goodput_bits_per_s"] / 1e6, "{:.0f}"),
                           _f(x["many"]["iperf3"]["flow_min_max_ratio"]), lost_in_vr_text(x["one"]),
                           lost_in_vr_text(x["many"]),
                           _f(hc["softirq"], "{:.0f}"), _f(hc["system"], "{:.0f}"), _f(hc["user"], "{:.0f}"),
                           _f(hc["idle"], "{:.0f}"), _f(x["others_cpu_percent"], "{:.0f}"),
                           _f(x["daemon_cpu_percent"], "{:.0f}")))
    grows = unfairness_grows(pts)
    md = f"""# Fairness between VRs with 1 and n TCP flows ({PAPER})

Two LXC VRs on one {result['n_cpus']}-core host: VR 1 forwards one iperf3 TCP flow, VR 2 forwards n parallel
flows (n = {', '.join(str(n) for n in result['flows'])}), {result['frame_bytes']}-byte segments
(MSS {result['tcp_mss_bytes']}), one segment per packet.  For each n: without XTC, then with the daemon holding
both VRs at half the aggregate measured without XTC (as the paper does); {result['hold_s']:.0f} s measured per
phase (1 s samples), the XTC phase after {result['settle_s']:.0f} s of settling.  Throughput =
{result['throughput']}.  Min-max ratio = lower VR throughput / higher.

The paper (Figure 18, no numbers in its text): without XTC the min-max ratio falls as the flow ratio grows; with
XTC it stays near 1, and the aggregate is slightly lower than without.

{markdown_table(['flows (VR1:VR2)', 'min-max without XTC', 'min-max with XTC', 'aggregate without (kp/s)',
                 'aggregate with (kp/s)', 'aggregate change', 'n-flow VR share without', 'n-flow VR share with'], rows)}

Per phase (caps and CPU in percent of one CPU; host CPU from /proc/stat, {100 * result['n_cpus']}% = all cores;
"other processes" = CPU of processes outside the lab, load this experiment does not control on a shared host;
"flow min-max" = lowest/highest goodput among VR 2's flows; "lost in VR" = share of the data segments handed to a
VR that it did not pass on, losses TCP's congestion control reacts to):

{markdown_table(['flows', 'phase', 'VR1 kp/s', 'VR2 kp/s', 'VR1 cap', 'VR2 cap', 'VR1 CPU', 'VR2 CPU',
                 'VR1 Mbit/s', 'VR2 Mbit/s', 'VR2 flow min-max', 'VR1 data lost in VR', 'VR2 data lost in VR',
                 'host softirq', 'host system', 'host user',
                 'host idle', 'other processes', 'XTC daemon'], detail)}

## What it shows

{_explanation(result)}
"""
    goals = []
    if pts:
        worst = min(pts, key=lambda p: p["min_max_with"] if not math.isnan(p["min_max_with"]) else -1)
        goals.append(Goal(f"with XTC the min-max ratio is at least {FAIR_RATIO:g} for every n (paper: near 1)",
                          f"lowest {_f(worst['min_max_with'])} (1:{worst['flows']})",
                          all(p["min_max_with"] >= FAIR_RATIO for p in pts)))
        low = min(pts, key=lambda p: p["aggregate_kept"] if not math.isnan(p["aggregate_kept"]) else -1)
        goals.append(Goal(f"with XTC the aggregate keeps at least {100 * AGGREGATE_KEPT:.0f}% of the aggregate "
                          "without (paper: a small reduction)",
                          f"lowest {_f(100 * low['aggregate_kept'], '{:.0f}%')} (1:{low['flows']})",
                          all(p["aggregate_kept"] >= AGGREGATE_KEPT for p in pts)))
        if grows is not None:
            a, b = min(pts, key=lambda p: p["flows"]), max(pts, key=lambda p: p["flows"])
            goals.append(Goal("the paper's finding: without XTC the min-max ratio falls as n grows",
                              f"{_f(a['min_max_without'])} at 1:{a['flows']}, "
                              f"{_f(b['min_max_without'])} at 1:{b['flows']}",
                              grows))

    def plot(path: Path) -> None:
        plot_fairness(result, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)


def _explanation(result: Mapping[str, Any]) -> str:
    pts = sorted(result["points"], key=lambda p: p["flows"])
    if not pts:
        return "No flow counts were measured."
    phases = result["phases"]
    lines = []
    wo = ", ".join(f"{_f(p['min_max_without'])} (1:{p['flows']})" for p in pts)
    cpu_wo = "; ".join(f"1:{p['flows']}: {_f(phases[str(p['flows'])]['without']['one']['cpu_percent'], '{:.0f}')}% and "
                       f"{_f(phases[str(p['flows'])]['without']['many']['cpu_percent'], '{:.0f}')}%" for p in pts)
    if unfairness_grows(pts):
        losses = [phases[str(p["flows"])]["without"][k].get("path") or {} for p in pts for k in ("one", "many")]
        lost = [100 * x["dropped_in_vr_fraction"] for x in losses
                if x.get("dropped_in_vr_fraction") is not None and not math.isnan(x["dropped_in_vr_fraction"])]
        why = ("  Both VRs lose a similar share of their data segments inside the VR "
               f"({min(lost):.0f}-{max(lost):.0f}%); each of n flows cuts only its own window at a loss, so "
               "together they back off less than one flow does." if lost else "")
        lines.append(f"Without XTC the VR with more flows takes more: min-max ratio {wo}, the direction of the paper's "
                     f"Figure 18(a).{why}")
    else:
        lines.append(f"Without XTC the min-max ratio does not fall as n grows ({wo}): on this host the paper's "
                     "unfairness does not appear.")
    vr_cpu = [phases[str(p["flows"])]["without"][k]["cpu_percent"] for p in pts for k in ("one", "many")]
    idle = [phases[str(p["flows"])]["without"]["host_cpu_percent"]["idle"] for p in pts]
    softirq = [phases[str(p["flows"])]["without"]["host_cpu_percent"]["softirq"] for p in pts]
    if max(vr_cpu) < 90 and max(idle) < 10:
        lines.append(f"Without XTC neither VR's forwarder is CPU-bound (CPU of VR 1 and VR 2, percent of one CPU: "
                     f"{cpu_wo}) while the host has no idle CPU left (idle at most {max(idle):.0f}%, softirq "
                     f"{min(softirq):.0f}-{max(softirq):.0f}% of {100 * result['n_cpus']}%): the shared bottleneck is "
                     "the host kernel's per-packet work, which both VRs' packets wait for, not Xen's round-robin "
                     "over backend interfaces.")
    else:
        lines.append(f"Without XTC: CPU of VR 1 and VR 2 (percent of one CPU) {cpu_wo}; host idle "
                     f"{min(idle):.0f}-{max(idle):.0f}%.")
    for p in pts:
        x = phases[str(p["flows"])]["with"]
        sp_k = _f(p["setpoint_pps"] / 1000, "{:.1f}")
        names = {"one": "VR 1 (1 flow)", "many": f"VR 2 ({p['flows']} flow{'s' if p['flows'] > 1 else ''})"}
        parts, short = [], []
        for k in ("one", "many"):
            cap, cpu = x[k]["cap_percent"], x[k]["cpu_percent"]
            parts.append(f"{names[k]} {_k(x[k])} kp/s, cap {_f(cap, '{:.0f}')}% (its forwarder used "
                         f"{_f(cpu, '{:.0f}')}%)")
            if x[k]["forwarded_pps"] < 0.95 * p["setpoint_pps"] and not is_capped(cap):
                short.append(k)
        line = (f"1:{p['flows']} with XTC (setpoints {sp_k} kp/s each): {'; '.join(parts)}; "
                f"min-max {_f(p['min_max_with'])}.")
        high = [k for k in ("one", "many") if is_capped(x[k]["cap_percent"])
                and x[k]["forwarded_pps"] > 1.03 * p["setpoint_pps"]]
        for k in high:
            cv = x[k].get("forwarded_cv", math.nan)
            line += (f"  {names[k]} sat {_f(100 * (x[k]['forwarded_pps'] / p['setpoint_pps'] - 1), '{:.0f}')}% above "
                     f"its setpoint; its 1 s rates scattered by {_f(100 * cv, '{:.0f}')}% (standard deviation over "
                     "mean, TCP's sawtooth), much of which the controller treats as noise.")
        if len(short) == 2:
            line += ("  Both VRs stayed under their setpoints, uncapped: the host forwarded less than the "
                     "sum of the setpoints, and XTC, which only takes CPU away from a VR above its setpoint, had "
                     "nothing to equalise.")
        elif short:
            k = short[0]
            line += (f"  {names[k]} stayed under its setpoint, uncapped: its TCP "
                     f"sender{'s' if k == 'many' else ''} did not send more ({lost_in_vr_text(x[k])} of its data "
                     "segments were lost inside the VR); XTC "
                     "can take CPU from the other VR but cannot make a TCP sender send more.")
        lines.append(line)
        note = outside_load_note(phases[str(p["flows"])]["without"], x, f"1:{p['flows']} without XTC",
                                 f"1:{p['flows']} with XTC")
        if note:
            lines.append(note)
    kept = ", ".join(f"{_f(100 * (p['aggregate_kept'] - 1), '{:+.0f}%')} (1:{p['flows']})" for p in pts)
    daemon = [phases[str(p["flows"])]["with"]["daemon_cpu_percent"] for p in pts]
    daemon_s = ", ".join(_f(d, "{:.1f}") for d in daemon)
    lines.append(f"Aggregate with XTC against without: {kept}.  The XTC daemon itself used {daemon_s}% of a CPU in "
                 "the XTC phases.")
    return "\n\n".join(lines)


def plot_fairness(result: Mapping[str, Any], path: Path) -> None:
    """Figure 18 (a) min-max ratio and (b) aggregate against the flow ratio, and the time series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    fig = plt.figure(figsize=(13, 7.5))
    gs = fig.add_gridspec(2, 2, height_ratios=[1, 1])
    ax_a, ax_b, ax_t = fig.add_subplot(gs[0, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, :])
    xs = [p["flows"] for p in pts]
    ax_a.plot(xs, [p["min_max_without"] for p in pts], "o-", color="tab:gray", label="without XTC")
    ax_a.plot(xs, [p["min_max_with"] for p in pts], "s-", color="tab:green", label="with XTC")
    ax_a.axhline(FAIR_RATIO, color="tab:green", ls=":", lw=1)
    ax_a.set_ylim(0, 1.05)
    ax_a.set_xscale("log", base=2)
    ax_a.set_xticks(xs, [f"1:{x}" for x in xs])
    ax_a.set_xlabel("flows (VR 1 : VR 2)")
    ax_a.set_ylabel("min-max ratio")
    ax_a.set_title("(a) fairness", fontsize=9)
    ax_a.legend(fontsize=8)
    ax_b.plot(xs, [p["aggregate_without_pps"] / 1000 for p in pts], "o-", color="tab:gray", label="without XTC")
    ax_b.plot(xs, [p["aggregate_with_pps"] / 1000 for p in pts], "s-", color="tab:green", label="with XTC")
    ax_b.set_xscale("log", base=2)
    ax_b.set_xticks(xs, [f"1:{x}" for x in xs])
    ax_b.set_ylim(bottom=0)
    ax_b.set_xlabel("flows (VR 1 : VR 2)")
    ax_b.set_ylabel("aggregate kp/s (both VRs, both vifs)")
    ax_b.set_title("(b) aggregate throughput", fontsize=9)
    ax_b.legend(fontsize=8)

    rec, vrs = result.get("recording"), result.get("vrs", {})
    if rec:
        colors = {"one": "tab:blue", "many": "tab:orange"}
        ax2 = ax_t.twinx()
        for key, name in vrs.items():
            s = rec["series"][name]
            ax_t.plot(s["t_s"], [r / 1000 for r in s["forwarded_pps"]], color=colors[key],
                      label="VR 1 (1 flow)" if key == "one" else "VR 2 (n flows)")
            ax2.plot(s["t_s"], [math.nan if c is None else c for c in s["cap_percent"]], color=colors[key],
                     alpha=0.35, lw=3)
        marks = {m["label"]: m["t_s"] for m in rec["marks"]}
        for p in pts:
            for phase, shade in (("without XTC", 0.08), ("with XTC", 0.2)):
                a, b = marks.get(f"n={p['flows']} {phase}: measure"), marks.get(f"n={p['flows']} {phase}: end")
                if a is not None and b is not None:
                    ax_t.axvspan(a, b, color="tab:green" if phase == "with XTC" else "grey", alpha=shade)
                    ax_t.text((a + b) / 2, 0.98, f"1:{p['flows']}\n{'XTC' if phase == 'with XTC' else 'off'}",
                              transform=ax_t.get_xaxis_transform(), ha="center", va="top", fontsize=7)
        ax_t.set_xlabel("time (s)")
        ax_t.set_ylabel("forwarded kp/s")
        ax2.set_ylabel("cap (% of one CPU; thick)")
        ax2.set_ylim(0, 105)
        ax_t.set_ylim(bottom=0)
        ax_t.legend(loc="lower left", fontsize=8)
        ax_t.set_title("per-VR forwarded rate; shaded: measured windows (grey without XTC, green with)", fontsize=9)
    save_figure(fig, path)
