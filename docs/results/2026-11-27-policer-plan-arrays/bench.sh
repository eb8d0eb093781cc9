#!/bin/bash
# The fleet bench (1,000 routers x 16 VRs, 10% dead, samples, one engine shard, SQLite, 20 s measured),
# before/after alternated, with moving rates then steady.
set -u
cd "$(dirname "$0")"
PY=/work/wt/planarr/.venv/bin/python
log() { echo "== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
run() {  # side jitter out
  log "$3"
  $PY run.py "$1" 1000 20 "$3.json" "$2" >>runs.log 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
run before 0.05 bench-before-jitter
run after 0.05 bench-after-jitter
[ -n "${STEADY:-}" ] && run before 0 bench-before-steady
[ -n "${STEADY:-}" ] && run after 0 bench-after-steady
