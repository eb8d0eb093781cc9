"""The libvirt backend's CPU time (:meth:`LibvirtBackend.read_cpu_ns`) on the fake hypervisor.

The contract: one bulk ``domainListGetStats(doms, VIR_DOMAIN_STATS_CPU_TOTAL)`` call per read
where the driver has it (Xen's libxl, QEMU), on the kept domain handles, key ``cpu.time``; one
``info()`` per domain where it has not (upstream libvirt's LXC driver answers
``VIR_ERR_NO_SUPPORT``, as the lab's libvirtd 9.0 does: tests/libvirt/test_lxc_cpu_time.py); a
domain that is gone or not running is left out; only the loss of libvirtd fails the call.
"""

from __future__ import annotations

import pytest

from fakes.libvirt import FakeHypervisor
from xtc.host.counters import ProcNetDevCounters
from xtc.host.errors import HypervisorUnavailable, LibvirtOperationError
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import VIR_ERR_INTERNAL_ERROR, VIR_ERR_NO_DOMAIN, VIR_ERR_OPERATION_INVALID, LibvirtConn


def backend(kind: str = "xen", domains: tuple[str, ...] = ()) -> tuple[FakeHypervisor, LibvirtBackend]:
    hv = FakeHypervisor(kind)
    b = LibvirtBackend(LibvirtConn(f"{kind}:///", open_fn=hv.open), kind, domains, ProcNetDevCounters("/proc/net/dev"))
    return hv, b


def three(hv: FakeHypervisor) -> None:
    for i, ns in ((1, 7_000_000_000), (2, 123), (3, 5)):
        hv.define(f"vr{i}", interfaces=[f"vif{i}.0"], vcpus=2)
        hv.set_cpu_ns(f"vr{i}", ns)
    hv.stop("vr3")


@pytest.mark.parametrize("kind", ["xen", "qemu"])
def test_one_bulk_call_per_read_on_the_listed_handles(kind: str) -> None:
    hv, b = backend(kind)
    three(hv)
    b.list_vrs()  # the daemon lists every period: the handles come from the listing
    hv.calls.clear()
    assert b.read_cpu_ns(["vr1", "vr2", "vr3"]) == {"vr1": 7_000_000_000, "vr2": 123}  # vr3 is shut off
    # vr3, not running, was not listed: its handle is looked up once, then kept like the others.
    assert hv.calls == {"domainListGetStats": 1, "lookupByName": 1}
    hv.set_cpu_ns("vr1", 9_000_000_000)
    assert b.read_cpu_ns(iter(["vr1", "vr3"])) == {"vr1": 9_000_000_000}  # any iterable; read again
    assert hv.calls == {"domainListGetStats": 2, "lookupByName": 1}
    assert b.conn.bulk_stats is True


def test_names_without_a_handle_are_looked_up_once_and_unknown_ones_left_out() -> None:
    hv, b = backend("xen")
    three(hv)
    assert b.read_cpu_ns(["vr2", "nope"]) == {"vr2": 123}
    assert hv.calls["lookupByName"] == 2 and hv.calls["domainListGetStats"] == 1
    assert b.read_cpu_ns(["vr2"]) == {"vr2": 123}
    assert hv.calls["lookupByName"] == 2  # kept
    assert b.read_cpu_ns(["nope"]) == {} and b.read_cpu_ns([]) == {}
    assert hv.calls["domainListGetStats"] == 2  # no call with an empty list (libvirt refuses one)


def test_a_domain_undefined_behind_a_kept_handle_is_left_out_and_a_restart_is_seen() -> None:
    hv, b = backend("xen")
    three(hv)
    b.list_vrs()
    hv.undefine("vr2")
    hv.start("vr3")
    assert b.read_cpu_ns(["vr1", "vr2", "vr3"]) == {"vr1": 7_000_000_000, "vr3": 5}


def test_a_bulk_call_that_says_a_domain_is_gone_looks_the_domains_up_again() -> None:
    hv, b = backend("xen")
    three(hv)
    b.list_vrs()
    hv.fail_next("domainListGetStats", VIR_ERR_NO_DOMAIN, "Domain not found")
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr1": 7_000_000_000, "vr2": 123}
    assert hv.calls["domainListGetStats"] == 2
    # Twice in a row: this read falls back to one call per domain, the next is bulk again.
    hv.fail_next("domainListGetStats", VIR_ERR_OPERATION_INVALID, "domain is not running")
    hv.fail_next("domainListGetStats", VIR_ERR_NO_DOMAIN, "Domain not found")
    hv.calls.clear()
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr1": 7_000_000_000, "vr2": 123}
    assert hv.calls["info"] == 2
    hv.calls.clear()
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr1": 7_000_000_000, "vr2": 123}
    assert hv.calls == {"domainListGetStats": 1}


def test_lxc_has_no_bulk_stats_so_each_domain_is_asked_once() -> None:
    hv, b = backend("lxc")
    three(hv)
    b.list_vrs()
    hv.calls.clear()
    assert b.read_cpu_ns(["vr1", "vr2", "vr3", "nope"]) == {"vr1": 7_000_000_000, "vr2": 123}
    # The refused bulk call looked up vr3 (not listed) and "nope"; per domain, "nope" once more.
    assert hv.calls["domainListGetStats"] == 1 and hv.calls["info"] == 3 and hv.calls["lookupByName"] == 3
    assert b.conn.bulk_stats is False
    hv.calls.clear()
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr1": 7_000_000_000, "vr2": 123}
    assert hv.calls == {"info": 2}  # the refusal is remembered: no bulk call again


def test_domain_filter_leaves_other_domains_out() -> None:
    hv, b = backend("xen", domains=("vr2",))
    three(hv)
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr2": 123}


def test_libvirtd_restart_is_survived_and_its_absence_is_an_error() -> None:
    hv, b = backend("xen")
    three(hv)
    b.list_vrs()
    hv.restart_daemon()  # kept handles die with the connection: reconnect, look up again
    assert b.read_cpu_ns(["vr1"]) == {"vr1": 7_000_000_000}
    hv.restart_daemon()
    hv.down = True
    with pytest.raises(HypervisorUnavailable):
        b.read_cpu_ns(["vr1"])


def test_another_failure_of_the_bulk_call_is_an_operation_error() -> None:
    hv, b = backend("xen")
    three(hv)
    hv.fail_next("domainListGetStats", VIR_ERR_INTERNAL_ERROR, "internal error: cannot read stats")
    with pytest.raises(LibvirtOperationError, match="cannot read stats"):
        b.read_cpu_ns(["vr1"])


def test_per_domain_failure_leaves_only_that_domain_out() -> None:
    hv, b = backend("lxc")
    three(hv)
    b.list_vrs()
    b.read_cpu_ns(["vr1"])
    hv.fail_next("info", VIR_ERR_INTERNAL_ERROR, "internal error: Unable to get cpu account")
    assert b.read_cpu_ns(["vr1", "vr2"]) == {"vr2": 123}
