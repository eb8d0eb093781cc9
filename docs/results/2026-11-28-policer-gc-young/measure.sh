#!/bin/bash
# The policer engine's young-generation threshold (xtc.service.collector.raise_young_threshold, which the engine
# process and, by default, the profile set) against Python's default (the profile's --gc-default): python -m
# xtc_lab.policer_profile, 1,000 stand-in daemons x 16 VRs, 10% dead, SQLite, the samples as datagrams, each
# stand-in daemon at its own phase in the period, with moving rates (--jitter 0.05) and steady; each run under the
# cycle session's gcsplit.py (the collector's passes per thread and generation, on stderr); the two sides
# alternated (python -m xtc_lab.alternate), the order turned each round.  ROUNDS rounds from FIRST; MODES as
# alternate's --each value.
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
tree="$(cd ../../.. && pwd)"
for k in $(seq ${FIRST:-1} ${ROUNDS:-2}); do
  dflt=default:--gc-default young=young:--sample-link  # (the young side repeats a flag: no empty word)
  if [ $((k % 2)) = 1 ]; then order=$dflt,$young; else order=$young,$dflt; fi
  PYTHONPATH=$tree:$tree/lab $PY -m xtc_lab.alternate --each "mode:jitter=${MODES:-jitter:0.05,steady:0}" \
    --each "gc:flag=$order" "gc$k-{gc}-{mode}" -- \
    env PYTHONPATH=$tree:$tree/lab $PY ../2026-11-27-policer-cycle/gcsplit.py --routers 1000 --window 10 \
      --jitter {jitter} --sample-link --sample-udp 127.0.0.1 --no-profile --top 5 {flag}
done
