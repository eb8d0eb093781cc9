"""Figure 17 (and 7): a long-lived TCP flow against K sequences of short-lived ones.

Figure 6's topology: s1 sends one long-lived TCP flow (iperf3, the paper's netperf) to r1 while s2
runs K parallel sequences of 30 KB TCP connections (:mod:`xtc_lab.xco.experiments.shorttcp`, the
paper's ``shorttcp``) to r2; both cross the switches' common uplink ``sw1>sw2``.  Each short
connection ends in slow start, never backing off; the paper saw the long flow fall from 940 to 89
Mb/s and the total from 940 to 280 Mb/s as K grew to 400, and with XCo (timeslices between the two
senders) the long flow hold about 430 Mb/s with the total above the uncoordinated one.
"""

from __future__ import annotations

import subprocess
from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.lab.netlab import LabError
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import json_of, helper, port_delta, run_flows

NAME = "fig17"
TITLE = "a long-lived TCP flow against short-lived ones"
PAPER = "Figures 7 and 17"
TOPOLOGY = "fig6"
UPLINK = "sw1>sw2"
SHORT_BYTES = 30_000
SHORT_PORT = 7100
PAPER_NOTE = ("at 1 Gb/s, K = 0..400 sequences of 30 KB connections: without XCo the long flow falls from 940 to "
              "89 Mb/s and the total from 940 to 280 Mb/s; with timeslices the long flow stays about 430 Mb/s "
              "and the total is higher than without")


def run_mice(tb: Any, k: int, duration_s: int) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """Start the sink in r2's VM and K sequences in s2's VM; returns (sink, sender)."""
    raddr, rns = tb.vm("r2")
    _a, sns = tb.vm("s2")
    sink = tb.spawn(rns, [*helper("shorttcp"), "sink", str(SHORT_PORT), str(duration_s)])
    assert sink.stdout is not None
    if sink.stdout.readline().strip() != b"ready":
        raise LabError("shorttcp sink did not start")
    send = tb.spawn(sns, [*helper("shorttcp"), "send", raddr, str(SHORT_PORT), str(k), str(SHORT_BYTES),
                          str(duration_s)])
    return sink, send


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb = ctx.tb
    dur = 3 if ctx.quick else 10
    ks = (0, 50) if ctx.quick else (0, 10, 50, 100, 200, 400)
    rate = tb.rate_bps(UPLINK)
    rows = []
    for k in ks:
        ctx.say(f"  long flow s1 -> r1 with {k} short-connection sequences s2 -> r2, {dur} s")
        before = tb.port_stats()
        procs = run_mice(tb, k, dur) if k else None
        (long_flow,) = run_flows(tb, [("s1", "tcp")], "r1", dur, 0)
        after = tb.port_stats()
        short: dict[str, Any] = {"bytes": 0, "completed": 0, "failed": 0}
        if procs is not None:
            got, err = json_of(procs[0], dur + 30)
            sent, err2 = json_of(procs[1], dur + 30)
            if got is None or sent is None:
                short["error"] = err or err2
            else:
                short = {"bytes": got["bytes"], "completed": sent["completed"], "failed": sent["failed"],
                         "connections_received": got["connections"]}
        short_bps = short["bytes"] * 8 / dur
        port = port_delta(before, after, UPLINK, dur)
        rows.append({"k": k, "long_bps": long_flow["goodput_bps"], "long_retransmits": long_flow.get("retransmits"),
                     "short_bps": short_bps, "total_bps": long_flow["goodput_bps"] + short_bps,
                     "short": short, "uplink": port, "long_error": long_flow.get("error")})
    result = {"uplink": UPLINK, "uplink_bps": rate, "short_bytes": SHORT_BYTES, "seconds_per_point": dur,
              "points": rows, "paper": PAPER_NOTE}
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    xs = [r["k"] for r in rows]
    ax.plot(xs, [r["long_bps"] / 1e6 for r in rows], "o-", label="long-lived flow")
    ax.plot(xs, [r["total_bps"] / 1e6 for r in rows], "s--", label="total received")
    ax.axhline(rate / 1e6, color="grey", lw=0.8)
    label_axes(ax, ctx, PAPER, "sequences of short connections (K)", "Mb/s")
    table = markdown_table(
        ["K", "long flow Mb/s", "short flows Mb/s", "total Mb/s", "short connections", "uplink loss"],
        [(r["k"], f"{r['long_bps'] / 1e6:.1f}", f"{r['short_bps'] / 1e6:.1f}", f"{r['total_bps'] / 1e6:.1f}",
          r["short"].get("completed", 0), f"{r['uplink']['loss_percent']:.2f}%") for r in rows])
    md = (f"Figure 6's topology at scale {tb.scale}: s1 -> r1 one iperf3 TCP flow, s2 -> r2 K parallel sequences "
          f"of {SHORT_BYTES // 1000} KB TCP connections, both across `{UPLINK}` at {rate / 1e6:g} Mb/s, {dur} s per "
          f"point, mode {ctx.mode}. Goodput as received (iperf3's receiver; the short flows' sink).\n\n{table}\n\n"
          f"The paper: {PAPER_NOTE}.")
    return result, fig, md
