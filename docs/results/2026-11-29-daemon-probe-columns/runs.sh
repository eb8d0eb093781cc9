#!/bin/sh
# From the repository's top, as root, quiet host: the daemon's own CPU at 1,000 VRs and a 1 s period with the
# default controller (the lag probe), steady workload, the product before (6f27b55) and after the lag probe's
# columns, alternated over four rounds (the order turned in even rounds).
set -u
D=docs/results/2026-11-29-daemon-probe-columns
rm -rf /tmp/before-6f27b55 && mkdir -p /tmp/before-6f27b55 && git archive 6f27b55 xtc | tar -x -C /tmp/before-6f27b55
cd $D && ../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-6f27b55 --rounds 4 \
  --each side=before,after "bench-{round}-{side}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload steady --breakdown --json
# Then the law without the probe (unchanged by this change), twice, for the floor the probe adds to.
../../../.venv/bin/python -m xtc_lab.alternate --each k=1,2 "noprobe-{k}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc-noprobe --workload steady --breakdown --json
# And the moving workload (rates +-30% every period from the activation: the estimators' whole update), two rounds.
../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-6f27b55 --rounds 2 \
  --each side=before,after "moving-{round}-{side}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload moving --breakdown --json
