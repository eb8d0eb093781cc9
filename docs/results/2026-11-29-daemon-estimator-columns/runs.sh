#!/bin/sh
# From the repository's top, as root, quiet host: the daemon's own CPU at 1,000 VRs and a 1 s period with the
# default controller (the lag probe), steady workload, the product before (419532a) and after the estimators'
# columns and early drop's idle period, alternated over four rounds (the order turned in even rounds).
set -u
D=docs/results/2026-11-29-daemon-estimator-columns
rm -rf /tmp/before-419532a && mkdir -p /tmp/before-419532a && git archive 419532a xtc | tar -x -C /tmp/before-419532a
cd $D && ../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-419532a --rounds 4 \
  --each side=before,after "bench-{round}-{side}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload steady --breakdown --json
# Then the law without the probe (its stage unchanged by this change), twice, for the floor the probe adds to.
../../../.venv/bin/python -m xtc_lab.alternate --each k=1,2 "noprobe-{k}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc-noprobe --workload steady --breakdown --json
# And the moving workload (rates +-30% every period: more rows take the estimator's whole update), two rounds.
../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-419532a --rounds 2 \
  --each side=before,after "moving-{round}-{side}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload moving --breakdown --json
# Two more rounds of the moving workload (its first two rounds' spans overlapped), the order turned the same way.
../../../.venv/bin/python -m xtc_lab.alternate --before /tmp/before-419532a --rounds 2 \
  --each side=before,after "moving-more-{round}-{side}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload moving --breakdown --json
# The daemon's other two goals (0.1 s period; 10,000 VRs), last measured with the law before the probe: today's
# product (after) with its default law, steady, without and with a sample subscriber.
../../../.venv/bin/python -m xtc_lab.alternate --each k=1,2 --each subs=0,1 "period-0.1-{k}-subs{subs}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --period-s 0.1 --seconds 10 --controller xtc --workload steady \
  --subscribers {subs} --breakdown --json
../../../.venv/bin/python -m xtc_lab.alternate --each subs=0,1 "vrs-10000-subs{subs}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 10000 --seconds 20 --controller xtc --workload steady \
  --subscribers {subs} --breakdown --json
# After the set of VRs with early drop on (the commit after these runs' product): twice, steady, 1,000 VRs.
../../../.venv/bin/python -m xtc_lab.alternate --each k=1,2 "idle-set-{k}" -- \
  ../../../.venv/bin/xtc bench daemon --vrs 1000 --seconds 10 --controller xtc --workload steady --breakdown --json
