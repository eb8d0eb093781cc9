"""The cgroup cap actuators: v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and v2's
``cpu.max`` (the contract: :mod:`xtc.host.actuators`), with the budget of cgroup file descriptors
that they and the cgroup backend's CPU-time files keep open (:func:`reserve_kept_fd`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from xtc.host.actuator_base import (PERIOD_MAX_US, PERIOD_MIN_US, QUOTA_MIN_US, Params, ActuatorBase,
    check_quota_period_original, on_cfs_period, quota_period_order, quota_period_params, check_cfs_period,
    period_for, quota_for)
from xtc.host.errors import ActuatorError, VRNotRunning


#: errno values that say a kept file descriptor no longer reaches the file (the cgroup was removed,
#: and perhaps made again): the file is opened again, once.
_STALE_FD = frozenset({errno.ENODEV, errno.EBADF, errno.ENOENT, errno.ESTALE})
#: File descriptors the process keeps below its limit (``RLIMIT_NOFILE``) for everything else.
FD_RESERVE = 512


def _fd_budget() -> int:
    """How many cgroup files the actuators may keep open together (the soft fd limit less a reserve)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Unix
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft - FD_RESERVE)


class CgroupFileStale(OSError):
    """A kept cgroup file descriptor failed twice in a row with a 'stale' errno (opened again in between)."""


class _CgroupBase(ActuatorBase):
    #: The file each cap write writes and reads back: kept open (see :meth:`_fd`).
    HOT: str = ""
    #: Cgroup files kept open by all actuators of the process, and the most there may be.
    open_fds = 0
    fd_budget = _fd_budget()

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None, cap_min_percent: float, cap_max_percent: float) -> None:
        self.dir = Path(cgroup_dir)
        super().__init__(vr or str(self.dir), str(self.dir), cap_min_percent, cap_max_percent)
        # File name -> path string, built once: set_cap reads two files and writes one every time
        # the cap changes, for every VR and period.
        self._paths: dict[str, str] = {}
        # The hot file's descriptor, kept open: a write and its read-back are then a pwrite and a
        # pread (about 2 us) instead of two open/close pairs (about 15 us on the cgroup file system).
        self._fd_hot: int | None = None

    def _file(self, name: str) -> Path:
        return self.dir / name

    def _path(self, name: str) -> str:
        p = self._paths.get(name)
        if p is None:
            p = self._paths[name] = str(self.dir / name)
        return p

    def _fd(self) -> int | None:
        """The hot file's kept descriptor, opened now if needed; None: use open/close (over budget,
        or the file cannot be opened for reading and writing, which the plain path will report)."""
        fd = self._fd_hot
        if fd is not None:
            return fd
        if _CgroupBase.open_fds >= _CgroupBase.fd_budget:
            return None
        try:
            fd = os.open(self._path(self.HOT), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        self._fd_hot = fd
        _CgroupBase.open_fds += 1
        return fd

    def close(self) -> None:
        """Close the kept file descriptor (the next read or write opens it again)."""
        fd, self._fd_hot = self._fd_hot, None
        if fd is not None:
            _CgroupBase.open_fds -= 1
            try:
                os.close(fd)
            except OSError:
                pass

    def _on_kept_fd(self, op: Any) -> Any:
        """``op(fd)`` on the hot file's kept descriptor; raises :class:`LookupError` when there is
        none (the caller opens and closes).  A stale descriptor is closed and the file opened again,
        once; a second stale failure raises :class:`CgroupFileStale`."""
        for attempt in (0, 1):
            fd = self._fd()
            if fd is None:
                raise LookupError
            try:
                if os.fstat(fd).st_nlink == 0:
                    # Removed (a plain file; the cgroup file system answers ENODEV instead).
                    raise OSError(errno.ENOENT, "No such file or directory (removed while kept open)")
                return op(fd)
            except OSError as e:
                if e.errno not in _STALE_FD:
                    raise
                self.close()
                if attempt:
                    raise CgroupFileStale(e.errno, f"{e.strerror} (twice, opened again in between)") from None
        raise AssertionError  # pragma: no cover

    def _read_file(self, name: str) -> str:
        p = self._path(name)
        try:
            if name == self.HOT:
                try:
                    return self._on_kept_fd(lambda fd: os.pread(fd, 4096, 0)).decode().strip()
                except LookupError:
                    pass
            # Plain os calls: a cgroup file is a few bytes, and io.open's buffered text layer cost
            # more than the kernel's read.
            fd = os.open(p, os.O_RDONLY)
            try:
                chunks = []
                while True:
                    b = os.read(fd, 4096)
                    if not b:
                        break
                    chunks.append(b)
            finally:
                os.close(fd)
            return b"".join(chunks).decode().strip()
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise VRNotRunning(self.vr, f"cgroup {self.dir} does not exist") from None
            raise ActuatorError(f"{p} does not exist: no cpu controller in cgroup {self.dir}") from None
        except OSError as e:
            raise ActuatorError(f"cannot read {p}: {e.strerror or e}") from None

    def _write_file(self, name: str, value: str) -> None:
        p = self._path(name)
        data = value.encode()
        try:
            if name == self.HOT:
                try:
                    # The whole value in one write at offset 0, then the length set (what O_TRUNC
                    # did; the cgroup file system ignores it, a plain file needs it).
                    self._on_kept_fd(lambda fd: (os.pwrite(fd, data, 0), os.ftruncate(fd, len(data))))
                    return
                except LookupError:
                    pass
            # One write() call: cgroup files take the whole value at once (O_TRUNC as a shell does).
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except FileNotFoundError:
            if not self.dir.is_dir():
                raise VRNotRunning(self.vr, f"cgroup {self.dir} does not exist") from None
            raise ActuatorError(f"{p} does not exist: no cpu controller in cgroup {self.dir}") from None
        except OSError as e:
            hint = " (kernel refused the value)" if e.errno == errno.EINVAL else ""
            raise ActuatorError(f"cannot write {value!r} to {p}: {e.strerror or e}{hint}") from None


def reserve_kept_fd() -> bool:
    """Count one more cgroup file descriptor kept open against the process's budget.

    The budget (:data:`FD_RESERVE` below the soft fd limit) is shared by the actuators' hot files
    and the cgroup backend's CPU-time files (:mod:`xtc.host.cgroup`).  False: the budget is spent,
    open and close the file instead.
    """
    if _CgroupBase.open_fds >= _CgroupBase.fd_budget:
        return False
    _CgroupBase.open_fds += 1
    return True


def release_kept_fd() -> None:
    """Give back a slot taken by :func:`reserve_kept_fd` (the descriptor was closed)."""
    _CgroupBase.open_fds -= 1


#: errno values after which a kept cgroup file descriptor is opened again (see ``_STALE_FD``).
STALE_FD_ERRNOS = _STALE_FD


def _parse_int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ActuatorError(f"{where}: expected an integer, got {text!r}") from None


class CgroupV1Actuator(_CgroupBase):
    """cgroup v1 cpu controller: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``.

    cap_percent = quota / period * 100; quota -1 = no limit.  The period is left
    as found; the original (quota and period) is restored exactly.

    Parameters
    ----------
    cgroup_dir : path
        The VR's cgroup directory, e.g. ``/sys/fs/cgroup/cpu/machine/vr1``.
    vr : str, optional
        VR name for messages (default: the directory).
    """

    backend = "cgroup1"
    QUOTA = "cpu.cfs_quota_us"
    HOT = QUOTA
    PERIOD = "cpu.cfs_period_us"

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None = None, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 cfs_period_us: int = 0) -> None:
        super().__init__(cgroup_dir, vr, cap_min_percent, cap_max_percent)
        self.cfs_period_us = check_cfs_period(cfs_period_us)

    def _read(self) -> Params:
        q = _parse_int(self._read_file(self.QUOTA), self._path(self.QUOTA))
        p = _parse_int(self._read_file(self.PERIOD), self._path(self.PERIOD))
        if p <= 0:
            raise ActuatorError(f"{self._file(self.PERIOD)}: period {p} is not > 0")
        return {self.QUOTA: q, self.PERIOD: p}

    def _read_back(self, known: Params) -> Params:
        if self.cfs_period_us:
            return self._read()  # XTC writes the period too
        # The quota only: the kernel reports the quota it accepted; the period is the one read
        # last (XTC never writes it outside restore).
        return {self.QUOTA: _parse_int(self._read_file(self.QUOTA), self._path(self.QUOTA)),
                self.PERIOD: known[self.PERIOD]}

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        if self.cfs_period_us:
            return on_cfs_period(cap_percent, self.cfs_period_us, current, self.QUOTA, self.PERIOD)
        period = int(current[self.PERIOD])
        return {self.QUOTA: quota_for(cap_percent, period)}

    def _cap_of(self, params: Params) -> float | None:
        q, p = int(params[self.QUOTA]), int(params[self.PERIOD])
        return None if q < 0 else q / p * 100.0

    def _check_original(self, params: Params) -> None:
        check_quota_period_original(params, self.QUOTA, self.PERIOD, "cgroup v1")

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        return quota_period_params(cap_percent, int(current[self.PERIOD]), self.QUOTA, self.PERIOD)

    def _restore_params(self, original: Params, current: Params) -> Params:
        return quota_period_order(super()._restore_params(original, current), current, self.QUOTA, self.PERIOD)

    def _write(self, changes: Params, restoring: bool) -> None:
        if not restoring and (int(changes.get(self.QUOTA, QUOTA_MIN_US)) < QUOTA_MIN_US
                              or not PERIOD_MIN_US <= int(changes.get(self.PERIOD, PERIOD_MIN_US)) <= PERIOD_MAX_US):
            raise ActuatorError(f"refusing to write {changes} to {self.dir} outside restore")
        # In the order given (quota_period_order: the lower cap in between first; restoring
        # "no limit", the quota before the period).
        for k, v in changes.items():
            self._write_file(k, str(int(v)))


class CgroupV2Actuator(_CgroupBase):
    """cgroup v2 cpu controller: ``cpu.max`` = ``"<quota_us> <period_us>"`` or ``"max <period_us>"``.

    cap_percent = quota / period * 100.  XTC writes ``"<quota> <period>"`` with
    the period as found; ``restore()`` writes the original line back verbatim.
    """

    backend = "cgroup2"
    FILE = "cpu.max"
    HOT = FILE

    def __init__(self, cgroup_dir: str | os.PathLike[str], vr: str | None = None, cap_min_percent: float = 1.0, cap_max_percent: float = 100.0,
                 cfs_period_us: int = 0) -> None:
        super().__init__(cgroup_dir, vr, cap_min_percent, cap_max_percent)
        self.cfs_period_us = check_cfs_period(cfs_period_us)

    @staticmethod
    def parse_cpu_max(text: str) -> tuple[int | None, int]:
        """``"max 100000"`` -> (None, 100000); ``"20000 100000"`` -> (20000, 100000)."""
        parts = text.split()
        if len(parts) == 1:
            parts.append("100000")  # the kernel accepts a lone quota; period defaults to 100 ms
        if len(parts) != 2:
            raise ValueError(f"cpu.max must be '<quota|max> <period>', got {text!r}")
        q, p = parts
        try:
            period = int(p)
            quota = None if q == "max" else int(q)
        except ValueError:
            raise ValueError(f"cpu.max must be '<quota|max> <period>', got {text!r}") from None
        if period <= 0 or (quota is not None and quota <= 0):
            raise ValueError(f"cpu.max values must be > 0, got {text!r}")
        return quota, period

    def _read(self) -> Params:
        text = self._read_file(self.FILE)
        try:
            self.parse_cpu_max(text)
        except ValueError as e:
            raise ActuatorError(f"{self._file(self.FILE)}: {e}") from None
        return {self.FILE: " ".join(text.split())}

    def _wanted(self, cap_percent: float, current: Params) -> Params:
        if self.cfs_period_us:
            period = period_for(cap_percent, self.cfs_period_us)  # one write sets both
        else:
            _, period = self.parse_cpu_max(str(current[self.FILE]))
        return {self.FILE: f"{quota_for(cap_percent, period)} {period}"}

    def _cap_of(self, params: Params) -> float | None:
        quota, period = self.parse_cpu_max(str(params[self.FILE]))
        return None if quota is None else quota / period * 100.0

    def _check_original(self, params: Params) -> None:
        v = params.get(self.FILE)
        if set(params) != {self.FILE} or not isinstance(v, str):
            raise ValueError(f"cgroup v2 original must be {{'cpu.max': str}}, got {params}")
        self.parse_cpu_max(v)

    def _original_params_for(self, cap_percent: float | None, current: Params) -> Params:
        _, period = self.parse_cpu_max(str(current[self.FILE]))
        if cap_percent is None:
            return {self.FILE: f"max {period}"}
        return {self.FILE: f"{quota_for(cap_percent, period)} {period}"}

    def _write(self, changes: Params, restoring: bool) -> None:
        line = str(changes[self.FILE])
        quota, _ = self.parse_cpu_max(line)
        if not restoring and (quota is None or quota < QUOTA_MIN_US):
            raise ActuatorError(f"refusing to write cpu.max {line!r} to {self.dir} outside restore")
        self._write_file(self.FILE, line)

