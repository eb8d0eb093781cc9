#!/bin/bash
# This session's runs, from this folder with the branch's .venv, before and after alternated:
#   bash runs.sh profile [ROUNDS]   the profile per thread (ROUNDS: 1,2 by default; the session ran 1,2)
#   bash runs.sh bench [steady]     the fleet bench with moving rates (then steady): run.py
# "before" is main at the branch point (7becaf7) exported to /tmp/planarr-before (git archive 7becaf7 xtc) and
# alone on PYTHONPATH; both sides run this branch's profile tool and stand-in fleet.  Each run is the lab's
# xtc_lab.alternate (it logs the start and end of each run with the load average to runs.log).  The session ran
# them as profile.sh and bench.sh, each logging by itself (git show 432df09:docs/results/2026-11-27-policer-
# plan-arrays/profile.sh, git show 374bd5c:.../bench.sh, run with STEADY=1 for the steady pair); their "rc=" in
# runs.log was always 0 (the status of `date`, not of the run).
set -u
cd "$(dirname "$0")"
PY=/work/wt/planarr/.venv/bin/python
alt() { $PY -m xtc_lab.alternate --before /tmp/planarr-before "$@"; }
case "${1:-}" in
  profile) alt --each "k=${2:-1,2}" --each jitter=0.05,0 --each side=before,after 'profile{k}-{side}-jitter{jitter}' -- \
    $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter '{jitter}' --sample-link --top 40 ;;
  bench) alt --to-log --each "mode:jitter=jitter:0.05${2:+,steady:0}" --each side=before,after 'bench-{side}-{mode}' -- \
    $PY run.py '{side}' 1000 20 'bench-{side}-{mode}.json' '{jitter}' ;;
  *) echo "usage: bash runs.sh profile [ROUNDS]|bench [steady]" >&2; exit 2 ;;
esac
