"""Figure 18 (and 8): ping RTT between two VMs, idle and while bulk senders congest the receiver's port."""

from __future__ import annotations

import threading
import time
from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import PING_FRAME_BYTES, ping_rtts, port_delta, run_flows

NAME = "fig18"
TITLE = "ping RTT under congestion"
PAPER = "Figures 8 and 18"
TOPOLOGY = "fig1a"
# 3 TCP and 2 UDP senders: the paper's "mix of TCP and UDP netperf traffic"
BACKGROUND = [("s1", "tcp"), ("s2", "tcp"), ("s3", "tcp"), ("s4", "udp"), ("s5", "udp")]
PAPER_NOTE = ("in setup 1(b) (a shared 10 Gb/s link): idle 86 us, almost constant; congested, without "
              "XCo 100 us to 20 ms; with XCo 100 us to 2 ms")


#: The switch port's steady rate is measured from this long after the senders start to this long
#: before they stop, seconds.
STEADY_FROM_S = 1.0
STEADY_BEFORE_END_S = 1.0


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb = ctx.tb
    dur = 4 if ctx.quick else 12
    interval = 0.01
    count = int((dur - 2) / interval)
    ctx.say(f"  idle: {count} pings q1 -> r1")
    idle = ping_rtts(tb, "q1", "r1", count, interval)
    ctx.say(f"  congested: 3 TCP + 2 UDP senders into r1 for {dur} s, pings q1 -> r1")
    box: dict[str, Any] = {}

    def pinger() -> None:
        time.sleep(1.0)  # let the senders fill the queue
        box["rtt"] = ping_rtts(tb, "q1", "r1", count, interval)

    def steady() -> None:
        # the port's bytes over the middle of the phase, every sender active: what the senders share
        # (their goodputs are means over windows that start and end a little apart, and a flow that
        # ends hands its rate to the others for the rest of theirs), less the pings' echo requests,
        # which cross the same port all the while and are no sender's
        meter = tb.port_tx_meter("sw1>r1")
        time.sleep(STEADY_FROM_S)
        b0, t0, w0 = meter()
        time.sleep(dur - STEADY_FROM_S - STEADY_BEFORE_END_S)
        b1, t1, w1 = meter()
        box["steady_port"] = {"from_s": STEADY_FROM_S, "to_s": dur - STEADY_BEFORE_END_S, "window_s": t1 - t0,
                              "window_within_s": w0 + w1, "bps": (b1 - b0) * 8 / (t1 - t0)}

    before = tb.port_stats()
    th = threading.Thread(target=pinger)
    th.start()
    th2 = threading.Thread(target=steady)
    th2.start()
    flows = run_flows(tb, BACKGROUND, "r1", dur, tb.rate_bps("s1>sw1"))
    th.join()
    th2.join()
    port = port_delta(before, tb.port_stats(), "sw1>r1", dur)  # the senders send for dur s
    busy = box["rtt"]
    # the echo requests' rate: ping's own span from the first to the last (its -i is a least gap)
    per_s = (busy["sent"] - 1) / (busy["span_ms"] / 1000) if busy.get("span_ms") else 1 / interval
    sp = box["steady_port"]
    sp.update(ping_bps=PING_FRAME_BYTES * 8 * per_s, senders_bps=sp["bps"] - PING_FRAME_BYTES * 8 * per_s)
    rate = tb.rate_bps("sw1>r1")
    buf = tb.record["port_buffer_bytes"]
    full_queue_ms = buf * 8 / rate * 1000
    result = {"idle": idle, "congested": busy, "background": flows, "switch_port": port,
              "steady_port": {**box["steady_port"], "utilisation": box["steady_port"]["bps"] / rate,
                              "senders_utilisation": box["steady_port"]["senders_bps"] / rate},
              "ping_interval_s": interval, "full_queue_ms": full_queue_ms, "paper": PAPER_NOTE}

    def row(label: str, r: dict[str, Any]) -> tuple:
        return (label, r["received"], r["sent"], *(f"{r.get(k, float('nan')):.3f}" for k in
                                                   ("min_ms", "p50_ms", "p99_ms", "max_ms")))

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(idle["rtts_ms"], ".", ms=2, label="idle")
    ax.plot(busy["rtts_ms"], ".", ms=2, label="congested")
    ax.set_yscale("log")
    label_axes(ax, ctx, PAPER, "ping", "RTT (ms)")
    table = markdown_table(["", "received", "sent", "min ms", "p50 ms", "p99 ms", "max ms"],
                           [row("idle", idle), row("congested", busy)])
    md = (f"Pings every {interval * 1000:g} ms from the quiet host q1's VM to r1's VM, which shares the switch "
          f"port `sw1>r1` ({rate / 1e6:g} Mb/s, {buf} bytes of buffer: a full queue is {full_queue_ms:.1f} ms) "
          f"with 3 TCP and 2 UDP senders. Switch port during the congested phase: {port['drops']} drops "
          f"({port['loss_percent']:.1f}%), {100 * port['utilisation']:.0f}% used; from {STEADY_FROM_S:g} s after the senders start to "
          f"{STEADY_BEFORE_END_S:g} s before they stop, {100 * result['steady_port']['utilisation']:.1f}% used, "
          f"{100 * result['steady_port']['senders_utilisation']:.2f}% by the senders (the pings less).\n\n{table}\n\n"
          f"The paper: {PAPER_NOTE}. At scale {tb.scale} a queue of the same bytes drains {1 / tb.scale:g} times "
          f"slower, so queueing delays are {1 / tb.scale:g} times the paper's for the same occupancy.")
    return result, fig, md
