"""Signal flags for a service's loop, the same in every XTC service: SIGTERM and SIGINT ask it to
stop at its next wake-up, SIGHUP (where the service reloads) asks it to reload, and a service that
does not stop in time writes every thread's stack (faulthandler) before its supervisor kills it.

Used by the daemon, XCo's controller and agent, and the policer's supervisor.  A handler only sets
flags (and wakes a waiting thread): the service's own loop does the work."""

from __future__ import annotations

import faulthandler
import signal
import threading
from typing import Any

from xtc.service.notify import Notifier

__all__ = ["StopOnSignal"]


class StopOnSignal:
    """SIGTERM and SIGINT set ``stop`` (the service's loop ends at its next wake-up) and ``stop_signal``;
    with ``reload=True``, SIGHUP sets ``reload``.

    A service still running :attr:`stop_stacks_after_s` after the first stop signal writes the
    Python stack of every thread to stderr (its log; :func:`faulthandler.dump_traceback_later`, from
    a C thread, so also when the main thread is stuck in a system call): what it was doing when its
    supervisor had to kill it.  :meth:`stopped` cancels it.

    Used as a base class of a service (XCo's) or as an object of its own (the daemon's ``flags``,
    the policer's supervisor).
    """

    stop: bool = False
    reload: bool = False
    stop_signal: int | None = None
    #: Seconds after SIGTERM/SIGINT before the stacks are written (systemd's and the lab's
    #: SIGKILL come later: 15 s and 5 s).
    stop_stacks_after_s: float = 3.0
    #: systemd's readiness and watchdog (:mod:`xtc.service.notify`): a no-op one unless the
    #: service's ``run_*`` function gives the one from the environment.
    notifier: Notifier = Notifier(None)
    #: Set with ``stop``, for a loop that waits on it instead of polling (the policer's supervisor).
    stop_event: threading.Event | None = None
    _saved_handlers: dict[int, Any] | None = None

    def install_signal_handlers(self, reload: bool = False) -> None:
        """Install the handlers (in the main thread); :meth:`restore_signal_handlers` puts back
        the ones they replaced."""
        def on_stop(signum: int, _frame: Any) -> None:
            if not self.stop:
                faulthandler.dump_traceback_later(self.stop_stacks_after_s, exit=False)
            self.stop = True
            self.stop_signal = signum
            if self.stop_event is not None:
                self.stop_event.set()

        def on_hup(_signum: int, _frame: Any) -> None:
            self.reload = True

        handlers: dict[int, Any] = {signal.SIGTERM: on_stop, signal.SIGINT: on_stop}
        if reload:
            handlers[signal.SIGHUP] = on_hup
        self._saved_handlers = {sig: signal.signal(sig, h) for sig, h in handlers.items()}

    def restore_signal_handlers(self) -> None:
        for sig, h in (self._saved_handlers or {}).items():
            signal.signal(sig, h)
        self._saved_handlers = None

    def stopped(self) -> None:
        """The service has stopped: no stacks to write."""
        faulthandler.cancel_dump_traceback_later()
