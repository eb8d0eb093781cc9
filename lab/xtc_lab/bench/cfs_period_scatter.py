"""How much a capped VR's CPU and forwarded rate per second scatter, by CFS period, at a fixed cap.

Run as root (a real LXC VR under the lab's libvirtd, real packets)::

    PYTHONPATH=. python lab/xtc_lab/bench/cfs_period_scatter.py --caps 4 --periods 100000,50000,25000 \\
        --seconds 60 --out docs/results/2026-11-26-lab/cfs-period/scatter

For each CFS period a fresh lab with one LXC VR on that ``vcpu_period`` (the lab's forwarder, ``--work``
iterations x ``--work-factor`` per frame) is offered ``--offered-pps`` of 64-byte UDP; for each cap
the quota is set through libvirt (no controller), and after 4 s the VR's forwarded packets (host-side
RX of its interfaces, ``/proc/net/dev``) and its forwarder's CPU time (``/proc/<pid>/schedstat``,
nanoseconds) are read once a second for ``--seconds`` s.  Prints one JSON object (per period and
cap: the mean rate and CPU, and their coefficients of variation over the 1 s windows) and writes it
with a plot (``scatter.json``, ``scatter.png``) to ``--out``.  The lab is removed at the end, also
on failure.

Why: a capped VR that has work runs its whole quota at the start of each period and then waits,
so a window of one control period cuts a burst at each of its ends; the shorter the period, the
shorter the bursts (``[daemon] cfs_period_us``, docs/results/2026-11-26-lab/README.md "The CFS period").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def forwarder_pids(proc: Path = Path("/proc")) -> list[int]:
    """PIDs of the lab's forwarder processes (their ``comm``, the first 15 bytes of the cached
    binary's name ``xtc-forwarder-<hash>``, contains "forwarder")."""
    out = []
    for comm in proc.glob("[0-9]*/comm"):
        try:
            if "forwarder" in comm.read_text():
                out.append(int(comm.parent.name))
        except OSError:
            continue
    return out


def cpu_ns(pids: list[int]) -> int:
    """Summed time on CPU of ``pids``, nanoseconds (first field of ``/proc/<pid>/schedstat``)."""
    return sum(int(Path(f"/proc/{p}/schedstat").read_text().split()[0]) for p in pids)


def summary(rates_pps: list[float], cpu_percent: list[float]) -> dict[str, float]:
    """Mean and coefficient of variation (population sd / mean) of the 1 s rates and CPU."""
    m, c = statistics.mean(rates_pps), statistics.mean(cpu_percent)
    return {"mean_pps": round(m, 1), "rate_cv": round(statistics.pstdev(rates_pps) / m, 4) if m else float("nan"),
            "share_within_10pct_of_mean": sum(abs(r / m - 1.0) <= 0.10 for r in rates_pps) / len(rates_pps) if m else 0.0,
            "mean_cpu_percent": round(c, 3), "cpu_cv": round(statistics.pstdev(cpu_percent) / c, 4) if c else float("nan")}


def measure(caps: list[float], periods: list[int], seconds: int, offered_pps: float, work: int, factor: float,
            say: Any = print) -> list[dict[str, Any]]:
    from xtc_lab.lab.harness import lab_session, set_cap
    from xtc_lab.lab.traffic import start_udp_stream

    rows: list[dict[str, Any]] = []
    for period in periods:
        with lab_session(1, work_iters=work, vcpu_period_us=period, work_factor=factor) as lab:
            vr = lab.vrs[0]
            with start_udp_stream(lab, vr, offered_pps, duration_s=len(caps) * (seconds + 6) + 5):
                time.sleep(2.0)
                pids = forwarder_pids()
                if not pids:
                    raise RuntimeError("no forwarder process found in /proc (comm containing 'forwarder')")
                for cap in caps:
                    if round(cap / 100.0 * period) < 1000:
                        say(f"period {period} us, cap {cap:g}%: quota under 1000 us, skipped")
                        continue
                    set_cap(lab, vr, cap, period)
                    time.sleep(4.0)
                    rates, cpus = [], []
                    t0 = time.monotonic()
                    c0, k0 = vr.counters()["forwarded"], cpu_ns(pids)
                    for i in range(seconds):
                        time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
                        c1, k1 = vr.counters()["forwarded"], cpu_ns(pids)
                        rates.append(float(c1 - c0))
                        cpus.append((k1 - k0) / 1e7)  # ns per 1 s -> percent of one CPU
                        c0, k0 = c1, k1
                    row = {"period_us": period, "cap_percent": cap, "seconds": seconds, **summary(rates, cpus),
                           "rates_pps": rates, "cpu_percent": cpus}
                    say(json.dumps({k: v for k, v in row.items() if k not in ("rates_pps", "cpu_percent")}))
                    rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['period_us'] / 1000:g} ms\ncap {r['cap_percent']:g}%" for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [100 * r["rate_cv"] for r in rows], width=0.4, label="forwarded pps per 1 s")
    ax.bar([i + 0.2 for i in x], [100 * r["cpu_cv"] for r in rows], width=0.4, label="CPU per 1 s")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("coefficient of variation (%)")
    ax.set_title("A capped VR's 1 s scatter by CFS period (fixed cap, no controller)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--caps", default="4", help="caps, percent of one CPU, comma-separated (default 4)")
    p.add_argument("--periods", default="100000,50000,25000", help="CFS periods, us, comma-separated")
    p.add_argument("--seconds", type=int, default=60, help="1 s windows per period and cap (default 60)")
    p.add_argument("--offered-pps", type=float, default=21300.0, help="offered rate, packets/s (default 21300)")
    p.add_argument("--work", type=int, default=7500, help="forwarder busy work per frame (default 7500)")
    p.add_argument("--work-factor", type=float, default=2.0, help="forwarder work factor (default 2)")
    p.add_argument("--out", type=Path, default=None, help="directory for scatter.json and scatter.png")
    a = p.parse_args(argv)
    caps = [float(c) for c in a.caps.split(",")]
    periods = [int(x) for x in a.periods.split(",")]
    if a.seconds < 2 or any(not 1000 <= x <= 1_000_000 for x in periods) or any(not 0 < c <= 100 for c in caps):
        p.error("want --seconds >= 2, periods within 1000..1000000 us and caps within (0, 100]")
    rows = measure(caps, periods, a.seconds, a.offered_pps, a.work, a.work_factor,
                   say=lambda m: print(m, file=sys.stderr, flush=True))
    doc = {"offered_pps": a.offered_pps, "work_iters": a.work, "work_factor": a.work_factor, "rows": rows}
    print(json.dumps({**doc, "rows": [{k: v for k, v in r.items() if k not in ("rates_pps", "cpu_percent")}
                                      for r in rows]}))
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "scatter.json").write_text(json.dumps(doc, indent=1))
        if rows:
            plot(rows, a.out / "scatter.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
