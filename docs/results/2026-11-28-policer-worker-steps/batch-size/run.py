"""timers.py with the engine's ``batch_size`` set to $BS (256 is the engine's; a measurement, patched in this
process only).  From the repository's top, the pairs of this folder, in this order:

    for r in 1 2; do for bs in 256 1024; do
      BS=$bs python docs/results/2026-11-28-policer-worker-steps/batch-size/run.py OUT-steps.json \
        --routers 1000 --window 10 --jitter 0.05 --sample-link --sample-udp 127.0.0.1 --no-profile > OUT-profile.json
    done; done
"""
import os
import runpy
import sys

from xtc.policer import engine

init = engine.Engine.__init__
BS = int(os.environ["BS"])


def patched(self, *a, **k):
    k.setdefault("batch_size", BS)
    init(self, *a, **k)


engine.Engine.__init__ = patched
sys.argv = [sys.argv[0]] + sys.argv[1:]
runpy.run_path("docs/results/2026-11-28-policer-worker-steps/timers.py", run_name="__main__")
