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
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

from xtc_lab.lab import inputdrop
from xtc_lab.lab.experiments import Goal, Outcome
from xtc_lab.lab.harness import (LabDaemon, Recorder, RunContext, experiment_lab, markdown_table, mean,
                             save_figure, wait_with_progress)
from xtc_lab.lab.drops import counter_delta, loss_snapshot, net_core_sysctls
from xtc_lab.lab.hog import vr_forwarder_pids
from xtc_lab.lab.netlab import DEFAULT_PERIOD_US
from xtc_lab.lab.probe import start_ping
from xtc_lab.lab.traffic import start_udp_stream

TITLE = "a UDP flow across three routers in a line, one XTC daemon per router, loss and RTT hop by hop"
PAPER = "Figure 20"
FRACTIONS = (0.3, 0.5, 0.7)
QUICK_FRACTIONS = (0.4,)
TOLERANCE = 0.05
HOPS = 3
PING_INTERVAL_S = 0.03
#: Paper, Figure 20: RTT from the second hop on, ms (read off the figure's text).
PAPER_RTT_AFTER_FIRST_HOP_MS = 14.0
#: Receive buffer of the forwarder sockets of the routers after the first, bytes.  A capped router's
#: forwarder is throttled while its socket queue fills, then sends the whole queue at once: a router
#: after it needs room for that burst (with the kernel's 208 KiB everywhere, 4-7% of the frames were
#: lost at each later router; see docs/results/2026-11-26-lab/multihop.md).
DEFAULT_RCVBUF_BYTES = 2 * 1024 * 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("multihop")
    g.add_argument("--hop-hold", type=float, default=24.0,
                   help="seconds per setpoint in the multihop experiment (default 24; quick: 12)")
    g.add_argument("--hop-rcvbuf", type=int, default=DEFAULT_RCVBUF_BYTES,
                   help="receive buffer of the forwarder sockets of every router after the first, bytes; 0: the "
                        f"kernel's default, net.core.rmem_default (default {DEFAULT_RCVBUF_BYTES}: it must hold what "
                        "a capped router before it releases at once)")
    g.add_argument("--hop-period-us", type=int, default=DEFAULT_PERIOD_US,
                   help="CFS period of the routers' domains (libvirt vcpu_period), microseconds, 1000..1000000; "
                        "the daemons keep it and write their caps as a quota per period (default "
                        f"{DEFAULT_PERIOD_US}; a cap needs at least 1000 us of quota per period)")
    g.add_argument("--hop-no-lag-probe", action="store_true",
                   help="XTC's controller with [controller] lag_probe = false on every router (the law without "
                        "the lag probe, the default before 2026-11-25; docs/results/2026-11-26-control-settling/control-settling.md, 'The lag probe')")
    g.add_argument("--hop-early-drop", action="store_true",
                   help="ask for early drop on every router (issue 48: the daemon's limiter drops a capped router's "
                        "excess on its host-side vif, the first router's waste of Figure 20); each phase then "
                        "records what the limiters dropped and the host's CPU")
    g.add_argument("--hop-rcvbuf-first", type=int, default=0,
                   help="receive buffer of the first router's forwarder sockets, bytes; 0: the kernel's default "
                        "(default 0; under XTC this router drops what the cap holds back, and its queue, full, "
                        "sets the RTT)")

def steady_mean(t_s: list[float], rate_pps: list[float], t0_s: float, t1_s: float) -> float:
    """Mean rate of the samples in the second half of [t0_s, t1_s]."""
    return mean([r for t, r in zip(t_s, rate_pps) if t0_s + (t1_s - t0_s) / 2 <= t <= t1_s])


def loss_breakdown(delta: dict[str, Any], routers: Sequence[str], vifs: dict[str, Sequence[str]],
                   tg_end: str) -> dict[str, Any]:
    """Where the frames went over one interval, hop by hop, in packets per second.

    Parameters
    ----------
    delta
        :func:`counter_delta` of two :func:`loss_snapshot` readings.
    routers
        Router names in line order.
    vifs
        Router -> its host-side (upstream, downstream) interfaces.
    tg_end
        Host-side interface of the generator (its RX = what the generator sent).

    Returns
    -------
    dict
        ``seconds``; ``sent_pps`` (generator); per router: ``handed_pps`` (host-side TX into the
        VR), ``host_tx_drop_pps`` (the host's veth could not hand it over), ``received_pps`` (the
        VR's eth0), ``socket_drop_pps`` (its forwarder's receive queue was full),
        ``send_loss_pps`` (received, not dropped by the socket and not sent: the forwarder's
        failed sends and frames still queued), ``forwarded_pps`` (host-side RX from the VR),
        ``gap_before_pps`` (frames that left the previous stage but were not handed to this one),
        ``rcvbuf_bytes``, ``cpu_share`` (forwarder CPU seconds per second), ``throttled_share``
        (fraction of its cgroup's periods that were throttled); ``backlog_drop_pps`` (host-wide).
    """
    dt = delta["t_s"]
    h = delta["host"]
    out: dict[str, Any] = {"seconds": round(dt, 2), "sent_pps": h.get(tg_end, {}).get("rx_packets", 0) / dt,
                           "backlog_drop_pps": delta["softnet"]["backlog_drops"] / dt,
                           "time_squeeze_per_s": delta["softnet"]["time_squeeze"] / dt}
    prev = out["sent_pps"]
    for r in routers:
        up, down = vifs[r]
        d = delta.get(r, {})
        dev = d.get("dev", {})
        eth0, eth1 = dev.get("eth0", {}), dev.get("eth1", {})
        sock = d.get("sockets", {}).get("eth0", {})
        handed = h[up]["tx_packets"] / dt
        received = eth0.get("rx_packets", 0) / dt
        sock_drop = sock.get("drops", 0) / dt
        sent = eth1.get("tx_packets", 0) / dt
        cg = d.get("cgroup", {})
        out[r] = {"gap_before_pps": prev - handed, "handed_pps": handed, "host_tx_drop_pps": h[up]["tx_drops"] / dt,
                  "received_pps": received, "rx_drop_pps": eth0.get("rx_drops", 0) / dt, "socket_drop_pps": sock_drop,
                  "send_loss_pps": received - sock_drop - sent, "forwarded_pps": h[down]["rx_packets"] / dt,
                  "rcvbuf_bytes": sock.get("rcvbuf_bytes"), "cpu_share": d.get("cpu_s", 0.0) / dt,
                  "throttled_share": (cg["nr_throttled"] / cg["nr_periods"]) if cg.get("nr_periods") else 0.0,
                  "udp_in_errors": d.get("udp", {}).get("InErrors", 0), "qdisc_drops": d.get("qdisc_drops", 0)}
        prev = out[r]["forwarded_pps"]
    return out


def run(ctx: RunContext, args: argparse.Namespace) -> Outcome:
    fractions = QUICK_FRACTIONS if ctx.quick else FRACTIONS
    hold_s = min(args.hop_hold, 12.0) if ctx.quick else args.hop_hold
    if hold_s < 8:
        raise ValueError(f"--hop-hold {hold_s:g}: want at least 8 s")
    settle_s = hold_s / 3
    total_s = (len(fractions) + 1) * (hold_s + 6) + 30
    for opt, v in (("--hop-rcvbuf", args.hop_rcvbuf), ("--hop-rcvbuf-first", args.hop_rcvbuf_first)):
        if v and not 4096 <= v <= 1 << 30:
            raise ValueError(f"{opt} {v}: want 0 (the kernel's default) or 4096..{1 << 30} bytes")
    if not 1000 <= args.hop_period_us <= 1_000_000:
        raise ValueError(f"--hop-period-us {args.hop_period_us}: want 1000..1000000")
    rcvbufs = [args.hop_rcvbuf_first or None] + [args.hop_rcvbuf or None] * (HOPS - 1)
    result: dict[str, Any] = {"title": TITLE, "paper": PAPER, "offered_pps": ctx.offered_pps, "hold_s": hold_s,
                              "ping_interval_s": PING_INTERVAL_S, "phases": [],
                              "rcvbuf_bytes_asked": rcvbufs, "vcpu_period_us": args.hop_period_us, "sysctl": net_core_sysctls(),
                              "lag_probe": not getattr(args, "hop_no_lag_probe", False),
                              "early_drop": bool(getattr(args, "hop_early_drop", False))}
    with experiment_lab(result, 0) as (lab, workdir, caps):  # the chain is built below
        chain = lab.add_chain(hops=HOPS, mode="lxc", work_iters=ctx.work_iters, rcvbuf_bytes=rcvbufs,
                              vcpu_period_us=args.hop_period_us)
        vrs = list(chain.vrs)
        result["routers"] = {vr.router: vr.name for vr in vrs}
        pids = {vr.router: vr_forwarder_pids(lab, vr)[0] for vr in vrs}
        tg_end, tr_end = f"{lab.prefix}-cg{chain.c}", f"{lab.prefix}-cr{chain.c}"
        vifs = {vr.router: vr.vifs for vr in vrs}
        with start_udp_stream(lab, vrs[0], ctx.offered_pps, duration_s=total_s):
            time.sleep(2.0)
            with Recorder(vrs, dt_s=1.0, caps=caps) as rec, ExitStack() as daemons:
                ds = {vr.router: daemons.enter_context(
                    LabDaemon(workdir / vr.router, lab.uri, [vr.name], kind="xtc", lag_probe=result["lag_probe"],
                              cfs_period_us=ctx.cfs_period_us))
                    for vr in vrs}
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
                                d.activate(vr.name, sp, early_drop=True if result["early_drop"] else None)
                            else:
                                d.setpoint(vr.name, sp)
                    wait_with_progress(settle_s, f"{label}: settling", ctx.say)
                    ping_s = hold_s - settle_s
                    load_1m = os.getloadavg()[0]
                    before = loss_snapshot(vrs, pids, (tg_end, tr_end))
                    ed0, cpu0, m0 = inputdrop.early_drop_drops(vifs), inputdrop.host_cpu_ticks(), time.monotonic()
                    pings = {name: start_ping(lab, chain.tg_ns, addr, interval_s=PING_INTERVAL_S,
                                              duration_s=ping_s) for name, addr in chain.targets()}
                    wait_with_progress(ping_s, f"{label}: probing", ctx.say)
                    probes = {name: p.result().summary() for name, p in pings.items()}
                    ed1, cpu1, m1 = inputdrop.early_drop_drops(vifs), inputdrop.host_cpu_ticks(), time.monotonic()
                    loss = loss_breakdown(counter_delta(before, loss_snapshot(vrs, pids, (tg_end, tr_end))),
                                          chain.routers, vifs, tg_end)
                    t1 = rec.now()
                    rates = {vr.router: steady_mean(rec.series[vr.name].t_s, rec.series[vr.name].forwarded_pps,
                                                    t0, t1) for vr in vrs}
                    caps_now = {vr.router: (rec.series[vr.name].cap_percent or [None])[-1] for vr in vrs}
                    result["phases"].append({"setpoint_pps": sp, "forwarded_pps": rates, "cap_percent": caps_now,
                                             "probes": probes, "load_avg_1m": round(load_1m, 2), "loss": loss,
                                             "limiter_dropped_pps": {r: inputdrop.drops_between(ed0[r], ed1[r]) / (m1 - m0)
                                                                     for r in ed1},
                                             "host_cpu_percent": inputdrop.host_cpu_percent(cpu0, cpu1,
                                                                                            os.cpu_count() or 1)})
                    if sp is None:  # what the chain delivers unlimited: the base of the setpoints
                        base = min(rates.values())
                        result["unlimited"] = {r: {"forwarded_pps": v} for r, v in rates.items()}
                    ctx.say("   " + ", ".join(f"{r}: {v:.0f} pps" for r, v in rates.items()) + "; " +
                            ", ".join(f"{n}: loss {100 * p['loss_ratio']:.1f}% rtt {p['avg_rtt_ms']:.2f} ms"
                                      for n, p in probes.items()))
                    ctx.say("   socket drops " + ", ".join(f"{r}: {loss[r]['socket_drop_pps']:.0f} pps"
                                                           for r in chain.routers))
            result["recording"] = rec.to_json()
        caps.close()
    return _outcome(result)


def _loss_section(result: dict[str, Any], phases: list[dict[str, Any]], routers: list[str]) -> str:
    """The report's loss breakdown: where the frames went in each phase (counters over its probing window)."""
    rows = []
    for ph in phases:
        lo = ph["loss"]
        sp = ph["setpoint_pps"]
        row: list[Any] = ["without XTC" if sp is None else f"{sp:.0f}", f"{ph.get('load_avg_1m', float('nan')):.2f}",
                          f"{lo['sent_pps']:.0f}"]
        for r in routers:
            x = lo[r]
            share = x["socket_drop_pps"] / x["handed_pps"] if x["handed_pps"] else 0.0
            row.append(f"{x['socket_drop_pps']:.0f} ({100 * share:.1f}%)")
        row.append(f"{sum(lo[r]['send_loss_pps'] for r in routers):.0f}")
        row.append(f"{sum(lo[r]['gap_before_pps'] + lo[r]['host_tx_drop_pps'] for r in routers[1:]):.0f}")
        row.append(f"{lo['backlog_drop_pps']:.0f}")
        row.append(" / ".join(f"{lo[r]['cpu_share']:.2f}" for r in routers))
        row.append(" / ".join(f"{100 * lo[r]['throttled_share']:.0f}%" for r in routers))
        rows.append(row)
    rb = {r: phases[0]["loss"][r].get("rcvbuf_bytes") for r in routers}
    sysctl = result.get("sysctl", {})
    rb_text = ", ".join(f"{r} {v}" for r, v in rb.items())
    asked = result.get("rcvbuf_bytes_asked")
    asked = asked if isinstance(asked, list) else [asked] * len(routers)
    # Frames lost after the first router, and the part of them that its successors' sockets dropped.
    after = [(sum(ph["loss"][r]["socket_drop_pps"] for r in routers[1:]),
              ph["loss"][routers[0]]["forwarded_pps"] - ph["loss"][routers[-1]]["forwarded_pps"]) for ph in phases]
    lost = sum(b for _a, b in after)
    explained = sum(a for a, _b in after) / lost if lost > 0 else float("nan")
    return f"""
## Where the frames are lost

Counters over the probing window of each phase (its last {result['hold_s'] * 2 / 3:.0f} s), in frames per
second: per router the frames its forwarder's receive socket dropped because its queue was full
(`ss -0 -m` in the VR's namespace, `skmem` `d`; in brackets the share of what the host handed to the VR);
"in-VR other" = received on eth0, not dropped by the socket and not sent on eth1 (failed sends, frames
still queued); "between hops" = left one VR and was not handed to the next one (mostly the pings to the
probe namespaces on the bridges between them, about {1 / result['ping_interval_s']:.0f}/s each); "backlog" = the host's per-CPU input backlog drops (`/proc/net/softnet_stat`); CPU = forwarder
CPU seconds per second; throttled = share of a VR's CFS periods ({result.get('vcpu_period_us', 100000) / 1000:g} ms)
in which its quota ran out.
The VRs' `/proc/net/snmp` Udp InErrors/RcvbufErrors stay 0 (the forwarders use packet sockets, not UDP)
and their qdiscs drop nothing (recorded in the JSON).  Receive buffer of the forwarders' sockets (bytes):
{rb_text} (asked: {', '.join("the kernel's default" if v is None else str(v) for v in asked)}; net.core.rmem_default
{sysctl.get('rmem_default')}, rmem_max {sysctl.get('rmem_max')}).

{markdown_table(['phase (setpoint, pps)', 'load (1 min)', 'sent (pps)', *[f'{r} socket drops' for r in routers],
                 'in-VR other', 'between hops', 'backlog', 'CPU ' + ' / '.join(routers), 'throttled ' + ' / '.join(routers)],
                rows)}

Of the frames lost between {routers[0]} and {routers[-1]} in these windows, the receive sockets of
{', '.join(routers[1:])} dropped {100 * explained:.0f}%.
"""


def _first_router_waste_md(result: dict[str, Any], phases: list[dict[str, Any]], routers: list[str]) -> str:
    """Figure 20's first router's waste (issue 48): what the host handed it, what it forwarded, what its
    socket dropped, what early drop's limiter dropped before handing, and the host's CPU, per phase."""
    rows = []
    for ph in phases:
        lo, lim, hc = ph.get("loss"), ph.get("limiter_dropped_pps"), ph.get("host_cpu_percent")
        if not lo or lim is None or not routers:
            continue
        r0 = routers[0]
        sp = ph["setpoint_pps"]
        rows.append(("without XTC" if sp is None else f"{sp:.0f}", f"{lo['sent_pps']:.0f}", f"{lo[r0]['handed_pps']:.0f}",
                     f"{lim.get(r0, 0.0):.0f}", f"{lo[r0]['socket_drop_pps']:.0f}", f"{lo[r0]['forwarded_pps']:.0f}",
                     " / ".join(f"{lim.get(r, 0.0):.0f}" for r in routers[1:]),
                     f"{hc['softirq']:.0f}", f"{hc['system']:.0f}", f"{hc['idle']:.0f}", f"{ph.get('load_avg_1m')}"))
    if not rows:
        return ""
    return (f"\n## The first router's waste (early drop {'on' if result.get('early_drop') else 'off'})\n\n"
            "Per phase, over its probing window, packets/s: what the generator sent, what the host handed the first "
            "router (host TX of its vif), what early drop's limiter (the eBPF bucket, or `tbf ed0:`) dropped before handing, what the "
            "first router's socket dropped, what it forwarded; the later routers' limiter drops; the host's CPU "
            "(percent of one CPU):\n\n"
            + markdown_table(["setpoint (pps)", "sent", f"handed to {routers[0]}", "limiter dropped",
                              f"{routers[0]} socket drops", f"{routers[0]} forwarded",
                              "limiter drops " + " / ".join(routers[1:]), "host softirq %", "host system %",
                              "host idle %", "load"], rows) + "\n")


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
(TG - {' - '.join(routers)} - TR), one LXC VR each, each controlled by its own `xtc daemon`{' with `[controller] lag_probe = false`' if result.get('lag_probe') is False else ''}; every VR gets
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
What the lab shows: the first router holds the setpoint and drops what its cap holds back; the caps of
{routers[-1]} at the end of each phase: {', '.join('-' if c is None else f'{c:.0f}%' for c in last_caps)}.  Between
{routers[0]} and {routers[-1]} the flow loses {100 * chain_loss_free:.1f}% without XTC and
{', '.join(f'{100 * x:.1f}%' for x in chain_loss_ctl)} under XTC.
"""
    with_loss = [ph for ph in phases if ph.get("loss")]
    if with_loss:
        md += _loss_section(result, with_loss, routers)
    md += _first_router_waste_md(result, phases, routers)
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
