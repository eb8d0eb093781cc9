"""The engine's router list, kept between cycles (issue 50): :meth:`Store.engine_routers` reads the routers again
only when the router generation (``meta.routers_gen``, moved by triggers in the writer's transaction) moved, and
the engine remakes what it derives from the list (its shard's routers, the links' and the streams' expectations)
only when the list is another.  A kept list must never be stale: a router added, removed, registered again or
changed (endpoints, key, capacity, control mode) by another store, another process or plain SQL between two
cycles is what the next cycle works with, on both databases; the engine's own writes (status, measurements,
plans) do not move the generation."""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

from fakes.daemon import InProcessLinks
from xtc_lab.policer_fleet import FakeDaemon, FakeVr

from xtc.policer.engine import Engine
from xtc.policer.samples import SampleStreams
from xtc.policer.store import ExchangeOutcome, Store

_COLS = "name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint"


def _fresh(store: Store) -> list[dict[str, Any]]:
    """The routers as the database holds them now, read without any cache."""
    rows = store.db.read(f"SELECT {_COLS} FROM routers WHERE status != 'removed' ORDER BY name", tuples=True)
    return [dict(zip(_COLS.split(", "), r)) for r in rows]


def _add_in_another_process(url: str, name: str) -> None:
    s = Store(url)
    try:
        s.add_router(name, "tcp://127.0.0.1:7", 5000.0, "on", None, "other-process")
    finally:
        s.close()


def test_the_list_is_read_again_when_another_writer_changed_it_and_only_then(db_url: str) -> None:
    engine_side, api_side = Store(db_url), Store(db_url)  # two stores: two connections (pools), as two processes
    try:
        assert engine_side.engine_routers() == [] and engine_side.engine_routers_reads == 1
        api_side.add_router("b", "tcp://127.0.0.1:2", 2000.0, "auto", None, "t", pub_endpoint="tcp://127.0.0.1:3")
        got = engine_side.engine_routers()
        assert got == _fresh(api_side) and [r["name"] for r in got] == ["b"]
        assert engine_side.engine_routers() is got and engine_side.engine_routers_reads == 2  # unchanged: kept
        changes: list[tuple[str, Any]] = [
            ("add", ("a", "tcp://127.0.0.1:1", 1000.0, "on", "k" * 40)),
            ("update", ("a", {"endpoint": "tcp://127.0.0.1:9"})),
            ("update", ("a", {"capacity_pps": 1500.0})),
            ("update", ("a", {"control_mode": "off"})),
            ("update", ("a", {"curve_server_key": None})),
            ("update", ("b", {"pub_endpoint": None})),
            ("update", ("b", {"pub_endpoint": "tcp://127.0.0.1:4"})),
            ("remove", "a"),
            ("add", ("a", "tcp://127.0.0.1:5", 900.0, "auto", None)),  # registered again
            ("sql", "UPDATE routers SET capacity_pps = capacity_pps * 2 WHERE name = 'b'"),
            ("sql", "UPDATE routers SET status = 'removed' WHERE name = 'b'"),
            ("sql", "UPDATE routers SET status = 'unreachable' WHERE name = 'b'"),  # back from removed by hand
            ("sql", ("INSERT INTO routers (name, endpoint, capacity_pps, control_mode, created_unix_s)"
                     " VALUES ('c', 'tcp://127.0.0.1:8', 1.0, 'auto', 0)")),
            ("sql", "DELETE FROM routers WHERE name = 'c'"),
        ]
        for kind, what in changes:
            before = engine_side.engine_routers()
            if kind == "add":
                api_side.add_router(*what, "t")
            elif kind == "update":
                api_side.update_router(*what, "t")
            elif kind == "remove":
                api_side.remove_router(what, "t")
            else:
                with api_side.tx() as db:
                    db.execute(what)
            got = engine_side.engine_routers()
            assert got == _fresh(api_side), (kind, what)
            assert got is not before, (kind, what)
        # Another process's registration: seen by the next read.
        p = multiprocessing.get_context("spawn").Process(target=_add_in_another_process, args=(db_url, "d"))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        assert "d" in [r["name"] for r in engine_side.engine_routers()] and engine_side.engine_routers() == _fresh(api_side)
        # The engine's own writes (a router's status, its VRs, its measurements) do not move the generation.
        kept, reads, gen = engine_side.engine_routers(), engine_side.engine_routers_reads, engine_side.routers_generation()
        vr = {"vr": "v0", "state": "active", "forwarded_pps": 10.0, "offered_pps": 10.0}
        for status in ("reachable", "unreachable", "reachable"):
            engine_side.record_outcomes([ExchangeOutcome(n, status, None if status == "reachable" else "down",
                                                         vrs=[vr] if status == "reachable" else None)
                                         for n in ("a", "b", "d")])
        engine_side.snapshot()
        api_side.set_manual_setpoint("a", "v0", 5.0, "t")  # a VR's row: not the router list
        assert engine_side.routers_generation() == gen
        assert engine_side.engine_routers() is kept and engine_side.engine_routers_reads == reads
    finally:
        engine_side.close()
        api_side.close()


def test_random_changes_by_another_store_are_never_missed(db_url: str) -> None:
    """Property: after any sequence of changes by another store (registrations, removals, updates of every
    column the engine reads, status changes, plain SQL), the kept list is the database's."""
    engine_side, api_side = Store(db_url), Store(db_url)
    rng = random.Random(5)
    try:
        for step in range(120):
            names = [r["name"] for r in api_side.list_routers()]
            live = [r["name"] for r in api_side.list_routers(include_removed=False)]
            j = rng.randrange(6)
            if j == 0 or not live:
                name = f"r{rng.randrange(12):02d}"
                if name not in live:
                    api_side.add_router(name, f"tcp://127.0.0.1:{rng.randrange(1, 9)}", rng.choice([1e3, 2e3]),
                                        rng.choice(["auto", "on", "off"]), rng.choice([None, "k" * 40]), "t",
                                        pub_endpoint=rng.choice([None, "tcp://127.0.0.1:9"]))
            elif j == 1:
                api_side.remove_router(rng.choice(live), "t")
            elif j == 2:
                col, vals = rng.choice([("endpoint", ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]),
                                        ("capacity_pps", [1e3, 3e3]), ("control_mode", ["auto", "on", "off"]),
                                        ("curve_server_key", [None, "k" * 40]),
                                        ("pub_endpoint", [None, "tcp://127.0.0.1:9"])])
                api_side.update_router(rng.choice(live), {col: rng.choice(vals)}, "t")
            elif j == 3:
                api_side.record_outcomes([ExchangeOutcome(rng.choice(live), rng.choice(["reachable", "unreachable"]),
                                                          None)])
            elif j == 4 and names:
                with api_side.tx() as db:
                    db.execute("UPDATE routers SET capacity_pps = ? WHERE name = ?", (rng.choice([7.0, 8.0]),
                                                                                     rng.choice(names)))
            if rng.random() < 0.7:  # now and then two changes between two reads
                assert engine_side.engine_routers() == _fresh(api_side), step
        assert engine_side.engine_routers_reads < 120
    finally:
        engine_side.close()
        api_side.close()


class _Recorder(InProcessLinks):
    """In-process links that also record each ``list`` exchange's (router, endpoint, key) and the links'
    expectations."""

    def __init__(self, daemons: dict[str, Any]):
        super().__init__(daemons)
        self.to: list[tuple[str, str, str | None]] = []
        self.expected: list[int] = []

    def expect(self, n: int) -> None:
        self.expected.append(n)

    def exchange_many(self, exchanges: list[tuple]) -> None:
        self.to.extend((e[0], e[1], e[2]) for e in exchanges if e[3] == [{"cmd": "list"}])
        super().exchange_many(exchanges)


def test_each_cycle_works_with_the_routers_as_another_store_left_them(tmp_path: Any) -> None:
    """The engine's cycles, with routers added, removed, registered again and changed by another store (the
    API's process) between them: every cycle sends to exactly the registered routers at their endpoints and
    keys as they are now, plans with their capacity and control mode as they are now, subscribes to their
    streams as they are now, and forgets the removed ones."""
    url = f"sqlite:///{tmp_path}/p.db"
    store, api = Store(url), Store(url)
    daemons = {f"r{i}": FakeDaemon(f"r{i}", f"tcp://127.0.0.1:{20000 + i}", "ok", [FakeVr("vr00", 3e4)])
               for i in range(4)}
    for n in ("r0", "r1"):
        api.add_router(n, daemons[n].endpoint, 1e5, "on", None, "t")
    links = _Recorder(daemons)
    streams = SampleStreams(max_vrs=8)
    wanted: list[dict[str, tuple]] = []
    want = streams.want
    streams.want = lambda routers: (wanted.append(dict(routers)), want(routers))[1]  # type: ignore[method-assign]
    planned: list[tuple[str, float, str]] = []
    handle = Engine._handle_batch

    def recording(self: Engine, items: list[tuple]) -> set[str]:
        planned.extend((it[1]["name"], it[1]["capacity_pps"], it[1]["control_mode"]) for it in items
                       if it[0] in ("list", "samples"))
        return handle(self, items)

    mono = [1000.0]
    eng = Engine(store, links, clock=lambda: mono[0], samples=streams)  # type: ignore[arg-type]
    eng._handle_batch = recording.__get__(eng)  # type: ignore[method-assign]

    def cycle() -> None:
        mono[0] += 1.0
        links.to.clear()
        planned.clear()
        eng.run_cycle(wait=True)
        assert eng.error is None

    def registered() -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in _fresh(api)}

    try:
        for k in range(12):
            if k == 2:
                api.add_router("r2", daemons["r2"].endpoint, 2e5, "auto", None, "t", pub_endpoint="tcp://127.0.0.1:1")
            elif k == 3:
                api.update_router("r0", {"capacity_pps": 3e5, "control_mode": "off"}, "t")
            elif k == 4:
                api.update_router("r1", {"endpoint": "tcp://127.0.0.1:29999", "curve_server_key": "k" * 40}, "t")
            elif k == 5:
                api.remove_router("r2", "t")
            elif k == 6:
                api.add_router("r2", daemons["r2"].endpoint, 4e5, "on", None, "t")  # registered again, no stream
            elif k == 7:
                api.update_router("r1", {"endpoint": daemons["r1"].endpoint, "curve_server_key": None}, "t")
            elif k == 8:
                with api.tx() as db:  # plain SQL, as an operator might
                    db.execute("UPDATE routers SET capacity_pps = 6e5 WHERE name = 'r0'")
            elif k == 9:
                api.add_router("r3", daemons["r3"].endpoint, 1e5, "on", None, "t", pub_endpoint="tcp://127.0.0.1:2")
            elif k == 10:
                api.remove_router("r0", "t")
            cycle()
            now = registered()
            # Every registered router measured, at its endpoint and key as they are now, and no other.
            assert sorted(links.to) == sorted((n, r["endpoint"], r["curve_server_key"]) for n, r in now.items()), k
            assert sorted(planned) == sorted((n, r["capacity_pps"], r["control_mode"]) for n, r in now.items()), k
            assert links.expected[-1] == len({(r["endpoint"], r["curve_server_key"]) for r in now.values()})
            assert wanted[-1] == {n: (r["pub_endpoint"], r["curve_server_key"], r["endpoint"])
                                  for n, r in now.items() if r["pub_endpoint"]}, k
            assert set(eng._state) <= set(now) and set(eng._cycle_names) == set(now), k
        # Unchanged between the last cycles: the list was not read again, nor the streams told again.
        reads, n_wanted = store.engine_routers_reads, len(wanted)
        cycle()
        cycle()
        assert store.engine_routers_reads == reads and len(wanted) == n_wanted
    finally:
        eng.stop()
        store.close()
        api.close()


def test_a_router_registered_between_cycles_is_contacted_and_otherwise_no_router_is_read(tmp_path: Any) -> None:
    """:meth:`Engine.contact_new` between cycles: while the router generation has not moved since the routers were
    last read, it reads no router (before: every never-heard router, ten times a period); a router registered by
    another store is contacted at its next call, once."""
    url = f"sqlite:///{tmp_path}/p.db"
    store, api = Store(url), Store(url)
    daemons = {n: FakeDaemon(n, f"tcp://127.0.0.1:{20000 + i}", "ok", [FakeVr("vr00", 3e4)])
               for i, n in enumerate(("a", "b", "c"))}
    api.add_router("a", daemons["a"].endpoint, 1e5, "on", None, "t")
    api.add_router("dead", "tcp://127.0.0.1:1", 1e5, "on", None, "t")  # never heard from: status unknown
    links = _Recorder({**daemons, "dead": FakeDaemon("dead", "tcp://127.0.0.1:1", "ok", [])})
    eng = Engine(store, links, clock=lambda: 1000.0)  # type: ignore[arg-type]
    heard: list[bool] = []
    engine_routers = store.engine_routers

    def counting(never_heard: bool = False) -> list[dict[str, Any]]:
        heard.append(never_heard)
        return engine_routers(never_heard)

    store.engine_routers = counting  # type: ignore[method-assign]
    try:
        eng.run_cycle(wait=True)
        with store.tx() as db:  # 'dead' stays never heard from
            db.execute("UPDATE routers SET status = 'unknown' WHERE name = 'dead'")
        heard.clear()
        for _ in range(5):
            assert eng.contact_new() == 0
        assert True not in heard
        api.add_router("b", daemons["b"].endpoint, 1e5, "on", None, "t")
        links.to.clear()
        assert eng.contact_new() == 1 and [t[0] for t in links.to] == ["b"]
        deadline = time.monotonic() + 10
        while eng._busy and time.monotonic() < deadline:
            time.sleep(0.01)
        heard.clear()
        assert eng.contact_new() == 0 and eng.contact_new() == 0
        assert heard.count(True) == 0
        # Registered again after a removal, between two cycles: contacted once more.
        api.remove_router("b", "t")
        eng.run_cycle(wait=True)
        api.add_router("b", daemons["b"].endpoint, 1e5, "on", None, "t")
        links.to.clear()
        assert eng.contact_new() == 1 and [t[0] for t in links.to] == ["b"]
        assert eng.first_contacts == 2
    finally:
        eng.stop()
        store.close()
        api.close()


def test_silent_streams_are_found_as_by_a_scan_of_every_stream() -> None:
    """:meth:`SampleStreams.older_than` stops at the first stream not silent (the samples kept in the order of
    arrival): the same streams as a scan of all, with the clock going forward, and after it went back."""
    t = [100.0]
    streams = SampleStreams(max_vrs=8, clock=lambda: t[0])
    rng = random.Random(3)
    try:
        for step in range(400):
            t[0] += rng.choice([0.0, 0.01, 0.2]) if step != 300 else -5.0  # once, a clock that goes back
            with streams._lock:
                streams._put_latest(f"r{rng.randrange(30)}", [])
            cut = t[0] - rng.choice([0.0, 0.1, 0.5, 2.0])
            with streams._lock:
                scan = {(n, v[0]) for n, v in streams._latest.items() if v[0] < cut}
            got = streams.older_than(cut)
            assert set(got) == scan and len(got) == len(scan), step
    finally:
        streams.close()


def test_a_cycle_waits_for_its_own_claims_only(tmp_path: Any) -> None:
    """The claims of a cycle (one token for the cycle, taken under one lock) and ``wait``: the cycle returns when
    each router it claimed was handled; a router claimed between cycles (its own token) is neither claimed by
    the cycle nor waited for."""
    url = f"sqlite:///{tmp_path}/p.db"
    store = Store(url)
    daemons = {f"r{i}": FakeDaemon(f"r{i}", f"tcp://127.0.0.1:{20000 + i}", "ok", [FakeVr("vr00", 3e4)])
               for i in range(3)}
    for n, d in daemons.items():
        store.add_router(n, d.endpoint, 1e5, "on", None, "t")
    eng = Engine(store, InProcessLinks(daemons), clock=lambda: 1000.0)  # type: ignore[arg-type]
    try:
        token = eng._claim("r2", 1000.0)  # busy from between cycles: not this cycle's
        assert token is not None
        eng.run_cycle(wait=True)  # returns: r0 and r1 handled, r2 not claimed by it
        assert eng.listed == 2 and eng._busy == {"r2": token}
    finally:
        eng._busy.clear()
        eng.stop()
        store.close()
