#!/bin/bash
# The profile per thread (python -m xtc_lab.policer_profile: 1,000 routers x 16 VRs, 10% dead, SQLite, the samples
# over the link as the service takes them, windows of 10 whole cycles), with moving rates (--jitter 0.05) and
# steady, alternated (python -m xtc_lab.alternate): before = main at the branch point ef91b1d (`git archive ef91b1d
# xtc | tar -x -C /tmp/eng/before`, alone on PYTHONPATH); v3 = this branch asking for xtc-samples/3; v2 = this branch
# asking for xtc-samples/2 (the same code, only the format).  Every side runs this branch's profile tool and
# stand-in fleet.  ROUNDS rounds; odd rounds in the order before, v3, v2, even ones v2, v3, before.
set -u
cd "$(dirname "$0")"
PY=/work/wt/engine/.venv/bin/python
for k in $(seq ${FIRST:-1} ${ROUNDS:-3}); do
  if [ $((k % 2)) = 1 ]; then order=before:before:,after:v3:xtc-samples/3,after:v2:xtc-samples/2
  else order=after:v2:xtc-samples/2,after:v3:xtc-samples/3,before:before:; fi
  $PY -m xtc_lab.alternate --before /tmp/eng/before --each mode:jitter=jitter:0.05,steady:0 \
    --each side:tag:schema=$order "profile$k-{tag}-{mode}" -- \
    $PY -m xtc_lab.policer_profile --routers 1000 --window 10 --jitter {jitter} --sample-link --top 40 --schema "{schema}"
done
