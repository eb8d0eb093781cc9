#!/bin/sh
# The engine's RSS against its routers (issue 50's memory goal), one fresh process a run:
# python -m xtc_lab.policer_profile (the real engine, link pool and sample streams, the samples over the
# link as the service takes them, SQLite, 16 VRs a router, 10% dead, rates moving every period) against
# python -m xtc_lab.policer_fleet in a child process.  Run from this folder with the worktree's venv
# first on PATH.  $1: the side: before (main's product, exported first:
#   rm -rf /tmp/mem-before; mkdir /tmp/mem-before; git archive db076ca xtc | tar -x -C /tmp/mem-before)
# or after (the installed product); $2: the routers (default below).  (The session's rss-before-* ran at
# 17:11-17:14 from the worktree before any change to xtc/, the same product as main's; the sizes-before-* as here.)
set -e
tag=${1:-before}
sizes=${2:-100,500,1000,2000,5000}
# RSS (no tracing; the per-type census counted after the RSS is read)
python -m xtc_lab.alternate --before /tmp/mem-before --each "side=$tag" --each "routers=$sizes" "rss-{side}-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --top 40
# The bytes reachable from each of the engine's structures (no tracing: read after a longer warm-up, every
# router measured), with the RSS of the same run
python -m xtc_lab.alternate --before /tmp/mem-before --each "side=$tag" --each "routers=250,500,1000" "sizes-{side}-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --sizes --warmup 40 --top 40
