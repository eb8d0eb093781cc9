"""A real LXC VR forwards real packets, and its live vcpu_quota sets how many.

One VR (LXC domain whose only process is the userspace forwarder) between a generator and a
receiver namespace; a steady 100 kp/s stream of 64-byte UDP packets; the packets the VR
forwards are read from the host-side counters of its receiver-side vif in /proc/net/dev, the
way the XTC meter reads them.  Changing ``vcpu_quota`` live through libvirt must change the
forwarded rate: clearly lower with a small quota, back up when the limit is lifted.
"""

from __future__ import annotations

import time

import pytest

from xtc_lab.lab.netlab import VR, LabError, NetLab
from xtc_lab.lab.traffic import start_udp_stream

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.timeout(60)]

OFFERED_PPS = 100_000
LOW_QUOTA_US = 5_000  # 5% of one CPU per 100 ms period


def measure(vr: VR, seconds: float) -> dict[str, float]:
    """Rates (packets/s) over ``seconds`` from the host-side counters of ``vr``'s vifs."""
    c0, t0 = vr.counters(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = vr.counters(), time.monotonic()
    return {k: (c1[k] - c0[k]) / (t1 - t0) for k in c0}


def test_live_vcpu_quota_changes_forwarded_rate(vr_lab) -> None:
    lab: NetLab = vr_lab(n_vrs=1)
    vr = lab.vrs[0]
    dom = lab.domain(vr)
    assert dom.isActive()
    assert dom.schedulerParameters()["vcpu_quota"] == -1  # no limit at start

    with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=9) as stream:
        time.sleep(1.0)
        free = measure(vr, 2.0)

        lab.set_vcpu_quota(vr, LOW_QUOTA_US)
        assert dom.schedulerParameters()["vcpu_quota"] == LOW_QUOTA_US
        time.sleep(0.5)
        capped = measure(vr, 2.0)

        lab.set_vcpu_quota(vr, -1)
        time.sleep(0.5)
        lifted = measure(vr, 2.0)
        result = stream.wait()

    print(f"\noffered/forwarded pps: free {free}, quota {LOW_QUOTA_US} us {capped}, lifted {lifted}; "
          f"sender {result.sent_pps:.0f} pps")
    # The sender kept offering (the drop is the VR's, not the generator's) ...
    assert capped["offered_from_tg"] > 0.6 * free["offered_from_tg"]
    # ... the VR forwarded a good part of it while unlimited (all of it on an idle host;
    # other work on a shared 2-core host takes some) ...
    assert free["forwarded_to_tr"] > 0.25 * free["offered_from_tg"]
    # ... clearly fewer packets under a 5% quota, and more again once the limit is lifted.
    assert capped["forwarded_to_tr"] < 0.4 * free["forwarded_to_tr"]
    assert lifted["forwarded_to_tr"] > 2.0 * capped["forwarded_to_tr"]
    assert result.sent_packets > 0.5 * OFFERED_PPS * 9


def test_bad_quota_is_refused_and_changes_nothing(vr_lab) -> None:
    lab: NetLab = vr_lab(n_vrs=1, vcpu_quota_us=20_000)
    vr = lab.vrs[0]
    with pytest.raises(LabError, match="vcpu_quota_us"):
        lab.set_vcpu_quota(vr, 0)
    assert lab.domain(vr).schedulerParameters()["vcpu_quota"] == 20_000


def test_two_vrs_forward_and_teardown_removes_everything_by_prefix(vr_lab) -> None:
    from pathlib import Path

    from pyroute2 import netns

    from xtc_lab.lab.netlab import teardown_prefix

    lab: NetLab = vr_lab(n_vrs=2)
    a, b = lab.vrs
    assert {a.tr_addr, b.tr_addr} == {"198.18.1.2", "198.18.2.2"}
    assert len({*a.vifs, *b.vifs}) == 4
    for vr in (a, b):  # both VRs forward, each between its own pair of bridges
        ping = lab.run_in(vr.tg_ns, ["ping", "-c", "2", "-i", "0.2", "-W", "2", vr.tr_addr], timeout_s=10)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    # As after a crash: forget the lab object, find everything by its prefix.
    removed = teardown_prefix(lab.prefix)
    assert f"domain {a.name}" in removed and f"domain {b.name}" in removed
    assert not [n for n in netns.listnetns() if n.startswith(lab.prefix + "-")]
    assert not [p for p in Path("/sys/class/net").iterdir() if p.name.startswith(lab.prefix + "-")]
    assert not any(Path(f"/sys/class/net/{v}").exists() for v in (*a.vifs, *b.vifs))
    assert lab.connection().listAllDomains() == [] or all(
        not d.name().startswith(lab.prefix + "-") for d in lab.connection().listAllDomains()
    )
