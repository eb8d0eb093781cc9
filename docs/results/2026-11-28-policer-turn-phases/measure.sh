#!/bin/bash
# A turn of datagrams taken step by step (all read, then all checked, then all handed on) against one datagram
# at a time from its read to its hand-over (28e5784, exported with `git archive 28e5784 xtc` to BEFORE):
# python -m xtc_lab.policer_profile, 1,000 stand-in daemons x 16 VRs, 10% dead, SQLite, the samples as
# datagrams, moving rates (--jitter 0.05); six rounds, the two sides alternated, the order turned each round.
# (The runs were made by a loop in this script that did the same steps in the same order; it calls
# xtc_lab.alternate's --rounds since.)
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
$PY -m xtc_lab.alternate --before "${BEFORE:-/tmp/s64/before}" --rounds 6 --each side=before,after "profile{round}-{side}" -- \
  $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 \
    --no-profile --top 5
