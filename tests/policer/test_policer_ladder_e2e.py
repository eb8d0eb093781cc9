"""The punishment ladder's limiter step end to end (issue 48 item 2): a real policer process (uvicorn
on loopback), a real daemon process (cgroup backend) and a real netns VR of the lab offered a paced
UDP stream that does not back off, over real ZeroMQ sockets.

The VR is held far below what it is offered (a manual setpoint), so the policer punishes it: level 1
lowers its setpoint, level 2 turns its early drop on through the daemon's ``early_drop`` command (the
daemon's default limiter, the eBPF bucket's filter on the clsact egress of its host-side interface,
checked with ``tc`` by the test), level 3 pauses it with the
limit kept; every step is in the audit log.  When the stream ends, the VR is restored: resumed, its
early drop back to the daemon's default (off), the limiter gone and the interface exactly as before.
Everything under a random prefix, removed afterwards, also on failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import wait_for
from hostneeds import cgroup_netns_lab, early_drop_limiters, tc_queueing
from procs import DaemonProc, cgroup_daemon_config

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.timeout(150)]

OFFERED_PPS = 30_000
STREAM_S = 30


def early_drop_actions(pol: Any, vr: str) -> list[Any]:
    """The ``on`` of each ``early_drop`` command the policer recorded for the VR, oldest first."""
    return [a["detail"].get("on") for a in pol.get("/actions", params={"vr": vr, "kind": "early_drop"})]


def limited(vifs: tuple[str, ...]) -> bool:
    return early_drop_limiters(vifs) == len(vifs)


@pytest.fixture
def netns_lab() -> Iterator[Any]:
    with cgroup_netns_lab("xtcld") as lab:
        yield lab


@pytest.mark.parametrize("policer_db", ["sqlite"])
def test_the_ladder_turns_early_drop_on_keeps_it_through_the_pause_and_takes_it_back(
        netns_lab: Any, make_policer: Any, tmp_path: Path) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = netns_lab
    vr = lab.add_netns_vr(cgroup=True)
    vifs = tuple(vr.vifs)
    before = tc_queueing(vifs)
    assert "ed0" not in before
    ddir = tmp_path / "daemon"
    ddir.mkdir()
    d = DaemonProc(cgroup_daemon_config(ddir, vr.name, vr.cgroup, vifs))
    try:
        d.wait_event("started", timeout_s=30)
        pol = make_policer(period_s=0.5)
        pol.call("PUT", "/policies/activation", json={"enabled": False})
        pol.call("PUT", "/policies/allocation", json={"enabled": True, "min_setpoint_pps": 100})
        pol.call("PUT", "/policies/misbehaviour", json={"enabled": True, "ratio": 1.5, "min_excess_pps": 1000,
                                                         "hold_s": 2.0, "restore_hold_s": 3.0, "step_factor": 0.5})
        pol.call("POST", "/routers", json={"name": "r1", "endpoint": f"ipc://{ddir}/mgr.sock",
                                           "capacity_pps": 1e6, "control_mode": "on"})
        wait_for(lambda: any(v["name"] == vr.name and v["present"] for v in pol.get("/vrs")), 15, "the VR reported")
        pol.call("PUT", f"/vrs/r1/{vr.name}/setpoint", json={"setpoint_pps": 2000})
        with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=STREAM_S):
            wait_for(lambda: limited(vifs), 40, f"early drop's limiter on {vifs} (level 2)")
            v = pol.get(f"/vrs/r1/{vr.name}")
            assert v["punishment_level"] >= 2, v
            # A command's record is written when its reply comes back, after the daemon applied it.
            wait_for(lambda: early_drop_actions(pol, vr.name) == [True], 10, "the early_drop command recorded")
            wait_for(lambda: pol.get(f"/vrs/r1/{vr.name}")["punishment_level"] == 3, 20, "level 3 (paused)")
            wait_for(lambda: pol.get(f"/vrs/r1/{vr.name}")["state"] == "paused", 10, "the instance paused")
            time.sleep(3.0)  # paused, the source still sending: the limit stays, the VR stays at its level
            assert limited(vifs), tc_queueing(vifs)
            assert pol.get(f"/vrs/r1/{vr.name}")["punishment_level"] == 3
            punish = pol.get("/actions", params={"vr": vr.name, "kind": "punish"})
            assert [a["detail"]["level"] for a in punish] == [1, 2, 3]
            assert "early drop on" in punish[1]["detail"]["action"]
        # The stream is over: good behaviour, restored; its early drop back to the default (off).
        wait_for(lambda: pol.get(f"/vrs/r1/{vr.name}")["punishment_level"] == 0, 30, "the VR restored")
        wait_for(lambda: not limited(vifs), 15, "the limiter removed")
        wait_for(lambda: early_drop_actions(pol, vr.name) == [True, None], 10, "the early_drop reset recorded")
        wait_for(lambda: pol.get(f"/vrs/r1/{vr.name}")["state"] == "active", 10, "the instance resumed")
        assert tc_queueing(vifs) == before
    finally:
        d.kill()
