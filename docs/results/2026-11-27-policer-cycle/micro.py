"""The engine's cycle thread alone: ``Engine.run_cycle``'s CPU (``time.thread_time``) per router, with
whichever ``xtc`` is first on PYTHONPATH.  1,000 routers (every one with a samples endpoint, a tenth
without a sample: those are sent ``list``), a SQLite store, a stand-in link pool that drops every
exchange and stand-in sample streams whose newest sample of a router is always fresh; no worker (the
queue is emptied and the routers' claims released after each cycle).  Prints the median and the range
of ``--cycles`` cycles' CPU per router, microseconds."""

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import xtc
from xtc.policer.engine import Engine
from xtc.policer.store import Store


class Links:
    timeout_s = 1.0

    def expect(self, n):
        return True

    def exchange_many(self, exchanges):
        pass

    def close(self):
        pass


class Samples:
    """The newest sample of every router but the tenth, the same VRs each time, made fresh before each cycle
    (:meth:`refresh`, not measured): ``latest`` and ``latest_all`` as the real streams' (a lock, a lookup)."""

    def __init__(self, names, vrs):
        self._lock = threading.Lock()
        self._names = [n for i, n in enumerate(names) if i % 10]
        self._vrs = vrs
        self._latest = {}
        self.bad = {}
        self.clock = time.monotonic

    def refresh(self):
        t = time.monotonic()
        with self._lock:
            self._latest = {n: (t, self._vrs) for n in self._names}

    def want(self, routers):
        with self._lock:
            self._wanted = dict(routers)

    def latest(self, name):
        with self._lock:
            return self._latest.get(name)

    def latest_all(self):
        with self._lock:
            return self._latest.copy()

    def older_than(self, t):
        return []

    def close(self):
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--routers", type=int, default=1000)
    p.add_argument("--cycles", type=int, default=60)
    a = p.parse_args()
    print("xtc from", Path(xtc.__file__).parent, file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/p.db")
        names = [f"r{i:05d}" for i in range(a.routers)]
        for n in names:
            store.add_router(n, f"tcp://127.0.0.1:{20000 + int(n[1:])}", 1e6, "auto", None, "t",
                             pub_endpoint=f"tcp://127.0.0.1:{40000 + int(n[1:])}")
        vrs = [{"vr": f"vr{j:02d}", "state": "active"} for j in range(16)]
        samples = Samples(names, vrs)
        eng = Engine(store, Links(), samples=samples)
        eng._ensure_worker = lambda: None
        for n in names:
            eng._st(n).vr_set = frozenset(v["vr"] for v in vrs)
        per = []
        for k in range(a.cycles + 3):
            samples.refresh()
            t = time.thread_time()
            eng.run_cycle()
            dt = time.thread_time() - t
            if k >= 3:
                per.append(dt / a.routers * 1e6)
            while not eng._work.empty():
                eng._work.get_nowait()
            eng._busy.clear()
        print(f"run_cycle CPU per router: median {statistics.median(per):.2f} us, "
              f"min {min(per):.2f}, max {max(per):.2f} ({a.cycles} cycles; sampled {eng.sampled}, listed {eng.listed})")
        store.close()


main()
