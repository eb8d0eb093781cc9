"""The simulated plant: calibration to Table 1, saturation, seeds, hog, Dom0 waste and sharing, TCP."""

from __future__ import annotations


import numpy as np
import pytest

from xtc_lab.sim.plant import (
    NOMINAL_TAU_S,
    averaged_pole,
    tau_for_pole,
    PAPER_CURVE,
    Dom0Config,
    Plant,
    PlantConfig,
    PlantError,
    VRConfig,
    fit_capacity_curve,
    tcp,
    udp,
)

QUIET = dict(noise_rel=0.0, noise_drop_rel=0.0)


def _independent(caps: list[float], **vr_kw: object) -> Plant:
    """One VR per Dom0 (no interaction), one per cap."""
    vrs = tuple(VRConfig(initial_cap_percent=c, dom0=i, **vr_kw) for i, c in enumerate(caps))  # type: ignore[arg-type]
    return Plant(PlantConfig(vrs=vrs, dom0s=tuple(Dom0Config() for _ in caps), seed=3))


def test_stepped_plant_settles_on_its_static_curve_off_the_table() -> None:
    # Not Table 1 again (the curve is fitted to it): caps, offered rates and speeds the fit never
    # saw.  What can fail here is the simulation (sub-steps, lag, Dom0, counters, measure).
    caps = [2.0, 7.0, 33.0, 70.0]
    offered = [40_000.0, 100_000.0, 150_000.0, 60_000.0]
    speed = [1.0, 0.5, 2.0, 1.3]
    vrs = tuple(VRConfig(traffic=udp(o), speed_factor=f, initial_cap_percent=c, dom0=i, **QUIET)  # type: ignore[arg-type]
                for i, (c, o, f) in enumerate(zip(caps, offered, speed)))
    p = Plant(PlantConfig(vrs=vrs, dom0s=tuple(Dom0Config(capacity_pps=1e9) for _ in caps), seed=3))
    p.advance(5.0)
    want = PAPER_CURVE.forwarded_pps(np.array(caps), np.array(offered), np.array(speed))
    np.testing.assert_allclose(p.measure(10.0).forwarded_pps, want, rtol=1e-6)


def test_fit_recovers_the_default_curve() -> None:
    fitted = fit_capacity_curve()
    assert fitted.pps_per_cap_percent == pytest.approx(PAPER_CURVE.pps_per_cap_percent, rel=1e-3)
    assert fitted.knee_sharpness == pytest.approx(PAPER_CURVE.knee_sharpness, rel=1e-3)
    # Near-linear at low caps: about 3.2 kp/s per percent.
    assert 3000 < fitted.pps_per_cap_percent < 3400


def test_curve_saturates_at_offered_rate_with_threshold_near_60() -> None:
    caps = np.array([60.0, 80.0, 100.0])
    y = PAPER_CURVE.forwarded_pps(caps, 100_000.0)
    assert np.all(y <= 100_000.0)
    assert np.all(y > 99_000.0)  # within 1 kp/s of the offered rate from the threshold on
    assert PAPER_CURVE.forwarded_pps(45.0, 100_000.0) < 99_000.0
    # A lower offered rate saturates earlier, and never above itself.
    y50 = PAPER_CURVE.forwarded_pps(np.array([5.0, 30.0, 100.0]), 50_000.0)
    assert y50[0] == pytest.approx(PAPER_CURVE.forwarded_pps(5.0, 100_000.0), rel=0.02)
    assert np.all(y50 <= 50_000.0) and y50[-1] > 49_900.0


def test_cap_for_pps_inverts_the_curve() -> None:
    for target in (5_000.0, 30_000.0, 77_000.0, 97_000.0):
        cap = PAPER_CURVE.cap_for_pps(target, 100_000.0)
        assert float(PAPER_CURVE.forwarded_pps(cap, 100_000.0)) == pytest.approx(target, rel=1e-9)
    with pytest.raises(PlantError):
        PAPER_CURVE.cap_for_pps(100_000.0, 100_000.0)


def test_saturation_in_the_plant() -> None:
    p = _independent([50.0, 100.0], **QUIET)
    p.advance(5.0)
    y = p.measure(5.0).forwarded_pps
    assert y[1] == pytest.approx(100_000.0, rel=0.002)
    assert y[0] < y[1]


def test_same_seed_same_run_other_seed_other_run() -> None:
    def run(seed: int) -> np.ndarray:
        p = Plant(PlantConfig(vrs=(VRConfig(initial_cap_percent=10.0), VRConfig(traffic=tcp())), seed=seed))
        return np.array([p.measure(1.0).forwarded_pps for _ in range(20)])

    a, b, c = run(7), run(7), run(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_noise_has_the_configured_size() -> None:
    p = _independent([10.0] * 40, noise_rel=0.03, noise_drop_rel=0.0)  # below the knee: no clipping
    p.advance(5.0)
    y = np.array([p.measure(1.0).forwarded_pps for _ in range(30)])
    rel = y.std() / y.mean()
    assert 0.02 < rel < 0.04


def test_first_order_lag_matches_the_paper_pole() -> None:
    """One-second averages after a cap step show the model's pole a = 0.0915."""
    assert averaged_pole(NOMINAL_TAU_S) == pytest.approx(0.0915, rel=1e-6)
    assert averaged_pole(tau_for_pole(0.5)) == pytest.approx(0.5, rel=1e-6)
    p = Plant(PlantConfig(vrs=(VRConfig(initial_cap_percent=10.0, **QUIET),), dt_s=0.01))
    p.advance(10.0)
    y0 = p.measure(1.0).forwarded_clean_pps[0]
    p.set_cap(0, 20.0)
    y_inf = float(PAPER_CURVE.forwarded_pps(20.0, 100_000.0))
    y1 = p.measure(1.0).forwarded_clean_pps[0]
    # Over the first period after the step, the average misses a = 0.0915 of the step.
    assert (y_inf - y1) / (y_inf - y0) == pytest.approx(0.0915, rel=0.05)


def test_hog_lowers_the_rate_by_about_its_share() -> None:
    p = _independent([10.0, 10.0], **QUIET)
    p.set_hog(1, 0.15)
    p.advance(5.0)
    y = p.measure(5.0).forwarded_pps
    assert y[1] / y[0] == pytest.approx(0.85, abs=0.01)


def test_speed_factor_scales_capacity() -> None:
    p = Plant(
        PlantConfig(
            vrs=(VRConfig(initial_cap_percent=5.0, dom0=0, **QUIET), VRConfig(initial_cap_percent=5.0, dom0=1, speed_factor=2.0, **QUIET)),
            dom0s=(Dom0Config(), Dom0Config()),
        )
    )
    p.advance(5.0)
    y = p.measure(5.0).forwarded_pps
    assert y[1] / y[0] == pytest.approx(2.0, rel=0.02)


def test_udp_wastes_dom0_work_on_packets_the_vr_drops() -> None:
    dom0 = Dom0Config(capacity_pps=1e9, rx_work_fraction=0.6)
    p = Plant(PlantConfig(vrs=(VRConfig(traffic=udp(100_000.0), initial_cap_percent=5.0, **QUIET),), dom0s=(dom0,)))
    p.advance(5.0)
    c0 = p.counters()
    p.advance(10.0)
    c1 = p.counters()
    to_vr = (c1.to_vr_packets - c0.to_vr_packets)[0] / 10.0
    fwd = (c1.forwarded_packets - c0.forwarded_packets)[0] / 10.0
    work = (c1.dom0_work - c0.dom0_work)[0] / 10.0
    assert to_vr == pytest.approx(100_000.0)  # Dom0 still moves every UDP packet into the VR
    assert fwd < 20_000.0
    assert work == pytest.approx(0.6 * to_vr + 0.4 * fwd, rel=1e-3)
    assert 0.6 * to_vr > 3 * 0.4 * fwd  # most of Dom0's work is wasted on packets the VR drops


def test_tcp_backs_off_to_the_vr_capacity_and_does_not_waste_dom0() -> None:
    p = Plant(PlantConfig(vrs=(VRConfig(traffic=tcp(60_000.0), initial_cap_percent=5.0, **QUIET),), dom0s=(Dom0Config(capacity_pps=1e9),)))
    p.advance(20.0)
    m = p.measure(20.0)
    cap_pps = float(PAPER_CURVE.capacity_pps(5.0))
    assert m.source_pps[0] < 1.05 * cap_pps  # the source backed off
    assert 0.6 * cap_pps < m.forwarded_pps[0] <= cap_pps
    assert m.to_vr_pps[0] - m.forwarded_pps[0] < 0.1 * m.forwarded_pps[0]
    # Uncapped, it climbs to its own maximum.
    p.set_cap(0, 100.0)
    p.advance(20.0)
    assert p.measure(5.0).forwarded_pps[0] == pytest.approx(60_000.0, rel=0.01)


def test_dom0_capacity_is_shared_in_proportion_to_what_sources_send() -> None:
    # Two uncapped UDP VRs, 80 and 40 kp/s, on a Dom0 that can do 60k traversals/s.
    vrs = (VRConfig(traffic=udp(80_000.0), **QUIET), VRConfig(traffic=udp(40_000.0), **QUIET))
    p = Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=60_000.0, sharing="proportional"),)))
    p.advance(5.0)
    m = p.measure(5.0)
    assert m.forwarded_pps.sum() == pytest.approx(60_000.0, rel=0.01)
    assert m.forwarded_pps[0] / m.forwarded_pps[1] == pytest.approx(2.0, rel=0.02)
    assert m.dom0_utilisation[0] == pytest.approx(1.0, abs=0.01)
    # Without the shared bottleneck both get everything.
    p2 = Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=1e6),)))
    p2.advance(5.0)
    np.testing.assert_allclose(p2.measure(5.0).forwarded_pps, [80_000.0, 40_000.0], rtol=0.01)


def test_fair_dom0_sharing_is_max_min() -> None:
    # Demands 80, 40 and 10 kp/s on a Dom0 that can do 70k traversals/s: 10 gets all it asks,
    # the other two split the remaining 60 equally.
    vrs = tuple(VRConfig(traffic=udp(r), **QUIET) for r in (80_000.0, 40_000.0, 10_000.0))
    p = Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=70_000.0, sharing="fair"),)))
    p.advance(5.0)
    m = p.measure(5.0)
    np.testing.assert_allclose(m.forwarded_pps, [30_000.0, 30_000.0, 10_000.0], rtol=0.01)
    # Under the proportional rule the heavier sender would get more.
    p2 = Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=70_000.0, sharing="proportional"),)))
    p2.advance(5.0)
    y2 = p2.measure(5.0).forwarded_pps
    assert y2[0] > 40_000.0 and y2[2] < 10_000.0


def test_udp_crowds_out_tcp_on_a_busy_dom0() -> None:
    vrs = (VRConfig(traffic=udp(100_000.0), **QUIET), VRConfig(traffic=tcp(60_000.0), **QUIET))
    p = Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=120_000.0),)))
    p.advance(20.0)
    y = p.measure(30.0).forwarded_pps
    assert y[0] > 1.5 * y[1]
    # Capping the UDP VR gives TCP room, but less than the UDP rate it lost (Dom0 waste).
    p.set_cap(0, 6.0)
    p.advance(20.0)
    y2 = p.measure(30.0).forwarded_pps
    assert y2[1] > y[1] + 5_000.0
    assert (y2[1] - y[1]) < (y[0] - y2[0])


def test_counters_are_monotonic_and_consistent() -> None:
    p = Plant(PlantConfig(vrs=(VRConfig(initial_cap_percent=8.0, noise_rel=0.2), VRConfig(traffic=tcp())), seed=1))
    prev = p.counters()
    for _ in range(50):
        p.step()
        c = p.counters()
        assert np.all(c.forwarded_packets >= prev.forwarded_packets)
        assert np.all(c.to_vr_packets >= prev.to_vr_packets)
        assert np.all(c.forwarded_packets <= c.to_vr_packets + 1e-6)
        assert np.all(c.to_vr_packets <= c.source_packets + 1e-6)
        prev = c
    assert p.t_s == pytest.approx(5.0)


def test_cap_resolution_rounds_like_xen() -> None:
    p = Plant(PlantConfig(vrs=(VRConfig(),), cap_resolution_percent=1.0))
    assert p.set_cap(0, 3.4) == 3.0
    assert p.set_cap(0, 1.2) == 1.0
    assert p.set_cap(0, 99.6) == 100.0


@pytest.mark.parametrize("bad", [0.0, 0.5, -3.0, float("nan"), float("inf"), 101.0])
def test_bad_caps_are_refused_and_change_nothing(bad: float) -> None:
    p = Plant(PlantConfig(vrs=(VRConfig(initial_cap_percent=20.0), VRConfig(initial_cap_percent=30.0))))
    with pytest.raises(PlantError, match="cap_percent"):
        p.set_cap(0, bad)
    with pytest.raises(PlantError, match="VR 1"):
        p.set_caps([50.0, bad])
    np.testing.assert_array_equal(p.caps_percent, [20.0, 30.0])


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(PlantError, match="hog_fraction"):
        VRConfig(hog_fraction=1.0)
    with pytest.raises(PlantError, match="speed_factor"):
        VRConfig(speed_factor=0.0)
    with pytest.raises(PlantError, match="dom0"):
        PlantConfig(vrs=(VRConfig(dom0=1),))
    with pytest.raises(PlantError, match="kind"):
        udp().__class__(kind="sctp")  # type: ignore[arg-type]
    p = Plant(PlantConfig(vrs=(VRConfig(),)))
    with pytest.raises(PlantError, match="index"):
        p.set_hog(3, 0.1)
    with pytest.raises(PlantError, match="hog_fraction"):
        p.set_hog(0, 1.5)
