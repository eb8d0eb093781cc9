#!/bin/bash
# The profile per thread (python -m xtc_lab.policer_profile, 1,000 routers x 16 VRs, 10% dead, SQLite, the samples
# over the link as the service takes them), with moving rates (--jitter 0.05) and steady, before and after
# alternated: before = main at the branch point (git archive 035f6e8 xtc, to /tmp/recv-before, first on
# PYTHONPATH), after = this branch; both run this branch's profile tool and stand-in fleet.
set -u
cd "$(dirname "$0")"
PY=/work/wt/recv/.venv/bin/python
log() { echo "== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
prof() {  # side jitter out
  log "$3"
  if [ "$1" = before ]; then PP=/tmp/recv-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --sample-link --top 40 >"$3.json" 2>"$3.err"
  rc=$?
  echo "   done $(date -u +%T) rc=$rc load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log
  [ -s "$3.err" ] || rm -f "$3.err"
}
for k in ${ROUNDS:-1 2 3}; do
  for j in 0.05 0; do
    prof before $j profile$k-before-jitter$j
    prof after $j profile$k-after-jitter$j
  done
done
