"""Early drop in the real daemon process (cgroup backend) on a real netns VR: the limiter comes,
holds what the host hands the VR near its setpoint, and leaves nothing behind.

The set-up of tests/root/test_daemon_cgroup_e2e.py (a netns VR of the lab with its own cgroup,
a paced UDP stream, ``xtc daemon`` as a separate process talked to through its manager API and
its signals).  Proved, with the daemon's default limiter (the eBPF bucket,
``daemon.early_drop_limiter = "bpf"``; the TBF's are tests/root/test_early_drop_netns.py): an
activation with ``"early_drop": true`` puts the bucket's filter on the clsact egress of the VR's
host-side interfaces, which drops real packets (its counter read from outside the daemon, through
the attached program's maps); SIGKILL leaves it, the restarted daemon removes the leftover and
installs a fresh one; deactivation removes it; SIGTERM leaves the interfaces exactly as they were
before (``tc qdisc show`` and ``tc filter show``).  Everything under a random prefix, removed afterwards, also on failure.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from hostneeds import (
    cgroup_netns_lab_fixture,
    early_drop_limiters,
    packet_rates_pps,
    tc_queueing,
    unlimited_pps_or_skip,
)
from procs import cgroup_daemon_config, started_daemon, until

from xtc.daemon.ctl import ManagerClient
from xtc.host.bpflimiter import read_attached

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(150)]

OFFERED_PPS = 100_000


def limited(vifs: tuple[str, ...]) -> bool:
    return early_drop_limiters(vifs) == len(vifs)


def limiter_drops(vifs: tuple[str, ...]) -> float:
    """Packets the limiters on ``vifs`` dropped so far, read from outside the daemon."""
    return sum((read_attached(v) or {}).get("dropped_packets", 0.0) for v in vifs)


netns_lab = cgroup_netns_lab_fixture("xtced")


def test_early_drop_in_the_daemon_comes_and_goes_with_the_instance(netns_lab: Any, tmp_path: Path) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = netns_lab
    vr = lab.add_netns_vr(cgroup=True)
    vifs = tuple(vr.vifs)
    before = tc_queueing(vifs)
    cfg = cgroup_daemon_config(tmp_path, vr.name, vr.cgroup, vifs)
    procs: list[Any] = []
    client: ManagerClient | None = None
    try:
        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=90):
            time.sleep(1.5)
            setpoint = 0.3 * (free := unlimited_pps_or_skip(vifs))
            d = started_daemon(cfg, procs)
            client = ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10)
            client.call("activate", vr=vr.name, setpoint_pps=setpoint, early_drop=True)
            assert until(lambda: limited(vifs), 20.0), tc_queueing(vifs)
            ed = client.call("status", vr=vr.name)["early_drop"]
            assert ed["on"] is True and ed["interfaces"] == list(vifs) and ed["limit_pps"] >= setpoint * 1.049, ed
            time.sleep(8.0)  # the controller settles; the limit follows it
            d0 = limiter_drops(vifs)
            fwd, handed = packet_rates_pps(vifs, 5.0)
            dropped = (limiter_drops(vifs) - d0) / 5.0
            ed = client.call("status", vr=vr.name)["early_drop"]
            assert dropped > 0, (dropped, handed, ed)  # real packets, dropped and counted by the bucket
            print(f"\n[early-drop-e2e] unlimited VR forwards {free:.0f} pps; setpoint {setpoint:.0f}: handed "
                  f"{handed:.0f} (limit {ed['limit_pps']}), dropped by the limiter {dropped:.0f}, forwarded {fwd:.0f} pps; "
                  f"load {os.getloadavg()[0]:.1f}; {tc_queueing(vifs)}", flush=True)

            d.kill()  # SIGKILL: the limiter stays behind ...
            assert limited(vifs)
            # ... the restart removes it, resumes the instance, installs a fresh one
            d2 = started_daemon(cfg, procs, "early_drop_leftovers_removed")
            assert until(lambda: limited(vifs), 20.0), tc_queueing(vifs)

            client.close()
            client = ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10)
            client.call("deactivate", vr=vr.name)
            assert tc_queueing(vifs) == before
            client.call("activate", vr=vr.name, setpoint_pps=setpoint, early_drop=True)
            assert until(lambda: limited(vifs), 20.0), tc_queueing(vifs)
            d2.signal(signal.SIGTERM)
            assert d2.wait() == 0
            assert tc_queueing(vifs) == before
    finally:
        if client is not None:
            client.close()
        for p in procs:
            p.kill()
