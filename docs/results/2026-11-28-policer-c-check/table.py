"""The README's tables from this folder's JSON: ``python table.py``."""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
print("| run | the check's CPU alone, Python (us a datagram) | in C | RSS the module adds (KB) | same answers (valid, bad) |")
print("|---|---|---|---|---|")
for f in sorted(HERE.glob("micro*.json")):
    d = json.loads(f.read_text())
    print(f"| {f.stem} | {d['python_us_per_datagram']} | {d['c_us_per_datagram']} | {d['rss_added_kb']} "
          f"| {d['same_answers_valid']}, {d['same_answers_bad']} |")
print()
print("| round | check | engine (ms a measurement) | link thread | worker | datagrams taken |")
print("|---|---|---|---|---|---|")
rows: dict[str, list[tuple]] = {"python": [], "c": []}
for k in range(1, 5):
    for impl in ("python", "c"):
        d = json.loads((HERE / f"profile{k}-{impl}.json").read_text())
        t = d["thread_cpu_ms_per_measurement"]
        r = (d["cpu_ms_per_measurement"]["plain"], t["policer-links"], t["policer-worker"])
        rows[impl].append(r)
        print(f"| {k} | {impl} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} | {d['links']['udp_received']} |")
for impl, rs in rows.items():
    print(f"| median | {impl} | " + " | ".join(f"{statistics.median(x[i] for x in rs):.3f}" for i in range(3)) + " | |")
