#!/bin/bash
# The profile per thread (python -m xtc_lab.policer_profile: 1,000 routers x 16 VRs, 10% dead, SQLite, the samples
# over the link as the service takes them, windows of 10 whole cycles), steady and with moving rates (--jitter 0.05),
# the three sides of side.sh alternated (python -m xtc_lab.alternate), the order turned each round.  ROUNDS rounds
# from FIRST.
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
for k in $(seq ${FIRST:-1} ${ROUNDS:-3}); do
  case $((k % 3)) in 1) order=main,fleet,after ;; 2) order=after,fleet,main ;; 0) order=fleet,after,main ;; esac
  PYTHONPATH=../../../lab $PY -m xtc_lab.alternate --each mode:jitter=steady:0,jitter:0.05 --each tag=$order \
    "profile$k-{tag}-{mode}" -- \
    ./side.sh {tag} $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter {jitter} --sample-link --top 40
done
