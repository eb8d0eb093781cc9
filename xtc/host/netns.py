"""Making sockets inside a named network namespace (``/run/netns/<name>``), for the counter
readers (:mod:`xtc.host.counters`, :mod:`xtc.host.procnetdev`: :class:`Netns`, which also tells
when the name has come to mean another namespace) and the netlink adapter (:mod:`xtc.host.netlink`).

A helper thread enters the namespace, calls the factory and exits, so no thread of the process
stays in it; a socket made there stays bound to that namespace.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from xtc.host.errors import CounterError, CounterReadError

__all__ = ["NETNS_DIR", "Netns", "NetnsOpenError", "run_in_netns", "setns_net"]

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


class Netns:
    """A named network namespace: where it is, whether it is still the same one, and
    how to create things inside it."""

    def __init__(self, name: str, source: str, run_dir: str = NETNS_DIR) -> None:
        if not name or "/" in name or name in (".", ".."):
            raise CounterReadError(source, name, "not a network namespace name")
        self.name = name
        self.source = source
        self.path = os.path.join(run_dir, name)
        self.identity: tuple[int, int] | None = None

    def _stat(self) -> tuple[int, int]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise CounterReadError(
                self.source, self.name, f"no such network namespace ({self.path} does not exist)", errno.ENOENT
            ) from None
        except OSError as e:
            raise CounterReadError(self.source, self.name, f"cannot stat {self.path}: {e}", e.errno) from None
        return st.st_dev, st.st_ino

    def changed(self) -> bool:
        """True when the name now refers to another namespace than at the last :meth:`run`.

        Raises :class:`CounterReadError` when the namespace is gone.
        """
        return self._stat() != self.identity

    def run(self, factory: Callable[[], _T]) -> _T:
        """Call ``factory`` in a helper thread that has entered the namespace; return its result.

        The thread exits right after, so no thread of the process stays in the
        namespace; sockets and files made by ``factory`` stay bound to it.
        """
        try:
            result, self.identity = run_in_netns(self.path, factory, f"xtc-netns-{self.name}")
        except NetnsOpenError as e:
            if e.errno == errno.ENOENT:
                raise CounterReadError(
                    self.source, self.name, f"no such network namespace ({self.path} does not exist)", e.errno
                ) from None
            raise CounterReadError(self.source, self.name, f"cannot open inside the namespace: {e}", e.errno) from None
        except CounterError:
            raise
        except OSError as e:
            raise CounterReadError(self.source, self.name, f"cannot open inside the namespace: {e}", e.errno) from None
        return result
