"""The README's tables from an alternated run's JSON (``xtc lab run tcpudp --tcpudp-phases ...``), with
where the UDP VR's own drops come from and the paired differences between two early-drop phases:
``.venv/bin/python docs/results/2026-11-27-early-drop-loss/tables.py RUN.json``.

The cells' number and interval formats, the paired lines against XTC alone and the goals are the lab's
(xtc_lab.lab.experiments.tcpudp_phases_report: number, interval, over_xtc_lines, goal_lines, with the
setpoints line and the UDP VR's error: the same bytes out); the script as it ran held them itself (git show 3576c2e:docs/results/2026-11-27-early-drop-loss/tables.py)."""

from __future__ import annotations

import json
import math
import statistics
import sys

from xtc_lab.lab.experiments.tcpudp_phases_report import (
    goal_lines,
    over_xtc_lines,
    setpoints_line,
    udp_error_text,
)
from xtc_lab.lab.experiments.tcpudp_phases_report import interval as ci
from xtc_lab.lab.experiments.tcpudp_phases_report import number as f

T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def paired(windows: list[dict], a: str, b: str, key: str) -> str:
    """Mean of (a - b) over the repetitions that ran both, with a 95% t half-width."""
    by = {(w["phase"], w["rep"]): w for w in windows}
    d = [by[(a, r)][key] - by[(b, r)][key] for r in sorted({w["rep"] for w in windows})
         if (a, r) in by and (b, r) in by and all(math.isfinite(by[(p, r)][key]) for p in (a, b))]
    if len(d) < 2:
        return "-"
    m, sd = statistics.fmean(d), statistics.stdev(d)
    h = (T95[len(d) - 2] if len(d) - 1 <= len(T95) else 1.96) * sd / math.sqrt(len(d))
    return f"{m:+.2f} +-{h:.2f}{'' if abs(m) > h else ' (noise)'}"


def main() -> None:
    with open(sys.argv[1]) as fh:
        d = json.load(fh)
    ph, comp, win = d["phases"], d["comparisons"], d["windows"]
    print(f"{setpoints_line(d)}; {d.get('command')}")
    print()
    print("| phase | UDP handed (x setpoint) | eBPF limit (x setpoint) | UDP fwd (vs setpoint) | dropped by the UDP VR "
          "(% of handed) / by the vif limiter | UDP VR CPU / cap % | throttled ms/s | waiting for a CPU ms/s | "
          "TCP fwd | TCP vs without | TCP vs XTC alone | host softirq % | idle % (of 200) | emulated cost CPU % |")
    print("|" + "---|" * 14)
    for p, s in ph.items():
        c = comp.get(p, {})
        sp = s["udp_setpoint_kpps"]
        err = udp_error_text(p, s)
        lim = s.get("udp_vif_limit_kpps")
        print(f"| {p} | {f(s['udp_handed_kpps'])} ({f(s['udp_handed_kpps'] / sp, 3)}x) | "
              f"{'-' if not isinstance(lim, (int, float)) or not math.isfinite(lim) else f'{lim:.1f} ({lim / sp:.3f}x)'} | "
              f"{f(s['udp_forwarded_kpps'], 2)}{err} | {f(s['udp_dropped_in_vr_kpps'], 2)} "
              f"({f(100 * s['udp_dropped_in_vr_kpps'] / s['udp_handed_kpps'])}%) / {f(s['udp_dropped_by_vif_limiter_kpps'])} | "
              f"{f(s['udp_vr_cpu_percent'], 0)} / {f(s['udp_cap_percent'], 0)} | {f(s.get('udp_throttled_ms_per_s'), 0)} | "
              f"{f(s.get('udp_run_delay_ms_per_s'), 0)} | {f(s['tcp_forwarded_kpps'])} | "
              f"{ci(c.get('tcp_gain_over_without_kpps'))} | {ci(c.get('tcp_change_over_xtc_kpps'))} | "
              f"{f(s['host_softirq_percent'])} | {f(s['host_idle_percent'])} | {f(s.get('host_delivery_cost_cpu_percent'))} |")
    print()
    for line in over_xtc_lines(comp):
        print(line)
    if "xtc+early-drop" in ph and "xtc+early-drop-noloss" in ph:
        print()
        print("xtc+early-drop vs xtc+early-drop-noloss, paired (kp/s or points): " + ", ".join(
            f"{k} {paired(win, 'xtc+early-drop', 'xtc+early-drop-noloss', k)}" for k in (
                "udp_handed_kpps", "udp_forwarded_kpps", "udp_dropped_in_vr_kpps", "tcp_forwarded_kpps",
                "host_softirq_percent", "host_idle_percent", "udp_vr_cpu_percent")))
    print()
    print("| window | UDP handed | limit | fwd | VR drops | cap % | CPU % | throttled ms/s | waiting ms/s | rcvbuf | idle % |")
    print("|" + "---|" * 11)
    for w in win:
        if w["phase"] == "without":
            continue
        print(f"| {w['phase']} #{w['rep'] + 1} | {f(w['udp_handed_kpps'], 2)} | {f(w.get('udp_vif_limit_kpps'), 2)} | "
              f"{f(w['udp_forwarded_kpps'], 2)} | {f(w['udp_dropped_in_vr_kpps'], 2)} | {f(w['udp_cap_percent'], 0)} | "
              f"{f(w['udp_vr_cpu_percent'], 1)} | {f(w.get('udp_throttled_ms_per_s'), 0)} | "
              f"{f(w.get('udp_run_delay_ms_per_s'), 0)} | {f(w.get('udp_rcvbuf_bytes'), 0)} | {f(w['host_idle_percent'])} |")
    print()
    for line in goal_lines(d.get("goals", [])):
        print(line)


if __name__ == "__main__":
    main()
