"""The profiles' table: CPU per measurement, per thread (ms), plans, load average."""
import json
import sys
from pathlib import Path

here = Path(__file__).parent
rows = []
for f in sorted(here.glob("profile*-*.json")):
    try:
        d = json.loads(f.read_text())
    except ValueError:
        continue
    th = d.get("thread_cpu_ms_per_measurement", {})
    other = round(sum(v for k, v in th.items() if k not in ("policer-worker", "policer-links", "policer-engine")), 3)
    rows.append((f.stem, d["cpu_ms_per_measurement"]["plain"], th.get("policer-links"), th.get("policer-worker"),
                 th.get("policer-engine"), other, d["measured_per_s"]["plain"], d["plans"]["plain"],
                 d.get("loadavg_before"), d.get("loadavg_after")))
print("| run | CPU / measurement (ms) | link thread | worker | cycle thread | other threads | measured / s | plans (planned, quiet, skipped) | load before / after |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    p = r[7]
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {p['planned']}, {p['quiet']}, {p['skipped']} | {r[8]} / {r[9]} |")
