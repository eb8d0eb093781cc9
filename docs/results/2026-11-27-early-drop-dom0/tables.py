"""The README's tables from an alternated run's JSON (``xtc lab run tcpudp --tcpudp-phases ...``):
``.venv/bin/python docs/results/2026-11-27-early-drop-dom0/tables.py RUN.json``.

The cells' number and interval formats, the paired lines against XTC alone and the goals are the lab's
(xtc_lab.lab.experiments.tcpudp_phases_report: number, interval, over_xtc_lines, goal_lines, with the
setpoints line and the UDP VR's error: the same bytes out); the script as it ran held them itself (git show 6e2d87f:docs/results/2026-11-27-early-drop-dom0/tables.py)."""

from __future__ import annotations

import json
import sys

from xtc_lab.lab.experiments.tcpudp_phases_report import (
    goal_lines,
    over_xtc_lines,
    setpoints_line,
    udp_error_text,
)
from xtc_lab.lab.experiments.tcpudp_phases_report import interval as ci
from xtc_lab.lab.experiments.tcpudp_phases_report import number as f


def main() -> None:
    with open(sys.argv[1]) as fh:
        d = json.load(fh)
    ph, comp = d["phases"], d["comparisons"]
    print(setpoints_line(d))
    print()
    print("| phase | UDP sent | UDP handed | UDP fwd (vs setpoint) | dropped by the UDP VR / by the vif limiter | "
          "TCP handed | TCP dropped by the VR | TCP fwd | TCP vs without | TCP vs XTC alone | host softirq % | "
          "system % | idle % (of 200) | emulated cost CPU % | UDP VR CPU / cap % | TCP VR CPU % | UDP generator CPU % |")
    print("|" + "---|" * 17)
    for p, s in ph.items():
        c = comp.get(p, {})
        err = udp_error_text(p, s)
        print(f"| {p} | {f(s['udp_sent_kpps'])} | {f(s['udp_handed_kpps'])} | {f(s['udp_forwarded_kpps'], 2)}{err} | "
              f"{f(s['udp_dropped_in_vr_kpps'])} / {f(s['udp_dropped_by_vif_limiter_kpps'])} | {f(s['tcp_handed_kpps'])} | "
              f"{f(s['tcp_dropped_in_vr_kpps'], 2)} | {f(s['tcp_forwarded_kpps'])} | {ci(c.get('tcp_gain_over_without_kpps'))} | "
              f"{ci(c.get('tcp_change_over_xtc_kpps'))} | {f(s['host_softirq_percent'])} | {f(s['host_system_percent'])} | "
              f"{f(s['host_idle_percent'])} | {f(s.get('host_delivery_cost_cpu_percent'))} | "
              f"{f(s['udp_vr_cpu_percent'], 0)} / {f(s['udp_cap_percent'], 0)} | {f(s['tcp_vr_cpu_percent'], 0)} | "
              f"{f(s['udp_tools_cpu_percent'], 0)} |")
    print()
    for line in over_xtc_lines(comp):
        print(line)
    print()
    for line in goal_lines(d.get("goals", [])):
        print(line)


if __name__ == "__main__":
    main()
