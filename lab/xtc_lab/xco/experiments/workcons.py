"""Figure 21: 3 slow and 2 fast UDP senders share one bottleneck (its use, per-sender goodput)."""

from __future__ import annotations

from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.xco.experiments.fairness import jain
from xtc_lab.xco.experiments.flows import UDP_PAYLOAD_BYTES, fig1a, run_flows_across

NAME = "fig21"
TITLE = "3 slow and 2 fast UDP senders"
PAPER = "Figure 21"
TOPOLOGY = "fig1a"
SLOW = ("s1", "s2", "s3")
FAST = ("s4", "s5")
#: The slow senders' rate as a fraction of the bottleneck: the paper's 50 Mb/s of 1 Gb/s.
SLOW_FRACTION = 0.05
PAPER_NOTE = ("five UDP senders across a 1 Gb/s bottleneck, three at 50 Mb/s and two at the maximum: link use "
              "about 300 Mb/s without XCo, more than 500 Mb/s with XCo but without work conservation, more than "
              "800 Mb/s with XCo and work conservation")


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb, dur, bottleneck, rate, nic = fig1a(ctx)
    slow = int(SLOW_FRACTION * rate)
    ctx.say(f"  3 UDP senders at {slow / 1e6:g} Mb/s + 2 at {nic / 1e6:g} Mb/s, {dur} s")
    flows, port = run_flows_across(tb, bottleneck, [(h, "udp") for h in SLOW + FAST], "r1", dur, nic,
                                   UDP_PAYLOAD_BYTES, udp_rates_bps={h: slow for h in SLOW})
    good = [f["goodput_bps"] for f in flows]
    total = sum(good)
    result = {"bottleneck": bottleneck, "bottleneck_bps": rate, "slow_rate_bps": slow, "fast_rate_bps": nic,
              "udp_datagram_bytes": UDP_PAYLOAD_BYTES, "seconds": dur, "flows": flows, "goodput_bps": total,
              "goodput_fraction": total / rate, "jain_index": jain(good), "switch_port": port, "paper": PAPER_NOTE}
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.bar([f"{f['sender']}" for f in flows], [g / 1e6 for g in good],
           color=["C2" if f["sender"] in SLOW else "C3" for f in flows])
    ax.set_ylabel("goodput Mb/s")
    ax.set_title(f"{PAPER}, mode {ctx.mode}: {100 * total / rate:.0f}% of the bottleneck")
    table = markdown_table(["sender", "sends Mb/s", "goodput Mb/s", "datagrams lost"],
                           [(f["sender"], f"{f.get('sent_bps', 0) / 1e6:.1f}", f"{f['goodput_bps'] / 1e6:.1f}",
                             f"{f.get('lost_percent', 0):.1f}%") for f in flows])
    md = (f"UDP senders s1-s3 at {slow / 1e6:g} Mb/s (the paper's 50 of 1000) and s4-s5 at the NIC rate "
          f"({nic / 1e6:g} Mb/s), {UDP_PAYLOAD_BYTES}-byte datagrams (one per frame), into r1 for {dur} s; "
          f"bottleneck `{bottleneck}` at {rate / 1e6:g} Mb/s. XCo's give-up (a destination with nothing queued "
          f"for `giveup_after_us` is handed on) is its work conservation; it is always on.\n\n"
          f"**Bottleneck use: goodput {total / rate * 100:.1f}%** (goal >= 90%), link use "
          f"{100 * port['utilisation']:.1f}%, switch loss {port['loss_percent']:.2f}%.\n\n{table}\n\n"
          f"The paper: {PAPER_NOTE}.")
    return result, fig, md
