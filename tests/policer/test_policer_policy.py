"""Pure tests of the policer's policies: allocation properties, activation hysteresis, punishment steps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.policer.planner import RouterInput, Settings, VrObs, VrPolicy, plan_router
from xtc.policer.policy import (
    LIMIT_LEVEL,
    MAX_LEVEL,
    OFF_LEVEL,
    PAUSE_LEVEL,
    ActivationParams,
    ActivationState,
    AllocationParams,
    Claim,
    MisbehaviourParams,
    MisbehaviourState,
    PolicyError,
    activation_step,
    misbehaviour_step,
    weighted_max_min,
)

EPS = 1e-6


@st.composite
def claim_sets(draw: st.DrawFn) -> tuple[float, list[Claim]]:
    n = draw(st.integers(1, 8))
    claims = []
    for i in range(n):
        lo = draw(st.floats(0, 50_000))
        hi = draw(st.one_of(st.just(math.inf), st.floats(lo, 200_000)))
        w = draw(st.floats(0.1, 10))
        d = draw(st.one_of(st.none(), st.floats(0, 200_000)))
        claims.append(Claim(f"vr{i}", w, lo, hi, d))
    cap = draw(st.floats(0, 500_000))
    return cap, claims


@settings(max_examples=300, deadline=None)
@given(claim_sets())
def test_weighted_max_min_properties(case: tuple[float, list[Claim]]) -> None:
    cap, claims = case
    x = weighted_max_min(cap, claims)
    assert set(x) == {c.key for c in claims}
    total = sum(x.values())
    tol = EPS * max(1.0, cap)
    assert total <= cap + tol
    total_min = sum(c.min_pps for c in claims)
    by = {c.key: c for c in claims}
    if total_min <= cap:
        for k, v in x.items():
            assert v >= by[k].min_pps - tol, "a feasible minimum is honoured"
            assert v <= by[k].upper_pps() + tol, "no share above max / demand"
        if total < cap - tol:
            # Work conservation: capacity is left over only when every VR is at its ceiling.
            for k, v in x.items():
                assert v >= by[k].upper_pps() - tol
        # Weighted max-min: a VR below its ceiling has at least the weighted share of any VR above its floor.
        for i, ci in by.items():
            for j, cj in by.items():
                if x[i] < ci.upper_pps() - tol and x[j] > cj.min_pps + tol:
                    assert x[i] / ci.weight >= x[j] / cj.weight - 1e-6 * max(1.0, x[j] / cj.weight)
    else:
        # Minimums do not fit: scaled in proportion, all of the capacity used.
        assert total == pytest.approx(cap, rel=1e-9, abs=1e-9)
        for k, v in x.items():
            assert v == pytest.approx(by[k].min_pps * cap / total_min, rel=1e-9, abs=1e-9)


def test_weighted_max_min_examples() -> None:
    # Equal weights, no limits: equal shares.
    x = weighted_max_min(90_000, [Claim("a"), Claim("b"), Claim("c")])
    assert x == pytest.approx({"a": 30_000, "b": 30_000, "c": 30_000})
    # Weights 1:2, one capped by its demand: the other takes the rest.
    x = weighted_max_min(90_000, [Claim("a", 1, demand_pps=10_000), Claim("b", 2), Claim("c", 1)])
    assert x == pytest.approx({"a": 10_000, "b": 80_000 * 2 / 3, "c": 80_000 / 3})
    # A minimum above the fair share is honoured.
    x = weighted_max_min(90_000, [Claim("a", 1, min_pps=50_000), Claim("b"), Claim("c")])
    assert x == pytest.approx({"a": 50_000, "b": 20_000, "c": 20_000})
    # Everyone below capacity: all at their maximum, capacity left over.
    x = weighted_max_min(90_000, [Claim("a", max_pps=10_000), Claim("b", max_pps=5_000)])
    assert x == pytest.approx({"a": 10_000, "b": 5_000})


@pytest.mark.parametrize(
    "cap, claims, msg",
    [
        (-1.0, [Claim("a")], "capacity_pps"),
        (math.nan, [Claim("a")], "capacity_pps"),
        (1.0, [Claim("a"), Claim("a")], "twice"),
        (1.0, [Claim("a", weight=0)], "weight"),
        (1.0, [Claim("a", min_pps=5, max_pps=4)], "below min_pps"),
        (1.0, [Claim("a", demand_pps=-1)], "demand_pps"),
        # floats, as the planner gives them (the checks' quick path must let none of these through)
        (1.0, [Claim("a", weight=0.0)], "weight"),
        (1.0, [Claim("a", weight=math.inf)], "weight"),
        (1.0, [Claim("a", weight=math.nan)], "weight"),
        (1.0, [Claim("a", min_pps=-0.5)], "min_pps"),
        (1.0, [Claim("a", min_pps=math.nan)], "min_pps"),
        (1.0, [Claim("a", min_pps=math.inf)], "min_pps"),
        (1.0, [Claim("a", min_pps=5.0, max_pps=4.0)], "below min_pps"),
        (1.0, [Claim("a", max_pps=math.nan)], "max_pps"),
        (1.0, [Claim("a", max_pps=True)], "max_pps"),  # type: ignore[arg-type]
        (1.0, [Claim("a", demand_pps=-1.0)], "demand_pps"),
        (1.0, [Claim("a", demand_pps=math.inf)], "demand_pps"),
        (1.0, [Claim("a", demand_pps=math.nan)], "demand_pps"),
        (1.0, [Claim("a", weight=True)], "weight"),  # type: ignore[arg-type]
        (math.inf, [Claim("a")], "capacity_pps"),
    ],
)
def test_weighted_max_min_refuses_bad_input(cap: float, claims: list[Claim], msg: str) -> None:
    with pytest.raises(PolicyError, match=msg):
        weighted_max_min(cap, claims)


def test_activation_hysteresis() -> None:
    p = ActivationParams(on_fraction=0.9, off_fraction=0.7, hold_s=2.0)
    s = ActivationState()
    cap = 100_000.0
    s, sw = activation_step(p, s, 95_000, cap, 0.0)
    assert sw is None and not s.on and s.pending_since_s == 0.0
    s, sw = activation_step(p, s, 95_000, cap, 1.0)
    assert sw is None and not s.on
    s, sw = activation_step(p, s, 95_000, cap, 2.0)
    assert sw is True and s.on
    # Between the thresholds nothing changes, however long.
    for t in range(3, 20):
        s, sw = activation_step(p, s, 80_000, cap, float(t))
        assert sw is None and s.on
    # A dip below off that does not last is forgiven.
    s, sw = activation_step(p, s, 50_000, cap, 20.0)
    s, sw = activation_step(p, s, 80_000, cap, 21.0)
    assert s.pending_since_s is None
    s, sw = activation_step(p, s, 50_000, cap, 22.0)
    s, sw = activation_step(p, s, 50_000, cap, 24.0)
    assert sw is False and not s.on
    with pytest.raises(PolicyError):
        ActivationParams(on_fraction=0.5, off_fraction=0.7)
    with pytest.raises(PolicyError):
        activation_step(p, s, 1.0, 0.0, 0.0)


def test_misbehaviour_steps_and_restore() -> None:
    p = MisbehaviourParams(ratio=1.5, min_excess_pps=5000, hold_s=2.0, restore_hold_s=3.0, step_factor=0.5)
    s = MisbehaviourState()
    levels = []
    for t in range(0, 12):
        s, ev = misbehaviour_step(p, s, 100_000, 30_000, float(t))
        levels.append((s.level, ev))
    assert [lv for lv, _ in levels] == [0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3]
    assert sum(ev == "punish" for _, ev in levels) == PAUSE_LEVEL  # the top, unless VR-off is enabled
    # Small excess is not misbehaviour (min_excess_pps), nor is a low ratio.
    s2, ev = misbehaviour_step(p, MisbehaviourState(), 4000, 1000, 0.0)
    assert s2.bad_since_s is None and ev is None
    # No measurement: nothing changes.
    assert misbehaviour_step(p, s, None, 1.0, 100.0) == (s, None)
    # Good behaviour for restore_hold_s restores at once.
    s, ev = misbehaviour_step(p, s, 30_000, 29_000, 20.0)
    assert ev is None and s.level == 3
    s, ev = misbehaviour_step(p, s, 30_000, 29_000, 22.0)
    assert ev is None
    s, ev = misbehaviour_step(p, s, 30_000, 29_000, 23.0)
    assert ev == "restore" and s == MisbehaviourState()


def _rin(vrs: dict[str, VrObs], pols: dict[str, VrPolicy] | None = None, on: bool = True, mode: str = "auto") -> RouterInput:
    return RouterInput("r1", 120_000, mode, ActivationState(on), vrs, pols or {})


def test_plan_activates_and_allocates() -> None:
    st_ = Settings(activation=ActivationParams(hold_s=0.0))
    vrs = {n: VrObs(n, True, "inactive", None, 40_000, 50_000) for n in ("a", "b", "c")}
    plan = plan_router(st_, _rin(vrs, on=False), 0.0)
    assert plan.control_on and plan.events[0].kind == "control_on"
    sps = {c.vr: c.setpoint_pps for c in plan.commands}
    assert [c.cmd for c in plan.commands] == ["activate"] * 3
    assert sum(sps.values()) == pytest.approx(120_000 * 0.9)
    # The daemon now holds those setpoints: nothing to send.
    vrs2 = {n: VrObs(n, True, "active", sps[n], 36_000, 50_000) for n in vrs}
    plan2 = plan_router(st_, _rin(vrs2, plan.policies, on=True), 1.0)
    assert plan2.commands == []
    # Forced off: every instance is deactivated.
    plan3 = plan_router(st_, _rin(vrs2, plan.policies, on=True, mode="off"), 2.0)
    assert [c.cmd for c in plan3.commands] == ["deactivate"] * 3


def test_plan_punishes_then_pauses_then_restores() -> None:
    mp = MisbehaviourParams(hold_s=1.0, restore_hold_s=2.0)
    st_ = Settings(activation_enabled=False, misbehaviour=mp)
    pols = {n: VrPolicy(derived_setpoint_pps=36_000) for n in ("a", "b", "c")}
    t = 0.0
    seen = []
    sp_c = 36_000.0
    state_c = "active"
    for _ in range(8):
        vrs = {"a": VrObs("a", True, "active", 36_000, 36_000, 37_000),
               "b": VrObs("b", True, "active", 36_000, 36_000, 37_000),
               "c": VrObs("c", True, state_c, sp_c, sp_c, 100_000)}
        plan = plan_router(st_, _rin(vrs, pols, mode="on"), t)
        pols = plan.policies
        for c in plan.commands:
            if c.vr == "c":
                seen.append(c.cmd)
                if c.setpoint_pps is not None:
                    sp_c = c.setpoint_pps
                if c.cmd == "pause":
                    state_c = "paused"
        t += 1.0
    assert pols["c"].misbehaviour.level == PAUSE_LEVEL
    assert seen.count("setpoint") >= 2 and "pause" in seen
    assert seen.count("early_drop") == 1 and "vr_off" not in seen  # the limiter step, once; no VR-off here
    assert sp_c == pytest.approx(36_000 * 0.25)
    # The freed capacity went to the others.
    assert pols["a"].derived_setpoint_pps > 36_000
    # c backs off: restored after restore_hold_s, resumed at a full share.
    for _ in range(4):
        vrs["c"] = VrObs("c", True, state_c, sp_c, 9_000, 9_500)
        plan = plan_router(st_, _rin(vrs, pols, mode="on"), t)
        pols = plan.policies
        t += 1.0
        if any(e.kind == "restore" for e in plan.events):
            break
    assert pols["c"].misbehaviour.level == 0
    assert [c.cmd for c in plan.commands if c.vr == "c"][0] == "resume"
    # ... and its early drop back to the daemon's default (no 'on': the daemon's daemon.early_drop)
    assert [c.fields() for c in plan.commands if c.cmd == "early_drop"] == [{"vr": "c"}]


def test_plan_manual_setpoint_and_hysteresis() -> None:
    st_ = Settings(activation_enabled=False, misbehaviour_enabled=False)
    vrs = {n: VrObs(n, True, "active", 30_000, 30_000, 60_000) for n in ("a", "b", "c")}
    pols = {"a": VrPolicy(manual_setpoint_pps=12_000)}
    plan = plan_router(st_, _rin(vrs, pols, mode="on"), 0.0)
    # The manual setpoint is taken out first; the rest shares what is left.
    assert plan.wanted["a"] == ("active", 12_000)
    assert plan.wanted["b"][1] == pytest.approx((108_000 - 12_000) / 2)
    # A small change of the shares (demand noise) does not move the setpoints...
    vrs2 = {**vrs, "c": VrObs("c", True, "active", 30_000, 30_000, 41_000)}  # demand 49.2k, share 48k
    plan2 = plan_router(st_, _rin(vrs2, plan.policies, mode="on"), 1.0)
    assert plan2.wanted["b"] == plan.wanted["b"] and plan2.wanted["c"] == plan.wanted["c"]
    # ... a large one does, and what is kept never exceeds the budget.
    vrs3 = {**vrs, "c": VrObs("c", True, "active", 30_000, 10_000, 10_000)}
    plan3 = plan_router(st_, _rin(vrs3, plan2.policies, mode="on"), 2.0)
    assert plan3.wanted["c"][1] == pytest.approx(12_000)
    # b would get 84 kp/s but its demand (60 kp/s offered, times the 1.2 headroom) caps it.
    assert plan3.wanted["b"][1] == pytest.approx(60_000 * 1.2)
    assert sum(w[1] for w in plan3.wanted.values()) <= 108_000 * (1 + 1e-9)
    # Control off: no instance is wanted, and a missing VR gets no command.
    vrs4 = {**vrs, "c": VrObs("c", False, "active", 30_000, None, None)}
    plan4 = plan_router(st_, _rin(vrs4, plan3.policies, mode="off"), 3.0)
    assert sorted(c.vr for c in plan4.commands if c.cmd == "deactivate") == ["a", "b"]


def test_allocation_counts_a_saturated_vr_at_what_it_forwards() -> None:
    # Three VRs wanting 50 kp/s each share 108 kp/s (0.9 x 120 kp/s): 36 kp/s each.  When the
    # daemon says "a" sits at its largest cap forwarding 20 kp/s (it cannot reach 36), its share
    # shrinks to what it forwards and the other two get the rest; when "a" forwards 45 kp/s at its
    # smallest cap, the others' shares leave room for it.
    st_ = Settings(activation_enabled=False, allocation=AllocationParams(hysteresis=0.0))

    def shares(a: VrObs) -> dict[str, float]:
        vrs = {"a": a, **{n: VrObs(n, True, "active", 36_000, 36_000, 50_000) for n in ("b", "c")}}
        plan = plan_router(st_, _rin(vrs, mode="on"), 0.0)
        return {n: p.derived_setpoint_pps for n, p in plan.policies.items()}

    free = shares(VrObs("a", True, "active", 36_000, 20_000, 50_000))
    assert free == pytest.approx({"a": 36_000, "b": 36_000, "c": 36_000})
    capped = shares(VrObs("a", True, "active", 36_000, 20_000, 50_000, "cap_max"))
    assert capped == pytest.approx({"a": 20_000, "b": 44_000, "c": 44_000})
    # below its setpoint with a cap it does not use up (its TCP flows or its host are the limit)
    slack = shares(VrObs("a", True, "active", 36_000, 20_000, 50_000, "cap_slack"))
    assert slack == capped
    floor = shares(VrObs("a", True, "active", 36_000, 45_000, 50_000, "cap_min"))
    assert floor == pytest.approx({"a": 45_000, "b": 31_500, "c": 31_500})
    assert sum(floor.values()) == pytest.approx(108_000)


def test_the_ladder_climbs_to_vr_off_only_where_enabled() -> None:
    """Issue 48: the last resort (level 4, the VR off) only with ``top_level=OFF_LEVEL`` (its
    network enables it); the limiter step is level 2."""
    p = MisbehaviourParams(ratio=1.5, min_excess_pps=5000, hold_s=1.0, restore_hold_s=3.0, step_factor=0.5)
    assert (LIMIT_LEVEL, PAUSE_LEVEL, OFF_LEVEL, MAX_LEVEL) == (2, 3, 4, 4)
    for top, last in ((PAUSE_LEVEL, 3), (OFF_LEVEL, 4)):
        s = MisbehaviourState()
        for t in range(10):
            s, _ = misbehaviour_step(p, s, 100_000, 30_000, float(t), top)
        assert s.level == last
    # A top below the level (VR-off disabled while a VR was off): it stays, it does not climb.
    s, ev = misbehaviour_step(p, MisbehaviourState(4, 0.0), 100_000, 30_000, 50.0, PAUSE_LEVEL)
    assert s.level == 4 and ev is None


def _climb(st_: Settings, pols: dict[str, VrPolicy], t: float, n: int) -> tuple[list, dict, float, str, float]:
    """``n`` periods of VR c misbehaving (its daemon doing what the commands say); the commands to c."""
    seen: list = []
    sp_c, state_c = 36_000.0, "active"
    for _ in range(n):
        vrs = {"a": VrObs("a", True, "active", 36_000, 36_000, 37_000),
               "c": VrObs("c", True, state_c, sp_c, sp_c, 100_000)}
        plan = plan_router(st_, _rin(vrs, pols, mode="on"), t)
        pols = plan.policies
        for c in plan.commands:
            if c.vr == "c":
                seen.append(c)
                sp_c = c.setpoint_pps or sp_c
                state_c = "paused" if c.cmd == "pause" else state_c
        t += 1.0
        if any(c.cmd == "vr_off" for c in seen):
            break
    return seen, pols, t, state_c, sp_c


def test_plan_turns_the_vr_off_where_allowed_keeps_it_off_and_restarts_the_ladder_when_it_is_back() -> None:
    mp = MisbehaviourParams(hold_s=1.0, restore_hold_s=2.0)
    st_ = Settings(activation_enabled=False, misbehaviour=mp)
    # Not allowed (the default): it stops at the pause; no vr_off is ever sent.
    seen, pols, _, _, _ = _climb(st_, {n: VrPolicy(derived_setpoint_pps=36_000) for n in "ac"}, 0.0, 12)
    assert pols["c"].misbehaviour.level == PAUSE_LEVEL and all(c.cmd != "vr_off" for c in seen)
    # Allowed for its network: after the pause, vr_off with the reason (and the audit record says so).
    pols = {n: VrPolicy(derived_setpoint_pps=36_000, vr_off_allowed=True) for n in "ac"}
    seen, pols, t, _, sp_c = _climb(st_, pols, 0.0, 12)
    cmds = [c.cmd for c in seen]
    assert cmds.index("early_drop") < cmds.index("pause") < cmds.index("vr_off")
    off = seen[-1]
    assert off.cmd == "vr_off" and "misbehaviour level 4" in off.fields()["reason"]
    assert pols["c"].misbehaviour.level == OFF_LEVEL
    # It is off (the daemon lists it, not present): it keeps its level, nothing is sent to it.
    a = VrObs("a", True, "active", 36_000, 36_000, 37_000)
    gone = VrObs("c", False, "paused", sp_c, None, None)
    for _ in range(3):
        plan = plan_router(st_, _rin({"a": a, "c": gone}, pols, mode="on"), t)
        pols, t = plan.policies, t + 1.0
        assert [c for c in plan.commands if c.vr == "c"] == [] and not plan.events
    assert pols["c"].misbehaviour.level == OFF_LEVEL
    # An operator turned it on again (vr_on at its daemon): the ladder starts from the bottom,
    # its instance is resumed and its early drop goes back to the daemon's default.
    back = VrObs("c", True, "paused", sp_c, 1_000, 1_000)
    plan = plan_router(st_, _rin({"a": a, "c": back}, pols, mode="on"), t)
    assert [e.detail.get("reason") for e in plan.events if e.vr == "c"] == ["VR turned on again"]
    assert plan.policies["c"].misbehaviour == MisbehaviourState()
    assert [c.cmd for c in plan.commands if c.vr == "c"][:1] == ["resume"]
    assert [c.fields() for c in plan.commands if c.cmd == "early_drop"] == [{"vr": "c"}]


def test_a_restore_while_the_vr_is_off_turns_it_on() -> None:
    """Control forced off (or the policy disabled) while the VR is off: the restore sends vr_on."""
    st_ = Settings(activation_enabled=False)
    pols = {"c": VrPolicy(derived_setpoint_pps=36_000, vr_off_allowed=True, misbehaviour=MisbehaviourState(OFF_LEVEL))}
    gone = {"c": VrObs("c", False, "paused", 9_000, None, None)}
    plan = plan_router(st_, _rin(gone, pols, mode="off"), 0.0)
    assert [(e.kind, e.detail["reason"]) for e in plan.events] == [("restore", "control off")]
    assert [c.cmd for c in plan.commands] == ["vr_on"]  # its instance goes once it is back (control off)
    plan = plan_router(Settings(activation_enabled=False, misbehaviour_enabled=False), _rin(gone, pols, mode="on"), 0.0)
    assert [c.cmd for c in plan.commands] == ["vr_on", "early_drop"]


@settings(max_examples=60, deadline=None)
@given(st.booleans(), st.lists(st.tuples(st.sampled_from(["bad", "good", "gone", "none"]), st.booleans()),
                               min_size=1, max_size=40))
def test_every_ladder_step_is_undone_and_vr_off_only_where_allowed(allowed: bool, steps: list) -> None:
    """Random behaviour of one VR: the level never passes its top; ``vr_off`` only where allowed
    and only on the step to level 4; every restore from level 2 or more takes early drop back (the
    VR's instance kept), and from a VR that is off turns it on."""
    mp = MisbehaviourParams(hold_s=1.0, restore_hold_s=2.0)
    st_ = Settings(activation_enabled=False, misbehaviour=mp)
    pols = {"c": VrPolicy(derived_setpoint_pps=36_000, vr_off_allowed=allowed)}
    state, t = "active", 0.0
    top = OFF_LEVEL if allowed else PAUSE_LEVEL
    for what, control in steps:
        obs = {"bad": VrObs("c", True, state, 9_000, 9_000, 100_000), "good": VrObs("c", True, state, 9_000, 9_000, 9_100),
               "gone": VrObs("c", False, state, 9_000, None, None), "none": VrObs("c", True, state, 9_000, None, None)}[what]
        before = pols["c"].misbehaviour.level
        plan = plan_router(st_, _rin({"c": obs}, pols, mode="on" if control else "off"), t)
        pols, t = plan.policies, t + 1.0
        after = pols["c"].misbehaviour.level
        cmds = [c.cmd for c in plan.commands]
        assert after <= max(top, before)
        assert ("vr_off" in cmds) == (after == OFF_LEVEL and before == PAUSE_LEVEL)
        restored = [e for e in plan.events if e.kind == "restore"]
        if restored and before >= LIMIT_LEVEL and control:
            assert "early_drop" in cmds and all(c.on is None for c in plan.commands if c.cmd == "early_drop")
        if restored and before >= OFF_LEVEL and not obs.present:
            assert "vr_on" in cmds
        state = "paused" if "pause" in cmds or (state == "paused" and "resume" not in cmds) else state
        if "deactivate" in cmds:
            state = "inactive"
        elif "activate" in cmds:
            state = "active"
