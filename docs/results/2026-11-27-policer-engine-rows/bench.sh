#!/bin/bash
# The session's runs, before/after alternated: bash bench.sh (from this folder; the branch's .venv).
# "before" is the branch's base (60a34a7) exported to /tmp/engine-before-rows (git archive 60a34a7 xtc) and alone
# on PYTHONPATH.  Each run is the lab's xtc_lab.alternate (it logs the start and end of each run with the load
# average to runs.log); the script as it ran logged by itself (git show 800351e:docs/results/2026-11-27-policer-
# engine-rows/bench.sh), and its "rc=" in runs.log was always 0 (the status of `date`, not of the run).
set -u
cd "$(dirname "$0")"
PY=/work/wt/engine/.venv/bin/python
alt() { $PY -m xtc_lab.alternate --before /tmp/engine-before-rows "$@"; }
alt micro -- $PY micro.py
alt --each side=after,before 'profile-{side}-jitter' -- \
  $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05
alt --to-log --each db=sqlite,pg --each mode:jitter=jitter:0.05,steady:0 --each side=before,after '{side}-{db}-{mode}' -- \
  $PY run.py '{side}' '{db}' 1000 20 '{side}-{db}-{mode}.json' '{jitter}'
