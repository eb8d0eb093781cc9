"""Figure 17 three ways on netns VRs (cgroup backend): without XTC, XTC, XTC + early drop, alternated.

A TCP VR (one iperf3 flow, 524-byte frames) and a UDP VR (a paced stream of 524-byte frames)
of the lab, each a netns forwarder in its own cgroup; ``xtc daemon`` (cgroup backend) holds the
UDP VR at 20% and the TCP VR at 80% of the first "without" phase's aggregate.  Per phase: what
the host hands the UDP VR (host-side TX of its vifs), what each VR forwards (host-side RX), host
softirq CPU (/proc/stat, percent of one CPU), the load average, and whether each VR carried a
limiter at the end of the window (early drop is asked for both VRs in the last phase: the TCP
VR, whose source backs off, must get none).  Run as root from the worktree's
venv: ``.venv/bin/python docs/results/2026-11-26-early-drop/fig17_netns.py OUT.json [REPS]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xtc_lab.lab.harness import LabDaemon
from xtc_lab.lab.netlab import NetLab, random_prefix, read_packet_counters
from xtc_lab.lab.traffic import (
    start_streams,
    start_tcp_stream,
    start_udp_stream,
    udp_payload_for_frame,
)

FRAME = 524
OFFERED_PPS = 100_000
WARM_S, SETTLE_S, HOLD_S = 2.0, 12.0, 8.0
START_S = 30.0  # the most a daemon start may take on a loaded host


def softirq_ticks() -> tuple[int, int]:
    with open("/proc/stat") as fh:
        f = fh.readline().split()
    return int(f[7]), sum(int(x) for x in f[1:9])


def measure(vrs: dict, seconds: float) -> dict:
    c0, s0, t0 = read_packet_counters(), softirq_ticks(), time.monotonic()
    time.sleep(seconds)
    c1, s1, t1 = read_packet_counters(), softirq_ticks(), time.monotonic()
    dt = t1 - t0
    out = {}
    for key, vr in vrs.items():
        out[f"{key}_forwarded_kpps"] = sum(c1[v][0] - c0[v][0] for v in vr.vifs) / dt / 1e3
        out[f"{key}_handed_kpps"] = sum(c1[v][1] - c0[v][1] for v in vr.vifs) / dt / 1e3
    n = os.cpu_count() or 1
    out["host_softirq_percent"] = 100.0 * n * (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
    out["load_avg_1m"] = os.getloadavg()[0]
    return out


def main() -> None:
    out_path = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    lab = NetLab(prefix=random_prefix("xtcf"))
    work = Path(tempfile.mkdtemp(prefix="xtc-f17-"))
    runs: list[dict] = []
    try:
        tcp_vr, udp_vr = lab.add_netns_vr(cgroup=True), lab.add_netns_vr(cgroup=True)
        vrs = {"tcp": tcp_vr, "udp": udp_vr}
        setpoints = None
        for rep in range(reps):
            for phase in ("without", "xtc", "xtc+early-drop"):
                dur = WARM_S + START_S + SETTLE_S + HOLD_S + 5  # the streams outlast a slow daemon start; stopped after
                streams = start_streams(
                    lambda dur=dur: start_tcp_stream(lab, tcp_vr, dur, flows=1, frame_bytes=FRAME),
                    lambda dur=dur: start_udp_stream(lab, udp_vr, OFFERED_PPS, dur,
                                                     payload_bytes=udp_payload_for_frame(FRAME)))
                d = None
                try:
                    time.sleep(WARM_S)
                    if phase != "without":
                        assert setpoints is not None
                        d = LabDaemon(work / f"d{rep}-{phase}", "lxc:///", [tcp_vr, udp_vr], kind="xtc").start(START_S)
                        d.call("activate", vr=udp_vr.name, setpoint_pps=setpoints["udp"],
                               early_drop=(phase == "xtc+early-drop"))
                        # early drop asked for the TCP VR too: its source backs off, so it must get no limiter
                        d.call("activate", vr=tcp_vr.name, setpoint_pps=setpoints["tcp"],
                               early_drop=(phase == "xtc+early-drop"))
                        time.sleep(SETTLE_S)
                    m = measure(vrs, HOLD_S)
                    for key, vr in vrs.items():  # a limiter (early drop's TBF ed0:) on the VR's vifs at the end?
                        m[f"{key}_limited"] = any("tbf ed0:" in subprocess.run(
                            ["tc", "qdisc", "show", "dev", v], capture_output=True, text=True, check=False).stdout for v in vr.vifs)
                    if setpoints is None:
                        agg = (m["tcp_forwarded_kpps"] + m["udp_forwarded_kpps"]) * 1e3
                        setpoints = {"udp": 0.2 * agg, "tcp": 0.8 * agg}
                    m.update(phase=phase, rep=rep, udp_setpoint_kpps=(setpoints["udp"] / 1e3 if phase != "without" else None),
                             tcp_setpoint_kpps=(setpoints["tcp"] / 1e3 if phase != "without" else None))
                    print(json.dumps(m), flush=True)
                    runs.append(m)
                finally:
                    if d is not None:
                        d.stop()
                    for s in streams:
                        s.stop()
                time.sleep(1.0)
    finally:
        lab.teardown()
    phases = {}
    for name in ("without", "xtc", "xtc+early-drop"):
        rs = [r for r in runs if r["phase"] == name]
        if rs:
            phases[name] = {k: sum(r[k] for r in rs) / len(rs) for k in rs[0]
                            if isinstance(rs[0][k], float) and all(r.get(k) is not None for r in rs)}
            phases[name]["runs"] = len(rs)
            if name == "without":
                phases[name]["udp_setpoint_kpps"] = None
    doc = {"title": "Figure 17 three ways on netns VRs (cgroup backend), phases alternated",
           "offered_udp_pps": OFFERED_PPS, "frame_bytes": FRAME, "hold_s": HOLD_S, "settle_s": SETTLE_S,
           "setpoints_kpps": {k: v / 1e3 for k, v in (setpoints or {}).items()},
           "phases": phases, "runs": runs}
    out_path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
