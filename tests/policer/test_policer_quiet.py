"""The policy's arithmetic over a batch's arrays (:mod:`xtc.policer.quiet`) against the per-VR planner, on
seeded random fleets: every router the arrays call quiet is one :func:`~xtc.policer.planner.plan_router`
plans to nothing (no command, no event, no state saved but its demand, the same demand), and the arrays
find most of the routers whose rates merely moved.  Pure: no sockets, no database, no clock."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fakes.engine_run import run_engine

from xtc.policer.engine import _not_after, _vr_changes, _vr_obs, _vr_policy
from xtc.policer.planner import RouterInput, Settings, plan_router
from xtc.policer.policy import (
    ActivationParams,
    ActivationState,
    AllocationParams,
    Claim,
    MisbehaviourParams,
    weighted_max_min,
)
from xtc.policer.quiet import quiet_routers, shares_pps
from xtc.policer.store import STATE_COLS, Store, VrRow


def _vr(rng: random.Random, i: int, cap: float, k: int) -> VrRow:
    rate = rng.uniform(0, 2.5 * cap / max(k, 1))
    fwd = rate * rng.uniform(0.3, 1.0)
    row = {c: None for c in STATE_COLS}
    row.update(name=f"vr{i:02d}", present=int(rng.random() > 0.05), state="inactive", punish_level=0,
               forwarded_pps=None if rng.random() < 0.03 else fwd,
               offered_pps=None if rng.random() < 0.03 else rate * rng.choice([1.0] * 16 + [1.2, 1.2, 1.2, 3.0]),
               saturated=rng.choice([None, None, None, "cap_max", "cap_min", "cap_slack"]),
               sla_weight=rng.choice([None, None, 0.5, 2.0, 4.0]),
               sla_min_pps=rng.choice([None, None, 0.0, cap / 100]),
               manual_setpoint_pps=rng.choice([None] * 12 + [cap / 40]), punish_vr_off=rng.choice([None, 0, 1]))
    row["sla_max_pps"] = rng.choice([None, None, (row["sla_min_pps"] or 0.0) + cap / 10])
    return VrRow(**row)


def _router(rng: random.Random, vrs: int | None = None) -> dict[str, Any]:
    cap = rng.uniform(1e5, 5e6)
    k = rng.choice([0, 1, 3, 16, 16, 16, 30]) if vrs is None else vrs
    return {"capacity_pps": cap, "control_mode": rng.choice(["auto", "auto", "auto", "on", "off"]),
            "on": rng.random() < 0.5, "pending": None, "rows": {r.name: r for r in (_vr(rng, i, cap, k) for i in range(k))}}


def _settings(rng: random.Random) -> Settings:
    return Settings(activation_enabled=rng.random() > 0.1, activation=ActivationParams(hold_s=rng.choice([0.0, 2.0, 5.0])),
                    allocation_enabled=rng.random() > 0.1,
                    allocation=AllocationParams(hysteresis=rng.choice([0.0, 0.1, 0.1, 0.3])),
                    misbehaviour_enabled=rng.random() > 0.1,
                    misbehaviour=MisbehaviourParams(hold_s=rng.choice([0.0, 3.0, 8.0]), min_excess_pps=rng.choice([0.0, 5000.0])))


def _plan(settings: Settings, rt: dict[str, Any], now: float) -> Any:
    act = rt["act"]
    rin = RouterInput(name="r", capacity_pps=rt["capacity_pps"], control_mode=rt["control_mode"], activation=act,
                      vrs={n: _vr_obs(row) for n, row in rt["rows"].items()},
                      policies={n: _vr_policy(row, now) for n, row in rt["rows"].items()})
    return plan_router(settings, rin, now)


def _apply(rt: dict[str, Any], plan: Any, changes: dict[str, dict[str, Any]]) -> None:
    """The plan saved (as the store does) and carried out by a daemon that obeys: the next period's inputs."""
    rt["act"] = plan.activation
    for n, d in changes.items():
        ms = d["misbehaviour"]
        rt["rows"][n] = rt["rows"][n]._replace(
            derived_setpoint_pps=d["derived_setpoint_pps"], wanted_state=d["wanted_state"],
            wanted_setpoint_pps=d["wanted_setpoint_pps"], punish_level=ms.level, punish_bad_since_s=ms.bad_since_s,
            punish_good_since_s=ms.good_since_s, punish_base_pps=d["punish_base_pps"])
    for n, row in rt["rows"].items():
        if row.present and row.wanted_state is not None:
            rt["rows"][n] = row._replace(state=row.wanted_state, daemon_setpoint_pps=row.wanted_setpoint_pps)


def _jitter(rng: random.Random, rt: dict[str, Any], by: float) -> None:
    for n, row in rt["rows"].items():
        rt["rows"][n] = row._replace(**{k: getattr(row, k) * (1 + rng.uniform(-by, by))
                                        for k in ("forwarded_pps", "offered_pps") if getattr(row, k) is not None})


def _fleet(seed: int, routers: int, settings: Settings | None = None,
           vrs: int | None = None) -> tuple[Settings, list[dict[str, Any]], float]:
    """Routers whose plans have settled (planned and obeyed for a few periods), then their rates moved by 5%;
    ``vrs`` VRs each (None: 0 to 30, mixed)."""
    rng = random.Random(seed)
    settings = _settings(rng) if settings is None else settings
    fleet = [_router(rng, vrs) for _ in range(routers)]
    now = 1000.0
    for rt in fleet:
        rt["act"] = ActivationState(rt.pop("on"), rt.pop("pending"))
    for _ in range(4):
        now += 1.0
        for rt in fleet:
            plan = _plan(settings, rt, now)
            _apply(rt, plan, _vr_changes(plan, rt["rows"]))
    now += 1.0
    for rt in fleet:
        _jitter(rng, rt, 0.05)
    return settings, fleet, now


@pytest.mark.parametrize("vrs", [None, 16], ids=["mixed", "16-each"])
def test_every_router_the_arrays_call_quiet_is_planned_to_nothing_with_the_same_demand(vrs: int | None) -> None:
    # 16-each: every router of the batch has as many VRs, the arrays' shortcut (the columns reshaped)
    quiet_n = nothing_n = total = 0
    for seed in range(12):
        settings, fleet, now = _fleet(seed, 60, vrs=vrs)
        acts = [replace(rt["act"], pending_since_s=_not_after(rt["act"].pending_since_s, now)) for rt in fleet]
        quiet, demand = quiet_routers(settings, [(rt["capacity_pps"], rt["control_mode"], a.on, a.pending_since_s,
                                                  rt["rows"]) for rt, a in zip(fleet, acts)], now)
        for i, (rt, act) in enumerate(zip(fleet, acts)):
            rt["act"] = act
            plan = _plan(settings, rt, now)
            nothing = not plan.commands and not plan.events and plan.activation == act and not _vr_changes(plan, rt["rows"])
            total += 1
            nothing_n += nothing
            if quiet[i]:
                quiet_n += 1
                assert nothing, (seed, i, plan)
                assert demand[i] == plan.demand_pps, (seed, i, demand[i], plan.demand_pps)
    # Not a vacuous screen: it finds most of the plans that change nothing.
    assert quiet_n >= 0.6 * nothing_n and nothing_n >= 0.3 * total, (quiet_n, nothing_n, total)


def test_a_batch_of_routers_with_as_many_vrs_each_is_screened_as_a_mixed_one() -> None:
    """The shortcut for a batch whose routers all have k VRs (each column reshaped, no scatter) answers what
    the general path does: the same batch with a router of no VRs appended takes the general path."""
    said = []
    for seed in range(6):
        settings, fleet, now = _fleet(seed, 40, vrs=16)
        args = [(rt["capacity_pps"], rt["control_mode"], rt["act"].on, _not_after(rt["act"].pending_since_s, now),
                 rt["rows"]) for rt in fleet]
        quiet, demand = quiet_routers(settings, args, now)
        quiet2, demand2 = quiet_routers(settings, [*args, (1e6, "auto", False, None, {})], now)
        assert quiet.tolist() == quiet2[:-1].tolist(), seed
        np.testing.assert_array_equal(demand, demand2[:-1])
        said += quiet.tolist()
    assert 0.2 * len(said) < sum(said) < len(said), sum(said)  # both answers among them


def test_a_quiet_fleet_turns_busy_where_a_vr_misbehaves_or_the_daemon_lost_its_setpoint() -> None:
    settings, fleet, now = _fleet(99, 40, Settings())
    args = lambda: [(rt["capacity_pps"], rt["control_mode"], rt["act"].on, rt["act"].pending_since_s, rt["rows"])
                    for rt in fleet]
    quiet, _ = quiet_routers(settings, args(), now)
    i = next(i for i, (q, rt) in enumerate(zip(quiet, fleet)) if q and any(
        r.present and r.state == "active" for r in rt["rows"].values()))
    rt = fleet[i]
    n = next(n for n, r in rt["rows"].items() if r.present and r.state == "active")
    rt["rows"][n] = rt["rows"][n]._replace(daemon_setpoint_pps=rt["rows"][n].daemon_setpoint_pps * 1.5)
    assert not quiet_routers(settings, args(), now)[0][i]
    assert any(c.cmd == "setpoint" for c in _plan(settings, rt, now).commands)


def test_shares_are_weighted_max_min_for_many_hosts_at_once() -> None:
    rng = np.random.default_rng(50)
    for _ in range(40):
        r, k = 30, int(rng.integers(1, 20))
        w = rng.choice([0.5, 1.0, 2.0, 3.0], size=(r, k))
        lo = np.where(rng.random((r, k)) < 0.5, 0.0, rng.uniform(0, 1e4, (r, k)))
        hi = np.where(rng.random((r, k)) < 0.3, np.inf, lo + rng.uniform(0, 1e5, (r, k)))
        dem = np.where(rng.random((r, k)) < 0.3, np.nan, rng.uniform(0, 2e5, (r, k)))
        claim = rng.random((r, k)) < 0.9
        cap = rng.uniform(0, 1e6, r)
        upper = np.maximum(lo, np.where(np.isnan(dem), hi, np.minimum(hi, dem)))
        got = shares_pps(cap, w, lo, upper, claim)
        for i in range(r):
            claims = [Claim(f"c{j:02d}", float(w[i, j]), float(lo[i, j]), float(hi[i, j]),
                            None if math.isnan(dem[i, j]) else float(dem[i, j])) for j in range(k) if claim[i, j]]
            want = weighted_max_min(float(cap[i]), claims)
            for c in claims:
                j = int(c.key[1:])
                assert math.isclose(got[i, j], want[c.key], rel_tol=1e-9, abs_tol=1e-6), (i, j, got[i, j], want[c.key])


def test_the_engine_records_a_quiet_plan_as_the_planner_would_and_plans_a_busy_one(one_router_engine: Any) -> None:
    """A real engine over real sockets: rates that move by 2% are quiet (no command, the policy state as
    it was, the new demand saved); a tripled rate is planned and its setpoint pushed."""
    _, store, eng, d, tick = one_router_engine(2.0, 3)
    store.set_policy("misbehaviour", {"enabled": False, "ratio": 1.5, "min_excess_pps": 5000.0, "hold_s": 3.0,
                                      "restore_hold_s": 5.0, "step_factor": 0.5}, "test")
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    tick(4)
    assert all(v.state == "active" for v in d.vrs.values())
    sent, quiet = sum(d.commands.values()), eng.plans_quiet
    before = store.router_state(d.name)[1]
    for k in range(3):
        for v in d.vrs.values():
            v.offered_pps *= 1.02 if k % 2 == 0 else 1 / 1.02
        tick(1)
    assert eng.plans_quiet == quiet + 3, "rates within the hysteresis were not found quiet"
    assert sum(d.commands.values()) == sent
    after = store.router_state(d.name)[1]
    policy_cols = ("derived_setpoint_pps", "wanted_state", "wanted_setpoint_pps", "punish_level")
    assert {n: [getattr(r, c) for c in policy_cols] for n, r in after.items()} == \
        {n: [getattr(r, c) for c in policy_cols] for n, r in before.items()}
    demand = sum(max(r.offered_pps, r.forwarded_pps) for r in after.values())
    assert store.get_router(d.name)["demand_pps"] == demand
    v0 = d.vrs["vr0"]
    old_sp = v0.setpoint_pps
    v0.offered_pps *= 3
    tick(1)
    assert eng.plans_quiet == quiet + 3
    assert v0.setpoint_pps is not None and v0.setpoint_pps > 2 * old_sp


def test_a_quiet_plans_demand_is_a_measurement_live_and_written_by_the_snapshot(one_router_engine: Any) -> None:
    """A router's demand moves with every measurement: a quiet plan writes nothing (no row, no revision); the
    engine's process shows the new demand live, another process (the API's, which measures nothing) the last
    snapshot's, until the next snapshot writes it.  A plan that decides something saves its demand with it."""
    _, store, eng, d, tick = one_router_engine(2.0, 3)
    store.set_policy("misbehaviour", {"enabled": False, "ratio": 1.5, "min_excess_pps": 5000.0, "hold_s": 3.0,
                                      "restore_hold_s": 5.0, "step_factor": 0.5}, "test")
    store.add_router(d.name, d.endpoint, 1e7, "on", None, "test")
    tick(4)
    store.snapshot()
    other = Store(store.url)  # a process that measures nothing: the database's values
    try:
        rev = other._read("SELECT rev FROM routers WHERE name=?", (d.name,))[0]["rev"]
        written = other.get_router(d.name)["demand_pps"]
        quiet = eng.plans_quiet
        for k in range(3):
            for v in d.vrs.values():
                v.offered_pps *= 1.02 if k % 2 == 0 else 1 / 1.02
            tick(1)
        assert eng.plans_quiet == quiet + 3
        rows = store.router_state(d.name)[1]
        demand = sum(max(r.offered_pps, r.forwarded_pps) for r in rows.values())
        assert demand != written
        live = store.get_router(d.name)
        assert live["demand_pps"] == demand and live["measured_from"] == "live"
        assert other.get_router(d.name)["demand_pps"] == written, "a quiet plan wrote its demand"
        assert other._read("SELECT rev FROM routers WHERE name=?", (d.name,))[0]["rev"] == rev
        store.snapshot()
        assert other.get_router(d.name)["demand_pps"] == demand
        # A plan that decides (a tripled rate: a new setpoint) saves its demand at once.
        d.vrs["vr0"].offered_pps *= 3
        tick(1)
        rows = store.router_state(d.name)[1]
        assert other.get_router(d.name)["demand_pps"] == sum(max(r.offered_pps, r.forwarded_pps)
                                                              for r in rows.values())
    finally:
        other.close()


def test_an_engine_with_the_arrays_writes_sends_and_audits_what_one_without_them_does(tmp_path: Any, monkeypatch: Any) -> None:
    import xtc.policer.engine as engine_mod

    quiet_on = run_engine(tmp_path, "arrays", 40)
    monkeypatch.setattr(engine_mod, "quiet_columns", lambda settings, heads, counts, cols, now: (
        np.zeros(len(heads), dtype=bool), np.full(len(heads), np.nan)))
    quiet_off = run_engine(tmp_path, "per-vr", 40)
    (a, eng_a, links_a), (b, eng_b, links_b) = quiet_on, quiet_off
    assert eng_a.plans_quiet > 0.6 * eng_a.planned and eng_b.plans_quiet == 0, (eng_a.plans_quiet, eng_a.planned)
    assert eng_a.planned == eng_b.planned
    assert len(links_a.sent) > 100 and links_a.sent == links_b.sent  # the same commands, in the same order
    assert a.list_routers() == b.list_routers()  # demand, activation, status
    assert a.list_vrs() == b.list_vrs()  # policy state, wanted state, setpoints, measurements
    acts = a.list_actions(limit=100000)
    assert len(acts) > 100 and acts == b.list_actions(limit=100000)  # the audit log
    assert {x["kind"] for x in acts} >= {"activate", "setpoint", "punish"}
    for name in ("r00", "r07"):
        assert a.router_state(name) == b.router_state(name)


def _sum_312(xs: list[float]) -> float:
    """CPython 3.12+'s sum() of floats (Objects/bltinmodule.c: Neumaier's compensated summation)."""
    total, comp = 0.0, 0.0
    for x in xs:
        t = total + x
        comp += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
        total = t
    return total + comp if comp and math.isfinite(comp) else total


def test_the_hosts_demand_is_summed_as_this_interpreter_sums(monkeypatch: Any) -> None:
    import sys

    from xtc.policer.quiet import _python_sum

    rng = np.random.default_rng(3)
    terms = rng.choice([0.0, 1e-3, 0.1, 1.0, 3e4, 1e16], size=(200, 16)) * rng.random((200, 16))
    assert _python_sum(terms).tolist() == [sum(row) for row in terms.tolist()]  # this interpreter's
    if sys.version_info >= (3, 12):  # the transcription below is the interpreter's own, where it is one
        assert [_sum_312(row) for row in terms.tolist()] == [sum(row) for row in terms.tolist()]
    monkeypatch.setattr(sys, "version_info", (3, 12, 0))
    assert _python_sum(terms).tolist() == [_sum_312(row) for row in terms.tolist()]
