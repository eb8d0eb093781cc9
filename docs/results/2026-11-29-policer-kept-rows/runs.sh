#!/bin/sh
# The engine's kept VR rows as dictionaries (before: 837f1298) and as named tuples (after: 70da3584), each tree
# checked out by `git worktree add --detach /tmp/rss/{before,after} REV` and imported by PYTHONPATH, alternated
# (python -m xtc_lab.alternate; runs.log has the load before and after each run).  PART: rss (5,000 routers x 16
# VRs, the RSS and its parts after 180 s, two rounds) or cpu (1,000 routers, rates moving, three rounds).
set -e
case "${1:?rss or cpu}" in
rss)
  python -m xtc_lab.alternate --rounds 2 --turn tree --each tree=before,after "rss5000-{round}-{tree}" -- \
    env PYTHONPATH=/tmp/rss/{tree}:/tmp/rss/{tree}/lab python -m xtc_lab.policer_profile --routers 5000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
cpu)
  python -m xtc_lab.alternate --rounds 3 --turn tree --each tree=before,after "cpu-{round}-{tree}" -- \
    env PYTHONPATH=/tmp/rss/{tree}:/tmp/rss/{tree}/lab python -m xtc_lab.policer_profile --routers 1000 --window 10 \
    --jitter 0.05 --sample-link --no-profile ;;
esac
# (the next part was added after the first two: the after tree with Python's objects in glibc's malloc)
case "$1" in
malloc)
  # PYTHONMALLOC=malloc: Python's small objects in glibc's heap (whose free pages malloc_trim gives back, which the
  # engine calls after every snapshot) instead of pymalloc's 1 MiB arenas (given back only when wholly free);
  # MALLOC_ARENA_MAX=2: at most two of glibc's arenas for the engine's threads.
  python -m xtc_lab.alternate --rounds ${ROUNDS:-1} --turn alloc --each "alloc:arenas=pymalloc:8,malloc:8,malloc:2" \
    "malloc-{round}-{alloc}-{arenas}" -- env PYTHONMALLOC={alloc} MALLOC_ARENA_MAX={arenas} \
    PYTHONPATH=/tmp/rss/after:/tmp/rss/after/lab python -m xtc_lab.policer_profile --routers 5000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
esac
# (added last: the VR names interned, 21a05551 "int", against its parent c9a066ec "noint", checked out as the
# trees above; two rounds)
case "$1" in
intern)
  python -m xtc_lab.alternate --rounds 2 --turn tree --each tree=noint,int "intern-{round}-{tree}" -- \
    env PYTHONPATH=/tmp/rss/{tree}:/tmp/rss/{tree}/lab python -m xtc_lab.policer_profile --routers 5000 --window 5 \
    --jitter 0.05 --sample-link --link-only --no-profile --sizes --warmup 180 --top 20 ;;
esac
