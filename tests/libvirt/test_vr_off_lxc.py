"""The punishment ladder's last resort on a real LXC domain (issue 48 item 2): the daemon (libvirt
backend, a separate process) turns the VR off on ``vr_off`` (the domain is no longer running, the
reason is in the daemon's log, its state file and its ``status``), a daemon restarted meanwhile still
knows it, and ``vr_on`` starts the domain again from the record it kept (the lab's domains are
transient: created again from their XML); the instance stays paused until resumed, and SIGTERM
then gives the VR its original cap back.

Set-up: one LXC VR of the lab (``vr_lab``: its own bridges and namespaces, a random prefix, removed
afterwards, also on failure).  The test talks to the daemon only through its manager API and its
signals; what it checks of the domain it reads from libvirt itself.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from procs import started_daemon, until
from xtc_lab.lab.harness import daemon_config_text

from xtc.daemon.ctl import ManagerClient

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.beside, pytest.mark.timeout(120)]


def test_vr_off_turns_the_domain_off_with_its_reason_and_vr_on_brings_it_back(
        vr_lab: Callable[..., Any], libvirtd: Any, daemons: list[Any], tmp_path: Path) -> None:
    import libvirt

    lab = vr_lab(1)
    vr = lab.vrs[0]
    cfg = tmp_path / "xtcd.toml"
    cfg.write_text(daemon_config_text(tmp_path, libvirtd.uri, [vr.name],
                                      daemon_extra={"proc_net_dev": "/proc/net/dev"}))
    conn = libvirt.open(libvirtd.uri)

    def running() -> bool:
        try:
            return bool(conn.lookupByName(vr.name).isActive())
        except libvirt.libvirtError:
            return False  # a transient domain is gone once off

    def call(cmd: str, **kw: Any) -> Any:
        with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=20) as c:
            return c.request(cmd, **kw)

    try:
        assert running()
        d = started_daemon(cfg, daemons)
        assert until(lambda: call("status", vr=vr.name)["result"]["present"], 15.0)
        original = call("activate", vr=vr.name, setpoint_pps=5000)["result"]["original_cap_percent"]
        # Bad input changes nothing: the domain keeps running.
        r = call("vr_off", vr=vr.name, reason=7)
        assert r["error"]["code"] == "bad_field" and running()
        r = call("vr_off", vr=vr.name, reason="floods its neighbours (test)")
        assert r["ok"], r
        assert r["result"]["state"] == "paused" and r["result"]["vr_off"]["reason"] == "floods its neighbours (test)"
        assert not running()
        ev = d.wait_event("vr_off", timeout_s=5)
        assert ev["reason"] == "floods its neighbours (test)"
        assert until(lambda: call("status", vr=vr.name)["result"]["present"] is False, 15.0)
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        assert state["vr_off"][vr.name]["reason"] == "floods its neighbours (test)"

        # A daemon restarted meanwhile (SIGKILL) still knows the VR is off and how to start it.
        d.kill()
        d = started_daemon(cfg, daemons)
        assert call("status", vr=vr.name)["result"]["vr_off"]["reason"] == "floods its neighbours (test)"
        r = call("vr_on", vr=vr.name)
        assert r["ok"], r
        assert "vr_off" not in r["result"] and r["result"]["state"] == "paused"
        assert until(running, 20.0)
        assert until(lambda: call("status", vr=vr.name)["result"]["present"], 15.0)
        assert call("vr_on", vr=vr.name)["error"]["code"] == "bad_state"  # on already: nothing to do
        assert call("resume", vr=vr.name)["ok"]
        d.signal(signal.SIGTERM)
        assert d.wait() == 0
        cap = conn.lookupByName(vr.name).schedulerParameters().get("vcpu_quota")
        print(f"\n[vr-off-lxc] {vr.name}: off and on again; original cap {original}, vcpu_quota now {cap}", flush=True)
        assert original is None and (cap is None or cap <= 0 or cap >= 2**63 - 1)  # unlimited as before
    finally:
        conn.close()
