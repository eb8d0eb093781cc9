"""The CFS period written with each quota (``cfs_period_us``): libvirt quota, cgroup v1 and v2.

libvirt against the fake domain (it follows libvirt's parameter rules), cgroups against plain files
with the kernel's file contract; the real kernel is in tests/root/test_cgroup_real.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.libvirt import FakeHypervisor
from xtc.daemon.config import ConfigError, loads_config
from xtc.host.actuators import (
    CgroupV1Actuator,
    CgroupV2Actuator,
    LibvirtQuotaActuator,
    check_cfs_period,
    make_actuator,
    period_for,
)
from xtc.host.errors import ActuatorError
from xtc.host.libvirt_conn import LibvirtConn


@pytest.mark.parametrize("cap, short, period", [
    (100.0, 25000, 25000), (4.0, 25000, 25000), (3.99, 25000, 50000), (2.0, 25000, 50000),
    (1.99, 25000, 100000), (1.0, 25000, 100000), (1.0, 30000, 120000), (0.1, 25000, 800000),
    (0.05, 25000, 800000), (50.0, 1000, 2000), (10.0, 1_000_000, 1_000_000),
])
def test_period_doubles_until_the_quota_is_a_millisecond(cap: float, short: int, period: int) -> None:
    assert period_for(cap, short) == period


@pytest.mark.parametrize("bad", [-1, 1, 999, 1_000_001, 25000.0, True, "25000", None])
def test_a_period_the_kernel_refuses_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="cfs_period_us"):
        check_cfs_period(bad)


def lxc(**sched: int) -> tuple[FakeHypervisor, LibvirtConn]:
    hv = FakeHypervisor("lxc")
    hv.define("vr", **sched)
    return hv, LibvirtConn(open_fn=hv.open)


def test_libvirt_writes_the_period_with_the_quota_and_restores_the_original() -> None:
    hv, conn = lxc()  # unlimited, period 100 ms
    act = LibvirtQuotaActuator(conn, "vr", cfs_period_us=25000)
    assert act.set_cap(40) == pytest.approx(40.0)
    assert hv.params("vr")["vcpu_period"] == 25000 and hv.params("vr")["vcpu_quota"] == 10000
    # Below 4% the quota would be under 1 ms on 25 ms: the period doubles, the cap stays exact.
    assert act.set_cap(3) == pytest.approx(3.0)
    assert hv.params("vr")["vcpu_period"] == 50000 and hv.params("vr")["vcpu_quota"] == 1500
    assert act.set_cap(1) == pytest.approx(1.0)
    assert hv.params("vr")["vcpu_period"] == 100000 and hv.params("vr")["vcpu_quota"] == 1000
    assert act.set_cap(1.5) == pytest.approx(1.5)
    assert hv.writes[-1].params == {"vcpu_quota": 1500}  # same period: the quota alone
    assert act.set_cap(1.5) == pytest.approx(1.5) and act.write_count == 4
    assert act.original().values == {"vcpu_quota": -1, "vcpu_period": 100000}
    assert act.restore() is True
    assert hv.params("vr")["vcpu_quota"] == -1 and hv.params("vr")["vcpu_period"] == 100000


def test_libvirt_a_period_alone_is_written_when_the_quota_stays() -> None:
    hv, conn = lxc(vcpu_quota=1000, vcpu_period=50000)  # 2%
    act = LibvirtQuotaActuator(conn, "vr", cfs_period_us=25000)
    assert act.set_cap(1) == pytest.approx(1.0)  # 1000 us per 100 ms: the period moves, not the quota
    assert hv.writes[-1].params == {"vcpu_period": 100000}
    act.restore()
    assert (hv.params("vr")["vcpu_quota"], hv.params("vr")["vcpu_period"]) == (1000, 50000)


@pytest.mark.parametrize("before, cap, first", [
    # From 40% on 100 ms to 10% on 25 ms: the quota first (2.5% in between), not the period (160%).
    ((40000, 100000), 10.0, "vcpu_quota"),
    # From 1% on 100 ms to 40% on 25 ms: the period first (4% in between), not the quota (10%).
    ((1000, 100000), 40.0, "vcpu_period"),
])
def test_libvirt_writes_first_what_keeps_the_cap_in_between_lower(before: tuple[int, int], cap: float, first: str) -> None:
    hv, conn = lxc(vcpu_quota=before[0], vcpu_period=before[1])
    act = LibvirtQuotaActuator(conn, "vr", cfs_period_us=25000)
    act.set_cap(cap)
    assert list(hv.writes[-1].params)[0] == first
    assert hv.params("vr")["vcpu_quota"] / hv.params("vr")["vcpu_period"] * 100 == pytest.approx(cap)


def test_cgroup_v1_writes_period_and_quota_in_a_safe_order_and_restores(tmp_path: Path) -> None:
    d = tmp_path / "vr1"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text("40000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    act = CgroupV1Actuator(d, "vr1", cfs_period_us=25000)
    written: list[tuple[str, str]] = []
    real = act._write_file
    act._write_file = lambda name, value: (written.append((name, value)), real(name, value))[1]  # type: ignore[method-assign]
    assert act.set_cap(10) == pytest.approx(10.0)
    assert written == [("cpu.cfs_quota_us", "2500"), ("cpu.cfs_period_us", "25000")]
    # The period is read back too: changed behind XTC's back, it is seen and written again.
    (d / "cpu.cfs_period_us").write_text("100000")
    act.refresh_s = 0.0
    assert act.set_cap(10) == pytest.approx(10.0)
    assert (d / "cpu.cfs_period_us").read_text() == "25000"
    assert act.restore() is True
    assert (d / "cpu.cfs_quota_us").read_text() == "40000" and (d / "cpu.cfs_period_us").read_text() == "100000"


def test_cgroup_v2_one_line_with_the_period(tmp_path: Path) -> None:
    d = tmp_path / "vr2"
    d.mkdir()
    (d / "cpu.max").write_text("max 100000\n")
    act = CgroupV2Actuator(d, "vr2", cfs_period_us=25000)
    assert act.set_cap(20) == pytest.approx(20.0) and (d / "cpu.max").read_text() == "5000 25000"
    assert act.set_cap(2) == pytest.approx(2.0) and (d / "cpu.max").read_text() == "1000 50000"
    assert act.restore() is True and (d / "cpu.max").read_text() == "max 100000"


def test_without_the_option_the_period_found_is_kept(tmp_path: Path) -> None:
    d = tmp_path / "vr2"
    d.mkdir()
    (d / "cpu.max").write_text("max 100000\n")
    act = make_actuator("cgroup", "vr2", cgroup_dir=d)
    assert act.set_cap(20) == pytest.approx(20.0) and (d / "cpu.max").read_text() == "20000 100000"


def test_xen_has_no_cfs_period() -> None:
    hv = FakeHypervisor("xen")
    hv.define("vr")
    with pytest.raises(ValueError, match="Xen"):
        make_actuator("xen", "vr", conn=LibvirtConn(open_fn=hv.open), cfs_period_us=25000)


def test_a_write_outside_the_kernel_range_is_refused(tmp_path: Path) -> None:
    hv, conn = lxc()
    act = LibvirtQuotaActuator(conn, "vr", cfs_period_us=25000)
    with pytest.raises(ActuatorError, match="vcpu_period"):
        act._write({"vcpu_period": 500}, restoring=False)
    assert hv.writes == []


CONFIG = """
schema = "xtc-daemon/1"
[daemon]
cfs_period_us = {value}
[libvirt]
uri = "{uri}"
"""


def test_config_takes_a_period_and_refuses_what_the_kernel_or_xen_would() -> None:
    assert loads_config(CONFIG.format(value=25000, uri="lxc:///")).daemon.cfs_period_us == 25000
    assert loads_config(CONFIG.format(value=0, uri="xen:///system")).daemon.cfs_period_us == 0
    for value, uri, where in [(999, "lxc:///", "daemon.cfs_period_us"), (2_000_000, "lxc:///", "daemon.cfs_period_us"),
                              ('"25ms"', "lxc:///", "daemon.cfs_period_us"), (25000, "xen:///system", "Xen")]:
        with pytest.raises(ConfigError, match=where):
            loads_config(CONFIG.format(value=value, uri=uri))
