#!/usr/bin/env bash
# The policer's TCP sockets toward 1,000 stand-in daemons on TCP after 60 s of policing: measured from
# their samples (the default) and by 'list' every period (--no-samples).
set -u
cd "$(dirname "$0")"
XTC=${XTC:-../../../.venv/bin/xtc}
for mode in samples list; do
  extra=(); [ "$mode" = list ] && extra=(--no-samples)
  start=$(date -u +%T); load=$(cut -d' ' -f1-3 /proc/loadavg)
  $XTC policer bench --fleet 1000 --transport tcp --duration 60 --rate 200 --api-duration 2 "${extra[@]}" > "tcp-$mode.json" 2> "tcp-$mode.err"; rc=$?
  [ -s "tcp-$mode.err" ] || rm -f "tcp-$mode.err"
  echo "tcp-$mode.json start $start end $(date -u +%T) load $load rc $rc" >> runs.log
done
