#!/bin/sh
# From the repository's top, quiet host: the check's micro-benchmark three times, then the engine with each check,
# four rounds alternated (the order turned in even rounds).
set -u
D=docs/results/2026-11-28-policer-c-check
sh $D/build.sh
for i in 1 2 3; do .venv/bin/python $D/micro.py > $D/micro$i.json 2> $D/micro$i.err; done
cd $D && ../../../.venv/bin/python -m xtc_lab.alternate --rounds 4 --each side:impl=after:python,after:c \
  "profile{round}-{impl}" -- ../../../.venv/bin/python engine.py "{impl}" --routers 1000 --window 10 --jitter 0.05 \
  --sample-link --sample-udp 127.0.0.1 --no-profile
