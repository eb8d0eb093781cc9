"""What the daemon's process sets up around its loop (glibc's large blocks: :mod:`xtc.service.heap`):
the ``ipc://`` socket files of the manager API (their directory, group and mode; a socket in
use refused).  :mod:`xtc.daemon.service` calls these before and while it binds."""

from __future__ import annotations

import errno
import grp
import os
import socket
import stat
from pathlib import Path

__all__ = ["give_socket_group", "prepare_ipc"]

#: The group whose members may connect to the manager API's ipc:// sockets (root always can).
SOCKET_GROUP = "xtc"
#: The modes of an ipc:// socket and of the directory made for it, with that group and without.
SOCKET_MODE, SOCKET_MODE_NO_GROUP = 0o660, 0o600
SOCKET_DIR_MODE, SOCKET_DIR_MODE_NO_GROUP = 0o750, 0o700


def _ipc_path(endpoint: str) -> Path | None:
    """The file of an ``ipc://`` endpoint (None: another transport, or an abstract socket)."""
    if not endpoint.startswith("ipc://") or endpoint.startswith("ipc://@") or endpoint == "ipc://*":
        return None
    return Path(endpoint[len("ipc://"):])


def _socket_group() -> int | None:
    """The ``xtc`` group's id, or None when the host has no such group."""
    try:
        return grp.getgrnam(SOCKET_GROUP).gr_gid
    except KeyError:
        return None


def _give_group(path: Path, gid: int | None, with_group: int, without: int) -> None:
    """``path`` to the ``xtc`` group with mode ``with_group``, or ``without`` (owner only) when that
    group does not exist or this process may not give it (a user who is not a member)."""
    if gid is not None:
        try:
            os.chown(path, -1, gid)
            os.chmod(path, with_group)
            return
        except PermissionError:
            pass
    os.chmod(path, without)


def prepare_ipc(key: str, endpoint: str) -> Path | None:
    """Before binding an ``ipc://`` endpoint: its directory made if missing (0750, group ``xtc``;
    0700 without that group), and refused when a program listens on it or it is not a socket
    (libzmq would unlink and replace either).  Returns the socket's path (None: not a path ipc://).

    Raises
    ------
    SystemExit
        One line naming the key, the endpoint and the problem.
    """
    path = _ipc_path(endpoint)
    if path is None:
        return None
    where = f"{key} {endpoint}"
    parent = path.parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True, mode=0o700)
            _give_group(parent, _socket_group(), SOCKET_DIR_MODE, SOCKET_DIR_MODE_NO_GROUP)
        except OSError as e:
            raise SystemExit(f"xtc daemon: cannot create directory {parent} for {where}: {e.strerror or e}"
                             + (" (run as root, or set [manager] endpoint and pub_endpoint to ipc:// paths this user "
                                "may write, as packaging/xtc-daemon-sim.toml does)" if e.errno in (errno.EACCES, errno.EPERM,
                                                                                                 errno.EROFS) else "")
                             ) from None
    try:
        st = path.lstat()
    except FileNotFoundError:
        return path
    except OSError as e:
        raise SystemExit(f"xtc daemon: cannot bind {where}: {e.strerror or e}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise SystemExit(f"xtc daemon: cannot bind {where}: {path} exists and is not a socket (not removing it)")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except OSError:
        return path  # nobody listens: a stale socket of a daemon that died, which libzmq replaces
    finally:
        probe.close()
    raise SystemExit(f"xtc daemon: cannot bind {where}: another daemon or program is listening there")


def give_socket_group(path: Path) -> None:
    """A bound ``ipc://`` socket file to the ``xtc`` group with mode 0660 (0600 without that group)."""
    _give_group(path, _socket_group(), SOCKET_MODE, SOCKET_MODE_NO_GROUP)
