"""cgroup v1 and v2 actuators against directories with the cgroup file contract.

cgroup v2 cannot be tested against the kernel on hosts whose cgroup2 mount has
no cpu controller (see tests/root/test_cgroup_real.py for the real v1 test and
the real v2 test where the host allows it), so here the v2 file ``cpu.max``
("<quota> <period>" or "max <period>") and the v1 files are plain files in a
temporary directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from xtc.host.actuators import (
    CgroupV1Actuator,
    CgroupV2Actuator,
    OriginalCap,
    make_actuator,
)
from xtc.host.errors import ActuatorError, VRNotRunning


def v1(tmp_path: Path, quota: str = "-1", period: str = "100000") -> Path:
    d = tmp_path / "vr1"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text(quota + "\n")
    (d / "cpu.cfs_period_us").write_text(period + "\n")
    return d


def v2(tmp_path: Path, cpu_max: str = "max 100000") -> Path:
    d = tmp_path / "vr2"
    d.mkdir()
    (d / "cpu.max").write_text(cpu_max + "\n")
    return d


def test_v1_set_and_restore(tmp_path: Path) -> None:
    d = v1(tmp_path)
    act = CgroupV1Actuator(d, "vr1")
    assert act.read_cap() is None
    assert act.set_cap(42.5) == 42.5
    assert (d / "cpu.cfs_quota_us").read_text() == "42500"
    assert act.set_cap(42.5) == 42.5 and act.write_count == 1
    assert act.set_cap(0.5) == 1.0 and (d / "cpu.cfs_quota_us").read_text() == "1000"
    assert act.original().values == {"cpu.cfs_quota_us": -1, "cpu.cfs_period_us": 100000}
    assert act.restore() is True
    assert (d / "cpu.cfs_quota_us").read_text() == "-1"


def test_v1_keeps_period_and_restores_both(tmp_path: Path) -> None:
    d = v1(tmp_path, quota="25000", period="50000")
    act = CgroupV1Actuator(d)
    assert act.set_cap(10) == 10.0 and (d / "cpu.cfs_quota_us").read_text() == "5000"
    (d / "cpu.cfs_period_us").write_text("100000")
    act.set_cap(10)
    act.restore()
    assert (d / "cpu.cfs_quota_us").read_text() == "25000"
    assert (d / "cpu.cfs_period_us").read_text() == "50000"


def test_v2_set_and_restore_verbatim(tmp_path: Path) -> None:
    d = v2(tmp_path, "max 100000")
    act = CgroupV2Actuator(d, "vr2")
    assert act.read_cap() is None
    assert act.set_cap(30) == 30.0
    assert (d / "cpu.max").read_text() == "30000 100000"
    assert act.set_cap(30.0001) == 30.0 and act.write_count == 1
    rec = json.loads(json.dumps(act.original().to_dict()))
    assert rec["params"] == {"cpu.max": "max 100000"}
    act2 = CgroupV2Actuator(d, "vr2")
    act2.adopt_original(OriginalCap.from_dict(rec))
    act2.set_cap(50)
    assert act2.restore() is True
    assert (d / "cpu.max").read_text() == "max 100000"


def test_v2_limited_original_and_other_period(tmp_path: Path) -> None:
    d = v2(tmp_path, "75000 250000")
    act = CgroupV2Actuator(d)
    assert act.read_cap() == 30.0
    assert act.set_cap(10) == 10.0 and (d / "cpu.max").read_text() == "25000 250000"
    act.restore()
    assert (d / "cpu.max").read_text() == "75000 250000"


@pytest.mark.parametrize("content", ["", "max", "12 34 56", "abc 100000", "max 0", "-5 100000"])
def test_v2_garbage_is_an_error_and_nothing_written(tmp_path: Path, content: str) -> None:
    d = v2(tmp_path, content)
    act = CgroupV2Actuator(d)
    if content == "max":  # the kernel also accepts a lone value; period defaults to 100 ms
        assert act.read_cap() is None
        return
    with pytest.raises(ActuatorError, match="cpu.max"):
        act.set_cap(10)
    assert (d / "cpu.max").read_text().strip() == content and act.original() is None


def test_cgroup_gone_is_vr_not_running(tmp_path: Path) -> None:
    act = CgroupV1Actuator(tmp_path / "gone", "vrx")
    with pytest.raises(VRNotRunning, match="vrx"):
        act.set_cap(10)
    with pytest.raises(VRNotRunning):
        CgroupV2Actuator(tmp_path / "gone2").read_cap()


def test_missing_cpu_controller_file(tmp_path: Path) -> None:
    (tmp_path / "nocpu").mkdir()
    with pytest.raises(ActuatorError, match="no cpu controller"):
        CgroupV2Actuator(tmp_path / "nocpu").set_cap(10)


@pytest.mark.parametrize("bad", [math.nan, -math.inf])
def test_bad_cap_changes_nothing(tmp_path: Path, bad: float) -> None:
    d = v1(tmp_path)
    with pytest.raises(ValueError):
        CgroupV1Actuator(d).set_cap(bad)
    assert (d / "cpu.cfs_quota_us").read_text() == "-1\n"


def test_factory_picks_the_version(tmp_path: Path) -> None:
    assert isinstance(make_actuator("cgroup", "a", cgroup_dir=v1(tmp_path)), CgroupV1Actuator)
    assert isinstance(make_actuator("cgroup", "b", cgroup_dir=v2(tmp_path)), CgroupV2Actuator)
    with pytest.raises(ValueError, match="cgroup_dir"):
        make_actuator("cgroup2", "c")


class _Counted(CgroupV1Actuator):
    """A v1 actuator that logs its file operations and runs on a clock the test moves."""

    def __init__(self, d: Path) -> None:
        super().__init__(d, "vr1")
        self.ops: list[str] = []
        self.now_s = 0.0
        self.clock = lambda: self.now_s

    def _read_file(self, name: str) -> str:
        self.ops.append(f"read {name}")
        return super()._read_file(name)

    def _write_file(self, name: str, value: str) -> None:
        self.ops.append(f"write {name}")
        super()._write_file(name, value)


def test_v1_write_costs_the_write_and_one_quota_read_back(tmp_path: Path) -> None:
    act = _Counted(v1(tmp_path))
    assert act.set_cap(40) == 40.0
    # The first write reads both files (the original), writes, reads the quota back.
    assert act.ops == ["read cpu.cfs_quota_us", "read cpu.cfs_period_us", "write cpu.cfs_quota_us",
                       "read cpu.cfs_quota_us"]
    act.ops.clear()
    assert act.set_cap(41) == 41.0
    assert act.ops == ["write cpu.cfs_quota_us", "read cpu.cfs_quota_us"]
    act.ops.clear()
    # A cap that resolves to the quota in force: the quota is read to make sure, nothing written.
    assert act.set_cap(41.0000001) == 41.0
    assert act.ops == ["read cpu.cfs_quota_us"] and act.write_count == 2


def test_v1_quota_reset_behind_our_back_is_seen_and_rewritten(tmp_path: Path) -> None:
    d = v1(tmp_path)
    act = _Counted(d)
    act.set_cap(30)
    (d / "cpu.cfs_quota_us").write_text("-1")  # e.g. the VR's cgroup was re-created
    assert act.set_cap(30) == 30.0
    assert (d / "cpu.cfs_quota_us").read_text() == "30000" and act.write_count == 2


def test_v1_period_changed_behind_our_back_is_caught_within_refresh_s(tmp_path: Path) -> None:
    d = v1(tmp_path, period="100000")
    act = _Counted(d)
    act.refresh_s = 30.0
    act.set_cap(20)
    (d / "cpu.cfs_period_us").write_text("50000")
    act.now_s = 29.0
    act.set_cap(21)  # the remembered period is still trusted
    assert (d / "cpu.cfs_quota_us").read_text() == "21000"
    act.now_s = 30.0
    act.ops.clear()
    # After refresh_s everything is read again: the quota is computed on the period in force.
    assert act.set_cap(21) == 21.0
    assert "read cpu.cfs_period_us" in act.ops
    assert (d / "cpu.cfs_quota_us").read_text() == "10500"


def test_v1_failed_write_forgets_the_remembered_setting(tmp_path: Path) -> None:
    d = v1(tmp_path)
    act = _Counted(d)
    act.set_cap(20)
    (d / "cpu.cfs_period_us").write_text("50000")
    real_write = CgroupV1Actuator._write_file

    def refuse(self: CgroupV1Actuator, name: str, value: str) -> None:
        raise ActuatorError("refused")

    CgroupV1Actuator._write_file = refuse  # type: ignore[method-assign]
    try:
        with pytest.raises(ActuatorError):
            act.set_cap(25)
    finally:
        CgroupV1Actuator._write_file = real_write  # type: ignore[method-assign]
    act.ops.clear()
    # The next write reads the whole setting again, so the new period is used.
    assert act.set_cap(25) == 25.0
    assert act.ops[:2] == ["read cpu.cfs_quota_us", "read cpu.cfs_period_us"]
    assert (d / "cpu.cfs_quota_us").read_text() == "12500"
