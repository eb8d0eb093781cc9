#!/bin/bash
# The session's runs, before/after alternated: bash bench.sh (from this folder; the branch's .venv).
# "before" is the branch point (aaca391) exported to /tmp/wire3-before (git archive aaca391 xtc).
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
run() {  # code db jitter out
  log "$4"
  $PY run.py "$1" "$2" 1000 20 "$4.json" "$3" >>runs.log 2>"$4.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
daemon() {  # code out
  log "$2"
  if [ "$1" = before ]; then PP=/tmp/wire3-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc.cli bench daemon --vrs 10000 --seconds 10 --json >"$2.json" 2>"$2.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
$PY micro.py >micro.json 2>micro.err; log micro
for db in sqlite pg; do
  run before $db 0.05 before-$db-jitter
  run after $db 0.05 after-$db-jitter
  run before $db 0 before-$db-steady
  run after $db 0 after-$db-steady
done
daemon before daemon-before
daemon after daemon-after
daemon before daemon-before-2
daemon after daemon-after-2
