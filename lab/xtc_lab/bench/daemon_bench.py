"""``xtc bench daemon``: the daemon's CPU cost per second of operation.

What runs is the daemon itself (:class:`~xtc.daemon.service.DaemonService`: the closed loop of
:mod:`xtc.daemon.loop`, the PUB stream, the metrics and the state file) for a number of control
periods, on a host with ``n`` VRs of 4 interfaces each, every VR with an active instance whose
rate moves around its setpoint.  What is timed is this process's CPU time (user + kernel, all
threads, ``time.process_time``) spent in the daemon's periods, per second of daemon time: the
fraction of one core.  The daemon's clock is advanced by the benchmark, so the periods run back
to back; the work between them (making traffic) is not timed.

Two hosts:

- As root (``"kernel_included": true``) the host is the product's
  :class:`~xtc.host.cgroup.CgroupBackend` over real kernel objects, all named ``xtc-bench-<pid>``
  and removed afterwards (also on failure or Ctrl-C): a network namespace holding the VRs'
  host-side interfaces ``vif<k>.<j>`` (4 per VR, nothing else but ``lo``, as in a Dom0), each a
  veth whose peer ``e<k>.<j>`` lives in a second namespace ``xtc-bench-<pid>-vr`` (the VRs'
  side); the counters are read with :class:`~xtc.host.counters.NetlinkCounters` in that
  namespace, so the kernel's cost of the dump is in the figure; the caps are written to cgroup
  v1 directories ``/sys/fs/cgroup/cpu/xtc-bench-<pid>/vr<k>`` (``cpu.cfs_quota_us``).  Before
  each period a few raw Ethernet frames (ethertype 0x88B5, local experimental) are sent on
  every VR: 2 per interface from the host side (host TX: offered) and 4-8 +-30% per VR from the
  VR side (host RX: forwarded), with each VR's setpoint at its mean forwarded rate, so that its
  controller moves the cap most periods.  Only caps that resolve to a new quota are written
  (the actuator compares with the quota in force): ``cap_writes_per_s`` counts real writes.
- Without root (``"kernel_included": false``) the counters come from a synthetic
  ``/proc/net/dev`` file rewritten between periods; reading it is real file I/O but the kernel's
  cost of formatting a real ``/proc/net/dev`` is not included, and caps are only recorded.

With ``--early-drop`` (root only: issue 48) every VR's activation has ``daemon.early_drop`` on and
the daemon's own limiter (``--early-drop-limiter``: the eBPF bucket :class:`~xtc.host.bpflimiter.BpfLimiter`,
the default, or the TBF :class:`~xtc.host.tclimiter.TcLimiter`; opened by the service as in
production) puts real limiters (filters on a clsact egress, or TBF root qdiscs) on the ``vif<k>.<j>``
veth ends: the benchmark's thread
runs inside the host-side namespace for the whole measurement (as a Dom0's daemon runs in the
host's), so the limiter's calls are the production ones, not the per-call namespace hops of a
``TcLimiter(netns=...)``.  The host side hands each VR 8 frames a period and the VR side
forwards 4-8, so the VRs forwarding less than 8/1.25 are "capped below their offered load" and
get a limiter; the limiter's operations are counted (``limiter_ops_per_s``: installs and changes,
removals, per-interface drop-counter reads, each one netlink round trip (a map update for the
eBPF bucket) or more, and ``dump``: reads of every limiter's counter at once, one qdisc dump or one
batched map read, one a period) by a pass-through wrapper.
"""

from __future__ import annotations

import argparse
import errno
import gc
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from xtc.daemon.api import Request
from xtc.daemon.config import CgroupVr, loads_config
from xtc.daemon.service import DaemonService
from xtc.host.cgroup import CgroupBackend
from xtc.host.counters import NetlinkCounters, ProcNetDevCounters, Netns
from xtc.host.ifcounters import IfCounters
from xtc.host.limiter import Limiter, LimiterSetting
from xtc.host.netns import NETNS_DIR, setns_net
from xtc_lab.sim.host import render_proc_net_dev

__all__ = ["bench_daemon", "add_daemon", "IFACES_PER_VR", "CGROUP_V1_CPU", "bench_names", "WORKLOADS"]

IFACES_PER_VR = 4
#: The traffic patterns measured (see :func:`bench_daemon`).
WORKLOADS = ("steady", "moving")
#: Where the throw-away cgroup v1 directories are made.
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
_ETHERTYPE = 0x88B5
_FRAME = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + _ETHERTYPE.to_bytes(2, "big") + b"\x00" * 46
#: Interfaces created per ``ip -batch`` call (progress is shown between calls).
_BATCH = 2000


def bench_names(pid: int | None = None) -> tuple[str, str, Path]:
    """The host namespace, the VR-side namespace and the cgroup directory of a bench run."""
    tag = f"xtc-bench-{os.getpid() if pid is None else pid}"
    return tag, f"{tag}-vr", CGROUP_V1_CPU / tag


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

    def read_cpu_ns(self, vrs: Iterable[str]) -> Mapping[str, int]:
        """Nothing: a counters file has no CPU accounting, so every VR is left out."""
        return {}

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

    def __init__(self, n_vrs: int, seed: int, noise: float = 0.3) -> None:
        self.rng = np.random.default_rng(seed)
        self.base = self.rng.uniform(20e3, 60e3, n_vrs)
        self.noise = noise
        self.rx = np.zeros((n_vrs, IFACES_PER_VR))
        self.tx = np.zeros((n_vrs, IFACES_PER_VR))

    def advance(self, dt_s: float) -> dict[str, tuple[int, int]]:
        n = len(self.base)
        rate = self.base * (1.0 + self.noise * self.rng.standard_normal(n)).clip(0.1)
        self.rx += (rate / IFACES_PER_VR * dt_s)[:, None]
        self.tx += 100e3 / IFACES_PER_VR * dt_s
        return {f"vif{k + 1}.{j}": (int(self.rx[k, j]), int(self.tx[k, j])) for k in range(n) for j in range(IFACES_PER_VR)}


def _progress(msg: str) -> None:
    print(f"xtc bench daemon: {msg}", file=sys.stderr, flush=True)


def _ip_batch(netns: str, lines: list[str]) -> None:
    subprocess.run(["ip", "-n", netns, "-batch", "-"], input="".join(lines), text=True, check=True,
                   stdout=subprocess.DEVNULL)


class _KernelLab:
    """The namespaces, veth pairs and cgroup directories of one root run; :meth:`remove` undoes all.

    Everything is registered for removal before it is created, so a failure (or Ctrl-C) half-way
    through still removes what exists.
    """

    def __init__(self, n_vrs: int) -> None:
        self.n_vrs = n_vrs
        self.host_ns, self.vr_ns, self.cg_root = bench_names()
        self._made_ns: list[str] = []
        self._made_dirs: list[Path] = []

    def create(self) -> None:
        t0 = time.monotonic()
        for ns in (self.host_ns, self.vr_ns):
            self._made_ns.append(ns)
            subprocess.run(["ip", "netns", "add", ns], check=True)
            # No IPv6 autoconfiguration: interfaces that come up send nothing by themselves.
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                            "net.ipv6.conf.default.disable_ipv6=1"], check=True)
        names = [(k, j) for k in range(1, self.n_vrs + 1) for j in range(IFACES_PER_VR)]
        for i in range(0, len(names), _BATCH):
            chunk = names[i : i + _BATCH]
            _ip_batch(self.host_ns, [f"link add vif{k}.{j} up type veth peer name e{k}.{j} netns {self.vr_ns}\n"
                                     for k, j in chunk])
            _ip_batch(self.vr_ns, [f"link set e{k}.{j} up\n" for k, j in chunk])
            _progress(f"{i + len(chunk)}/{len(names)} veth pairs ({time.monotonic() - t0:.0f} s)")
        # Where cpuacct is mounted apart from cpu (as on this host), each group gets its twin there, as
        # libvirt and systemd make them: the daemon reads a VR's CPU time from it.
        from xtc_lab.lab.netlab import find_cpu_cgroup

        acct = find_cpu_cgroup().acct_root
        roots = [self.cg_root] + ([acct / self.cg_root.name] if acct is not None else [])
        for root in roots:
            self._made_dirs.append(root)
            root.mkdir()
            for k in range(1, self.n_vrs + 1):
                d = root / f"vr{k}"
                self._made_dirs.append(d)
                d.mkdir()
        _progress(f"{self.n_vrs} cgroups under {self.cg_root}; set up in {time.monotonic() - t0:.1f} s")

    def vrs(self) -> list[CgroupVr]:
        return [CgroupVr(f"vr{k}", str(self.cg_root / f"vr{k}"), tuple(f"vif{k}.{j}" for j in range(IFACES_PER_VR)))
                for k in range(1, self.n_vrs + 1)]

    def remove(self) -> list[str]:
        """Remove every cgroup directory and namespace made; return what could not be removed."""
        left: list[str] = []
        for d in reversed(self._made_dirs):
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                left.append(f"{d}: {e}")
        self._made_dirs.clear()
        for ns in reversed(self._made_ns):
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
                left.append(f"netns {ns}: {r.stderr.strip()}")
        self._made_ns.clear()
        return left


class _Frames:
    """Raw frames sent on the veth pairs: host side = offered (host TX), VR side = forwarded (host RX)."""

    def __init__(self, lab: _KernelLab, seed: int, noise: float = 0.3) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.n = lab.n_vrs
        #: Mean frames per VR and period from the VR side (the setpoint is this per period).
        self.base = self.rng.integers(4, 9, self.n).astype(float)
        opener = lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # noqa: E731
        self.host = Netns(lab.host_ns, "bench traffic").run(opener)
        self.vr = Netns(lab.vr_ns, "bench traffic").run(opener)
        self.sent = 0

    def send(self) -> None:
        """One period's frames."""
        forwarded = np.rint(self.base * (1.0 + self.noise * self.rng.standard_normal(self.n))).clip(1).astype(int)
        host_send, vr_send, frame = self.host.sendto, self.vr.sendto, _FRAME
        for k in range(1, self.n + 1):
            for j in range(IFACES_PER_VR):
                for _ in range(2):
                    try:
                        host_send(frame, (f"vif{k}.{j}", _ETHERTYPE))
                    except OSError as e:  # ENOBUFS: an early-drop limiter dropped it (its job)
                        if e.errno != errno.ENOBUFS:
                            raise
            for f in range(int(forwarded[k - 1])):
                vr_send(frame, (f"e{k}.{f % IFACES_PER_VR}", _ETHERTYPE))
        self.sent += 2 * IFACES_PER_VR * self.n + int(forwarded.sum())

    def close(self) -> None:
        self.host.close()
        self.vr.close()


class _CountedLimiter:
    """Early drop's limiter, passed through, its operations counted (``xtc bench daemon --early-drop``)."""

    def __init__(self, inner: Limiter) -> None:
        self.inner = inner
        self.counts = inner.counts
        #: "install": limiters put on or changed; "park": limits taken off while the VR keeps early
        #: drop on (the eBPF filter stays, idle); "read": per-interface counter reads; "dump": reads
        #: of every limiter's counter at once (one qdisc dump).
        self.ops = {"install": 0, "remove": 0, "park": 0, "read": 0, "dump": 0}
        #: The counts at the end of the warm-up period.
        self.warm: dict[str, int] = {}

    def install(self, ifname: str, setting: LimiterSetting) -> bool | None:
        self.ops["install"] += 1
        return self.inner.install(ifname, setting)

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        self.ops["install"] += 1
        self.inner.update(ifname, setting)

    def remove(self, ifname: str) -> bool:
        removed = self.inner.remove(ifname)
        self.ops["remove"] += removed
        return removed

    def park(self, ifname: str) -> bool:
        parked = self.inner.park(ifname)
        self.ops["park"] += parked
        return parked

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        self.ops["read"] += 1
        return self.inner.adopt(ifname)

    def dropped_packets(self, ifname: str) -> int | None:
        self.ops["read"] += 1
        return self.inner.dropped_packets(ifname)

    def dropped_by_interface(self, ifnames: Iterable[str]) -> dict[str, int]:
        self.ops["dump"] += 1
        return self.inner.dropped_by_interface(ifnames)

    def close(self) -> None:
        self.inner.close()


def _enter_netns(netns: str, stack: ExitStack) -> None:
    """Move this thread into ``netns`` until ``stack`` closes (then back to where it was)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    stack.callback(os.close, home)
    fd = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns_net(fd)
    finally:
        os.close(fd)
    stack.callback(setns_net, home)


def _config(tmp: str, period_s: float, kind: str, early_drop: bool = False, limiter: str = "bpf") -> Any:
    # "xtc-noprobe": the xtc law without the lag probe (``[controller] lag_probe = false``).
    ctl = 'kind = "xtc"\nlag_probe = false\n' if kind == "xtc-noprobe" else f'kind = "{kind}"\n'
    return loads_config(
        f'[daemon]\nbackend = "libvirt"\ncontrol_period_s = {period_s}\nstate_dir = "{tmp}/state"\n'
        f'early_drop = {"true" if early_drop else "false"}\nearly_drop_limiter = "{limiter}"\n'
        f'[controller]\n{ctl}[metrics]\nenabled = false\n'
        f'[manager]\nendpoint = "ipc://{tmp}/m.sock"\npub_endpoint = "ipc://{tmp}/p.sock"\n'
    )


#: The stages of a period timed by ``--breakdown``: label -> (object path from the service, attribute).
_STAGES: tuple[tuple[str, str, str], ...] = (
    ("counters", "host", "read_counters"),
    ("meter", "control.meter", "update"),
    ("CPU readings (VRs short of their setpoints)", "host", "read_cpu_ns"),
    ("core", "core", "_period_instances"),
    ("  of which controllers (bank)", "core", "_step_bank"),
    ("early drop (limiters)", "control", "_early_drop_period"),
    ("cap writes", "control", "apply"),
    ("sample rows", "core", "sample_rows"),
    ("sample JSON", "api", "samples_message"),
    ("metrics", "metrics", "update"),
    ("packet counters (metrics)", "metrics.packets", "add"),
    ("state file", "", "_save"),
    ("discovery", "control", "discover"),
)


def _timed_stages(svc: DaemonService, stack: ExitStack) -> dict[str, int]:
    """Wrap the stages of :data:`_STAGES` to add up their thread CPU time (ns); undone by ``stack``."""
    from xtc.daemon import api

    acc: dict[str, int] = {}
    for label, path, attr in _STAGES:
        obj: Any = api if path == "api" else svc
        if path and path != "api":
            for part in path.split("."):
                obj = getattr(obj, part)
        real = getattr(obj, attr)

        def timed(*a: Any, _real: Any = real, _label: str = label, **kw: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return _real(*a, **kw)
            finally:
                acc[_label] = acc.get(_label, 0) + time.thread_time_ns() - t0

        if obj is api:
            stack.callback(setattr, api, attr, real)
            setattr(api, attr, timed)
        else:
            stack.callback(obj.__dict__.pop, attr, None)
            setattr(obj, attr, timed)
    return acc


def _measure(svc: DaemonService, host: Any, n_periods: int, period_s: float, clock_s: list[float],
             between: Callable[[], None], profile: str | None,
             breakdown: dict[str, float] | None = None, counted: _CountedLimiter | None = None) -> tuple[float, int]:
    """Run ``n_periods`` (the first one a warm-up); return the CPU seconds and writes after the warm-up.

    With ``breakdown`` (a dict), it receives each stage's thread CPU time per period, microseconds.
    """
    import cProfile

    stages = ExitStack()
    acc = _timed_stages(svc, stages) if breakdown is not None else {}
    prof = cProfile.Profile() if profile else None
    gc.collect()
    cpu = 0.0
    writes0 = 0
    for p in range(n_periods):
        between()
        clock_s[0] += period_s
        if prof is not None and p > 0:
            prof.enable()
        t0 = time.process_time()
        svc.run_period(clock_s[0], period_s)
        t1 = time.process_time()
        if prof is not None and p > 0:
            prof.disable()
        if p == 0:
            writes0 = host.cap_writes()
            acc.clear()
            if counted is not None:
                counted.warm = dict(counted.ops)
        else:
            cpu += t1 - t0
    stages.close()
    if prof is not None and profile:
        prof.dump_stats(profile)
    if breakdown is not None and n_periods > 1:
        breakdown.update({k: round(v / 1e3 / (n_periods - 1), 1) for k, v in sorted(acc.items(), key=lambda kv: -kv[1])})
    return cpu, host.cap_writes() - writes0


def bench_daemon(n_vrs: int, seconds: float = 5.0, period_s: float = 1.0, kind: str = "xtc",
                 seed: int = 1, kernel: bool | None = None, profile: str | None = None,
                 workload: str = "moving", breakdown: bool = False, subscribers: int = 1,
                 early_drop: bool = False, early_drop_limiter: str = "bpf") -> dict[str, Any]:
    """CPU cost of the daemon for ``n_vrs`` VRs (see the module docstring).

    Parameters
    ----------
    n_vrs : int
        Number of VRs, each with 4 interfaces and an active instance.
    seconds : float
        Daemon time measured (after one warm-up period), seconds.
    period_s : float
        Control period, seconds.
    kind : str
        Controller kind, or "xtc-noprobe" (the xtc law without the lag probe).
    seed : int
        Seed of the traffic.
    kernel : bool, optional
        True: real interfaces and cgroups (needs root); False: the synthetic file; None (default):
        real when running as root.
    profile : str, optional
        Write a cProfile of the measured periods to this file.
    breakdown : bool
        Also time the stages of a period (thread CPU, the wrappers' own cost included) and add
        them as ``breakdown_us_per_period`` (microseconds per period, by stage).
    workload : {"moving", "steady"}
        ``"moving"``: each VR's forwarded rate varies +-30 % around its setpoint, so most caps
        move every period (the worst case for cap writes).  ``"steady"``: each VR forwards exactly
        its setpoint, inside the controller's dead zone, so no cap moves after the first write
        (the normal state of a controlled host; only a re-assertion, every ``reassert_period_s``,
        writes again).
    subscribers : int
        ZeroMQ SUB sockets subscribed to the daemon's samples (a policer with ``[engine] samples =
        true`` is one), in a child process that reads every message (its CPU is not counted; the
        daemon's side of the sending is).  With 0 nobody listens, as with a policer that polls:
        the daemon then builds no samples.
    early_drop : bool
        Every VR with early drop on (``daemon.early_drop``): real limiters on the veth ends,
        through the daemon's own limiter (kernel mode only; see the module).
    early_drop_limiter : str
        ``daemon.early_drop_limiter``: "bpf" (the eBPF bucket, the default) or "tbf".

    Returns
    -------
    dict
        ``vrs``, ``period_s``, ``core_percent`` (CPU of this process per second of daemon time,
        percent of one core), ``kernel_included``, ``cap_writes_per_s`` (cap writes made per
        second of daemon time), ``counters`` and ``caps`` (what was read and written).
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, got {workload!r}")
    noise = 0.3 if workload == "moving" else 0.0
    if kernel is None:
        kernel = os.geteuid() == 0
    if kernel and os.geteuid() != 0:
        raise PermissionError("the kernel-included benchmark needs root (namespaces, veth, cgroups)")
    if early_drop and not kernel:
        raise ValueError("--early-drop needs the kernel-included benchmark (root, not --file): its limiters "
                         "are TBF qdiscs on the VRs' real interfaces")
    n_periods = max(1, int(round(seconds / period_s))) + 1  # +1 warm-up
    clock_s = [1000.0]
    row: dict[str, Any] = {"vrs": n_vrs, "interfaces": n_vrs * IFACES_PER_VR, "controller": kind,
                           "period_s": period_s, "workload": workload, "sample_subscribers": subscribers,
                           "early_drop": early_drop, "early_drop_limiter": early_drop_limiter if early_drop else None}
    with tempfile.TemporaryDirectory(prefix="xtc-bench-") as tmp, ExitStack() as stack:
        cfg = _config(tmp, period_s, kind, early_drop, early_drop_limiter)
        if kernel:
            lab = _KernelLab(n_vrs)
            stack.callback(_check_removed, lab)
            lab.create()
            frames = _Frames(lab, seed, noise)
            stack.callback(frames.close)
            host: Any = CgroupBackend(lab.vrs(), NetlinkCounters(lab.host_ns))
            setpoints = frames.base / period_s
            between: Callable[[], None] = frames.send
            row.update(counters=f"netlink RTM_GETSTATS in netns {lab.host_ns} (veth, {n_vrs * IFACES_PER_VR} + lo)",
                       caps=f"cgroup v1 cpu.cfs_quota_us under {lab.cg_root}")
            if early_drop:  # the daemon's limiter opens its netlink socket in the host-side namespace
                _enter_netns(lab.host_ns, stack)
        else:
            traffic = _Traffic(n_vrs, seed, noise)
            dev = Path(tmp) / "net_dev"
            dev.write_text(render_proc_net_dev(traffic.advance(period_s)))
            host = _FileHost(n_vrs, dev)
            setpoints = traffic.base.copy() if workload == "steady" else np.full(n_vrs, 40e3)
            between = lambda: dev.write_text(render_proc_net_dev(traffic.advance(period_s)))  # noqa: E731
            row.update(counters="synthetic /proc/net/dev file (kernel cost not included)", caps="recorded, not written")
        svc = DaemonService(cfg, host, clock=lambda: clock_s[0], wall_clock=time.time)
        svc.manage_gc = True  # as run_daemon has it
        stack.callback(gc.unfreeze)
        svc.open()
        counted: _CountedLimiter | None = None
        if early_drop:
            ed = svc.control.early_drop
            if ed is None or ed.limiter is None:
                raise RuntimeError("--early-drop: the daemon has no limiter (see its early_drop_unavailable log)")
            inner = ed.limiter
            stack.callback(getattr(inner, "close", lambda: None))  # its netlink socket (the daemon keeps it to exit)
            counted = _CountedLimiter(inner)
            ed.limiter = counted
        try:
            if subscribers:
                _subscribed(svc, subscribers, stack)
            for k in range(1, n_vrs + 1):
                svc.control.handle(Request("activate", f"vr{k}", float(setpoints[k - 1])), clock_s[0])
            stages: dict[str, float] | None = {} if breakdown else None
            cpu, writes = _measure(svc, host, n_periods, period_s, clock_s, between, profile, stages, counted)
            if stages is not None:
                row["breakdown_us_per_period"] = stages
            if counted is not None:
                ed = svc.control.early_drop
                assert ed is not None
                measured_s = (n_periods - 1) * period_s
                row.update(limiter_ops_per_s={k: (v - counted.warm.get(k, 0)) / measured_s
                                              for k, v in counted.ops.items()},
                           limiter_ops_warmup=dict(counted.warm),
                           vrs_limited_at_end=sum(1 for v in ed.vrs.values() if v.limit is not None),
                           limiter_failures=ed.failures)
        finally:
            svc.close()  # restores the original caps (quota -1) before the cgroups go
    daemon_s = (n_periods - 1) * period_s
    row.update(daemon_seconds=daemon_s, core_percent=100.0 * cpu / daemon_s, kernel_included=bool(kernel),
               cap_writes_per_s=writes / daemon_s)
    return row


#: The subscribers' process: SUB sockets on the daemon's samples that read every message until
#: their standard input closes (another process, as a policer is: the reading is not counted).
_SUBSCRIBER_PROGRAM = """
import sys, zmq
endpoint, n, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
ctx = zmq.Context()
poller = zmq.Poller()
for _ in range(n):
    s = ctx.socket(zmq.SUB)
    s.connect(endpoint)
    s.setsockopt(zmq.SUBSCRIBE, topic)
    poller.register(s, zmq.POLLIN)
stdin = sys.stdin.fileno()
poller.register(stdin, zmq.POLLIN)
while True:
    for s, _ in poller.poll():
        if s == stdin:
            sys.exit(0)
        while True:
            try:
                s.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
"""


def _subscribed(svc: DaemonService, n: int, stack: ExitStack) -> None:
    """``n`` SUB sockets on the daemon's samples, in a child process that ``stack`` ends."""
    import zmq

    from xtc.daemon.api import SAMPLES_TOPIC

    assert svc.pub is not None
    endpoint = svc.pub.getsockopt_string(zmq.LAST_ENDPOINT)
    child = subprocess.Popen([sys.executable, "-c", _SUBSCRIBER_PROGRAM, endpoint, str(n), SAMPLES_TOPIC.decode()],
                             stdin=subprocess.PIPE)

    def stop() -> None:
        assert child.stdin is not None
        child.stdin.close()
        try:
            code = child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise RuntimeError("the subscribers' process did not end when asked") from None
        if code != 0:
            raise RuntimeError(f"the subscribers' process failed (exit code {code})")

    stack.callback(stop)
    deadline = time.monotonic() + 10.0
    while not svc.sample_listeners():
        if child.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon's PUB socket saw no subscription from the subscribers' process "
                               f"(exit code {child.poll()})")
        time.sleep(0.005)


def _check_removed(lab: _KernelLab) -> None:
    left = lab.remove()
    if left:
        raise RuntimeError("xtc bench daemon could not remove: " + "; ".join(left))


def add_daemon(sub: Any) -> None:
    """Register ``xtc bench daemon``."""
    p = sub.add_parser("daemon", help="the daemon's CPU cost per second of operation, for 10 to 10000 VRs")
    p.add_argument("--vrs", type=int, nargs="+", default=[10, 100, 1000], help="VR counts to measure")
    p.add_argument("--period-s", type=float, default=1.0, help="control period, seconds")
    p.add_argument("--seconds", type=float, default=5.0, help="daemon seconds per measurement")
    p.add_argument("--controller", default="xtc", choices=["xtc", "xtc-noprobe", "pi", "deadbeat", "fixed"],
                   help="controller kind (xtc-noprobe: xtc with [controller] lag_probe = false)")
    p.add_argument("--workload", choices=WORKLOADS, action="append",
                   help="steady: every VR at its setpoint, inside the dead zone (no cap writes); moving: rates "
                        "+-30%% around the setpoints, caps moving every period (default: both, one row each)")
    p.add_argument("--subscribers", type=int, nargs="+", default=[1], metavar="N",
                   help="SUB sockets reading the daemon's samples, one row per value (default 1, as with a policer "
                        "that reads the sample streams; 0: nobody listens and the daemon builds no samples)")
    p.add_argument("--file", action="store_true",
                   help="synthetic /proc/net/dev file even as root (kernel cost not included)")
    p.add_argument("--profile", metavar="PATH",
                   help="write a cProfile of the measured periods (last VR count; one file per workload)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time each stage of a period (thread CPU per period, microseconds)")
    p.add_argument("--early-drop", action="store_true",
                   help="every VR with early drop on: real limiters on the veth ends (issue 48; root only)")
    p.add_argument("--early-drop-limiter", choices=("bpf", "tbf"), default="bpf",
                   help="with --early-drop: the daemon's daemon.early_drop_limiter (default bpf)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    kernel = False if args.file else os.geteuid() == 0
    if not kernel:
        why = "--file" if args.file else "not root"
        print(f"xtc bench daemon: {why}: counters from a synthetic /proc/net/dev file, caps recorded; "
              "the kernel's cost is NOT included", file=sys.stderr)
    workloads = args.workload or list(WORKLOADS)
    rows = [bench_daemon(n, seconds=args.seconds, period_s=args.period_s, kind=args.controller, kernel=kernel,
                         profile=None if args.profile is None else _profile_path(args.profile, w, len(workloads)),
                         workload=w, breakdown=args.breakdown, subscribers=k, early_drop=args.early_drop,
                         early_drop_limiter=args.early_drop_limiter)
            for n in args.vrs for w in workloads for k in args.subscribers]
    if args.json:
        print(json.dumps({"benchmark": "daemon", "python": platform.python_version(),
                          "kernel": platform.release(), "machine": platform.machine(),
                          "kernel_included": kernel, "results": rows}, indent=1))
    else:
        print(f"{'VRs':>6} {'ifaces':>7} {'period s':>9} {'workload':>8} {'subs':>4} {'core %':>8} {'writes/s':>9}  counters")
        for r in rows:
            print(f"{r['vrs']:>6} {r['interfaces']:>7} {r['period_s']:>9.2f} {r['workload']:>8} "
                  f"{r['sample_subscribers']:>4} {r['core_percent']:>8.3f} "
                  f"{r['cap_writes_per_s']:>9.1f}  {r['counters']}")
            for stage, us in r.get("breakdown_us_per_period", {}).items():
                print(f"{'':>8}{stage:<30} {us:>10.1f} us/period")
    return 0


def _profile_path(path: str, workload: str, n_workloads: int) -> str:
    """One profile file per workload when several are measured (``x.prof`` -> ``x.steady.prof``)."""
    if n_workloads == 1:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{workload}.{ext}" if dot else f"{path}.{workload}"
