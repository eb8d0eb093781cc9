#!/bin/sh
# An experiment, not the product: the engine's process with Python's small-object allocator off
# (PYTHONMALLOC=malloc: every object from glibc's malloc, whose free pages the engine's trim gives back),
# against the same product with it on: this branch, installed; sizes at 250 and 1,000 routers as after2.sh,
# and the CPU at 1,000 routers as cpu.sh, one pair alternated.
set -e
python -m xtc_lab.alternate --each "routers=250,1000" "sizes-nopymalloc-{routers}" -- \
  env PYTHONMALLOC=malloc python -m xtc_lab.policer_profile --routers "{routers}" --window 5 --jitter 0.05 --sample-link \
  --no-profile --census --sizes --trim --warmup 40 --top 40
python -m xtc_lab.alternate --each "alloc=pymalloc,malloc" "cpu-{alloc}" -- \
  env PYTHONMALLOC={alloc} python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --no-profile --top 5
