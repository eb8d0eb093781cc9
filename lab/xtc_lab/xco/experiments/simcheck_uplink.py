"""Figure 24: the simulator against real packets, N UDP senders across Figure 1(b)'s shared link.

As Figure 23 (:mod:`~xtc_lab.xco.experiments.simcheck`), on Figure 1(b): N = 1..13 senders s_k, each
on its own host on switch sw1, send UDP at their NIC rate to r_k on sw2, so every flow crosses the
link ``sw1>sw2``.  The switch port's loss measured on the testbed (TBF drops over netlink) is set
beside the loss the simulator computes for the same topology at the lab's scale, with the lab's
buffers, in the same mode.  The lab runs at Figure 16's scale (0.02: thirteen 20 Mb/s senders into
a 200 Mb/s link, what two cores forward), so loss starts at N = 11.
"""

from __future__ import annotations

from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments.flows import UDP_PAYLOAD_BYTES, failed_flows_md
from xtc_lab.xco.experiments.simcheck import SIM_SECONDS, udp_loss_points
from xtc_lab.xco.experiments.uplink import AGENT_HOSTS, BOTTLENECK, RECEIVER_OF, SCALE, SENDERS

NAME = "fig24"
TITLE = "the simulator against the testbed: UDP loss at a shared switch-to-switch link"
PAPER = "Figure 24"
TOPOLOGY = "fig1b"
__all__ = ["NAME", "TITLE", "PAPER", "TOPOLOGY", "SCALE", "AGENT_HOSTS", "run"]
#: Numbers of senders run: around the point where the senders' sum passes the link's rate (11 of
#: 13 at 10 Gb/s / 1 Gb/s), and both ends.
POINTS = (1, 4, 7, 10, 11, 12, 13)
QUICK_POINTS = (10, 13)
PAPER_NOTE = ("N = 1..13 UDP senders to N receivers across the 10 Gb/s link of Figure 1(b): NS3's loss "
              "closely tracks the testbed's")


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    tb = ctx.tb
    dur = 3 if ctx.quick else 10
    rate, nic = tb.rate_bps(BOTTLENECK), tb.rate_bps("s1>sw1")
    rows, result, fig = udp_loss_points(ctx, BOTTLENECK, SENDERS, RECEIVER_OF, QUICK_POINTS if ctx.quick else POINTS,
                                        nic, dur, PAPER, "loss at the shared link, %")
    result["paper"] = PAPER_NOTE
    slice_us = result["slice_us"]
    table = markdown_table(
        ["senders", "offered / link", "testbed loss", "simulator loss", "testbed goodput Mb/s",
         "simulator delivered Mb/s"],
        [(r["senders"], f"{r['senders'] * nic / rate:.2f}", f"{r['testbed_loss_percent']:.2f}%",
          f"{r['sim_loss_percent']:.2f}%", f"{r['testbed_goodput_bps'] / 1e6:.1f}",
          f"{r['sim_delivered_bps'] / 1e6:.1f}") for r in rows])
    md = (f"N UDP senders s1..sN of Figure 1(b) at their NIC rate ({nic / 1e6:g} Mb/s, {UDP_PAYLOAD_BYTES}-byte "
          f"datagrams), s_k to r_k, all across `{BOTTLENECK}` at {rate / 1e6:g} Mb/s (buffer "
          f"{tb.record['port_buffer_bytes']} bytes), {dur} s per point on the testbed; the simulator "
          f"(`xtc_lab/xco/simulate.py`, fluid, {SIM_SECONDS:g} s simulated) on the same topology at the lab's "
          f"scale and buffers, mode {ctx.mode}" + (f", {slice_us} us slices" if ctx.mode != "none" else "")
          + ".\n\n" + table + failed_flows_md(rows)
          + f"\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
