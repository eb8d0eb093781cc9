"""The README's table from this folder's JSON files: python table.py.  The fleet runs' table is the lab's
(xtc_lab.policer_compare.fleet_table); the script as it ran held it itself (git show
800351e:docs/results/2026-11-27-policer-engine-rows/table.py)."""
import json, pathlib
from xtc_lab.policer_compare import fleet_table
here = pathlib.Path(__file__).parent
print("\n".join(fleet_table(here)))
for code in ("before", "after"):
    f = here / f"profile-{code}-jitter.json"
    if f.exists():
        r = json.loads(f.read_text())
        print(f"\nprofile {code}: {r['cpu_ms_per_measurement']} ms/measurement, measured/s {r['measured_per_s']}, plans {r.get('plans')}, cycle {r['cycle_ms']}, rss {r['rss_mb']} MB")
        print("\n".join(r["top_tottime"][:16]))
