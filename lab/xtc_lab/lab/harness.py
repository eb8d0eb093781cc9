"""What every lab experiment shares: the host check, the lab, the daemon, the recorder, the report.

An experiment (``xtc lab run NAME``, one module in :mod:`xtc_lab.lab.experiments`) runs on real
packets through real VRs (:mod:`xtc_lab.lab.netlab`) with the real daemon (``xtc daemon`` as a
separate process, talking to it only through its ZeroMQ manager API, as an operator's tools
do).  This module gives it:

* :func:`lab_host_problem` -- why this host cannot run the lab (None if it can);
* :func:`measurement_lock` -- one measurement at a time on a host: two experiments sharing two
  cores would measure each other;
* :func:`lab_session` -- a lab with ``n`` VRs under the lab's libvirtd, removed afterwards (also
  on error or Ctrl-C; a crashed run's lab is removed by the next one, see ``teardown_orphans``);
* :class:`LabDaemon` -- an ``xtc daemon`` process with a generated configuration;
* :class:`Recorder` -- every VR's forwarded and offered packets/s (host-side ``/proc/net/dev``
  counters, read here, independently of the daemon) and its cap (read back from libvirt) on a
  fixed grid, in a thread;
* :class:`RunContext` and :func:`write_outputs` -- where an experiment writes its JSON, PNG
  and markdown report.

Units: packets/s (pps), percent of one CPU, seconds.

Why one file: it is the one kit every experiment module imports, and its parts are used together
(a session's lab feeds the daemon, the recorder and the outputs); each part is short, and the
pieces with a job of their own already live apart (:mod:`xtc_lab.lab.record`,
:mod:`xtc_lab.lab.status`, :mod:`xtc_lab.lab.cgroups`).
"""

from __future__ import annotations

import xtc.models

import fcntl
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from xtc_lab.lab.netlab import VR, LabError, NetLab, random_prefix, read_packet_counters, vr_totals

MEASURE_LOCK = Path("/run/xtc/lab-measure.lock")
#: The model fitted on the lab's own cap sweep (``xtc lab run capsweep``; shipped in the repository).
LAB_MODEL_FILE = Path(xtc.models.__file__).resolve().with_name("lab.toml")


# ----------------------------------------------------------------------------- host check
#: Seconds a QEMU VR of an experiment may take to forward (TCG boots in about 70 s on a loaded 2-core host).
QEMU_READY_TIMEOUT_S = 300.0
#: What a lab VR can be: an LXC domain, the forwarder in a namespace + cgroup, or a QEMU domain.
LAB_MODES = ("lxc", "netns", "qemu")


def check_lab_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`LAB_MODES`; else a :class:`LabError` naming the choices."""
    if mode not in LAB_MODES:
        raise LabError(f"unknown VR kind {mode!r}: want 'lxc' (libvirt LXC domains), 'netns' (namespaces + cgroups) "
                       "or 'qemu' (libvirt QEMU domains)")
    return mode


def lab_host_problem(mode: str = "lxc") -> str | None:
    """Why this host cannot run the lab in ``mode`` ("lxc", "netns" or "qemu"); None if it can."""
    if os.geteuid() != 0:
        return "needs root (creates namespaces, bridges, cgroups and libvirt LXC domains)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: iproute2, util-linux)"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "pyroute2 is not installed (pip install 'xtc[net]')"
    if mode == "netns":
        return None
    if mode not in ("lxc", "qemu"):
        return f"unknown lab mode {mode!r}: want 'lxc', 'netns' or 'qemu'"
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "libvirt-python is not installed (pip install 'xtc[libvirt]')"
    from xtc_lab.lab.libvirtd import LibvirtdPaths

    if not LibvirtdPaths().libvirtd.exists():
        return "libvirtd is not installed (Debian: libvirt-daemon libvirt-daemon-driver-lxc)"
    if mode == "qemu":
        from xtc_lab.lab.qemu import missing_requirements

        missing = missing_requirements()
        if not Path("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so").exists():
            missing.append("the libvirt QEMU driver (Debian package libvirt-daemon-driver-qemu)")
        return "a QEMU VR needs " + "; ".join(missing) if missing else None
    if not Path("/usr/lib/libvirt/libvirt_lxc").exists():
        return "the libvirt LXC driver is not installed (Debian: libvirt-daemon-driver-lxc)"
    return None


def lock_holders(path: Path, locks_text: str) -> list[int]:
    """Pids that hold a ``flock`` on ``path``, from the text of ``/proc/locks``."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    dev_ino = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids = []
    for line in locks_text.splitlines():
        f = line.split()
        if len(f) < 6 or f[1] != "FLOCK" or "->" in f:
            continue
        try:
            maj, mnr, ino = f[5].split(":")
            if (int(maj, 16), int(mnr, 16), int(ino)) == dev_ino:
                pids.append(int(f[4]))
        except ValueError:
            continue
    return pids


def ancestors(pid: int) -> list[int]:
    """The parent, grandparent, ... of ``pid`` (up to init; empty if ``pid`` is gone)."""
    try:
        return [p.pid for p in psutil.Process(pid).parents()]
    except psutil.Error:
        return []


@contextmanager
def measurement_lock(path: Path = MEASURE_LOCK, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the host's lab measurement lock (an exclusive ``flock``; waits for the holder).

    If a process this one descends from holds it already (``flock /run/xtc/lab-measure.lock
    pytest ...``, or ``xtc lab run`` starting a child that measures), it is held for us: go on.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holders = set(lock_holders(path, Path("/proc/locks").read_text()))
            except OSError:
                holders = set()
            if not holders & set(ancestors(os.getpid())):
                if say is not None:
                    say(f"another lab measurement holds {path}; waiting for it to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def lab_session(n_vrs: int, work_iters: int = 0, stem: str = "xtcx",
                vcpu_period_us: int = 100_000, work_factor: float = 1.0, mode: str = "lxc",
                say: Callable[[str], None] | None = None) -> Iterator[NetLab]:
    """A lab with ``n_vrs`` VRs (unlimited at first); removed afterwards.

    ``mode`` "lxc": LXC domains under the lab's libvirtd; "netns": the forwarder in a network
    namespace and a cgroup of its own per VR (no libvirt; the daemon's cgroup backend caps it);
    "qemu": libvirt QEMU domains on ``qemu:///system`` that forward in their own kernel
    (:meth:`NetLab.add_qemu_vr`; KVM where it works, TCG otherwise; ``work_iters`` and
    ``work_factor`` do not apply: the guest kernel forwards).  ``say`` reports the QEMU
    accelerator and each guest's boot time.
    ``n_vrs`` may be 0 for a caller that builds its own shape (e.g. :meth:`NetLab.add_chain`).
    """
    from xtc_lab.lab import qemu
    from xtc_lab.lab.libvirtd import Libvirtd
    from xtc_lab.lab.netlab import teardown_orphans

    check_lab_mode(mode)
    teardown_orphans()
    daemon = None if mode == "netns" else Libvirtd(qemu.QEMU_URI) if mode == "qemu" else Libvirtd()  # netns VRs need no libvirt
    accel = qemu.pick_accel() if mode == "qemu" else None
    if accel is not None and say is not None:
        say(f"QEMU VRs: accel {accel[0]} ({accel[1]})")
        if qemu.tuning_from_env().describe():
            say(f"QEMU tuning ({qemu.TUNING_ENV}): {qemu.tuning_from_env().describe()}")
    with daemon.lease() if daemon is not None else nullcontext():
        lab = NetLab(prefix=random_prefix(stem)) if daemon is None else NetLab(prefix=random_prefix(stem), uri=daemon.uri)
        try:
            for _ in range(n_vrs):
                if daemon is None:
                    lab.add_netns_vr(work_iters=work_iters, cgroup=True, work_factor=work_factor)
                elif accel is not None:
                    t0 = time.monotonic()
                    vr = lab.add_qemu_vr(accel=accel[0], ready_timeout_s=QEMU_READY_TIMEOUT_S)
                    if say is not None:
                        say(f"QEMU VR {vr.name} forwards in its guest kernel after {time.monotonic() - t0:.0f} s")
                else:
                    lab.add_vr(work_iters=work_iters, vcpu_period_us=vcpu_period_us, work_factor=work_factor)
            yield lab
        finally:
            lab.teardown()
    if daemon is not None:
        daemon.stop_if_unused()


def controller_model(chosen: str | Path | None = None) -> str:
    """The daemon's ``[controller] model``: ``chosen`` if given, else the lab's model if present, else "paper"."""
    if chosen:
        return str(chosen)
    return str(LAB_MODEL_FILE) if LAB_MODEL_FILE.exists() else "paper"


# ------------------------------------------------------------------------------ libvirt reads
class CapReader:
    """Reads VRs' caps through the product's host interface: LXC VRs with
    :class:`xtc.host.libvirt.LibvirtBackend` on its own libvirt connection (opened at the first
    read), netns VRs with :class:`xtc.host.cgroup.CgroupBackend` on their cgroups.

    Returns percent of one CPU; None = unlimited, not running or unreadable.
    """

    def __init__(self, uri: str, kind: str = "lxc"):
        self.uri = uri
        self.kind = kind  # how the libvirt domains' caps are written: "lxc" or "qemu" (vcpu_quota either way)
        self._libvirt: Any = None
        self._cgroups: dict[str, Any] = {}

    def _host(self, vr: VR) -> Any:
        from xtc.host.counters import ProcNetDevCounters

        # Caps only: the lab counts packets with its own parser (netlab.read_packet_counters).
        if vr.kind == "netns":
            host = self._cgroups.get(vr.name)
            if host is None:
                from xtc.host.cgroup import CgroupBackend, CgroupTarget

                if vr.cgroup is None:
                    raise LabError(f"VR {vr.name} has no cgroup: its cap cannot be read")
                host = self._cgroups[vr.name] = CgroupBackend([CgroupTarget(vr.name, vr.cgroup, tuple(vr.vifs))],
                                                              ProcNetDevCounters())
            return host
        if self._libvirt is None:
            from xtc.host.libvirt import LibvirtBackend
            from xtc.host.libvirt_conn import LibvirtConn

            self._libvirt = LibvirtBackend(LibvirtConn(self.uri), self.kind, (), ProcNetDevCounters())
        return self._libvirt

    def __call__(self, vr: VR) -> float | None:
        from xtc.host.errors import HostAdapterError

        try:
            return self._host(vr).read_cap(vr.name)
        except (HostAdapterError, ValueError, LabError):
            return None

    def close(self) -> None:
        for host in (self._libvirt, *self._cgroups.values()):
            if host is not None:
                host.close()
        self._libvirt, self._cgroups = None, {}


@contextmanager
def experiment_lab(result: dict[str, Any], n_vrs: int, work_iters: int = 0,
                   work_factor: float = 1.0, mode: str = "lxc",
                   say: Callable[[str], None] | None = None) -> Iterator[tuple[NetLab, Path, CapReader]]:
    """What an experiment runs in: its lab (:func:`lab_session`), a scratch directory for its daemons
    (both removed afterwards) and a :class:`CapReader` on the lab's libvirtd.

    The lab's prefix is recorded at once in ``result["lab_prefix"]``: what the leftovers checks look for.

    Parameters
    ----------
    result : dict
        The experiment's result document.
    n_vrs, work_iters : int
        As :func:`lab_session`.
    work_factor : float
        As :func:`lab_session` (the forwarders' per-frame work factor).
    mode : {"lxc", "netns", "qemu"}
        As :func:`lab_session`; recorded as ``result["vr_kind"]`` (and, for QEMU VRs, the
        accelerator as ``result["accel"]``).
    say : callable, optional
        As :func:`lab_session`.

    Yields
    ------
    (NetLab, Path, CapReader)
        The lab, the scratch directory and the cap reader.
    """
    with lab_session(n_vrs, work_iters=work_iters, work_factor=work_factor, mode=mode, say=say) as lab, \
            tempfile.TemporaryDirectory(prefix="xtc-lab-") as tmp:
        result["lab_prefix"] = lab.prefix
        result["vr_kind"] = mode
        if mode == "qemu":
            from xtc_lab.lab.qemu import pick_accel, tuning_from_env

            result["accel"] = pick_accel()[0]
            result["qemu_tuning"] = tuning_from_env().describe()
        yield lab, Path(tmp), CapReader(lab.uri, "qemu" if mode == "qemu" else "lxc")


def set_cap(lab: NetLab, vr: VR, cap_percent: float | None, period_us: int = 100_000) -> None:
    """Set an LXC VR's cap directly (None = unlimited); for sweeps and Fixed Cap baselines."""
    lab.set_vcpu_quota(vr, -1 if cap_percent is None else max(1000, round(cap_percent / 100.0 * period_us)))


# ------------------------------------------------------------------------------ the daemon
def daemon_config_text(workdir: Path, uri: str, domains: Sequence[str | VR], kind: str = "xtc", model: str | Path = "paper",
                       period_s: float = 1.0, cap_min_percent: float | None = None,
                       daemon_extra: dict[str, Any] | None = None, lag_probe: bool | None = None) -> str:
    """An ``xtc-daemon/1`` file, its state and ipc:// sockets in ``workdir``: the libvirt backend for
    ``domains`` given by name (LXC VRs), the cgroup backend for netns VRs given as :class:`VR`
    (their cgroups and host-side vifs; one backend per daemon, so not both).

    ``daemon_extra`` adds keys to ``[daemon]`` (for instance ``proc_net_dev``); ``lag_probe`` sets
    ``[controller] lag_probe`` (None: left out, the daemon's default).
    """
    import tomli_w

    controller: dict[str, Any] = {"model": str(model), "kind": kind}
    if cap_min_percent is not None:
        controller["cap_min_percent"] = float(cap_min_percent)
    if lag_probe is not None:
        controller["lag_probe"] = bool(lag_probe)
    netns = [d for d in domains if isinstance(d, VR)]
    if netns and len(netns) != len(domains):
        raise LabError("one daemon controls LXC VRs (by name) or netns VRs, not both")
    doc = {
        "schema": "xtc-daemon/1",
        "daemon": {"backend": "cgroup" if netns else "libvirt", "control_period_s": float(period_s),
                   "state_dir": str(Path(workdir) / "state"), **(daemon_extra or {})},
        "controller": controller,
        "manager": {"endpoint": f"ipc://{workdir}/mgr.sock", "pub_endpoint": f"ipc://{workdir}/pub.sock"},
        "metrics": {"enabled": False},
        "log": {"format": "json", "level": "info"},
    }
    if netns:
        if any(v.cgroup is None for v in netns):
            raise LabError("a netns VR without a cgroup cannot be capped")
        doc["cgroup"] = {"vr": [{"name": v.name, "path": v.cgroup, "interfaces": list(v.vifs)} for v in netns]}
    else:
        doc["libvirt"] = {"uri": uri, "domains": [str(d) for d in domains]}
    return tomli_w.dumps(doc)


class LabDaemon:
    """``xtc daemon`` as a separate process controlling ``domains``: LXC VRs by name (the libvirt
    backend) or netns VRs as :class:`VR` (the cgroup backend; :func:`daemon_config_text`).

    Parameters
    ----------
    workdir
        Directory for its configuration, state, sockets and log (``daemon.log``).
    uri, domains
        libvirt connection and the VRs it controls (domain names, or netns :class:`VR`).
    kind, model
        ``[controller] kind`` and ``model`` ("paper" or a model file path).
    period_s
        Control period, s.
    cap_min_percent
        Optional ``[controller] cap_min_percent`` (the paper's cap_min, section 7.2.2).
    lag_probe
        ``[controller] lag_probe`` (XTC's controller only; None: the daemon's default, the probe on).
    cfs_period_us
        ``[daemon] cfs_period_us`` (0: left out, the VRs' own CFS period).
    daemon_extra
        More ``[daemon]`` keys (e.g. ``early_drop_limiter``).
    """

    def __init__(self, workdir: Path, uri: str, domains: Sequence[str | VR], kind: str = "xtc",
                 model: str | Path = "paper", period_s: float = 1.0, cap_min_percent: float | None = None,
                 lag_probe: bool | None = None, cfs_period_us: int = 0, daemon_extra: dict[str, Any] | None = None):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.endpoint = f"ipc://{self.dir}/mgr.sock"
        self.pub_endpoint = f"ipc://{self.dir}/pub.sock"
        self.config = self.dir / "xtcd.toml"
        self.config.write_text(daemon_config_text(self.dir, uri, domains, kind=kind, model=model, period_s=period_s,
                                                  cap_min_percent=cap_min_percent, lag_probe=lag_probe,
                                                  daemon_extra={**({"cfs_period_us": cfs_period_us} if cfs_period_us
                                                                   else {}), **(daemon_extra or {})} or None))
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    def start(self, timeout_s: float = 30.0) -> LabDaemon:
        """Start the process and wait until its manager API answers."""
        from xtc.daemon.ctl import ManagerClient, ManagerError

        log = open(self.dir / "daemon.log", "ab")  # noqa: SIM115 - owned by the child from here
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "xtc.cli", "daemon", "--config", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            log.close()
        self._client = ManagerClient(self.endpoint, timeout_s=2.0)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise LabError(f"xtc daemon exited with status {self.proc.returncode}: {self.log_tail()}")
            try:
                self._client.call("ping")
                return self
            except ManagerError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise LabError(f"xtc daemon did not answer within {timeout_s:.0f} s: {self.log_tail()}") from None
                time.sleep(0.2)

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """A manager API request (raises ``ManagerError`` on refusal)."""
        if self._client is None:
            raise LabError("the daemon is not started")
        return self._client.call(cmd, **fields)

    def activate(self, vr: str, setpoint_pps: float, early_drop: bool | None = None) -> None:
        """Activate ``vr`` at ``setpoint_pps``; ``early_drop`` True/False asks for early drop or not
        (issue 48; None: the daemon's default, off in the lab's daemons)."""
        fields: dict[str, Any] = {"vr": vr, "setpoint_pps": float(setpoint_pps)}
        if early_drop is not None:
            fields["early_drop"] = bool(early_drop)
        self.call("activate", **fields)

    def setpoint(self, vr: str, setpoint_pps: float) -> None:
        self.call("setpoint", vr=vr, setpoint_pps=float(setpoint_pps))

    def log_tail(self, lines: int = 8) -> str:
        try:
            return " | ".join((self.dir / "daemon.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM (the daemon restores every VR's original cap), then SIGKILL if it hangs."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def __enter__(self) -> LabDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------ recording
@dataclass
class Series:
    """One VR's recorded time series (times in s from the recorder's start)."""

    t_s: list[float] = field(default_factory=list)
    forwarded_pps: list[float] = field(default_factory=list)
    offered_pps: list[float] = field(default_factory=list)
    cap_percent: list[float | None] = field(default_factory=list)

    def window(self, t0_s: float, t1_s: float) -> list[float]:
        """Forwarded rates of the samples that end within [t0_s, t1_s]."""
        return [r for t, r in zip(self.t_s, self.forwarded_pps) if t0_s <= t <= t1_s]

    def to_json(self) -> dict[str, list[Any]]:
        return {"t_s": [round(t, 3) for t in self.t_s],
                "forwarded_pps": [round(r, 1) for r in self.forwarded_pps],
                "offered_pps": [round(r, 1) for r in self.offered_pps],
                "cap_percent": [None if c is None else round(c, 3) for c in self.cap_percent]}


class Recorder:
    """Samples every VR's host-side counters (and cap) every ``dt_s`` seconds in a thread.

    The forwarded rate of a VR is the host-side RX packets of both its vifs (what the VR sent
    out), the offered rate the host-side TX packets of its generator-side vif (what was handed to
    it); both differenced over each ``dt_s`` on the monotonic clock.  A sample across a vanished
    or reset counter is dropped.
    """

    def __init__(self, vrs: Sequence[VR], dt_s: float = 0.5, caps: Callable[[VR], float | None] | None = None,
                 proc_net_dev: str = "/proc/net/dev"):
        self.vrs = list(vrs)
        self.dt_s = dt_s
        self.caps = caps
        self.proc_net_dev = proc_net_dev
        self.series: dict[str, Series] = {vr.name: Series() for vr in self.vrs}
        self.marks: list[tuple[float, str]] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lab-recorder")

    def now(self) -> float:
        """Seconds since the recorder started."""
        return time.monotonic() - self._t0

    def mark(self, label: str) -> float:
        """Record an event (e.g. a setpoint change) at the current time; returns that time."""
        t = self.now()
        self.marks.append((t, label))
        return t

    def _read(self) -> dict[str, tuple[int, int]] | None:
        try:
            return read_packet_counters(self.proc_net_dev)
        except (OSError, ValueError):
            return None

    def _run(self) -> None:
        prev, t_prev = self._read(), time.monotonic()
        next_t = t_prev + self.dt_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            next_t += self.dt_s
            cur, t = self._read(), time.monotonic()
            if cur is not None and prev is not None:
                for vr in self.vrs:
                    r = pps_between(prev, cur, t - t_prev, vr.vifs)
                    if r is None:
                        continue
                    cap = self.caps(vr) if self.caps is not None else None
                    s = self.series[vr.name]
                    s.t_s.append(t - self._t0)
                    s.forwarded_pps.append(r[0])
                    s.offered_pps.append(r[1])
                    # Appended last: a reader that sees k caps sees k entries in every list.
                    s.cap_percent.append(cap)
            prev, t_prev = cur, t

    def __enter__(self) -> Recorder:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def to_json(self) -> dict[str, Any]:
        return {"dt_s": self.dt_s, "marks": [{"t_s": round(t, 3), "label": m} for t, m in self.marks],
                "series": {name: s.to_json() for name, s in self.series.items()}}


def mean(xs: Sequence[float]) -> float:
    """Arithmetic mean (NaN for an empty sequence)."""
    return sum(xs) / len(xs) if xs else math.nan


def pps_between(c0: dict[str, tuple[int, int]], c1: dict[str, tuple[int, int]], dt_s: float,
                vifs: Sequence[str]) -> tuple[float, float] | None:
    """(forwarded, offered) packets/s of a VR between two counter readings ``dt_s`` apart.

    None if a vif is missing from either reading or a counter went backwards (a vif recreated).
    """
    a, b = vr_totals(c0, vifs), vr_totals(c1, vifs)
    if a is None or b is None or b[0] < a[0] or b[1] < a[1] or dt_s <= 0:
        return None
    return (b[0] - a[0]) / dt_s, (b[1] - a[1]) / dt_s


def measure_pps(vrs: Sequence[VR], seconds: float) -> dict[str, tuple[float, float]]:
    """(forwarded, offered) packets/s of each VR over the next ``seconds``."""
    c0, t0 = read_packet_counters(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = read_packet_counters(), time.monotonic()
    out = {}
    for vr in vrs:
        r = pps_between(c0, c1, t1 - t0, vr.vifs)
        if r is None:
            raise LabError(f"VR {vr.name}: an interface of {list(vr.vifs)} vanished or was recreated during the measurement")
        out[vr.name] = r
    return out


def measure_with_generator(lab: NetLab, vr: VR, seconds: float) -> tuple[float, float, float]:
    """(forwarded, handed to the VR, sent by the generator) packets/s of ``vr`` over the next ``seconds``.

    "Sent" is the host-side RX of the generator's veth (``<prefix>-g<k>``): what the generator
    offered, whatever the VR took.  On a QEMU VR the tap's TX ("handed") counts only what QEMU
    read from it, so the offered rate of a QEMU VR is this one.
    """
    gen = f"{lab.prefix}-g{vr.k}"
    c0, t0 = read_packet_counters(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = read_packet_counters(), time.monotonic()
    r = pps_between(c0, c1, t1 - t0, vr.vifs)
    if r is None or gen not in c0 or gen not in c1:
        raise LabError(f"VR {vr.name}: an interface of {[*vr.vifs, gen]} vanished or was recreated during the measurement")
    return r[0], r[1], (c1[gen][0] - c0[gen][0]) / (t1 - t0)


# ------------------------------------------------------------------------------ run context
@dataclass
class RunContext:
    """What ``xtc lab run`` hands an experiment.

    Attributes
    ----------
    out_dir
        Directory for this experiment's files (created).
    quick
        A short version (fewer points, shorter phases) for the test suite and smoke runs.
    offered_pps
        Offered rate per VR stream, packets/s (experiments scale it down when the host cannot push it).
    work_iters
        Busy-work iterations per frame in the VRs' forwarder.
    work_factor
        Per-frame work factor of the VRs' forwarder (it does ``round(work_factor * work_iters)``
        iterations per frame; 1 = as given).
    cfs_period_us
        ``[daemon] cfs_period_us`` of the experiment's XTC daemons (0: the VRs' own CFS period, 100 ms).
    kind
        The VRs (``xtc lab run --kind``): "lxc", "netns" or "qemu" (see :func:`lab_session`).
    say
        Progress output (one line per step, to stderr).
    """

    out_dir: Path
    quick: bool = False
    offered_pps: float = 100_000.0
    work_iters: int = 0
    work_factor: float = 1.0
    cfs_period_us: int = 0
    kind: str = "lxc"
    say: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def phase(self, seconds: float) -> float:
        """A phase length, s: as given, or a third of it (at least 4 s) in quick mode."""
        return max(4.0, seconds / 3.0) if self.quick else seconds


def wait_with_progress(seconds: float, label: str, say: Callable[[str], None], step_s: float = 5.0) -> None:
    """Sleep ``seconds``, reporting the remaining time every ``step_s``."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        if left > step_s:
            say(f"  {label}: {left:.0f} s left")
        time.sleep(min(step_s, left))


def host_description() -> dict[str, Any]:
    """The host the lab ran on (for the report)."""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "unknown CPU")
    except OSError:
        model = "unknown CPU"
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def save_figure(fig: Any, path: Path) -> None:
    """Lay out a matplotlib figure, write it to ``path`` (PNG, 100 dpi) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(ctx: RunContext, name: str, result: Mapping[str, Any], report_md: str,
                  plot: Callable[[Path], None] | None) -> dict[str, Path]:
    """Write ``<name>.json``, ``<name>.png`` (if ``plot``) and ``<name>.md`` into ``ctx.out_dir``."""
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": ctx.out_dir / f"{name}.json", "md": ctx.out_dir / f"{name}.md"}
    paths["json"].write_text(json.dumps(json_safe(result), indent=1, allow_nan=False) + "\n")
    if plot is not None:
        paths["png"] = ctx.out_dir / f"{name}.png"
        plot(paths["png"])
        report_md = report_md.rstrip() + f"\n\n![{name}]({name}.png)\n"
    paths["md"].write_text(report_md.rstrip() + "\n")
    return paths


def json_safe(o: Any) -> Any:
    """``o`` with NaN/infinite floats as None, paths as strings and tuples as lists (for strict JSON)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, Mapping):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    return o
