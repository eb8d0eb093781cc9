#!/bin/sh
# The engine with its links spoken by hand (engine.link_transport = "zmtp") against libzmq's DEALER sockets
# ("libzmq"), the same tree, alternated (python -m xtc_lab.alternate; runs.log has the load before and after
# each run).  PART: cpu (1,000 routers x 16 VRs, rates moving, samples over the links, three rounds) or
# rss (5,000 routers x 16 VRs, the RSS and its parts after 180 s, one run each way).
set -e
case "${1:?cpu or rss}" in
cpu)
  python -m xtc_lab.alternate --rounds 3 --turn transport --each transport=zmtp,libzmq "cpu-{round}-{transport}" -- \
    python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --no-profile \
    --link-transport "{transport}" ;;
rss)
  # (--link-only: the stand-in fleet binds no PUB sockets: 5,000 of them would pass this machine's open-files limit)
  # (a second round, ROUND=2, runs libzmq first)
  python -m xtc_lab.alternate --each "transport=${ORDER:-zmtp,libzmq}" "rss5000${ROUND:+-$ROUND}-{transport}" -- \
    python -m xtc_lab.policer_profile --routers 5000 --window 5 --jitter 0.05 --sample-link --link-only --no-profile \
    --sizes --warmup 180 --top 20 --link-transport "{transport}" ;;
conn)
  for curve in "" --curve; do
    for t in ipc tcp; do
      python -m xtc_lab.zmq_memory --n 1000 --transport $t $curve --messages 300 --mode dealers --mode zmtp \
        > "conn-$t${curve:+-curve}.json"
    done
  done ;;
esac
