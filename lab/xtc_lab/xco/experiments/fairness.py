"""Figure 20: fairness of 2 UDP and 3 TCP senders sharing one bottleneck (Jain's index of their goodput)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments.flows import UDP_PAYLOAD_BYTES, fig1a, run_flows_across

NAME = "fig20"
TITLE = "Fairness of 2 UDP and 3 TCP senders"
PAPER = "Figure 20"
TOPOLOGY = "fig1a"
SENDERS = (("s1", "tcp"), ("s2", "tcp"), ("s3", "tcp"), ("s4", "udp"), ("s5", "udp"))
PAPER_NOTE = ("2 UDP and 3 TCP senders at the maximum rate across a 1 Gb/s bottleneck: without XCo UDP "
              "dominates the link at TCP's expense; with XCo the TCP flows get about the same share as the "
              "UDP flows")


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)``: 1 when all are equal, 1/n when one takes all.

    Parameters
    ----------
    xs : sequence of float
        The shares (any unit, e.g. bits/s).

    Returns
    -------
    float or None
        The index in ``[1/n, 1]``; None for no shares or all zero.
    """
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if xs and s2 > 0 else None


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb, dur, bottleneck, rate, udp_rate = fig1a(ctx)
    ctx.say(f"  3 TCP + 2 UDP senders, {dur} s")
    flows, port = run_flows_across(tb, bottleneck, SENDERS, "r1", dur, udp_rate, UDP_PAYLOAD_BYTES)
    good = [f["goodput_bps"] for f in flows]
    index = jain(good)
    total = sum(good)
    result = {"bottleneck": bottleneck, "bottleneck_bps": rate, "udp_rate_bps": udp_rate,
              "udp_datagram_bytes": UDP_PAYLOAD_BYTES, "seconds": dur, "flows": flows, "jain_index": index,
              "goodput_bps": total, "goodput_fraction": total / rate, "switch_port": port, "paper": PAPER_NOTE}
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.bar([f"{f['sender']} {f['proto']}" for f in flows], [g / 1e6 for g in good],
           color=["C0" if f["proto"] == "tcp" else "C3" for f in flows])
    ax.axhline(rate / 5 / 1e6, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("goodput Mb/s")
    ax.set_title(f"{PAPER}, mode {ctx.mode}: Jain {index if index is None else round(index, 3)}")
    table = markdown_table(["sender", "protocol", "goodput Mb/s", "share"],
                           [(f["sender"], f["proto"], f"{f['goodput_bps'] / 1e6:.1f}",
                             f"{100 * f['goodput_bps'] / total:.1f}%" if total else "-") for f in flows])
    md = (f"Senders s1-s3 TCP (one iperf3 connection each), s4-s5 UDP at the NIC rate ({udp_rate / 1e6:g} Mb/s, "
          f"{UDP_PAYLOAD_BYTES}-byte datagrams: one per frame), into r1 for {dur} s; bottleneck `{bottleneck}` at "
          f"{rate / 1e6:g} Mb/s. Goodput is what r1 got per sender.\n\n"
          f"**Jain's index {'-' if index is None else f'{index:.3f}'}** (goal >= 0.95); total {total / 1e6:.1f} Mb/s "
          f"({100 * total / rate:.1f}% of the bottleneck), link use {100 * port['utilisation']:.1f}%, switch loss "
          f"{port['loss_percent']:.2f}%.\n\n{table}\n\nThe paper: {PAPER_NOTE}.")
    return result, fig, md
