"""Exact originals: the daemon persists the backend's record of a VR's setting and restores exactly it.

A percentage loses what the hypervisor had (an LXC ``vcpu_period`` other than the one found at
restore time, libvirt's spelling of "no limit"), so the core keeps the backend's record
(:meth:`Backend.snapshot`) opaque beside the percentage, persists it, and hands it back in
:class:`RestoreCap`; the libvirt backend adopts it in the actuator and restores it.  Runs on the
fake hypervisor of :mod:`fakes.libvirt`, no root.
"""

from __future__ import annotations

import json
import os

import pytest

from xtc.host.counters import ProcNetDevCounters
from xtc.models import PAPER_MODEL
from xtc.control import make_controller
from xtc.daemon.api import Request
from xtc.daemon.config import loads_config
from xtc_lab.sim.host import SimVr
from xtc.daemon.core import DaemonCore, RestoreCap, StateError
from fakes.daemon import Clock, daemon_toml
from fakes.libvirt import FakeHypervisor
from xtc.host.errors import HostAdapterError
from xtc.host.libvirt import LibvirtBackend
from xtc.host.libvirt_conn import LibvirtConn
from xtc.daemon.service import DaemonService
from xtc_lab.sim.host import SimHost, render_proc_net_dev


def factory():
    return make_controller(PAPER_MODEL, "xtc")


def rec(period: int, quota: int, target: str = "vr1") -> dict:
    return {"backend": "libvirt-quota", "target": target, "params": {"vcpu_period": period, "vcpu_quota": quota}}


def req(cmd, vr=None, sp=None):
    return Request(cmd=cmd, vr=vr, setpoint_pps=sp)


# ----------------------------------------------------------------------------------- core
def test_core_keeps_the_record_through_deactivate_state_and_shutdown():
    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1", "vr2"}))
    c.handle(req("activate", "vr1", 20000.0), 0.0, 40.0, rec(50000, 20000))
    c.handle(req("activate", "vr2", 20000.0), 0.0, None, rec(100000, -1, "vr2"))
    assert c.describe("vr1")["original_record"] == rec(50000, 20000)
    _, acts = c.handle(req("deactivate", "vr2"), 1.0)
    assert acts == [RestoreCap("vr2", None, rec(100000, -1, "vr2"))]
    doc = json.loads(json.dumps(c.to_state()))
    assert doc["instances"]["vr1"]["original_record"] == rec(50000, 20000)
    assert doc["pending_records"] == {"vr2": rec(100000, -1, "vr2")}
    d = DaemonCore(factory)
    d.load_state(doc)
    assert d.to_state() == c.to_state()
    assert d.shutdown_actions() == [RestoreCap("vr1", 40.0, rec(50000, 20000)), RestoreCap("vr2", None, rec(100000, -1, "vr2"))]
    d.restored("vr2")
    assert d.pending_records == {} and d.pending_restores == {}


def test_reactivation_before_restore_keeps_the_first_record():
    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1"}))
    c.handle(req("activate", "vr1", 20000.0), 0.0, 40.0, rec(50000, 20000))
    c.handle(req("deactivate", "vr1"), 1.0)  # restore not done (e.g. libvirtd down)
    res, _ = c.handle(req("activate", "vr1", 20000.0), 2.0, 12.0, rec(50000, 6000))
    assert res["original_record"] == rec(50000, 20000) and res["original_cap_percent"] == 40.0
    assert c.pending_records == {}


def test_state_written_before_records_were_kept_restores_by_percentage():
    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1"}))
    c.handle(req("activate", "vr1", 20000.0), 0.0, 40.0)
    doc = json.loads(json.dumps(c.to_state()))
    del doc["instances"]["vr1"]["original_record"], doc["pending_records"]
    d = DaemonCore(factory)
    d.load_state(doc)
    assert d.shutdown_actions() == [RestoreCap("vr1", 40.0, None)]


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda s: s["instances"]["vr1"].update(original_record=[1]), "original_record"),
        (lambda s: s["instances"]["vr1"].update(original_record={}), "original_record"),
        (lambda s: s.update(pending_records={"ghost": rec(1000, -1)}), "no pending restore"),
        (lambda s: s.update(pending_records=[]), "pending_records"),
    ],
)
def test_bad_records_in_state_are_refused_and_change_nothing(mutate, words):
    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1"}))
    c.handle(req("activate", "vr1", 20000.0), 0.0, 40.0, rec(50000, 20000))
    doc = json.loads(json.dumps(c.to_state()))
    mutate(doc)
    d = DaemonCore(factory)
    with pytest.raises(StateError, match=words):
        d.load_state(doc)
    assert d.instances == {} and d.pending_restores == {} and d.pending_records == {}


def test_activation_refuses_a_record_that_is_not_a_json_object():
    from xtc.daemon.api import ApiError

    c = DaemonCore(factory)
    c.set_present(frozenset({"vr1"}))
    with pytest.raises(ApiError, match="record"):
        c.handle(req("activate", "vr1", 20000.0), 0.0, 40.0, {"params": float("nan")})
    assert c.instances == {}


# ------------------------------------------------------------------------ libvirt backend
def lxc_backend(hv: FakeHypervisor, proc_net_dev: str = "/proc/net/dev") -> LibvirtBackend:
    return LibvirtBackend(LibvirtConn("lxc:///", open_fn=hv.open), "lxc", (), ProcNetDevCounters(proc_net_dev))


def test_backend_record_restores_a_period_that_a_percentage_loses():
    hv = FakeHypervisor("lxc")
    hv.define("vr1", interfaces=["a"])
    hv.domains["vr1"].live_params.update(vcpu_period=50000, vcpu_quota=20000)  # set live by an operator
    b = lxc_backend(hv)
    original = b.snapshot("vr1")
    assert original == rec(50000, 20000)
    b.apply_cap("vr1", 10.0)
    assert hv.params("vr1")["vcpu_quota"] == 5000
    hv.reboot("vr1")  # live parameters back to the defined ones: period 100000, no quota
    b.apply_cap("vr1", 10.0)
    # A restarted daemon (new backend, no actuator memory) restores from the record...
    b2 = lxc_backend(hv)
    b2.restore_cap("vr1", 40.0, original)
    assert hv.params("vr1")["vcpu_period"] == 50000 and hv.params("vr1")["vcpu_quota"] == 20000
    # ...where the percentage alone keeps the period it finds: not the VR's original setting.
    b2.apply_cap("vr1", 10.0)
    hv.reboot("vr1")
    lxc_backend(hv).restore_cap("vr1", 40.0, None)
    assert (hv.params("vr1")["vcpu_period"], hv.params("vr1")["vcpu_quota"]) == (100000, 40000)


def test_backend_read_original_of_a_touched_vr_is_its_first_original():
    hv = FakeHypervisor("lxc")
    hv.define("vr1", interfaces=["a"], vcpu_quota=70000)
    b = lxc_backend(hv)
    b.apply_cap("vr1", 10.0)
    assert b.snapshot("vr1") == rec(100000, 70000)


def test_backend_refuses_a_record_of_another_vr_and_writes_nothing():
    hv = FakeHypervisor("lxc")
    hv.define("vr1", interfaces=["a"])
    b = lxc_backend(hv)
    b.apply_cap("vr1", 10.0)
    n = len(hv.writes)
    for bad in (rec(50000, 20000, target="vr2"), {"backend": "xen", "target": "vr1", "params": {"cap": 0}}, {"x": 1}):
        with pytest.raises(HostAdapterError, match="cannot restore"):
            b.restore_cap("vr1", None, bad)
    assert len(hv.writes) == n and hv.params("vr1")["vcpu_quota"] == 10000


def test_xen_record_restores_cap_zero_only_from_the_record():
    hv = FakeHypervisor("xen")
    hv.define("vr1")
    b = LibvirtBackend(LibvirtConn("xen:///", open_fn=hv.open), "xen", (), ProcNetDevCounters("/proc/net/dev"))
    original = b.snapshot("vr1")
    assert original == {"backend": "xen", "target": "vr1", "params": {"cap": 0}}
    b.apply_cap("vr1", 0.2)
    assert hv.params("vr1")["cap"] == 1  # never 0 (= unlimited) by accident
    restarted = LibvirtBackend(LibvirtConn("xen:///", open_fn=hv.open), "xen", (), ProcNetDevCounters("/proc/net/dev"))
    restarted.restore_cap("vr1", None, original)
    assert hv.params("vr1")["cap"] == 0


def test_sim_backend_record_round_trip(tmp_path):
    b = SimHost((SimVr(name="vr1", initial_cap_percent=80.0),), seed=1, hypervisor_path=None)
    original = b.snapshot("vr1")
    b.apply_cap("vr1", 10.0)
    b.restore_cap("vr1", None, original)  # the record wins over the percentage
    assert b.read_cap("vr1") == 80.0
    with pytest.raises(HostAdapterError):
        b.restore_cap("vr1", None, {"backend": "sim", "target": "vr2", "params": {"cap_percent": 5.0}})


# ------------------------------------------------------------------------------- service
def service(tmp_path, hv: FakeHypervisor) -> tuple[DaemonService, Clock]:
    dev = tmp_path / "net_dev"
    dev.write_text(render_proc_net_dev({"vif1.0": (0, 0), "vif1.1": (0, 0)}))
    cfg = loads_config(daemon_toml(tmp_path, f'backend = "libvirt"\nproc_net_dev = "{dev}"', '[libvirt]\nuri = "lxc:///"'))
    clock = Clock()
    svc = DaemonService(cfg, lxc_backend(hv, str(dev)), clock=clock, wall_clock=lambda: 0.0)
    svc.open()
    return svc, clock


def test_service_restores_the_exact_original_after_a_crash_and_a_vr_reboot(tmp_path):
    hv = FakeHypervisor("lxc")
    hv.define("vr1", interfaces=["vif1.0", "vif1.1"])
    hv.domains["vr1"].live_params.update(vcpu_period=50000, vcpu_quota=20000)
    svc, clock = service(tmp_path, hv)
    reply = json.loads(svc.handle_message([json.dumps({"v": 1, "cmd": "activate", "vr": "vr1", "setpoint_pps": 20000}).encode()]))
    assert reply["ok"], reply
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert state["instances"]["vr1"]["original_record"] == rec(50000, 20000)
    for _ in range(5):  # nothing forwarded: the controller opens the cap
        clock.t += 1.0
        svc.run_period(clock.t, 1.0)
    assert hv.params("vr1")["vcpu_quota"] > 20000
    # SIGKILL: no restore, the sockets die with the process.
    svc._save(force=True)
    for s in (svc.rep, svc.pub):
        s.close(0)
    os.close(svc.state_lock)  # the kernel drops a killed process's lock on the state directory
    hv.reboot("vr1")  # and the VR restarts meanwhile with its defined parameters
    svc2, clock2 = service(tmp_path, hv)
    clock2.t += 1.0
    svc2.run_period(clock2.t, 1.0)
    assert 1000 <= hv.params("vr1")["vcpu_quota"] <= 100000  # controlled again, not unlimited
    assert svc2.close() == 0
    assert (hv.params("vr1")["vcpu_period"], hv.params("vr1")["vcpu_quota"]) == (50000, 20000)
