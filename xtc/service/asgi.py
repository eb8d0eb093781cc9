"""uvicorn's server with systemd's readiness and watchdog (:mod:`xtc.service.notify`).

``READY=1`` is sent once uvicorn's start-up is done: the application's lifespan start-up has run
(the policer's engine started) and the listening sockets are served.  ``WATCHDOG=1`` is fed from
uvicorn's main loop (its tick, every 0.1 s), so an event loop that stops turning is killed by
systemd.  ``STOPPING=1`` when it begins to shut down.  Only the services that serve HTTP import this
module (it needs uvicorn, the ``policer`` extra).
"""

from __future__ import annotations

import socket
import uvicorn

from .notify import Notifier

__all__ = ["NotifyingServer"]


class NotifyingServer(uvicorn.Server):
    """A :class:`uvicorn.Server` that tells systemd when it serves and that its loop turns.

    Parameters
    ----------
    config : uvicorn.Config
    notifier : Notifier
    ready_status : str, optional
        The ``STATUS=`` sent with ``READY=1``.
    """

    def __init__(self, config: uvicorn.Config, notifier: Notifier, ready_status: str | None = None):
        super().__init__(config)
        self.notifier = notifier
        self.ready_status = ready_status

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            self.notifier.ready(self.ready_status)

    async def on_tick(self, counter: int) -> bool:
        self.notifier.watchdog()
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.notifier.stopping("shutting down")
        await super().shutdown(sockets=sockets)
