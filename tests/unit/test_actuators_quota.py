"""libvirt LXC/QEMU vcpu_quota actuator against the fake libvirt domain.

The fake follows libvirt's rules for these parameters: ``vcpu_period`` in
1000..1000000 us, ``vcpu_quota`` -1 (no limit) or 1000..17592186044415 us,
0 leaves the quota unchanged, non-integers refused by the binding.
"""

from __future__ import annotations

import json
import math

import pytest

from xtc.host.actuators import LibvirtQuotaActuator, OriginalCap, make_actuator
from fakes.libvirt import FakeHypervisor
from xtc.host.errors import ActuatorError, VRNotRunning
from xtc.host.libvirt_conn import LibvirtConn


def setup(kind: str = "lxc", **sched: int):
    hv = FakeHypervisor(kind)
    hv.define("vr", **sched)
    return hv, LibvirtConn(open_fn=hv.open)


@pytest.mark.parametrize(
    "cap, period, quota",
    [(20.0, 100000, 20000), (37.25, 100000, 37250), (1.0, 100000, 1000), (0.2, 100000, 1000),
     (100.0, 100000, 100000), (250.0, 100000, 100000), (12.5, 50000, 6250), (1.0, 10000, 1000)],
)
def test_quota_is_cap_times_period(cap: float, period: int, quota: int) -> None:
    hv, conn = setup(vcpu_period=period)
    act = LibvirtQuotaActuator(conn, "vr")
    got = act.set_cap(cap)
    assert hv.params("vr")["vcpu_quota"] == quota
    assert hv.params("vr")["vcpu_period"] == period  # the period is never touched
    assert got == pytest.approx(quota / period * 100)


def test_write_on_change_and_read_back() -> None:
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr", cap_min_percent=3, cap_max_percent=80)
    assert act.set_cap(50) == 50.0
    assert act.set_cap(50.0000001) == 50.0
    assert act.set_cap(90) == 80.0
    assert act.set_cap(0) == 3.0
    assert [w.params for w in hv.writes] == [{"vcpu_quota": 50000}, {"vcpu_quota": 80000}, {"vcpu_quota": 3000}]
    assert act.read_cap() == 3.0


@pytest.mark.parametrize("original", [-1, 0, 18446744073709551, 17592186044415])
def test_unlimited_originals_restore_to_unlimited(original: int) -> None:
    hv, conn = setup(vcpu_quota=original)
    act = LibvirtQuotaActuator(conn, "vr")
    assert act.read_cap() is None
    act.set_cap(10)
    assert act.original().values == {"vcpu_quota": original, "vcpu_period": 100000}
    assert act.restore() is True
    assert hv.params("vr")["vcpu_quota"] == -1
    assert hv.writes[-1].params == {"vcpu_quota": -1}


def test_limited_original_restored_exactly_with_its_period() -> None:
    hv, conn = setup(vcpu_quota=33333, vcpu_period=200000)
    act = LibvirtQuotaActuator(conn, "vr")
    act.set_cap(5)
    hv.domains["vr"].live_params["vcpu_period"] = 100000  # someone changed the period meanwhile
    act.set_cap(6)
    assert act.restore()
    assert hv.params("vr")["vcpu_quota"] == 33333 and hv.params("vr")["vcpu_period"] == 200000


def test_persisted_original_survives_restart_as_json() -> None:
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    act.set_cap(15)
    rec = json.loads(json.dumps(act.original().to_dict()))
    act2 = LibvirtQuotaActuator(LibvirtConn(open_fn=hv.open), "vr")
    act2.adopt_original(OriginalCap.from_dict(rec))
    act2.set_cap(30)
    act2.restore()
    assert hv.params("vr")["vcpu_quota"] == -1


def test_adopt_refuses_a_record_for_other_parameters() -> None:
    _, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    with pytest.raises(ValueError, match="vcpu_quota"):
        act.adopt_original(OriginalCap("libvirt-quota", "vr", (("cap", 0),)))
    with pytest.raises(ValueError, match="> 0"):
        act.adopt_original(OriginalCap("libvirt-quota", "vr", (("vcpu_period", 0), ("vcpu_quota", -1))))


def test_reboot_resets_quota_and_xtc_notices() -> None:
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    act.set_cap(20)
    hv.reboot("vr")
    assert act.read_cap() is None
    assert act.set_cap(20) == 20.0 and len(hv.writes) == 2
    assert act.original().values["vcpu_quota"] == -1


def test_survives_libvirtd_restart() -> None:
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    act.set_cap(20)
    hv.restart_daemon()
    assert act.set_cap(40) == 40.0 and conn.connects == 2


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_bad_caps_change_nothing(bad: float) -> None:
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    with pytest.raises(ValueError):
        act.set_cap(bad)
    assert hv.writes == [] and act.original() is None


def test_stopped_domain() -> None:
    hv, conn = setup()
    hv.stop("vr")
    with pytest.raises(VRNotRunning, match="vr"):
        LibvirtQuotaActuator(conn, "vr").set_cap(10)


def test_readback_unlimited_after_write_is_an_error() -> None:
    """If the hypervisor silently ignores the write, XTC says so instead of believing it."""
    hv, conn = setup()
    act = LibvirtQuotaActuator(conn, "vr")
    orig = hv.domains["vr"].live_params

    class Ignoring(dict):
        def update(self, *a, **k):  # drops every write
            pass

    hv.domains["vr"].live_params = Ignoring(orig)
    with pytest.raises(ActuatorError, match="not applied"):
        act.set_cap(10)


def test_qemu_factory_caps_the_guests_vcpu_not_the_emulator() -> None:
    # Measured on a real QEMU domain (docs/results/2026-11-26-qemu-cap): global_quota also
    # throttles the emulator thread that moves the packets (the Dom0 share); vcpu_quota caps only
    # the VR's own CPU, the paper's meaning of a cap.
    hv, conn = setup("qemu")
    act = make_actuator("qemu", "vr", conn=conn)
    act.set_cap(25)
    assert hv.params("vr")["vcpu_quota"] == 25000
    assert hv.params("vr")["global_quota"] == -1
    assert [w.params for w in hv.writes] == [{"vcpu_quota": 25000}]
    assert act.read_cap() == 25.0
    assert act.restore() is True
    assert hv.params("vr")["vcpu_quota"] == -1
    assert isinstance(make_actuator("lxc", "vr", conn=conn), LibvirtQuotaActuator)


def test_qemu_actuator_refuses_a_guest_with_several_vcpus_and_writes_nothing() -> None:
    # vcpu_quota holds each vCPU: a 2-vCPU guest capped at 25 % could use 50 % of a CPU.
    hv, conn = setup("qemu")
    hv.define("vr2", vcpus=2)
    act = make_actuator("qemu", "vr2", conn=conn)
    with pytest.raises(ActuatorError, match=r"vr2.*2 vCPUs"):
        act.set_cap(25)
    assert hv.writes == []
    assert hv.params("vr2")["vcpu_quota"] == -1 and hv.params("vr2")["global_quota"] == -1
