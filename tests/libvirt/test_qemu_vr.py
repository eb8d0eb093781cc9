"""A real QEMU domain as a VR (issue 49): boot, forward, cap, read back, restore, teardown.

The domain boots Debian's kernel with the lab's busybox initramfs (``xtc_lab.lab.qemu``) and
forwards in its own kernel; the test caps it through the product's actuator (the libvirt backend's
QEMU parameter), reads the cap back, restores the exact original parameters and tears it down.
Skips, with the reason, where QEMU cannot run (no root, no libvirt, a package missing).

Slow: about 35 s on the lab host (TCG), about 120 s while libvirt probed QEMU's capabilities
again on each lookup (``libvirt-qemu`` outside the group ``kvm``: docs/guide/lab-qemu.md,
tests/libvirt/test_libvirtd_qemu_caps.py). The guest forwards about 15 s after QEMU starts.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.beside, pytest.mark.slow]


@pytest.fixture
def qemu_lab() -> Iterator[object]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, bridges, libvirtd)")
    pytest.importorskip("libvirt", reason="libvirt-python not installed")
    from xtc_lab.lab import qemu
    from xtc_lab.lab.libvirtd import Libvirtd, LibvirtdError
    from xtc_lab.lab.netlab import NetLab, random_prefix

    missing = qemu.missing_requirements()
    if missing:
        pytest.skip("QEMU VR cannot run here: missing " + "; ".join(missing))
    daemon = Libvirtd(uri=qemu.QEMU_URI)
    try:
        daemon.ensure_running()
    except LibvirtdError as e:
        pytest.skip(f"no libvirtd serving {qemu.QEMU_URI}: {e}")
    with daemon.lease():
        lab = NetLab(prefix=random_prefix("xtcq"), uri=qemu.QEMU_URI)
        try:
            yield lab
        finally:
            lab.teardown()
    if os.environ.get("XTC_LAB_KEEP_LIBVIRTD") != "1":
        daemon.stop_if_unused()


def test_qemu_vr_boots_forwards_is_capped_and_restored(qemu_lab: object) -> None:
    import libvirt

    from xtc.host.actuators import make_actuator
    from xtc.host.libvirt_conn import LibvirtConn
    from xtc_lab.lab.netlab import NetLab, teardown_prefix

    lab: NetLab = qemu_lab  # type: ignore[assignment]
    vr = lab.add_qemu_vr(ready_timeout_s=90)  # returns only once a ping crosses the guest kernel
    dom = lab.domain(vr)
    assert dom.OSType() == "hvm"
    assert Path(f"/sys/class/net/{vr.vifs[0]}/tun_flags").exists()  # a tap, named vif<N>.0
    # libvirt kept the interfaces' "no segmentation offload to the host" (the taps count packets, not TSO frames)
    live = ET.fromstring(dom.XMLDesc(0))
    hosts = [i.find("driver/host") for i in live.findall("devices/interface")]
    assert len(hosts) == 2 and all(h is not None and h.get("gso") == "off" and h.get("tso4") == "off" for h in hosts)
    before = dom.schedulerParameters()

    act = make_actuator("qemu", vr.name, conn=LibvirtConn(lab.uri), cap_min_percent=1, cap_max_percent=100)
    act.set_cap(30.0)
    after = dom.schedulerParameters()
    assert act.read_cap() == pytest.approx(30.0)
    # the guest's own vCPU is capped; the emulator thread (the host's share) is not
    assert after["vcpu_quota"] == after["vcpu_period"] * 30 // 100
    assert after["global_quota"] == before["global_quota"] and after["emulator_quota"] == before["emulator_quota"]
    c0 = vr.counters()["forwarded_to_tr"]
    lab.wait_forwarding(vr, 30)  # still forwards under the cap
    assert vr.counters()["forwarded_to_tr"] > c0

    act.restore()
    assert dom.schedulerParameters() == before

    removed = teardown_prefix(lab.prefix, lab.uri)
    assert f"domain {vr.name}" in removed
    with pytest.raises(libvirt.libvirtError):
        lab.connection().lookupByName(vr.name)
    assert not Path(f"/sys/class/net/{vr.vifs[0]}").exists()
