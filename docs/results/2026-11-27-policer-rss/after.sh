#!/bin/sh
# The same runs as measure.sh on this branch's product, exported (git archive dbfb40a xtc) to /tmp/mem-after
# and imported from there (alternate's TREE side), so that editing the worktree meanwhile changes nothing.
set -e
python -m xtc_lab.alternate --before /tmp/mem-after --each "side=before" --each "routers=250,500,1000" "sizes-after-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --sizes --trim --warmup 40 --top 40
python -m xtc_lab.alternate --before /tmp/mem-after --each "side=before" --each "routers=100,500,1000,2000,5000" "rss-after-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --top 40
