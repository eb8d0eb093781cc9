"""The daemon's cgroup backend and its ``[[cgroup.vr]]`` configuration, on a fake cgroup tree.

The cgroup files (v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, v2 ``cpu.max``) are plain
files in ``tmp_path``, ``/proc/net/dev`` is a file rendered by the test, and the clock is fake:
no root, no sleeping.  The real kernel cgroup with a real forwarder is in
tests/root/test_daemon_cgroup_e2e.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from xtc.host.counters import ProcNetDevCounters
from xtc.host.cgroup import CgroupBackend
from xtc.daemon.config import CgroupVr, ConfigError, loads_config
from xtc.host.errors import HostAdapterError, VRNotRunning
from xtc.daemon.service import DaemonService, make_host
from xtc_lab.sim.host import render_proc_net_dev

from configerrors import refused
from fakes.daemon import daemon_toml


def v1_dir(root: Path, name: str = "vr1", quota: str = "-1", period: str = "100000") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text(quota + "\n")
    (d / "cpu.cfs_period_us").write_text(period + "\n")
    return d


def v2_dir(root: Path, name: str = "vr2", cpu_max: str = "max 100000") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "cpu.max").write_text(cpu_max + "\n")
    return d


def cgroup_config(tmp_path: Path, vrs: str, extra: str = "") -> str:
    return daemon_toml(tmp_path, f'backend = "cgroup"\nproc_net_dev = "{tmp_path}/net_dev"\n{extra}', vrs)


VR1 = '[[cgroup.vr]]\nname = "vr1"\npath = "{d}"\ninterfaces = ["vif7.0", "vif7.1"]\n'


# ------------------------------------------------------------------------------- configuration
def test_config_example_in_the_docstring_is_valid(tmp_path: Path) -> None:
    from xtc.daemon import config as C

    doc = C.__doc__ or ""
    example = doc.split("[[cgroup.vr]]", 1)[1].split("\n\n", 1)[0]
    text = '[daemon]\nbackend = "cgroup"\n[[cgroup.vr]]' + "\n".join(line.strip() for line in example.splitlines())
    cfg = loads_config(text)
    assert cfg.cgroup.vr == (CgroupVr("vr1", "/sys/fs/cgroup/cpu/xtc-lab-vr1", ("vif123.0", "vif123.1")),)


def test_config_parses_and_normalises_paths(tmp_path: Path) -> None:
    text = cgroup_config(tmp_path, VR1.format(d="/sys/fs/cgroup/cpu//lab-vr1/")
                         + '[[cgroup.vr]]\nname = "vr2"\npath = "/x/vr2"\ninterfaces = ["eth9"]\n')
    cfg = loads_config(text)
    assert cfg.daemon.backend == "cgroup"
    assert [v.path for v in cfg.cgroup.vr] == ["/sys/fs/cgroup/cpu/lab-vr1", "/x/vr2"]
    assert cfg.cgroup.vr[0].interfaces == ("vif7.0", "vif7.1")


@pytest.mark.parametrize(
    "vrs, key, words",
    [
        ("", "cgroup.vr", "needs at least one"),
        ('[[cgroup.vr]]\nname = "vr1"\ninterfaces = ["a"]\n', "cgroup.vr[0].path", "missing"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\n', "cgroup.vr[0].interfaces", "missing"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "rel/a"\ninterfaces = ["a"]\n', "cgroup.vr[0].path", "absolute"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a/../b"\ninterfaces = ["a"]\n', "cgroup.vr[0].path", ".."),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = []\n', "cgroup.vr[0].interfaces", "non-empty"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = "vif1.0"\n', "cgroup.vr[0].interfaces", "list"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a/b"]\n', "cgroup.vr[0].interfaces[0]", "interface name"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a234567890123456"]\n', "cgroup.vr[0].interfaces[0]", "1..15"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a", "a"]\n', "cgroup.vr[0].interfaces[1]", "twice"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a"]\n'
         '[[cgroup.vr]]\nname = "vr2"\npath = "/b"\ninterfaces = ["a"]\n', "cgroup.vr[1].interfaces[0]", "belongs to VR 'vr1'"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a"]\n'
         '[[cgroup.vr]]\nname = "vr1"\npath = "/b"\ninterfaces = ["b"]\n', "cgroup.vr", "twice"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\ninterfaces = ["a"]\n'
         '[[cgroup.vr]]\nname = "vr2"\npath = "/a/"\ninterfaces = ["b"]\n', "cgroup.vr[1].path", "already the cgroup"),
        ('[[cgroup.vr]]\nname = "vr 1"\npath = "/a"\ninterfaces = ["a"]\n', "cgroup.vr[0].name", "letters"),
        ('[[cgroup.vr]]\nname = "vr1"\ncgroup = "/a"\ninterfaces = ["a"]\n', "cgroup.vr[0].cgroup", "path"),
        ('[[cgroup.vr]]\nname = "vr1"\npath = "/a"\nifaces = ["a"]\n', "cgroup.vr[0].ifaces", "interfaces"),
        ('[cgroup]\nroot = "/a"\n', "cgroup.root", "unknown key"),
        ('[cgroup]\nvr = 3\n', "cgroup.vr", "array of tables"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, vrs: str, key: str, words: str) -> None:
    refused(lambda: loads_config(cgroup_config(tmp_path, vrs)), ConfigError, key, words)


def test_cgroup_vrs_refused_with_another_backend(tmp_path: Path) -> None:
    text = cgroup_config(tmp_path, VR1.format(d="/a")).replace('backend = "cgroup"', 'backend = "libvirt"')
    with pytest.raises(ConfigError, match="only meaningful with backend 'cgroup'") as e:
        loads_config(text)
    assert e.value.key == "cgroup.vr"


def test_make_host_builds_the_cgroup_backend(tmp_path: Path) -> None:
    cfg = loads_config(cgroup_config(tmp_path, VR1.format(d=tmp_path / "cg" / "vr1")))
    b = make_host(cfg)
    assert isinstance(b, CgroupBackend) and b.name == "cgroup"
    assert b.list_vrs() == {}  # the cgroup does not exist (yet): the VR is absent, no error
    v1_dir(tmp_path / "cg")
    assert b.list_vrs() == {"vr1": ("vif7.0", "vif7.1")}


# ------------------------------------------------------------------------------------ backend
def backend(*vrs: tuple[str, Path, tuple[str, ...]]) -> CgroupBackend:
    return CgroupBackend([CgroupVr(n, str(p), ifs) for n, p, ifs in vrs], ProcNetDevCounters("/nonexistent"))


def test_v1_cap_written_read_and_exact_original_restored(tmp_path: Path) -> None:
    d = v1_dir(tmp_path, quota="-1", period="50000")
    b = backend(("vr1", d, ("a",)))
    assert b.read_cap("vr1") is None
    rec = b.snapshot("vr1")
    assert rec == {"backend": "cgroup1", "target": str(d),
                   "params": {"cpu.cfs_period_us": 50000, "cpu.cfs_quota_us": -1}}
    b.apply_cap("vr1", 30.0)
    assert (d / "cpu.cfs_quota_us").read_text() == "15000"  # the period found is kept
    assert b.read_cap("vr1") == pytest.approx(30.0)
    # Someone changes the period behind XTC's back; the exact record still restores both.
    (d / "cpu.cfs_period_us").write_text("100000")
    b2 = backend(("vr1", d, ("a",)))  # a new daemon (after SIGKILL): only the record knows
    b2.restore_cap("vr1", 30.0, rec)
    assert (d / "cpu.cfs_period_us").read_text() == "50000"
    assert (d / "cpu.cfs_quota_us").read_text() == "-1"


def test_v2_original_line_restored_verbatim(tmp_path: Path) -> None:
    d = v2_dir(tmp_path, cpu_max="max 50000")
    b = backend(("vr2", d, ("a",)))
    rec = b.snapshot("vr2")
    assert rec["backend"] == "cgroup2" and rec["params"] == {"cpu.max": "max 50000"}
    b.apply_cap("vr2", 20.0)
    assert (d / "cpu.max").read_text() == "10000 50000"
    b.restore_cap("vr2", None, rec)
    assert (d / "cpu.max").read_text() == "max 50000"


def test_never_unlimited_by_accident(tmp_path: Path) -> None:
    d = v1_dir(tmp_path)
    b = backend(("vr1", d, ("a",)))
    for cap in (0.0, -5.0, 0.001):
        b.apply_cap("vr1", cap)  # clamped up to 1 %: a quota, never -1 or 0
        assert int((d / "cpu.cfs_quota_us").read_text()) == 1000
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            b.apply_cap("vr1", bad)
        assert int((d / "cpu.cfs_quota_us").read_text()) == 1000
    assert b.read_cap("vr1") == pytest.approx(1.0)


def test_restore_without_record_uses_the_actuators_own_original(tmp_path: Path) -> None:
    d = v1_dir(tmp_path, quota="70000", period="100000")
    b = backend(("vr1", d, ("a",)))
    b.apply_cap("vr1", 10.0)
    b.restore_cap("vr1", 55.0)  # the percentage is only a fallback: the exact original wins
    assert (d / "cpu.cfs_quota_us").read_text() == "70000"
    b.apply_cap("vr1", 10.0)
    b3 = backend(("vr1", d, ("a",)))  # no original known: the percentage, period as found
    b3.restore_cap("vr1", 55.0)
    assert (d / "cpu.cfs_quota_us").read_text() == "55000"


def test_bad_record_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    d = v1_dir(tmp_path)
    b = backend(("vr1", d, ("a",)))
    b.apply_cap("vr1", 10.0)
    for rec in ({"backend": "cgroup2", "target": str(d), "params": {"cpu.max": "max 100000"}},
                {"backend": "cgroup1", "target": "/elsewhere", "params": {"cpu.cfs_quota_us": -1, "cpu.cfs_period_us": 1}},
                {"backend": "cgroup1", "target": str(d), "params": {"cpu.cfs_quota_us": -1}}):
        with pytest.raises(HostAdapterError, match="cannot restore"):
            b.restore_cap("vr1", None, rec)
        assert (d / "cpu.cfs_quota_us").read_text() == "10000"


def test_removed_cgroup_is_a_missing_vr_not_a_crash(tmp_path: Path) -> None:
    d1, d2 = v1_dir(tmp_path, "vr1"), v1_dir(tmp_path, "vr2")
    b = backend(("vr1", d1, ("a",)), ("vr2", d2, ("b",)))
    b.apply_cap("vr1", 20.0)
    shutil.rmtree(d1)
    assert b.list_vrs() == {"vr2": ("b",)}
    for call in (lambda: b.apply_cap("vr1", 30.0), lambda: b.read_cap("vr1"), lambda: b.restore_cap("vr1", None)):
        with pytest.raises(VRNotRunning, match="vr1"):
            call()
    # The original taken before XTC's first write is still known (kept for when the VR returns).
    assert b.snapshot("vr1")["params"] == {"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": -1}
    with pytest.raises(VRNotRunning, match="vr1"):
        backend(("vr1", d1, ("a",))).snapshot("vr1")
    with pytest.raises(VRNotRunning, match="not a VR"):
        b.read_cap("vr9")
    b.apply_cap("vr2", 20.0)  # the other VR is unaffected


def test_directory_without_cpu_files_is_an_actuator_error(tmp_path: Path) -> None:
    d = tmp_path / "nocpu"
    d.mkdir()
    b = backend(("vr1", d, ("a",)))
    with pytest.raises(HostAdapterError, match="no cpu controller"):
        b.read_cap("vr1")


# --------------------------------------------------------------- the daemon on the cgroup backend
class Plant:
    """A VR behind a fake cgroup v1: it forwards ``pps_per_percent`` packets/s per percent of cap."""

    def __init__(self, d: Path, net_dev: Path, offered_pps: float = 100_000.0, pps_per_percent: float = 1_900.0):
        self.d, self.net_dev = d, net_dev
        self.offered, self.k = offered_pps, pps_per_percent
        self.rx = self.tx = 0.0
        self.write()

    def cap(self) -> float | None:
        if not self.d.is_dir():
            return 0.0
        q, p = int((self.d / "cpu.cfs_quota_us").read_text()), int((self.d / "cpu.cfs_period_us").read_text())
        return None if q < 0 else 100.0 * q / p

    def step(self, dt_s: float) -> None:
        cap = self.cap()
        fwd = self.offered if cap is None else min(self.offered, self.k * cap)
        self.rx += fwd * dt_s
        self.tx += self.offered * dt_s
        self.write()

    def write(self) -> None:
        self.net_dev.write_text(render_proc_net_dev({"vif7.0": (0, int(self.tx)), "vif7.1": (int(self.rx), 0)}))


def test_daemon_holds_a_setpoint_through_the_cgroup_and_survives_its_removal(tmp_path: Path) -> None:
    d = v1_dir(tmp_path / "cg", quota="-1", period="100000")
    plant = Plant(d, tmp_path / "net_dev")
    cfg = loads_config(cgroup_config(tmp_path, VR1.format(d=d)))
    t = [1000.0]
    svc = DaemonService(cfg, make_host(cfg), clock=lambda: t[0], wall_clock=lambda: 0.0)
    svc.open()

    def drive(seconds: float) -> list[dict]:
        out = []
        for k in range(1, int(round(seconds * 10)) + 1):
            t[0] += 0.1
            plant.step(0.1)
            if k % 10 == 0:
                svc.run_period(t[0], 1.0)
                out.append(svc.core.describe("vr1"))
        return out

    def ask(**doc: object) -> dict:
        return json.loads(svc.handle_message([json.dumps({"v": 1, **doc}).encode()]))

    try:
        drive(2)
        assert ask(cmd="activate", vr="vr1", setpoint_pps=30_000)["ok"]
        trace = drive(15)
        m = np.array([s["forwarded_pps"] for s in trace[5:]])
        assert abs(m.mean() - 30_000) <= 0.05 * 30_000, m
        assert plant.cap() == pytest.approx(30_000 / 1_900, rel=0.1)
        rec = svc.core.describe("vr1")["original_record"]
        assert rec == {"backend": "cgroup1", "target": str(d),
                       "params": {"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": -1}}
        shutil.rmtree(d)  # the VR stops: its cgroup is gone
        trace = drive(7)  # discovery runs every 5 s
        assert trace[-1]["present"] is False
        assert ask(cmd="status", vr="vr1")["ok"]
        v1_dir(tmp_path / "cg", quota="-1", period="100000")  # and comes back, unlimited
        drive(7)
        assert svc.core.describe("vr1")["present"] is True
        assert plant.cap() is not None  # capped again
    finally:
        rc = svc.close()
    assert rc == 0
    assert (d / "cpu.cfs_quota_us").read_text() == "-1"  # the exact original back on stop


def test_listing_says_what_isdir_says_of_each_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories, files, symlinks to directories, dangling links, odd path forms, an unlistable parent."""
    import os

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for d in ("vr1", "vr3", "real"):
        (a / d).mkdir()
    (a / "file").write_text("")
    (a / "link").symlink_to(a / "real")
    (a / "dangling").symlink_to(a / "nowhere")
    (b / "vr9").mkdir()
    paths = [str(a / "vr1"), str(a / "vr2"), str(a / "vr3") + "/", str(a / "file"), str(a / "link"),
             str(a / "dangling"), str(a / "." / "vr1"), str(b / "vr9"), str(tmp_path / "c" / "x"), "/"]
    vrs = [(f"v{k}", p, (f"i{k}",)) for k, p in enumerate(paths)]
    be = backend(*vrs)
    want = {n: ifs for n, p, ifs in vrs if os.path.isdir(p)}
    assert be.list_vrs() == want
    assert set(want) == {"v0", "v2", "v4", "v6", "v7", "v9"}
    (a / "vr3").rmdir()
    (a / "vr2").mkdir()
    assert set(be.list_vrs()) == {"v0", "v1", "v4", "v6", "v7", "v9"}
    # A parent that cannot be listed: each of its paths is tested alone.
    real_scandir = os.scandir

    def refuse(path):
        if str(path) == str(a):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    assert set(be.list_vrs()) == {"v0", "v1", "v4", "v6", "v7", "v9"}
