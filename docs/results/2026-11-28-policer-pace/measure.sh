#!/bin/bash
# The link pool's pace (xtc.policer.link.PACE_S: its I/O thread waits on its sockets at most once this often) against
# the engine's CPU per measurement: python -m xtc_lab.policer_profile, 1,000 daemons x 16 VRs, 10% dead, SQLite, the
# samples over the kept link, each stand-in daemon at its own phase in the period, steady and with moving rates
# (--jitter 0.05), the paces alternated (python -m xtc_lab.alternate), the order turned each round.  ROUNDS rounds
# from FIRST.  This branch's product and lab (the pace is the profile's --pace-s).
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
tree="$(cd ../../.. && pwd)"
for k in $(seq ${FIRST:-1} ${ROUNDS:-2}); do
  if [ $((k % 2)) = 1 ]; then order=0.01,0.025,0.05; else order=0.05,0.025,0.01; fi
  PYTHONPATH=$tree:$tree/lab $PY -m xtc_lab.alternate --each mode:jitter=steady:0,jitter:0.05 --each pace=$order \
    "pace$k-{pace}-{mode}" -- \
    env PYTHONPATH=$tree:$tree/lab $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter {jitter} \
      --sample-link --top 5 --no-profile \
      --pace-s {pace}
done
