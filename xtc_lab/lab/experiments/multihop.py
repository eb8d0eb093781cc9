"""Three hops: a UDP flow across three routers in a line, each with its own XTC daemon (Figure 20).

The paper (section 8.2) chains three physical routers, TG-TF1-TF2-TF3-TR, one VR on each and
an XTC instance on each, sends a 90 kp/s UDP flow (the most that testbed forwarded) and gives
every VR the same setpoint; a ping probe to each VR and to TR gives the packet loss ratio and
the average RTT hop by hop (cumulative: the probe to TF2 crosses TF1 too).  Its findings: every
VR reaches the setpoint; the loss ratio is about the same at every hop (the first router drops
what XTC cuts); the RTT rises from the first router to the second and then stays (~14 ms).

Here the three routers are three LXC VRs chained over host bridges
(:meth:`xtc_lab.lab.netlab.NetLab.add_chain`), each controlled by its own ``xtc daemon`` process
(one per "physical router", as in the paper); a probe namespace after TF1 and after TF2 and
the receiver answer pings (0.03 s interval to each of the three, about the paper's 0.1 kp/s in
all).  The setpoints are fractions of what the chain delivers unlimited on this host (measured
in the first phase, without XTC).
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.harness import (LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean,
                             save_figure, wait_with_progress)
from xtc_lab.lab.probe import start_ping
from xtc_lab.lab.traffic import start_udp_stream

TITLE = "a UDP flow across three routers in a line, one XTC daemon per router, loss and RTT hop by hop"
PAPER = "Figure 20"
FRACTIONS = (0.3, 0.5, 0.7)
QUICK_FRACTIONS = (0.4,)
TOLERANCE = 0.05
PING_INTERVAL_S = 0.03
#: Paper, Figure 20: RTT from the second hop on, ms (read off the figure's text).
PAPER_RTT_AFTER_FIRST_HOP_MS = 14.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("multihop")
    g.add_argument("--hop-hold", type=float, default=24.0,
                   help="seconds per setpoint in the multihop experiment (default 24; quick: 12)")


def steady_mean(t_s: list[float], rate_pps: list[float], t0_s: float, t1_s: float) -> float:
    """Mean rate of the samples in the second half of [t0_s, t1_s]."""
    return mean([r for t, r in zip(t_s, rate_pps) if t0_s + (t1_s - t0_s) / 2 <= t <= t1_s])


def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    fractions = QUICK_FRACTIONS if ctx.quick else FRACTIONS
    hold_s = min(args.hop_hold, 12.0) if ctx.quick else args.hop_hold
    if hold_s < 8:
        raise ValueError(f"--hop-hold {hold_s:g}: want at least 8 s")
    settle_s = hold_s / 3
    total_s = (len(fractions) + 1) * (hold_s + 6) + 30
    result: dict[str, Any] = {"title": TITLE, "paper": PAPER, "offered_pps": ctx.offered_pps, "hold_s": hold_s,
                              "ping_interval_s": PING_INTERVAL_S, "phases": []}
    with experiment_lab(result, 0) as (lab, workdir, caps):  # the chain is built below
        chain = lab.add_chain(hops=3, mode="lxc", work_iters=ctx.work_iters)
        vrs = list(chain.vrs)
        result["routers"] = {vr.router: vr.name for vr in vrs}
        with start_udp_stream(lab, vrs[0], ctx.offered_pps, duration_s=total_s):
            time.sleep(2.0)
            with Recorder(vrs, dt_s=1.0, caps=caps) as rec, ExitStack() as daemons:
                ds = {vr.router: daemons.enter_context(
                    LabDaemon(workdir / vr.router, lab.uri, [vr.name], kind="xtc")) for vr in vrs}
                base = 0.0  # pps the chain delivers without XTC (measured in the first phase)
                for fr in (None, *fractions):
                    sp = None if fr is None else round(fr * base, -2)
                    label = "without XTC" if sp is None else f"setpoint {sp / 1000:g} kp/s"
                    ctx.say(f"-- {label} on every router")
                    t0 = rec.mark(label)
                    if sp is not None:
                        for vr in vrs:
                            d = ds[vr.router]
                            if fr == fractions[0]:
                                d.activate(vr.name, sp)
                            else:
                                d.setpoint(vr.name, sp)
                    wait_with_progress(settle_s, f"{label}: settling", ctx.say)
                    ping_s = hold_s - settle_s
                    pings = {name: start_ping(lab, chain.tg_ns, addr, interval_s=PING_INTERVAL_S,
                                              duration_s=ping_s) for name, addr in chain.targets()}
                    wait_with_progress(ping_s, f"{label}: probing", ctx.say)
                    probes = {name: p.result().summary() for name, p in pings.items()}
                    t1 = rec.now()
                    rates = {vr.router: steady_mean(rec.series[vr.name].t_s, rec.series[vr.name].forwarded_pps,
                                                    t0, t1) for vr in vrs}
                    caps_now = {vr.router: (rec.series[vr.name].cap_percent or [None])[-1] for vr in vrs}
                    result["phases"].append({"setpoint_pps": sp, "forwarded_pps": rates, "cap_percent": caps_now,
                                             "probes": probes})
                    if sp is None:  # what the chain delivers unlimited: the base of the setpoints
                        base = min(rates.values())
                        result["unlimited"] = {r: {"forwarded_pps": v} for r, v in rates.items()}
                    ctx.say("   " + ", ".join(f"{r}: {v:.0f} pps" for r, v in rates.items()) + "; " +
                            ", ".join(f"{n}: loss {100 * p['loss_ratio']:.1f}% rtt {p['avg_rtt_ms']:.2f} ms"
                                      for n, p in probes.items()))
            result["recording"] = rec.to_json()
        caps.close()
    return _outcome(result)


def _outcome(result: dict[str, Any]) -> Outcome:
    phases = result["phases"]
    targets = list(phases[0]["probes"]) if phases else []
    rows = []
    for ph in phases:
        sp = ph["setpoint_pps"]
        row: list[Any] = ["without XTC" if sp is None else f"{sp:.0f}"]
        row += [f"{v:.0f}" for v in ph["forwarded_pps"].values()]
        row += [f"{100 * ph['probes'][t]['loss_ratio']:.1f}% / {ph['probes'][t]['avg_rtt_ms']:.2f} ms" for t in targets]
        rows.append(row)
    routers = list(phases[0]["forwarded_pps"]) if phases else []
    md = f"""# Three hops: one XTC daemon per router ({PAPER})

A 64-byte UDP flow offered at {result['offered_pps']:.0f} pps crosses three routers in a line
(TG - {' - '.join(routers)} - TR), one LXC VR each, each controlled by its own `xtc daemon`; every VR gets
the same setpoint (a fraction of what the chain delivers without XTC).  Without XTC the routers forwarded
{', '.join(f"{r} {v['forwarded_pps']:.0f}" for r, v in result.get('unlimited', {}).items())} pps (forwarded =
host-side RX of both of a VR's interfaces).  A ping probe (every {1000 * result['ping_interval_s']:.0f} ms to
each target) from the generator to the probe after TF1, after TF2 and to the receiver gives the loss ratio and
average RTT up to each hop (cumulative, as in the paper).  Rates: mean of the 1 s rates over the second half of
each {result['hold_s']:g} s phase.

{markdown_table(['setpoint (pps)', *[f'{r} forwarded (pps)' for r in routers], *[f'probe {t}: loss / RTT' for t in targets]], rows)}

Paper (Figure 20, 90 kp/s UDP, real Xen routers): every VR reached the setpoint; the loss ratio was about
the same at every hop; the RTT rose from the first router to the second and then stayed at about
{PAPER_RTT_AFTER_FIRST_HOP_MS:g} ms; lower setpoints gave higher loss and RTT.
"""
    free = [ph for ph in phases if ph["setpoint_pps"] is None]
    ctl = [ph for ph in phases if ph["setpoint_pps"] is not None]
    if free and ctl and len(routers) > 1:
        f = free[0]["forwarded_pps"]
        chain_loss_free = 1 - f[routers[-1]] / f[routers[0]]
        chain_loss_ctl = [1 - ph["forwarded_pps"][routers[-1]] / ph["forwarded_pps"][routers[0]] for ph in ctl]
        last_caps = [ph["cap_percent"].get(routers[-1]) for ph in ctl]
        md += f"""
What the lab shows: the first router holds the setpoint and the ones after it forward what reaches them
(their caps go up to {', '.join('-' if c is None else f'{c:.0f}%' for c in last_caps)} for {routers[-1]}: their
controllers see less than the setpoint and open up).  Between {routers[0]} and {routers[-1]} the flow loses
{100 * chain_loss_free:.1f}% without XTC and {', '.join(f'{100 * x:.1f}%' for x in chain_loss_ctl)} under XTC:
these losses are why the rate leaving the last router is below the setpoint.  Without XTC no router
is capped and the chain still loses, so part of it is the host's (three forwarders, the sender and the
daemons share the host's cores and frames overflow the forwarders' socket queues).  That it loses more
under XTC is not explained by this run; a likely cause, not measured here, is that a capped VR forwards in
bursts (the quota lets it run a few ms of every 100 ms scheduler period), and the burst overflows the
next router's queue.
"""
    goals = []
    if ctl:
        first = [abs(ph["forwarded_pps"][routers[0]] - ph["setpoint_pps"]) / ph["setpoint_pps"] for ph in ctl]
        last = [abs(ph["forwarded_pps"][routers[-1]] - ph["setpoint_pps"]) / ph["setpoint_pps"] for ph in ctl]
        goals.append(Goal("the first router holds every setpoint within 5%",
                          f"worst {100 * max(first):.1f}%", max(first) <= TOLERANCE))
        goals.append(Goal("the flow leaves the last router at the setpoint within 5%",
                          f"worst {100 * max(last):.1f}%", max(last) <= TOLERANCE))

    def plot(path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        xs = range(len(targets))
        for ph in phases:
            lab_ = "without XTC" if ph["setpoint_pps"] is None else f"{ph['setpoint_pps'] / 1000:g} kp/s"
            axes[0].plot(xs, [100 * ph["probes"][t]["loss_ratio"] for t in targets], "o-", label=lab_)
            axes[1].plot(xs, [ph["probes"][t]["avg_rtt_ms"] for t in targets], "o-", label=lab_)
        for ax, yl in zip(axes[:2], ("probe loss ratio (%)", "probe average RTT (ms)")):
            ax.set_xticks(list(xs), targets)
            ax.set_ylabel(yl)
            ax.legend(fontsize=8)
        rec = result.get("recording", {})
        for name, s in rec.get("series", {}).items():
            router = next((r for r, n in result["routers"].items() if n == name), name)
            axes[2].plot(s["t_s"], [r / 1000 for r in s["forwarded_pps"]], label=router)
        for m in rec.get("marks", []):
            axes[2].axvline(m["t_s"], color="grey", lw=0.5)
        axes[2].set_xlabel("time (s)")
        axes[2].set_ylabel("forwarded (kp/s)")
        axes[2].legend(fontsize=8)
        fig.suptitle("Three hops, one XTC daemon per router (cf. Figure 20)")
        save_figure(fig, path)

    return Outcome(result=result, report_md=md, plot=plot, goals=goals)
