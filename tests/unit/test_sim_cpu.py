"""The CPU time the simulated plant's VRs use, and :meth:`SimHost.read_cpu_ns` over the host's clock.

The plant has no CPU model of its own: a VR uses ``min(cap, hog * cap + delivered_pps / (k *
speed))`` percent of one CPU (see the plant's module docstring, item 7).  What must hold: a VR
whose cap binds uses its cap, a VR offered little uses well under it, and a TCP VR, which forwards
nearly all it is offered under a cap that binds, still uses most of its cap (the case a
forwarded/offered ratio cannot tell).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xtc_lab.sim.host import SimClock, SimHost
from xtc_lab.sim.plant import PAPER_CURVE, Dom0Config, Plant, PlantConfig, VRConfig, tcp, udp

QUIET: dict[str, Any] = dict(noise_rel=0.0, noise_drop_rel=0.0)
K = PAPER_CURVE.pps_per_cap_percent


def _plant(*vrs: VRConfig) -> Plant:
    return Plant(PlantConfig(vrs=vrs, dom0s=(Dom0Config(capacity_pps=1e9),), seed=5))


def _share(p: Plant, seconds: float) -> np.ndarray:
    """Mean CPU share (1.0 = one CPU) of each VR over the next ``seconds``."""
    c0 = p.cpu_seconds()
    p.advance(seconds)
    return (p.cpu_seconds() - c0) / seconds


def test_a_vr_whose_cap_binds_uses_its_cap_and_one_offered_little_uses_less() -> None:
    p = _plant(
        VRConfig(traffic=udp(100_000.0), initial_cap_percent=10.0, **QUIET),  # budget 32.7 kp/s: binds
        VRConfig(traffic=udp(20_000.0), initial_cap_percent=50.0, **QUIET),  # needs 6.1 % of 50 %
        VRConfig(traffic=udp(0.0), initial_cap_percent=30.0, **QUIET),  # idle
    )
    p.advance(2.0)
    share = _share(p, 10.0)
    assert share[0] == pytest.approx(0.10, rel=1e-9)
    assert share[1] == pytest.approx(20_000.0 / K / 100.0, rel=1e-9)
    assert share[1] < 0.2 * 0.50
    assert share[2] == 0.0


def test_cpu_time_is_cumulative_and_follows_a_cap_change() -> None:
    p = _plant(VRConfig(traffic=udp(100_000.0), initial_cap_percent=10.0, **QUIET))
    before = p.cpu_seconds()
    p.advance(3.0)
    mid = p.cpu_seconds()
    p.set_cap(0, 20.0)
    p.advance(3.0)
    after = p.cpu_seconds()
    assert before[0] == 0.0
    assert mid[0] == pytest.approx(0.3, rel=1e-9)
    assert after[0] - mid[0] == pytest.approx(0.6, rel=1e-9)
    p.cpu_seconds()[0] = -1.0  # a copy: the plant's own total is untouched
    assert p.cpu_seconds()[0] == after[0]


def test_a_hog_burns_its_share_of_the_cap_even_without_traffic() -> None:
    p = _plant(VRConfig(traffic=udp(0.0), initial_cap_percent=20.0, hog_fraction=0.15, **QUIET),
               VRConfig(traffic=udp(100_000.0), initial_cap_percent=20.0, hog_fraction=0.15, **QUIET))
    share = _share(p, 5.0)
    assert share[0] == pytest.approx(0.15 * 0.20, rel=1e-9)
    assert share[1] == pytest.approx(0.20, rel=1e-9)  # hog and forwarder together fill the cap


def test_a_capped_tcp_vr_forwards_nearly_all_it_is_offered_yet_uses_most_of_its_cap() -> None:
    p = _plant(VRConfig(traffic=tcp(60_000.0), initial_cap_percent=5.0, **QUIET),  # cap binds
               VRConfig(traffic=tcp(60_000.0), initial_cap_percent=40.0, **QUIET))  # cap far above demand
    p.advance(20.0)
    c0 = p.cpu_seconds()
    m = p.measure(20.0)
    share = (p.cpu_seconds() - c0) / 20.0
    assert m.forwarded_pps[0] / m.to_vr_pps[0] > 0.9  # a rate ratio calls it "not limited" ...
    assert share[0] > 0.8 * 0.05  # ... but it uses most of its cap
    assert share[0] <= 0.05 + 1e-12
    assert share[1] < 0.5 * 0.40 and share[1] == pytest.approx(60_000.0 / K / 100.0, rel=1e-3)


def test_sim_host_reads_cpu_ns_over_its_own_clock() -> None:
    clock = SimClock()
    config = PlantConfig(vrs=(VRConfig(traffic=udp(100_000.0), initial_cap_percent=10.0, **QUIET),
                              VRConfig(traffic=udp(10_000.0), initial_cap_percent=60.0, **QUIET)),
                         dom0s=(Dom0Config(capacity_pps=1e9),), seed=2)
    host = SimHost.for_plant(config, clock=clock)
    first = host.read_cpu_ns(["vr1", "vr2", "nope"])
    assert set(first) == {"vr1", "vr2"}  # a name that is no simulated VR is left out
    assert all(isinstance(v, int) for v in first.values())
    clock.advance(10.0)
    second = host.read_cpu_ns(iter(["vr1", "vr2"]))  # any iterable
    share = {vr: (second[vr] - first[vr]) / 10e9 for vr in second}
    assert share["vr1"] == pytest.approx(0.10, rel=1e-6)  # the cap binds: CPU ~= cap
    assert share["vr2"] == pytest.approx(10_000.0 / K / 100.0, rel=1e-6)
    assert share["vr2"] < 0.1 * 0.60  # offered little: well under its cap
    # A cap written through the host is what the VR then uses when it binds.
    assert host.apply_cap("vr1", 5.0) == 5.0
    clock.advance(4.0)
    third = host.read_cpu_ns(["vr1"])
    assert (third["vr1"] - second["vr1"]) / 4e9 == pytest.approx(0.05, rel=1e-6)
    assert host.read_cpu_ns([]) == {}
