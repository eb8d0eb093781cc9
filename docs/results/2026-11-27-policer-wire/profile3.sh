#!/bin/bash
# Round 3 of the profiles: each thread's CPU (the tool's thread names fixed), steady then jitter, before/after
# alternated, twice.
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
prof() {  # code jitter out
  log "$3"
  if [ "$1" = before ]; then PP=/tmp/wire3-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --top 40 >"$3.json" 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
for k in 1 2; do
  for j in 0 0.05; do
    prof before $j profile3-$k-before-jitter$j
    prof after $j profile3-$k-after-jitter$j
  done
done
