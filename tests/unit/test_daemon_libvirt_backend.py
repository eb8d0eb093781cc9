"""The libvirt backend on the adapters' fake hypervisor: discovery, caps, restore of originals."""

from __future__ import annotations

import pytest

from fakes.libvirt import FakeHypervisor
from xtc.host.counters import ProcNetDevCounters
from xtc.host.errors import VRNotRunning
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


# --- RPCs per period (FakeHypervisor.calls counts the calls that reach libvirtd) -------------

def test_listing_is_one_call_and_xml_only_for_new_or_restarted_domains():
    hv, b = backend()
    for k in range(1, 4):
        hv.define(f"vr{k}", interfaces=[f"v{k}"])
    hv.define("off", interfaces=["x"], active=False)
    assert b.list_vrs() == {"vr1": ("v1",), "vr2": ("v2",), "vr3": ("v3",)}
    assert hv.calls == {"listAllDomains": 1, "XMLDesc": 3}
    hv.calls.clear()
    assert b.list_vrs() == {"vr1": ("v1",), "vr2": ("v2",), "vr3": ("v3",)}
    assert hv.calls == {"listAllDomains": 1}
    hv.calls.clear()
    hv.reboot("vr2", interfaces=["w2"])  # a new id: its XML is read again
    assert b.list_vrs() == {"vr1": ("v1",), "vr2": ("w2",), "vr3": ("v3",)}
    assert hv.calls == {"listAllDomains": 1, "XMLDesc": 1}
    hv.stop("vr3")
    assert "vr3" not in b.list_vrs()


def test_lxc_cap_write_is_two_calls_once_the_setting_is_known():
    hv, b = backend()
    hv.define("vr1", interfaces=["a"])
    b.list_vrs()
    b.apply_cap("vr1", 20.0)  # the first write reads everything (the original)
    hv.calls.clear()
    assert b.apply_cap("vr1", 30.0) == pytest.approx(30.0)
    assert hv.calls == {"setSchedulerParametersFlags": 1, "schedulerParametersFlags": 1}
    hv.calls.clear()
    # A cap that resolves to the quota in force: one read to make sure, no write.
    assert b.apply_cap("vr1", 30.0000001) == pytest.approx(30.0)
    assert hv.calls == {"schedulerParametersFlags": 1}
    assert hv.params("vr1")["vcpu_quota"] == 30000


def test_handles_are_looked_up_once_and_again_after_a_reconnect():
    hv, b = backend()
    hv.define("vr1", interfaces=["a"])
    b.apply_cap("vr1", 20.0)
    b.apply_cap("vr1", 25.0)
    assert hv.calls["lookupByName"] == 1
    hv.restart_daemon()  # the handles died with the connection
    assert b.apply_cap("vr1", 30.0) == pytest.approx(30.0)
    assert hv.calls["lookupByName"] == 2 and hv.params("vr1")["vcpu_quota"] == 30000


@pytest.mark.parametrize(
    "lose, error, regain",
    [
        # undefined: the handle is stale; redefined: it is looked up again
        (lambda hv: hv.undefine("vr1"), Exception, lambda hv: hv.define("vr1", interfaces=["a"])),
        (lambda hv: hv.stop("vr1"), VRNotRunning, lambda hv: hv.start("vr1")),
    ],
    ids=["undefined-then-redefined", "stopped-then-started"],
)
def test_a_domain_gone_and_back_is_capped_again(lose, error, regain):
    hv, b = backend()
    hv.define("vr1", interfaces=["a"])
    b.apply_cap("vr1", 20.0)
    lose(hv)
    with pytest.raises(error):
        b.apply_cap("vr1", 25.0)
    regain(hv)  # the live parameters are the defined ones again: everything is read again
    assert b.apply_cap("vr1", 25.0) == pytest.approx(25.0)
    assert hv.params("vr1")["vcpu_quota"] == 25000
    assert b.snapshot("vr1")["params"] == {"vcpu_period": 100000, "vcpu_quota": -1}


def test_xen_cap_write_is_three_calls_once_the_setting_is_known():
    hv, b = backend("xen")
    hv.define("vr1", interfaces=[])
    b.apply_cap("vr1", 20.0)
    hv.calls.clear()
    assert b.apply_cap("vr1", 30.0) == 30.0
    # Xen reads back with isActive + schedulerParameters (libxl takes no flags on reads).
    assert hv.calls == {"setSchedulerParametersFlags": 1, "isActive": 1, "schedulerParameters": 1}


def test_an_interface_hot_plugged_into_a_running_domain_is_found_by_a_later_listing() -> None:
    from xtc.host.libvirt_conn import XML_REFRESH_LISTINGS

    hv, b = backend("lxc")
    hv.define("vr1", interfaces=["veth0"])
    assert b.list_vrs() == {"vr1": ("veth0",)}
    hv.domains["vr1"].interfaces.append("veth1")  # hot-plugged: same domain id
    seen = [b.list_vrs()["vr1"] for _ in range(XML_REFRESH_LISTINGS)]
    assert seen[0] == ("veth0",)  # the cached XML serves the listings in between
    assert seen[-1] == ("veth0", "veth1")
