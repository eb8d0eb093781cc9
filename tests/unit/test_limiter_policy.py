"""Early drop's limit (xtc.daemon.limiter_policy): pure rules, no I/O."""

from __future__ import annotations

import math

import pytest

from xtc.daemon.limiter_policy import (
    Limit,
    LimiterTuning,
    LimitInputs,
    decide,
    floor_pps,
    limit_bytes,
    tuning_for,
)

T = LimiterTuning()


def inputs(*, setpoint=20_000.0, forwarded=19_500.0, offered=93_000.0, model=20_000.0, size=524.0) -> LimitInputs:
    return LimitInputs(setpoint_pps=setpoint, forwarded_pps=forwarded, offered_pps=offered,
                       model_forwarded_pps=model, mean_packet_bytes=size)


def test_a_udp_vr_capped_below_its_offered_load_gets_a_limit_at_its_rate_plus_the_margin():
    got = decide(inputs(), None)
    assert got is not None
    assert got.rate_pps == pytest.approx(20_000 * 1.2)
    assert got.rate_bytes_per_s == math.ceil(24_000 * 524)
    assert got.burst_bytes >= got.rate_bytes_per_s * T.burst_s


def test_the_limit_is_never_below_the_measured_rate_the_model_or_the_setpoint():
    for fwd, model, sp in ((30_000, 20_000, 20_000), (19_000, 28_000, 20_000), (10_000, 12_000, 25_000)):
        got = decide(inputs(forwarded=fwd, model=model, setpoint=sp, offered=200_000), None)
        assert got.rate_pps >= max(fwd, model, sp) * 1.2 - 1e-9


def test_a_tcp_vr_whose_source_backs_off_gets_no_limiter():
    # TCP: offered ~ forwarded (its source backs off to what the capped VR passes on)
    assert decide(inputs(forwarded=38_000, offered=40_000, setpoint=76_000, model=80_000), None) is None
    # ... and one in place is removed when the VR stops dropping
    in_place = limit_bytes(24_000, 524, T)
    assert decide(inputs(forwarded=38_000, offered=40_000), in_place) is None


def test_an_uncapped_vr_that_keeps_up_gets_no_limiter():
    assert decide(inputs(forwarded=60_000, offered=61_000, setpoint=80_000, model=100_000), None) is None


def test_no_limiter_when_the_floor_reaches_what_the_vr_is_offered():
    # offered 30k, forwarded 20k: excess 50 % but the floor (24k * ...) with a model at 26k is 31.2k > 30k
    assert decide(inputs(forwarded=20_000, offered=30_000, model=26_000), None) is None


def test_raised_before_the_cap_is_raised_model_at_the_next_cap():
    cur = decide(inputs(), None)
    # The controller is about to raise the cap: its model at the new cap says 40 kp/s.
    got = decide(inputs(model=40_000), cur)
    assert got.rate_pps >= 40_000 * 1.2
    assert got.rate_pps == pytest.approx(40_000 * 1.2 * 1.1)  # with the hysteresis room


def test_hysteresis_small_moves_keep_the_limit_large_moves_lower_it():
    cur = decide(inputs(), None)
    assert decide(inputs(forwarded=19_000, model=19_000, setpoint=19_000), cur) is cur  # 5 % down: kept
    lower = decide(inputs(forwarded=10_000, model=10_000, setpoint=10_000), cur)
    assert lower is not cur and lower.rate_pps == pytest.approx(12_000)


def test_any_raise_above_the_limit_is_applied_at_once():
    cur = decide(inputs(), None)  # 24k
    got = decide(inputs(forwarded=20_100, model=20_100), cur)  # floor 24.12k > 24k
    assert got.rate_pps > cur.rate_pps and got.rate_pps >= floor_pps(inputs(forwarded=20_100, model=20_100), T)


def test_a_missing_measurement_keeps_the_limit_and_never_tightens_it():
    cur = decide(inputs(), None)
    assert decide(inputs(offered=math.nan), cur) is cur
    assert decide(inputs(offered=math.nan), None) is None
    tight = limit_bytes(5_000, 524, T)  # somehow below the setpoint's floor: raised
    got = decide(inputs(forwarded=math.nan), tight)
    assert got.rate_pps >= 20_000 * 1.2


def test_the_byte_rate_follows_the_mean_packet_size_and_a_missing_size_counts_as_full_frames():
    assert limit_bytes(1000, 100, T).rate_bytes_per_s == 100_000
    assert limit_bytes(1000, 0, T).rate_bytes_per_s == 60_000
    assert limit_bytes(1000, math.nan, T).rate_bytes_per_s == 1_514_000
    assert limit_bytes(10, 64, T).burst_bytes == 4 * 1514  # at least four full-size frames


@pytest.mark.parametrize("field,value", [("margin_fraction", -0.1), ("step_fraction", 2.0),
                                         ("excess_fraction", math.inf), ("burst_s", 0.0), ("margin_fraction", True)])
def test_bad_tuning_is_one_clear_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        LimiterTuning(**{field: value})


def test_limit_is_a_value():
    assert Limit(1.0, 2, 3) == Limit(1.0, 2, 3)


def test_a_limit_in_place_is_kept_between_the_keep_and_the_install_thresholds():
    """Issue 48 item 4: a VR whose offered/forwarded ratio moves around 1.25 does not have its
    limiter put on and taken off every period (each a netlink operation per interface): installed
    above 1.25, kept down to 1.10, removed below."""
    in_place = limit_bytes(2_400, 524, T)
    x = inputs(setpoint=2_000, forwarded=2_000, model=None, offered=2_000 * 1.2)
    assert decide(x, None) is None  # not installed at 1.2 ...
    assert decide(x, in_place) is not None  # ... but kept
    assert decide(inputs(setpoint=2_000, forwarded=2_000, model=None, offered=2_000 * 1.05), in_place) is None
    assert decide(inputs(setpoint=2_000, forwarded=2_000, model=None, offered=2_000 * 1.3), None) is not None
    with pytest.raises(ValueError, match="keep_fraction"):
        LimiterTuning(keep_fraction=0.3)  # above excess_fraction: no hysteresis, the other way round


def test_each_limiter_has_its_tuning_and_the_configured_margin_and_credit_override_it():
    bpf, tbf = tuning_for("bpf"), tuning_for("tbf")
    assert (bpf.margin_fraction, bpf.step_fraction, bpf.burst_s) == (0.05, 0.02, 0.3)
    assert (tbf.margin_fraction, tbf.step_fraction, tbf.burst_s) == (0.2, 0.1, 0.02)
    t = tuning_for("bpf", margin_fraction=0.1, credit_s=0.5)
    assert (t.margin_fraction, t.step_fraction, t.burst_s) == (0.1, 0.02, 0.5)
    with pytest.raises(ValueError, match="'bpf' or 'tbf'"):
        tuning_for("htb")
    # the eBPF limit sits 5% above the setpoint of a VR forwarding its setpoint (the TBF's 20%)
    x = LimitInputs(20_000.0, 20_000.0, 93_000.0, None, 524.0)
    assert decide(x, None, bpf).rate_pps == pytest.approx(21_000.0)
    assert decide(x, None, tbf).rate_pps == pytest.approx(24_000.0)


def test_with_the_ebpf_tuning_a_raise_lifts_the_limit_up_to_the_setpoint_not_to_an_overshooting_prediction():
    bpf, tbf = tuning_for("bpf"), tuning_for("tbf")
    # the VR forwards 17k for a setpoint of 20k; the controller raises its cap and the model says 26k
    x = LimitInputs(20_000.0, 17_000.0, 93_000.0, 26_000.0, 524.0)
    assert floor_pps(x, bpf) == pytest.approx(1.05 * 20_000)  # enough to reach the setpoint
    assert floor_pps(x, tbf) == pytest.approx(1.2 * 26_000)  # the TBF follows the prediction
    # never below what the VR forwards, nor below a prediction under the setpoint's level
    assert floor_pps(LimitInputs(20_000.0, 22_000.0, 93_000.0, 26_000.0, 524.0), bpf) == pytest.approx(1.05 * 22_000)
