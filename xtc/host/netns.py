"""Making sockets inside a named network namespace (``/run/netns/<name>``), for the counter
readers (:mod:`xtc.host.counters`) and the XCo gate (:mod:`xtc.host.tcgate`).

A helper thread enters the namespace, calls the factory and exits, so no thread of the process
stays in it; a socket made there stays bound to that namespace.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["NETNS_DIR", "NetnsOpenError", "run_in_netns", "setns_net"]

NETNS_DIR = "/run/netns"
_T = TypeVar("_T")


class NetnsOpenError(OSError):
    """The namespace file could not be opened (before anything ran inside it)."""


def setns_net(fd: int) -> None:
    """Move the calling thread into the network namespace open at ``fd``."""
    setns = getattr(os, "setns", None)  # Python >= 3.12
    if setns is not None:
        setns(fd, os.CLONE_NEWNET)  # type: ignore[attr-defined]
        return
    try:
        from pyroute2 import netns as pyroute2_netns
    except ImportError as e:  # pragma: no cover - pyroute2 is a dependency of xtc[net]
        raise OSError(errno.ENOSYS, "setns needs Python >= 3.12 or pyroute2 (pip install xtc[net])") from e
    # An int fd: pyroute2 neither creates nor closes anything (flags=0).
    pyroute2_netns.setns(fd, flags=0)


def run_in_netns(path: str, factory: Callable[[], _T], thread_name: str) -> tuple[_T, tuple[int, int]]:
    """Call ``factory`` in a helper thread that has entered the network namespace at ``path``.

    Returns
    -------
    tuple
        ``factory()``'s result and the namespace's identity ``(st_dev, st_ino)``.

    Raises
    ------
    NetnsOpenError
        ``path`` could not be opened (``errno`` as the kernel gave it: ENOENT, EACCES...).
    BaseException
        Whatever entering the namespace or ``factory`` raised, unchanged.
    """
    result: list[_T] = []
    failure: list[BaseException] = []
    identity: list[tuple[int, int]] = []

    def work() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            failure.append(NetnsOpenError(e.errno, e.strerror, path))
            return
        try:
            st = os.fstat(fd)
            setns_net(fd)
            identity.append((st.st_dev, st.st_ino))
            result.append(factory())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            failure.append(e)
        finally:
            os.close(fd)

    thread = threading.Thread(target=work, name=thread_name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0], identity[0]
