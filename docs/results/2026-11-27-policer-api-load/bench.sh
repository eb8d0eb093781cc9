#!/bin/bash
# Issue 50's API goals measured as the goal states them (in branch api's quiet window, 15:20-15:45 UTC):
# `xtc policer bench --fleet 1000 --rate 2000 --duration 5 --api-duration 10`: the engine polices 1,000
# stand-in routers of 16 VRs (10% dead: the largest fleet this 2-core machine carries with every router
# measured every period, docs/results/2026-11-27-policer-engine), SQLite, one API process; after 5 s of
# policing measured, 10 s of the bench's mix offered at 2,000 requests/s (32 in flight) while the engine
# goes on policing.  Before and after alternated (python -m xtc_lab.alternate; before = main at the branch
# point ef91b1d exported to /tmp/api-before, alone on PYTHONPATH), ROUNDS pairs, the order swapped each pair.
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api/.venv/bin/python}
BEFORE=${BEFORE:-/tmp/api-before}
for k in $(seq 1 "${ROUNDS:-2}"); do
  if [ $((k % 2)) = 1 ]; then order=before,after; else order=after,before; fi
  $PY -m xtc_lab.alternate --before "$BEFORE" --each side=$order bench-$k-{side} -- \
    $PY -m xtc.cli policer bench --fleet 1000 --rate 2000 --duration 5 --api-duration 10
done
# Then one pair with two API worker processes (server.workers = 2; the API's CPU is the supervisor's and the
# workers'), to see what a second process does to the latency on 2 cores.
[ -n "${WORKERS2:-1}" ] || exit 0
$PY -m xtc_lab.alternate --before "$BEFORE" --each side=before,after bench-w2-{side} -- \
  $PY -m xtc.cli policer bench --fleet 1000 --rate 2000 --duration 5 --api-duration 10 --workers 2
