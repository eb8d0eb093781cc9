#!/bin/sh
# From the repository's top, quiet host: the profile tool's --time (xtc_lab.thread_timers) on the worker's steps
# the worker-steps session timed with its own script, twice.
set -u
D=docs/results/2026-11-28-policer-timers
cd $D && ../../../.venv/bin/python -m xtc_lab.alternate --each k=1,2 "timers{k}" -- \
  ../../../.venv/bin/python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 \
  --sample-link --sample-udp 127.0.0.1 --no-profile \
  --time xtc.policer.engine:Engine._handle_batch --time xtc.policer.store:Store.record_outcomes \
  --time xtc.policer.engine:_quiet_demands --time xtc.policer.engine:plan_router \
  --time xtc.policer.engine:Engine._snapshot
