"""``xtc bench daemon``: the daemon's CPU cost per second of operation.

What runs is the daemon itself (:class:`~xtc.daemon.service.DaemonService`: the closed loop of
:mod:`xtc.daemon.loop`, the PUB stream, the metrics and the state file) for a number of control
periods, on a host with ``n`` VRs of 4 interfaces each, every VR with an active instance whose
rate moves around its setpoint.  What is timed is this process's CPU time (user + kernel,
``time.process_time``) per second of daemon time: the fraction of one core.

Without root the counters come from a synthetic ``/proc/net/dev`` file rewritten between periods
(the rewriting is not timed); reading it is real file I/O but the kernel's cost of formatting a
real ``/proc/net/dev`` is not included (``"kernel_included": false``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from xtc.daemon.api import Request
from xtc.daemon.config import loads_config
from xtc.daemon.service import DaemonService
from xtc.host.counters import ProcNetDevCounters
from xtc.host.ifcounters import IfCounters
from xtc_lab.sim.host import render_proc_net_dev

__all__ = ["bench_daemon", "add_daemon", "IFACES_PER_VR"]

IFACES_PER_VR = 4


class _FileHost:
    """VRs whose counters are a synthetic ``/proc/net/dev`` file; caps are recorded, not written."""

    name = "bench-file"
    counter_bits = 64

    def __init__(self, n_vrs: int, path: Path) -> None:
        self.vrs = {f"vr{k}": tuple(f"vif{k}.{j}" for j in range(IFACES_PER_VR)) for k in range(1, n_vrs + 1)}
        self.source = ProcNetDevCounters(path)
        self.caps: dict[str, float] = {}
        self.writes = 0

    def list_vrs(self) -> Mapping[str, tuple[str, ...]]:
        return self.vrs

    def read_counters(self) -> Mapping[str, IfCounters]:
        return self.source.read()

    def read_cap(self, vr: str) -> float | None:
        return self.caps.get(vr)

    def apply_cap(self, vr: str, cap_percent: float) -> float:
        cap = round(cap_percent * 1000.0) / 1000.0  # a quota of 1 us per 100 ms period
        if self.caps.get(vr) != cap:
            self.caps[vr] = cap
            self.writes += 1
        return cap

    def snapshot(self, vr: str) -> dict[str, Any]:
        return {"backend": self.name, "target": vr, "params": {"cap_percent": self.caps.get(vr)}}

    def restore_cap(self, vr: str, cap_percent: float | None, original: Mapping[str, Any] | None = None) -> None:
        self.caps.pop(vr, None)

    def cap_writes(self) -> int:
        return self.writes

    def close(self) -> None:
        self.source.close()


class _Traffic:
    """Counters of ``n_vrs`` VRs whose forwarding rate wanders around 20-60 kp/s."""

    def __init__(self, n_vrs: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.base = self.rng.uniform(20e3, 60e3, n_vrs)
        self.rx = np.zeros((n_vrs, IFACES_PER_VR))
        self.tx = np.zeros((n_vrs, IFACES_PER_VR))

    def advance(self, dt_s: float) -> dict[str, tuple[int, int]]:
        n = len(self.base)
        rate = self.base * (1.0 + 0.3 * self.rng.standard_normal(n)).clip(0.1)
        self.rx += (rate / IFACES_PER_VR * dt_s)[:, None]
        self.tx += 100e3 / IFACES_PER_VR * dt_s
        return {f"vif{k + 1}.{j}": (int(self.rx[k, j]), int(self.tx[k, j])) for k in range(n) for j in range(IFACES_PER_VR)}


def bench_daemon(n_vrs: int, seconds: float = 5.0, period_s: float = 1.0, kind: str = "xtc",
                 seed: int = 1) -> dict[str, Any]:
    """CPU cost of the daemon for ``n_vrs`` VRs (see the module docstring).

    Parameters
    ----------
    n_vrs : int
        Number of VRs, each with 4 interfaces and an active instance.
    seconds : float
        Daemon time measured (after one warm-up period), seconds.
    period_s : float
        Control period, seconds.

    Returns
    -------
    dict
        ``vrs``, ``period_s``, ``core_percent`` (CPU of this process per second of daemon time,
        percent of one core), ``kernel_included``, ``cap_writes_per_s``.
    """
    n_periods = max(1, int(round(seconds / period_s))) + 1  # +1 warm-up
    traffic = _Traffic(n_vrs, seed)
    with tempfile.TemporaryDirectory(prefix="xtc-bench-") as tmp:
        dev = Path(tmp) / "net_dev"
        dev.write_text(render_proc_net_dev(traffic.advance(period_s)))
        host = _FileHost(n_vrs, dev)
        cfg = loads_config(
            f'[daemon]\nbackend = "libvirt"\ncontrol_period_s = {period_s}\nstate_dir = "{tmp}/state"\n'
            f'[controller]\nkind = "{kind}"\n[metrics]\nenabled = false\n'
            f'[manager]\nendpoint = "ipc://{tmp}/m.sock"\npub_endpoint = "ipc://{tmp}/p.sock"\n'
        )
        clock_s = [1000.0]
        svc = DaemonService(cfg, host, clock=lambda: clock_s[0], wall_clock=time.time)  # type: ignore[arg-type]
        svc.open()
        try:
            for k in range(1, n_vrs + 1):
                svc.control.handle(Request("activate", f"vr{k}", 40e3), clock_s[0])
            gc.collect()
            cpu = 0.0
            writes0 = 0
            for p in range(n_periods):
                dev.write_text(render_proc_net_dev(traffic.advance(period_s)))
                clock_s[0] += period_s
                t0 = time.process_time()
                svc.run_period(clock_s[0], period_s)
                t1 = time.process_time()
                if p == 0:
                    writes0 = host.cap_writes()
                else:
                    cpu += t1 - t0
            writes = host.cap_writes() - writes0
        finally:
            svc.close()
    daemon_s = (n_periods - 1) * period_s
    return {
        "vrs": n_vrs,
        "interfaces": n_vrs * IFACES_PER_VR,
        "controller": kind,
        "period_s": period_s,
        "daemon_seconds": daemon_s,
        "core_percent": 100.0 * cpu / daemon_s,
        "kernel_included": False,
        "counters": "synthetic /proc/net/dev file",
        "cap_writes_per_s": writes / daemon_s,
    }


def add_daemon(sub: Any) -> None:
    """Register ``xtc bench daemon``."""
    p = sub.add_parser("daemon", help="the daemon's CPU cost per second of operation, for 10 to 1000 VRs")
    p.add_argument("--vrs", type=int, nargs="+", default=[10, 100, 1000], help="VR counts to measure")
    p.add_argument("--period-s", type=float, default=1.0, help="control period, seconds")
    p.add_argument("--seconds", type=float, default=5.0, help="daemon seconds per measurement")
    p.add_argument("--controller", default="xtc", choices=["xtc", "pi", "deadbeat", "fixed"])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    rows = [bench_daemon(n, seconds=args.seconds, period_s=args.period_s, kind=args.controller) for n in args.vrs]
    if args.json:
        print(json.dumps({"benchmark": "daemon", "python": platform.python_version(),
                          "machine": platform.machine(), "results": rows}, indent=1))
    else:
        print(f"{'VRs':>6} {'ifaces':>7} {'period s':>9} {'core %':>8} {'writes/s':>9}  counters")
        for r in rows:
            print(f"{r['vrs']:>6} {r['interfaces']:>7} {r['period_s']:>9.2f} {r['core_percent']:>8.3f} "
                  f"{r['cap_writes_per_s']:>9.1f}  {r['counters']}{'' if r['kernel_included'] else ' (kernel cost not included)'}")
    return 0
