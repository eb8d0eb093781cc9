"""Does any TCG option lower the scatter of a capped QEMU VR's 1 s forwarding rate? (issue 49)

Per variant (``XTC_QEMU_TUNING`` spec, :func:`xtc_lab.lab.qemu.parse_tuning`): a fresh lab from
``xtc lab up --kind qemu`` with that tuning, 25 kp/s of UDP offered (udpsend), then 1 s windows of
the forwarded rate uncapped and at fixed caps of 10 % and 30 % (``vcpu_quota``; with N vCPUs each
vCPU gets cap/N, so the guest's total stays at the cap), with the CPU of each QEMU thread and the
load average; the lab is brought down after.  CV = standard deviation / mean of the 1 s rates, as in
../2026-11-27-qemu-quiet/noise.py (whose ``windows`` this reuses).
Usage: variants.py OUT.json SECONDS SPEC [SPEC ...]    (SPEC "" = the lab's default)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from xtc_lab.lab.lifecycle import load_lab
from xtc_lab.lab.netlab import NetLab
from xtc_lab.lab.qemu import parse_tuning
from xtc_lab.lab.traffic import start_udp_stream

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("noise", HERE.parent / "2026-11-27-qemu-quiet" / "noise.py")
noise = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noise)
XTC = str(Path(sys.executable).with_name("xtc"))
NAME = "xtcq-ic"
OFFERED_PPS = 25000


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def run_variant(spec: str, seconds: int) -> dict:
    tuning = parse_tuning(spec)
    env = {**os.environ, "XTC_QEMU_TUNING": spec}
    row: dict = {"spec": spec or "(default)", "uptime_before": uptime()}
    t0 = time.monotonic()
    up = subprocess.run([XTC, "lab", "up", "--kind", "qemu", "--name", NAME], env=env, capture_output=True, text=True, check=False)
    row["up_s"] = round(time.monotonic() - t0, 1)
    row["up_output"] = (up.stdout + up.stderr).strip().splitlines()[-6:]
    if up.returncode != 0:
        row["error"] = f"lab up failed (exit {up.returncode})"
        return row
    stream = None
    try:
        _record, vrs, _chain = load_lab(NAME)
        lab = NetLab(prefix=NAME, uri="qemu:///system")
        lab.vrs = list(vrs)
        vr = lab.vrs[0]
        dom = lab.domain(vr)
        qpid = int(Path(f"/run/libvirt/qemu/{dom.name()}.pid").read_text())
        argv = Path(f"/proc/{qpid}/cmdline").read_bytes().split(b"\0")
        row["qemu_args"] = [a.decode() for i, a in enumerate(argv) if i and argv[i - 1] in (b"-accel", b"-icount", b"-smp", b"-machine")]
        gen = f"{lab.prefix}-g{vr.k}"
        stream = start_udp_stream(lab, vr, OFFERED_PPS, duration_s=3600)
        row["conditions"] = []
        for cap in (None, 10.0, 30.0):
            quota = -1 if cap is None else max(1000, round(cap / 100.0 / tuning.vcpus * 100_000))
            lab.set_vcpu_quota(vr, quota)
            time.sleep(3)
            w = noise.windows(vr, gen, qpid, stream.client.pid, seconds if cap is not None else max(10, seconds // 3))
            w.update(cap_percent=cap, vcpu_quota_us=quota)
            row["conditions"].append(w)
            print(json.dumps({"spec": spec, "cap": cap, "mean": w["forwarded_mean_pps"], "cv": w["forwarded_cv"],
                              "load": w["load_avg_1m"]}), flush=True)
        lab.set_vcpu_quota(vr, -1)
    except Exception as e:  # noqa: BLE001 -- recorded, the next variant still runs
        row["error"] = f"{type(e).__name__}: {e}"
    finally:
        if stream is not None:
            stream.stop()
        subprocess.run([XTC, "lab", "down", "--name", NAME], capture_output=True, check=False)
        row["uptime_after"] = uptime()
    return row


def main(out: str, seconds: int, specs: list[str]) -> int:
    rows = []
    for spec in specs:
        rows.append(run_variant(spec, seconds))
        Path(out).write_text(json.dumps({"offered_pps": OFFERED_PPS, "seconds_per_cap": seconds, "variants": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
