"""The simulator's early drop (issue 48 item 3): the plant's limiter and its Dom0 cost, the
:class:`~xtc.host.limiter.Limiter` contract on the plant, and Figure 17 three ways simulated with the
daemon's own limiter policy.  Pure numpy, no host.
"""

from __future__ import annotations

import numpy as np
import pytest
from xtc_lab.sim.experiments import RunSettings, tcpudp
from xtc_lab.sim.host import SimClock, SimHost
from xtc_lab.sim.plant import Dom0Config, Plant, PlantConfig, PlantError, VRConfig, udp

from xtc.host.limiter import LimiterError, LimiterSetting


def plant(limw: float = 0.1, capacity: float = 1e9) -> Plant:
    vr = VRConfig(traffic=udp(100_000.0), initial_cap_percent=10.0, noise_rel=0.0, noise_drop_rel=0.0)
    return Plant(PlantConfig(vrs=(vr,), dom0s=(Dom0Config(capacity, rx_work_fraction=0.3, limiter_work_fraction=limw),),
                             seed=1))


def test_the_limiter_drops_before_delivery_and_costs_dom0_its_own_share() -> None:
    p = plant(limw=0.1)
    p.advance(5.0)
    free = p.measure(10.0)
    c0 = p.counters()
    p.set_limit(0, 30_000.0)
    p.advance(5.0)
    m = p.measure(10.0)
    c1 = p.counters()
    assert free.to_vr_pps[0] == pytest.approx(100_000.0)
    assert m.to_vr_pps[0] == pytest.approx(30_000.0)  # handed at most the limit
    assert m.source_pps[0] == pytest.approx(100_000.0)  # the UDP source does not back off
    dropped = (c1.limiter_dropped_packets - c0.limiter_dropped_packets)[0] / (c1.t_s - c0.t_s)
    assert dropped == pytest.approx(70_000.0, rel=1e-3)
    # Dom0's work: delivery 0.3, the rest of a traversal for what is forwarded, 0.1 per limiter drop
    y = m.forwarded_clean_pps[0]
    work = (0.3 * 30_000.0 + 0.7 * y + 0.1 * 70_000.0) / 1e9
    assert m.dom0_utilisation[0] == pytest.approx(work, rel=1e-3)
    assert m.dom0_utilisation[0] < free.dom0_utilisation[0]  # dropping early saves Dom0 work
    p.set_limit(0, None)
    p.advance(1.0)
    assert p.measure(5.0).to_vr_pps[0] == pytest.approx(100_000.0)
    assert np.isinf(p.limits_pps[0])


def test_a_limiter_that_costs_what_delivery_costs_saves_dom0_nothing() -> None:
    a, b = plant(limw=0.3), plant(limw=0.3)
    b.set_limit(0, 30_000.0)
    ma, mb = a.measure(20.0), b.measure(20.0)
    # a delivered packet the VR drops costs 0.3, a limiter drop costs 0.3: the same work either way
    # (besides the forwarding's own share, 0.7 a forwarded packet: the VR forwards a little less when handed less)
    def not_forwarding(m: object) -> float:
        return float(m.dom0_utilisation[0] * 1e9 - 0.7 * m.forwarded_clean_pps[0])  # type: ignore[attr-defined]

    assert not_forwarding(mb) == pytest.approx(not_forwarding(ma), rel=0.01)
    assert not_forwarding(mb) == pytest.approx(0.3 * 100_000.0, rel=0.01)


@pytest.mark.parametrize("bad", [-0.1, 0.31, float("nan")])
def test_bad_limiter_cost_is_refused(bad: float) -> None:
    with pytest.raises(PlantError, match="limiter_work_fraction"):
        Dom0Config(1e5, rx_work_fraction=0.3, limiter_work_fraction=bad)


def test_bad_limits_are_refused() -> None:
    p = plant()
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(PlantError):
            p.set_limit(0, bad)
    with pytest.raises(PlantError):
        p.set_limit(1, 10.0)


def test_the_sim_limiter_keeps_the_limiter_contract() -> None:
    clock = SimClock()
    host = SimHost.for_plant(PlantConfig(vrs=(VRConfig(traffic=udp(50_000.0), noise_rel=0.0, noise_drop_rel=0.0),),
                                         seed=1), clock=clock)
    lim = host.limiter()
    assert lim.dropped_packets("vif1.0") is None and lim.remove("vif1.0") is False
    s = LimiterSetting(rate_bytes_per_s=20_000 * 64, burst_bytes=64 * 400)
    assert lim.install("vif1.0", s) is True and lim.install("vif1.1", s) is True
    clock.advance(10.0)
    d = lim.dropped_by_interface(["vif1.0", "vif1.1", "vif9.0"])
    assert d["vif1.0"] == pytest.approx(300_000, rel=0.01) and d["vif1.1"] == 0 and "vif9.0" not in d
    assert lim.install("vif1.0", LimiterSetting(40_000 * 64, 64 * 800)) is False  # a change: the counter goes on
    clock.advance(10.0)
    assert lim.dropped_packets("vif1.0") == pytest.approx(400_000, rel=0.01)
    assert lim.adopt("vif1.0") == (LimiterSetting(40_000 * 64, 64 * 800), lim.dropped_packets("vif1.0"))
    assert lim.remove("vif1.0") is True and np.isinf(host.plant.limits_pps[0])
    with pytest.raises(LimiterError, match="no limiter"):
        lim.update("vif1.0", s)
    with pytest.raises(LimiterError, match="no such simulated interface"):
        lim.install("eth0", s)


def test_figure_17_three_ways_simulated() -> None:
    """Early drop (the daemon's own policy on the plant's limiter) hands the UDP VR about its limit,
    keeps it at its setpoint, frees Dom0 work for the TCP VR; a limiter as costly as delivery frees none."""
    rs = RunSettings(seed=1, duration_s=40.0, runs=1, warmup_s=15.0)
    r = tcpudp(rs, controllers=("xtc",), calibration_s=20.0, limiter_work_fraction=0.1).data
    w, x, e = r["without_xtc"], r["with"]["xtc"], r["with_early_drop"]["xtc"]
    assert x["udp_delivered_to_vr_kpps"] == pytest.approx(100.0, rel=0.01)  # XTC alone: everything handed
    assert 20.0 * 1.15 < e["udp_delivered_to_vr_kpps"] < 20.0 * 1.6  # the limit: 1.2x the setpoint plus the 10% step
    assert abs(e["udp_kpps"] - 20.0) < 2.0
    assert e["tcp_limiter_dropped_kpps"] == 0.0  # the TCP VR backs off: no limiter
    assert e["dom0_wasted_kpps"] < 0.5 * x["dom0_wasted_kpps"]
    assert e["tcp_kpps"] - w["tcp_kpps"] > x["tcp_kpps"] - w["tcp_kpps"] + 4.0
    same = tcpudp(rs, controllers=("xtc",), calibration_s=20.0, limiter_work_fraction=0.3).data
    gain_same = same["with_early_drop"]["xtc"]["tcp_kpps"] - same["without_xtc"]["tcp_kpps"]
    gain_xtc = same["with"]["xtc"]["tcp_kpps"] - same["without_xtc"]["tcp_kpps"]
    assert abs(gain_same - gain_xtc) < 2.0


def test_the_cli_refuses_a_limiter_dearer_than_delivery(capsys: pytest.CaptureFixture[str]) -> None:
    from xtc.cli import main

    assert main(["simulate", "tcpudp", "--quiet", "--limiter-work-fraction", "0.5"]) == 2
    assert "limiter_work_fraction must be within [0, rx_work_fraction = 0.3], got 0.5" in capsys.readouterr().err
