"""The daemon's host adapters on a real LXC VR under a real libvirtd (root + libvirt).

The meter reads the host's real /proc/net/dev, the collector finds the VR's
interfaces in the live domain XML, and the libvirt quota actuator caps the VR
through ``vcpu_quota``; a 100 kp/s UDP stream through the VR must be forwarded
at a clearly lower rate under a 5% cap, and ``restore()`` must give the domain
back its unlimited quota.
"""

from __future__ import annotations

import time

import pytest

from xtc.host.actuators import LibvirtQuotaActuator
from xtc.daemon.collector import Collector, LibvirtDomainInterfaces
from xtc.host.libvirt_conn import LibvirtConn
from xtc.daemon.meter import Meter, ProcNetDevSource, RateTracker

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.timeout(90)]

OFFERED_PPS = 100_000


def forwarded_pps(meter: Meter, col: Collector, seconds: float) -> tuple[float, float]:
    """Sample the meter at 10/s for ``seconds``; return the VR's (rx_pps, tx_pps) over the last 1 s."""
    t0 = time.monotonic()
    while (now := time.monotonic()) - t0 < seconds:
        meter.sample(now)
        time.sleep(0.1)
    now = time.monotonic()
    meter.sample(now)
    s = col.collect(now, meter.rates(1.0), meter.tracker.interfaces)["vr"]
    assert s.running and s.rx_pps is not None, s.reason
    return s.rx_pps, s.tx_pps  # type: ignore[return-value]


def test_meter_collector_and_quota_actuator_on_a_real_lxc_vr(vr_lab, libvirtd) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = vr_lab(n_vrs=1)
    vr = lab.vrs[0]
    conn = LibvirtConn(uri=libvirtd.uri)
    try:
        info = conn.domain_info(vr.name)
        assert info.running and set(info.interfaces) == set(vr.vifs)
        assert not conn.domain_info(vr.name + "-nope").running

        col = Collector()
        col.add("vr", LibvirtDomainInterfaces(conn, vr.name))
        meter = Meter(ProcNetDevSource(), RateTracker(max_window_s=1.0))
        act = LibvirtQuotaActuator(conn, vr.name, cap_min=1.0, cap_max=100.0)
        assert act.read_cap() is None

        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=10) as stream:
            free_rx, free_tx = forwarded_pps(meter, col, 2.5)
            assert act.set_cap(5.0) == pytest.approx(5.0)
            assert lab.domain(vr).schedulerParameters()["vcpu_quota"] == 5000
            capped_rx, capped_tx = forwarded_pps(meter, col, 2.5)
            assert act.restore() is True
            lifted_rx, _ = forwarded_pps(meter, col, 2.5)
            stream.wait()
        print(
            f"\nVR forwarded pps (meter+collector): free {free_rx:.0f} (offered {free_tx:.0f}), "
            f"cap 5% {capped_rx:.0f} (offered {capped_tx:.0f}), restored {lifted_rx:.0f}"
        )
        q = lab.domain(vr).schedulerParameters()["vcpu_quota"]
        assert q < 0 or q >= 17592186044415  # unlimited again
        assert act.read_cap() is None
        assert free_rx > 0.5 * free_tx  # one direction forwarded: rx ~ offered
        assert capped_rx < 0.4 * free_rx
        assert lifted_rx > 2.0 * capped_rx
    finally:
        conn.close()
