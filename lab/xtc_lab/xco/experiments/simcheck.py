"""Figure 23: the simulator against real packets, N UDP senders through one bottleneck.

The paper checks its NS3 model against its testbed before trusting it at data-centre scale
(Section 5.1).  Here the same check is made for the project's own simulator
(:mod:`xtc_lab.xco.simulate`, which drew Figure 27): N = 1..5 UDP senders of Figure 1(a) send at
their NIC rate into r1; the switch port's loss measured on the testbed (TBF drops over netlink) is
set beside the loss the simulator computes for the same topology at the lab's scale, with the
lab's buffers, in the same mode.

Figure 24 makes the same check on Figure 1(b) (:mod:`~xtc_lab.xco.experiments.simcheck_uplink`),
Figures 25-26 with TCP senders among the UDP ones (:mod:`~xtc_lab.xco.experiments.simcheck_mix`);
both use :func:`lab_topology` and :func:`simulated_loss` from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xtc.xco.topology import Topology, parse_topology
from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import FIG1A_SENDERS, UDP_PAYLOAD_BYTES, fig1a, flow_errors, run_flows_across

NAME = "fig23"
TITLE = "the simulator against the testbed: UDP loss at one bottleneck"
PAPER = "Figure 23"
TOPOLOGY = "fig1a"
SENDERS = FIG1A_SENDERS
#: Simulated seconds per point (the simulator's loss settles within a few slices).
SIM_SECONDS = 1.0
PAPER_NOTE = ("N = 1..5 UDP senders into one 1 Gb/s bottleneck: NS3 and the testbed report very similar loss "
              "with and without XCo (no loss with XCo; without, loss grows with N)")


def lab_topology(tb: Any) -> Topology:
    """The lab's topology as the simulator should see it: the rates the lab's TBFs emulate and the
    buffers of its ports (switch ports: the lab's port buffer; host uplinks: a NIC's queue)."""
    from xtc_lab.xco.experiments import topology_data, scaled_topology
    from xtc_lab.xco.testbed import HOST_QUEUE_BYTES

    topo = parse_topology(scaled_topology(topology_data(tb), tb.scale))
    port_buffer = int(tb.record["port_buffer_bytes"])
    host_names = set(topo.hosts)
    bufs = []
    for name, given in zip(topo.link_names, topo.link_buffer_bytes):
        src = name.split(">", 1)[0]
        bufs.append(given if given is not None else (HOST_QUEUE_BYTES if src in host_names else port_buffer))
    topo.link_buffer_bytes = tuple(bufs)
    return topo


def simulated_loss(topo: Topology, senders: Sequence[str], receiver: str | Mapping[str, str], mode: str,
                   slice_us: int, tcp: Sequence[bool] | None = None,
                   seconds: float = SIM_SECONDS) -> dict[str, Any]:
    """Loss and delivered rate the simulator computes for ``senders`` -> ``receiver`` (one host, or
    each sender's own) in ``mode``, over ``seconds`` simulated; ``tcp`` flags the senders that are
    TCP.  ``flow_delivered_bps``: per sender, in order."""
    from xtc_lab.xco.simulate import simulate

    flows = [(topo.host_id(h), topo.host_id(receiver if isinstance(receiver, str) else receiver[h]))
             for h in senders]
    # the scheduler alone (every flow backlogged at t = 0): the testbed's runs are compared after
    # their agents' start, which the one loop (cores=True) would add here
    r = simulate(topo, flows, mode, duration_s=seconds, slice_us=slice_us, tcp=tcp, cores=False)
    return {"loss_percent": r.loss_pct, "delivered_bps": r.delivered_bytes * 8 / r.sim_s,
            "flow_delivered_bps": [b * 8 / r.sim_s for b in r.flow_delivered_bytes]}


def udp_loss_points(ctx: Any, bottleneck: str, senders: Sequence[str], receiver: str | Mapping[str, str],
                    ns: Sequence[int], nic_bps: int, duration_s: int, paper: str,
                    ylabel: str) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    """For each n of ``ns``: the first n of ``senders`` send UDP at ``nic_bps`` to ``receiver`` (one
    host, or each sender's own) across ``bottleneck`` for ``duration_s`` on the testbed, then the
    simulator runs the same flows in ``ctx.mode``.  Returns the rows, the result's fields common to
    Figures 23 and 24 (with ``points``, without ``paper``) and the figure of both losses against n
    (titled with ``paper``, the figures rerun)."""
    import matplotlib.pyplot as plt

    from xtc_lab.xco.experiments import SLICE_US

    tb = ctx.tb
    topo = lab_topology(tb)
    slice_us = int(ctx.xco.get("slice_us", SLICE_US))
    to = "to their own receivers" if not isinstance(receiver, str) else f"to {receiver}"
    rows = []
    for n in ns:
        group = list(senders[:n])
        ctx.say(f"  {n} UDP sender(s) at {nic_bps / 1e6:g} Mb/s {to}, {duration_s} s; then the simulator")
        flows, port = run_flows_across(tb, bottleneck, [(h, "udp") for h in group], receiver, duration_s, nic_bps,
                                       UDP_PAYLOAD_BYTES)
        sim = simulated_loss(topo, group, receiver, ctx.mode, slice_us)
        rows.append({"senders": n, "switch_port": port, "testbed_loss_percent": port["loss_percent"],
                     "testbed_goodput_bps": sum(f["goodput_bps"] for f in flows), "flows": flows,
                     "sim_loss_percent": sim["loss_percent"], "sim_delivered_bps": sim["delivered_bps"],
                     "errors": flow_errors(flows)})
    result = {"bottleneck": bottleneck, "bottleneck_bps": tb.rate_bps(bottleneck), "nic_bps": nic_bps,
              "seconds_per_point": duration_s, "sim_seconds": SIM_SECONDS, "slice_us": slice_us,
              "port_buffer_bytes": tb.record["port_buffer_bytes"], "points": rows}
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    xs = [r["senders"] for r in rows]
    ax.plot(xs, [r["testbed_loss_percent"] for r in rows], "o-", label="testbed (switch port)")
    ax.plot(xs, [r["sim_loss_percent"] for r in rows], "s--", label="simulator")
    label_axes(ax, ctx, paper, "UDP senders", ylabel)
    return rows, result, fig


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    tb, dur, bottleneck, rate, nic = fig1a(ctx)
    rows, result, fig = udp_loss_points(ctx, bottleneck, SENDERS, "r1", (1, 3, 5) if ctx.quick else (1, 2, 3, 4, 5),
                                        nic, dur, PAPER, "loss at the bottleneck, %")
    result["paper"] = PAPER_NOTE
    slice_us = result["slice_us"]
    table = markdown_table(
        ["senders", "testbed loss", "simulator loss", "testbed goodput Mb/s", "simulator delivered Mb/s"],
        [(r["senders"], f"{r['testbed_loss_percent']:.2f}%", f"{r['sim_loss_percent']:.2f}%",
          f"{r['testbed_goodput_bps'] / 1e6:.1f}", f"{r['sim_delivered_bps'] / 1e6:.1f}") for r in rows])
    md = (f"N UDP senders of Figure 1(a) at their NIC rate ({nic / 1e6:g} Mb/s, {UDP_PAYLOAD_BYTES}-byte datagrams) "
          f"into r1 through `{bottleneck}` at {rate / 1e6:g} Mb/s (buffer {tb.record['port_buffer_bytes']} bytes), "
          f"{dur} s per point on the testbed; the simulator (`xtc_lab/xco/simulate.py`, fluid, {SIM_SECONDS:g} s "
          f"simulated) on the same topology at the lab's scale and buffers, mode {ctx.mode}"
          + (f", {slice_us} us slices" if ctx.mode != "none" else "") + ".\n\n" + table
          + f"\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
