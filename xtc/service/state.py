"""A service's state file (the daemon's, XCo's controller's): JSON, written atomically (temporary file, fsync, rename, fsync dir).

A reader sees either the old or the new file, never a torn one, so a SIGKILL or a power cut at any
moment leaves a usable state.  The content is :meth:`xtc.daemon.core.DaemonCore.to_state`.

One daemon owns a state directory: :func:`lock_state_dir` takes an exclusive ``flock`` on
``<state_dir>/xtcd.lock`` (holding the owner's pid) for the life of the process, and removes the
temporary files that daemons killed in the middle of a write left behind.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["StateFileError", "save_state", "read_state", "lock_state_dir", "LOCK_FILE"]

#: The lock file of a state directory (holds the owning daemon's pid).
LOCK_FILE = "xtcd.lock"
#: Temporary files of :func:`save_state`: ``.<name>.<pid>.tmp``.
_TMP_RE = re.compile(r"^\..+\.(\d+)\.tmp$")


class StateFileError(OSError):
    """The state file cannot be read, parsed or written (the message names the path)."""


def save_state(path: str | Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` atomically.  Raises :class:`StateFileError`."""
    p = Path(path)
    # Compact: json's C encoder serves only documents without indentation (1000 instances: ~15 ms
    # instead of ~100 ms with indent=1).  Sorted keys: the same document gives the same bytes.
    data = json.dumps(doc, sort_keys=True, allow_nan=False, separators=(",", ":")).encode("utf-8")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise StateFileError(f"cannot write state file {p}: {e.strerror or e}") from None


def read_state(path: str | Path) -> dict[str, Any] | None:
    """The saved document, or None if there is no state file.  Raises :class:`StateFileError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        if p.is_symlink():
            raise StateFileError(f"state file {p} is a symlink to {os.readlink(p)}, which does not exist") from None
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise StateFileError(f"cannot read state file {p}: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise StateFileError(f"state file {p} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise StateFileError(f"state file {p} does not hold a JSON object")
    bad = _first_bad_number(doc, "")
    if bad is not None:
        raise StateFileError(f"state file {p}: {bad}")
    return doc


#: Integers beyond this magnitude are refused in a state file (no field needs them).
_MAX_INT = 2**63


def _first_bad_number(x: Any, where: str) -> str | None:
    """The first non-finite float (NaN, 1e400) or out-of-range integer in ``x``, named by its path."""
    if isinstance(x, float) and not math.isfinite(x):
        return f"field '{where}' must be a finite number, got {x!r}"
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= _MAX_INT:
        return f"field '{where}' is out of range ({str(x)[:20]}...)"
    if isinstance(x, dict):
        for k, v in x.items():
            bad = _first_bad_number(v, f"{where}.{k}" if where else str(k))
            if bad is not None:
                return bad
    elif isinstance(x, list):
        for i, v in enumerate(x):
            bad = _first_bad_number(v, f"{where}[{i}]")
            if bad is not None:
                return bad
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_state_dir(state_dir: str | Path) -> int:
    """Become the one daemon of ``state_dir``; returns the lock's file descriptor (keep it open).

    Takes an exclusive, non-blocking ``flock`` on ``<state_dir>/xtcd.lock`` and writes this
    process's pid into it; the kernel releases the lock when the process ends, however it ends.
    Then removes the temporary files (``.<name>.<pid>.tmp``) of processes that no longer run.

    Parameters
    ----------
    state_dir : path
        The daemon's state directory (created if missing).

    Returns
    -------
    int
        The open lock file; closing it releases the lock.

    Raises
    ------
    StateFileError
        Another process holds the lock (the message names its pid), or the directory cannot be used.
    """
    d = Path(state_dir)
    lock = d / LOCK_FILE
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StateFileError(f"cannot open the lock file {lock}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise StateFileError(f"state directory {d} is in use by another xtc daemon (pid {owner}; lock {lock})") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # e.g. a full disk: the lock holds all the same, only the pid is not shown to others
    for f in d.iterdir():
        m = _TMP_RE.match(f.name)
        if m is not None and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            try:
                f.unlink()
            except OSError:
                pass
    return fd
