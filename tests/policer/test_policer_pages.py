"""A page of routers or VRs (read as tuples of the columns it shows, docs/design/policer-api.md) holds each
item exactly as the item's own read gives it (a mapping of its row): the same fields, in the same order,
of the same types, with the same live values, to the byte of the API's JSON; and a filtered page is the
full list's items that pass the filter."""

from __future__ import annotations

import time
from pathlib import Path

from xtc.policer.api.routes import _json, _router_out
from xtc.policer.live import LiveTable
from xtc.policer.liveshare import LiveReader, LiveWriter, live_file_name
from xtc.policer.store import ExchangeOutcome, Store


def _seed(s: Store) -> None:
    s.add_network("n1", "", "test")
    s.add_router("r1", "tcp://127.0.0.1:1", 1e5, "on", "x" * 40, "test", "tcp://127.0.0.1:2")
    s.add_router("r2", "tcp://127.0.0.1:3", 2.5e5, "auto", None, "test")
    s.add_router("r3", "tcp://127.0.0.1:4", 1e5, "off", None, "test")
    s.add_router("r4", "tcp://127.0.0.1:5", 1e5, "auto", None, "test")
    s.record_outcomes([
        ExchangeOutcome("r1", "reachable", vrs=[
            {"vr": "a", "state": "active", "forwarded_pps": 5.5, "offered_pps": 6.25, "cap_percent": 33.3,
             "setpoint_pps": 1000.0, "saturated": "cap_max"},
            {"vr": "b", "state": "paused", "forwarded_pps": None},
            {"vr": "c", "state": "inactive", "present": False}]),
        ExchangeOutcome("r2", "reachable", vrs=[{"vr": "a", "state": "active", "forwarded_pps": 1e-05}]),
        ExchangeOutcome("r4", "unreachable", "no answer")])
    s.set_vr_network("r1", "a", "n1", "test")
    s.set_manual_setpoint("r1", "b", 1234.5, "test")
    with s.tx() as db:
        db.execute("UPDATE vrs SET punish_level=3 WHERE router='r1' AND name='b'")
        db.execute("UPDATE vrs SET punish_level=4, derived_setpoint_pps=77.0, wanted_state='active',"
                   " wanted_setpoint_pps=88.0 WHERE router='r2' AND name='a'")
    s.remove_router("r3", "test")


def _same_items(s: Store) -> None:
    vrs = s.list_vrs()
    assert [(v["router"], v["name"]) for v in vrs] == [("r1", "a"), ("r1", "b"), ("r1", "c"), ("r2", "a")]
    for v in vrs:
        one = s.get_vr(v["router"], v["name"])
        assert list(v.items()) == list(one.items())
        assert _json(v).body == _json(one).body
        assert type(v["present"]) is bool and type(v["flagged"]) is bool
    routers = s.list_routers()
    assert [r["name"] for r in routers] == ["r1", "r2", "r3", "r4"]
    for r in routers:
        one = s.get_router(r["name"])
        assert list(r.items()) == list(one.items())
        assert _json(_router_out(dict(r))).body == _json(_router_out(one)).body
        assert type(r["control_on"]) is bool
    # filters and pages: the full list's items that pass, in its order
    assert s.list_vrs(router="r1", flagged=True) == [v for v in vrs if v["router"] == "r1" and v["flagged"]]
    assert s.list_vrs(network="n1") == [v for v in vrs if v["network"] == "n1"]
    assert s.list_vrs(state="paused", limit=1) == [v for v in vrs if v["state"] == "paused"][:1]
    assert s.list_vrs(limit=2, offset=1) == vrs[1:3]
    assert s.list_routers(status="unreachable") == [r for r in routers if r["status"] == "unreachable"]
    assert s.list_routers(limit=2, offset=2) == routers[2:]


def test_a_page_holds_each_item_as_its_own_read_gives_it(db_url: str, tmp_path: Path) -> None:
    s = Store(db_url)
    try:
        _seed(s)
        _same_items(s)  # the snapshot's values (this store measures nothing now: its live table is its own)
        v = s.get_vr("r1", "a")
        assert (v["forwarded_pps"], v["saturated"], v["network"], v["present"]) == (5.5, "cap_max", "n1", True)
        assert s.get_vr("r1", "b")["flagged"] and s.get_vr("r1", "b")["manual_setpoint_pps"] == 1234.5
        assert s.get_router("r1")["curve_server_key"] == "x" * 40
    finally:
        s.close()
    # The API's process: another store, the engine's values from a publication
    now = time.time()
    table = LiveTable()
    table.put("r1", now, ["a", "b", "c"], [11.5, None, 2.0], [12.0, 1.0, None], [50.0, None, 1.5],
              ["cap_slack", None, "cap_min"])
    table.set_demand("r1", 4321.0)
    live = tmp_path / "live"
    live.mkdir()
    LiveWriter(live / live_file_name((0, 1)), fresh_for_s=3600).publish(table, now)
    api = Store(db_url)
    api.live_source = LiveReader(live)
    try:
        _same_items(api)
        v = api.get_vr("r1", "a")
        assert (v["forwarded_pps"], v["saturated"], v["last_seen_unix_s"], v["measured_from"]) == \
            (11.5, "cap_slack", now, "live")
        r1, r4 = api.get_router("r1"), api.get_router("r4")
        assert (r1["last_seen_unix_s"], r1["demand_pps"], r1["measured_from"]) == (now, 4321.0, "live")
        assert r4["measured_from"] == "snapshot" and r4["status"] == "unreachable"
        b, c = api.get_vr("r1", "b"), api.get_vr("r1", "c")
        assert (b["forwarded_pps"], b["offered_pps"], b["cap_percent"], b["saturated"]) == (None, 1.0, None, None)
        assert (c["offered_pps"], c["cap_percent"], c["saturated"], c["measured_from"]) == (None, 1.5, "cap_min", "live")
        assert api.list_vrs()[3]["measured_from"] == "snapshot"  # r2: no engine publishes it
    finally:
        api.close()


def test_the_audit_logs_details_read_back_as_written(tmp_path: Path) -> None:
    """A page of the audit log reads each record's detail as the standard library would (orjson, and the
    standard library for what orjson refuses: an integer beyond 64 bits)."""
    import json

    s = Store(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        details = [{"a": 0.1, "b": 1e-05, "c": 1795799561.1903431, "d": [1, None, True, "é\u2028"]},
                   {"big": 2**70, "neg": -(2**64)}, {"nested": {"x": {"y": []}}, "s": "\"quoted\" \\ /"}, {},
                   {"u64": 2**64 - 1, "i64": -(2**63), "digits": "12345678901234567890"}, {"lone": "\ud800"}]
        for d in details:
            s.audit("test", "tester", "r1", None, d)
        got = [a["detail"] for a in s.list_actions(kind="test")]
        assert got == details
        assert got == [json.loads(json.dumps(d)) for d in details]
        assert type(got[1]["big"]) is int and type(got[0]["a"]) is float and type(got[4]["u64"]) is int
    finally:
        s.close()
