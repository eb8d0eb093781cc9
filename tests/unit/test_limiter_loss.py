"""Early drop on a saturated host: the VR's own losses raise its limit, bounded (issue 48;
xtc.daemon.limiter_policy.loss_factor and its use in decide).  Pure rules, no I/O.

The numbers are the emulated Dom0's (docs/results/2026-11-27-early-drop-dom0): setpoint 12.9 kp/s,
the VR handed 13.8 under a limit of 14.1 forwarded 12.0 (it lost 13% at its own socket), its CPU
26% of a CPU under a cap of 64%.
"""

from __future__ import annotations

import math

import pytest

from xtc.daemon.limiter_policy import (
    BPF_TUNING,
    LimiterTuning,
    LimitInputs,
    LossInputs,
    cap_binds,
    decide,
    floor_pps,
    limit_bytes,
    loss_factor,
    tuning_for,
)

T = tuning_for("bpf", loss_bound_fraction=0.25)  # the rule on, as an operator sets it
SP = 12_900.0
TOP = 1.0 + T.loss_bound_fraction


def loss_in(*, handed=13_800.0, forwarded=12_000.0, limit=14_100.0, cpu=26.0, cap=64.0, setpoint=SP) -> LossInputs:
    return LossInputs(setpoint_pps=setpoint, forwarded_pps=forwarded, handed_pps=handed, limit_pps=limit,
                      cpu_percent=cpu, cap_percent=cap)


def limit_in(*, forwarded=12_000.0, offered=91_600.0, setpoint=SP, model=None) -> LimitInputs:
    return LimitInputs(setpoint_pps=setpoint, forwarded_pps=forwarded, offered_pps=offered,
                       model_forwarded_pps=model, mean_packet_bytes=524.0)


def learn(x: LossInputs, n: int, prev: float = 1.0) -> float:
    for _ in range(n):
        prev = loss_factor(prev, x, T)
    return prev


def test_the_vrs_own_losses_raise_no_limit_unless_the_operator_sets_the_bound():
    assert BPF_TUNING.loss_bound_fraction == 0.0 and tuning_for("bpf").loss_bound_fraction == 0.0
    assert tuning_for("tbf").loss_bound_fraction == 0.0
    assert T.loss_bound_fraction == 0.25
    assert tuning_for("bpf", loss_bound_fraction=0.1).loss_bound_fraction == 0.1
    assert tuning_for("tbf", loss_bound_fraction=0.0).loss_bound_fraction == 0.0


def test_a_limited_vr_short_of_its_setpoint_whose_cap_does_not_bind_learns_its_loss_smoothed():
    # the limit over the setpoint at which, losing 13%, it would forward 98% of its setpoint
    want = 0.98 * 13_800 / 12_000
    assert T.loss_aim_fraction == 0.98  # the controller's dead zone
    one = loss_factor(1.0, loss_in(), T)
    assert one == pytest.approx(1.0 + T.loss_smoothing * (want - 1.0))  # a quarter of the way
    assert learn(loss_in(), 30) == pytest.approx(want, rel=1e-4)  # then all of it, 1.127


def test_its_limit_is_raised_by_that_loss_so_that_what_it_forwards_can_reach_the_setpoint():
    loss = learn(loss_in(), 30)
    cur = limit_bytes(14_100, 524, T)  # the old rule's limit: (1.05)(1.02) of the setpoint, about
    got = decide(limit_in(), cur, T, loss)
    assert got.rate_pps == pytest.approx(loss * SP)  # raised to the floor the loss asks for, exactly
    # handed that limit, the VR losing 13% forwards 98% of its setpoint: at it, as the controller counts
    assert got.rate_pps * 12_000 / 13_800 == pytest.approx(0.98 * SP, rel=1e-3)
    # the old rule (no loss) keeps the limit at most where it was: the VR 7% below its setpoint
    old = decide(limit_in(), cur, T)
    assert old.rate_pps <= cur.rate_pps and old.rate_pps * 12_000 / 13_800 < 0.95 * SP


def test_when_the_cap_binds_the_vrs_drops_never_raise_the_limit():
    # XTC alone at the same host: cap 13%, CPU 13.8%: the cap binds, and its drops are the cap's
    binding = loss_in(handed=14_100, forwarded=9_000, cpu=13.8, cap=13.0)
    assert cap_binds(13.8, 13.0, T) is True and cap_binds(26.0, 64.0, T) is False
    assert cap_binds(10.4, 13.0, T) is True and cap_binds(10.3, 13.0, T) is False  # at 80% of the cap
    assert loss_factor(1.0, binding, T) == 1.0  # never raised from nothing
    assert loss_factor(1.1, binding, T) == 1.1  # nor from what it learned
    assert decide(limit_in(forwarded=9_000), None, T, 1.0).rate_pps == pytest.approx(floor_pps(limit_in(), T))


def test_a_vr_its_cap_holds_at_its_setpoint_lowers_its_factor_to_what_its_own_losses_need():
    # the host got quiet: handed 1.127x its setpoint, its cap holds it at the setpoint (its cap's drops)
    k = 0.98 * 13_800 / 12_000
    f = k
    for _ in range(60):  # handed what the factor asks for, its cap holding it at the setpoint
        f = loss_factor(f, loss_in(handed=f * SP, forwarded=SP, limit=f * SP, cpu=12.9, cap=13.0), T)
        assert f <= k
    assert f == pytest.approx(1.0, abs=0.01)  # 0.98 x handed / forwarded, period by period
    # a factor is lowered whatever the cap did, and without a CPU reading too
    assert loss_factor(1.2, loss_in(cpu=None), T) < 1.2


def test_without_a_cpu_reading_or_a_cap_the_factor_is_never_raised():
    for x in (loss_in(cpu=None), loss_in(cap=None), loss_in(cpu=math.nan), loss_in(cpu=-1.0), loss_in(cap=0.0)):
        assert loss_factor(1.0, x, T) == 1.0
        assert loss_factor(1.12, x, T) == 1.12  # (1.127 would be a raise)


def test_a_vr_not_held_by_its_limit_or_without_one_learns_nothing():
    assert loss_factor(1.0, loss_in(handed=10_000, limit=14_100), T) == 1.0  # handed well under the limit
    assert loss_factor(1.0, loss_in(limit=None), T) == 1.0  # no limit in place
    for bad in ({"forwarded": None}, {"handed": math.nan}, {"forwarded": 0.0}):
        assert loss_factor(1.1, loss_in(**bad), T) == 1.1


def test_a_vr_at_or_above_its_setpoint_only_ever_lowers_its_factor():
    at = loss_in(forwarded=SP, handed=SP * 1.15)
    assert loss_factor(1.05, at, T) == 1.05  # a larger loss at the setpoint: not raised
    assert loss_factor(1.2, at, T) < 1.2  # needing less lowers it


def test_the_runaway_guard_more_drops_a_higher_limit_a_busier_host_stops_at_the_bound():
    """Feedback: the more the host hands the VR, the more it loses at its socket (a saturated host).
    The limit and what the VR is handed never pass 1 + loss_bound_fraction times the setpoint."""
    limit = limit_bytes(1.05 * SP, 524, T)
    loss = 1.0
    worst = 0.0
    for _ in range(200):
        handed = limit.rate_pps
        lost = min(0.9, 0.13 + 2.0 * max(0.0, handed / SP - 1.0))  # more handed, more lost: 13% .. 90%
        fwd = handed * (1.0 - lost)
        loss = loss_factor(loss, loss_in(handed=handed, forwarded=fwd, limit=limit.rate_pps), T)
        limit = decide(limit_in(forwarded=fwd), limit, T, loss)
        assert limit is not None
        worst = max(worst, limit.rate_pps)
    assert loss <= TOP
    assert worst <= TOP * SP + 1e-6
    assert worst == pytest.approx(TOP * SP)  # it got there, and no further
    # one absurd period (handed 10x what it forwards) cannot carry it past the bound either
    assert loss_factor(1.0, loss_in(handed=14_000, forwarded=1_400), T) <= TOP
    assert floor_pps(limit_in(), T, loss=10.0) == pytest.approx(TOP * SP)


def test_a_loss_raised_limit_goes_to_its_floor_no_step_above_and_never_past_the_bound():
    cur = limit_bytes(1.07 * SP, 524, T)
    assert decide(limit_in(), cur, T, loss=1.2).rate_pps == pytest.approx(1.2 * SP)  # no 2% step on top
    assert decide(limit_in(), cur, T, loss=1.4).rate_pps == pytest.approx(TOP * SP)  # the bound
    # a loss below the plain floor changes nothing: the margin's floor and its step, as before
    assert decide(limit_in(), None, T, loss=1.03).rate_pps == pytest.approx(1.05 * SP)
    # lowered only past the hysteresis step, as before
    at = limit_bytes(1.2 * SP, 524, T)
    assert decide(limit_in(), at, T, loss=1.19) is at
    assert decide(limit_in(), at, T, loss=1.1).rate_pps == pytest.approx(1.1 * SP)


def test_the_bound_never_lowers_the_limit_below_the_plain_rule():
    # a VR forwarding well above its setpoint (just activated): the plain floor follows it, loss or not
    x = limit_in(forwarded=30_000)
    assert floor_pps(x, T, loss=1.2) == pytest.approx(1.05 * 30_000)


def test_a_tcp_vr_is_never_limited_whatever_its_loss():
    # TCP: its source backs off to what the VR forwards (offered 1.05x forwarded): no limiter
    tcp = LimitInputs(setpoint_pps=51_500, forwarded_pps=34_700, offered_pps=36_900, model_forwarded_pps=None,
                      mean_packet_bytes=524.0)
    assert decide(tcp, None, T, loss=TOP) is None
    # and without a limit in place a TCP VR's own drops teach nothing
    assert loss_factor(1.0, LossInputs(51_500, 34_700, 36_900, None, 69.0, 100.0), T) == 1.0


def test_a_bound_of_zero_is_the_rule_before_what_the_host_hands_stays_within_seven_percent():
    off = tuning_for("bpf", loss_bound_fraction=0.0)
    assert loss_factor(1.0, loss_in(), off) == 1.0
    assert loss_factor(1.2, loss_in(), off) == 1.0
    lim = decide(limit_in(forwarded=12_000), None, off, loss_factor(1.0, loss_in(), off))
    assert lim.rate_pps == pytest.approx(1.05 * SP)


@pytest.mark.parametrize("field,value", [("loss_bound_fraction", -0.1), ("loss_bound_fraction", 1.5),
                                         ("loss_smoothing", 0.0), ("cap_bound_fraction", 2.0),
                                         ("limited_fraction", math.nan), ("loss_bound_fraction", True)])
def test_bad_loss_tuning_is_one_clear_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        LimiterTuning(**{field: value})
