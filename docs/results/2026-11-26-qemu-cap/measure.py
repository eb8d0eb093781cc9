"""Which libvirt scheduler parameter bounds a QEMU guest's forwarding (issue 49, item 2).

Run as root from the repository: ``.venv/bin/python docs/results/2026-11-26-qemu-cap/measure.py``.
Builds one QEMU VR (lab prefix ``xtcq-cap``), measures its uncapped forwarding rate, then for each
of vcpu_quota, global_quota, emulator_quota, iothread_quota sets quotas of 10/25/50 % of one CPU
(period 100 ms) live, offers a paced UDP stream above the uncapped rate and records the forwarded
rate and the CPU of each QEMU thread (vCPU vs the rest = emulator/main loop/I/O).  Writes
results.json beside itself and tears the lab down.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import libvirt

from xtc_lab.lab import qemu
from xtc_lab.lab.libvirtd import Libvirtd
from xtc_lab.lab.netlab import NetLab
from xtc_lab.lab.traffic import start_udp_stream

HZ = os.sysconf("SC_CLK_TCK")
WINDOW_S = 4.0


def threads(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``, summed by thread name."""
    out: dict[str, float] = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (t / "comm").read_text().strip()
            f = (t / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / HZ
    return out


def softirq_s() -> float:
    f = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(f[6]) + int(f[7])) / HZ  # irq + softirq, all CPUs


def measure(lab: NetLab, vr, qpid: int, rate_pps: float) -> dict:
    s = start_udp_stream(lab, vr, rate_pps, WINDOW_S + 2.0)
    try:
        time.sleep(1.0)
        c0, t0, i0, m0 = vr.counters(), threads(qpid), softirq_s(), time.monotonic()
        time.sleep(WINDOW_S)
        c1, t1, i1, m1 = vr.counters(), threads(qpid), softirq_s(), time.monotonic()
    finally:
        s.stop()
    dt = m1 - m0
    cpu = {k: round((t1.get(k, 0) - t0.get(k, 0)) / dt * 100, 1) for k in t1}
    return {"offered_pps": rate_pps,
            "sent_pps": round((c1["offered_from_tg"] - c0["offered_from_tg"]) / dt),
            "forwarded_pps": round((c1["forwarded_to_tr"] - c0["forwarded_to_tr"]) / dt),
            "thread_cpu_percent": {k: v for k, v in cpu.items() if v > 0.0},
            "host_irq_softirq_percent": round((i1 - i0) / dt * 100, 1)}


def main() -> int:
    daemon = Libvirtd(uri=qemu.QEMU_URI)
    daemon.ensure_running()
    accel, why = qemu.pick_accel()
    print(f"accel: {accel} ({why})", flush=True)
    out: dict = {"accel": accel, "accel_reason": why, "period_us": 100000, "window_s": WINDOW_S,
                 "frame_bytes": 106, "host_cpus": os.cpu_count(), "vhost_net": Path("/dev/vhost-net").exists()}
    with daemon.lease(), NetLab(prefix="xtcq-cap", uri=qemu.QEMU_URI) as lab:
        t0 = time.monotonic()
        vr = lab.add_qemu_vr(accel=accel)
        out["boot_to_forwarding_s"] = round(time.monotonic() - t0, 1)
        dom = lab.domain(vr)
        qpid = int(Path(f"/run/libvirt/qemu/{vr.name}.pid").read_text())
        out["original_params"] = dom.schedulerParameters()
        print("booted in", out["boot_to_forwarding_s"], "s; params", out["original_params"], flush=True)
        out["uncapped"] = [measure(lab, vr, qpid, r) for r in (2000, 5000, 10000, 20000, 40000)]
        for row in out["uncapped"]:
            print("uncapped", row, flush=True)
        top = max(r["forwarded_pps"] for r in out["uncapped"])
        offered = max(2000.0, round(top * 1.3, -2))
        out["capped_offered_pps"] = offered
        out["capped"] = []
        for param in ("vcpu_quota", "global_quota", "emulator_quota", "iothread_quota"):
            for pct in (10, 25, 50):
                quota = pct * 1000
                try:
                    dom.setSchedulerParametersFlags({param: quota}, libvirt.VIR_DOMAIN_AFFECT_LIVE)
                except libvirt.libvirtError as e:
                    out["capped"].append({"param": param, "percent": pct, "error": str(e)})
                    print(param, pct, "error", e, flush=True)
                    continue
                try:
                    row = {"param": param, "percent": pct, "quota_us": quota, **measure(lab, vr, qpid, offered)}
                finally:
                    dom.setSchedulerParametersFlags({param: out["original_params"][param]}, libvirt.VIR_DOMAIN_AFFECT_LIVE)
                out["capped"].append(row)
                print(row, flush=True)
        out["restored_params"] = dom.schedulerParameters()
    Path(__file__).with_name("results.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
