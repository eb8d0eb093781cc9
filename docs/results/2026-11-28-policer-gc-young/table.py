"""The young threshold's tables (python table.py > tables.md), by xtc_lab.policer_compare.profile_tables, and the
collector's CPU per run from each run's gcsplit line (the last line of its .err, ms per thread and generation)."""

import json
from pathlib import Path

from xtc_lab.policer_compare import profile_tables

here = Path(__file__).parent
print("\n".join(profile_tables(here, "gc*-*-*.json", ("collector", "mode"))))
print("\n| run | collector CPU in the run (s) | of it, the oldest generation's (s) |\n|---|---|---|")
for f in sorted(here.glob("gc*-*-*.err")):
    split = json.loads(f.read_text().strip().splitlines()[-1])
    total = sum(v[1] for v in split.values()) / 1000
    oldest = sum(v[1] for k, v in split.items() if k.endswith("gen2")) / 1000
    print(f"| {f.stem} | {total:.2f} | {oldest:.2f} |")
