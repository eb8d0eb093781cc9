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
