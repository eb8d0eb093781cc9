"""original_from_cap: restoring a cap the daemon persisted as a percentage, on every backend."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from xtc.host.actuators import CgroupV1Actuator, CgroupV2Actuator, LibvirtQuotaActuator, XenCapActuator
from fakes.libvirt import FakeHypervisor
from xtc.host.libvirt_conn import LibvirtConn


def xen(cap: int):
    hv = FakeHypervisor("xen")
    hv.define("vr", cap=cap)
    return hv, XenCapActuator(LibvirtConn(open_fn=hv.open), "vr")


def test_xen_unlimited_and_limited() -> None:
    hv, act = xen(0)
    act.set_cap(10)
    act.adopt_original(act.original_from_cap(None))
    assert act.restore() and hv.params("vr")["cap"] == 0
    hv, act = xen(0)
    act.set_cap(10)
    act.adopt_original(act.original_from_cap(42.4))
    assert act.restore() and hv.params("vr")["cap"] == 42
    # A tiny original never becomes 0 (unlimited) by rounding.
    assert act.original_from_cap(0.2).values == {"cap": 1}


def test_quota_keeps_the_current_period() -> None:
    hv = FakeHypervisor("lxc")
    hv.define("vr", vcpu_period=50000)
    act = LibvirtQuotaActuator(LibvirtConn(open_fn=hv.open), "vr")
    act.set_cap(10)
    assert act.original_from_cap(30.0).values == {"vcpu_quota": 15000, "vcpu_period": 50000}
    act.adopt_original(act.original_from_cap(None))
    assert act.restore() and hv.params("vr")["vcpu_quota"] == -1


def test_cgroups(tmp_path: Path) -> None:
    d1 = tmp_path / "a"
    d1.mkdir()
    (d1 / "cpu.cfs_quota_us").write_text("-1")
    (d1 / "cpu.cfs_period_us").write_text("100000")
    a1 = CgroupV1Actuator(d1)
    a1.set_cap(10)
    a1.adopt_original(a1.original_from_cap(55.0))
    assert a1.restore() and (d1 / "cpu.cfs_quota_us").read_text() == "55000"
    d2 = tmp_path / "b"
    d2.mkdir()
    (d2 / "cpu.max").write_text("20000 200000")
    a2 = CgroupV2Actuator(d2)
    a2.set_cap(50)
    a2.adopt_original(a2.original_from_cap(None))
    assert a2.restore() and (d2 / "cpu.max").read_text() == "max 200000"


@pytest.mark.parametrize("bad", [0.0, -3.0, math.nan, math.inf])
def test_bad_original_caps_are_refused(bad: float) -> None:
    _, act = xen(0)
    with pytest.raises(ValueError, match="original cap"):
        act.original_from_cap(bad)
    with pytest.raises(TypeError):
        act.original_from_cap("50")  # type: ignore[arg-type]
