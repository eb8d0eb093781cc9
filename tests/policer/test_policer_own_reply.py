"""Every write's reply is what that request wrote (issue 51, item 4): two clients write the same object
at once through a real ``xtc policer serve`` (real HTTP, on SQLite and on PostgreSQL); no reply may
carry the other writer's value.  The store used to commit, then read the object again, so a reply
could show a write that committed in between."""

from __future__ import annotations

import threading
from typing import Any, Callable

import httpx
import pytest

from conftest import TOKEN
from procs import wait_for

ROUNDS = 150  # per writer; the old code mixed up about one reply in ten


def _race(url: str, method: str, path: str, bodies: list[dict[str, Any]],
          expect: Callable[[dict[str, Any], dict[str, Any]], bool]) -> list[str]:
    """Writers, one per body, each sending its body ``ROUNDS`` times at once; the replies that are not
    their own request's."""
    wrong: list[str] = []
    start = threading.Barrier(len(bodies))

    def writer(body: dict[str, Any]) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
            start.wait()
            for _ in range(ROUNDS):
                r = c.request(method, path, json=body)
                assert r.status_code == 200, r.text
                if not expect(body, r.json()):
                    wrong.append(f"sent {body}, got {r.json()}")

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return wrong


def test_concurrent_writes_each_get_their_own_reply(make_policer: Any) -> None:
    p = make_policer(period_s=5.0)
    p.call("POST", "/networks", json={"name": "n1"})
    slas = [{"min_pps": 100.0, "max_pps": 1000.0, "weight": 1.0}, {"min_pps": 200.0, "max_pps": 2000.0, "weight": 2.0}]
    wrong = _race(p.url, "PUT", "/networks/n1/sla", slas, lambda b, r: r["sla"] == b)
    assert not wrong, f"{len(wrong)} of {2 * ROUNDS} SLA replies were another writer's: {wrong[:3]}"

    p.call("POST", "/routers", json={"name": "r1", "endpoint": "tcp://127.0.0.1:9", "capacity_pps": 1000.0})
    caps = [{"capacity_pps": 1000.0}, {"capacity_pps": 2000.0}]
    wrong = _race(p.url, "PATCH", "/routers/r1", caps, lambda b, r: r["capacity_pps"] == b["capacity_pps"])
    assert not wrong, f"{len(wrong)} of {2 * ROUNDS} router replies were another writer's: {wrong[:3]}"

    pols = [{"enabled": True, "hold_s": 1.0}, {"enabled": False, "hold_s": 2.0}]
    wrong = _race(p.url, "PUT", "/policies/misbehaviour", pols,
                  lambda b, r: (r["enabled"], r["hold_s"]) == (b["enabled"], b["hold_s"]))
    assert not wrong, f"{len(wrong)} of {2 * ROUNDS} policy replies were another writer's: {wrong[:3]}"
    # Nothing lost either: every write is in the audit log.
    n = len(p.get("/actions", params={"kind": "sla_set", "limit": 1000}))
    assert n == 2 * ROUNDS


@pytest.mark.parametrize("policer_db", ["sqlite"])
def test_the_vr_writes_reply_from_their_transaction(make_policer: Any, make_daemon: Any) -> None:
    """The VR routes (network, manual setpoint) read their reply in the write's transaction too."""
    d = make_daemon("ra", [{"name": "a1", "traffic": "tcp", "offered_pps": 1000.0}])
    p = make_policer(period_s=0.5)
    p.call("POST", "/networks", json={"name": "n1"})
    p.call("POST", "/networks", json={"name": "n2"})
    p.call("POST", "/routers", json={"name": "ra", "endpoint": d.endpoint, "capacity_pps": 100000.0})
    wait_for(lambda: p.get("/vrs"), 15, "the VR reported")
    sps = [{"setpoint_pps": 1000.0}, {"setpoint_pps": 2000.0}]
    wrong = _race(p.url, "PUT", "/vrs/ra/a1/setpoint", sps,
                  lambda b, r: r["manual_setpoint_pps"] == b["setpoint_pps"])
    assert not wrong, f"{len(wrong)} of {2 * ROUNDS} setpoint replies were another writer's: {wrong[:3]}"
    nets = [{"network": "n1"}, {"network": "n2"}]
    wrong = _race(p.url, "PUT", "/vrs/ra/a1/network", nets, lambda b, r: r["network"] == b["network"])
    assert not wrong, f"{len(wrong)} of {2 * ROUNDS} network replies were another writer's: {wrong[:3]}"
