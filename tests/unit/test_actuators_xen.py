"""Xen credit-scheduler cap through libvirt, tested against its contract with a fake.

Xen cannot run on the machines these tests run on (no Xen hypervisor), so the
backend is exercised against :class:`fakes.libvirt.FakeHypervisor` ("xen"),
which behaves like libvirt's libxl driver with the credit scheduler: parameters
``weight`` and ``cap``, ``cap`` an unsigned integer in 0..100*vcpus where 0
means UNLIMITED, floats refused by the Python binding.  The key property: a cap
of 0 is never written, except to restore an original 0.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xtc.host.actuators import CapActuator, OriginalCap, XenCapActuator, make_actuator
from fakes.libvirt import FakeHypervisor
from xtc.host.errors import ActuatorError, VRNotRunning
from xtc.host.libvirt_conn import VIR_DOMAIN_AFFECT_LIVE, LibvirtConn


def setup(cap: int = 0, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0, vcpus: int = 1):
    hv = FakeHypervisor("xen")
    hv.define("vr1", domid=3, vcpus=vcpus, cap=cap)
    act = XenCapActuator(LibvirtConn(open_fn=hv.open), "vr1", cap_min_percent, cap_max_percent)
    return hv, act


def test_is_a_cap_actuator() -> None:
    _, act = setup()
    assert isinstance(act, CapActuator) and act.backend == "xen"


@pytest.mark.parametrize(
    "wanted, written",
    [(0.0, 1), (0.4, 1), (0.5, 1), (1.0, 1), (1.49, 1), (1.51, 2), (37.6, 38), (99.5, 100), (150.0, 100), (-5.0, 1)],
)
def test_clamps_and_rounds_to_an_integer_never_zero(wanted: float, written: int) -> None:
    hv, act = setup(cap=0)
    assert act.set_cap(wanted) == float(written)
    assert hv.params("vr1")["cap"] == written
    assert [w.params for w in hv.writes] == [{"cap": written}]
    assert hv.writes[0].flags == VIR_DOMAIN_AFFECT_LIVE


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6), min_size=1, max_size=20))
def test_zero_is_never_written_by_set_cap(caps: list[float]) -> None:
    hv, act = setup(cap=0, cap_min_percent=1.0)
    for c in caps:
        got = act.set_cap(c)
        assert 1.0 <= got <= 100.0 and got == round(got)
    assert all(w.params["cap"] >= 1 for w in hv.writes)


def test_cap_min_is_honoured_as_an_integer() -> None:
    hv, act = setup(cap_min_percent=3.0, cap_max_percent=60.0)
    assert act.set_cap(1.0) == 3.0
    assert act.set_cap(75.0) == 60.0
    _, act2 = setup(cap_min_percent=2.5)
    assert act2.set_cap(2.0) == 3.0  # rounding must not go below cap_min_percent
    with pytest.raises(ValueError, match="no integer cap"):
        setup(cap_min_percent=2.2, cap_max_percent=2.8)


def test_writes_only_on_change() -> None:
    hv, act = setup(cap=0)
    for c in (20.0, 20.2, 19.6, 20.0):
        assert act.set_cap(c) == 20.0
    assert len(hv.writes) == 1 and act.write_count == 1
    act.set_cap(21.0)
    assert len(hv.writes) == 2


def test_change_behind_xtcs_back_is_corrected() -> None:
    hv, act = setup(cap=0)
    act.set_cap(20.0)
    hv.domains["vr1"].live_params["cap"] = 77  # an operator's `xl sched-credit -c 77`
    assert act.set_cap(20.0) == 20.0
    assert len(hv.writes) == 2


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_are_refused_and_nothing_is_written(bad: float) -> None:
    hv, act = setup(cap=50)
    with pytest.raises(ValueError, match="finite"):
        act.set_cap(bad)
    assert hv.writes == [] and act.original() is None


@pytest.mark.parametrize("bad", ["20", None, True, [20]])
def test_non_numbers_are_refused(bad: object) -> None:
    hv, act = setup()
    with pytest.raises(TypeError, match="real number"):
        act.set_cap(bad)  # type: ignore[arg-type]
    assert hv.writes == []


def test_restore_original_unlimited_writes_zero_once() -> None:
    hv, act = setup(cap=0)
    act.set_cap(10.0)
    act.set_cap(30.0)
    assert act.original() == OriginalCap("xen", "vr1", (("cap", 0),))
    assert act.restore() is True
    assert hv.params("vr1")["cap"] == 0
    assert [w.params["cap"] for w in hv.writes] == [10, 30, 0]
    assert act.original() is None
    assert act.restore() is False  # nothing to restore any more
    assert len(hv.writes) == 3


def test_restore_original_limited_cap() -> None:
    hv, act = setup(cap=45)
    act.set_cap(12.0)
    assert act.restore() and hv.params("vr1")["cap"] == 45


def test_restore_without_touch_or_when_unchanged_writes_nothing() -> None:
    hv, act = setup(cap=45)
    assert act.restore() is False
    act.set_cap(45.0)  # same as the original: no write
    assert act.restore() is False and hv.writes == []


def test_adopt_original_after_a_daemon_restart() -> None:
    """A daemon killed with cap 20 in force: the new one must restore the true original (0)."""
    hv, act = setup(cap=0)
    act.set_cap(20.0)
    saved = json.dumps(act.original().to_dict())
    # --- SIGKILL; new daemon, new actuator; the domain still has cap 20.
    act2 = XenCapActuator(LibvirtConn(open_fn=hv.open), "vr1")
    act2.adopt_original(OriginalCap.from_dict(json.loads(saved)))
    act2.set_cap(25.0)
    assert act2.original().values == {"cap": 0}
    assert act2.restore() and hv.params("vr1")["cap"] == 0


def test_adopt_original_refuses_foreign_or_bad_records() -> None:
    _, act = setup()
    with pytest.raises(ValueError, match="vr2"):
        act.adopt_original(OriginalCap("xen", "vr2", (("cap", 0),)))
    with pytest.raises(ValueError, match="cgroup1"):
        act.adopt_original(OriginalCap("cgroup1", "vr1", (("cap", 0),)))
    with pytest.raises(ValueError, match="Xen original"):
        act.adopt_original(OriginalCap("xen", "vr1", (("cap", -3),)))
    with pytest.raises(ValueError, match="unknown keys"):
        OriginalCap.from_dict({"backend": "xen", "target": "vr1", "params": {"cap": 0}, "x": 1})
    assert act.original() is None


def test_domain_gone_is_vr_not_running_and_keeps_the_original() -> None:
    hv, act = setup(cap=0)
    act.set_cap(10.0)
    hv.stop("vr1")
    with pytest.raises(VRNotRunning):
        act.set_cap(20.0)
    with pytest.raises(VRNotRunning):
        act.restore()
    assert act.original() is not None


def test_refused_write_is_an_error() -> None:
    hv, act = setup()
    hv.fail_next("setSchedulerParametersFlags", 1, "internal error: Failed to set scheduler parameters")
    with pytest.raises(Exception, match="Failed to set scheduler parameters"):
        act.set_cap(10.0)


def test_not_a_xen_domain() -> None:
    hv = FakeHypervisor("lxc")
    hv.define("c")
    act = XenCapActuator(LibvirtConn(open_fn=hv.open), "c")
    with pytest.raises(ActuatorError, match="no 'cap'"):
        act.set_cap(10)


def test_write_path_refuses_zero_outside_restore() -> None:
    hv, act = setup()
    with pytest.raises(ActuatorError, match="UNLIMITED"):
        act._write({"cap": 0}, restoring=False)
    assert hv.writes == []


def test_factory_and_bounds() -> None:
    hv, _ = setup()
    conn = LibvirtConn(open_fn=hv.open)
    assert isinstance(make_actuator("xen", "vr1", conn=conn), XenCapActuator)
    for lo, hi in ((0.0, 50.0), (0.5, 50.0), (10.0, 5.0), (1.0, 101.0), (math.nan, 50.0)):
        with pytest.raises(ValueError, match="cap"):
            XenCapActuator(conn, "vr1", lo, hi)
    with pytest.raises(ValueError, match="connection"):
        make_actuator("xen", "vr1")
    with pytest.raises(ValueError, match="unknown actuator kind"):
        make_actuator("kvm", "vr1", conn=conn)
