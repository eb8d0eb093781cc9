"""One fleet bench run: python run.py before|after sqlite|pg ROUTERS DURATION OUT.json [JITTER]

*Before* is the branch's base (60a34a7), exported to /tmp/engine-before-rows.  The run is the lab's
xtc_lab.policer_compare, which does what this script did itself when it ran
(git show 800351e:docs/results/2026-11-27-policer-engine-rows/run.py).
"""
import sys

from xtc_lab.policer_compare import main

sys.exit(main(["/tmp/engine-before-rows", *sys.argv[1:]]))
