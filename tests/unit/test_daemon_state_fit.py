"""Issue 51, item 3, the parts below the daemon process: a saved record checked by the backends
(simulated, cgroup) and the pure rule for an instance of a VR no longer configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtc.control import make_controller
from xtc.daemon.api import ApiError, Request
from xtc.daemon.config import CgroupVr, loads_config
from xtc.daemon.core import DaemonCore, RestoreCap, StateError
from xtc.daemon.service import DaemonService, make_host
from xtc.host.cgroup import CgroupBackend
from xtc.host.counters import ProcNetDevCounters
from xtc.host.errors import VRNotRunning
from xtc.models import PAPER_MODEL
from xtc_lab.sim.host import SimHost, SimVr, render_proc_net_dev

from fakes.daemon import daemon_toml


def factory():
    return make_controller(PAPER_MODEL, "xtc")


def doc(instances: dict, pending: dict | None = None, records: dict | None = None) -> dict:
    return {"schema": "xtc-daemon-state/1", "instances": instances, "pending_restores": pending or {},
            "pending_records": records or {}}


def inst(setpoint_pps: float = 30000.0, original: float | None = 80.0, record: dict | None = None) -> dict:
    return {"state": "active", "setpoint_pps": setpoint_pps, "original_cap_percent": original, "cap_percent": 9.0,
            "original_record": record}


# --------------------------------------------------------------------------------- the core


def test_instance_of_an_unconfigured_vr_becomes_a_restore_only_entry():
    c = DaemonCore(factory)
    rec = {"backend": "sim", "target": "vr9", "params": {"cap_percent": 50.0}}
    c.load_state(doc({"vr1": inst(), "vr9": inst(original=50.0, record=rec)}))
    c.dirty = False
    assert c.restore_only(frozenset({"vr1"})) == ["vr9"]
    assert sorted(c.instances) == ["vr1"] and c.pending_restores == {"vr9": 50.0} and c.pending_records == {"vr9": rec}
    assert c.dirty
    d = c.describe("vr9")
    assert d["state"] == "inactive" and d["restore_pending"] is True and d["original_record"] == rec
    assert "restore_pending" not in c.describe("vr1")
    # Never controlled: the period writes no cap for it (it is absent: no restore either) ...
    c.set_present(frozenset({"vr1"}))
    assert all(a.vr != "vr9" for a in c.period(1.0, {}))
    # ... no request makes it an instance while its VR is not there ...
    with pytest.raises(ApiError) as e:
        c.handle(Request(cmd="activate", vr="vr9", setpoint_pps=1000.0), 2.0, 50.0)
    assert e.value.code == "unknown_vr"
    # ... and when the VR is seen again its original is restored.
    c.set_present(frozenset({"vr1", "vr9"}))
    assert RestoreCap("vr9", 50.0, rec) in c.period(3.0, {})
    saved = c.to_state()
    assert sorted(saved["instances"]) == ["vr1"] and saved["pending_restores"] == {"vr9": 50.0}
    assert c.restore_only(frozenset({"vr1"})) == []


def test_saved_records_lists_instances_and_pending_restores():
    c = DaemonCore(factory)
    r1 = {"backend": "sim", "target": "vr1", "params": {"cap_percent": 80.0}}
    r2 = {"backend": "sim", "target": "vr2", "params": {"cap_percent": None}}
    c.load_state(doc({"vr1": inst(record=r1), "vr3": inst()}, {"vr2": None}, {"vr2": r2}))
    assert c.saved_records() == [("vr1", r1), ("vr2", r2)]


def test_a_saved_setpoint_above_the_configured_maximum_is_refused():
    c = DaemonCore(factory, max_setpoint_pps=40000.0)
    with pytest.raises(StateError, match=r"instance 'vr1': setpoint_pps 50000 is above daemon.max_setpoint_pps \(40000\)"):
        c.load_state(doc({"vr1": inst(setpoint_pps=50000.0)}))
    assert c.instances == {}


# ------------------------------------------------------------------------------ the backends


def test_the_simulated_backend_checks_a_record_of_its_vr():
    h = SimHost((SimVr(name="vr1"), SimVr(name="vr2")), 1, None)
    h.check_original("vr1", h.snapshot("vr1"))
    h.check_original("vr1", {"backend": "sim", "target": "vr1", "params": {"cap_percent": None}})
    for record, words in (({"backend": "xen", "target": "vr9"}, "for xen 'vr9', this VR is sim 'vr1'"),
                          (h.snapshot("vr2"), "for sim 'vr2'"),
                          ({"backend": "sim", "target": "vr1", "params": {"cap_percent": 0}}, "1..100"),
                          ({"backend": "sim", "target": "vr1", "params": {"cap_percent": True}}, "1..100"),
                          ({"backend": "sim", "target": "vr1", "params": {}}, "exactly 'cap_percent'"),
                          ({"backend": "sim", "target": "vr1", "params": {"cap_percent": 5}, "x": 1}, "exactly")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            h.check_original("vr1", record)
    with pytest.raises(VRNotRunning):
        h.check_original("vr9", {"backend": "sim", "target": "vr9", "params": {"cap_percent": 5}})
    assert h.configured_vrs() == {"vr1", "vr2"}


def test_the_cgroup_backend_checks_a_record_without_writing(tmp_path: Path):
    d = tmp_path / "vr1"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    b = CgroupBackend([CgroupVr("vr1", str(d), ("vif1.0",)), CgroupVr("vr2", str(tmp_path / "gone"), ("vif2.0",))],
                      ProcNetDevCounters("/nonexistent"))
    good = b.snapshot("vr1")
    b.check_original("vr1", good)
    with pytest.raises(ValueError, match="is for xen 'vr9'"):
        b.check_original("vr1", {"backend": "xen", "target": "vr9", "params": {"cap": 0}})
    with pytest.raises(ValueError):
        b.check_original("vr1", {"backend": "xen", "target": "vr9"})
    with pytest.raises(ValueError):
        b.check_original("vr1", {**good, "params": {"cpu.cfs_quota_us": -1}})
    with pytest.raises(VRNotRunning):  # its directory is missing: cannot be looked at now
        b.check_original("vr2", good)
    assert (d / "cpu.cfs_quota_us").read_text() == "-1\n" and b.cap_writes() == 0
    assert b.configured_vrs() == {"vr1", "vr2"}


def test_a_deactivation_says_restore_pending_only_while_the_write_has_not_succeeded():
    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1"}))
    c.handle(Request(cmd="activate", vr="vr1", setpoint_pps=1000.0), 0.0, 80.0)
    res, acts = c.handle(Request(cmd="deactivate", vr="vr1"), 1.0)
    assert "restore_pending" not in res and acts == [RestoreCap("vr1", 80.0, None)]
    assert c.describe("vr1")["restore_pending"] is True  # the write not made (or failed) yet
    c.restored("vr1")
    assert "restore_pending" not in c.describe("vr1")


# ------------------------------------------------- a VR absent at start: checked when it appears


@pytest.mark.parametrize("fits", [True, False])
def test_a_record_of_a_vr_absent_at_start_is_checked_before_its_first_cap_write(tmp_path: Path, fits: bool):
    d = tmp_path / "cg" / "vr1"
    (tmp_path / "net_dev").write_text(render_proc_net_dev({"vif7.0": (0, 0), "vif7.1": (0, 0)}))
    cfg = loads_config(daemon_toml(tmp_path, f'backend = "cgroup"\nproc_net_dev = "{tmp_path}/net_dev"',
                                   f'[[cgroup.vr]]\nname = "vr1"\npath = "{d}"\ninterfaces = ["vif7.0", "vif7.1"]\n'))
    target = str(d) if fits else "/sys/fs/cgroup/somewhere-else"
    record = {"backend": "cgroup1", "target": target, "params": {"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": -1}}
    cfg.state_path.parent.mkdir(parents=True)
    cfg.state_path.write_text(json.dumps(doc({"vr1": inst(original=None, record=record)})))
    t = [1000.0]
    svc = DaemonService(cfg, make_host(cfg), clock=lambda: t[0], wall_clock=lambda: 0.0)
    svc.open()  # the VR's cgroup does not exist: the record cannot be checked yet, the daemon starts
    try:
        d.mkdir(parents=True)  # the VR appears, unlimited
        (d / "cpu.cfs_quota_us").write_text("-1\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
        for _ in range(7):  # discovery runs every 5 s
            t[0] += 1.0
            svc.run_period(t[0], 1.0)
        quota = (d / "cpu.cfs_quota_us").read_text().strip()
        if fits:
            assert quota != "-1" and not svc.control.unchecked_records  # checked once, then capped
            assert svc.core.describe("vr1")["actuation_error"] is None
        else:
            assert quota == "-1"  # never written
            assert "does not fit" in svc.core.describe("vr1")["actuation_error"]
    finally:
        rc = svc.close()
    assert (d / "cpu.cfs_quota_us").read_text().strip() == "-1"  # unlimited: restored, or never touched
    assert rc == (0 if fits else 1)
