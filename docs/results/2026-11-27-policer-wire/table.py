"""The README's tables from this folder's JSON files: python table.py [PREFIX] (r5-: round 5; none: round 2;
round1/: round 1).  The fleet runs' table is the lab's (xtc_lab.policer_compare.fleet_table); the script as
it ran held it itself (git show 4566092:docs/results/2026-11-27-policer-wire/table.py)."""
import json, pathlib, sys
from xtc_lab.policer_compare import fleet_table
here = pathlib.Path(__file__).parent
pre = sys.argv[1] if len(sys.argv) > 1 else ""
print("\n".join(fleet_table(here, pre)))
print()
print("| profile | CPU / measurement (unprofiled) | measured / s | planned / quiet / skipped | load before | link thread | worker | cycle thread | libzmq I/O | fleet CPU s/s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for j in ("0.05", "0"):
    for code in ("before", "after", "v2", "v3"):
        f = here / f"profile{pre.rstrip('-').lstrip('r')}-{code}-jitter{j}.json"
        if f.exists():
            r = json.loads(f.read_text())
            p = r["plans"]["plain"]
            load = r.get("uptime_before", "").split("load average:")[-1].split(",")[0].strip()
            th = r.get("thread_cpu_ms_per_measurement") or {}
            print(f"| {code}, jitter {j} | {r['cpu_ms_per_measurement']['plain']} ms | {r['measured_per_s']['plain']} "
                  f"| {p['planned']} / {p['quiet']} / {p['skipped']} | {load} | {th.get('policer-links')} | "
                  f"{th.get('policer-worker')} | {th.get('policer-engine')} | {th.get('ZMQbg/IO/0')} | {r.get('fleet_cpu_s_per_s')} |")
print()
for f in sorted(here.glob("daemon-*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        continue
    print(f.name, [(x["workload"], round(x["core_percent"], 1)) for x in r["results"]])
