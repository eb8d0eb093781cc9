"""A page of 100 VRs and of 100 routers in the API's process, without HTTP: the route's own call (the store's
listing with the engines' published live values, then the JSON), CPU ms per page, and its parts; 1,000 routers x
16 VRs in a SQLite file, their live values published as an engine publishes them (xtc.policer.liveshare).
Run with either product first on PYTHONPATH (pages.sh alternates them); prints one JSON line."""
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import xtc
from xtc.policer.api.routes import _json, _router_out
from xtc.policer.live import LiveTable
from xtc.policer.liveshare import LiveReader, LiveWriter, live_file_name
from xtc.policer.store import Store

R, V = 1000, 16
tmp = Path(tempfile.mkdtemp(prefix="xtc-pages-"))
s = Store(f"sqlite:///{tmp}/pages.db")
now = 1795800000.1234567  # fixed: the pages' bytes compare between runs (page_sha256)
with s.tx() as db:
    db.executemany("INSERT INTO routers (name, endpoint, capacity_pps, control_mode, status, created_unix_s,"
                   " last_seen_unix_s, control_on, demand_pps) VALUES (?,?,?,?,?,?,?,?,?)",
                   [(f"r{i:04d}", f"tcp://127.0.0.1:{10000 + i}", 100000.0, "auto", "reachable", now, now, 1, 5000.0)
                    for i in range(R)])
    db.executemany("INSERT INTO vrs (router, name, state, daemon_setpoint_pps, forwarded_pps, offered_pps, cap_percent,"
                   " last_seen_unix_s, derived_setpoint_pps, wanted_state, wanted_setpoint_pps) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   [(f"r{i:04d}", f"vr{j:02d}", "active", 1000.0 + j, 990.5, 1200.25, 33.3, now, 1000.0 + j, "active",
                     1000.0 + j) for i in range(R) for j in range(V)])
table = LiveTable(R * V)
for i in range(R):
    table.put(f"r{i:04d}", now, [f"vr{j:02d}" for j in range(V)], [1000.5 + j for j in range(V)], [1200.25] * V,
              [33.3] * V, ["cap_max"] * V)
    table.set_demand(f"r{i:04d}", 12345.0)
(tmp / "live").mkdir()
LiveWriter(tmp / "live" / live_file_name((0, 1)), fresh_for_s=1e9).publish(table, now)
s.live_source = LiveReader(tmp / "live")


def cpu_ms(fn, n=3000) -> float:
    fn()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return round(1000 * (time.process_time() - t0) / n, 4)


vrs = s.list_vrs(limit=100)
assert len(vrs) == 100 and vrs[0]["measured_from"] == "live"
print(json.dumps({
    "product": str(Path(xtc.__file__).parent), "load_1min": round(os.getloadavg()[0], 2),
    "vrs_page_ms": cpu_ms(lambda: _json(s.list_vrs(limit=100))),
    "routers_page_ms": cpu_ms(lambda: _json([_router_out(r) for r in s.list_routers(limit=100)])),
    "vrs_listing_ms": cpu_ms(lambda: s.list_vrs(limit=100)),
    "vrs_json_ms": cpu_ms(lambda: _json(vrs)),
    "page_sha256": {"vrs": hashlib.sha256(_json(s.list_vrs(limit=100)).body).hexdigest()[:16],
                    "routers": hashlib.sha256(_json([_router_out(r) for r in s.list_routers(limit=100)]).body).hexdigest()[:16]}}))
