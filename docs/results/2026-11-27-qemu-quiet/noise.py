"""Where does the scatter of a QEMU (TCG) VR's 1 s forwarded rates come from on a quiet host?

On a lab made by ``xtc lab up --kind qemu --name NAME``: a udpsend stream through the VR, then, per
condition, ``--seconds`` 1 s windows of the forwarded rate, the generator's sent rate, the CPU of
each QEMU thread (the TCG vCPU thread, the main/emulator loop that moves the packets, the others),
of the generator and the host's softirq time, per CPU.  Conditions: uncapped and a fixed 10 % cap,
with the threads unpinned or pinned (libvirt ``vcpupin``/``emulatorpin`` of the guest to CPU 1, the
generator to CPU 0), a 25 ms CFS period, and a lower offered rate.
Usage: noise.py NAME OUT.json [SECONDS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from xtc_lab.lab.harness import set_cap
from xtc_lab.lab.lifecycle import load_lab
from xtc_lab.lab.netlab import NetLab, read_packet_counters, vr_totals
from xtc_lab.lab.traffic import start_udp_stream

HZ = os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[str, int]:
    """CPU time (ns) of each thread of ``pid``, keyed by '<comm>/<tid>'."""
    out = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (t / "comm").read_text().strip()
            out[f"{comm}/{t.name}"] = int((t / "schedstat").read_text().split()[0])
        except OSError:
            continue
    return out


def softirq_ticks() -> list[int]:
    rows = [ln.split() for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("cpu") and ln[3] != " "]
    return [int(r[7]) for r in rows]


def virsh(uri: str, *args: str) -> None:
    subprocess.run(["virsh", "-c", uri, *args], check=True, stdout=subprocess.DEVNULL)


def pin(uri: str, dom: str, udp_pid: int, pinned: bool) -> None:
    cpus = ",".join(str(c) for c in range(os.cpu_count() or 1))
    virsh(uri, "vcpupin", dom, "0", "1" if pinned else cpus, "--live")
    virsh(uri, "emulatorpin", dom, "1" if pinned else cpus, "--live")
    os.sched_setaffinity(udp_pid, {0} if pinned else set(range(os.cpu_count() or 1)))


def windows(vr, gen: str, qpid: int, udp_pid: int, seconds: int) -> dict:
    fwd, sent, cpu = [], [], {}
    c0, t0, th0, u0, s0 = read_packet_counters(), time.monotonic(), threads(qpid), threads(udp_pid), softirq_ticks()
    for _ in range(seconds):
        time.sleep(1.0)
        c1, t1, th1, u1, s1 = read_packet_counters(), time.monotonic(), threads(qpid), threads(udp_pid), softirq_ticks()
        dt = t1 - t0
        a, b = vr_totals(c0, vr.vifs), vr_totals(c1, vr.vifs)
        fwd.append((b[0] - a[0]) / dt)
        sent.append((c1[gen][0] - c0[gen][0]) / dt)
        for k, v in th1.items():
            cpu.setdefault("qemu:" + k, []).append(100 * (v - th0.get(k, v)) / 1e9 / dt)
        cpu.setdefault("generator", []).append(100 * (sum(u1.values()) - sum(u0.values())) / 1e9 / dt)
        for i, (x, y) in enumerate(zip(s0, s1)):
            cpu.setdefault(f"softirq:cpu{i}", []).append(100 * (y - x) / HZ / dt)
        c0, t0, th0, u0, s0 = c1, t1, th1, u1, s1

    def cv(xs):
        m = statistics.mean(xs)
        return round(statistics.pstdev(xs) / m, 4) if m else None

    return {"forwarded_mean_pps": round(statistics.mean(fwd)), "forwarded_cv": cv(fwd),
            "forwarded_min_max_pps": [round(min(fwd)), round(max(fwd))],
            "sent_mean_pps": round(statistics.mean(sent)), "sent_cv": cv(sent),
            "cpu_mean_percent": {k: round(statistics.mean(v), 1) for k, v in cpu.items() if statistics.mean(v) >= 0.5},
            "cpu_cv": {k: cv(v) for k, v in cpu.items() if statistics.mean(v) >= 0.5},
            "forwarded_pps": [round(x) for x in fwd], "load_avg_1m": os.getloadavg()[0]}


def main(name: str, out: str, seconds: int = 20) -> int:
    record, vrs, _chain = load_lab(name)
    uri = record["uri"]
    lab = NetLab(prefix=name, uri=uri)  # a view on the persistent lab: never torn down here
    lab.vrs = list(vrs)
    vr = lab.vrs[0]
    dom = lab.domain(vr)
    qpid = int(Path(f"/run/libvirt/qemu/{dom.name()}.pid").read_text())
    gen = f"{lab.prefix}-g{vr.k}"
    rows = []
    # (label, offered pps, cap %, pinned, vcpu_period us)
    plan = [("uncapped", 25000, None, False, 100000), ("cap10", 25000, 10.0, False, 100000),
            ("uncapped-pinned", 25000, None, True, 100000), ("cap10-pinned", 25000, 10.0, True, 100000),
            ("cap10-period25ms", 25000, 10.0, False, 25000), ("cap10-pinned-period25ms", 25000, 10.0, True, 25000),
            ("uncapped-12k", 12000, None, False, 100000), ("cap10-12k", 12000, 10.0, False, 100000),
            ("cap10-12k-pinned", 12000, 10.0, True, 100000)]
    offered = None
    stream = None
    try:
        for label, rate, cap, pinned, period in plan:
            if rate != offered:
                if stream is not None:
                    stream.stop()
                stream = start_udp_stream(lab, vr, rate, duration_s=3600)
                offered = rate
                time.sleep(1)
            virsh(uri, "schedinfo", dom.name(), "--live", f"vcpu_period={period}")
            set_cap(lab, vr, cap, period_us=period)
            pin(uri, dom.name(), stream.client.pid, pinned)
            time.sleep(3)
            row = {"label": label, "offered_pps": rate, "cap_percent": cap, "pinned": pinned, "vcpu_period_us": period,
                   **windows(vr, gen, qpid, stream.client.pid, seconds)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "forwarded_pps"}), flush=True)
    finally:
        if stream is not None:
            stream.stop()
        set_cap(lab, vr, None)
        virsh(uri, "schedinfo", dom.name(), "--live", "vcpu_period=100000")
        cpus = ",".join(str(c) for c in range(os.cpu_count() or 1))
        virsh(uri, "vcpupin", dom.name(), "0", cpus, "--live")
        virsh(uri, "emulatorpin", dom.name(), cpus, "--live")
    with open(out, "w") as f:
        json.dump({"lab": name, "seconds_per_condition": seconds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4])))
