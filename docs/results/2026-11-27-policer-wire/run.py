"""One fleet bench run: python run.py before|after sqlite|pg ROUTERS DURATION OUT.json [JITTER]

"before" is the branch point (aaca391) exported to /tmp/wire3-before and first on the path (of this process
and of the policer and fleet it starts); both sides use this branch's bench and stand-in fleet, so the load is
the same (the fleet serves xtc-samples/3 only to a policer that asks for it: "after")."""
import importlib.util, json, os, subprocess, sys, time
code, db, routers, duration, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
jitter = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
BEFORE = "/tmp/wire3-before"
if code == "before":
    os.environ["PYTHONPATH"] = BEFORE
    sys.path[:0] = [BEFORE]
spec = importlib.util.spec_from_file_location("pgb", "/work/wt/wire3/lab/xtc_lab/policer_bench.py")
pgb = importlib.util.module_from_spec(spec); spec.loader.exec_module(pgb)
from xtc_lab.policer_bench import run_fleet_bench
import xtc.policer.store as used
assert used.__file__.startswith(BEFORE if code == "before" else "/work/wt/wire3"), used.__file__
def run():
    return run_fleet_bench(routers, 16, 0.1, duration, 100.0, samples=True, shards=1, jitter=jitter)
t0 = time.time()
up0 = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
if db == "pg":
    with pgb.PgServer() as pg:
        os.environ["XTC_POLICER_DB_URL"] = pg.new_database()
        res = run(); res["database"] = f"PostgreSQL {pg.version} (fsync on)"
else:
    res = run(); res["database"] = "SQLite"
res["code"] = code
res["uptime_before"] = up0
res["load_average_after"] = os.getloadavg()
res["started_unix_s"] = t0
res["uptime"] = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
open(out, "w").write(json.dumps(res, indent=1))
print(json.dumps({k: res.get(k) for k in ("code", "database", "routers", "measured_per_s", "engine_cpu_ms_per_measurement", "database_cpu_ms_per_measurement", "policy_cycle_ms", "rss_mb", "warmup_s", "uptime")}))
