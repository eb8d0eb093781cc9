#!/bin/sh
# From the repository's top, quiet host: the quiet screen's thread CPU in the engine as it polices (the profile
# tool's --time), before (129869d) and after its shortcut for batches of routers with as many VRs each,
# three rounds alternated (the order turned in even rounds). 1,000 stand-in daemons x 16 VRs, rates moving.
set -u
D=docs/results/2026-11-29-policer-quiet-grids
rm -rf /tmp/before-129869d && mkdir -p /tmp/before-129869d && git archive 129869d xtc | tar -x -C /tmp/before-129869d
cd $D && ../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-129869d --rounds 3 \
  --each side=before,after "timers-{round}-{side}" -- \
  ../../../.venv/bin/python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 \
  --sample-link --sample-udp 127.0.0.1 --no-profile \
  --time xtc.policer.engine:_quiet_demands --time xtc.policer.engine:quiet_columns --time xtc.policer.quiet:shares_pps
