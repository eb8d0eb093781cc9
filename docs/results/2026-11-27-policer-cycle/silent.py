"""How many streams SampleStreams.older_than finds silent per call, and their silence (s), over a policer_profile
run; and how many routers probe_silent sent list.  Debug aid of this session."""
import atexit
import collections
import runpy
import sys

from xtc.policer import engine as em
from xtc.policer import samples as sm

stats = collections.Counter(); ages = []
f = sm.SampleStreams.older_than
def g(self, t):
    out = f(self, t)
    stats["calls"] += 1; stats["returned"] += len(out)
    now = self.clock()
    if out and len(ages) < 4000:
        ages.extend(round(now - a, 2) for _, a in out)
        stats["names"] += 0
    return out
sm.SampleStreams.older_than = g
pf = em.Engine.probe_silent
def p(self):
    n = pf(self); stats["probed"] += n; return n
em.Engine.probe_silent = p
def dump():
    print(dict(stats), "ages:", collections.Counter(round(a, 1) for a in ages).most_common(15), file=sys.stderr)
atexit.register(dump)
sys.argv = ["policer_profile"] + sys.argv[1:]
runpy.run_module("xtc_lab.policer_profile", run_name="__main__")
