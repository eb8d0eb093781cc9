#!/bin/sh
# This session's runs, from this folder (the script as the runs ran it, one case a part: 40d53597; the same
# runs, the profile tool's shared arguments said once: r4000 now names --turn, which one value leaves as it was,
# and trigger sets its variables with a second env).  Each tree was checked out by
# `git worktree add --detach /tmp/rss/NAME REV` and imported by PYTHONPATH (the fleet is a child process of the
# profile tool and inherits it): main d556f4cc (the fleet before: its daemons' sockets read through
# zmq.asyncio, its samples' rows built from the instance dictionaries), lean 38d5c33e (after: one reader
# callback a socket, rows built directly; the engine the same as main's), shed 2bc74506 (lean's fleet, the
# engine shedding load while behind).  Runs alternate through python -m xtc_lab.alternate; runs.log has the
# load before and after each run.
#   r5000    the fleets, 5,000 routers x 16 VRs after 180 s, two rounds
#   r3000    the fleets, 3,000 routers after 120 s, one round
#   r4000    where the engine stops keeping up: the lean fleet, 4,000 routers after 150 s, one run
#   shed     the engines without and with load shedding, the lean fleet, 5,000 routers, two rounds
#   trigger  the same, each engine stopped for 5 s a minute into its warm-up (trigger.sh), two rounds
set -e

# alternate NAME-PATTERN AXIS=VALUES ROUNDS ROUTERS WARMUP [WRAPPER...]: the profile tool's runs, with moving
# rates, the samples over the links and no PUB sockets, each tree on PYTHONPATH by the axis' value
alternate() {
  pattern=$1 axis=${2%%=*} each=$2 rounds=$3 routers=$4 warmup=$5
  shift 5
  python -m xtc_lab.alternate --rounds "$rounds" --turn "$axis" --each "$each" "$pattern" -- \
    env PYTHONPATH="/tmp/rss/{$axis}:/tmp/rss/{$axis}/lab" "$@" python -m xtc_lab.policer_profile \
    --routers "$routers" --window 5 --jitter 0.05 --sample-link --link-only --no-profile --sizes \
    --warmup "$warmup" --top 20
}

case "${1:?r5000, r3000, r4000, shed or trigger}" in
r5000) alternate "r5000-{round}-{fleet}" fleet=main,lean 2 5000 180 ;;
r3000) alternate "r3000-{round}-{fleet}" fleet=main,lean 1 3000 120 ;;
r4000) alternate "r4000-{round}-{fleet}" fleet=lean 1 4000 150 ;;
shed) alternate "s5000-{round}-{engine}" engine=lean,shed 2 5000 180 ;;
trigger) alternate "t5000-{round}-{engine}" engine=lean,shed 2 5000 180 env STOP_AT=60 STOP_S=5 sh trigger.sh ;;
esac
