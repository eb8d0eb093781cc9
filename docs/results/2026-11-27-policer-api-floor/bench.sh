#!/bin/bash
# Issue 50's API goals measured as the goal states them, in branch api's quiet window (18:15-18:45 UTC):
# `xtc policer bench --fleet 1000 --rate 2000 --duration 5 --api-duration 10`: the engine polices 1,000
# stand-in routers of 16 VRs (10% dead), SQLite, one API process; after 5 s of policing measured, 10 s of the
# bench's mix offered at 2,000 requests/s (32 in flight) while the engine goes on policing.
# 1. ROUNDS pairs before/after alternated (python -m xtc_lab.alternate; before = main at the branch point
#    db076ca exported to /tmp/api2-before with a uvloop.py that raises ImportError, as main ran: without
#    uvloop), the order swapped each pair.
# 2. The writes' tail (this branch): the engine's snapshot off during the load (--snapshot-interval 3600)
#    and the snapshot in batches of 512 rows, not 4096 (SNAPSHOT_ROWS in xtc/policer/engine.py, changed in a
#    copy of this branch's xtc at /tmp/api2-snap512), alternated with this branch as it is.
# 3. The operator's options (this branch), alternated with the plain run: every thread of the API's process
#    at nice -10 (systemd Nice=-10), the engine's process pinned to CPU 1 (CPUAffinity=1), both, two API
#    worker processes (server.workers = 2).
set -u
cd "$(dirname "$0")"
PY=${PY:-/work/wt/api2/.venv/bin/python}
BEFORE=${BEFORE:-/tmp/api2-before}
SNAP=${SNAP:-/tmp/api2-snap512}
BENCH="$PY -m xtc.cli policer bench --fleet 1000 --rate 2000 --duration 5 --api-duration 10"
if [ -n "${PAIRS-1}" ]; then
  for k in $(seq 1 "${ROUNDS:-3}"); do
    if [ $((k % 2)) = 1 ]; then order=before,after; else order=after,before; fi
    $PY -m xtc_lab.alternate --before "$BEFORE" --each side=$order bench-$k-{side} -- $BENCH
  done
fi
if [ -n "${WRITES-1}" ]; then
  for k in 1 2; do
    $PY -m xtc_lab.alternate --each v:pp:x=as-is::--workers=1,nosnap::--snapshot-interval=3600,rows512:$SNAP:--workers=1 \
      writes-$k-{v} -- env PYTHONPATH={pp} $BENCH {x}
  done
fi
if [ -n "${TAIL-1}" ]; then
  for k in 1 2; do
    $PY -m xtc_lab.alternate --each opt:a:b=plain:--workers=1:--workers=1,nice:--api-nice=-10:--workers=1,pin:--engine-cpus=1:--workers=1,both:--api-nice=-10:--engine-cpus=1,w2:--workers=2:--workers=2 \
      tail-$k-{opt} -- $BENCH {a} {b}
  done
fi
# 4. (added in the window) a fourth pair, and the nice option twice more against the plain run.
if [ -n "${MORE:-}" ]; then
  $PY -m xtc_lab.alternate --before "$BEFORE" --each side=after,before bench-4-{side} -- $BENCH
  for k in 3 4; do
    $PY -m xtc_lab.alternate --each opt:a=plain:--workers=1,nice:--api-nice=-10 tail-$k-{opt} -- $BENCH {a}
  done
fi
# 5. (added in the window) the GIL's switch interval 0.5 ms in the API's process (a sitecustomize in
#    /tmp/api2-swi that calls sys.setswitchinterval(0.0005) when the process is `xtc policer serve`; the
#    others keep 5 ms), against the plain run.
if [ -n "${SWI:-}" ]; then
  for k in 1 2; do
    $PY -m xtc_lab.alternate --each v:pp=plain:,swi:/tmp/api2-swi swi-$k-{v} -- env PYTHONPATH={pp} $BENCH
  done
fi
# 6. (added in the window) at 1,500 requests/s offered: plain and nice -10.
if [ -n "${R1500:-}" ]; then
  $PY -m xtc_lab.alternate --each opt:a=plain:--workers=1,nice:--api-nice=-10 rate1500-{opt} -- \
    $PY -m xtc.cli policer bench --fleet 1000 --rate 1500 --duration 5 --api-duration 10 {a}
fi
# 7. (added in the window) a diagnostic: the lean path's writes called on the event loop instead of the
#    threadpool (a copy of this branch at /tmp/api2-inline, lean.py's _run), against the branch as it is.
if [ -n "${INLINE:-}" ]; then
  for k in 1 2; do
    $PY -m xtc_lab.alternate --each v:pp=as-is:,inline:/tmp/api2-inline inline-$k-{v} -- env PYTHONPATH={pp} $BENCH
  done
fi
# 8. (added in the window) the final code (writes on the event loop when the write lock is free at once):
#    two more pairs before/after, bench-5 and bench-6.
if [ -n "${FINAL:-}" ]; then
  for k in ${FINAL_PAIRS:-5 6}; do
    if [ $((k % 2)) = 1 ]; then order=before,after; else order=after,before; fi
    $PY -m xtc_lab.alternate --before "$BEFORE" --each side=$order bench-$k-{side} -- $BENCH
  done
fi
