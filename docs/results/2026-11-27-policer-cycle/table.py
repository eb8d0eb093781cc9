"""The tables of README.md from this directory's JSON (python table.py)."""

import glob
import json
import re
import statistics
from pathlib import Path

here = Path(__file__).parent
THREADS = ("policer-links", "policer-worker", "policer-engine", "ZMQbg/IO/0")
print("| run | cycles, measurements | CPU / measurement (ms) | cycle thread | link thread | worker | ZMQ I/O | other threads"
      " | fleet CPU s/s | load before / after |")
print("|---|---|---|---|---|---|---|---|---|---|")
per: dict = {}
for f in sorted(glob.glob(str(here / "profile*.json")), key=lambda f: (int(re.findall(r"\d+", Path(f).stem)[0]), f)):
    text = Path(f).read_text()
    if not text.strip():
        continue
    d = json.loads(text)
    th = d["thread_cpu_ms_per_measurement"]
    ln, w, cy, io = (th.get(t, 0.0) for t in THREADS)
    other = sum(th.values()) - ln - w - cy - io
    win = d["window"]["plain"]
    all_ = d["cpu_ms_per_measurement"]["plain"]
    print(f"| {Path(f).stem} | {win['cycles']}, {win['measurements']} | {all_} | {cy} | {ln} | {w} | {io} | {other:.4f} |"
          f" {d.get('fleet_cpu_s_per_s')} | {d['loadavg_before']} / {d['loadavg_after']} |")
    m = re.match(r"profile(\d+)-(\w+)-(\w+)$", Path(f).stem)
    assert m
    per.setdefault((m.group(3), m.group(2)), []).append((all_, cy, ln, w, io, other))
print()
print("Each run in round order, and the median (ms of CPU per measurement):")
print()
print("| | what | before (main, 638ae02) | after (this branch) |")
print("|---|---|---|---|")
for mode in ("steady", "jitter"):
    for i, what in enumerate(("a measurement", "**cycle thread**", "link thread", "worker", "ZMQ I/O thread", "other threads")):
        cells = []
        for side in ("before", "after"):
            xs = [r[i] for r in per.get((mode, side), [])]
            cells.append(" / ".join(f"{x:.4f}" for x in xs) + (f" ({statistics.median(xs):.4f})" if xs else ""))
        print(f"| {'--jitter 0.05' if mode == 'jitter' else 'steady'} | {what} | {' | '.join(cells)} |")
