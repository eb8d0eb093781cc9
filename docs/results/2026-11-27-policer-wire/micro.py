"""CPU of the steps this branch changed, in one process (no sockets, no database): python micro.py > micro.json.

A sample message of 16 VRs whose rates moved (as --jitter 0.05 makes them): decoded from xtc-samples/2
(decode_rows, the engine's path before) and from xtc-samples/3 (decode_v3: the first message of a router,
then one whose names and codes are the last one's, the common case); its size either way; and what the
daemon pays to build one period's message of 16 and of 10,000 VRs either way (samples_message: orjson;
samples_message_v3).  The timing (cpu) is the lab's; the script as it ran held
it itself (git show 4566092:docs/results/2026-11-27-policer-wire/micro.py)."""
import json, os, random, sys, time
from xtc.daemon import api
from xtc_lab.policer_compare import cpu_s_per_call as cpu
from xtc.policer.rows import decode_rows, decode_v3

def rows_of(n, rng):
    return [[f"vr{i:05d}", "active", True, 50000.0, 40000.0 * (1 + rng.uniform(-.05, .05)),
             60000.0 * (1 + rng.uniform(-.05, .05)), 37.5, None, None, None] for i in range(n)]

rng = random.Random(1)
rows = rows_of(16, rng)
m2 = api.samples_message(time.time(), 1.0, rows)
m3 = api.samples_message_v3(time.time(), 1.0, rows)
_, mem = decode_v3(m3, 4096, 1 << 20)
rows_b = rows_of(16, rng)  # the next period: the rates moved, the names and states are the same
m3b = api.samples_message_v3(time.time(), 1.0, rows_b)
out = {"load_average_before": os.getloadavg()}
out["decode_us_per_message_of_16"] = {
    "xtc-samples/2, decode_rows (before)": round(1e6 * cpu(lambda: decode_rows(m2, 4096, 1 << 20), 20000), 1),
    "xtc-samples/3, decode_v3, a router's first message": round(1e6 * cpu(lambda: decode_v3(m3, 4096, 1 << 20), 20000), 1),
    "xtc-samples/3, decode_v3, names and codes as the last message's": round(1e6 * cpu(lambda: decode_v3(m3b, 4096, 1 << 20, mem), 20000), 1),
    "message_bytes": {"xtc-samples/2": len(m2[1]), "xtc-samples/3": sum(map(len, m3[1:])),
                      "xtc-samples/3 frames": [len(f) for f in m3[1:]]}}
big = rows_of(10000, rng)
out["daemon_encode_ms_per_period"] = {
    "16 VRs, xtc-samples/2": round(1e3 * cpu(lambda: api.samples_message(1.0, 1.0, rows), 5000), 4),
    "16 VRs, xtc-samples/3": round(1e3 * cpu(lambda: api.samples_message_v3(1.0, 1.0, rows), 5000), 4),
    "10,000 VRs, xtc-samples/2": round(1e3 * cpu(lambda: api.samples_message(1.0, 1.0, big), 100), 3),
    "10,000 VRs, xtc-samples/3": round(1e3 * cpu(lambda: api.samples_message_v3(1.0, 1.0, big), 100), 3)}
out["load_average_after"] = os.getloadavg()
print(json.dumps(out, indent=1))
