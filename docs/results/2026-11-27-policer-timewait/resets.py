"""The link pool's resets and the TCP states toward 1,000 stand-in daemons on TCP, every 10 s for 70 s: an
in-process engine (SQLite, samples over the links), the fleet in a child process.  Output: resets.txt."""
import time, json, sys
from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool, tcp_states
from xtc.policer.samples import SampleStreams
from xtc.policer.store import Store
from xtc_lab.policer_fleet import fleet_process
import tempfile
with tempfile.TemporaryDirectory() as tmp, fleet_process(1000, 16, 0.1, transport="tcp") as (proc, rs):
    store = Store(f"sqlite:///{tmp}/p.db")
    for r in rs: store.add_router(r["name"], r["endpoint"], r["capacity_pps"], "on", None, "t", pub_endpoint=r["pub_endpoint"])
    pool = LinkPool(0.9); streams = SampleStreams(16, links=pool)
    eng = Engine(store, pool, period_s=1.0, samples=streams); eng.start()
    ep = {int(r["endpoint"].rsplit(":",1)[1]) for r in rs if r["mode"] != "dead"}
    pub = {int(r["pub_endpoint"].rsplit(":",1)[1]) for r in rs if r["mode"] != "dead"}
    for t in range(7):
        time.sleep(10)
        print(int(time.monotonic()), "ep", tcp_states(ep), "pub", tcp_states(pub), pool.stats(), flush=True)
    eng.stop(); streams.close(); pool.close(); store.close()
