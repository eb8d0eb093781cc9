#!/bin/sh
# The stand-in fleet before (main: d556f4cc, its daemons' sockets read through zmq.asyncio, its samples' rows
# built from the instance dictionaries) and after (38d5c33e: one reader callback a socket, rows built directly),
# each tree checked out by `git worktree add --detach /tmp/rss/{main,lean} REV` and imported by PYTHONPATH (the
# fleet is a child process of the profile tool and inherits it), alternated (python -m xtc_lab.alternate;
# runs.log has the load before and after each run).  The engine is the same code in both trees.
# PART: r5000 (5,000 routers x 16 VRs after 180 s, two rounds) or r3000 (3,000 routers after 120 s, one round).
set -e
case "${1:?r5000 or r3000}" in
r5000)
  python -m xtc_lab.alternate --rounds 2 --turn fleet --each fleet=main,lean "r5000-{round}-{fleet}" -- \
    env PYTHONPATH=/tmp/rss/{fleet}:/tmp/rss/{fleet}/lab python -m xtc_lab.policer_profile --routers 5000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
r3000)
  python -m xtc_lab.alternate --rounds 1 --turn fleet --each fleet=main,lean "r3000-{round}-{fleet}" -- \
    env PYTHONPATH=/tmp/rss/{fleet}:/tmp/rss/{fleet}/lab python -m xtc_lab.policer_profile --routers 3000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 120 --top 20 ;;
esac
# (added after the two parts above: where the engine stops keeping up, with the lean fleet, one run)
case "$1" in
r4000)
  python -m xtc_lab.alternate --rounds 1 --each fleet=lean "r4000-{round}-{fleet}" -- \
    env PYTHONPATH=/tmp/rss/{fleet}:/tmp/rss/{fleet}/lab python -m xtc_lab.policer_profile --routers 4000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 150 --top 20 ;;
esac
# (added last: the engine shedding load while behind, "shed" (the shed branch's first commit, checked out in
# /tmp/rss/shed), against the same fleet without it ("lean"), two rounds at 5,000 routers)
case "$1" in
shed)
  python -m xtc_lab.alternate --rounds 2 --turn engine --each engine=lean,shed "s5000-{round}-{engine}" -- \
    env PYTHONPATH=/tmp/rss/{engine}:/tmp/rss/{engine}/lab python -m xtc_lab.policer_profile --routers 5000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
esac
# (added after "shed": the same two engines, each stopped for 5 s a minute into its warm-up (trigger.sh), two
# rounds: does an engine that fell behind come back?)
case "$1" in
trigger)
  python -m xtc_lab.alternate --rounds 2 --turn engine --each engine=lean,shed "t5000-{round}-{engine}" -- \
    env PYTHONPATH=/tmp/rss/{engine}:/tmp/rss/{engine}/lab STOP_AT=60 STOP_S=5 sh trigger.sh python -m xtc_lab.policer_profile \
    --routers 5000 --window 5 --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
esac
