"""The README's tables from this folder's JSON: ``python table.py`` (the engine runs' tables are the lab's,
``xtc_lab.policer_compare.profile_tables``)."""

import json
from pathlib import Path

from xtc_lab.policer_compare import profile_tables

HERE = Path(__file__).parent
print("| run | the check alone, Python (us a datagram) | in C | RSS the module adds (KB) | same answers (valid, bad) |")
print("|---|---|---|---|---|")
for f in sorted(HERE.glob("micro*.json")):
    d = json.loads(f.read_text())
    print(f"| {f.stem} | {d['python_us_per_datagram']} | {d['c_us_per_datagram']} | {d['rss_added_kb']} "
          f"| {d['same_answers_valid']}, {d['same_answers_bad']} |")
print()
print("\n".join(profile_tables(HERE, "profile*-*.json", ("check",))))
