"""Figures 25 and 26: the simulator against real packets with TCP senders among the UDP ones.

Figure 1(a) as in Figure 15: five senders into r1 through ``sw1>r1``, K of them UDP at their NIC rate
and 5 - K TCP, K = 0..5.  Figure 25 sets the loss at the switch port measured on the testbed beside
the simulator's; Figure 26 the mean TCP goodput per flow.  The simulator's TCP is Reno's window on
a fluid source (:mod:`xtc_lab.xco.simulate`), so the testbed's TCP senders run Reno as well (iperf3
``-C reno``; the VMs' default, BBR, does not back off on loss).  UDP datagrams are one frame each
(as in Figure 23; Figure 15's 64 KB messages are IP fragments, which the simulator does not model).
"""

from __future__ import annotations

from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import (
    FIG1A_SENDERS,
    UDP_PAYLOAD_BYTES,
    failed_flows_md,
    fig1a,
    flow_errors,
    run_flows_across,
)
from xtc_lab.xco.experiments.senders import mix  # Figure 15's mixes: the last K of the five on UDP
from xtc_lab.xco.experiments.simcheck import lab_topology, simulated_loss

NAME = "fig25"
TITLE = "the simulator against the testbed: loss and TCP goodput with TCP and UDP senders"
PAPER = "Figures 25 and 26"
TOPOLOGY = "fig1a"
__all__ = ["NAME", "TITLE", "PAPER", "TOPOLOGY", "CONGESTION", "SIM_SECONDS", "run"]
SENDERS = FIG1A_SENDERS
#: The testbed's TCP congestion control: the one the simulator models.
CONGESTION = "reno"
#: Simulated seconds per point: a Reno window's saw-tooth at this bottleneck lasts tenths of a second.
SIM_SECONDS = 2.0
PAPER_NOTE = ("5 senders, K UDP and 5 - K TCP, into one 1 Gb/s bottleneck: NS3 and the testbed report similar "
              "loss (the slight difference put down to NS3's TCP against Linux's), and similar average TCP "
              "throughput (Figure 26)")


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    from xtc_lab.xco.experiments import SLICE_US

    tb, dur, bottleneck, rate, nic = fig1a(ctx)
    topo = lab_topology(tb)
    slice_us = int(ctx.xco.get("slice_us", SLICE_US))
    rows = []
    for n_udp in (0, 2, 5) if ctx.quick else range(len(SENDERS) + 1):
        senders = mix(n_udp)
        n_tcp = len(SENDERS) - n_udp
        ctx.say(f"  {n_tcp} TCP ({CONGESTION}) + {n_udp} UDP senders, {dur} s; then the simulator")
        flows, port = run_flows_across(tb, bottleneck, senders, "r1", dur, nic, UDP_PAYLOAD_BYTES,
                                       congestion=CONGESTION)
        tcp = [p == "tcp" for _h, p in senders]
        sim = simulated_loss(topo, [h for h, _p in senders], "r1", ctx.mode, slice_us, tcp=tcp, seconds=SIM_SECONDS)
        tb_tcp = [f["goodput_bps"] for f in flows if f["proto"] == "tcp"]
        sim_tcp = [b for b, t in zip(sim["flow_delivered_bps"], tcp) if t]
        rows.append({"n_udp": n_udp, "n_tcp": n_tcp, "switch_port": port, "flows": flows,
                     "testbed_loss_percent": port["loss_percent"],
                     "testbed_goodput_bps": sum(f["goodput_bps"] for f in flows),
                     "testbed_tcp_per_flow_bps": sum(tb_tcp) / len(tb_tcp) if tb_tcp else None,
                     "testbed_tcp_retransmits": sum(f.get("retransmits", 0) for f in flows),
                     "sim_loss_percent": sim["loss_percent"], "sim_delivered_bps": sim["delivered_bps"],
                     "sim_tcp_per_flow_bps": sum(sim_tcp) / len(sim_tcp) if sim_tcp else None,
                     "errors": flow_errors(flows)})
    result = {"bottleneck": bottleneck, "bottleneck_bps": rate, "nic_bps": nic, "seconds_per_point": dur,
              "sim_seconds": SIM_SECONDS, "slice_us": slice_us, "tcp_congestion": CONGESTION,
              "port_buffer_bytes": tb.record["port_buffer_bytes"], "points": rows, "paper": PAPER_NOTE}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = [r["n_udp"] for r in rows]
    ax1.plot(xs, [r["testbed_loss_percent"] for r in rows], "o-", label="testbed (switch port)")
    ax1.plot(xs, [r["sim_loss_percent"] for r in rows], "s--", label="simulator")
    label_axes(ax1, ctx, "Figure 25", f"UDP senders (of {len(SENDERS)})", "loss at the bottleneck, %")
    tx = [r for r in rows if r["n_tcp"]]
    ax2.plot([r["n_udp"] for r in tx], [r["testbed_tcp_per_flow_bps"] / 1e6 for r in tx], "o-", label="testbed")
    ax2.plot([r["n_udp"] for r in tx], [r["sim_tcp_per_flow_bps"] / 1e6 for r in tx], "s--", label="simulator")
    label_axes(ax2, ctx, "Figure 26", f"UDP senders (of {len(SENDERS)})", "goodput per TCP flow, Mb/s")
    fig.tight_layout()

    def mbps(v: float | None) -> str:
        return "-" if v is None else f"{v / 1e6:.2f}"

    table = markdown_table(
        ["TCP+UDP", "testbed loss", "simulator loss", "testbed per TCP flow Mb/s", "simulator per TCP flow Mb/s",
         "testbed goodput Mb/s", "simulator delivered Mb/s", "TCP retransmits (testbed)"],
        [(f"{r['n_tcp']}+{r['n_udp']}", f"{r['testbed_loss_percent']:.2f}%", f"{r['sim_loss_percent']:.2f}%",
          mbps(r["testbed_tcp_per_flow_bps"]), mbps(r["sim_tcp_per_flow_bps"]), mbps(r["testbed_goodput_bps"]),
          mbps(r["sim_delivered_bps"]), r["testbed_tcp_retransmits"]) for r in rows])
    md = (f"Five senders of Figure 1(a) into r1 through `{bottleneck}` at {rate / 1e6:g} Mb/s (buffer "
          f"{tb.record['port_buffer_bytes']} bytes): K UDP at their NIC rate ({nic / 1e6:g} Mb/s, "
          f"{UDP_PAYLOAD_BYTES}-byte datagrams) and 5 - K TCP (iperf3, congestion control {CONGESTION}), {dur} s "
          f"per point on the testbed; the simulator (`xtc_lab/xco/simulate.py`, fluid, Reno windows, "
          f"{SIM_SECONDS:g} s simulated) on the same topology at the lab's scale and buffers, mode {ctx.mode}"
          + (f", {slice_us} us slices" if ctx.mode != "none" else "") + ". The simulator does not "
          "retransmit: its TCP goodput is what its windows delivered.\n\n" + table
          + failed_flows_md(rows)
          + f"\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
