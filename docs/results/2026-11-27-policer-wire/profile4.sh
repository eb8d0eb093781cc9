#!/bin/bash
# Round 4: this branch's engine asking for xtc-samples/2 and for /3 (the default), steady then jitter, alternated:
# the format alone, with the fleet's CPU beside the engine's.
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
prof() {  # schema jitter out
  log "$3"
  $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --top 40 --schema $1 >"$3.json" 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
for j in 0 0.05; do
  prof xtc-samples/2 $j profile4-v2-jitter$j
  prof xtc-samples/3 $j profile4-v3-jitter$j
done
