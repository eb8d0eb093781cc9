"""What the routers the quiet screen leaves to ``plan_router`` get from it, after the warm-up: how many plans send
commands, record events or change the activation, by kind (a measurement, patched in this process only).  Usage,
from the repository's top:

    python docs/results/2026-11-28-policer-worker-steps/plans.py OUT.json --routers 1000 --window 10 \
        --jitter 0.05 --sample-link --sample-udp 127.0.0.1 --no-profile
"""
import collections
import json
import sys
import time

from xtc_lab.policer_profile import main

from xtc.policer import engine

C: collections.Counter = collections.Counter()
T0 = time.monotonic()
AFTER_S = 21.0
plan_router = engine.plan_router


def counted(settings, rin, now):
    plan = plan_router(settings, rin, now)
    if time.monotonic() - T0 > AFTER_S:
        C["calls"] += 1
        C["no_commands_events_activation"] += not plan.commands and not plan.events and plan.activation == rin.activation
        C["commands"] += bool(plan.commands)
        C["events"] += bool(plan.events)
        C["cmds:" + ",".join(sorted({c.cmd for c in plan.commands}))] += 1
        C["evs:" + ",".join(sorted({e.kind for e in plan.events}))] += 1
    return plan


engine.plan_router = counted
main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump(C, f, indent=1)
