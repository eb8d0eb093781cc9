"""cgroup actuators keep the file a cap write writes and reads back open (pwrite / pread).

Plain files in a temporary directory stand for the cgroup files (as in
test_actuators_cgroup_files.py); the kernel's own answer to a removed cgroup (ENODEV on the kept
descriptor) is imitated by closing the descriptor behind the actuator's back (EBADF) or by
removing the file (no link left), which the actuator treats the same way.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from xtc.host import cgroup_actuators
from xtc.host.actuators import CgroupV1Actuator, CgroupV2Actuator
from xtc.host.errors import VRNotRunning


def v1(tmp_path: Path, name: str = "vr1") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    return d


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every os.open by the actuators, by file name."""
    seen: list[str] = []
    real = os.open

    def counting(path, flags, *a, **kw):
        seen.append(os.path.basename(str(path)))
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(cgroup_actuators.os, "open", counting)
    return seen


def test_writes_after_the_first_open_nothing(tmp_path: Path, opens: list[str]) -> None:
    d = v1(tmp_path)
    act = CgroupV1Actuator(d)
    assert act.set_cap(40) == 40.0
    opens.clear()
    for cap in (41, 7.5, 99, 1):
        assert act.set_cap(cap) == cap
        assert (d / "cpu.cfs_quota_us").read_text() == str(int(cap * 1000))  # no stale tail ("1000" after "99000")
    assert opens == [] and act.write_count == 5
    act.close()
    assert act.set_cap(3) == 3.0 and opens == ["cpu.cfs_quota_us"]  # opened again after close
    act.close()


def test_v2_line_written_whole(tmp_path: Path, opens: list[str]) -> None:
    d = tmp_path / "vr2"
    d.mkdir()
    (d / "cpu.max").write_text("max 100000\n")
    act = CgroupV2Actuator(d)
    assert act.set_cap(50) == 50.0 and (d / "cpu.max").read_text() == "50000 100000"
    assert act.set_cap(5) == 5.0 and (d / "cpu.max").read_text() == "5000 100000"
    assert act.restore() is True and (d / "cpu.max").read_text() == "max 100000"
    act.close()


def test_cgroup_made_again_is_written_through_a_new_descriptor(tmp_path: Path) -> None:
    d = v1(tmp_path)
    act = CgroupV1Actuator(d)
    act.set_cap(20)
    shutil.rmtree(d)
    with pytest.raises(VRNotRunning, match="does not exist"):
        act.set_cap(30)
    v1(tmp_path)  # the VR restarted: a new cgroup with the same name
    assert act.set_cap(30) == 30.0
    assert (d / "cpu.cfs_quota_us").read_text() == "30000"
    act.close()


def test_descriptor_closed_behind_our_back_is_opened_again(tmp_path: Path) -> None:
    d = v1(tmp_path)
    act = CgroupV1Actuator(d)
    act.set_cap(20)
    assert act._fd_hot is not None
    os.close(act._fd_hot)  # EBADF at the next use
    assert act.set_cap(25) == 25.0 and (d / "cpu.cfs_quota_us").read_text() == "25000"
    act.close()


def test_over_the_budget_files_are_opened_and_closed(tmp_path: Path, opens: list[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    base = cgroup_actuators._CgroupBase.open_fds
    monkeypatch.setattr(cgroup_actuators._CgroupBase, "fd_budget", base + 2)
    acts = [CgroupV1Actuator(v1(tmp_path, f"vr{k}")) for k in range(4)]
    for a in acts:
        a.set_cap(10)
    assert cgroup_actuators._CgroupBase.open_fds == base + 2
    assert [a._fd_hot is not None for a in acts] == [True, True, False, False]
    opens.clear()
    for k, a in enumerate(acts):
        assert a.set_cap(11 + k) == pytest.approx(11 + k)
    assert opens.count("cpu.cfs_quota_us") == 4  # the two without a kept descriptor: write + read back each
    for a in acts:
        a.close()
    assert cgroup_actuators._CgroupBase.open_fds == base


def test_backend_close_closes_the_kept_files(tmp_path: Path) -> None:
    from xtc.daemon.config import CgroupVr
    from xtc.host.cgroup import CgroupBackend
    from xtc.host.counters import ProcNetDevCounters

    base = cgroup_actuators._CgroupBase.open_fds
    b = CgroupBackend([CgroupVr(f"vr{k}", str(v1(tmp_path, f"vr{k}")), ("a",)) for k in range(3)],
                      ProcNetDevCounters("/nonexistent"))
    for k in range(3):
        b.apply_cap(f"vr{k}", 30.0)
    assert cgroup_actuators._CgroupBase.open_fds == base + 3
    b.close()
    assert cgroup_actuators._CgroupBase.open_fds == base
