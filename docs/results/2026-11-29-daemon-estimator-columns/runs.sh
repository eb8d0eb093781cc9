#!/bin/sh
# From the repository's top, as root, quiet host: the daemon's own CPU with XTC's default law (the lag probe),
# the product before (419532a) and after the estimators' columns and early drop's idle period. (The runs were
# made with each command line written out; these are the same arguments, a later --controller or --seconds
# replacing the one in $BENCH.)
set -u
D=docs/results/2026-11-29-daemon-estimator-columns
rm -rf /tmp/before-419532a && mkdir -p /tmp/before-419532a && git archive 419532a xtc | tar -x -C /tmp/before-419532a
cd $D || exit 1
ALT="../../../.venv/bin/python -m xtc_lab.alternate"
BENCH="../../../.venv/bin/xtc bench daemon --seconds 10 --controller xtc --breakdown --json"
# 1,000 VRs, 1 s period, steady: four rounds alternated (the order turned in even rounds).
$ALT --before /tmp/before-419532a --rounds 4 --each side=before,after "bench-{round}-{side}" -- \
  $BENCH --vrs 1000 --workload steady
# The law without the probe (its stage unchanged by this change), twice, for the floor the probe adds to.
$ALT --each k=1,2 "noprobe-{k}" -- $BENCH --vrs 1000 --workload steady --controller xtc-noprobe
# The moving workload (rates +-30% every period: more rows take the estimator's whole update): two rounds, then
# two more (the first two rounds' spans overlapped).
$ALT --before /tmp/before-419532a --rounds 2 --each side=before,after "moving-{round}-{side}" -- \
  $BENCH --vrs 1000 --workload moving
$ALT --before /tmp/before-419532a --rounds 2 --each side=before,after "moving-more-{round}-{side}" -- \
  $BENCH --vrs 1000 --workload moving
# The daemon's other two goals (0.1 s period; 10,000 VRs), last measured with the law before the probe: the
# product after (before the idle set below), steady, without and with a sample subscriber.
$ALT --each k=1,2 --each subs=0,1 "period-0.1-{k}-subs{subs}" -- \
  $BENCH --vrs 1000 --period-s 0.1 --workload steady --subscribers {subs}
$ALT --each subs=0,1 "vrs-10000-subs{subs}" -- $BENCH --vrs 10000 --seconds 20 --workload steady --subscribers {subs}
# After the set of VRs with early drop on (the commit after the runs above): twice, steady, 1,000 VRs.
$ALT --each k=1,2 "idle-set-{k}" -- $BENCH --vrs 1000 --workload steady
# The lag sample's roots on the whole grid at once (the commit after 2dece45): the moving workload, where probes
# complete samples every period, before (2dece45) and after, three rounds alternated.
rm -rf /tmp/before-2dece45 && mkdir -p /tmp/before-2dece45 && (cd ../../.. && git archive 2dece45 xtc) | tar -x -C /tmp/before-2dece45
$ALT --before /tmp/before-2dece45 --rounds 3 --each side=before,after "roots-{round}-{side}" -- \
  $BENCH --vrs 1000 --workload moving
# The same alone (roots_micro.py), three rounds alternated.
$ALT --before /tmp/before-2dece45 --rounds 3 --each side=before,after "roots-micro-{round}-{side}" -- \
  ../../../.venv/bin/python roots_micro.py
