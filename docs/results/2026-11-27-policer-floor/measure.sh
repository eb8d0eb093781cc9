#!/usr/bin/env bash
# Three rounds, the consumers' order reversed every other round: the receive floor over the link pool
# (none), with the samples' decode (streams), the whole engine (engine), the smallest Python loop over
# libzmq SUB sockets (raw), and one UDP socket (udp_floor.py); 1,000 routers x 16 VRs, steady rates.
set -u
cd "$(dirname "$0")"
PY=${PY:-../../../.venv/bin/python}
order=(raw none streams engine udp)
for round in 1 2 3; do
  if [ $((round % 2)) = 0 ]; then seq=(udp engine streams none raw); else seq=("${order[@]}"); fi
  for c in "${seq[@]}"; do
    out="r${round}-${c}.json"
    start=$(date -u +%T); load=$(cut -d' ' -f1-3 /proc/loadavg)
    if [ "$c" = udp ]; then
      $PY udp_floor.py --window 10 > "$out" 2> "r${round}-${c}.err"; rc=$?
    else
      $PY -m xtc_lab.policer_floor --routers 1000 --window 10 --consumer "$c" > "$out" 2> "r${round}-${c}.err"; rc=$?
    fi
    [ -s "r${round}-${c}.err" ] || rm -f "r${round}-${c}.err"
    echo "$out start $start end $(date -u +%T) load $load rc $rc" >> runs.log
  done
done
