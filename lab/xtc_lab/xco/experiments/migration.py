"""Figure 19: how long a live VM migration takes while other senders congest the receiver's port.

The paper migrates an idle 256 MB VM from S1 to R1 while N = 0..4 netperf senders (S2..S5, all TCP
or all UDP) send to R1, with and without XCo.  An idle VM's pre-copy migration is one bulk
transfer of its memory (few pages are dirtied again), so here it is one TCP transfer of the
memory's size scaled like the links (25.6 MB at scale 0.1: the same 2 s on an idle
link as the paper's 256 MB at 1 Gb/s); the migration time is the transfer's, as the receiver
counts it.  The competing senders start first (the migration starts once they fill half of the
bottleneck) and send for the point's time limit (their goodput is reported over that time); a
migration not done by then is reported as not finished.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

from xtc_lab.lab.harness import markdown_table
from xtc_lab.lab.netlab import LabError
from xtc_lab.xco.experiments import label_axes
from xtc_lab.xco.experiments.flows import json_of, helper, run_flows

NAME = "fig19"
TITLE = "live VM migration time under congestion"
PAPER = "Figure 19"
TOPOLOGY = "fig1a"
MIGRATING_FROM = "s1"
COMPETITORS = ("s2", "s3", "s4", "s5")
#: The paper's idle VM, bytes (scaled by the lab's scale).
VM_MEMORY_BYTES = 256 * 1024 * 1024
MIGRATION_PORT = 5300
PAPER_NOTE = ("256 MB idle VM S1 -> R1 at 1 Gb/s with 0..4 competing netperf senders: without XCo the migration "
              "time grows steeply with UDP competitors (exponentially) and clearly with TCP ones (link use < 500 "
              "Mb/s); with timeslices it grows linearly, about the same for TCP and UDP competitors (link use "
              "about 950 Mb/s)")


def migrate(tb: Any, nbytes: int, limit_s: float) -> dict[str, Any]:
    """Send ``nbytes`` over one TCP connection from the migrating VM to r1's VM; the receiver's time
    from its first byte to the connection's end, seconds (None when not done within ``limit_s``)."""
    raddr, rns = tb.vm("r1")
    _a, sns = tb.vm(MIGRATING_FROM)
    sink = tb.spawn(rns, [*helper("shorttcp"), "bulk-sink", str(MIGRATION_PORT), str(limit_s)])
    assert sink.stdout is not None
    if sink.stdout.readline().strip() != b"ready":
        raise LabError("migration sink did not start")
    send = tb.spawn(sns, [*helper("shorttcp"), "bulk-send", raddr, str(MIGRATION_PORT), str(nbytes)],
                    stdout=subprocess.DEVNULL)
    got, err = json_of(sink, limit_s + 15)
    if send.poll() is None:
        send.kill()
    send.wait()
    if got is None:
        return {"seconds": None, "error": err}
    if not got["complete"] or got["bytes"] < nbytes:
        return {"seconds": None, "received_bytes": got["bytes"], "error": "not finished within the limit"}
    return {"seconds": got["seconds"], "received_bytes": got["bytes"]}


def wait_busy(tb: Any, link: str, fraction: float, timeout_s: float) -> float:
    """Wait until ``link`` carries at least ``fraction`` of its rate over 0.5 s (the competitors are
    sending), at most ``timeout_s``; the last 0.5 s's use (fraction of the rate)."""
    rate = tb.rate_bps(link)
    deadline = time.monotonic() + timeout_s
    use = 0.0
    st = tb.port_stats()[link]
    t0, b0 = st["read_at_s"], st["bytes"]
    while time.monotonic() < deadline:
        time.sleep(0.5)
        st = tb.port_stats()[link]
        t1, b1 = st["read_at_s"], st["bytes"]
        use = (b1 - b0) * 8 / (t1 - t0) / rate
        if use >= fraction:
            break
        t0, b0 = t1, b1
    return use


def run(ctx: Any) -> tuple[dict[str, Any], Any, str]:
    import matplotlib.pyplot as plt

    tb = ctx.tb
    nbytes = int(VM_MEMORY_BYTES * tb.scale) if not ctx.quick else int(VM_MEMORY_BYTES * tb.scale / 3)
    limit_s = 10 if ctx.quick else 30
    counts = (0, 2) if ctx.quick else (0, 1, 2, 3, 4)
    nic = tb.rate_bps("s2>sw1")
    rows = []
    for kind in ("tcp", "udp"):
        for n in counts:
            if n == 0 and kind == "udp":
                rows.append({**next(r for r in rows if r["competitors"] == 0), "kind": "udp"})
                continue
            ctx.say(f"  migration of {nbytes / 1e6:.1f} MB with {n} {kind.upper()} competitor(s) (limit {limit_s} s)")
            box: dict[str, Any] = {}
            th = None
            if n:
                senders = [(h, kind) for h in COMPETITORS[:n]]
                th = threading.Thread(target=lambda: box.update(flows=run_flows(tb, senders, "r1", limit_s, nic)),
                                      daemon=True)
                th.start()
                ramp = wait_busy(tb, "sw1>r1", 0.5, timeout_s=8.0)
                ctx.say(f"    competitors at {100 * ramp:.0f}% of the bottleneck; migration starts")
            mig = migrate(tb, nbytes, limit_s)
            if th is not None:
                th.join(timeout=limit_s + 60)
            rows.append({"kind": kind, "competitors": n, "migration": mig,
                         "competitor_goodput_bps": sum(f["goodput_bps"] for f in box.get("flows", []))})
    result = {"vm_memory_bytes": nbytes, "limit_s": limit_s, "nic_bps": nic, "points": rows, "paper": PAPER_NOTE}
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for kind, mk in (("tcp", "o-"), ("udp", "s--")):
        pts = [(r["competitors"], r["migration"]["seconds"]) for r in rows if r["kind"] == kind]
        ax.plot([p[0] for p in pts], [p[1] if p[1] is not None else float("nan") for p in pts], mk,
                label=f"migration + {kind.upper()}")
    label_axes(ax, ctx, PAPER, "competing senders", "migration time, s")

    def secs(r: dict[str, Any]) -> str:
        s = r["migration"]["seconds"]
        return f"> {limit_s} (not finished)" if s is None else f"{s:.2f}"

    table = markdown_table(["competitors", "kind", "migration s", "competitors' goodput Mb/s"],
                           [(r["competitors"], r["kind"], secs(r), f"{r['competitor_goodput_bps'] / 1e6:.1f}")
                            for r in rows])
    md = (f"An idle VM's memory ({nbytes / 1e6:.1f} MB, the paper's 256 MB at scale {tb.scale}) sent from "
          f"{MIGRATING_FROM} to r1 over one TCP connection while 0..{len(COMPETITORS)} senders "
          f"({', '.join(COMPETITORS)}; all TCP, iperf3, or all UDP at the NIC rate {nic / 1e6:g} Mb/s) send to r1 "
          f"for {limit_s} s; migration time as the receiver counts it, mode {ctx.mode}.\n\n{table}\n\n"
          f"The paper: {PAPER_NOTE}.")
    return result, fig, md
