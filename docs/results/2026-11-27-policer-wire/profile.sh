#!/bin/bash
# The profiles (item 1), before and after alternated: bash profile.sh TAG (from this folder; the branch's .venv).
# "before" is the branch point (aaca391) exported to /tmp/wire3-before (git archive aaca391 xtc), first on
# PYTHONPATH; both sides run this branch's profile tool and stand-in fleet (samples over the link, as served).
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
TAG=${1:-}
log() { echo "== $1 $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
prof() {  # code jitter out
  log "$3"
  if [ "$1" = before ]; then PP=/tmp/wire3-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --top 40 >"$3.json" 2>"$3.err"
  echo "   done $(date -u +%T) rc=$? $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
}
for j in 0.05 0; do
  prof before $j profile$TAG-before-jitter$j
  prof after $j profile$TAG-after-jitter$j
done
