#!/bin/sh
# Three profiles of the engine at 1,000 stand-in daemons x 16 VRs, rates moving every period, samples as
# signed datagrams, the whole link-pool loop profiled (every callback and task step), each profile kept whole.
# Run from the repository's top, quiet host: sh docs/results/2026-11-28-policer-link-thread/runs.sh
set -u
D=docs/results/2026-11-28-policer-link-thread
for i in 1 2 3; do
  echo "run $i start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
  .venv/bin/python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link \
    --sample-udp 127.0.0.1 --top 40 --stats $D/profile$i.prof > $D/profile$i.json 2> $D/profile$i.err
  echo "run $i rc=$? end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
done
# Then the thread CPU inside the link thread's functions as the engine polices (timers.py), three runs, each
# after the datagram check's micro-benchmark alone (micro.py).
for i in 1 2 3; do
  echo "timers $i start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
  .venv/bin/python $D/micro.py > $D/micro$i.json 2> $D/micro$i.err
  .venv/bin/python $D/timers.py $D/timers$i.json --routers 1000 --window 10 --jitter 0.05 --sample-link \
    --sample-udp 127.0.0.1 --no-profile > $D/timers$i-profile.json 2> $D/timers$i.err
  echo "timers $i rc=$? end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
done
# The interpreter's switch interval, 5 ms (the default) against 50 ms, two pairs; the collections after the warm-up.
for i in 1 2; do
  for iv in 0.005 0.05; do
    echo "switch $iv $i start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
    .venv/bin/python $D/switch_interval.py $iv --routers 1000 --window 10 --jitter 0.05 --sample-link \
      --sample-udp 127.0.0.1 --no-profile > $D/switch-$iv-$i.json 2> $D/switch-$iv-$i.err
    echo "switch $iv $i rc=$? end $(date -u +%FT%TZ)" >> $D/runs.log
  done
done
.venv/bin/python $D/collections.py --routers 1000 --window 10 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 \
  --no-profile > $D/collections.json 2> $D/collections.err
echo "collections rc=$? end $(date -u +%FT%TZ)" >> $D/runs.log
# Sizing a compiled check of a turn of datagrams (batch_check.py), three runs.
for i in 1 2 3; do
  .venv/bin/python $D/batch_check.py > $D/batch$i.json 2> $D/batch$i.err
  echo "batch $i rc=$? end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/runs.log
done
