"""One fleet bench run as ``xtc policer bench --fleet`` makes it, on SQLite (the database's CPU is the engine's
process's): ``python run.py before|after OUT.json JITTER``: 1,000 routers x 16 VRs, 10% dead, samples over the
link, one engine shard, period 1 s, 20 s measured, then the API at 100 requests/s.  ``before``: main at the
branch point exported with ``git archive`` to /tmp/plan-before, first on the path of this process and of the
policer and fleet it starts; both sides run this branch's bench (xtc_lab) and stand-in fleet."""

import json
import os
import sys
import time

side, out, jitter = sys.argv[1], sys.argv[2], float(sys.argv[3])
BEFORE = "/tmp/plan-before"
if side == "before":
    os.environ["PYTHONPATH"] = BEFORE
    sys.path.insert(0, BEFORE)
from xtc_lab.policer_bench import run_fleet_bench_on

import xtc

assert xtc.__file__.startswith(BEFORE) == (side == "before"), xtc.__file__
load0, t0 = os.getloadavg(), time.time()
res = run_fleet_bench_on("sqlite", 1000, 16, 0.1, 20.0, 100.0, samples=True, shards=1, jitter=jitter)
res.update(side=side, load_average_before=load0, load_average_after=os.getloadavg(), started_unix_s=t0)
with open(out, "w") as f:
    json.dump(res, f, indent=1)
print(json.dumps({k: res.get(k) for k in ("side", "jitter", "measured_per_s", "engine_cpu_ms_per_measurement",
                                          "policy_cycle_ms", "rss_mb", "load_average_before", "load_average_after")}))
