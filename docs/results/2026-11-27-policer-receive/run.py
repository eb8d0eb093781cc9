"""One run of the fleet bench (``xtc policer bench --fleet``: 1,000 routers x 16 VRs, 10% dead, samples over the
link, one engine shard, SQLite, period 1 s) for this session: ``python run.py before|after JITTER OUT.json``.

``before`` runs main at the branch point (035f6e8, ``git archive 035f6e8 xtc`` unpacked in /tmp/recv-before)
first on the path of this process and of the processes the bench starts; both sides run this branch's bench
and stand-in fleet (xtc_lab)."""
import json
import os
import sys
import time

side, jitter, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if side == "before":
    os.environ["PYTHONPATH"] = "/tmp/recv-before"
    sys.path.insert(0, "/tmp/recv-before")
from xtc_lab.policer_bench import run_fleet_bench  # noqa: E402

import xtc.policer.link as link  # noqa: E402

assert link.__file__.startswith("/tmp/recv-before/" if side == "before" else "/work/wt/recv/"), link.__file__
load_before, started = os.getloadavg(), time.time()
res = run_fleet_bench(1000, 16, 0.1, 20.0, 100.0, samples=True, shards=1, jitter=jitter)
res.update(side=side, jitter=jitter, database="SQLite", started_unix_s=started, load_average_before=load_before,
           load_average_after=os.getloadavg())
with open(out, "w") as f:
    json.dump(res, f, indent=1)
print(json.dumps({k: res.get(k) for k in ("side", "jitter", "measured_per_s", "engine_cpu_ms_per_measurement", "policy_cycle_ms",
                                          "rss_mb", "load_average_before", "load_average_after")}))
