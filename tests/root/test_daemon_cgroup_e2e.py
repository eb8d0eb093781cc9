"""The XTC daemon, as a process on the cgroup backend, holds a real netns VR in a real cgroup.

Set-up: one netns VR (:meth:`xtc_lab.lab.netlab.NetLab.add_netns_vr` with ``cgroup=True``: the lab's
userspace forwarder in its own network namespace and its own cgroup v1 ``cpu`` / v2 ``cpu.max``
cgroup), between a generator and a receiver namespace, offered a paced stream of 64-byte UDP
packets (about 100 kp/s).  Before the daemon starts, the cgroup's original setting is made
non-default (v1: period 50000 us, no quota; v2: ``max 50000``), so that restoring "the original"
exactly can be told apart from restoring a percentage.

``xtc daemon --config FILE`` runs as a separate process with ``backend = "cgroup"`` and the VR in
``[[cgroup.vr]]`` (its cgroup directory and its two host-side vifs); the test talks to it only
through its manager API and its signals, and measures the forwarded rate itself from
``/proc/net/dev`` (host-side RX of the VR's vifs).

What is proved:

* the forwarded rate, averaged over the last 10 s of a ~20 s run, is within 10% of a setpoint at
  30% of the rate the unlimited VR forwards;
* SIGTERM gives the cgroup back exactly its original setting (period and "no limit");
* a restarted daemon resumes the instance and caps the VR again; the VR's cgroup then vanishes
  (forwarder killed, directory removed): the daemon keeps running and reports the VR missing,
  and on SIGTERM it says it could not restore that VR (exit status 1) instead of crashing.

Needs root and a cgroup cpu controller (skipped otherwise, with the reason).  Everything is made
under a random prefix and removed afterwards, also on failure.  Run with ``-s`` to see the rates.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from hostneeds import cgroup_netns_lab_fixture, forwarded_pps, unlimited_pps_or_skip

from procs import cgroup_daemon_config, started_daemon, until
from xtc.daemon.ctl import ManagerClient

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(150)]

OFFERED_PPS = 100_000
TOLERANCE = 0.10


def say(msg: str) -> None:
    print(f"\n[cgroup-e2e] {msg}", flush=True)


def setting(d: Path) -> dict[str, str]:
    """The cgroup's CPU limit files, as text."""
    names = ("cpu.max",) if (d / "cpu.max").exists() else ("cpu.cfs_quota_us", "cpu.cfs_period_us")
    return {n: (d / n).read_text().strip() for n in names}


def limited(d: Path) -> bool:
    s = setting(d)
    return not s.get("cpu.max", "").startswith("max") if "cpu.max" in s else int(s["cpu.cfs_quota_us"]) > 0


netns_lab = cgroup_netns_lab_fixture("xtcc")


def test_daemon_holds_a_netns_vr_through_its_cgroup(netns_lab: Any, tmp_path: Path) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = netns_lab
    vr = lab.add_netns_vr(cgroup=True)
    cg = Path(vr.cgroup)
    if (cg / "cpu.max").exists():
        (cg / "cpu.max").write_text("max 50000")
    else:
        (cg / "cpu.cfs_period_us").write_text("50000")
    original = setting(cg)
    assert not limited(cg)

    cfg = cgroup_daemon_config(tmp_path, vr.name, cg, vr.vifs[:2])
    procs: list[Any] = []
    client: ManagerClient | None = None
    try:
        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=75) as stream:
            time.sleep(1.5)
            free = unlimited_pps_or_skip(vr.vifs)
            say(f"unlimited netns VR forwards {free:.0f} pps of {OFFERED_PPS} offered")
            setpoint = 0.3 * free

            d = started_daemon(cfg, procs)
            client = ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10)
            client.call("activate", vr=vr.name, setpoint_pps=setpoint)
            time.sleep(10.0)
            held = forwarded_pps(vr.vifs, 10.0)
            err = held / setpoint - 1
            say(f"setpoint {setpoint:.0f} pps: forwarded {held:.0f} pps over the last 10 s ({err:+.1%}), "
                f"cgroup {setting(cg)}")
            assert abs(err) <= TOLERANCE, f"forwarded {held:.0f} pps for a setpoint of {setpoint:.0f} ({err:+.1%})"
            assert limited(cg)

            d.signal(signal.SIGTERM)
            assert d.wait() == 0
            assert setting(cg) == original  # the exact original: period 50000 and no limit

            d2 = started_daemon(cfg, procs)  # resumes the instance from its state file
            assert until(lambda: limited(cg), 10.0), f"not capped again: {setting(cg)}"
            stream.stop()
            os.kill(vr.process.pid, signal.SIGKILL)  # the VR stops and its cgroup goes away
            vr.process.wait(5)
            assert until(lambda: _rmdir(cg), 5.0)
            client.close()
            client = ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10)
            assert until(lambda: client.call("status", vr=vr.name)["present"] is False, 12.0, 0.5)
            assert d2.proc.poll() is None  # still running
            d2.signal(signal.SIGTERM)
            assert d2.wait() == 1  # it could not hand the vanished VR its original back, and says so
            d2.wait_event("restore_failed", pred=lambda e: e.get("vr") == vr.name, timeout_s=1)
    finally:
        if client is not None:
            client.close()
        for p in procs:
            p.kill()


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
