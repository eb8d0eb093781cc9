"""systemd's readiness and watchdog protocol (``sd_notify(3)``), the one adapter the services use.

Under a ``Type=notify`` unit, systemd passes ``NOTIFY_SOCKET`` (a Unix datagram socket: a path, or
``@name`` for the abstract namespace) and, with ``WatchdogSec=``, ``WATCHDOG_USEC`` (and
``WATCHDOG_PID``).  A service tells systemd it serves (``READY=1``), what it is doing (``STATUS=``),
that it stops (``STOPPING=1``), and that its main loop still turns (``WATCHDOG=1``, at least once
per ``WATCHDOG_USEC``: :meth:`Notifier.watchdog` sends it at half the interval, so a loop that
hangs for longer than the interval is killed by systemd and restarted).

Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op.  The errors of this protocol live
here: a send that fails (systemd gone, a full socket buffer) is counted in :attr:`Notifier.errors`
and logged once, never raised, because a service must not stop serving for want of a status line.
A malformed ``NOTIFY_SOCKET`` or ``WATCHDOG_USEC`` is logged and ignored (notifications off) for the
same reason.

The variables are taken out of the process environment by :meth:`Notifier.from_environ` (as
``sd_notify(unset_environment=1)`` does), so that child processes (the policer's engine and
workers) do not notify in the service's name.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from typing import Callable, MutableMapping

__all__ = ["Notifier"]

log = logging.getLogger("xtc.service")

_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """The service's link to systemd's notification socket.

    Parameters
    ----------
    address : str or None
        ``NOTIFY_SOCKET``: a filesystem path, or ``@name`` for an abstract-namespace socket.
        None: not under systemd (every call is a no-op).
    watchdog_usec : int or None
        ``WATCHDOG_USEC``, microseconds; None or 0: no watchdog.
    clock : callable
        Monotonic time in seconds (injectable for tests).
    """

    def __init__(self, address: str | None, watchdog_usec: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._addr: str | bytes | None = None
        if address:
            if address[0] == "@":
                self._addr = b"\0" + address[1:].encode()
            elif address[0] == "/":
                self._addr = address
            else:
                log.warning("NOTIFY_SOCKET %r is neither a path nor @abstract: systemd notifications off", address)
        #: Seconds between two ``WATCHDOG=1`` (half of ``WATCHDOG_USEC``); None: no watchdog.
        self.watchdog_interval_s: float | None = (
            watchdog_usec / 2e6 if watchdog_usec and self._addr is not None else None)
        self._sock: socket.socket | None = None
        self._next_watchdog_s = -math.inf
        self._status: str | None = None
        #: Notifications that could not be sent.
        self.errors = 0

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None, unset: bool = True,
                     clock: Callable[[], float] = time.monotonic) -> "Notifier":
        """The notifier systemd's variables describe (:data:`os.environ` by default), which are then
        removed from ``environ`` (``unset``) so that child processes do not inherit them.

        ``WATCHDOG_PID`` naming another process (the variables were inherited) turns the watchdog off.
        """
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = env.get("WATCHDOG_USEC")
        if raw:
            try:
                usec = int(raw)
                if usec <= 0:
                    raise ValueError
            except ValueError:
                log.warning("WATCHDOG_USEC %r is not a positive integer: no watchdog", raw)
                usec = None
        pid = env.get("WATCHDOG_PID")
        if usec is not None and pid and pid != str(os.getpid()):
            usec = None  # another process's watchdog
        if unset:
            for k in _ENV:
                env.pop(k, None)
        return cls(address, usec, clock=clock)

    @property
    def enabled(self) -> bool:
        """True under systemd (a notification socket was given)."""
        return self._addr is not None

    def send(self, *fields: str) -> bool:
        """Send one notification of ``KEY=value`` fields.  False if it was not sent (or not under systemd)."""
        if self._addr is None:
            return False
        msg = "\n".join(fields).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(msg, self._addr)
            return True
        except OSError as e:
            if self.errors == 0:
                log.warning("systemd notification %r not sent: %s", fields[0] if fields else "", e)
            self.errors += 1
            return False

    def ready(self, status: str | None = None) -> bool:
        """The service serves: its sockets are bound and its state is loaded.  Feeds the watchdog too."""
        fields = ["READY=1"] + ([f"STATUS={_line(status)}"] if status else [])
        self._status = _line(status) if status else self._status
        if self.watchdog_interval_s is not None:
            fields.append("WATCHDOG=1")
            self._next_watchdog_s = self.clock() + self.watchdog_interval_s
        return self.send(*fields)

    def status(self, text: str) -> bool:
        """A one-line status for ``systemctl status``."""
        self._status = _line(text)
        return self.send(f"STATUS={self._status}")

    def stopping(self, status: str | None = None) -> bool:
        """The service has begun to stop (systemd then waits for it, TimeoutStopSec)."""
        return self.send("STOPPING=1", *([f"STATUS={_line(status)}"] if status else []))

    def watchdog(self, now_s: float | None = None, status: Callable[[], str] | None = None) -> bool:
        """Call from the main loop: sends ``WATCHDOG=1`` when half the interval has passed since the last.

        ``status``: called only then, and its line sent with it (``STATUS=``) when it changed, so
        that ``systemctl status`` follows the service at the watchdog's pace for nothing more.
        True if one was sent.
        """
        if self.watchdog_interval_s is None:
            return False
        now = self.clock() if now_s is None else now_s
        if now < self._next_watchdog_s:
            return False
        self._next_watchdog_s = now + self.watchdog_interval_s
        line = _line(status()) if status is not None else None
        if line is None or line == self._status:
            return self.send("WATCHDOG=1")
        ok = self.send("WATCHDOG=1", f"STATUS={line}")
        if ok:
            self._status = line
        return ok

    def watchdog_due_in_s(self, now_s: float | None = None) -> float:
        """Seconds until the main loop should call :meth:`watchdog` (inf without a watchdog): a loop
        that sleeps longer than this (a long control period) wakes up for it."""
        if self.watchdog_interval_s is None:
            return math.inf
        now = self.clock() if now_s is None else now_s
        return max(0.0, self._next_watchdog_s - now)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _line(text: str) -> str:
    """A status on one line (a newline would start another field)."""
    return " ".join(text.split())[:200]
