"""Figure 15 (and 4): five senders, a mix of TCP and UDP, into one receiver behind one switch port."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments import mix_figure
from xtc_lab.xco.experiments.flows import FIG1A_SENDERS, fig1a, ip_reassembly, port_delta, run_flows
from xtc_lab.xco.experiments.timing import LATE_TOLERANCE_US, capture, slice_shares

NAME = "fig15"
TITLE = "5 TCP/UDP senders into one receiver"
PAPER = "Figures 4 and 15"
TOPOLOGY = "fig1a"
SENDERS = FIG1A_SENDERS
# netperf's UDP_STREAM sends 64 KB messages: each leaves as 45 IP fragments, and a lost fragment loses
# the message ("dropping even a single 1.5KB packet leads the receiver to discard the entire 64KB message")
UDP_MESSAGE_BYTES = 65_000
# The paper's Figure 4 (no coordination) and 15 (XCo), read from its text: all-TCP > 900 Mb/s, an
# immediate drop as UDP senders are added; with timeslices "close to the maximum 1 Gbps" and about
# 200 Mb/s per TCP flow.
PAPER_NOTE = ("at 1 Gb/s, without XCo > 900 Mb/s with 5 TCP senders, an immediate drop of the "
              "application throughput as UDP senders replace them (link use 800-1000 Mb/s); with "
              "timeslices close to 1 Gb/s at every mix, about 200 Mb/s per TCP flow")


def mix(n_udp: int) -> list[tuple[str, str]]:
    return [(h, "udp" if k >= len(SENDERS) - n_udp else "tcp") for k, h in enumerate(SENDERS)]


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    tb, dur, bottleneck, rate, udp_rate = fig1a(ctx)
    points = (0, 3) if ctx.quick else (0, 1, 2, 3, 4, 5)
    rows = []
    # with timeslices and --in-slice: every packet towards r1 entering the switch (from the senders'
    # gates), kernel-stamped, against the slices each agent applied (agents at log level debug).  Not by
    # default: the capture adds load (measured before its BPF filter: 5 TCP senders lost 5.0-5.3 % at
    # the switch with it, 0.5-1.5 % without; with the filter 0.84 % in one run)
    in_slice_on = ctx.mode == "timeslice" and bool(ctx.params.get("in_slice"))
    for n_udp in points:
        ctx.say(f"  {5 - n_udp} TCP + {n_udp} UDP senders, {dur} s")
        before, reasm0 = tb.port_stats(), ip_reassembly(tb, "r1")
        with contextlib.ExitStack() as stack:
            cap: dict[str, Any] = {}
            sent: list[dict[str, Any]] = []
            if in_slice_on:
                # at the switch's port (as before), and as each sender's uplink sends them (after its
                # gate: no path in between); one filtered socket per namespace
                cap = stack.enter_context(capture(tb, tb.port_of(bottleneck)[0], tb.vm("r1")[0], dur + 40))
                sent = [stack.enter_context(capture(tb, tb.record["hosts"][h]["ns"], tb.vm("r1")[0], dur + 40,
                                                    egress_if=tb.record["hosts"][h]["uplink"])) for h in SENDERS]
            t0_us = time.time_ns() // 1000
            flows = run_flows(tb, mix(n_udp), "r1", dur, udp_rate, UDP_MESSAGE_BYTES)
            t1_us = time.time_ns() // 1000
        after, reasm1 = tb.port_stats(), ip_reassembly(tb, "r1")
        in_slice = None
        if in_slice_on:
            logs = {h: Path(ctx.xco["workdir"]) / f"agent-{h}.log" for h in SENDERS}
            addr_of = {h: tb.vm(h)[0] for h in SENDERS}
            at_uplinks = {"times_us": {k: v for c in sent for k, v in c.get("times_us", {}).items()},
                          "sizes": {k: v for c in sent for k, v in c.get("sizes", {}).items()}}
            in_slice = {"all": slice_shares(cap, logs, addr_of, ctx.xco["slice_us"], t0_us, t1_us),
                        "full_frames": slice_shares(cap, logs, addr_of, ctx.xco["slice_us"], t0_us, t1_us,
                                                    min_bytes=1400),
                        "capture_drops": cap.get("drops"), "captured": cap.get("packets"),
                        "at_uplinks": slice_shares(at_uplinks, logs, addr_of, ctx.xco["slice_us"], t0_us, t1_us),
                        "uplink_capture_drops": sum(c.get("drops") or 0 for c in sent),
                        "uplink_captured": sum(c.get("packets") or 0 for c in sent)}
        port = port_delta(before, after, bottleneck, dur)  # the senders send for dur s
        reasm = {k: reasm1[k] - reasm0[k] for k in reasm0}
        tcp = [f["goodput_bps"] for f in flows if f["proto"] == "tcp"]
        total = sum(f["goodput_bps"] for f in flows)
        rows.append({"n_udp": n_udp, "n_tcp": 5 - n_udp, "goodput_bps": total,
                     "goodput_fraction": total / rate, "tcp_per_flow_bps": sum(tcp) / len(tcp) if tcp else None,
                     "switch_port": port, "receiver_ip_reassembly": reasm, "flows": flows, "in_slice": in_slice})
    result = {"bottleneck": bottleneck, "bottleneck_bps": rate, "udp_rate_bps": udp_rate,
              "udp_message_bytes": UDP_MESSAGE_BYTES, "seconds_per_point": dur, "points": rows,
              "paper": PAPER_NOTE}
    fig = mix_figure(ctx, rows, rate, PAPER, len(SENDERS), "bottleneck link use")
    table = markdown_table(
        ["TCP+UDP", "goodput Mb/s", "of bottleneck", "per TCP flow Mb/s", "link use", "switch drops", "switch loss",
         "reassembly fails at r1"],
        [(f"{r['n_tcp']}+{r['n_udp']}", f"{r['goodput_bps'] / 1e6:.1f}", f"{100 * r['goodput_fraction']:.1f}%",
          "-" if r["tcp_per_flow_bps"] is None else f"{r['tcp_per_flow_bps'] / 1e6:.1f}",
          f"{100 * r['switch_port']['utilisation']:.1f}%", r["switch_port"]["drops"],
          f"{r['switch_port']['loss_percent']:.2f}%", r["receiver_ip_reassembly"]["ReasmFails"]) for r in rows])
    slice_md = ""
    if in_slice_on:
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{100 * x:.1f}%"

        slice_md = ("\n\n**Packets sent inside the sender's open slices** (goal >= 98%): every IPv4 packet towards "
                    "r1 entering the switch (so: leaving a sender's gate), stamped by the kernel (AF_PACKET, "
                    "`experiments/capture.py`, in the switch's namespace), against the open slices each agent "
                    "applied (its `directive_applied` events: from a directive with a destination to the next "
                    f"directive); also the share at most {LATE_TOLERANCE_US} us late.\n\n" + markdown_table(
                        ["TCP+UDP", "packets", "inside", f"inside or <= {LATE_TOLERANCE_US / 1000:g} ms late",
                         "full frames inside", "per sender inside", "inside the gate's open times", "capture drops",
                         "packets at the uplinks", "inside, at the uplinks", "after the slice's end, at the uplinks (p10 / p50 / p90 us)"],
                        [(f"{r['n_tcp']}+{r['n_udp']}", r["in_slice"]["all"]["packets"], pct(r["in_slice"]["all"]["inside"]),
                          pct(r["in_slice"]["all"]["inside_or_late_1ms"]), pct(r["in_slice"]["full_frames"]["inside"]),
                          " ".join(pct(v["inside"]) for v in r["in_slice"]["all"]["per_sender"].values()),
                          pct(r["in_slice"]["all"]["inside_gate"]), r["in_slice"]["capture_drops"],
                          r["in_slice"]["at_uplinks"]["packets"], pct(r["in_slice"]["at_uplinks"]["inside"]),
                          "; ".join(" / ".join(f"{x:g}" for x in v["misses"].get("after_end_us", []))
                                    for v in r["in_slice"]["at_uplinks"]["per_sender"].values()))
                         for r in rows])
                    + "\n\nThe share against the gate's open times counts against the times each agent's gate "
                    "change returned (`applied_us`) instead of the slices' grid (`start_us`): what a late "
                    "directive or a late gate change costs, separated from packets let out while the gate was "
                    "closed. The last three columns stamp the same packets where each sender's uplink sends them "
                    "(an AF_PACKET tap on the uplink's outgoing packets, after its queueing discipline: when the "
                    "gate let them go), without the path from the host to the switch's port that the first "
                    "stamps include, and say how long after its slice's end each sender's late packets left.")
    md = (f"Senders s1..s5 each on its own host, receiver r1; bottleneck `{bottleneck}` at {rate / 1e6:g} Mb/s "
          f"(TBF, {tb.record['port_buffer_bytes']} bytes). UDP senders send at their NIC rate "
          f"({udp_rate / 1e6:g} Mb/s) in {UDP_MESSAGE_BYTES}-byte datagrams, as netperf's 64 KB messages "
          f"(IP fragments: a lost fragment loses the datagram); TCP is one iperf3 connection each; "
          f"{dur} s per point. Goodput is what the receiver got (TCP: iperf3's receiver; UDP: a counting "
          f"sink); drops are the TBF's on the switch port (netlink qdisc stats); reassembly fails are the "
          f"receiving VM's (`/proc/net/snmp`): datagrams that lost a fragment or found the reassembly memory "
          f"full.\n\n{table}{slice_md}\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
