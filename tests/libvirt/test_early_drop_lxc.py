"""Early drop on a real LXC domain: the daemon (libvirt backend, a separate process) installs its
limiter on the domain's host-side vifs, and SIGKILL + restart, deactivation and SIGTERM each leave
exactly the queueing the vifs had before (issue 48's goal "nothing left behind ... on a real LXC
domain"; the netns VR's counterpart is tests/root/test_early_drop_daemon_e2e.py).

Set-up: one LXC VR of the lab (``vr_lab``: its own bridges and namespaces, a random prefix,
removed afterwards, also on failure) offered a paced UDP stream well above a low setpoint, so the
daemon caps it below what it is offered and early drop puts its default limiter (the eBPF bucket's
filter on the clsact egress) on its vifs.  The test talks to the daemon only through its manager
API and its signals; what it checks is ``tc qdisc show`` and ``tc filter show`` on the vifs, read
by the test itself.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostneeds import early_drop_limiters, tc_queueing
from procs import started_daemon, until
from xtc_lab.lab.harness import daemon_config_text

from xtc.daemon.ctl import ManagerClient

pytestmark = [pytest.mark.root, pytest.mark.libvirt, pytest.mark.beside, pytest.mark.timeout(120)]

OFFERED_PPS = 20_000
SETPOINT_PPS = 2_000  # far below what the VR is offered: capped, its excess is early drop's


def limited(vifs: tuple[str, ...]) -> bool:
    return early_drop_limiters(vifs) == len(vifs)


def test_early_drop_leaves_nothing_behind_on_an_lxc_domain(vr_lab: Callable[..., Any], libvirtd: Any,
                                                            daemons: list[Any], tmp_path: Path) -> None:
    from xtc_lab.lab.traffic import start_udp_stream

    lab = vr_lab(1)
    vr = lab.vrs[0]
    vifs = tuple(vr.vifs)
    before = tc_queueing(vifs)
    assert "ed0:" not in before, before
    cfg = tmp_path / "xtcd.toml"
    cfg.write_text(daemon_config_text(tmp_path, libvirtd.uri, [vr.name],
                                      daemon_extra={"proc_net_dev": "/proc/net/dev"}))

    def call(cmd: str, **kw: Any) -> Any:
        with ManagerClient(f"ipc://{tmp_path}/mgr.sock", timeout_s=10) as c:
            return c.call(cmd, **kw)

    t0 = time.monotonic()
    with start_udp_stream(lab, vr, OFFERED_PPS, duration_s=90):
        d = started_daemon(cfg, daemons)
        call("activate", vr=vr.name, setpoint_pps=SETPOINT_PPS, early_drop=True)
        assert until(lambda: limited(vifs), 20.0), f"no limiter on {vifs}: {tc_queueing(vifs)}"
        ed = call("status", vr=vr.name)["early_drop"]
        assert ed["on"] is True and sorted(ed["interfaces"]) == sorted(vifs), ed

        # SIGKILL: the limiter stays behind; the restarted daemon removes it and installs a fresh one.
        d.kill()
        assert limited(vifs), tc_queueing(vifs)
        d = started_daemon(cfg, daemons)
        d.wait_event("early_drop_leftovers_removed", timeout_s=15)
        assert until(lambda: limited(vifs), 20.0), f"no fresh limiter after the restart: {tc_queueing(vifs)}"

        # Deactivation: exactly what was there before.
        call("deactivate", vr=vr.name)
        assert tc_queueing(vifs) == before

        # SIGTERM: exactly what was there before.
        call("activate", vr=vr.name, setpoint_pps=SETPOINT_PPS, early_drop=True)
        assert until(lambda: limited(vifs), 20.0), f"no limiter after the re-activation: {tc_queueing(vifs)}"
        d.signal(signal.SIGTERM)
        assert d.wait() == 0
        assert tc_queueing(vifs) == before
    print(f"\n[early-drop-lxc] {vr.name} vifs {vifs}: before {before!r}; all three faults left it so "
          f"({time.monotonic() - t0:.1f} s)", flush=True)
