"""The policer's side of the ZeroMQ link to the host daemons: the only module that talks to them.

One :class:`DaemonLink` per router: a REQ socket (CURVE client when the router has a server key and
the policer a key pair), replaced after a timeout so that a daemon that comes back is found again.
Errors are sorted here: :class:`LinkDown` (no answer, transport failure, garbled reply) marks the
router unreachable; :class:`DaemonRefused` (the daemon answered ``ok: false``) is a refused command.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import zmq

from xtc.daemon.ctl import ManagerClient, ManagerError

__all__ = ["LinkDown", "DaemonRefused", "DaemonLink", "LinkPool"]


class LinkDown(Exception):
    """The daemon did not answer (or not sensibly)."""


class DaemonRefused(Exception):
    """The daemon answered with an error (``code`` from the manager API)."""

    def __init__(self, code: str, message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class DaemonLink:
    """Requests to one daemon's manager endpoint, over the daemon's own client
    (:class:`xtc.daemon.ctl.ManagerClient`), with its errors sorted for the policer.

    Parameters
    ----------
    endpoint : str
        ZeroMQ endpoint of the daemon's REP socket.
    timeout_s : float
        How long to wait for an answer, seconds.
    curve_secret_file : path or None
        The policer's ``.key_secret`` file (CURVE client keys).
    server_key : str or None
        The daemon's Z85 public key; CURVE is used when it is given.
    """

    def __init__(self, endpoint: str, timeout_s: float, curve_secret_file: str | Path | None = None,
                 server_key: str | None = None, context: zmq.Context | None = None):
        self.endpoint = endpoint
        self.server_key = server_key
        self._client = ManagerClient(endpoint, timeout_s, context, curve_secret_file, server_key)
        self._seq = 0
        self.lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one request; the reply's ``result``.  Raises :class:`LinkDown` or :class:`DaemonRefused`."""
        with self.lock:
            self._seq += 1
            try:
                rep = self._client.request(cmd, id=self._seq, **fields)
            except ManagerError as e:
                raise LinkDown(e.message) from None
            except ValueError:
                raise LinkDown(f"{self.endpoint} sent a reply that is not manager-API JSON") from None
        if not isinstance(rep, dict) or "ok" not in rep:
            raise LinkDown(f"{self.endpoint} sent a reply that is not manager-API JSON")
        if not rep["ok"]:
            err = rep.get("error") or {}
            raise DaemonRefused(str(err.get("code")), str(err.get("message")))
        result = rep.get("result")
        if not isinstance(result, dict):
            raise LinkDown(f"{self.endpoint} sent a reply without a result object")
        return result


class LinkPool:
    """One :class:`DaemonLink` per router, rebuilt when its endpoint or keys change."""

    def __init__(self, timeout_s: float, curve_secret_file: str | Path | None = None,
                 context: zmq.Context | None = None):
        self.timeout_s = timeout_s
        self.curve_secret_file = curve_secret_file
        self.ctx = context or zmq.Context.instance()
        self._links: dict[str, DaemonLink] = {}
        self._lock = threading.Lock()

    def get(self, router: str, endpoint: str, server_key: str | None) -> DaemonLink:
        with self._lock:
            link = self._links.get(router)
            if link is None or link.endpoint != endpoint or link.server_key != server_key:
                if link is not None:
                    link.close()
                link = DaemonLink(endpoint, self.timeout_s, self.curve_secret_file, server_key, self.ctx)
                self._links[router] = link
            return link

    def close(self) -> None:
        with self._lock:
            for link in self._links.values():
                link.close()
            self._links.clear()
