"""The profile tool's run with a ``gc.callbacks`` hook counting the collections after the warm-up (21 s at 1,000
routers), by thread and generation, and their wall time.  Prints the tool's JSON, then one line of JSON on
stderr.  Usage: python docs/results/2026-11-28-policer-link-thread/collections.py <profile args>"""

import gc
import json
import sys
import threading
import time

T0 = time.monotonic()
got: dict[str, list[int]] = {}
started: dict[int, int] = {}


def hook(phase: str, info: dict) -> None:
    if time.monotonic() - T0 < 21.0:
        return
    tid = threading.get_ident()
    if phase == "start":
        started[tid] = time.perf_counter_ns()
    elif tid in started:
        e = got.setdefault(f"{threading.current_thread().name} gen{info['generation']}", [0, 0])
        e[0] += 1
        e[1] += time.perf_counter_ns() - started.pop(tid)


gc.callbacks.append(hook)
from xtc_lab.policer_profile import main

main(sys.argv[1:])
print(json.dumps({"collections_after_warmup": {k: {"count": n, "ms": round(ns / 1e6, 1)} for k, (n, ns) in got.items()}}),
      file=sys.stderr)
