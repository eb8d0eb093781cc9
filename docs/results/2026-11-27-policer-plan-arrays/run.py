"""One fleet bench run (as ``xtc policer bench --fleet``, SQLite): python run.py before|after ROUTERS DURATION OUT.json JITTER

"before" is main at the branch point (7becaf7) exported to /tmp/planarr-before and first on the path (of this
process and of the policer and fleet it starts); both sides use this branch's bench and stand-in fleet."""
import json, os, subprocess, sys, time
code, routers, duration, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
jitter = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
BEFORE = "/tmp/planarr-before"
if code == "before":
    os.environ["PYTHONPATH"] = BEFORE
    sys.path[:0] = [BEFORE]
from xtc_lab.policer_bench import run_fleet_bench  # noqa: E402
import xtc.policer.store as used  # noqa: E402
assert used.__file__.startswith(BEFORE if code == "before" else "/work/wt/planarr"), used.__file__
t0 = time.time()
load0 = os.getloadavg()
res = run_fleet_bench(routers, 16, 0.1, duration, 100.0, samples=True, shards=1, jitter=jitter)
res.update(database="SQLite", code=code, load_average_before=load0, load_average_after=os.getloadavg(), started_unix_s=t0)
open(out, "w").write(json.dumps(res, indent=1))
print(json.dumps({k: res.get(k) for k in ("code", "routers", "measured_per_s", "engine_cpu_ms_per_measurement",
                                          "policy_cycle_ms", "rss_mb", "load_average_before", "load_average_after")}))
