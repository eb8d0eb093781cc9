"""Figures 13-14 (and 2-3): incast of striped reads from N servers with a barrier.

This kernel has no iSCSI target, so the paper's own barrier-synchronised application (Figure 3)
stands in for iSCSI over RAID-0: the client asks each of the N servers for its stripe (``BLOCK / N``
bytes) of a 1 MB block over TCP, and asks for the next block only when all have answered
(:mod:`xtc_lab.xco.experiments.stripe`).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import numpy as np

from xtc_lab.lab.harness import markdown_table
from xtc_lab.lab.netlab import LabError
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import helper, port_delta, wait_listening

NAME = "incast"
TITLE = "incast: striped reads from N servers with a barrier"
PAPER = "Figures 2-3 and 13-14"
TOPOLOGY = "incast10"
BLOCK_BYTES = 1 << 20
PORT = 7000
PAPER_NOTE = ("at 1 Gb/s, 1 MB blocks: iSCSI read throughput falls from 842 Mb/s to 305 Mb/s as targets "
              "grow to 10 (Fig. 2), the striped-read application collapses likewise (Fig. 3); with timeslices "
              "the highest throughput, rate limiting in between (Figs. 13-14)")


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb = ctx.tb
    ns_list = (1, 4) if ctx.quick else (1, 2, 4, 6, 8, 10)
    total = (4 if ctx.quick else 24) * BLOCK_BYTES
    _raddr, rns = tb.vm("r1")
    servers = {}
    for k in range(1, 11):
        addr, sns = tb.vm(f"s{k}")
        servers[k] = (addr, sns, tb.spawn(sns, [*helper("stripe"), "serve", str(PORT)],
                                                stdout=subprocess.DEVNULL))
    for k in range(1, 11):
        wait_listening(tb, servers[k][1], [PORT])
    rate = tb.rate_bps("sw1>r1")
    rows = []
    for n in ns_list:
        ctx.say(f"  {n} servers, {total >> 20} MB in {BLOCK_BYTES >> 20} MB blocks")
        before = tb.port_stats()
        argv = [*helper("stripe"), "read", str(BLOCK_BYTES), str(total),
                *(f"{servers[k][0]}:{PORT}" for k in range(1, n + 1))]
        p = tb.run(rns, argv, timeout_s=300)
        if p.returncode != 0:
            raise LabError(f"striped read with {n} servers failed: {p.stderr[-400:]}")
        doc = json.loads(p.stdout)
        port = port_delta(before, tb.port_stats(), "sw1>r1", doc["seconds"])
        bt = np.asarray(doc["block_s"])
        rows.append({"servers": n, "throughput_bps": doc["bytes"] * 8 / doc["seconds"],
                     "throughput_fraction": doc["bytes"] * 8 / doc["seconds"] / rate,
                     "block_p50_ms": float(np.percentile(bt, 50) * 1000),
                     "block_max_ms": float(bt.max() * 1000),
                     "blocks_over_200ms": int((bt > 0.2).sum()), "blocks": len(bt), "switch_port": port})
    result = {"block_bytes": BLOCK_BYTES, "total_bytes": total, "bottleneck": "sw1>r1", "bottleneck_bps": rate,
              "stand_in_for_iscsi": "striped TCP reads with a barrier per block (the paper's Figure 3 application)",
              "points": rows, "paper": PAPER_NOTE}
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot([r["servers"] for r in rows], [r["throughput_bps"] / 1e6 for r in rows], "o-", label="read throughput")
    ax.axhline(rate / 1e6, color="grey", lw=0.8)
    ax.set_ylim(0, rate / 1e6 * 1.1)
    label_axes(ax, ctx, PAPER, "servers", "Mb/s")
    table = markdown_table(
        ["servers", "throughput Mb/s", "of bottleneck", "block p50 ms", "block max ms", "blocks > 200 ms",
         "switch drops", "switch loss"],
        [(r["servers"], f"{r['throughput_bps'] / 1e6:.1f}", f"{100 * r['throughput_fraction']:.1f}%",
          f"{r['block_p50_ms']:.1f}", f"{r['block_max_ms']:.1f}", f"{r['blocks_over_200ms']}/{r['blocks']}",
          r["switch_port"]["drops"], f"{r['switch_port']['loss_percent']:.2f}%") for r in rows])
    md = (f"No iSCSI target on this kernel: the stand-in is the paper's own barrier-synchronised application "
          f"(Figure 3): the client r1 reads {total >> 20} MB in {BLOCK_BYTES >> 20} MB blocks, each striped over "
          f"N servers (one TCP connection each), the next block asked for only when all stripes are in. "
          f"Bottleneck `sw1>r1` {rate / 1e6:g} Mb/s, {tb.record['port_buffer_bytes']} bytes of buffer. A block "
          f"over 200 ms has waited for a TCP retransmission timeout (Linux's RTO min).\n\n{table}\n\n"
          f"The paper: {PAPER_NOTE}.")
    return result, fig, md
