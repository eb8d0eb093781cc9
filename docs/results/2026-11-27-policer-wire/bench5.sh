#!/bin/bash
# Round 5, after xtc-samples/3 became one body frame: the engine with each format (this branch), the profiles
# before/after, then the fleet bench before/after alternated.
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
fmt() {  # schema jitter out
  log "$3"
  $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --top 40 --schema $1 >"$3.json" 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
prof() {  # code jitter out
  log "$3"
  if [ "$1" = before ]; then PP=/tmp/wire3-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --top 40 >"$3.json" 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
run() {  # code db jitter out
  log "$4"
  $PY run.py "$1" "$2" 1000 20 "$4.json" "$3" >>runs.log 2>"$4.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
for j in 0 0.05; do
  fmt xtc-samples/2 $j profile5-v2-jitter$j
  fmt xtc-samples/3 $j profile5-v3-jitter$j
  prof before $j profile5-before-jitter$j
  prof after $j profile5-after-jitter$j
done
for db in sqlite pg; do
  run before $db 0.05 r5-before-$db-jitter
  run after $db 0.05 r5-after-$db-jitter
  run before $db 0 r5-before-$db-steady
  run after $db 0 r5-after-$db-steady
done
