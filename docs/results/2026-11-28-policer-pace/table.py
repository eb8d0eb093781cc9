"""The pace sweep's table (python table.py > tables.md): per run the CPU per measurement and its split by thread,
the cycle's p50/p99; then the median per pace and mode."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

here = Path(__file__).parent
THREADS = ("ZMQbg/IO/0", "policer-links", "policer-engine", "policer-worker")
runs = []
for f in sorted(here.glob("pace*-*-*.json")):
    d = json.loads(f.read_text())
    rnd, pace, mode = f.stem.split("-")
    runs.append((rnd.removeprefix("pace"), float(pace), mode, d))
print("| round | pace (s) | mode | CPU / measurement (ms) | " + " | ".join(THREADS) + " | cycle p50 / p99 (ms) |")
print("|---|---|---|---|" + "---|" * len(THREADS) + "---|")
for rnd, pace, mode, d in sorted(runs, key=lambda r: (r[2], r[1], r[0])):
    t = d["thread_cpu_ms_per_measurement"]
    print(f"| {rnd} | {pace:g} | {mode} | {d['cpu_ms_per_measurement']['plain']:.4f} | "
          + " | ".join(f"{t.get(k, 0):.4f}" for k in THREADS) + f" | {d['cycle_ms']['p50']} / {d['cycle_ms']['p99']} |")
print()
print("| mode | pace (s) | CPU / measurement, each round (ms) | median | link pool's thread, median | libzmq I/O, median |")
print("|---|---|---|---|---|---|")
for mode in ("steady", "jitter"):
    for pace in sorted({r[1] for r in runs}):
        rs = [r[3] for r in runs if r[1] == pace and r[2] == mode]
        cpu = [d["cpu_ms_per_measurement"]["plain"] for d in rs]
        links = [d["thread_cpu_ms_per_measurement"].get("policer-links", 0) for d in rs]
        io = [d["thread_cpu_ms_per_measurement"].get("ZMQbg/IO/0", 0) for d in rs]
        print(f"| {mode} | {pace:g} | {' / '.join(f'{c:.4f}' for c in cpu)} | {statistics.median(cpu):.4f} | "
              f"{statistics.median(links):.4f} | {statistics.median(io):.4f} |")
