"""A seeded fleet policed by a real :class:`~xtc.policer.engine.Engine` over in-process links, for the
equivalence tests: two runs that must decide, send, store and audit the same (two sample formats, the
quiet screen's arrays on and off)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from fakes.daemon import InProcessLinks
from xtc_lab.policer_fleet import FakeDaemon, FakeVr

from xtc.daemon import api
from xtc.policer.engine import Engine
from xtc.policer.samples import parse_newer
from xtc.policer.store import Store

#: Decodes one router's rows at period ``k`` into what the engine is handed: ``(rows, k, memory) -> (vrs,
#: memory)``, ``memory`` the router's decoder memory from its previous message (None at first).
Decode = Callable[[list[list[Any]], int, Any], tuple[Any, Any]]


def json_samples(rows: list[list[Any]], k: int, memory: Any) -> tuple[Any, Any]:
    """The rows as ``xtc-samples/2``, decoded as the sample streams decode them."""
    return parse_newer(api.samples_message(1.7e9 + k, 1.0, rows), memory, 64)


def run_engine(tmp_path: Any, tag: str, periods: int, decode: Decode = json_samples,
               same_every: int = 0) -> tuple[Store, Engine, InProcessLinks]:
    """Twenty routers of 16 VRs whose offered rates move by 5% every period (every ``same_every``-th
    period, when set, the same rates again: a message equal but for its time; now and then one VR's
    triples, or falls back), measured from their samples through ``decode`` (each router's decoder
    memory kept, as the streams keep it) and planned by an engine; returns its store, engine and links."""
    rng = random.Random(11)
    store = Store(f"sqlite:///{tmp_path}/{tag}.db", clock=lambda: 1.7e9)
    daemons = {}
    for i in range(20):
        vrs = [FakeVr(f"vr{j:02d}", rng.uniform(2e4, 6e4)) for j in range(16)]
        d = daemons[f"r{i:02d}"] = FakeDaemon(f"r{i:02d}", f"tcp://127.0.0.1:{20000 + i}", "ok", vrs)
        store.add_router(d.name, d.endpoint, sum(v.offered_pps for v in vrs) / rng.choice([0.8, 1.1, 2.0]),
                         rng.choice(["auto", "auto", "on"]), None, "test")
    base = {(r, n): v.offered_pps for r, d in daemons.items() for n, v in d.vrs.items()}
    links = InProcessLinks(daemons)
    mono = [1000.0]
    eng = Engine(store, links, clock=lambda: mono[0])  # type: ignore[arg-type]
    memory: dict[str, Any] = {}
    for k in range(periods):
        mono[0] += 1.0
        if not (same_every and k % same_every == same_every - 1):
            for (r, n), b in base.items():
                daemons[r].vrs[n].offered_pps = round(b * (1 + 0.05 * (2 * rng.random() - 1)))
        if k % 7 == 3:
            r, n = rng.choice(list(base))
            base[r, n] *= rng.choice([3.0, 1 / 3])
        settings = store.settings()
        items = []
        for r in store.engine_routers():
            d = daemons[r["name"]]
            rows = sorted(([inst.get(f) for f in api.SAMPLE_FIELDS] for inst in (v.instance() for v in d.vrs.values())),
                          key=lambda row: row[0])
            vrs, memory[d.name] = decode(rows, k, memory.get(d.name))
            items.append(("samples", r, settings, mono[0], vrs, 0.0))
        eng._handle_batch(items)
        while not eng._work.empty():  # the commands' replies
            eng._handle_batch([eng._work.get_nowait()[2]])
    store.snapshot()
    return store, eng, links
