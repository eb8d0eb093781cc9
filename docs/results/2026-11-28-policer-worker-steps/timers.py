"""The thread CPU inside the policer engine worker's steps, in the engine as it polices (not in a micro-benchmark):
each call timed with ``time.thread_time_ns`` (about 1 us a read here) when it starts within SPAN_S seconds after
the warm-up, with the measurements the worker took in that span (the routers of the batches' ``samples`` and
``list`` items), so that each step's figure is its CPU per measurement; then ``python -m xtc_lab.policer_profile``
runs as given.  Usage, from the repository's top:

    python docs/results/2026-11-28-policer-worker-steps/timers.py OUT.json --routers 1000 ... --no-profile

It patches the product's functions in this process only (a measurement; nothing here is the product)."""

import json
import sys
import time

from xtc_lab.policer_profile import main

from xtc.policer import engine, live, store

T: dict[str, list[int]] = {}
T0 = time.monotonic()
AFTER_S = 21.0  # the profile's warm-up at 1,000 routers (10 + routers / 100 s) and a second
SPAN_S = 10.0  # about the profile's window (--window 10)
clock = time.thread_time_ns
measured = [0]


def in_span() -> bool:
    return AFTER_S <= time.monotonic() - T0 < AFTER_S + SPAN_S


def timed(owner: object, name: str, label: str) -> None:
    f = getattr(owner, name)

    def w(*a, **k):
        if not in_span():
            return f(*a, **k)
        t = clock()
        try:
            return f(*a, **k)
        finally:
            e = T.setdefault(label, [0, 0])
            e[0] += 1
            e[1] += clock() - t

    setattr(owner, name, w)


handle = engine.Engine._handle_batch


def counted(self, items):
    if in_span():
        measured[0] += sum(1 for it in items if it[0] in ("samples", "list"))
    return handle(self, items)


engine.Engine._handle_batch = counted
timed(engine.Engine, "_handle_batch", "Engine._handle_batch (the whole batch)")
timed(store.Store, "record_outcomes", "Store.record_outcomes")
timed(store, "_measurements_moved", "  store._measurements_moved")
timed(live.LiveTable, "put", "  LiveTable.put")
timed(store.Store, "plan_states", "Store.plan_states")
timed(engine, "_quiet_demands", "engine._quiet_demands (the quiet screen)")
timed(engine, "plan_router", "plan_router")
timed(engine, "_observed", "engine._observed")
timed(engine, "_vr_changes", "engine._vr_changes")
timed(store.Store, "save_plans", "Store.save_plans")
timed(engine.Engine, "_snapshot", "Engine._snapshot (after each batch)")
timed(engine.Engine, "run_cycle", "Engine.run_cycle (the cycle thread)")

out = sys.argv[1]
main(sys.argv[2:])
n = measured[0]
with open(out, "w") as f:
    json.dump({"measurements": n, "span_s": SPAN_S,
               "steps": {k: {"calls": c, "us_per_call": round(ns / c / 1000, 1),
                             "us_per_measurement": round(ns / n / 1000, 1)} for k, (c, ns) in T.items()}}, f, indent=1)
