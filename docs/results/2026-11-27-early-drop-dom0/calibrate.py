"""Calibration of the lab's emulated Dom0 delivery cost (``xtc_lab.lab.hostcost``): the host CPU it
adds per packet delivered into a VR, at a known rate.

One netns VR of the lab (the lab's forwarder in a namespace and a cgroup of its own, uncapped)
forwards a paced UDP stream of ``RATE_PPS`` 524-byte frames (Figure 17's size).  Conditions
alternate, ``REPS`` times each, ``HOLD_S`` seconds measured each: no cost, and the cost at each of
``COSTS_US`` on the VR's own veth ends (``eth0``, ``eth1``).  Per condition: the host's CPU from
/proc/stat (busy = all but idle and iowait; softirq and system apart), the CPU of the processes
outside the lab (other engineers' tests on the shared host: taken off the busy time, "lab busy"), the VR's cgroup CPU, the
generator's CPU (its namespace's processes), the packets that paid the cost and the ns the program
spent (its own counters).  Added host CPU per packet = (lab busy with the cost - lab busy without,
paired repetition by repetition) / packets that paid it; the same for the generator's CPU (the
context whose softirq runs the program for packets into ``eth0``) and the VR's cgroup CPU.  Run as root from the worktree's venv:
``.venv/bin/python docs/results/2026-11-27-early-drop-dom0/calibrate.py OUT.json [REPS] [HOLD_S] [COSTS_US...]``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from xtc_lab.lab.experiments.tcpudp import (
    netns_vr_cpu_ns,
    other_process_ticks,
    parse_pid_stat_ticks,
    parse_proc_stat_cpu,
)
from xtc_lab.lab.hostcost import DeliveryCost
from xtc_lab.lab.netlab import (
    NetLab,
    pids_in_netns,
    random_prefix,
    read_packet_counters,
)
from xtc_lab.lab.traffic import start_udp_stream, udp_payload_for_frame

RATE_PPS = 40_000
FRAME_BYTES = 524
TPS = os.sysconf("SC_CLK_TCK")


def tools_ticks(ns: str) -> int:
    t = 0
    for pid in pids_in_netns(ns):
        try:
            t += parse_pid_stat_ticks(Path(f"/proc/{pid}/stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return t


def reading(lab, vr, cost):
    c = read_packet_counters()
    others = other_process_ticks(lab.prefix)
    paid = cost.counts() if cost is not None else {}
    return {"t": time.monotonic(), "stat": parse_proc_stat_cpu(Path("/proc/stat").read_text()),
            "vr_ns": netns_vr_cpu_ns(vr.cgroup), "tg_ticks": tools_ticks(vr.tg_ns), "others": others,
            "handed": c[vr.vifs[0]][1], "forwarded": c[vr.vifs[1]][0],
            "paid": sum(s.packets for s in paid.values()), "spent_ns": sum(s.spent_ns for s in paid.values()),
            "cut_short": sum(s.cut_short for s in paid.values())}


def window(a, b, cost_us: float, rep: int) -> dict:
    dt = b["t"] - a["t"]
    d = {k: b["stat"][k] - a["stat"][k] for k in a["stat"]}
    total = sum(d.values())

    def pct(*keys: str) -> float:
        return 200.0 * sum(d[k] for k in keys) / total  # percent of one CPU, 2 cores = 200

    others = sum(max(0, b["others"][p][0] - t) for p, (t, _) in a["others"].items() if p in b["others"])
    others_pct = 100.0 * others / TPS / dt
    return {"cost_us": cost_us, "rep": rep, "dt_s": dt, "load_avg_1m": os.getloadavg()[0],
            "host_busy_percent": 200.0 - pct("idle", "iowait"), "others_cpu_percent": others_pct,
            "lab_busy_percent": 200.0 - pct("idle", "iowait") - others_pct, "host_softirq_percent": pct("softirq"),
            "host_system_percent": pct("system"), "host_user_percent": pct("user", "nice"),
            "vr_cpu_percent": 100.0 * (b["vr_ns"] - a["vr_ns"]) / 1e9 / dt,
            "generator_cpu_percent": 100.0 * (b["tg_ticks"] - a["tg_ticks"]) / TPS / dt,
            "handed_pps": (b["handed"] - a["handed"]) / dt, "forwarded_pps": (b["forwarded"] - a["forwarded"]) / dt,
            "paid_pps": (b["paid"] - a["paid"]) / dt,
            "program_cpu_percent": 100.0 * (b["spent_ns"] - a["spent_ns"]) / 1e9 / dt,
            "cut_short": b["cut_short"] - a["cut_short"]}


def main() -> None:
    out = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    hold_s = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
    costs_us = [float(x) for x in sys.argv[4:]] or [2.0, 4.0]
    conds = [0.0, *costs_us]
    lab = NetLab(prefix=random_prefix("xtcc"))
    rows: list[dict] = []
    try:
        vr = lab.add_netns_vr(cgroup=True)
        total_s = reps * len(conds) * (hold_s + 3) + 15
        with start_udp_stream(lab, vr, RATE_PPS, duration_s=total_s, payload_bytes=udp_payload_for_frame(FRAME_BYTES)):
            time.sleep(3.0)
            for rep in range(reps):
                order = conds if rep % 2 == 0 else list(reversed(conds))
                for x in order:
                    cost = DeliveryCost(vr.name, ("eth0", "eth1"), x) if x > 0 else None
                    try:
                        if cost is not None:
                            cost.install()
                        time.sleep(1.5)
                        a = reading(lab, vr, cost)
                        time.sleep(hold_s)
                        b = reading(lab, vr, cost)
                    finally:
                        if cost is not None:
                            cost.remove()
                    w = window(a, b, x, rep)
                    rows.append(w)
                    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in w.items()}), flush=True)
    finally:
        lab.teardown()
    summary = {}
    for x in costs_us:
        diffs, per_pkt, soft, gen, vrc = [], [], [], [], []
        for rep in range(reps):
            on = next(r for r in rows if r["cost_us"] == x and r["rep"] == rep)
            off = next(r for r in rows if r["cost_us"] == 0.0 and r["rep"] == rep)
            diffs.append(on["lab_busy_percent"] - off["lab_busy_percent"])
            per_pkt.append(1e4 * diffs[-1] / on["paid_pps"])  # percent of a CPU -> us per packet
            soft.append(on["host_softirq_percent"] - off["host_softirq_percent"])
            gen.append(1e4 * (on["generator_cpu_percent"] - off["generator_cpu_percent"]) / on["paid_pps"])
            vrc.append(1e4 * (on["vr_cpu_percent"] - off["vr_cpu_percent"]) / on["paid_pps"])
        ons = [r for r in rows if r["cost_us"] == x]
        summary[str(x)] = {
            "added_lab_busy_percent_mean": statistics.fmean(diffs), "added_lab_busy_percent_sd": statistics.stdev(diffs),
            "added_softirq_percent_mean": statistics.fmean(soft),
            "added_us_per_packet_mean": statistics.fmean(per_pkt), "added_us_per_packet_sd": statistics.stdev(per_pkt),
            "added_generator_us_per_packet_mean": statistics.fmean(gen),
            "added_generator_us_per_packet_sd": statistics.stdev(gen),
            "added_vr_us_per_packet_mean": statistics.fmean(vrc), "added_vr_us_per_packet_sd": statistics.stdev(vrc),
            "program_us_per_packet_mean": statistics.fmean(1e4 * r["program_cpu_percent"] / r["paid_pps"] for r in ons),
            "paid_pps_mean": statistics.fmean(r["paid_pps"] for r in ons),
            "program_cpu_percent_mean": statistics.fmean(r["program_cpu_percent"] for r in ons),
            "vr_cpu_percent_mean": statistics.fmean(r["vr_cpu_percent"] for r in ons),
            "generator_cpu_percent_mean": statistics.fmean(r["generator_cpu_percent"] for r in ons)}
    off = [r for r in rows if r["cost_us"] == 0.0]
    summary["0.0"] = {"vr_cpu_percent_mean": statistics.fmean(r["vr_cpu_percent"] for r in off),
                      "lab_busy_percent_mean": statistics.fmean(r["lab_busy_percent"] for r in off),
                      "generator_cpu_percent_mean": statistics.fmean(r["generator_cpu_percent"] for r in off),
                      "host_busy_percent_mean": statistics.fmean(r["host_busy_percent"] for r in off)}
    print(json.dumps(summary, indent=1))
    out.write_text(json.dumps({"rate_pps": RATE_PPS, "frame_bytes": FRAME_BYTES, "reps": reps, "hold_s": hold_s,
                               "costs_us": costs_us, "summary": summary, "windows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
