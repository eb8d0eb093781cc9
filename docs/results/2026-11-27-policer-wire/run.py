"""One fleet bench run: python run.py before|after sqlite|pg ROUTERS DURATION OUT.json [JITTER]

"before" is the branch point (aaca391) exported to /tmp/wire3-before and first on the path (of this process
and of the policer and fleet it starts); both sides use this branch's bench and stand-in fleet, so the load is
the same (the fleet serves xtc-samples/3 only to a policer that asks for it: "after").  The run is the lab's
xtc_lab.policer_compare, which does what this script did itself when it ran (git show
4566092:docs/results/2026-11-27-policer-wire/run.py; its JSON said "SQLite" and "PostgreSQL 15 (fsync on)"
as the database, the lab's says where it ran too).
"""
import sys

from xtc_lab.policer_compare import main

sys.exit(main(["/tmp/wire3-before", *sys.argv[1:]]))
