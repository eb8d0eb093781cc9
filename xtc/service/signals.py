"""Signal flags for a service's loop: SIGTERM and SIGINT ask it to stop at its next wake-up, and a
service that does not stop in time writes every thread's stack (faulthandler) before its supervisor
kills it.  Used by XCo's controller and agent."""

from __future__ import annotations

import faulthandler
import signal
from typing import Any

from xtc.service.notify import Notifier

__all__ = ["StopOnSignal"]


class StopOnSignal:
    """SIGTERM and SIGINT set ``stop`` (the service's loop ends at its next wake-up) and ``stop_signal``.

    A service still running :attr:`stop_stacks_after_s` after the first of them writes the Python
    stack of every thread to stderr (its log; :func:`faulthandler.dump_traceback_later`, from a C
    thread, so also when the main thread is stuck in a system call): what it was doing when its
    supervisor had to kill it.  :meth:`stopped` cancels it.
    """

    stop: bool = False
    stop_signal: int | None = None
    #: Seconds after SIGTERM/SIGINT before the stacks are written (systemd's and the lab's
    #: SIGKILL come later: 15 s and 5 s).
    stop_stacks_after_s: float = 3.0
    #: systemd's readiness and watchdog (:mod:`xtc.service.notify`): a no-op one unless the
    #: service's ``run_*`` function gives the one from the environment.
    notifier: Notifier = Notifier(None)

    def install_signal_handlers(self) -> None:
        def on_stop(signum: int, _frame: Any) -> None:
            if not self.stop:
                faulthandler.dump_traceback_later(self.stop_stacks_after_s, exit=False)
            self.stop = True
            self.stop_signal = signum

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)

    def stopped(self) -> None:
        """The service has stopped: no stacks to write."""
        faulthandler.cancel_dump_traceback_later()
