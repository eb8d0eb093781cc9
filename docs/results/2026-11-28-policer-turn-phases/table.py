"""The table of measure.sh's runs: CPU per measurement, the engine's and its link and worker threads', each side."""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
rows = {"before": [], "after": []}
print("| round | side | engine (ms) | link thread | worker |\n|---|---|---|---|---|")
for k in range(1, 7):
    for side in ("before", "after"):
        d = json.loads((HERE / f"profile{k}-{side}.json").read_text())
        t = d["thread_cpu_ms_per_measurement"]
        r = (d["cpu_ms_per_measurement"]["plain"], t["policer-links"], t["policer-worker"])
        rows[side].append(r)
        print(f"| {k} | {side} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} |")
for side, rs in rows.items():
    print(f"| median | {side} | " + " | ".join(f"{statistics.median(x[i] for x in rs):.3f}" for i in range(3)) + " |")
