"""The live values of a page, read value by value (xtc.policer.liveshare.LiveView): 112 VRs and 100 routers of a
publication of 1,000 routers x 16 VRs, CPU ms per page, without a profiler.  Run once with the product before
first on PYTHONPATH and once without: ``PYTHONPATH=/tmp/api-before python live_values.py before``."""
import time, tempfile, sys
from pathlib import Path
from xtc.policer.live import LiveTable
from xtc.policer.liveshare import LiveReader, LiveWriter, live_file_name
R, V = 1000, 16
now = time.time()
t = LiveTable(R * V)
for i in range(R):
    t.put(f"r{i:04d}", now, [f"vr{j:02d}" for j in range(V)], [1000.5 + j for j in range(V)], [1200.25] * V, [33.3] * V, ["cap_max"] * V)
    t.set_demand(f"r{i:04d}", 12345.0)
tmp = Path(tempfile.mkdtemp())
LiveWriter(tmp / live_file_name((0, 1)), fresh_for_s=3600).publish(t, now)
reader = LiveReader(tmp)
def cpu(fn, n=2000):
    fn(); t0 = time.process_time()
    for _ in range(n): fn()
    return 1000 * (time.process_time() - t0) / n
def page_vrs():
    v = reader.view()
    for i in range(7):
        for j in range(16):
            v.vr(f"r{i:04d}", f"vr{j:02d}")
names = [f"r{i:04d}" for i in range(100)]
def page_routers():
    v = reader.view()
    for r in names:
        v.seen_unix_s(r); v.demand_pps(r)
print(sys.argv[1], "vrs page", round(cpu(page_vrs), 4), "routers page", round(cpu(page_routers), 4))
