"""Measure a lab VR's plant: forwarded packets/s against its live ``vcpu_quota``.

For each quota the VR's ``vcpu_quota`` is set live through libvirt while a steady UDP stream
is offered, and after a settling time the forwarded rate is read from the host-side counters
of the VR's receiver-side vif, one sample per second (like the table in the host-lab notes and
Figure 3 of the XTC paper).

Run as root: ``python -m xtc.lab.sweep --out docs/lab-cap-sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from xtc.lab.netlab import VR, NetLab
from xtc.lab.traffic import start_udp_stream

DEFAULT_QUOTAS_US = (3000, 5000, 10000, 15000, 20000, 30000, 50000, 75000, -1)


def sample_rates(vr: VR, samples: int, interval_s: float = 1.0) -> list[dict[str, float]]:
    """``samples`` consecutive rate samples (packets/s) of ``vr``'s host-side counters."""
    out = []
    c0, t0 = vr.counters(), time.monotonic()
    for _ in range(samples):
        time.sleep(interval_s)
        c1, t1 = vr.counters(), time.monotonic()
        out.append({k: (c1[k] - c0[k]) / (t1 - t0) for k in c1})
        c0, t0 = c1, t1
    return out


def quota_sweep(
    lab: NetLab,
    vr: VR,
    quotas_us: Sequence[int],
    rate_pps: float,
    settle_s: float = 1.0,
    samples: int = 3,
    tool: str = "udpsend",
    payload_bytes: int = 64,
) -> list[dict[str, Any]]:
    """Forwarded rate of ``vr`` at each of ``quotas_us`` under a steady offered stream.

    Parameters
    ----------
    quotas_us
        vcpu_quota values, microseconds per 100 ms period (-1 = no limit).
    rate_pps
        Offered rate, packets/s.
    settle_s, samples
        Wait after each change, s; number of one-second samples taken after it.

    Returns
    -------
    list of dict
        One row per quota: ``vcpu_quota_us``, ``cap_percent`` (None when unlimited),
        ``forwarded_pps`` (mean), ``forwarded_pps_samples``, ``offered_pps`` (mean TX towards
        the VR).
    """
    per_quota_s = settle_s + samples + 0.5
    duration_s = len(quotas_us) * per_quota_s + 2
    rows = []
    with start_udp_stream(lab, vr, rate_pps, duration_s, payload_bytes, tool=tool) as stream:
        time.sleep(1.0)
        for q in quotas_us:
            lab.set_vcpu_quota(vr, q)
            time.sleep(settle_s)
            s = sample_rates(vr, samples)
            fwd = [round(x["forwarded_to_tr"]) for x in s]
            rows.append({
                "vcpu_quota_us": q,
                "cap_percent": None if q == -1 else q / 1000.0,  # of one CPU, period 100000 us
                "forwarded_pps": round(statistics.fmean(fwd)),
                "forwarded_pps_samples": fwd,
                "offered_pps": round(statistics.fmean(x["offered_from_tg"] for x in s)),
            })
        stream.stop()
    lab.set_vcpu_quota(vr, -1)
    return rows


def max_sender_rate(lab: NetLab, vr: VR, tool: str, rate_pps: float = 400_000, seconds: int = 3) -> float:
    """Packets/s that ``tool`` actually offered to an unlimited VR when asked for ``rate_pps``."""
    lab.set_vcpu_quota(vr, -1)
    with start_udp_stream(lab, vr, rate_pps, seconds + 2, tool=tool):
        time.sleep(1.0)
        s = sample_rates(vr, seconds)
    return round(statistics.fmean(x["offered_from_tg"] for x in s))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate-pps", type=float, default=100_000, help="offered rate, packets/s")
    p.add_argument("--quotas", default=",".join(map(str, DEFAULT_QUOTAS_US)),
                   help="comma-separated vcpu_quota values, us per 100 ms (-1 = no limit)")
    p.add_argument("--work-iters", type=int, default=0, help="forwarder busy work per packet")
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--tool", choices=("udpsend", "iperf3"), default="udpsend")
    p.add_argument("--out", help="write the JSON here (default: stdout)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("xtc.lab.sweep: needs root", file=sys.stderr)
        return 2
    from xtc.lab.libvirtd import Libvirtd

    quotas = [int(q) for q in args.quotas.split(",")]
    daemon = Libvirtd()
    with daemon.lease(), NetLab(uri=daemon.uri) as lab:
        vr = lab.add_vr(work_iters=args.work_iters)
        rows = quota_sweep(lab, vr, quotas, args.rate_pps, samples=args.samples, tool=args.tool)
        max_rates = {t: max_sender_rate(lab, vr, t) for t in ("udpsend", "iperf3")}
    daemon.stop_if_unused()
    doc = {
        "what": "forwarded packets/s of one LXC VR (userspace AF_PACKET forwarder) vs live vcpu_quota",
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_1m_at_end": round(os.getloadavg()[0], 2)},
        "offered_rate_pps": args.rate_pps,
        "payload_bytes": 64,
        "traffic_tool": args.tool,
        "forwarder_work_iters": args.work_iters,
        "vcpu_period_us": 100000,
        "sample_s": 1.0,
        "measured_at": "host-side RX of the VR's receiver-side vif in /proc/net/dev",
        "note": "the VR, the sender and the host's softirq work share the host's CPUs with whatever "
                "else runs there (see loadavg): at high quotas the forwarded rate is limited by that "
                "competition, not by the quota, and is noisy",
        "max_offered_pps_when_asking_400k": max_rates,
        "rows": rows,
    }
    text = json.dumps(doc, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
