#!/bin/bash
# The samples as signed UDP datagrams (engine.sample_udp) against the samples on the kept link: the engine's CPU
# per measurement, python -m xtc_lab.policer_profile, 1,000 daemons x 16 VRs, 10% dead, SQLite, each stand-in
# daemon at its own phase in the period, steady and with moving rates (--jitter 0.05), the two transports
# alternated (python -m xtc_lab.alternate), the order turned each round.  ROUNDS rounds from FIRST.  This tree's
# product and lab; the stand-in daemons send the datagrams with the daemon's own adapter (xtc.daemon.sample_udp).
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
tree="$(cd ../../.. && pwd)"
for k in $(seq ${FIRST:-1} ${ROUNDS:-2}); do
  link=link:--sample-link udp=udp:--sample-udp=127.0.0.1  # (the value of the link side repeats a flag: no empty word)
  if [ $((k % 2)) = 1 ]; then order=$link,$udp; else order=$udp,$link; fi
  PYTHONPATH=$tree:$tree/lab $PY -m xtc_lab.alternate --each mode:jitter=steady:0,jitter:0.05 \
    --each "via:udp=$order" \
    "udp$k-{via}-{mode}" -- \
    env PYTHONPATH=$tree:$tree/lab $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter {jitter} \
      --sample-link --top 5 --no-profile {udp}
done
