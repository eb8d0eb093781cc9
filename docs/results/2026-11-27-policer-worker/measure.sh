#!/bin/bash
# The figures of this session, before/after alternated (before = main at the branch point 035f6e8, exported with
# `git archive 035f6e8 xtc | tar -x -C /tmp/plan-before`, first on PYTHONPATH; after = this branch; both sides run
# this branch's lab tools): the profile per thread (python -m xtc_lab.policer_profile, 1,000 routers x 16 VRs,
# 10% dead, SQLite, the samples over the link as the service takes them) with moving rates (--jitter 0.05) and
# steady, ROUNDS pairs each; then the fleet bench (run.py) once a side, with moving rates and steady.
set -u
cd "$(dirname "$0")"
PY=/work/wt/plan/.venv/bin/python
log() { echo "== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
done_() { echo "   done $(date -u +%T) rc=$1 load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a runs.log; }
prof() {  # side jitter out
  log "$3"
  if [ "$1" = before ]; then PP=/tmp/plan-before; else PP=; fi
  PYTHONPATH=$PP $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter $2 --sample-link --top 40 >"$3.json" 2>/dev/null
  done_ $?
}
bench() {  # side jitter out
  log "$3"
  $PY run.py "$1" "$3.json" "$2" >>runs.log 2>/dev/null
  done_ $?
}
for k in $(seq 1 ${ROUNDS:-3}); do
  for j in 0.05 0; do
    if [ $((k % 2)) = 1 ]; then a=before; b=after; else a=after; b=before; fi
    prof $a $j profile$k-$a-jitter$j
    prof $b $j profile$k-$b-jitter$j
  done
done
[ -n "${BENCH:-1}" ] || exit 0
bench before 0.05 bench-before-jitter0.05
bench after 0.05 bench-after-jitter0.05
bench after 0 bench-after-jitter0
bench before 0 bench-before-jitter0
