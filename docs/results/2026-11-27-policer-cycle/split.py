"""The CPU each engine function costs its thread (time.thread_time around each call), over a policer_profile run: the
cycle thread split.  Debug aid of this session, not a product tool."""
import atexit
import collections
import json
import runpy
import sys
import time

from xtc.policer import engine as em

acc = collections.defaultdict(lambda: [0, 0.0])
def wrap(cls, name):
    f = getattr(cls, name)
    def g(*a, **k):
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            x = acc[name]; x[0] += 1; x[1] += time.thread_time() - t
    setattr(cls, name, g)
for n in ("run_cycle", "contact_new", "probe_silent"):
    wrap(em.Engine, n)
from xtc.policer import store as sm

wrap(sm.Store, "engine_routers"); wrap(sm.Store, "settings"); wrap(sm.Store, "keep_states")
from xtc.policer import link as lm

wrap(lm.LinkPool, "exchange_many")
from xtc.policer import samples as smp

if hasattr(smp.SampleStreams, "latest_all"): wrap(smp.SampleStreams, "latest_all")
wrap(smp.SampleStreams, "older_than")
tt = {}
orig_run = em.Engine._run
def run(self):
    try:
        orig_run(self)
    finally:
        tt["engine_thread_cpu"] = time.thread_time()
em.Engine._run = run
def dump():
    print(json.dumps({k: (v[0], round(v[1]*1000, 1)) for k, v in sorted(acc.items())} | tt), file=sys.stderr)
atexit.register(dump)
sys.argv = ["policer_profile"] + sys.argv[1:]
runpy.run_module("xtc_lab.policer_profile", run_name="__main__")
