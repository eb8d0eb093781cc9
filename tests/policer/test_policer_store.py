"""The store on both databases: the schema-1 file upgraded in place, several writing processes, leadership."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for

from xtc.policer.db import SCHEMA_VERSION, LeaderLock
from xtc.policer.policy import ActivationState
from xtc.policer.store import Conflict, NotLeader, ExchangeOutcome, Store, StoreError

DATA = Path(__file__).parent / "data"


def _tables(path: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("routers", "networks", "vrs", "actions", "settings")}
    finally:
        db.close()


def test_schema1_file_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "policer.db"
    db = sqlite3.connect(path)
    db.executescript((DATA / "policer-schema1.sql").read_text())
    db.close()
    before = _tables(path)
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    store = Store(f"sqlite:///{path}")
    store.close()
    assert SCHEMA_VERSION == 8
    # Every row as it was (a VR has one new column, the daemon's saturated flag, still null, a
    # router two, its samples endpoint, null, and its revision, 0, and a network one, its VR-off
    # switch, 0: off), the version recorded, the new indexes and leadership rows there.
    after = _tables(path)
    assert all(row[-1] is None for row in after["vrs"]) and all(row[-2:] == (None, 0) for row in after["routers"])
    assert all(row[-1] == 0 for row in after["networks"])
    assert {**after, "vrs": [row[:-1] for row in after["vrs"]], "routers": [row[:-2] for row in after["routers"]],
            "networks": [row[:-1] for row in after["networks"]]} == before
    raw = sqlite3.connect(path)
    meta = dict(raw.execute("SELECT key, value FROM meta").fetchall())
    # 8: the router generation (moved by triggers; the upgrade itself changes no router).
    assert meta == {"schema_version": "8", "leader_epoch": "0", "leader": "", "routers_gen": "0"}
    triggers = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    assert triggers == {"routers_gen_insert", "routers_gen_delete", "routers_gen_update", "routers_gen_status"}
    # 6: the forwarded rate's column has the wire's name, its values kept.
    cols = [r[1] for r in raw.execute("PRAGMA table_info(vrs)")]
    assert "forwarded_pps" in cols and "measured_pps" not in cols
    idx = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"vrs_network", "routers_status", "actions_router", "actions_kind"} <= idx
    raw.close()
    # The store reads the old data through its API; opening again changes nothing.
    store = Store(f"sqlite:///{path}")
    assert [r["name"] for r in store.list_routers()] == ["r1", "r2"] and store.get_router("r2")["status"] == "removed"
    assert store.get_vr("r1", "a1")["network"] == "gold" and store.get_vr("r1", "a1")["setpoint_pps"] == 30000.5
    assert store.get_vr("r1", "a1")["forwarded_pps"] == 29990.25
    assert store.get_vr("r1", "a2")["manual_setpoint_pps"] == 12345.678
    assert store.get_network("gold")["sla"] == {"min_pps": 20000.0, "max_pps": 80000.0, "weight": 2.0}
    assert store.policies()["allocation"]["target_fraction"] == 0.85
    kinds = [a["kind"] for a in store.list_actions(limit=1000)]
    assert kinds[0] == "router_registered" and kinds[-1] == "router_removed" and len(kinds) == len(before["actions"])
    store.add_network("silver", "", "test")  # writable, ids continue
    assert store.list_actions(kind="network_created")[-1]["id"] == len(before["actions"]) + 1
    store.close()
    assert [row[:-2] for row in _tables(path)["routers"]] == before["routers"]


def test_the_saturated_flag_is_kept_and_nothing_else_is_taken(db_url: str) -> None:
    s = Store(db_url)
    s.add_router("r1", "tcp://127.0.0.1:1", 100_000.0, "auto", None, "test")
    s.record_poll("r1", [{"vr": "a", "state": "active", "forwarded_pps": 20_000.0, "saturated": "cap_max"},
                         {"vr": "b", "state": "active", "saturated": "bogus"}, {"vr": "c"},
                         {"vr": "d", "state": "active", "forwarded_pps": 20_000.0, "saturated": "cap_slack"}])
    assert [s.get_vr("r1", n)["saturated"] for n in "abcd"] == ["cap_max", None, None, "cap_slack"]
    s.record_poll("r1", [{"vr": "a", "state": "active", "forwarded_pps": 20_000.0}])
    assert s.get_vr("r1", "a")["saturated"] is None
    s.close()


def test_newer_schema_is_refused(db_url: str) -> None:
    s = Store(db_url)
    with s.tx() as db:
        db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    s.close()
    with pytest.raises(StoreError, match="schema version 99, newer"):
        Store(db_url)


def _writer(url: str, k: int, n: int, q: Any) -> None:
    s = Store(url)
    won = 0
    for i in range(n):
        s.add_router(f"w{k}-{i:03d}", "tcp://127.0.0.1:1", 1000.0, "auto", None, f"writer{k}")
        s.set_policy("allocation", {"enabled": True, "target_fraction": 0.5 + k / 100}, f"writer{k}")
        try:  # every writer races for the same names: one wins each
            s.add_router(f"dup-{i:03d}", "tcp://127.0.0.1:2", 1000.0, "auto", None, f"writer{k}")
            won += 1
        except Conflict:
            pass
    s.close()
    q.put(won)


def test_several_processes_write_at_once(db_url: str) -> None:
    # Four processes open the new database at once: it is migrated once (the migration's lock), then
    # they all write.
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(db_url, k, 40, q)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sum(q.get(timeout=5) for _ in procs) == 40  # each duplicate registered exactly once
    s = Store(db_url)
    routers = s.list_routers()
    assert len(routers) == 4 * 40 + 40
    acts = s.list_actions(limit=10000)
    assert len(acts) == 4 * 40 * 2 + 40 and len({a["id"] for a in acts}) == len(acts)
    assert [a["id"] for a in acts] == sorted(a["id"] for a in acts)
    s.close()


def test_leadership_epochs_fence_the_old_leader(db_url: str) -> None:
    a, b = Store(db_url), Store(db_url)
    a.add_router("r", "tcp://127.0.0.1:1", 1000.0, "auto", None, "t")
    assert a.take_leadership("hostA:1") == 1
    a.save_plan("r", ActivationState(True, None), 10.0, {}, [])
    assert b.take_leadership("hostB:2") == 2
    with pytest.raises(NotLeader):  # the deposed leader's engine may not write a plan any more
        a.save_plan("r", ActivationState(False, None), 20.0, {}, [])
    b.save_plan("r", ActivationState(False, None), 30.0, {}, [])
    assert b.get_router("r")["demand_pps"] == 30.0
    hand = [x["detail"] for x in b.list_actions(kind="leader_changed")]
    assert hand == [{"leader": "hostA:1", "previous": None, "epoch": 1},
                    {"leader": "hostB:2", "previous": "hostA:1", "epoch": 2}]
    a.close()
    b.close()


def test_leader_lock_is_one_holder_and_frees_with_its_session(pg_cluster: Any) -> None:
    url = pg_cluster.new_database()
    Store(url).close()
    one, two = LeaderLock(url), LeaderLock(url)
    assert one.try_acquire() and one.alive()
    assert not two.try_acquire() and not two.alive()
    one.conn.close()  # the session ends (as when the process dies); the server frees the lock as it notices
    assert not one.alive()
    wait_for(two.try_acquire, 2.0, "the lock freed with its session", step_s=0.02)
    assert two.alive()
    assert not one.try_acquire()
    two.close()
    wait_for(one.try_acquire, 2.0, "the lock freed by close", step_s=0.02)
    one.close()


def test_reads_take_the_read_connection_when_free_and_survive_its_loss(pg_cluster: Any) -> None:
    """PostgreSQL on a unix socket: a read takes the process's own read connection (one session,
    always the same) when it is free, a pool connection while another thread holds it, and a read
    connection whose session the server ended is replaced without the read failing."""
    import threading

    import psycopg

    url = pg_cluster.new_database()
    store = Store(url)
    try:
        db = store.db
        assert db.inline_lock is db.lock  # the cluster listens on a unix socket only
        pid = "SELECT pg_backend_pid() AS pid"
        own = {db.read(pid)[0]["pid"] for _ in range(5)}
        assert len(own) == 1
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with db.lock:
                held.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        try:
            assert held.wait(10)
            assert db.read(pid)[0]["pid"] not in own  # the pool's
        finally:
            release.set()
            t.join()
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(%s)", (next(iter(own)),))
        assert db.read("SELECT 1 AS one") == [{"one": 1}]  # answered though the session was gone
        again = db.read(pid)[0]["pid"]
        assert again not in own and db.read(pid)[0]["pid"] == again  # a new read connection, kept
    finally:
        store.close()


def test_a_tcp_server_keeps_reads_off_the_event_loop() -> None:
    from xtc.policer.db import _is_local_socket

    assert _is_local_socket("postgresql://xtc@/policer?host=/run/postgresql")
    assert _is_local_socket("postgresql://xtc@/policer")  # libpq's default: the local socket
    assert not _is_local_socket("postgresql://xtc@db.example:5432/policer")
    assert not _is_local_socket("postgresql://xtc@/policer?host=/run/postgresql,db2.example")


def test_a_batch_of_outcomes_is_one_transaction_in_order(db_url: str) -> None:
    """The engine's batch: statuses, VRs and audit records of several routers in one transaction, each
    router's records in the order of its outcome; a removed router left alone; plans saved together."""
    from xtc.policer.policy import MisbehaviourState
    from xtc.policer.store import ExchangeOutcome

    s = Store(db_url)
    for n in ("up", "down", "back", "gone"):
        s.add_router(n, "tcp://127.0.0.1:1", 1e5, "auto", None, "test")
    s.record_poll("up", [{"vr": "a"}, {"vr": "b"}])
    s.record_outcomes([ExchangeOutcome("back", "unreachable", "timeout")])
    s.remove_router("gone", "test")
    last = s.list_actions(limit=1000)[-1]["id"]
    prev = s.record_outcomes([
        ExchangeOutcome("up", "reachable", vrs=[{"vr": "a", "state": "active", "forwarded_pps": 5.0}, {"vr": "c"}],
                records=[("setpoint", "a", {"cmd": "setpoint", "setpoint_pps": 9.0})]),
        ExchangeOutcome("down", "unreachable", "no answer"),
        ExchangeOutcome("back", "reachable", vrs=[]),
        ExchangeOutcome("gone", "reachable", vrs=[{"vr": "x"}]),
    ])
    assert prev == {"up": "unknown", "down": "unknown", "back": "unreachable", "gone": None}
    got = [(a["kind"], a["router"], a["vr"]) for a in s.list_actions(after_id=last, limit=1000)]
    assert got == [("setpoint", "up", "a"), ("vr_appeared", "up", "c"), ("vr_vanished", "up", "b"),
                   ("router_unreachable", "down", None), ("router_reachable", "back", None)]
    st = {r["name"]: r for r in s.list_routers()}
    assert [st[n]["status"] for n in ("up", "down", "back", "gone")] == ["reachable", "unreachable", "reachable", "removed"]
    assert st["down"]["last_error"] == "no answer" and st["up"]["last_seen_unix_s"] is not None
    vrs = {v["name"]: v for v in s.list_vrs(router="up")}
    assert (vrs["a"]["state"], vrs["a"]["forwarded_pps"], vrs["b"]["present"], vrs["c"]["present"]) == ("active", 5.0, False, True)
    assert s.list_vrs(router="gone") == []
    states = s.router_states(["up", "back", "nope"])
    assert set(states) == {"up", "back"} and set(states["up"][1]) == {"a", "b", "c"} and states["back"][1] == {}
    ms = MisbehaviourState(1, 3.0, None)
    per_vr = {"a": {"derived_setpoint_pps": 7.0, "misbehaviour": ms, "punish_base_pps": 8.0, "wanted_state": "active",
                    "wanted_setpoint_pps": 3.5}}
    s.save_plans([("up", ActivationState(True, None), 12.0, per_vr, [("punish", "a", {"level": 1})]),
                  ("gone", ActivationState(True, None), 1.0, {}, [("punish", "x", {"level": 1})])])
    a = s.get_vr("up", "a")
    assert (a["derived_setpoint_pps"], a["wanted_setpoint_pps"], a["punishment_level"]) == (7.0, 3.5, 1)
    assert s.get_router("up")["control_on"] and not s.get_router("gone")["control_on"]
    assert [x["router"] for x in s.list_actions(kind="punish")] == ["up"]
    s.close()


def test_kept_rows_are_what_the_database_holds(db_url: str) -> None:
    """The engine's store keeps each router's VR rows between its transactions (valid while the router's
    ``rev`` is unchanged): after any mix of its own writes and other stores' (another process: the API,
    another policer), what it gives is what a store with nothing kept reads."""
    import random

    from xtc.policer.policy import MisbehaviourState

    rng = random.Random(7)
    eng, api = Store(db_url), Store(db_url)
    routers = [f"r{i}" for i in range(4)]
    for r in routers:
        api.add_router(r, "tcp://127.0.0.1:1", 100_000.0, "on", None, "test")
    for n in ("gold", "silver"):
        api.add_network(n, "", "test")
    vrs = ["a", "b", "c"]

    def fresh() -> dict:
        s = Store(db_url)
        try:
            return s.router_states(routers)
        finally:
            s.close()

    def value() -> float | None:
        return rng.choice([None, 0.0, 1000.0, 2500.5, float(rng.randint(0, 5))])

    last: dict[str, list] = {}
    t = [1000.0]

    def clock() -> float:
        t[0] += 1.0
        return t[0]

    eng.clock = clock
    steps = {"measure": 0, "plan": 0, "api": 0}
    for i in range(300):
        r = rng.choice(routers)
        k = rng.random()
        if k < 0.35:  # the engine records a measurement (sometimes a VR missing, not present, or new)
            if r in last and rng.random() < 0.5:  # the very list again, as a sample stream's unchanged message
                rows = last[r]
            else:
                rows = [{"vr": v, "state": rng.choice(["active", "inactive", "paused"]), "setpoint_pps": value(),
                         "forwarded_pps": value(), "offered_pps": value(), "cap_percent": value(),
                         "present": rng.random() > 0.1, "saturated": rng.choice([None, "cap_max", "cap_min", "cap_slack"])}
                        for v in vrs + ["d"] if rng.random() > (0.1 if v != "d" else 0.9)]
            last[r] = rows
            now = t[0] + 1
            if eng.record_outcomes([ExchangeOutcome(r, rng.choice(["reachable", None]), None, vrs=rows)])[r] is not None:
                eng.snapshot()  # the measurements, live until then
                got = {v["name"]: v for v in api.list_vrs(r)}  # every VR reported written, at this time
                assert all((got[v["vr"]]["last_seen_unix_s"], got[v["vr"]]["forwarded_pps"], got[v["vr"]]["state"])
                           == (now, v["forwarded_pps"], v["state"]) for v in rows), i
            steps["measure"] += 1
        elif k < 0.45:
            eng.record_outcomes([ExchangeOutcome(r, "unreachable", "no answer")])
        elif k < 0.75:  # the engine saves a plan for VRs it read
            st = eng.router_states([r]).get(r)
            per_vr = {n: {"derived_setpoint_pps": value(), "wanted_state": rng.choice([None, "active", "paused"]),
                          "wanted_setpoint_pps": value(),
                          "misbehaviour": MisbehaviourState(rng.randint(0, 3), rng.choice([None, 3, 4.5]),
                                                            rng.choice([None, 7.25])),
                          "punish_base_pps": value()} for n in (st[1] if st else {}) if rng.random() < 0.5}
            eng.save_plans([(r, ActivationState(rng.random() < 0.5, rng.choice([None, 1.0])), 5.0, per_vr, [])])
            steps["plan"] += 1
        else:  # another store writes: what the API does
            steps["api"] += 1
            try:
                j = rng.randrange(6)
                v = rng.choice(vrs)
                if j == 0:
                    api.set_manual_setpoint(r, v, rng.choice([None, 1234.5]), "test")
                elif j == 1:
                    api.set_vr_network(r, v, rng.choice([None, "gold", "silver"]), "test")
                elif j == 2:
                    api.set_sla(rng.choice(["gold", "silver"]), rng.choice(
                        [None, {"min_pps": 1000.0, "max_pps": float(rng.randint(2000, 9000)), "weight": 2.0}]), "test")
                elif j == 3:
                    api.update_router(r, {"capacity_pps": 50_000.0}, "test")
                elif j == 4:
                    api.remove_router(r, "test")
                else:
                    api.add_router(r, "tcp://127.0.0.1:2", 100_000.0, "on", None, "test")
            except (Conflict, StoreError):
                pass
        if i % 3 == 0 or k >= 0.75:
            assert eng.router_states(routers) == fresh(), i
    assert min(steps.values()) > 30, steps
    # It did keep rows: a router nobody wrote to since is not read again.
    eng.router_states(routers)
    kept = {r: eng._states[r][1] for r in routers}
    assert all(eng.router_states(routers)[r][1] is kept[r] for r in routers)
    # The same measurement again after the router was removed and registered again (its VRs marked absent
    # meanwhile): its VRs appear again, as for any measurement.
    same = [{"vr": v, "state": "active", "forwarded_pps": 5.0} for v in vrs]
    try:
        api.add_router("r0", "tcp://127.0.0.1:1", 100_000.0, "on", None, "test")
    except Conflict:
        pass
    for _ in range(3):
        eng.record_outcomes([ExchangeOutcome("r0", "reachable", None, vrs=same)])
        eng.router_states(["r0"])
    api.remove_router("r0", "test")
    api.add_router("r0", "tcp://127.0.0.1:1", 100_000.0, "on", None, "test")
    assert not any(v.present for v in eng.router_states(["r0"])["r0"][1].values())  # read again: absent
    out = ExchangeOutcome("r0", "reachable", None, vrs=same)
    eng.record_outcomes([out])
    assert out.appeared == vrs and eng.router_states(["r0"])["r0"] == fresh()["r0"]
    eng.close()
    api.close()


def test_the_engines_router_list_is_the_registered_routers_columns(db_url: str) -> None:
    s = Store(db_url)
    s.add_router("b", "tcp://127.0.0.1:2", 2000.0, "auto", None, "t", pub_endpoint="tcp://127.0.0.1:3")
    s.add_router("a", "tcp://127.0.0.1:1", 1000.0, "on", "k" * 40, "t")
    s.add_router("c", "tcp://127.0.0.1:4", 1000.0, "off", None, "t")
    s.update_router("a", {"capacity_pps": 1500.0, "endpoint": "tcp://127.0.0.1:9"}, "t")
    s.remove_router("c", "t")
    cols = ("name", "endpoint", "capacity_pps", "control_mode", "curve_server_key", "pub_endpoint")
    want = [{k: r[k] for k in cols} for r in s.list_routers(include_removed=False)]
    assert [r["name"] for r in want] == ["a", "b"] and want[0]["endpoint"] == "tcp://127.0.0.1:9"
    assert s.engine_routers() == want
    s.close()


def test_an_api_write_waits_for_the_engines_save_of_its_router_instead_of_deadlocking(pg_cluster: Any) -> None:
    """The API's writes to a VR take the router's row before the VR's, the order of the engine's
    transactions (the router's row, then its VRs'): a setpoint written while the engine saves the same
    router waits for it.  In the other order PostgreSQL found a deadlock and aborted one of the two
    (the API answered 500, once, in the failover test)."""
    import threading
    import time

    store = Store(pg_cluster.new_database())
    try:
        store.add_router("r", "tcp://127.0.0.1:9", 1e6, "on", None, "test")
        vr = {"vr": "v0", "state": "active", "present": True, "setpoint_pps": 1000.0, "forwarded_pps": 900.0,
              "offered_pps": 1200.0, "cap_percent": 1.5, "saturated": None}
        store.record_outcomes([ExchangeOutcome("r", "reachable", None, vrs=[vr], records=[])])
        errors: list[BaseException] = []

        def api_write() -> None:
            try:
                store.set_manual_setpoint("r", "v0", 5000.0, "test")
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        with store.tx() as db:  # the engine's order: the router's row, then its VR's
            db.execute("UPDATE routers SET rev=rev+1 WHERE name=?", ("r",))
            writer = threading.Thread(target=api_write)
            writer.start()
            time.sleep(0.5)  # the API's write is under way and waits for this transaction
            db.execute("UPDATE vrs SET derived_setpoint_pps=? WHERE router=? AND name=?", (1234.0, "r", "v0"))
        writer.join(10)
        assert not writer.is_alive() and errors == [], errors
        row = store.get_vr("r", "v0")
        assert row["manual_setpoint_pps"] == 5000.0 and row["derived_setpoint_pps"] == 1234.0
    finally:
        store.close()


def test_bulk_updates_carry_every_value_exactly(db_url: str) -> None:
    """``Conn.update_many`` (on PostgreSQL one statement over binary arrays; on SQLite one prepared
    statement): names with quotes, backslashes, braces, commas, the word NULL and non-ASCII letters,
    nulls in every type, floats to the last bit, bools in an integer column, and a repeated key (which
    falls back to one statement a row, applied in order)."""
    store = Store(db_url)
    try:
        names = ['a"b', "c\\d", "{e,f}", "NULL", "é-ü", "plain"]
        for n in names:
            store.add_router(n, "tcp://127.0.0.1:1", 1000.0, "off", None, "test")
        rows = [("reachable", None if i % 2 else f"err {n}", None if i == 3 else 0.1 + i / 3, n) for i, n in enumerate(names)]
        with store.db.tx() as db:
            db.update_many("routers", "status last_error last_seen_unix_s | name", "ttrt", rows, "rev=rev+1")
            db.update_many("routers", "control_on demand_pps | name", "irt",
                           [(True, 5, names[0]), (False, None, names[1])])
            db.update_many("routers", "demand_pps | name", "rt", [(1.0, "plain"), (2.5, "plain")])  # the last wins
        with store.db.tx() as db:
            got = {r[0]: r[1:] for r in db.tuples(
                "SELECT name, status, last_error, last_seen_unix_s, control_on, demand_pps, rev FROM routers")}
        for i, n in enumerate(names):
            assert got[n][:3] == rows[i][:3], (n, got[n])
        assert got[names[0]][3:5] == (1, 5.0) and got[names[1]][3:5] == (0, None)
        assert got["plain"][4] == 2.5
        assert len({got[n][5] for n in names}) == 1  # each router's revision moved once (the first update's also)
    finally:
        store.close()


def _raw_vrs(url: str) -> dict[str, tuple]:
    """The VRs' measurement columns as the database holds them (another store: no live values)."""
    other = Store(url)
    try:
        return {v["name"]: (v["forwarded_pps"], v["state"], v["last_seen_unix_s"]) for v in other.list_vrs()}
    finally:
        other.close()


def test_measurements_live_in_memory_until_a_snapshot(db_url: str) -> None:
    """A measurement is written when a VR appears or its state changes, otherwise kept live (this store's
    reads and the engine's plan inputs show it) and written by :meth:`Store.snapshot`; decisions at once."""
    t = [100.0]
    s = Store(db_url, clock=lambda: t[0])
    s.add_router("r1", "tcp://127.0.0.1:1", 1e5, "auto", None, "test")
    s.record_outcomes([ExchangeOutcome("r1", "reachable", vrs=[{"vr": "a", "state": "active", "forwarded_pps": 5.0}])])
    assert _raw_vrs(db_url) == {"a": (5.0, "active", 100.0)}  # appeared: written at once
    assert s.router_states(["r1"])["r1"][1]["a"].forwarded_pps == 5.0  # its rows kept from now on
    t[0] = 101.0
    s.record_outcomes([ExchangeOutcome("r1", "reachable", vrs=[{"vr": "a", "state": "active", "forwarded_pps": 7.0}])])
    assert _raw_vrs(db_url) == {"a": (5.0, "active", 100.0)}  # a new measurement only: live
    assert (s.get_vr("r1", "a")["forwarded_pps"], s.get_vr("r1", "a")["last_seen_unix_s"]) == (7.0, 101.0)
    assert s.get_router("r1")["last_seen_unix_s"] == 101.0
    assert s.router_states(["r1"])["r1"][1]["a"].forwarded_pps == 7.0
    s.set_manual_setpoint("r1", "a", 3000.0, "test")  # another writer: the rows are read again, live values over them
    assert s.router_states(["r1"])["r1"][1]["a"].forwarded_pps == 7.0
    t[0] = 102.0
    s.record_outcomes([ExchangeOutcome("r1", "reachable", vrs=[{"vr": "a", "state": "paused", "forwarded_pps": 8.0}])])
    assert _raw_vrs(db_url) == {"a": (8.0, "paused", 102.0)}  # its state changed: written at once
    t[0] = 103.0
    s.record_outcomes([ExchangeOutcome("r1", "reachable", vrs=[{"vr": "a", "state": "paused", "forwarded_pps": 9.0}])])
    s.save_plan("r1", ActivationState(True, None), 9.0, {}, [("activate", "a", {})])
    assert s.list_actions(kind="activate")  # a decision: at once
    assert _raw_vrs(db_url) == {"a": (8.0, "paused", 102.0)}
    assert s.last_snapshot_unix_s() is None
    assert s.snapshot() == 1
    assert _raw_vrs(db_url) == {"a": (9.0, "paused", 103.0)}
    other = Store(db_url)
    try:
        assert other.get_router("r1")["last_seen_unix_s"] == 103.0
        assert other.last_snapshot_unix_s() == 103.0
    finally:
        other.close()
    assert s.snapshot() == 0  # nothing measured since
    s.close()
