#!/bin/sh
# The engine's structures and heap with the compact samples' numbers kept as arrays (this branch at 1b6f4fe,
# installed): as after.sh's sizes runs.
set -e
python -m xtc_lab.alternate --each "routers=250,500,1000" "sizes-after2-{routers}" -- \
  python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --sizes --trim --warmup 40 --top 40
