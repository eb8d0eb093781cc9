#!/bin/bash
# The session's runs, before/after alternated: bash bench.sh (from this folder; the branch's .venv).
# "before" is the branch's base (60a34a7) exported to /tmp/engine-before-rows (git archive 60a34a7 xtc).
set -u
cd "$(dirname "$0")"
PY=/work/wt/engine/.venv/bin/python
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
run() {  # code db jitter out
  log "$4"
  $PY run.py "$1" "$2" 1000 20 "$4.json" "$3" >>runs.log 2>"$4.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
prof() {  # code out
  log "$2"
  if [ "$1" = before ]; then PP=/tmp/engine-before-rows; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 >"$2.json" 2>"$2.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
$PY micro.py >micro.json 2>micro.err; log micro
prof after profile-after-jitter
prof before profile-before-jitter
for db in sqlite pg; do
  run before $db 0.05 before-$db-jitter
  run after $db 0.05 after-$db-jitter
  run before $db 0 before-$db-steady
  run after $db 0 after-$db-steady
done
