"""The REST API in-process (no daemons): auth, errors, persistence, and the committed OpenAPI document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from xtc.policer.api import create_app, openapi_document
from xtc.policer.config import PolicerConfigError, PolicerConfig, loads_config
from xtc.policer.store import Store, StoreError, parse_db_url

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-" + "a" * 28
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def client(url: str, protect_reads: bool = False) -> tuple[TestClient, Store]:
    store = Store(url)
    cfg = PolicerConfig(tokens=frozenset({TOKEN}), protect_reads=protect_reads)
    return TestClient(create_app(cfg, store)), store


def test_committed_openapi_matches_the_app() -> None:
    committed = json.loads((ROOT / "docs" / "policer-openapi.json").read_text())
    assert committed == openapi_document(), "regenerate with: xtc policer openapi > docs/policer-openapi.json"


def _write_ops() -> list[tuple[str, str]]:
    doc = openapi_document()
    return [(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if m != "get"]


def test_every_write_needs_a_token(db_url: str) -> None:
    c, store = client(db_url)
    ops = _write_ops()
    assert len(ops) >= 12
    for method, path in ops:
        concrete = path.replace("{router}", "r1").replace("{vr}", "v1").replace("{network}", "n1")
        for headers in ({}, {"Authorization": "Bearer wrong-token-000000000"}, {"Authorization": "Basic dXNlcjpwdw=="}):
            r = c.request(method, concrete, json={}, headers=headers)
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json()["detail"] and r.headers["www-authenticate"] == "Bearer"
    # Nothing was written, not even to the audit log.
    assert store.list_actions() == [] and store.list_routers() == [] and store.list_networks() == []


def test_reads_open_or_protected(db_url: str) -> None:
    c, _ = client(db_url)
    assert c.get("/routers").status_code == 200
    c2, _ = client(db_url, protect_reads=True)
    assert c2.get("/routers").status_code == 401
    assert c2.get("/routers", headers=AUTH).status_code == 200


def test_resources_errors_and_restart(db_url: str) -> None:
    c, store = client(db_url)
    r = c.post("/routers", json={"name": "r1", "endpoint": "tcp://127.0.0.1:7700", "capacity_pps": 120000}, headers=AUTH)
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "unknown" and r.json()["control_mode"] == "auto" and r.json()["pub_endpoint"] is None
    assert c.post("/routers", json={"name": "r1", "endpoint": "tcp://127.0.0.1:7700", "capacity_pps": 1}, headers=AUTH).status_code == 409
    for bad in ({"name": "r2", "endpoint": "http://x:1", "capacity_pps": 1}, {"name": "r2", "endpoint": "tcp://h:1", "capacity_pps": 0},
                {"name": "r2", "endpoint": "tcp://h:1", "capacity_pps": 1, "extra": 1}, {"name": "-bad", "endpoint": "tcp://h:1", "capacity_pps": 1},
                {"name": "r2", "endpoint": "tcp://h:1", "capacity_pps": 1, "pub_endpoint": "udp://h:1"},
                {"name": "r2", "endpoint": "tcp://h:1", "capacity_pps": 1, "pub_endpoint": "ipc://" + "x" * 300}):
        r = c.post("/routers", json=bad, headers=AUTH)
        assert r.status_code == 422 and r.json()["detail"][0]["msg"], bad
    assert c.get("/routers/nope").status_code == 404
    assert c.post("/networks", json={"name": "blue"}, headers=AUTH).status_code == 201
    r = c.put("/networks/blue/sla", json={"min_pps": 20000, "max_pps": 10000}, headers=AUTH)
    assert r.status_code == 422 and "must not exceed" in r.json()["detail"][0]["msg"]
    assert c.put("/networks/blue/sla", json={"min_pps": 10000, "max_pps": 50000, "weight": 2}, headers=AUTH).status_code == 200
    # A VR appears when its daemon reports it; then it can join the network and get a manual setpoint.
    assert c.put("/vrs/r1/vr1/network", json={"network": "blue"}, headers=AUTH).status_code == 404
    store.record_poll("r1", [{"vr": "vr1", "state": "inactive", "forwarded_pps": 1000.0, "offered_pps": 1000.0}])
    assert c.put("/vrs/r1/vr1/network", json={"network": "nope"}, headers=AUTH).status_code == 404
    assert c.put("/vrs/r1/vr1/network", json={"network": "blue"}, headers=AUTH).json()["network"] == "blue"
    assert c.put("/vrs/r1/vr1/setpoint", json={"setpoint_pps": -5}, headers=AUTH).status_code == 422
    assert c.put("/vrs/r1/vr1/setpoint", json={"setpoint_pps": 25000}, headers=AUTH).json()["manual_setpoint_pps"] == 25000
    assert c.get("/setpoints").json() == [{"router": "r1", "vr": "vr1", "setpoint_pps": 25000.0, "source": "manual",
                                           "effective_setpoint_pps": None, "wanted_state": None, "punishment_level": 0}]
    assert c.delete("/networks/blue", headers=AUTH).status_code == 409
    r = c.put("/policies/activation", json={"enabled": True, "on_fraction": 0.5, "off_fraction": 0.6, "hold_s": 1}, headers=AUTH)
    assert r.status_code == 422 and "off_fraction" in r.json()["detail"][0]["msg"]
    assert c.put("/policies/misbehaviour", json={"enabled": False}, headers=AUTH).json()["enabled"] is False
    assert c.patch("/routers/r1", json={"control_mode": "on"}, headers=AUTH).json()["control_mode"] == "on"
    assert c.patch("/routers/r1", json={"capacity_pps": None}, headers=AUTH).status_code == 422
    assert c.patch("/routers/r1", json={"pub_endpoint": "tcp://h"}, headers=AUTH).status_code == 422
    r = c.patch("/routers/r1", json={"pub_endpoint": "tcp://127.0.0.1:7701"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["pub_endpoint"] == "tcp://127.0.0.1:7701"
    assert c.delete("/routers/r1", headers=AUTH).json()["status"] == "removed"
    kinds = [a["kind"] for a in c.get("/actions").json()]
    assert kinds == ["router_registered", "network_created", "sla_set", "vr_appeared", "vr_network", "manual_setpoint",
                     "policy_changed", "router_updated", "router_updated", "router_removed"]
    assert all(a["actor"].startswith("api:token-") and TOKEN not in a["actor"] for a in c.get("/actions").json()
               if a["kind"] != "vr_appeared")
    assert [a["kind"] for a in c.get("/actions", params={"kind": "sla_set"}).json()] == ["sla_set"]
    before = {p: c.get(p).json() for p in ("/routers", "/vrs", "/networks", "/setpoints", "/policies", "/actions")}
    store.close()
    # A new process on the same file finds everything as it was; the removed router is still there.
    c2, store2 = client(db_url)
    after = {p: c2.get(p).json() for p in before}
    # The same, but for where the VRs' measurements come from: the first store's live ones (it recorded
    # them), the new process's from the database (which the first store wrote as the VRs appeared).
    assert [v["measured_from"] for v in before["/vrs"]] == ["live"] and after["/vrs"][0]["measured_from"] == "snapshot"
    for page in (before["/vrs"], after["/vrs"]):
        for v in page:
            del v["measured_from"]
    assert after == before
    assert after["/routers"][0]["status"] == "removed"
    # Registering it again keeps its history.
    r = c2.post("/routers", json={"name": "r1", "endpoint": "tcp://127.0.0.1:7701", "capacity_pps": 1000}, headers=AUTH)
    assert r.status_code == 201 and r.json()["endpoint"] == "tcp://127.0.0.1:7701"
    store2.close()


def test_config_and_db_url(tmp_path: Path) -> None:
    assert parse_db_url("sqlite:////var/x.db") == "/var/x.db"
    assert parse_db_url("sqlite:///x.db") == "x.db"
    assert parse_db_url("sqlite://") == ":memory:"
    # PostgreSQL URLs are accepted (libpq URIs naming a database); a URL without a database is not.
    assert parse_db_url("postgresql://xtc@/policer?host=/run/postgresql") == "postgresql://xtc@/policer?host=/run/postgresql"
    for bad in ("postgresql://h", "mysql://x/db", "sqlite:/x", "sqlite:///"):
        with pytest.raises(StoreError):
            parse_db_url(bad)
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{tmp_path}/missing/dir/p.db")
    tf = tmp_path / "tokens"
    tf.write_text("# operators\n" + TOKEN + "\n")
    tf.chmod(0o640)
    cfg = loads_config(f'[auth]\ntokens_file = "{tf}"\nprotect_reads = true\n[engine]\nperiod_s = 0.5\n', env={})
    assert cfg.tokens == {TOKEN} and cfg.protect_reads and cfg.period_s == 0.5
    assert TOKEN not in repr(cfg) and TOKEN not in json.dumps(cfg.describe())
    assert loads_config("", env={"XTC_POLICER_TOKENS": f"{TOKEN},{'b' * 20}"}).tokens == {TOKEN, "b" * 20}
    for text, key in (("[server]\nprot = 1\n", "server.prot"), ("[engine]\nperiod_s = 0\n", "engine.period_s"),
                      ('[database]\nurl = "mysql://x"\n', "database.url"), ("[bogus]\n", "bogus")):
        with pytest.raises(PolicerConfigError) as ei:
            loads_config(text, env={})
        assert ei.value.key == key
    with pytest.raises(PolicerConfigError, match="at least 16"):
        loads_config("", env={"XTC_POLICER_TOKENS": "short"})


def test_lists_page_and_filter(db_url: str) -> None:
    c, store = client(db_url)
    for i in range(7):
        assert c.post("/routers", json={"name": f"r{i}", "endpoint": f"tcp://127.0.0.1:{9000 + i}",
                                        "capacity_pps": 1e5}, headers=AUTH).status_code == 201
        store.record_poll(f"r{i}", [{"vr": "a", "state": "active" if i % 2 else "inactive"}, {"vr": "b"}])
    for i in range(3):
        c.post("/networks", json={"name": f"n{i}"}, headers=AUTH)
    store.set_router_status("r3", "unreachable", "x", seen=False)
    pages = [c.get("/routers", params={"limit": 3, "offset": o}).json() for o in (0, 3, 6, 9)]
    assert [[r["name"] for r in p] for p in pages] == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"], []]
    assert [r["name"] for r in c.get("/routers", params={"status": "unreachable"}).json()] == ["r3"]
    assert len(c.get("/vrs").json()) == 14
    page = c.get("/vrs", params={"limit": 4, "offset": 2}).json()
    assert [(v["router"], v["name"]) for v in page] == [("r1", "a"), ("r1", "b"), ("r2", "a"), ("r2", "b")]
    assert {v["router"] for v in c.get("/vrs", params={"state": "active"}).json()} == {"r1", "r3", "r5"}
    assert c.get("/vrs", params={"flagged": "true"}).json() == []
    assert len(c.get("/vrs", params={"flagged": "false", "router": "r2"}).json()) == 2
    c.put("/vrs/r2/a/setpoint", json={"setpoint_pps": 5000}, headers=AUTH)
    c.put("/vrs/r4/b/setpoint", json={"setpoint_pps": 6000}, headers=AUTH)
    assert [s["vr"] for s in c.get("/setpoints", params={"router": "r4"}).json()] == ["b"]
    assert [s["router"] for s in c.get("/setpoints", params={"limit": 1, "offset": 1}).json()] == ["r4"]
    assert [n["name"] for n in c.get("/networks", params={"limit": 2, "offset": 1}).json()] == ["n1", "n2"]
    for bad in ({"limit": 0}, {"limit": 5001}, {"offset": -1}, {"limit": "1e3"}, {"status": "dead"}):
        assert c.get("/routers", params=bad).status_code == 422, bad
    store.close()


class _Engine:
    """What /health reads of an engine (no thread, no daemons)."""

    def __init__(self, is_leader: object = None):
        self.is_leader, self.error, self.cycles, self.bad_replies, self.cycle_s = is_leader, None, 3, {}, []
        self.sampled = self.listed = self.bad_samples = 0
        self.gap_s: list[float] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def test_health_says_whether_this_process_leads(tmp_path: Path) -> None:
    cfg = PolicerConfig(tokens=frozenset({TOKEN}))
    store = Store(f"sqlite:///{tmp_path / 'p.db'}")
    # SQLite: the one process always leads, without an epoch.
    h = TestClient(create_app(cfg, store, _Engine())).get("/health").json()
    assert h["engine_running"] is True and h["leader"] is True and "leader_epoch" not in h, h
    # A standby (the lock is held elsewhere): the engine thread runs, this process does not lead.
    leads = [False]
    h = TestClient(create_app(cfg, store, _Engine(lambda: leads[0]))).get("/health").json()
    assert h["engine_running"] is True and h["leader"] is False and "leader_epoch" not in h, h
    # Once it leads: the epoch its store writes under.
    leads[0], store.fence_epoch = True, 7
    h = TestClient(create_app(cfg, store, _Engine(lambda: leads[0]))).get("/health").json()
    assert h["leader"] is True and h["leader_epoch"] == 7, h
    # No engine at all (the API alone): nothing runs, nothing leads.
    h = TestClient(create_app(cfg, store)).get("/health").json()
    assert h["engine_running"] is False and h["leader"] is False, h
    store.close()


def test_metrics_count_routers_and_punishments(db_url: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def scrape(c: TestClient, **kw: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        r = c.get("/metrics", **kw)
        assert r.status_code == 200, r.text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(r.text) for s in f.samples}

    c, store = client(db_url)
    store.add_router("r1", "tcp://127.0.0.1:7701", 1e5, "auto", None, "test")
    store.add_router("r2", "tcp://127.0.0.1:7702", 1e5, "auto", None, "test")
    store.set_router_status("r2", "unreachable", "timeout", False)
    store.audit("punish", "policer", "r1", "v1", {"level": 1})
    m = scrape(c)
    assert m[("xtc_policer_router_unreachable", (("router", "r2"),))] == 1.0
    assert m[("xtc_policer_router_unreachable", (("router", "r1"),))] == 0.0
    assert m[("xtc_policer_routers", (("status", "unreachable"),))] == 1.0
    assert m[("xtc_policer_punishments_total", (("level", "1"),))] == 1.0
    # The counter reads the audit log on from where it stopped: a second scrape counts nothing twice.
    store.audit("punish", "policer", "r1", "v1", {"level": 2})
    m = scrape(c)
    assert m[("xtc_policer_punishments_total", (("level", "1"),))] == 1.0
    assert m[("xtc_policer_punishments_total", (("level", "2"),))] == 1.0
    assert m[("xtc_policer_leader", ())] == 0.0  # no engine here
    # Only the punished VRs have a punishment-level series.
    store.record_poll("r1", [{"vr": "v1", "state": "active"}, {"vr": "v2", "state": "active"}])
    with store.tx() as db:
        db.execute("UPDATE vrs SET punish_level=2 WHERE router='r1' AND name='v2'")
    m = scrape(c)
    assert m[("xtc_policer_vr_punishment_level", (("router", "r1"), ("vr", "v2")))] == 2.0
    assert ("xtc_policer_vr_punishment_level", (("router", "r1"), ("vr", "v1"))) not in m
    # Router names are read data: protected like the other reads.
    c2, _ = client(db_url, protect_reads=True)
    assert c2.get("/metrics").status_code == 401
    assert scrape(c2, headers=AUTH)[("xtc_policer_routers", (("status", "unknown"),))] == 1.0
