"""The README's tables from an alternated run's JSON (``xtc lab run tcpudp --tcpudp-phases ...``):
``.venv/bin/python docs/results/2026-11-27-early-drop-dom0/tables.py RUN.json``."""

from __future__ import annotations

import json
import math
import sys


def f(v: object, nd: int = 1) -> str:
    return "-" if not isinstance(v, (int, float)) or not math.isfinite(v) else f"{v:.{nd}f}"


def ci(c: dict | None) -> str:
    if not c or not isinstance(c.get("mean"), (int, float)) or not math.isfinite(c["mean"]):
        return "-"
    sep = "" if c.get("separated") else " (noise)"
    return f"{c['mean']:+.1f} +-{f(c['ci95'])}{sep}"


def main() -> None:
    with open(sys.argv[1]) as fh:
        d = json.load(fh)
    ph, comp = d["phases"], d["comparisons"]
    print(f"setpoints: UDP {d['setpoints_pps']['udp'] / 1e3:.2f} kp/s, TCP {d['setpoints_pps']['tcp'] / 1e3:.2f} kp/s; "
          f"cost {d.get('host_delivery_cost_us')} us; windows per phase {d['alternate']}")
    print()
    print("| phase | UDP sent | UDP handed | UDP fwd (vs setpoint) | dropped by the UDP VR / by the vif limiter | "
          "TCP handed | TCP dropped by the VR | TCP fwd | TCP vs without | TCP vs XTC alone | host softirq % | "
          "system % | idle % (of 200) | emulated cost CPU % | UDP VR CPU / cap % | TCP VR CPU % | UDP generator CPU % |")
    print("|" + "---|" * 17)
    for p, s in ph.items():
        c = comp.get(p, {})
        sp = s["udp_setpoint_kpps"]
        err = "" if p == "without" else f" ({100 * (s['udp_forwarded_kpps'] / sp - 1):+.1f}%)"
        print(f"| {p} | {f(s['udp_sent_kpps'])} | {f(s['udp_handed_kpps'])} | {f(s['udp_forwarded_kpps'], 2)}{err} | "
              f"{f(s['udp_dropped_in_vr_kpps'])} / {f(s['udp_dropped_by_vif_limiter_kpps'])} | {f(s['tcp_handed_kpps'])} | "
              f"{f(s['tcp_dropped_in_vr_kpps'], 2)} | {f(s['tcp_forwarded_kpps'])} | {ci(c.get('tcp_gain_over_without_kpps'))} | "
              f"{ci(c.get('tcp_change_over_xtc_kpps'))} | {f(s['host_softirq_percent'])} | {f(s['host_system_percent'])} | "
              f"{f(s['host_idle_percent'])} | {f(s.get('host_delivery_cost_cpu_percent'))} | "
              f"{f(s['udp_vr_cpu_percent'], 0)} / {f(s['udp_cap_percent'], 0)} | {f(s['tcp_vr_cpu_percent'], 0)} | "
              f"{f(s['udp_tools_cpu_percent'], 0)} |")
    print()
    for p, c in comp.items():
        if "softirq_change_over_xtc_percent" not in c:
            continue
        print(f"{p} vs XTC alone, paired: " + ", ".join(
            f"{k.replace('_change_over_xtc', '')} {ci(v)}" for k, v in c.items() if k.endswith(("_over_xtc_percent", "_over_xtc_kpps"))))
    print()
    for g in d.get("goals", []):
        print(f"- [{'x' if g.get('met') else ' '}] {g.get('name') or g.get('goal')}: {g.get('measured')}")


if __name__ == "__main__":
    main()
