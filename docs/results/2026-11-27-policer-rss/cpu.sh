#!/bin/sh
# CPU per measurement must not rise beyond the runs' spread: python -m xtc_lab.policer_profile at 1,000
# routers x 16 VRs, rates moving (--jitter 0.05), the samples over the link, unprofiled window of 10 cycles,
# before (main's product, /tmp/mem-before: git archive db076ca xtc) and after (this branch, installed)
# alternated, three rounds (before first, after first, before first).  Run from this folder with the
# worktree's venv first on PATH.  Also the sizes of the engine's structures after (sizes-after2-*).
set -e
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then sides=before,after; else sides=after,before; fi
  python -m xtc_lab.alternate --before /tmp/mem-before --each "side=$sides" "cpu$r-{side}" -- \
    python -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter 0.05 --sample-link --no-profile --top 5
done
