"""The tables of README.md from this directory's JSON (python table.py)."""

import glob
import json
import statistics
from pathlib import Path

here = Path(__file__).parent
print("| run | CPU / measurement (ms) | worker | link thread | cycle thread | other threads | measured / s"
      " | plans (planned, quiet, skipped) | load before / after |")
print("|---|---|---|---|---|---|---|---|---|")
per: dict = {}
for f in sorted(glob.glob(str(here / "profile*.json"))):
    d = json.loads(Path(f).read_text())
    th = d["thread_cpu_ms_per_measurement"]
    w, ln, cy = th.get("policer-worker", 0.0), th.get("policer-links", 0.0), th.get("policer-engine", 0.0)
    other = sum(th.values()) - w - ln - cy
    p = d["plans"]["plain"]
    print(f"| {Path(f).stem} | {d['cpu_ms_per_measurement']['plain']} | {w} | {ln} | {cy} | {other:.3f} |"
          f" {d['measured_per_s']['plain']} | {p['planned']}, {p['quiet']}, {p['skipped']} |"
          f" {d['loadavg_before']} / {d['loadavg_after']} |")
    side = "before" if "-before-" in f else "after"
    key = (f"jitter {d['jitter']}", side)
    per.setdefault(key, {"all": [], "worker": []})
    per[key]["all"].append(d["cpu_ms_per_measurement"]["plain"])
    per[key]["worker"].append(w)
print()
print("| | before: each run (median) | after: each run (median) |")
print("|---|---|---|")
for mode in sorted({k[0] for k in per}, reverse=True):
    for what in ("all", "worker"):
        cells = []
        for side in ("before", "after"):
            xs = per.get((mode, side), {}).get(what, [])
            cells.append(" / ".join(f"{x:.3f}" for x in xs) + (f" ({statistics.median(xs):.3f})" if xs else ""))
        label = "a measurement" if what == "all" else "the worker"
        print(f"| {mode}: {label} (ms) | {cells[0]} | {cells[1]} |")
print()
print("| run | engine CPU / measurement | measured / s | cycle p99 | engine RSS | load before |")
print("|---|---|---|---|---|---|")
for f in sorted(glob.glob(str(here / "bench*.json"))):
    d = json.loads(Path(f).read_text())
    cyc = d.get("policy_cycle_ms") or {}
    rss = d.get("rss_mb")
    rss = rss.get("policer_engine", rss) if isinstance(rss, dict) else rss
    print(f"| {Path(f).stem} | {d.get('engine_cpu_ms_per_measurement')} ms | {d.get('measured_per_s')} |"
          f" {cyc.get('p99') if isinstance(cyc, dict) else cyc} ms | {rss} MB |"
          f" {' '.join(f'{x:.2f}' for x in d['load_average_before'])} |")
