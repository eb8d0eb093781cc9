"""The cycle thread's changes against main's own code, through ``Engine.run_cycle`` itself: seeded random fleets
whose routers are added, removed, registered again and changed (capacity, control mode, endpoint, samples
endpoint) by ANOTHER store between cycles (the API's, on the same SQLite file), and whose VRs appear, vanish,
lose their state, get manual setpoints and networks and move their rates every period; most routers are
measured from their samples (stand-in sample streams: the daemons' messages decoded as the streams decode
them), the others by ``list`` (in-process stand-in daemons: the requests and replies through the daemon's and
the policer's parsers).  The worker's queue is run here in its order, batch by batch, so that a run is
deterministic.  Printed per seed: the counts, and a digest of the requests sent (in order), the routers' and
VRs' rows, the audit log and the saved plans.  Run it with main exported by ``git archive`` first on
PYTHONPATH, then with this branch, PYTHONHASHSEED=0, and compare the lines."""

import hashlib
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from fakes.daemon import InProcessLinks
from xtc_lab.policer_fleet import FakeDaemon, FakeVr

import xtc
from xtc.daemon import api
from xtc.policer.engine import Engine
from xtc.policer.samples import parse_newer
from xtc.policer.store import Conflict, Store, StoreError


class Streams:
    """Stand-in sample streams: each router's newest message, decoded, put by :meth:`publish`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[float, Any]] = {}
        self._memory: dict[str, Any] = {}
        self.bad: dict[str, int] = {}
        self.wanted: dict[str, tuple] = {}

    def want(self, routers: dict[str, tuple]) -> None:
        with self._lock:
            self.wanted = dict(routers)
            for n in list(self._latest):
                if n not in routers:
                    del self._latest[n]

    def publish(self, name: str, rows: list[list[Any]], k: int) -> None:
        vrs, self._memory[name] = parse_newer(api.samples_message(1.7e9 + k, 1.0, rows), self._memory.get(name), 64)
        with self._lock:
            if name in self.wanted:
                self._latest[name] = (time.monotonic(), vrs)

    def latest(self, name: str) -> Any:
        with self._lock:
            return self._latest.get(name)

    def latest_all(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._latest)

    def older_than(self, t: float) -> list:
        return []

    def close(self) -> None:
        pass


def run(tmp: str, seed: int, periods: int) -> dict[str, Any]:
    rng = random.Random(seed)
    url = f"sqlite:///{tmp}/p-{seed}.db"
    store, other = Store(url, clock=lambda: 1.7e9), Store(url, clock=lambda: 1.7e9)
    for net in ("gold", "silver"):
        other.add_network(net, "", "test")
    other.set_sla("gold", {"min_pps": 5000.0, "max_pps": 90000.0, "weight": 2.0}, "test")
    daemons: dict[str, Any] = {}
    base: dict[tuple[str, str], float] = {}
    absent: set[tuple[str, str]] = set()
    serial = [0]

    def add_router() -> None:
        serial[0] += 1
        name = f"r{serial[0]:03d}"
        vrs = [FakeVr(f"vr{j:02d}", rng.uniform(2e4, 6e4)) for j in range(rng.randint(1, 16))]
        d = daemons[name] = FakeDaemon(name, f"tcp://127.0.0.1:{20000 + serial[0]}", "ok", vrs)
        for v in vrs:
            base[name, v.name] = v.offered_pps
        other.add_router(name, d.endpoint, sum(v.offered_pps for v in vrs) / rng.choice([0.8, 1.1, 2.0]),
                         rng.choice(["auto", "auto", "on"]), None, "test",
                         pub_endpoint=f"tcp://127.0.0.1:{30000 + serial[0]}" if rng.random() < 0.8 else None)

    for _ in range(12):
        add_router()
    links = InProcessLinks(daemons)
    streams = Streams()
    mono = [1000.0]
    eng = Engine(store, links, clock=lambda: mono[0], samples=streams, sample_max_age_s=1e6)  # type: ignore[arg-type]
    eng._ensure_worker = lambda: None  # type: ignore[method-assign]
    plans: list[Any] = []
    save = store.save_plans

    def save_plans(batch: list[tuple]) -> None:
        plans.append([(r, a, d, {n: dict(v) for n, v in per_vr.items()}, ev) for r, a, d, per_vr, ev in batch])
        save(batch)

    store.save_plans = save_plans  # type: ignore[method-assign]

    def work() -> None:
        """The worker's loop, in this thread: its queue in order, a batch at a time."""
        while not eng._work.empty():
            items: list[Any] = []
            eng._take(items, eng._work.get_nowait()[2])
            busy = eng._handle_batch(items)
            for n in {eng._item_router(it) for it in items} - busy:
                eng._busy.pop(n, None)

    for k in range(periods):
        mono[0] += 1.0
        for (r, n), b in base.items():
            if r in daemons and n in daemons[r].vrs:
                daemons[r].vrs[n].offered_pps = round(b * (1 + 0.05 * (2 * rng.random() - 1)))
        for _ in range(rng.randint(0, 3)):  # the fleet changes, by the other store
            names = [r["name"] for r in other.list_routers(include_removed=False)]
            r = rng.choice(names)
            d = daemons[r]
            j = rng.randrange(13)
            v = rng.choice(list(d.vrs))
            try:
                if j == 0:  # a VR's traffic triples (punished) or falls back
                    base[r, v] *= rng.choice([3.0, 1 / 3])
                elif j == 1:  # a VR appears
                    n = f"vr{rng.randrange(16, 24)}"
                    d.vrs.setdefault(n, FakeVr(n, rng.uniform(2e4, 6e4)))
                    base.setdefault((r, n), d.vrs[n].offered_pps)
                elif j == 2 and len(d.vrs) > 1:  # a VR vanishes
                    del d.vrs[v]
                elif j == 3:  # a VR is listed as not present, or present again
                    absent.symmetric_difference_update({(r, v)})
                elif j == 4:  # the daemon lost a VR's state
                    d.vrs[v].state, d.vrs[v].setpoint_pps, d.vrs[v].held_pps = "inactive", None, None
                elif j == 5:
                    other.set_manual_setpoint(r, v, rng.choice([None, 15000.0, 40000.0]), "test")
                elif j == 6:
                    other.set_vr_network(r, v, rng.choice([None, "gold", "silver"]), "test")
                elif j == 7:
                    other.update_router(r, {"capacity_pps": rng.uniform(2e5, 8e5)}, "test")
                elif j == 8 and len(names) > 6:
                    other.remove_router(r, "test")
                elif j == 9:
                    other.update_router(r, {"control_mode": rng.choice(["auto", "on", "off"])}, "test")
                elif j == 10:
                    other.update_router(r, {"pub_endpoint": rng.choice([None, f"tcp://127.0.0.1:{40000 + k}"])}, "test")
                elif j == 11:  # a removed router registered again
                    gone = sorted({x["name"] for x in other.list_routers()} - set(names))
                    if gone:
                        g = rng.choice(gone)
                        other.add_router(g, daemons[g].endpoint, rng.uniform(2e5, 8e5), "auto", None, "test",
                                         pub_endpoint=f"tcp://127.0.0.1:{50000 + k}")
                else:
                    add_router()
            except (Conflict, StoreError):
                pass
        for name, d in daemons.items():  # this period's samples
            insts = [vr.instance() for vr in d.vrs.values()]
            for inst in insts:
                if (name, inst["vr"]) in absent:
                    inst["present"] = False
            rows = sorted(([inst.get(f) for f in api.SAMPLE_FIELDS] for inst in insts), key=lambda row: row[0])
            streams.publish(name, rows, k)
        eng.run_cycle()
        work()
    store.snapshot()
    names = [r["name"] for r in store.list_routers()]
    out = {"plans": plans, "sent": links.sent, "routers": store.list_routers(), "vrs": store.list_vrs(),
           "actions": store.list_actions(limit=1_000_000), "states": {n: store.router_state(n) for n in names},
           "counts": (eng.sampled, eng.listed, eng.planned, eng.plans_quiet, eng.plans_skipped)}
    store.close()
    other.close()
    return out


print("xtc from", Path(xtc.__file__).parent, file=sys.stderr)
for seed in range(1, 9):
    with tempfile.TemporaryDirectory() as tmp:
        out = run(tmp, seed, 40)
    digest = {k: hashlib.sha256(repr(out[k]).encode()).hexdigest()[:16]
              for k in ("plans", "sent", "routers", "vrs", "actions", "states")}
    print(seed, out["counts"], len(out["sent"]), len(out["actions"]), digest)
