"""Start, reuse and stop a libvirtd (with virtlogd) for the LXC lab.

This adapter installs nothing; it runs the libvirtd and virtlogd that the
distribution ships, the way the lab host needs them (see notes on the host lab):

* the QEMU driver refuses to load without the user ``libvirt-qemu``: the group and
  the user are created as system accounts (no home, no login) when missing;
* ``libvirt-qemu`` is made a member of the group ``kvm`` where that group exists, as Debian's
  libvirt-daemon-system package makes it.  Without it libvirt finds its cached QEMU capabilities
  outdated on every lookup and probes QEMU again (about 5 s each, several times per domain
  start): it probes QEMU with CAP_DAC_OVERRIDE, so QEMU opens ``/dev/kvm`` and reports KVM, while
  its validity check asks whether ``libvirt-qemu`` itself may open ``/dev/kvm``.  Domains of type
  ``qemu`` (the lab's TCG VRs) are not changed by it;
* on a hybrid cgroup layout (cgroup v1 controllers plus an empty cgroup v2 tree at
  ``/sys/fs/cgroup/unified``) the LXC driver fails with "Unable to create directory
  /sys/fs/cgroup/unified": libvirtd is therefore started in its own private mount
  namespace in which that cgroup2 mount is unmounted.  The host's mounts are not
  touched.  On a pure v1 or pure v2 host nothing is unmounted;
* ``/run/libvirt`` and ``/var/log/libvirt`` are created, virtlogd is started first.

A libvirtd that already accepts ``lxc:///`` connections is reused and never
stopped by this module.  What this module starts is recorded in a state file
(``/run/xtc/libvirtd.json``: pid and kernel start time of each process), so
:meth:`Libvirtd.stop` stops only those processes, also from another process
(e.g. a later test session), and never a recycled pid.  Processes that use the
daemon take a shared *lease* (a shared ``flock``); :meth:`Libvirtd.stop_if_unused`
stops the daemon only when nobody else holds a lease and no domain is running.

All errors of this outside system are raised as :class:`LibvirtdError` with the
reason and, when a start failed, the tail of the daemon's log.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xtc_lab.lab.cgroups import hybrid_cgroup2_mount

DEFAULT_URI = "lxc:///"
LAB_URIS = ("lxc:///", "qemu:///system")  # one libvirtd serves the lab's LXC and QEMU VRs
QEMU_USER = "libvirt-qemu"
KVM_GROUP = "kvm"  # its member may open /dev/kvm (Debian: root:kvm 0660)


class LibvirtdError(RuntimeError):
    """libvirtd or virtlogd could not be started, reached or stopped."""


@dataclass(frozen=True)
class LibvirtdPaths:
    """Every file system path the adapter touches (injectable for tests)."""

    libvirtd: Path = Path("/usr/sbin/libvirtd")
    virtlogd: Path = Path("/usr/sbin/virtlogd")
    run_dir: Path = Path("/run/libvirt")
    log_dir: Path = Path("/var/log/libvirt")
    state_dir: Path = Path("/run/xtc")
    mountinfo: Path = Path("/proc/self/mountinfo")
    proc: Path = Path("/proc")

    @property
    def virtlogd_socket(self) -> Path:
        return self.run_dir / "virtlogd-sock"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "libvirtd.json"

    @property
    def start_lock(self) -> Path:
        return self.state_dir / "libvirtd.lock"

    @property
    def lease_lock(self) -> Path:
        return self.state_dir / "libvirtd.users"


def process_start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Kernel start time of ``pid`` (field 22 of /proc/<pid>/stat, clock ticks since boot).

    None if there is no such process or it has exited (a zombie).  A process whose main thread
    has exited while other threads still run (libvirtd shutting down after SIGTERM shows this for
    seconds) is still running: its leader reads as a zombie but its task list has other threads.
    (pid, start time) names one process for good, where a pid alone may be reused.
    """
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        try:
            if len(os.listdir(proc / str(pid) / "task")) <= 1:
                return None
        except OSError:
            return None
    return int(fields[19])


def _default_probe(uri: str) -> str | None:
    """Try to open ``uri``; return None on success, else libvirt's error message."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors are raised, not printed
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as e:
        return str(e)
    try:
        conn.getVersion()
    except libvirt.libvirtError as e:
        return str(e)
    finally:
        conn.close()
    return None


def _default_active_domains(uri: str) -> int:
    import libvirt

    conn = libvirt.open(uri)
    try:
        return len(conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE))
    finally:
        conn.close()


class Libvirtd:
    """One libvirtd (and its virtlogd) serving ``uri``; see the module docstring.

    Parameters
    ----------
    uri
        The connection to wait for (default ``lxc:///``).
    paths
        Binaries, directories and state files.
    probe
        ``probe(uri) -> None | error message``; default opens the URI with libvirt-python.
    start_timeout_s
        How long to wait for a started daemon to accept connections.
    """

    def __init__(
        self,
        uri: str = DEFAULT_URI,
        paths: LibvirtdPaths | None = None,
        probe: Callable[[str], str | None] = _default_probe,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.uri = uri
        self.paths = paths or LibvirtdPaths()
        self._probe = probe
        self.start_timeout_s = start_timeout_s
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lease_fd: int | None = None

    # ------------------------------------------------------------------ queries
    def reachable(self) -> str | None:
        """Return None when ``uri`` accepts a connection, else the reason it does not."""
        return self._probe(self.uri)

    def started_here(self) -> dict[str, dict[str, int]]:
        """The processes recorded as started by this module that are still alive."""
        return {name: rec for name, rec in self._read_state().items() if self._alive(rec)}

    # ------------------------------------------------------------------ actions
    def ensure_running(self) -> bool:
        """Make sure ``uri`` accepts connections; start virtlogd/libvirtd if needed.

        Returns
        -------
        bool
            True if a daemon was started by this call, False if a running one was reused.

        Raises
        ------
        LibvirtdError
            The daemon is running but refuses ``uri``, or it could not be started in time.
        """
        if self.reachable() is None:
            return False
        with self._locked(self.paths.start_lock):
            reason = self.reachable()  # another process may have started it meanwhile
            if reason is None:
                return False
            other = self._foreign_libvirtd_pid()
            if other is not None:
                raise LibvirtdError(
                    f"a libvirtd (pid {other}) is running but {self.uri} does not accept "
                    f"connections: {reason}. Not touching a daemon this lab did not start; "
                    "stop it or fix its configuration (LXC driver: libvirt-daemon-driver-lxc)."
                )
            self._prepare_host()
            state = self._read_state()
            if not self._virtlogd_up():
                state["virtlogd"] = self._spawn_virtlogd()
                self._write_state(state)
            state["libvirtd"] = self._spawn_libvirtd()
            self._write_state(state)
            self._wait_reachable(state["libvirtd"])
            return True

    def stop(self, timeout_s: float = 15.0) -> list[str]:
        """Stop the libvirtd and virtlogd that this module started (and only those).

        Returns
        -------
        list of str
            Names of the processes that were stopped (empty if there was nothing of ours).
        """
        stopped: list[str] = []
        with self._locked(self.paths.start_lock):
            state = self._read_state()
            for name in ("libvirtd", "virtlogd"):  # libvirtd first: it uses virtlogd
                rec = state.pop(name, None)
                if rec and self._alive(rec):
                    self._terminate(rec, timeout_s)
                    stopped.append(name)
            self._write_state(state)
        return stopped

    def restart(self) -> None:
        """Stop what this module started, then start again and wait for ``uri``.

        Raises
        ------
        LibvirtdError
            If the running daemon was not started by this module (it is left alone).
        """
        if "libvirtd" not in self.started_here() and self.reachable() is None:
            raise LibvirtdError("the running libvirtd was not started by the XTC lab; not restarting it")
        self.stop()
        self.ensure_running()

    @contextlib.contextmanager
    def lease(self) -> Iterator[Libvirtd]:
        """Hold a shared claim on the daemon while using it (ensures it is running)."""
        self.paths.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.paths.lease_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            self.ensure_running()
            yield self
        finally:
            os.close(fd)  # releases the shared lock

    def stop_if_unused(self, active_domains: Callable[[str], int] = _default_active_domains) -> list[str]:
        """Stop what this module started if no lease is held and no domain is running.

        Returns the names of the stopped processes (empty if the daemon was left running).
        """
        if not self.started_here():
            return []
        self.paths.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.paths.lease_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []  # another process holds a lease
            try:
                if self.reachable() is None and active_domains(self.uri) > 0:
                    return []
            except Exception:  # noqa: BLE001 - the daemon is unusable anyway; stop it
                pass
            for other in LAB_URIS:  # the same daemon runs the lab's LXC and QEMU domains
                if other == self.uri:
                    continue
                try:
                    if active_domains(other) > 0:
                        return []
                except Exception:  # noqa: BLE001 - that driver is not served: nothing of it runs
                    pass
            return self.stop()
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ internals
    def _prepare_host(self) -> None:
        for d in (self.paths.run_dir, self.paths.log_dir, self.paths.state_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._ensure_qemu_user()

    @staticmethod
    def _ensure_qemu_user() -> None:
        import grp
        import pwd

        cmds: list[list[str]] = []
        try:
            grp.getgrnam(QEMU_USER)
        except KeyError:
            cmds.append(["groupadd", "--system", QEMU_USER])
        try:
            pwd.getpwnam(QEMU_USER)
        except KeyError:
            cmds.append(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/var/lib/libvirt",
                 "--shell", "/usr/sbin/nologin", "--gid", QEMU_USER, QEMU_USER]
            )
        try:
            kvm = grp.getgrnam(KVM_GROUP)
        except KeyError:
            kvm = None
        if kvm is not None and QEMU_USER not in kvm.gr_mem:
            cmds.append(["usermod", "--append", "--groups", KVM_GROUP, QEMU_USER])
        for cmd in cmds:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            # exit 9: created by someone else meanwhile
            if proc.returncode not in (0, 9):
                raise LibvirtdError(f"cannot create {QEMU_USER} ({' '.join(cmd)}): {proc.stderr.strip()}")

    def _virtlogd_up(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.paths.virtlogd_socket))
            return True
        except OSError:
            return False
        finally:
            s.close()

    def _spawn(self, argv: list[str], log_name: str) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
        log = self.paths.log_dir / log_name
        with open(log, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} xtc lab: {' '.join(argv)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True,
                )
            except OSError as e:
                raise LibvirtdError(f"cannot run {argv[0]}: {e}") from e
        self._children[proc.pid] = proc
        start = self._start_time(proc.pid)
        return proc, {"pid": proc.pid, "start": start if start is not None else -1}

    def _spawn_virtlogd(self) -> dict[str, int]:
        proc, rec = self._spawn([str(self.paths.virtlogd)], "xtc-virtlogd.log")
        deadline = time.monotonic() + self.start_timeout_s
        while not self._virtlogd_up():
            if proc.poll() is not None:
                raise LibvirtdError(
                    f"virtlogd exited with status {proc.returncode}:\n{self._log_tail('xtc-virtlogd.log')}"
                )
            if time.monotonic() > deadline:
                self._terminate(rec, 5.0)
                raise LibvirtdError(f"virtlogd did not open {self.paths.virtlogd_socket} in time")
            time.sleep(0.05)
        return rec

    def _spawn_libvirtd(self) -> dict[str, int]:
        hybrid = hybrid_cgroup2_mount(self.paths.mountinfo.read_text())
        # unshare and sh both exec, so the pid we get is libvirtd's own.
        script = 'umount "$1" || exit 97; exec "$2"' if hybrid else 'exec "$2"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                "xtc-libvirtd", hybrid or "", str(self.paths.libvirtd)]
        _, rec = self._spawn(argv, "xtc-libvirtd.log")
        return rec

    def _wait_reachable(self, rec: dict[str, int]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        reason = self.reachable()
        while reason is not None:
            proc = self._children.get(rec["pid"])
            if proc is not None and proc.poll() is not None:
                what = ("could not unmount the hybrid cgroup2 tree in its mount namespace"
                        if proc.returncode == 97 else f"exited with status {proc.returncode}")
                raise LibvirtdError(f"libvirtd {what}:\n{self._log_tail('xtc-libvirtd.log')}")
            if time.monotonic() > deadline:
                self._terminate(rec, 5.0)
                raise LibvirtdError(
                    f"libvirtd did not accept {self.uri} within {self.start_timeout_s:.0f} s "
                    f"({reason}):\n{self._log_tail('xtc-libvirtd.log')}"
                )
            time.sleep(0.1)
            reason = self.reachable()

    def _log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = (self.paths.log_dir / name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _foreign_libvirtd_pid(self) -> int | None:
        """Pid of a live libvirtd that this module did not start, if any."""
        ours = {rec["pid"] for rec in self.started_here().values()}
        for entry in self.paths.proc.iterdir():
            if not entry.name.isdigit() or int(entry.name) in ours:
                continue
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if comm == "libvirtd" and self._start_time(int(entry.name)) is not None:  # not one that has exited
                return int(entry.name)
        return None

    def _start_time(self, pid: int) -> int | None:
        return process_start_time(pid, self.paths.proc)

    def _alive(self, rec: dict[str, int]) -> bool:
        return self._start_time(rec["pid"]) == rec["start"]

    def _terminate(self, rec: dict[str, int], timeout_s: float) -> None:
        pid = rec["pid"]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self._alive(rec):
                break
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout_s
            while self._alive(rec) and time.monotonic() < deadline:
                time.sleep(0.05)
        child = self._children.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=timeout_s)
        if self._alive(rec):
            raise LibvirtdError(f"process {pid} did not stop")

    def _read_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.paths.state_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: dict[str, Any]) -> None:
        self.paths.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.paths.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.paths.state_file)

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    break
                except OSError as e:
                    if e.errno != errno.EINTR:
                        raise
            yield
        finally:
            os.close(fd)
