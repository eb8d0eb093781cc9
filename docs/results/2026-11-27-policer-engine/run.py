"""One fleet bench run: python run.py before|after sqlite|pg ROUTERS DURATION OUT.json [JITTER]

*Before* is main at 1ad1e7b, exported to /tmp/engine-before.  The run is the lab's
xtc_lab.policer_compare, which does what this script did itself when it ran
(git show db4b77a:docs/results/2026-11-27-policer-engine/run.py).
"""
import sys

from xtc_lab.policer_compare import main

sys.exit(main(["/tmp/engine-before", *sys.argv[1:]]))
