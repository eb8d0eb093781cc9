"""Figure 7's RTT through an uncapped VR with an early-drop limiter present but not binding, vs absent.

Issue 48 item 4 (second half), goal "RTT through a VR whose limiter does not bind unchanged".  One
netns VR of the lab (the lab's forwarder, no cap) forwards a paced 64-byte UDP stream
(:data:`OFFERED_PPS`) while a ``ping -i 0.01`` probe (the paper's Figure 7 probe, 100 requests/s)
crosses it both ways.  Phases alternate, ``reps`` times each: ``absent`` (the vifs' kernel default
root) and ``present`` (the given limiter on every host-side vif at a setting above what the VR is
offered: present, not binding).  Per phase: every RTT sample, the probe's loss, the stream's
forwarded and handed rates, the limiter's drops (must be 0: not binding).  :func:`rtt_report`:
median and p99 over all samples of each condition, and per rep.  Run as root;
docs/results/2026-11-27-early-drop-cost/rtt_limiter.py (the TBF) and
docs/results/2026-11-27-early-drop-bpf/rtt_limiter_bpf.py (the eBPF bucket) call it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from xtc.host.limiter import Limiter, LimiterSetting
from xtc_lab.lab.netlab import NetLab, random_prefix, read_packet_counters
from xtc_lab.lab.probe import start_ping
from xtc_lab.lab.traffic import start_udp_stream

__all__ = ["FRAME_BYTES", "OFFERED_PPS", "rtt_limiter_runs", "rtt_report"]

OFFERED_PPS = 5_000
FRAME_BYTES = 64 + 42


def rtt_limiter_runs(lim: Limiter, setting: LimiterSetting, limit_pps: float, reps: int,
                     ping_s: float) -> list[dict[str, Any]]:
    """The alternated phases on a fresh netns VR (removed at the end, as is every limit; ``lim`` is
    closed): one row a phase, printed as it ends (without its samples)."""
    lab = NetLab(prefix=random_prefix("xtcr"))
    runs: list[dict[str, Any]] = []
    try:
        vr = lab.add_netns_vr()
        vifs = tuple(vr.vifs)
        total_s = 2 * reps * (ping_s + 4) + 20
        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=total_s):
            time.sleep(2.0)
            for rep in range(reps):
                for phase in (("absent", "present") if rep % 2 == 0 else ("present", "absent")):
                    if phase == "present":
                        for v in vifs:
                            lim.install(v, setting)
                    time.sleep(1.0)
                    d0 = lim.dropped_by_interface(vifs)
                    c0, t0 = read_packet_counters(), time.monotonic()
                    res = start_ping(lab, vr.tg_ns, vr.tr_addr, interval_s=0.01, duration_s=ping_s).result()
                    c1, t1 = read_packet_counters(), time.monotonic()
                    d1 = lim.dropped_by_interface(vifs)
                    for v in vifs:
                        lim.remove(v)
                    rtt = sorted(res.rtt_ms)
                    row = {"rep": rep, "phase": phase, "samples": len(rtt), "loss_ratio": res.loss_ratio,
                           "median_ms": float(np.median(rtt)) if rtt else None,
                           "p99_ms": float(np.percentile(rtt, 99)) if rtt else None,
                           "forwarded_pps": sum(c1[v][0] - c0[v][0] for v in vifs) / (t1 - t0),
                           "handed_pps": sum(c1[v][1] - c0[v][1] for v in vifs) / (t1 - t0),
                           "limiter_dropped": (sum(d1.get(v, 0) - d0.get(v, 0) for v in vifs) if phase == "present" else None),
                           "limit_pps": limit_pps if phase == "present" else None,
                           "load_avg_1m": os.getloadavg()[0], "rtt_ms": rtt}
                    print(json.dumps({k: v for k, v in row.items() if k != "rtt_ms"}), flush=True)
                    runs.append(row)
    finally:
        lim.close()
        lab.teardown()
    return runs


def rtt_report(title: str, limit: dict[str, Any], runs: list[dict[str, Any]], reps: int, ping_s: float) -> dict[str, Any]:
    """The JSON document: the settings, ``limit`` as given, each condition's summary, every run."""
    summary = {}
    for phase in ("absent", "present"):
        allr = np.array([x for r in runs if r["phase"] == phase for x in r["rtt_ms"]])
        rs = [r for r in runs if r["phase"] == phase]
        summary[phase] = {"samples": int(allr.size), "median_ms": float(np.median(allr)),
                          "p99_ms": float(np.percentile(allr, 99)), "mean_ms": float(allr.mean()),
                          "per_rep_median_ms": [r["median_ms"] for r in rs], "per_rep_p99_ms": [r["p99_ms"] for r in rs],
                          "loss_ratio": float(np.mean([r["loss_ratio"] for r in rs])),
                          "limiter_dropped": sum(r["limiter_dropped"] or 0 for r in rs)}
    return {"title": title, "offered_pps": OFFERED_PPS, "frame_bytes": FRAME_BYTES, "ping_s": ping_s, "reps": reps,
            "limit": limit, "summary": summary, "runs": runs}
