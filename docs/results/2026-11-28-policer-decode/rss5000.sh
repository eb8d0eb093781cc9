#!/bin/bash
# The engine's RSS at 5,000 routers x 16 VRs with the samples as datagrams (engine.sample_udp) and today's engine
# (4939c62): python -m xtc_lab.policer_profile as the policer-rss session's rss5000.sh ran it (--link-only: the
# stand-in fleet binds no PUB sockets; a warm-up of 180 s), plus --sample-udp.  One run, logged in runs.log.
set -u
cd "$(dirname "$0")"
PY=/work/main/.venv/bin/python
$PY -m xtc_lab.alternate --each "side=after" "rss5000-udp-{side}" -- \
  $PY -m xtc_lab.policer_profile --routers 5000 --window 5 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 \
  --link-only --no-profile --warmup 180 --top 5
