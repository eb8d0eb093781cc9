"""The garbage collector's passes per thread and generation over a policer_profile run (gc.callbacks, thread CPU).
Debug aid of this session."""
import atexit
import collections
import gc
import json
import runpy
import sys
import threading
import time

acc = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
st = {}
def cb(phase, info):
    k = (threading.current_thread().name, info["generation"])
    if phase == "start":
        st[threading.get_ident()] = time.thread_time()
    else:
        t0 = st.pop(threading.get_ident(), None)
        if t0 is not None:
            a = acc[k]; a[0] += 1; a[1] += time.thread_time() - t0
gc.callbacks.append(cb)
def dump():
    print(json.dumps({f"{k[0]}/gen{k[1]}": (v[0], round(v[1]*1000, 1)) for k, v in sorted(acc.items())}), file=sys.stderr)
atexit.register(dump)
sys.argv = ["policer_profile"] + sys.argv[1:]
runpy.run_module("xtc_lab.policer_profile", run_name="__main__")
