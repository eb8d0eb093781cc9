"""Measurements in memory, decisions in the database: a SIGKILL of the engine's process (a real
``xtc policer serve``, a real sim daemon, SQLite and PostgreSQL) loses no decision, and the database
holds the routers' measurements of at most one snapshot interval (``engine.snapshot_interval_s``)
before the kill; a policer started again on the database goes on from the decisions."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil
import pytest
from procs import wait_for

from xtc.policer.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]  # times: run alone

TCP = {"traffic": "tcp", "offered_pps": 60000.0}
SETPOINTS = {"a1": 21000.0, "a2": 17000.0}
PERIOD_S = 0.5
SNAPSHOT_S = 1.5


def _engine_pid(pol: Any) -> int:
    kids = [p for p in psutil.Process(pol.proc.pid).children(recursive=True)
            if "xtc.policer.engine_proc" in " ".join(p.cmdline())]
    assert len(kids) == 1, kids
    return kids[0].pid


def _db_url(pol: Any) -> str:
    return (pol.extra_env or {}).get("XTC_POLICER_DB_URL") or f"sqlite:///{pol.tmp / 'policer.db'}"


def test_sigkill_of_the_engine_loses_no_decision_and_one_snapshot_at_most(make_daemon: Any, make_policer: Any) -> None:
    d = make_daemon("ra", [{"name": n, **TCP} for n in SETPOINTS])
    config = f"snapshot_interval_s = {SNAPSHOT_S}\n"
    p1 = make_policer(period_s=PERIOD_S, extra_config=config)
    p1.call("PUT", "/policies/misbehaviour", json={"enabled": False})
    p1.call("POST", "/routers", json={"name": "ra", "endpoint": d.endpoint, "capacity_pps": 100000,
                                         "control_mode": "on"})
    wait_for(lambda: len(p1.get("/vrs")) == len(SETPOINTS), 10, "the VRs reported")
    for vr, sp in SETPOINTS.items():
        p1.call("PUT", f"/vrs/ra/{vr}/setpoint", json={"setpoint_pps": sp})

    def held() -> bool:
        return all(v["state"] == "active" and v["setpoint_pps"] == SETPOINTS[n] for n, v in d.vrs().items())
    wait_for(held, 15, "the daemon holding the manual setpoints")
    # The API reads the snapshot: its measurements move on, one snapshot interval at a time.
    seen = p1.get("/vrs/ra/a1")["last_seen_unix_s"]
    wait_for(lambda: p1.get("/vrs/ra/a1")["last_seen_unix_s"] > seen, 3 * SNAPSHOT_S, "a snapshot after the first")
    time.sleep(2 * SNAPSHOT_S)

    t_kill = time.time()
    os.kill(_engine_pid(p1), signal.SIGKILL)
    assert p1.proc is not None
    p1.proc.wait(10)  # the engine died: serve exits (its supervisor restarts it)
    assert p1.proc.returncode == 1

    store = Store(_db_url(p1))
    try:
        vrs = {v["name"]: v for v in store.list_vrs(router="ra")}
        router = store.get_router("ra")
        decided = [a for a in store.list_actions(router="ra", limit=1000) if a["kind"] in ("activate", "setpoint")]
    finally:
        store.close()
    # Every decision the daemon acts on is in the database: the wanted state and setpoint of each VR,
    # and the audit record of the command that gave it.
    daemon = d.vrs()
    for n, sp in SETPOINTS.items():
        assert (vrs[n]["manual_setpoint_pps"], vrs[n]["wanted_state"], vrs[n]["wanted_setpoint_pps"]) == (sp, "active", sp)
        assert (daemon[n]["state"], daemon[n]["setpoint_pps"]) == ("active", sp)
        assert [a["detail"].get("setpoint_pps") for a in decided if a["vr"] == n][-1] == sp, decided
    assert router["status"] == "reachable"
    # The measurements of one snapshot interval at most (plus the period the worker takes it between
    # batches, plus a margin for a loaded machine) before the kill.
    oldest_s = SNAPSHOT_S + PERIOD_S + 0.5
    for n in SETPOINTS:
        assert vrs[n]["forwarded_pps"] is not None and vrs[n]["forwarded_pps"] > 0, vrs[n]
        assert t_kill - vrs[n]["last_seen_unix_s"] <= oldest_s, (n, t_kill - vrs[n]["last_seen_unix_s"])
    assert t_kill - router["last_seen_unix_s"] <= oldest_s

    # Started again on the database: it commands from the stored decisions (no other setpoint sent).
    p1.stop()
    p2 = make_policer(period_s=PERIOD_S, extra_config=config)
    last_id = p2.get("/actions", params={"limit": 1000})[-1]["id"]
    wait_for(lambda: p2.get("/health")["engine_cycles"] > 4, 15, "the engine to run again")
    assert held()
    after = p2.get("/actions", params={"after_id": last_id, "limit": 1000})
    pushed = [a for a in after if a["kind"] in ("setpoint", "activate") and a["router"] == "ra"]
    assert all(a["detail"]["setpoint_pps"] == SETPOINTS[a["vr"]] for a in pushed), pushed
    wait_for(lambda: p2.get("/vrs/ra/a1")["last_seen_unix_s"] > t_kill, 3 * SNAPSHOT_S, "measurements again")
