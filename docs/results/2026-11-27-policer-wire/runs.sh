#!/bin/bash
# This session's runs, from this folder with the branch's .venv: bash runs.sh PART, in the order they ran:
#   round1 (its files moved to round1/ afterwards), round2, profile (in first-pass/ and here), profile3,
#   profile4, round5.
# "before" is the branch point (aaca391) exported to /tmp/wire3-before (git archive aaca391 xtc) and alone on
# PYTHONPATH; both sides run this branch's bench, profile tool and stand-in fleet.  Each run is the lab's
# xtc_lab.alternate (it logs the start and end of each run with the load average to runs.log).  The session ran
# them as six scripts, each logging by itself (git show 4566092:docs/results/2026-11-27-policer-wire/NAME.sh):
# bench.sh (round1), bench2.sh (round2, then profile.sh), profile.sh, profile3.sh, profile4.sh and bench5.sh
# (round5); their "rc=" in runs.log was always 0 (the status of `date`, not of the run).
set -u
cd "$(dirname "$0")"
PY=/work/wt/wire3/.venv/bin/python
alt() { $PY -m xtc_lab.alternate --before /tmp/wire3-before "$@"; }
fleet() {  # PREFIX: run.py (the fleet bench) on SQLite then PostgreSQL, moving rates then steady, before then after
  alt --to-log --each db=sqlite,pg --each mode:jitter=jitter:0.05,steady:0 --each side=before,after \
    "$1{side}-{db}-{mode}" -- $PY run.py '{side}' '{db}' 1000 20 "$1{side}-{db}-{mode}.json" '{jitter}'
}
profile() {  # OUT --each ...: the profile per thread of the product on each side
  alt "${@:2}" "$1" -- $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter '{jitter}' --top 40
}
schema() {  # OUT --each ...: the profile per thread of this branch's engine asking for xtc-samples/{v}
  alt "${@:2}" "$1" -- $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter '{jitter}' --top 40 \
    --schema 'xtc-samples/{v}'
}
case "${1:-}" in
  round1)
    alt micro -- $PY micro.py
    fleet ""
    alt --each n=,-2 --each side=before,after 'daemon-{side}{n}' -- \
      $PY -m xtc.cli bench daemon --vrs 10000 --seconds 10 --json ;;
  round2)  # the daemon bench on a synthetic counters file (--file: lighter than 40,000 veth pairs)
    fleet ""
    alt --each side=before,after 'daemon-{side}' -- $PY -m xtc.cli bench daemon --vrs 10000 --seconds 10 --file --json
    bash "$0" profile ;;
  profile) profile "profile${2:-}-{side}-jitter{jitter}" --each jitter=0.05,0 --each side=before,after ;;
  profile3) profile 'profile3-{k}-{side}-jitter{jitter}' --each k=1,2 --each jitter=0,0.05 --each side=before,after ;;
  profile4) schema 'profile4-v{v}-jitter{jitter}' --each jitter=0,0.05 --each v=2,3 ;;
  round5)  # after xtc-samples/3 became one body frame
    for j in 0 0.05; do
      schema 'profile5-v{v}-jitter{jitter}' --each jitter=$j --each v=2,3
      profile 'profile5-{side}-jitter{jitter}' --each jitter=$j --each side=before,after
    done
    fleet r5- ;;
  *) echo "usage: bash runs.sh round1|round2|profile [TAG]|profile3|profile4|round5" >&2; exit 2 ;;
esac
