"""The product's host interface on a real LXC VR under a real libvirtd (root + libvirt).

:class:`~xtc.host.libvirt.LibvirtBackend` lists the VR with the interfaces of its live domain XML,
reads the host's real counters over netlink, and caps the VR through ``vcpu_quota``; the period
meter turns two readings into rates.  A 100 kp/s UDP stream through the VR must be forwarded at a
clearly lower rate under a 5% cap, and restoring the snapshot must give the domain back its
unlimited quota.
"""

from __future__ import annotations

import time

import pytest

from xtc.daemon.meter import PeriodMeter
from xtc.host.counters import NetlinkCounters
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import LibvirtConn

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.timeout(90)]

OFFERED_PPS = 100_000


def rates(host: LibvirtBackend, vr: str, seconds: float) -> tuple[float, float]:
    """The VR's (forwarded, offered) packets/s over ``seconds``, from two counter readings."""
    meter = PeriodMeter()
    vrs = {vr: host.list_vrs()[vr]}
    meter.update(time.monotonic(), host.read_counters(), vrs)
    time.sleep(seconds)
    r = meter.update(time.monotonic(), host.read_counters(), vrs)[vr]
    assert r.forwarded_pps is not None and not r.counter_reset, r
    return r.forwarded_pps, r.offered_pps  # type: ignore[return-value]


def test_host_interface_and_meter_on_a_real_lxc_vr(vr_lab, libvirtd) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = vr_lab(n_vrs=1)
    vr = lab.vrs[0]
    host = LibvirtBackend(LibvirtConn(uri=libvirtd.uri), "lxc", (vr.name,), NetlinkCounters())
    try:
        assert set(host.list_vrs()[vr.name]) == set(vr.vifs)
        assert host.read_cap(vr.name) is None
        original = host.snapshot(vr.name)
        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=10) as stream:
            free_rx, free_tx = rates(host, vr.name, 2.5)
            assert host.apply_cap(vr.name, 5.0) == pytest.approx(5.0)
            assert lab.domain(vr).schedulerParameters()["vcpu_quota"] == 5000
            # A cap that resolves to the quota in force is not written again.
            writes = host.cap_writes()
            assert host.apply_cap(vr.name, 5.000001) == pytest.approx(5.0) and host.cap_writes() == writes
            capped_rx, capped_tx = rates(host, vr.name, 2.5)
            host.restore_cap(vr.name, None, original)
            lifted_rx, _ = rates(host, vr.name, 2.5)
            stream.wait()
        print(
            f"\nVR forwarded pps (host interface + meter): free {free_rx:.0f} (offered {free_tx:.0f}), "
            f"cap 5% {capped_rx:.0f} (offered {capped_tx:.0f}), restored {lifted_rx:.0f}"
        )
        q = lab.domain(vr).schedulerParameters()["vcpu_quota"]
        assert q < 0 or q >= 17592186044415  # unlimited again
        assert host.read_cap(vr.name) is None
        assert free_rx > 0.5 * free_tx  # one direction forwarded: rx ~ offered
        assert capped_rx < 0.4 * free_rx
        assert lifted_rx > 2.0 * capped_rx
    finally:
        host.close()
