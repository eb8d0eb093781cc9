#!/bin/bash
# The fleet bench (python -m xtc_lab.policer_compare: run_fleet_bench_on as `xtc policer bench --fleet`, 1,000
# routers x 16 VRs, 10% dead, SQLite, 20 s measured, --jitter 0.05), two pairs alternated (before, after, after,
# before): before = main at ef91b1d (/tmp/eng/before), after = this branch (xtc-samples/3, the default).
set -u
cd "$(dirname "$0")"
PY=/work/wt/engine/.venv/bin/python
for order in before,after after,before; do
  $PY -m xtc_lab.alternate --before /tmp/eng/before --to-log --each k=${order%%,*} --each side=$order \
    "bench-{k}-{side}" -- $PY -m xtc_lab.policer_compare /tmp/eng/before {side} sqlite 1000 20 "bench-{k}-{side}.json" 0.05
done
