"""The per-network switch of the punishment ladder's last resort (issue 48): off by default, set by
an operator through the REST API, audited, and what the engine's plan inputs carry."""

from __future__ import annotations

from fastapi.testclient import TestClient

from xtc.policer.api import create_app
from xtc.policer.config import PolicerConfig
from xtc.policer.engine import _vr_policy
from xtc.policer.store import Store

TOKEN = "tok-" + "b" * 28
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_vr_off_is_off_by_default_enabled_per_network_audited_and_bad_input_changes_nothing(db_url: str) -> None:
    store = Store(db_url)
    c = TestClient(create_app(PolicerConfig(tokens=frozenset({TOKEN})), store))
    assert c.post("/networks", json={"name": "blue"}, headers=AUTH).status_code == 201
    assert c.post("/networks", json={"name": "red"}, headers=AUTH).status_code == 201
    assert c.get("/networks/blue").json()["vr_off"] is False
    for body in ({}, {"enabled": "yes"}, {"enabled": True, "extra": 1}):
        r = c.put("/networks/blue/vr-off", json=body, headers=AUTH)
        assert r.status_code == 422, (body, r.text)
    assert c.put("/networks/nope/vr-off", json={"enabled": True}, headers=AUTH).status_code == 404
    assert c.get("/networks/blue").json()["vr_off"] is False
    assert [a["kind"] for a in store.list_actions()] == ["network_created", "network_created"]
    r = c.put("/networks/blue/vr-off", json={"enabled": True}, headers=AUTH)
    assert r.status_code == 200 and r.json()["vr_off"] is True
    assert c.get("/networks/red").json()["vr_off"] is False
    acts = store.list_actions(kind="vr_off_enabled")
    assert len(acts) == 1 and acts[0]["detail"] == {"network": "blue"}
    # The engine's plan inputs: a VR of the network may be turned off, one elsewhere or in none not.
    store.add_router("r1", "ipc:///nonexistent", 1e6, "on", None, "test")
    store.record_poll("r1", [{"vr": n, "state": "inactive", "present": True, "setpoint_pps": None, "forwarded_pps": None,
                              "offered_pps": None, "cap_percent": None, "original_cap_percent": None}
                             for n in ("a", "b", "c")])
    store.set_vr_network("r1", "a", "blue", "test")
    store.set_vr_network("r1", "b", "red", "test")
    rows = store.router_states(["r1"])["r1"][1]
    assert {n: _vr_policy(rows[n], 0.0).vr_off_allowed for n in rows} == {"a": True, "b": False, "c": False}
    assert c.put("/networks/blue/vr-off", json={"enabled": False}, headers=AUTH).json()["vr_off"] is False
    rows = store.router_states(["r1"])["r1"][1]
    assert not _vr_policy(rows["a"], 0.0).vr_off_allowed
    store.close()


def test_a_lost_reply_to_a_punishment_command_is_settled_by_what_the_daemon_shows() -> None:
    """The engine's check of a command whose reply was lost, for the ladder's commands: ``vr_off``
    shows as the VR not present, ``vr_on`` as present, ``early_drop`` only in a ``list`` reply."""
    from xtc.policer.engine import _command_detail, _shows_applied
    from xtc.policer.planner import Command

    off, on = Command("vr_off", "a", reason="why"), Command("vr_on", "a")
    assert _shows_applied(off, {"vr": "a", "state": "paused", "present": False, "setpoint_pps": 1.0})
    assert not _shows_applied(off, {"vr": "a", "state": "paused", "present": True, "setpoint_pps": 1.0})
    assert _shows_applied(on, {"vr": "a", "state": "paused", "present": True, "setpoint_pps": 1.0})
    ed = Command("early_drop", "a", on=True)
    assert _shows_applied(ed, {"vr": "a", "state": "active", "present": True, "setpoint_pps": 1.0, "early_drop": {"on": True}})
    assert not _shows_applied(ed, {"vr": "a", "state": "active", "present": True, "setpoint_pps": 1.0})  # a sample: unknown
    assert _command_detail(off) == {"cmd": "vr_off", "reason": "why"} and _command_detail(ed) == {"cmd": "early_drop", "on": True}
