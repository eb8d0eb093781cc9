#!/bin/sh
# 5,000 routers x 16 VRs, before (main, /tmp/mem-before) and after (this branch, installed), with a warm-up
# of 180 s so that the engine has contacted and measured its routers (the stand-in fleet of 5,000 daemons
# shares the machine's two cores: the JSON says how many were measured a second).
# $1: the sides in order (default after,before), $2: a suffix of the round (the second: 2, sides before,after).
set -e
# The stand-in fleet of 5,000 daemons with their PUB sockets needs about 25,000 descriptors, past this machine's
# hard limit of 20,000 (libzmq aborts it: 'Too many open files'): --link-only binds none (the samples over the link).
python -m xtc_lab.alternate --before /tmp/mem-before --each "side=${1:-after,before}" "rss5000${2:-}-{side}" -- \
  python -m xtc_lab.policer_profile --routers 5000 --window 5 --jitter 0.05 --sample-link --link-only --no-profile \
  --sizes --warmup 180 --top 40
