#!/bin/bash
# decode_v3's header kept and its numbers checked from their top bytes (commit 4939c62) against the tree before it
# (17942fb, exported with `git archive 17942fb xtc` to BEFORE): micro.py (CPU per decode_v3 call) on each side,
# then python -m xtc_lab.policer_profile, 1,000 stand-in daemons x 16 VRs, 10% dead, SQLite, the samples as
# datagrams, moving rates (--jitter 0.05); the two sides alternated (python -m xtc_lab.alternate), the order turned
# each round.  Rounds FIRST to ROUNDS (this session: 1-3, then 4-6).
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
BEFORE=${BEFORE:-/tmp/s63/before}
for k in $(seq ${FIRST:-1} ${ROUNDS:-3}); do
  if [ $((k % 2)) = 1 ]; then order=before,after; else order=after,before; fi
  $PY -m xtc_lab.alternate --before "$BEFORE" --each "side=$order" "micro$k-{side}" -- $PY micro.py
  $PY -m xtc_lab.alternate --before "$BEFORE" --each "side=$order" "profile$k-{side}" -- \
    $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 \
      --no-profile --top 5
done
