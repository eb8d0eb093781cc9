#!/bin/bash
# The API process's CPU per request kind (python -m xtc_lab.policer_api_cpu: requests one at a time on one
# connection, 2,000 of each kind without a fleet, 1,000 with one; the best of 2 runs a kind), before and after
# alternated (python -m xtc_lab.alternate: before = main at the branch point ef91b1d, exported with
# `git archive ef91b1d xtc | tar -x -C /tmp/api-before`, alone on PYTHONPATH; after = this branch; both sides
# run this branch's lab tools): first against the bench's seed alone (4 routers, no VR), then while the
# engine polices 1,000 stand-in routers of 16 VRs (--fleet 1000: pages of 100 routers and VRs full).
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api/.venv/bin/python}
BEFORE=${BEFORE:-/tmp/api-before}
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=before,after cpu-1-{side} -- $PY -m xtc_lab.policer_api_cpu -n 2000 --repeat 2
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=after,before cpu-2-{side} -- $PY -m xtc_lab.policer_api_cpu -n 2000 --repeat 2
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=before,after cpu-fleet-1-{side} -- $PY -m xtc_lab.policer_api_cpu -n 1000 --repeat 2 --fleet 1000
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=after,before cpu-fleet-2-{side} -- $PY -m xtc_lab.policer_api_cpu -n 1000 --repeat 2 --fleet 1000
