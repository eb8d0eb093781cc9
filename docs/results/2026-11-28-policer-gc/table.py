"""The table of this session's profile runs (python table.py > tables.md): per run the CPU per measurement,
its split by thread, the measurements that were `list` probes, the cycle's p50/p99 and the RSS; then the
median per side and mode."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

here = Path(__file__).parent
THREADS = ("ZMQbg/IO/0", "policer-links", "policer-engine", "policer-worker", "policer-samples")
rows = []
for f in sorted(here.glob("profile*-*-*.json")):
    try:
        d = json.loads(f.read_text())
    except json.JSONDecodeError:
        continue
    rnd, side, mode = f.stem.split("-")
    w = d["window"]["plain"]
    rows.append({"round": rnd.removeprefix("profile"), "side": side, "mode": mode,
                 "cpu": d["cpu_ms_per_measurement"]["plain"], "threads": d["thread_cpu_ms_per_measurement"],
                 "measured": w["measurements"], "listed": d.get("listed_share"), "rss": d.get("rss_mb"),
                 "cycle": d.get("cycle_ms")})
print("| round | side | mode | CPU / measurement (ms) | " + " | ".join(THREADS) + " | RSS (MB) |")
print("|---|---|---|---|" + "---|" * len(THREADS) + "---|")
for r in rows:
    print(f"| {r['round']} | {r['side']} | {r['mode']} | {r['cpu']:.4f} | "
          + " | ".join(f"{r['threads'].get(t, 0):.4f}" for t in THREADS) + f" | {r['rss']} |")
print()
print("| side | mode | CPU / measurement, each round (ms) | median | worker, median | links, median |")
print("|---|---|---|---|---|---|")
for mode in ("steady", "jitter"):
    for side in ("main", "fleet", "after"):
        rs = [r for r in rows if r["side"] == side and r["mode"] == mode]
        if rs:
            each = " / ".join(f"{r['cpu']:.4f}" for r in rs)
            print(f"| {side} | {mode} | {each} | "
                  f"{statistics.median(r['cpu'] for r in rs):.4f} | "
                  f"{statistics.median(r['threads'].get('policer-worker', 0) for r in rs):.4f} | "
                  f"{statistics.median(r['threads'].get('policer-links', 0) for r in rs):.4f} |")
