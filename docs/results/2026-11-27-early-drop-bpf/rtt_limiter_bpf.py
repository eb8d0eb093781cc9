"""Figure 7's RTT through an uncapped VR with early drop's limiter present but not binding, vs absent.

The eBPF bucket's version of docs/results/2026-11-27-early-drop-cost/rtt_limiter.py (the TBF's).  Issue 48 item 4 (second half), goal "RTT through a VR whose limiter does not bind unchanged".
One netns VR of the lab (the lab's forwarder, no cap) forwards a paced 64-byte UDP stream
(``OFFERED_PPS``) while a ``ping -i 0.01`` probe (the paper's Figure 7 probe, 100 requests/s)
crosses it both ways.  Phases alternate, ``REPS`` times each: ``absent`` (the vifs' kernel default
root) and ``present`` (the daemon's default limiter, the eBPF bucket
:class:`xtc.host.bpflimiter.BpfLimiter`, on every host-side vif at the rate the daemon's rule would
give a VR forwarding all of its offered load: (1 + margin)(1 + step) = 1.071 x OFFERED_PPS with
0.3 s of credit, i.e. above what it is offered: present, not binding).
Per phase: every RTT sample, the probe's loss, the stream's forwarded rate, the limiter's drops
(must be 0: not binding).  Reported: median and p99 over all samples of each condition, and per
rep.  Run as root from the worktree's venv:
``.venv/bin/python docs/results/2026-11-27-early-drop-bpf/rtt_limiter_bpf.py OUT.json [REPS] [PING_S]``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from xtc.daemon.limiter_policy import BPF_TUNING, limit_bytes
from xtc.host.bpflimiter import BpfLimiter
from xtc.host.limiter import LimiterSetting
from xtc_lab.lab.netlab import NetLab, random_prefix, read_packet_counters
from xtc_lab.lab.probe import start_ping
from xtc_lab.lab.traffic import start_udp_stream

OFFERED_PPS = 5_000
FRAME_BYTES = 64 + 42


def main() -> None:
    out_path = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    ping_s = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    lab = NetLab(prefix=random_prefix("xtcr"))
    lim = BpfLimiter()
    runs: list[dict] = []
    try:
        vr = lab.add_netns_vr()
        vifs = tuple(vr.vifs)
        # the daemon's rule for a VR forwarding all it is offered: 1.05 x that (+ the step): not binding
        t = BPF_TUNING
        limit = limit_bytes((1 + t.margin_fraction) * (1 + t.step_fraction) * OFFERED_PPS, FRAME_BYTES, t)
        setting = LimiterSetting(limit.rate_bytes_per_s, limit.burst_bytes, rate_pps=limit.rate_pps, burst_s=t.burst_s)
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
                           "limit_pps": limit.rate_pps if phase == "present" else None,
                           "load_avg_1m": os.getloadavg()[0], "rtt_ms": rtt}
                    print(json.dumps({k: v for k, v in row.items() if k != "rtt_ms"}), flush=True)
                    runs.append(row)
    finally:
        lim.close()
        lab.teardown()
    summary = {}
    for phase in ("absent", "present"):
        allr = np.array([x for r in runs if r["phase"] == phase for x in r["rtt_ms"]])
        rs = [r for r in runs if r["phase"] == phase]
        summary[phase] = {"samples": int(allr.size), "median_ms": float(np.median(allr)),
                          "p99_ms": float(np.percentile(allr, 99)), "mean_ms": float(allr.mean()),
                          "per_rep_median_ms": [r["median_ms"] for r in rs], "per_rep_p99_ms": [r["p99_ms"] for r in rs],
                          "loss_ratio": float(np.mean([r["loss_ratio"] for r in rs])),
                          "limiter_dropped": sum(r["limiter_dropped"] or 0 for r in rs)}
    doc = {"title": "RTT (ping -i 0.01) through an uncapped netns VR: early drop's eBPF limiter present but not binding vs absent",
           "offered_pps": OFFERED_PPS, "frame_bytes": FRAME_BYTES, "ping_s": ping_s, "reps": reps,
           "limit": {"rate_pps": limit.rate_pps, "credit_s": BPF_TUNING.burst_s, "limiter": "bpf"},
           "summary": summary, "runs": runs}
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
