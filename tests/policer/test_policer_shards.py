"""Engine shards (``engine.shards``): each engine process polices the routers whose name hashes to it;
on PostgreSQL each shard has its own leader lock and epoch, and policers that split the routers
differently never lead at once.  Real stores, real ZeroMQ, real daemons and ``xtc policer serve``."""

from __future__ import annotations

import os
import signal
import time
import zlib
from typing import Any

import pytest

from procs import wait_for
from xtc.policer.db import LeaderLock
from xtc.policer.engine import Engine, shard_of
from xtc.policer.link import LinkPool
from xtc.policer.policy import ActivationState
from xtc.policer.store import NotLeader, Store

pytestmark = pytest.mark.exclusive  # times and rates: run alone

TCP = {"traffic": "tcp", "offered_pps": 60000.0}


def _names(n: int, shards: int, want: int) -> list[str]:
    """``n`` router names of shard ``want`` of ``shards``."""
    out = [f"r{k}" for k in range(10_000) if shard_of(f"r{k}", shards) == want]
    return out[:n]


def test_shard_of_is_crc32_and_splits_every_name_once() -> None:
    names = [f"router-{k}.pop{k % 7}" for k in range(2000)]
    for n in (1, 2, 3, 8):
        counts = [0] * n
        for name in names:
            s = shard_of(name, n)
            assert s == zlib.crc32(name.encode()) % n  # stable across processes and hosts
            counts[s] += 1
        assert sum(counts) == len(names) and min(counts) > 0.8 * len(names) / n, counts
    with pytest.raises(ValueError):
        Engine(Store("sqlite://"), LinkPool(0.2), shard=(2, 2))


def test_an_engine_polices_only_its_shard(tmp_path: Any) -> None:
    """Two engines, shards 0 and 1 of 2, on one database: each polls (and marks unreachable) only its
    own routers (nobody answers on these endpoints)."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    store = Store(url)
    names = _names(4, 2, 0) + _names(4, 2, 1)
    for k, name in enumerate(names):
        store.add_router(name, f"tcp://127.0.0.1:{20000 + k}", 1e5, "auto", None, "t")
    try:
        for shard in (0, 1):
            e = Engine(Store(url), LinkPool(0.2), period_s=0.5, shard=(shard, 2))
            try:
                e.run_cycle(wait=True)
            finally:
                e.stop()  # closes its link pool
            status = {r["name"]: r["status"] for r in store.list_routers()}
            mine = [n for n in names if shard_of(n, 2) == shard]
            assert all(status[n] == "unreachable" for n in mine), status
            if shard == 0:
                assert all(status[n] == "unknown" for n in names if n not in mine), status
    finally:
        store.close()


def test_each_shard_has_its_own_epoch(db_url: str) -> None:
    a0, a1, b0 = Store(db_url), Store(db_url), Store(db_url)
    a0.add_router("r", "tcp://127.0.0.1:1", 1000.0, "auto", None, "t")
    assert a0.take_leadership("hostA:1", (0, 2)) == 1
    assert a1.take_leadership("hostA:1", (1, 2)) == 1
    a0.save_plan("r", ActivationState(True, None), 10.0, {}, [])
    assert b0.take_leadership("hostB:2", (0, 2)) == 2  # shard 0 handed over, shard 1 not
    with pytest.raises(NotLeader):
        a0.save_plan("r", ActivationState(False, None), 20.0, {}, [])
    a1.save_plan("r", ActivationState(False, None), 30.0, {}, [])  # shard 1's leader is still A
    hand = [x["detail"] for x in b0.list_actions(kind="leader_changed")]
    assert hand == [{"leader": "hostA:1", "previous": None, "epoch": 1, "shard": "0/2"},
                    {"leader": "hostA:1", "previous": None, "epoch": 1, "shard": "1/2"},
                    {"leader": "hostB:2", "previous": "hostA:1", "epoch": 2, "shard": "0/2"}]
    for s in (a0, a1, b0):
        s.close()


def test_shard_locks_exclude_another_layout(pg_cluster: Any) -> None:
    url = pg_cluster.new_database()
    Store(url).close()
    s0, s1 = LeaderLock(url, (0, 2)), LeaderLock(url, (1, 2))
    assert s0.try_acquire() and s1.try_acquire()
    other0 = LeaderLock(url, (0, 2))
    assert not other0.try_acquire() and other0.conflict is None  # the same layout: simply taken
    one = LeaderLock(url)
    three = LeaderLock(url, (2, 3))
    assert not one.try_acquire() and "engine.shards" in (one.conflict or "")
    assert not three.try_acquire() and "engine.shards" in (three.conflict or "")
    s0.close()
    assert not one.try_acquire()  # shard 1 of 2 still leads
    s1.close()
    wait_for(one.try_acquire, 2.0, "the one engine's lock once no shard leads", step_s=0.02)
    assert not s0.try_acquire() and "engine.shards" in (s0.conflict or "")
    for lk in (one, three, other0, s0):
        lk.close()


@pytest.mark.parametrize("policer_db", ["sqlite"])  # PostgreSQL: the take-over test below
def test_two_shards_police_every_router(make_daemon: Any, make_policer: Any) -> None:
    ra, rb = _names(1, 2, 0)[0], _names(1, 2, 1)[0]
    setpoints = {ra: {"a1": 21000.0, "a2": 9000.0}, rb: {"b1": 17000.0}}
    daemons = {r: make_daemon(r, [{"name": v, **TCP} for v in sps]) for r, sps in setpoints.items()}
    pol = make_policer(period_s=0.5, extra_config="shards = 2\n")
    pol.call("PUT", "/policies/misbehaviour", json={"enabled": False})
    for r, d in daemons.items():
        pol.call("POST", "/routers", json={"name": r, "endpoint": d.endpoint, "capacity_pps": 100000, "control_mode": "on"})
    wait_for(lambda: len(pol.get("/vrs")) == 3, 10, "three VRs reported")
    for r, sps in setpoints.items():
        for v, sp in sps.items():
            pol.call("PUT", f"/vrs/{r}/{v}/setpoint", json={"setpoint_pps": sp})

    def held() -> bool:
        return all(all(v["state"] == "active" and v["setpoint_pps"] == setpoints[r][n] for n, v in d.vrs().items())
                   for r, d in daemons.items())
    wait_for(held, 15, "both routers' daemons holding the manual setpoints")
    # a cycle's time is known once the next has started, and shard 1 starts its cycles half a period
    # after shard 0's
    wait_for(lambda: pol.get("/health").get("cycle_ms") is not None, 5, "a policy cycle of every shard timed")
    h = pol.get("/health")
    assert h["leader"] is True and [s["shard"] for s in h["shards"]] == [0, 1], h
    assert all(s["leader"] and s["cycles"] > 0 for s in h["shards"]), h
    assert h["cycle_ms"]["max"] < 1000 * 0.5 * 4, h
    # /metrics: every shard's cycles in the histogram (relayed from the engine processes to the worker)
    from prometheus_client.parser import text_string_to_metric_families

    assert pol.http is not None
    text = pol.http.get("/metrics").text
    (fam,) = [f for f in text_string_to_metric_families(text) if f.name == "xtc_policer_cycle_seconds"]
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    count = got[("xtc_policer_cycle_seconds_count", None)]
    assert count >= 2 and got[("xtc_policer_cycle_seconds_bucket", "+Inf")] == count, got
    assert 0 < got[("xtc_policer_cycle_seconds_sum", None)] < count * 0.5 * 4, got

    # and the links' counters, summed over the shards: one kept connection to each router's daemon
    def links() -> dict[str, float]:
        text = pol.http.get("/metrics").text
        return {s.name: s.value for f in text_string_to_metric_families(text) if f.name.startswith("xtc_policer_link_")
                for s in f.samples}
    wait_for(lambda: links().get("xtc_policer_link_connections") == 2, 5, "both shards' links reported")
    got = links()
    assert got["xtc_policer_link_connects_total"] >= 2 and got["xtc_policer_link_socket_errors_total"] == 0, got


@pytest.mark.parametrize("policer_db", ["postgresql"])
def test_a_standby_takes_every_shard_and_another_layout_never_leads(make_daemon: Any, make_policer: Any) -> None:
    r0 = _names(1, 2, 0)[0]
    d = make_daemon(r0, [{"name": "v1", **TCP}])
    p1 = make_policer(period_s=0.5, extra_config="shards = 2\n")
    wait_for(lambda: all(s["leader"] for s in p1.get("/health")["shards"]), 10, "the first policer to lead both shards")
    # A policer that splits the routers otherwise (one engine) stays a standby while p1 leads.
    p3 = make_policer(period_s=0.5)
    time.sleep(2.5)  # a standby tries every second
    h3 = p3.get("/health")
    assert h3["leader"] is False and h3["engine_cycles"] == 0, h3
    p3.stop()
    p2 = make_policer(period_s=0.5, extra_config="shards = 2\n")
    p2.call("POST", "/routers", json={"name": r0, "endpoint": d.endpoint, "capacity_pps": 100000, "control_mode": "on"})
    wait_for(lambda: len(p2.get("/vrs")) == 1, 10, "the VR reported")
    p2.call("PUT", f"/vrs/{r0}/v1/setpoint", json={"setpoint_pps": 15000.0})
    wait_for(lambda: d.vrs()["v1"]["setpoint_pps"] == 15000.0, 10, "the setpoint held")
    assert not any(s["leader"] for s in p2.get("/health")["shards"])
    assert p1.proc is not None and p2.proc is not None
    t0 = time.monotonic()
    os.kill(p1.proc.pid, signal.SIGKILL)
    p1.proc.wait(5)
    wait_for(lambda: all(s["leader"] and s["cycles"] > 0 for s in p2.get("/health")["shards"]), 10,
             "the standby to run both shards", step_s=0.05)
    takeover_s = time.monotonic() - t0
    print(f"\nboth shards taken over {takeover_s:.2f} s after SIGKILL")
    assert takeover_s < 5.0
    hand = [(a["detail"]["shard"], int(a["detail"]["leader"].rsplit(":", 1)[1]))
            for a in p2.get("/actions", params={"kind": "leader_changed", "limit": 1000})]
    assert sorted(hand) == sorted([("0/2", p1.proc.pid), ("1/2", p1.proc.pid), ("0/2", p2.proc.pid), ("1/2", p2.proc.pid)])
    time.sleep(1.5)
    assert d.vrs()["v1"]["setpoint_pps"] == 15000.0


def test_shards_start_their_cycles_spread_over_the_period() -> None:
    """Shard ``i`` of ``n`` starts its cycles ``i / n`` of a period after shard 0's, on the monotonic
    clock every process shares: the shards take turns instead of all planning at once
    (docs/results/2026-11-26-policer/policer.md, "Shards take turns")."""
    period = 2.0
    starts = {i: Engine(None, None, period_s=period, shard=(i, 4))._next_start(10.1) for i in range(4)}
    assert starts == pytest.approx({0: 12.0, 1: 10.5, 2: 11.0, 3: 11.5})
    one = Engine(None, None, period_s=period, shard=(1, 4))
    assert one._next_start(10.5) == pytest.approx(10.5)  # on the phase: now
    assert one._next_start(12.4) == pytest.approx(12.5)
    assert Engine(None, None, period_s=period).cycle_phase_s() == 0.0
