"""CPU per router of the two steps this branch changed, in one process (no sockets, no database):
python micro.py > micro.json.  A sample message of 16 VRs whose rates moved (as --jitter 0.05 makes them):
decoded per VR (parse_samples, the old path) and into columns (decode_rows); 256 settled routers of 16 VRs
whose rates moved by 5%, default settings: planned per VR (plan_router, as the engine did for each) and
screened over the arrays (quiet_routers, one call for the batch).  The timing (cpu) is the lab's; the script as it ran held
it itself (git show 800351e:docs/results/2026-11-27-policer-engine-rows/micro.py)."""
import json, os, random, sys, time
sys.path.insert(0, "/work/wt/engine/tests/policer")
from dataclasses import replace
from xtc.daemon import api
from xtc_lab.policer_compare import cpu_s_per_call as cpu
from xtc.policer.link import DEFAULT_MAX_REPLY_BYTES
from xtc.policer.rows import decode_rows
from xtc.policer.samples import parse_samples
from xtc.policer.planner import Settings
from xtc.policer.quiet import quiet_routers
import test_policer_quiet as tq

rng = random.Random(1)
rows = [[f"vr{i}", "active", True, 50000.0, 40000.0 * (1 + rng.uniform(-.05, .05)), 60000.0 * (1 + rng.uniform(-.05, .05)),
         37.5, 40.0, None, None] for i in range(16)]
msg = api.samples_message(time.time(), 1.0, rows)
out = {"load_average_before": os.getloadavg()}
out["decode_us_per_message_of_16"] = {
    "parse_samples (per VR, before)": round(1e6 * cpu(lambda: parse_samples(msg, 4096), 5000), 1),
    "decode_rows (columns, after)": round(1e6 * cpu(lambda: decode_rows(msg, 4096, DEFAULT_MAX_REPLY_BYTES), 5000), 1),
    "of which the JSON decoding alone (json.loads, strict hooks)": round(1e6 * cpu(lambda: json.loads(
        msg[1], parse_constant=api.reject_json_constant, object_pairs_hook=api.unique_json_keys), 5000), 1),
    "message_bytes": len(msg[1])}
settings, fleet, now = tq._fleet(5, 256, Settings())
for rt in fleet:  # 16 VRs each, as the bench's fleet
    rt["rows"] = dict(list(rt["rows"].items())[:16])
args = [(rt["capacity_pps"], rt["control_mode"], rt["act"].on, rt["act"].pending_since_s, rt["rows"]) for rt in fleet]
q, _ = quiet_routers(settings, args, now)
out["plan_us_per_router"] = {
    "plan_router (per VR, before)": round(1e6 * cpu(lambda: [tq._plan(settings, rt, now) for rt in fleet], 5) / len(fleet), 1),
    "quiet_routers (arrays, batch of 256)": round(1e6 * cpu(lambda: quiet_routers(settings, args, now), 20) / len(fleet), 1),
    "found_quiet": int(q.sum()), "routers": len(fleet)}
out["load_average_after"] = os.getloadavg()
print(json.dumps(out, indent=1))
