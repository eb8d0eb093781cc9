#!/bin/bash
# A turn of datagrams taken step by step (all read, then all checked, then all handed on) against one datagram
# at a time from its read to its hand-over (28e5784, exported with `git archive 28e5784 xtc` to BEFORE):
# python -m xtc_lab.policer_profile, 1,000 stand-in daemons x 16 VRs, 10% dead, SQLite, the samples as
# datagrams, moving rates (--jitter 0.05); the two sides alternated (python -m xtc_lab.alternate), the order
# turned each round.  Rounds FIRST to ROUNDS.
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
BEFORE=${BEFORE:-/tmp/s64/before}
for k in $(seq ${FIRST:-1} ${ROUNDS:-6}); do
  if [ $((k % 2)) = 1 ]; then order=before,after; else order=after,before; fi
  $PY -m xtc_lab.alternate --before "$BEFORE" --each "side=$order" "profile$k-{side}" -- \
    $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 \
      --no-profile --top 5
done
