#!/bin/bash
# The fleet bench (run.py), before and after alternated, with moving rates (--jitter 0.05) then steady.
set -u
cd "$(dirname "$0")"
PY=/work/wt/recv/.venv/bin/python
for j in 0.05 0; do
  for side in before after; do
    echo "== bench${TAG:-}-$side-jitter$j $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >>runs.log
    $PY run.py $side $j bench${TAG:-}-$side-jitter$j.json >>runs.log 2>/dev/null
    echo "   done $(date -u +%T) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" >>runs.log
  done
done
