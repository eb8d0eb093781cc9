"""The tables of README.md from this directory's JSON (python table.py)."""

import glob
import json
import re
import statistics
from pathlib import Path

here = Path(__file__).parent
THREADS = ("policer-links", "policer-worker", "policer-engine")
print("| run | cycles, measurements | CPU / measurement (ms) | link thread | worker | cycle thread | other threads"
      " | fleet CPU s/s | load before / after |")
print("|---|---|---|---|---|---|---|---|---|")
per: dict = {}
for f in sorted(glob.glob(str(here / "profile*.json"))):
    text = Path(f).read_text()
    if not text.strip():
        continue
    d = json.loads(text)
    th = d["thread_cpu_ms_per_measurement"]
    ln, w, cy = (th.get(t, 0.0) for t in THREADS)
    other = sum(th.values()) - ln - w - cy
    win = d["window"]["plain"]
    all_ = d["cpu_ms_per_measurement"]["plain"]
    print(f"| {Path(f).stem} | {win['cycles']}, {win['measurements']} | {all_} | {ln} | {w} | {cy} | {other:.4f} |"
          f" {d.get('fleet_cpu_s_per_s')} | {d['loadavg_before']} / {d['loadavg_after']} |")
    m = re.match(r"profile(\d+)-(\w+)-(\w+)$", Path(f).stem)
    assert m
    group = "rounds 1-3" if int(m.group(1)) <= 3 else "rounds 4-6"
    per.setdefault((group, m.group(3), m.group(2)), []).append((all_, ln, w, cy, other, d.get("fleet_cpu_s_per_s")))
for group, note in (("rounds 1-3", "/3's header read by the standard library"), ("rounds 4-6", "/3's header read by orjson: the code adopted")):
    print()
    print(f"{group} ({note}): each run in round order, and the median (ms of CPU per measurement; the fleet's CPU s/s):")
    print()
    print("| | what | before (main) | this branch, xtc-samples/3 | this branch, xtc-samples/2 |")
    print("|---|---|---|---|---|")
    for mode in ("jitter", "steady"):
        for i, what in enumerate(("a measurement", "link thread", "worker", "cycle thread", "other threads", "fleet CPU s/s")):
            cells = []
            for side in ("before", "v3", "v2"):
                xs = [r[i] for r in per.get((group, mode, side), [])]
                cells.append(" / ".join(f"{x:.4f}" if i < 5 else f"{x:.3f}" for x in xs)
                             + (f" ({statistics.median(xs):.4f})" if xs else ""))
            print(f"| {'--jitter 0.05' if mode == 'jitter' else 'steady'} | {what} | {' | '.join(cells)} |")
