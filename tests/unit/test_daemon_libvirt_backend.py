"""The libvirt backend on the adapters' fake hypervisor: discovery, caps, restore of originals."""

from __future__ import annotations

import pytest

from fakes.libvirt import FakeHypervisor
from xtc.host.counters import ProcNetDevCounters
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import LibvirtConn


def backend(kind="lxc", domains=()):
    hv = FakeHypervisor(kind)
    return hv, LibvirtBackend(LibvirtConn(f"{kind}:///", open_fn=hv.open), kind, domains, ProcNetDevCounters("/proc/net/dev"))


def test_discovers_running_domains_and_their_interfaces():
    hv, b = backend()
    hv.define("vr1", interfaces=["veth1a", "veth1b"])
    hv.define("vr2", interfaces=["veth2a"], active=False)
    assert b.list_vrs() == {"vr1": ("veth1a", "veth1b")}


def test_domain_filter():
    hv, b = backend(domains=("vr2",))
    hv.define("vr1", interfaces=["a"])
    hv.define("vr2", interfaces=["b"])
    assert list(b.list_vrs()) == ["vr2"]


def test_write_then_restore_unlimited_lxc_original():
    hv, b = backend()
    hv.define("vr1", interfaces=["a"])
    assert b.read_cap("vr1") is None  # vcpu_quota -1
    b.apply_cap("vr1", 20.0)
    assert b.read_cap("vr1") == pytest.approx(20.0)
    assert hv.params("vr1")["vcpu_quota"] == 20000
    b.restore_cap("vr1", None)
    assert b.read_cap("vr1") is None


def test_restore_numeric_original_after_a_fresh_start():
    hv, b = backend()
    hv.define("vr1", interfaces=["a"], vcpu_quota=70000)
    b.apply_cap("vr1", 10.0)
    _, b2 = backend()  # a restarted daemon: new backend, same hypervisor
    b2.conn = b.conn
    b2.restore_cap("vr1", 70.0)
    assert hv.params("vr1")["vcpu_quota"] == 70000


def test_xen_never_writes_zero_and_restores_unlimited():
    hv, b = backend("xen")
    hv.define("vr1", interfaces=[])
    assert b.read_cap("vr1") is None
    b.apply_cap("vr1", 0.4)  # clamped to the minimum, never 0 (= unlimited)
    assert hv.params("vr1")["cap"] == 1
    b.restore_cap("vr1", None)
    assert hv.params("vr1")["cap"] == 0


def test_xen_vif_names_match_exactly() -> None:
    from xtc.host.libvirt import xen_vif_names

    present = ["vif1.0", "vif11.0", "vif1.1", "vif1.10", "vif1.2-emu", "vif1", "vif1.x", "eth0", "xvif1.0"]
    assert xen_vif_names(1, present) == ("vif1.0", "vif1.1", "vif1.2-emu", "vif1.10")
    assert xen_vif_names(11, present) == ("vif11.0",)
    assert xen_vif_names(2, present) == ()
