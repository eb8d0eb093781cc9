"""One fleet bench run (as ``xtc policer bench --fleet``, SQLite): python run.py before|after ROUTERS DURATION OUT.json JITTER

"before" is main at the branch point (7becaf7) exported to /tmp/planarr-before and first on the path (of this
process and of the policer and fleet it starts); both sides use this branch's bench and stand-in fleet.  The run
is the lab's xtc_lab.policer_compare on SQLite, which does what this script did itself when it ran (git show
432df09:docs/results/2026-11-27-policer-plan-arrays/run.py; its JSON said "SQLite" as the database and had
no uptime, the lab's says where it ran and has the host's uptime before and after besides the load average).
"""
import sys

from xtc_lab.policer_compare import main

sys.exit(main(["/tmp/planarr-before", sys.argv[1], "sqlite", *sys.argv[2:]]))
