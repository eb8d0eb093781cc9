"""Two ``xtc policer serve`` processes on one real PostgreSQL: one leads, the leader is SIGKILLed, the
standby takes over within 5 s, the hand-over is in the audit log once, and the setpoints the daemon is
given are the same before and after."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]  # times and rates: run alone

TCP = {"traffic": "tcp", "offered_pps": 60000.0}
SETPOINTS = {"a1": 21000.0, "a2": 17000.0, "a3": 9000.0}


def _leaders(pol: Any) -> list[dict[str, Any]]:
    return [a["detail"] for a in pol.get("/actions", params={"kind": "leader_changed", "limit": 1000})]


def _pid(holder: str) -> int:
    return int(holder.rsplit(":", 1)[1])


@pytest.mark.parametrize("policer_db", ["postgresql"])
def test_standby_takes_over_when_the_leader_is_killed(make_daemon: Any, make_policer: Any) -> None:
    d = make_daemon("ra", [{"name": n, **TCP} for n in SETPOINTS])
    p1 = make_policer(period_s=0.5)
    wait_for(lambda: _leaders(p1), 10, "the first policer to lead")
    p2 = make_policer(period_s=0.5)
    assert p1.proc is not None and p2.proc is not None
    assert [_pid(x["leader"]) for x in _leaders(p2)] == [p1.proc.pid]
    # Writes through either replica.
    p1.call("PUT", "/policies/activation", json={"enabled": True, "on_fraction": 0.5, "off_fraction": 0.2, "hold_s": 0.5})
    p2.call("PUT", "/policies/misbehaviour", json={"enabled": False})
    p2.call("POST", "/routers", json={"name": "ra", "endpoint": d.endpoint, "capacity_pps": 100000})
    wait_for(lambda: len(p1.get("/vrs")) == 3, 10, "three VRs reported")
    for vr, sp in SETPOINTS.items():
        (p1 if vr == "a1" else p2).call("PUT", f"/vrs/ra/{vr}/setpoint", json={"setpoint_pps": sp})

    def held() -> bool:
        return all(v["state"] == "active" and v["setpoint_pps"] == SETPOINTS[n] for n, v in d.vrs().items())
    wait_for(held, 15, "the daemon holding the manual setpoints")
    h1, h2 = p1.get("/health"), p2.get("/health")
    assert h2["engine_cycles"] == 0, "the standby must not run the engine"
    assert h1["engine_cycles"] > 0
    assert h2["leader"] is False and "leader_epoch" not in h2, h2
    assert h1["leader"] is True and h1["leader_epoch"] == _leaders(p1)[0]["epoch"], h1
    last_id = p2.get("/actions", params={"limit": 1000})[-1]["id"]

    t0 = time.monotonic()
    os.kill(p1.proc.pid, signal.SIGKILL)
    p1.proc.wait(5)
    wait_for(lambda: p2.get("/health")["engine_cycles"] > 0, 10, "the standby to run the engine", step_s=0.05)
    takeover_s = time.monotonic() - t0
    print(f"\ntake-over after SIGKILL: {takeover_s:.2f} s")
    assert takeover_s < 5.0
    leaders = _leaders(p2)
    assert [_pid(x["leader"]) for x in leaders] == [p1.proc.pid, p2.proc.pid]  # the hand-over once
    assert leaders[1]["previous"] == leaders[0]["leader"] and leaders[1]["epoch"] == leaders[0]["epoch"] + 1

    # The new leader commands from the stored state: same setpoints, none pushed with another value.
    time.sleep(2.0)  # several cycles under the new leader
    assert held()
    after = p2.get("/actions", params={"after_id": last_id, "limit": 1000})
    pushed = [a for a in after if a["kind"] in ("setpoint", "activate") and a["router"] == "ra"]
    assert all(a["detail"]["setpoint_pps"] == SETPOINTS[a["vr"]] for a in pushed), pushed
    every = p2.get("/actions", params={"limit": 1000})
    since = max(a["id"] for a in every if a["kind"] == "manual_setpoint")
    assert all(a["detail"]["setpoint_pps"] == SETPOINTS[a["vr"]] for a in every
               if a["id"] > since and a["kind"] in ("setpoint", "activate") and a["router"] == "ra")
    h2 = p2.get("/health")
    assert h2["status"] == "ok" and h2["leader"] is True and h2["leader_epoch"] == leaders[1]["epoch"], h2
