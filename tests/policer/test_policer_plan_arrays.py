"""The plan inputs in arrays (issue 50): the engine that keeps a sample's measurements in the live table
alone (no copy of a VR's row), screens the columns kept with each router's rows and plans the others from
a view over the table plans, sends, writes and audits exactly what the engine of per-VR dictionaries did.

The old path is rebuilt here from the same code: every moved measurement copied into the kept rows
(``_measurements_moved`` without the live names), so that the kept rows read by
:meth:`Store.plan_states` (the old ``router_states``, renamed) hold the live measurements, the screen over those dictionaries (:func:`quiet_routers`), a fixed point
compared without the live table.  Both run on seeded random fleets through in-process stand-in daemons
(a fake of the transport only: the requests and replies go through the daemon's and the policer's
parsers): routers added and removed, VRs appearing and vanishing, a daemon losing a VR's state, manual
setpoints and SLAs changing, every rate moving every period, VRs tripling their traffic (punishments),
some routers measured by ``list``, samples listing the VRs in another order."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from fakes.daemon import InProcessLinks

import xtc.policer.engine as engine_mod
import xtc.policer.store as store_mod
from xtc.policer.quiet import quiet_routers
from xtc.policer.store import Conflict, Store, StoreError


def _old_quiet_demands(todo: list[tuple], live: Any) -> dict[str, float]:
    """The screen over the per-VR dictionaries, as the engine ran it before the arrays."""
    groups: dict[int, list[tuple]] = {}
    for t in todo:
        groups.setdefault(id(t[1]), []).append(t)
    out: dict[str, float] = {}
    for group in groups.values():
        quiet, demand = quiet_routers(group[0][1], [(t[0]["capacity_pps"], t[0]["control_mode"], t[4].on,
                                                     t[4].pending_since_s, t[5]) for t in group],
                                      [t[2] for t in group])
        for t, q, d in zip(group, quiet.tolist(), demand.tolist()):
            if q:
                out[t[0]["name"]] = d
    return out


def _run(tmp_path: Any, tag: str, seed: int, periods: int) -> dict[str, Any]:
    """A seeded random fleet policed for ``periods`` periods; what the engine planned, sent, wrote and audited."""
    from xtc_lab.policer_fleet import FakeDaemon, FakeVr

    from xtc.daemon import api
    from xtc.daemon.api import API_VERSION
    from xtc.policer.engine import Engine
    from xtc.policer.link import parse_reply
    from xtc.policer.samples import parse_newer

    rng = random.Random(seed)
    store = Store(f"sqlite:///{tmp_path}/{tag}-{seed}.db", clock=lambda: 1.7e9)
    for net in ("gold", "silver"):
        store.add_network(net, "", "test")
    store.set_sla("gold", {"min_pps": 5000.0, "max_pps": 90000.0, "weight": 2.0}, "test")
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
        store.add_router(name, d.endpoint, sum(v.offered_pps for v in vrs) / rng.choice([0.8, 1.1, 2.0]),
                         rng.choice(["auto", "auto", "on"]), None, "test")

    for _ in range(12):
        add_router()
    links = InProcessLinks(daemons)
    mono = [1000.0]
    eng = Engine(store, links, clock=lambda: mono[0])  # type: ignore[arg-type]
    plans: list[Any] = []
    save = store.save_plans

    def save_plans(batch: list[tuple]) -> None:
        plans.append([(r, a, d, {n: dict(v) for n, v in per_vr.items()}, ev) for r, a, d, per_vr, ev in batch])
        save(batch)

    store.save_plans = save_plans  # type: ignore[method-assign]
    for k in range(periods):
        mono[0] += 1.0
        for (r, n), b in base.items():
            if r in daemons and n in daemons[r].vrs:
                daemons[r].vrs[n].offered_pps = round(b * (1 + 0.05 * (2 * rng.random() - 1)))
        for _ in range(rng.randint(0, 3)):  # the fleet changes
            names = [r for r in daemons if store.get_router(r)["status"] != "removed"]
            r = rng.choice(names)
            d = daemons[r]
            j = rng.randrange(10)
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
                    store.set_manual_setpoint(r, v, rng.choice([None, 15000.0, 40000.0]), "test")
                elif j == 6:
                    store.set_vr_network(r, v, rng.choice([None, "gold", "silver"]), "test")
                elif j == 7:
                    store.update_router(r, {"capacity_pps": rng.uniform(2e5, 8e5)}, "test")
                elif j == 8 and len(names) > 6:
                    store.remove_router(r, "test")
                else:
                    add_router()
            except (Conflict, StoreError):
                pass
        settings = store.settings()
        items = []
        for r in store.engine_routers():
            d = daemons[r["name"]]
            insts = [v.instance() for v in d.vrs.values()]
            for inst in insts:
                if (r["name"], inst["vr"]) in absent:
                    inst["present"] = False
            if rng.random() < 0.1:  # measured by 'list'
                raw = d.handle(json.dumps({"v": API_VERSION, "cmd": "list", "id": 1}).encode())
                items.append(("list", r, settings, mono[0], [parse_reply(d.endpoint, raw)], 0.0))
                continue
            if rng.random() < 0.05:  # the VRs in another order
                rng.shuffle(insts)
            rows = [[inst.get(f) for f in api.SAMPLE_FIELDS] for inst in insts]
            vrs, _ = parse_newer(api.samples_message(1.7e9, 1.0, rows), None, 64)
            items.append(("samples", r, settings, mono[0], vrs, 0.0))
        rng.shuffle(items)
        for i in range(0, len(items), 5):  # batches
            eng._handle_batch(items[i:i + 5])
        while not eng._work.empty():  # the commands' replies
            eng._handle_batch([eng._work.get_nowait()[2]])
    store.snapshot()
    names = [r["name"] for r in store.list_routers()]
    out = {"plans": plans, "sent": links.sent, "routers": store.list_routers(), "vrs": store.list_vrs(),
           "actions": store.list_actions(limit=1_000_000), "states": {n: store.router_state(n) for n in names},
           "counts": (eng.planned, eng.plans_quiet, eng.plans_skipped)}
    store.close()
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_plan_inputs_in_arrays_plan_send_write_and_audit_what_the_dictionaries_did(
        tmp_path: Any, monkeypatch: Any, seed: int) -> None:
    moved = store_mod._measurements_moved
    copies = {"new": [0, 0], "old": [0, 0]}

    def counting(side: str, live: bool) -> Any:
        def f(rows: dict, c: Any, live_names: Any = None, last: Any = None) -> Any:
            got = moved(rows, c, live_names, last) if live else moved(rows, c)
            if got is not None:
                copies[side][got is rows] += 1
            return got
        return f

    monkeypatch.setattr(store_mod, "_measurements_moved", counting("new", True))
    new = _run(tmp_path, "new", seed, 30)
    monkeypatch.setattr(store_mod, "_measurements_moved", counting("old", False))
    monkeypatch.setattr(engine_mod, "_quiet_demands", _old_quiet_demands)
    monkeypatch.setattr(engine_mod, "_live_key", lambda live, name: None)
    monkeypatch.setattr(engine_mod, "_observed", lambda rows, live, name: {n: engine_mod._vr_obs(r) for n, r in rows.items()})
    old = _run(tmp_path, "old", seed, 30)
    # Not vacuous: the fleet was planned, punished, commanded, changed; most measurements only moved.
    planned, quiet, _ = new["counts"]
    assert planned > 200 and quiet > 0.4 * planned, new["counts"]
    kinds = {a["kind"] for a in new["actions"]}
    assert {"activate", "setpoint", "punish", "vr_appeared", "vr_vanished"} <= kinds, kinds
    assert len(new["sent"]) > 50
    # The new path copied rows only where a sample named other VRs than the live table (or in another order);
    # the old one copied them every time.
    assert copies["new"][0] < 0.15 * sum(copies["new"]) and copies["new"][1] > 100, copies
    assert copies["old"][0] > 0.5 * sum(copies["old"]), copies
    for key in ("plans", "sent", "routers", "vrs", "actions", "states", "counts"):
        assert new[key] == old[key], key
