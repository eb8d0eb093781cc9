"""A CPU hog inside a VR: a disturbance that takes part of the VR's own CPU (section 7.1, Figure 6).

The paper disturbs a VR by starting "a process in the virtual router" that "consumes 15% of
the assigned CPU".  A lab VR's only process is its forwarder, so the hog is a separate busy
process moved into the *same cpu cgroup* as the forwarder: whatever cap the VR has is then
shared by the forwarder and the hog, exactly as a second task inside a Xen domU shares the
domU's cap.

* :func:`cpu_cgroup_of` (pure) finds the directory of a process's cpu cgroup from its
  ``/proc/<pid>/cgroup`` and the reader's ``/proc/self/mountinfo``: the cgroup v1 hierarchy
  that holds the ``cpu`` controller when there is one (this host), else the cgroup v2 tree.
* :func:`vr_cpu_cgroup` applies it to a lab VR: an LXC VR's forwarder is the child of the
  domain's ``libvirt_lxc`` controller (whose pid is the domain's ID); a netns VR's forwarder is
  ``vr.process``.
* :func:`cpuacct_cgroup_of` (pure) finds a process's group in a v1 ``cpuacct`` hierarchy mounted
  apart from ``cpu`` (this host): the hog joins it too, so that the VR's CPU accounting (libvirt's
  ``cpu.time`` of an LXC domain, the cgroup backend's ``cpuacct.usage``) counts the hog's CPU as
  it counts the forwarder's, as a Xen domU's accounting counts every task inside it.
* :class:`CpuHog` is the hog process (``python -m xtc_lab.lab.hog``).  It is started paused, moved
  into the cgroup by writing its pid to ``cgroup.procs``, checked there, and only then starts
  to burn; :func:`hog_loop` (pure, driven by the clocks it is given) burns ``cpu_percent`` of one
  CPU: busy for ``cpu_percent / 100 * period_s`` of *CPU* time in every ``period_s`` of wall
  time, so a throttled hog never catches up on missed work.  It exits by itself when its parent
  dies.
* :func:`hog_in_vr` (a context manager) puts one in a VR and removes it on exit, also on error;
  the process is also registered with the lab, so :meth:`NetLab.teardown` kills it, and
  destroying the LXC domain kills every process of its cgroup.

Units: percent of one CPU (``cpu_percent``), seconds (``_s``).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from xtc_lab.lab.cgroups import CgroupMount, parse_cgroup_mounts
from xtc_lab.lab.netlab import VR, LabError, NetLab

PROC = Path("/proc")
MOUNTINFO = Path("/proc/self/mountinfo")
DEFAULT_PERIOD_S = 0.1  # the CFS period: a throttled hog still gets its share within each period


# ------------------------------------------------------------------------------ pure: cgroups
@dataclass(frozen=True)
class CpuCgroupDir:
    """The cpu cgroup of a process: ``version`` (1 or 2) and its directory."""

    version: int
    path: Path

    @property
    def procs_file(self) -> Path:
        """Write a pid here to move that process (all its threads) into the cgroup."""
        return self.path / "cgroup.procs"

    @property
    def quota_file(self) -> Path:
        """The file that holds the cgroup's CPU limit."""
        return self.path / ("cpu.cfs_quota_us" if self.version == 1 else "cpu.max")


def parse_proc_cgroup(text: str) -> list[tuple[int, frozenset[str], str]]:
    """Parse ``/proc/<pid>/cgroup``: (hierarchy id, v1 controllers, path) per line.

    The v2 line is ``0::<path>`` (hierarchy 0, no controllers).  Named v1 hierarchies
    (``name=systemd``) keep their name as the controller.
    """
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise LabError(f"unexpected line in /proc/<pid>/cgroup: {line!r}")
        ctrls = frozenset(c for c in parts[1].split(",") if c)
        out.append((int(parts[0]), ctrls, parts[2]))
    return out


def _under_mount(path: str, m: CgroupMount) -> Path | None:
    """The directory of cgroup ``path`` inside mount ``m`` (None if ``m`` does not show it)."""
    root = m.root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root):].lstrip("/")
    return Path(m.mount_point) / rel if rel else Path(m.mount_point)


def cpu_cgroup_of(proc_cgroup_text: str, mountinfo_text: str) -> CpuCgroupDir:
    """The cpu cgroup directory of a process (pure).

    Parameters
    ----------
    proc_cgroup_text
        The process's ``/proc/<pid>/cgroup``.
    mountinfo_text
        The *reader's* ``/proc/self/mountinfo`` (the directory is returned as the reader sees it).

    Returns
    -------
    CpuCgroupDir
        The v1 hierarchy holding ``cpu`` when the process is in one and it is mounted; else the
        v2 tree.

    Raises
    ------
    LabError
        The process is in the root cpu cgroup (it has no cgroup of its own to share), or no
        mounted hierarchy shows its cgroup.
    """
    entries = parse_proc_cgroup(proc_cgroup_text)
    mounts = parse_cgroup_mounts(mountinfo_text)
    v1 = next(((p, c) for h, c, p in entries if h != 0 and "cpu" in c), None)
    if v1 is not None:
        path, ctrls = v1
        for m in mounts:
            if m.version == 1 and "cpu" in m.controllers:
                d = _under_mount(path, m)
                if d is None:
                    continue
                if path.rstrip("/") == "":
                    raise LabError("the process is in the root cgroup of the v1 cpu hierarchy: "
                                   "it has no cpu cgroup of its own")
                return CpuCgroupDir(1, d)
        raise LabError(f"the process's v1 cpu cgroup {path} ({','.join(sorted(ctrls))}) is not under a mounted "
                       "cgroup v1 cpu hierarchy")
    v2 = next((p for h, _c, p in entries if h == 0), None)
    if v2 is None:
        raise LabError("the process is in neither a cgroup v1 cpu hierarchy nor the cgroup v2 tree")
    if v2.rstrip("/") == "":
        raise LabError("the process is in the root of the cgroup v2 tree: it has no cpu cgroup of its own")
    for m in mounts:
        if m.version == 2:
            d = _under_mount(v2, m)
            if d is not None:
                return CpuCgroupDir(2, d)
    raise LabError(f"the process's cgroup v2 path {v2} is not under a mounted cgroup2 tree")


def cpuacct_cgroup_of(proc_cgroup_text: str, mountinfo_text: str) -> Path | None:
    """A process's group in a v1 ``cpuacct`` hierarchy mounted apart from ``cpu`` (pure).

    None when there is no such hierarchy (cpuacct is mounted with cpu, whose group
    :func:`cpu_cgroup_of` finds; or cgroup v2, where ``cpu.stat`` counts the same group), or the
    process is in its root (nothing of its own to join), or no mount shows its group.
    """
    entries = parse_proc_cgroup(proc_cgroup_text)
    path = next((p for h, c, p in entries if h != 0 and "cpuacct" in c and "cpu" not in c), None)
    if path is None or path.rstrip("/") == "":
        return None
    for m in parse_cgroup_mounts(mountinfo_text):
        if m.version == 1 and "cpuacct" in m.controllers and "cpu" not in m.controllers:
            d = _under_mount(path, m)
            if d is not None:
                return d
    return None


# ------------------------------------------------------------------------------ pure: the burn loop
def hog_loop(cpu_percent: float, period_s: float, keep_going: Callable[[], bool],
             cpu_clock: Callable[[], float], wall_clock: Callable[[], float],
             sleep: Callable[[float], None]) -> int:
    """Burn ``cpu_percent`` of one CPU until ``keep_going()`` is false; return the periods run.

    In each period of ``period_s`` wall seconds: spin until ``cpu_clock`` (the thread's CPU
    time) has advanced by ``cpu_percent / 100 * period_s``, then sleep to the period's end.  A
    period that overran (the process was throttled or preempted) is not made up for: the next
    one starts now.  At 100 the loop never sleeps.
    """
    if not 0 < cpu_percent <= 100:
        raise ValueError(f"cpu_percent {cpu_percent!r} out of range (0, 100]")
    if not 0.001 <= period_s <= 1.0:
        raise ValueError(f"period_s {period_s!r} out of range 0.001..1")
    busy_s = cpu_percent / 100.0 * period_s
    periods = 0
    next_t = wall_clock()
    while keep_going():
        start_t = next_t
        c0 = cpu_clock()
        while cpu_clock() - c0 < busy_s:
            pass
        periods += 1
        next_t = start_t + period_s
        now = wall_clock()
        if next_t > now:
            if cpu_percent < 100:
                sleep(next_t - now)
        else:
            next_t = now
    return periods


def hog_argv(cpu_percent: float, period_s: float = DEFAULT_PERIOD_S, parent: int | None = None,
             python: str = sys.executable) -> list[str]:
    """Command line of a hog process (checked: bad values raise ``LabError``)."""
    if not isinstance(cpu_percent, (int, float)) or not 0 < cpu_percent <= 100:
        raise LabError(f"hog cpu_percent {cpu_percent!r}: want a percent of one CPU in (0, 100]")
    if not 0.001 <= period_s <= 1.0:
        raise LabError(f"hog period_s {period_s!r} out of range 0.001..1")
    return [python, "-m", "xtc_lab.lab.hog", "--cpu-percent", repr(float(cpu_percent)), "--period-s", repr(float(period_s)),
            "--parent", str(os.getpid() if parent is None else parent)]


# ------------------------------------------------------------------------------ adapters
def child_pids(ppid: int) -> list[int]:
    """Pids whose parent is ``ppid`` (live processes only; none if ``ppid`` is gone)."""
    import psutil

    try:
        return sorted(c.pid for c in psutil.Process(ppid).children())
    except psutil.Error:
        return []


def vr_forwarder_pids(lab: NetLab, vr: VR) -> list[int]:
    """The pids of ``vr``'s forwarder (LXC: the domain's init, a child of its libvirt_lxc controller)."""
    if vr.kind == "netns":
        if vr.process is None or vr.process.poll() is not None:
            raise LabError(f"VR {vr.name}: its forwarder is not running")
        return [vr.process.pid]
    import libvirt

    try:
        dom = lab.domain(vr)
        controller = int(dom.ID())
    except libvirt.libvirtError as e:
        raise LabError(f"VR {vr.name}: cannot read its domain: {e}") from e
    if controller <= 0:
        raise LabError(f"VR {vr.name} is not running")
    pids = child_pids(controller)
    if not pids:
        raise LabError(f"VR {vr.name}: its libvirt_lxc controller (pid {controller}) has no init process")
    return pids


def process_cpu_cgroup(pid: int, proc: Path = PROC, mountinfo: Path = MOUNTINFO) -> CpuCgroupDir:
    """The cpu cgroup of process ``pid`` as this process sees it."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
        mi = mountinfo.read_text()
    except OSError as e:
        raise LabError(f"cannot read the cgroup of process {pid}: {e}") from e
    return cpu_cgroup_of(text, mi)


def vr_cpu_cgroup(lab: NetLab, vr: VR, proc: Path = PROC, mountinfo: Path = MOUNTINFO) -> CpuCgroupDir:
    """The cpu cgroup of ``vr``'s forwarder (where a hog must go to share the VR's cap)."""
    pids = vr_forwarder_pids(lab, vr)
    cg = process_cpu_cgroup(pids[0], proc, mountinfo)
    if not cg.procs_file.exists():
        raise LabError(f"VR {vr.name}: its cpu cgroup {cg.path} has no cgroup.procs")
    return cg


class CpuHog:
    """A process that burns ``cpu_percent`` of one CPU inside the cpu cgroup ``cgroup``.

    Parameters
    ----------
    cgroup
        Where it goes (see :func:`vr_cpu_cgroup`).
    cpu_percent
        CPU it tries to use, percent of one CPU (0..100]; it gets less when the cgroup's cap is
        too small for it and the forwarder together (CFS shares the cap between them).
    period_s
        Its duty cycle, s (default 100 ms, the CFS period: the hog's CPU time per period is
        counted in CPU time, so when the cgroup is throttled for most of a period the hog still
        gets its share in the part where the cgroup runs; with a much shorter duty cycle it
        would lose every slice that falls into a throttled stretch).
    accounting
        A v1 cpuacct group to join as well (see :func:`cpuacct_cgroup_of`), or None.
    """

    READY_TIMEOUT_S = 20.0

    def __init__(self, cgroup: CpuCgroupDir, cpu_percent: float, period_s: float = DEFAULT_PERIOD_S,
                 proc: Path = PROC, mountinfo: Path = MOUNTINFO, accounting: Path | None = None):
        self.argv = hog_argv(cpu_percent, period_s)
        self.cgroup = cgroup
        self.accounting = accounting
        self.cpu_percent = float(cpu_percent)
        self.period_s = float(period_s)
        self.proc_dir = proc
        self.mountinfo = mountinfo
        self.process: subprocess.Popen[bytes] | None = None
        self._t_start = 0.0
        self._cpu_s0 = 0.0
        self._cpu_s = 0.0
        self._wall_s = 0.0

    @property
    def pid(self) -> int:
        if self.process is None:
            raise LabError("the hog is not started")
        return self.process.pid

    def start(self) -> CpuHog:
        """Start the hog paused, move it into the cgroup, check it is there, then let it burn.

        Raises ``LabError`` (and leaves no process behind) if any step fails.  The hog's own
        start-up (the interpreter) happens before the move and is not charged to the VR.
        """
        if self.process is not None:
            raise LabError("the hog is already started")
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
        except OSError as e:
            raise LabError(f"cannot start the hog: {e}") from e
        try:
            assert self.process.stdout is not None
            ready, _, _ = select.select([self.process.stdout], [], [], self.READY_TIMEOUT_S)
            if not ready or self.process.stdout.readline().strip() != b"ready":
                raise LabError(f"the hog did not get ready within {self.READY_TIMEOUT_S:g} s")
            try:
                self.cgroup.procs_file.write_text(f"{self.process.pid}\n")
            except OSError as e:
                raise LabError(f"cannot move the hog (pid {self.process.pid}) into {self.cgroup.path}: {e}") from e
            now_in = process_cpu_cgroup(self.process.pid, self.proc_dir, self.mountinfo)
            if now_in != self.cgroup:
                raise LabError(f"the hog (pid {self.process.pid}) is in {now_in.path}, not in {self.cgroup.path}")
            if self.accounting is not None:
                try:
                    (self.accounting / "cgroup.procs").write_text(f"{self.process.pid}\n")
                except OSError as e:
                    raise LabError(f"cannot move the hog (pid {self.process.pid}) into {self.accounting}: {e}") from e
            assert self.process.stdin is not None
            self.process.stdin.write(b"go\n")
            self.process.stdin.flush()
        except (LabError, OSError) as e:
            err = self._kill()
            raise LabError(f"{e}{'; hog said: ' + err if err else ''}") from e
        self._t_start = time.monotonic()
        self._cpu_s0 = self.cpu_seconds()  # its start-up, spent before it was moved, is not the hog's burn
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time the hog process has used so far, s (its last value once it is stopped)."""
        if self.process is None or self.process.poll() is not None:
            return self._cpu_s
        import psutil

        try:
            t = psutil.Process(self.process.pid).cpu_times()
            self._cpu_s = t.user + t.system
        except psutil.Error:
            pass
        return self._cpu_s

    def stop(self) -> dict[str, float]:
        """Kill the hog (idempotent); return what it burnt since it was let go.

        ``cpu_s`` CPU time, ``wall_s`` wall time, ``cpu_percent`` their ratio in percent of one CPU.
        """
        if self.process is not None and self.process.poll() is None:
            self.cpu_seconds()
            self._wall_s = time.monotonic() - self._t_start
            self._kill()
        burnt = max(0.0, self._cpu_s - self._cpu_s0)
        used = 100.0 * burnt / self._wall_s if self._wall_s > 0 else 0.0
        return {"cpu_s": burnt, "wall_s": self._wall_s, "cpu_percent": used}

    def _kill(self) -> str:
        p = self.process
        if p is None:
            return ""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        err = b""
        if p.stdout is not None:
            p.stdout.close()
        if p.stderr is not None:
            try:
                err = p.stderr.read() or b""
            except (OSError, ValueError):
                pass
            p.stderr.close()
        if p.stdin is not None:
            try:
                p.stdin.close()
            except OSError:
                pass
        return err.decode(errors="replace").strip()[-300:]

    def describe(self) -> dict[str, Any]:
        """The hog's settings and cgroup (for a result file)."""
        out: dict[str, Any] = {"cpu_percent": self.cpu_percent, "period_s": self.period_s,
                               "cgroup": str(self.cgroup.path), "cgroup_version": self.cgroup.version}
        if self.accounting is not None:
            out["cpuacct_cgroup"] = str(self.accounting)
        return out

    def __enter__(self) -> Self:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def hog_in_vr(lab: NetLab, vr: VR, cpu_percent: float, period_s: float = DEFAULT_PERIOD_S) -> Iterator[CpuHog]:
    """A :class:`CpuHog` in ``vr``'s cpu cgroup (and its cpuacct group where that hierarchy is
    mounted apart: :func:`cpuacct_cgroup_of`) for the ``with`` block; killed on exit (also on error).

    The hog is also registered with ``lab`` (``lab.processes``), so the lab's teardown kills it
    if the block is never left normally.
    """
    cg = vr_cpu_cgroup(lab, vr)
    pid = vr_forwarder_pids(lab, vr)[0]
    try:
        acct = cpuacct_cgroup_of((PROC / str(pid) / "cgroup").read_text(), MOUNTINFO.read_text())
    except OSError as e:
        raise LabError(f"cannot read the cgroups of {vr.name}'s forwarder (pid {pid}): {e}") from e
    hog = CpuHog(cg, cpu_percent, period_s, accounting=acct)
    try:
        hog.start()
        assert hog.process is not None
        lab.processes.append(hog.process)
        yield hog
    finally:
        hog.stop()


# ------------------------------------------------------------------------------ the hog process
def _main(argv: list[str] | None = None) -> int:
    """``python -m xtc_lab.lab.hog``: wait for "go" on stdin, then burn (see :func:`hog_loop`)."""
    p = argparse.ArgumentParser(prog="python -m xtc_lab.lab.hog", description="burn a share of one CPU")
    p.add_argument("--cpu-percent", type=float, required=True)
    p.add_argument("--period-s", type=float, default=DEFAULT_PERIOD_S)
    p.add_argument("--parent", type=int, required=True, help="exit when this process is no longer the parent")
    a = p.parse_args(argv)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1  # the starter gave up before moving us: never burn outside the cgroup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    parent = a.parent
    hog_loop(a.cpu_percent, a.period_s, keep_going=lambda: os.getppid() == parent,
             cpu_clock=time.thread_time, wall_clock=time.monotonic, sleep=time.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
