"""The collector: interfaces per VR (Xen vifs, libvirt XML, static), per-VR sums, re-resolution."""

from __future__ import annotations

import pytest

from xtc.daemon.collector import (
    Collector,
    LibvirtDomainInterfaces,
    Resolution,
    StaticInterfaces,
    XenVifs,
    needs_resolve,
    xen_vif_names,
)
from fakes.libvirt import FakeHypervisor
from xtc.host.libvirt_conn import LibvirtConn
from xtc.daemon.meter import IfCounters, IfRates, RateTracker


def rates(**pps: tuple[float, float]) -> dict[str, IfRates]:
    return {n.replace("_", "."): IfRates(rx, tx, 0, 0, 0, 0, 1.0, 10.0) for n, (rx, tx) in pps.items()}


def test_xen_vif_names_match_exactly() -> None:
    present = ["vif1.0", "vif11.0", "vif1.1", "vif1.10", "vif1.2-emu", "vif1", "vif1.x", "eth0", "xvif1.0"]
    assert xen_vif_names(1, present) == ("vif1.0", "vif1.1", "vif1.2-emu", "vif1.10")
    assert xen_vif_names(11, present) == ("vif11.0",)
    assert xen_vif_names(2, present) == ()


def test_throughput_is_host_rx_and_offered_is_host_tx() -> None:
    col = Collector()
    col.add("vr", StaticInterfaces(["vif3.0", "vif3.1"]))
    s = col.collect(10.0, rates(vif3_0=(1000.0, 4000.0), vif3_1=(2500.0, 50.0), vif4_0=(9e9, 9e9)))["vr"]
    assert s.running and s.throughput_pps == 3500.0 and s.offered_pps == 4050.0
    assert s.interfaces == ("vif3.0", "vif3.1") and s.span_s == 1.0


def test_collect_from_the_meter_end_to_end() -> None:
    tr = RateTracker()
    for k in range(11):
        tr.update(k * 0.1, {"vif5.0": IfCounters(k * 100, k * 300), "vif5.1": IfCounters(k * 200, 0)})
    hv = FakeHypervisor("xen")
    hv.define("vr", domid=5)
    col = Collector()
    col.add("vr", XenVifs(LibvirtConn(open_fn=hv.open), "vr"))
    s = col.collect(1.0, tr.rates(1.0), tr.interfaces)["vr"]
    assert s.rx_pps == pytest.approx(3000.0) and s.tx_pps == pytest.approx(3000.0)


def test_missing_rate_means_no_measurement() -> None:
    col = Collector()
    col.add("vr", StaticInterfaces(["a", "b"]))
    s = col.collect(0.0, rates(a=(1.0, 1.0)), frozenset({"a", "b"}))["vr"]
    assert s.running and s.rx_pps is None and s.missing == ("b",) and "b" in s.reason


def test_xen_reboot_is_followed_with_new_domid() -> None:
    hv = FakeHypervisor("xen")
    hv.define("vr", domid=3)
    conn = LibvirtConn(open_fn=hv.open)
    col = Collector(refresh_s=10.0)
    col.add("vr", XenVifs(conn, "vr"))
    r1 = rates(vif3_0=(100.0, 200.0))
    assert col.collect(0.0, r1)["vr"].rx_pps == 100.0
    assert col.collect(1.0, r1)["vr"].rx_pps == 100.0
    assert col.lookups == 1  # cached while nothing changes
    hv.reboot("vr", domid=8)
    r2 = rates(vif8_0=(300.0, 400.0))  # vif3.0 vanished, vif8.0 appeared
    s = col.collect(2.0, r2)["vr"]
    assert s.rx_pps == 300.0 and s.interfaces == ("vif8.0",) and col.lookups == 2


def test_libvirt_xml_interfaces_and_stopped_domain() -> None:
    hv = FakeHypervisor("lxc")
    hv.define("vr", interfaces=["veth-in", "veth-out"])
    conn = LibvirtConn(open_fn=hv.open)
    col = Collector()
    col.add("vr", LibvirtDomainInterfaces(conn, "vr"))
    col.add("ghost", LibvirtDomainInterfaces(conn, "ghost"))
    out = col.collect(0.5, {"veth-in": IfRates(10, 0, 0, 0, 0, 0, 1, 1), "veth-out": IfRates(5, 20, 0, 0, 0, 0, 1, 1)})
    assert out["vr"].rx_pps == 15 and out["vr"].tx_pps == 20
    assert not out["ghost"].running and out["ghost"].rx_pps is None and "ghost" in out["ghost"].reason
    hv.stop("vr")
    s = col.collect(20.0, {})["vr"]
    assert not s.running and s.rx_pps is None


def test_libvirt_unreachable_is_a_sample_not_a_crash() -> None:
    hv = FakeHypervisor("lxc")
    hv.define("vr", interfaces=["v0"])
    col = Collector()
    col.add("vr", LibvirtDomainInterfaces(LibvirtConn(open_fn=hv.open), "vr"))
    hv.down = True
    s = col.collect(0.0, {})["vr"]
    assert not s.running and "cannot connect to libvirt" in s.reason
    hv.down = False
    s = col.collect(0.1, {"v0": IfRates(7, 8, 0, 0, 0, 0, 1, 1)})["vr"]
    assert s.running and s.rx_pps == 7


def test_needs_resolve_rule() -> None:
    ok = Resolution(True, ("a",))
    present = frozenset({"a"})
    assert needs_resolve(None, None, 0.0, present, 10.0)
    assert not needs_resolve(ok, 0.0, 9.9, present, 10.0)
    assert needs_resolve(ok, 0.0, 10.0, present, 10.0)
    assert needs_resolve(ok, 5.0, 4.0, present, 10.0)  # clock went back
    assert needs_resolve(ok, 0.0, 1.0, frozenset({"b"}), 10.0)
    assert needs_resolve(Resolution(False), 0.0, 1.0, present, 10.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        StaticInterfaces([])
    with pytest.raises(ValueError):
        StaticInterfaces(["a", "a"])
    with pytest.raises(ValueError):
        Collector(refresh_s=0)
    col = Collector()
    col.add("vr", StaticInterfaces(["a"]))
    with pytest.raises(ValueError, match="already"):
        col.add("vr", StaticInterfaces(["b"]))
    assert col.interfaces_of("vr") == ()
