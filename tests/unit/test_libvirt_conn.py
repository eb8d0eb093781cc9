"""The libvirt adapter against the fake hypervisor: reconnects, missing domains, errors, XML."""

from __future__ import annotations

import pytest

from fakes.libvirt import FakeHypervisor, FakeLibvirtError
from xtc.host.errors import HypervisorUnavailable, LibvirtOperationError, VRNotRunning
from xtc.host.libvirt_conn import (
    VIR_ERR_INVALID_ARG,
    VIR_ERR_SYSTEM_ERROR,
    DomainInfo,
    LibvirtConn,
    classify_libvirt_error,
    interface_targets_from_xml,
)


@pytest.fixture
def hv() -> FakeHypervisor:
    h = FakeHypervisor("lxc")
    h.define("vr1", domid=4, interfaces=["vif4.0", "vif4.1"])
    h.define("off", domid=9, interfaces=["x"], active=False)
    return h


def test_fake_error_is_a_libvirt_error() -> None:
    libvirt = pytest.importorskip("libvirt")
    e = FakeLibvirtError("boom", VIR_ERR_INVALID_ARG)
    assert isinstance(e, libvirt.libvirtError)
    assert e.get_error_code() == libvirt.VIR_ERR_INVALID_ARG
    assert e.get_error_message() == "boom"


def test_domain_info_of_running_stopped_and_missing(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    assert c.domain_info("vr1") == DomainInfo("vr1", True, 4, ("vif4.0", "vif4.1"))
    off = c.domain_info("off")
    assert not off.running and "not running" in off.reason and off.domid is None
    missing = c.domain_info("ghost")
    assert not missing.running and "ghost" in missing.reason
    assert c.connects == 1  # one connection for all of that


def test_reconnects_after_libvirtd_restart(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    assert c.domain_info("vr1").running
    hv.restart_daemon()
    assert c.domain_info("vr1").domid == 4
    assert c.connects == 2 and hv.opens == 2


def test_daemon_down_is_unavailable_then_recovers(hv: FakeHypervisor) -> None:
    c = LibvirtConn(uri="lxc:///system", open_fn=hv.open)
    c.domain_info("vr1")
    hv.down = True
    with pytest.raises(HypervisorUnavailable, match="lxc:///system"):
        c.domain_info("vr1")
    hv.down = False
    assert c.domain_info("vr1").running


def test_error_on_new_connection_too_is_unavailable(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    hv.fail_next("lookupByName", 5, "no connection driver")
    hv.fail_next("lookupByName", 5, "no connection driver")
    with pytest.raises(HypervisorUnavailable, match="no connection driver"):
        c.domain_info("vr1")
    assert c.domain_info("vr1").running


def test_other_errors_are_operation_errors_and_keep_the_connection(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    hv.fail_next("XMLDesc", VIR_ERR_INVALID_ARG, "bad flags")
    with pytest.raises(LibvirtOperationError, match="bad flags") as ei:
        c.domain_info("vr1")
    assert ei.value.code == VIR_ERR_INVALID_ARG
    assert c.domain_info("vr1").running and c.connects == 1


def test_system_error_on_a_live_connection_is_not_a_reconnect(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    hv.fail_next("setSchedulerParametersFlags", VIR_ERR_SYSTEM_ERROR, "Unable to write to cpu.cfs_quota_us")
    with pytest.raises(LibvirtOperationError, match="cfs_quota"):
        c.with_domain("vr1", lambda d: d.setSchedulerParametersFlags({"vcpu_quota": 5000}, 1))
    assert c.connects == 1


def test_with_domain_raises_vr_not_running(hv: FakeHypervisor) -> None:
    c = LibvirtConn(open_fn=hv.open)
    with pytest.raises(VRNotRunning) as ei:
        c.with_domain("off", lambda d: d.schedulerParameters())
    assert ei.value.vr == "off"
    with pytest.raises(VRNotRunning, match="ghost"):
        c.with_domain("ghost", lambda d: d.schedulerParameters())


def test_classify() -> None:
    assert classify_libvirt_error(FakeLibvirtError("x", 6)) == "connection"
    assert classify_libvirt_error(FakeLibvirtError("x", 38, 7)) == "connection"  # from RPC
    assert classify_libvirt_error(FakeLibvirtError("x", 42)) == "not_running"
    assert classify_libvirt_error(FakeLibvirtError("x", 55)) == "not_running"
    assert classify_libvirt_error(FakeLibvirtError("x", 8)) == "other"
    assert classify_libvirt_error(FakeLibvirtError("x", 38)) == "other"  # no conn to ask


def test_interface_targets_from_xml() -> None:
    xml = """<domain type='lxc' id='1234'>
      <name>vr</name>
      <devices>
        <interface type='bridge'><source bridge='b0'/><target dev='vif3.0'/></interface>
        <interface type='network'><source network='default'/></interface>
        <interface type='bridge'><target dev='veth-x'/><alias name='net1'/></interface>
        <hostdev mode='subsystem'><target dev='nope'/></hostdev>
      </devices>
      <metadata><interface><target dev='not-a-device'/></interface></metadata>
    </domain>"""
    assert interface_targets_from_xml(xml) == ("vif3.0", "veth-x")
    with pytest.raises(ValueError, match="does not parse"):
        interface_targets_from_xml("<domain><devices>")
    with pytest.raises(ValueError, match="root <network>"):
        interface_targets_from_xml("<network/>")


def test_running_domains_and_driver_kind(hv: FakeHypervisor) -> None:
    hv.define("a-vr", domid=2, interfaces=["vif2.0"])
    c = LibvirtConn(open_fn=hv.open)
    doms = c.running_domains()
    assert [d.name for d in doms] == ["a-vr", "vr1"]  # "off" is not running
    assert doms[0] == DomainInfo("a-vr", True, 2, ("vif2.0",))
    assert c.driver_kind() == "lxc"
    hv.restart_daemon()
    assert len(c.running_domains()) == 2 and c.connects == 2
    assert LibvirtConn(open_fn=FakeHypervisor("xen").open).driver_kind() == "xen"
    assert LibvirtConn(open_fn=FakeHypervisor("qemu").open).driver_kind() == "qemu"
