"""What the in-process daemon tests share: a settable clock, the configuration text around the
lines a test cares about (state, sockets and nothing else under the test's temporary folder), and a
fake daemon's manager socket for the policer's tests (:class:`RouterPeer`), and the policer's link to
stand-in daemons in this process (:class:`InProcessLinks`)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import zmq


class Clock:
    """A monotonic clock that stands still until the test moves ``t`` (seconds, from 1000)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def daemon_toml(tmp_path: Path | str, daemon: str = "", tables: str = "") -> str:
    """A daemon configuration: its state and manager sockets under ``tmp_path``, metrics off.

    Parameters
    ----------
    tmp_path : Path or str
        Folder of the state directory and of the IPC sockets.
    daemon : str
        More lines of the ``[daemon]`` table (``backend = "sim"``...).
    tables : str
        Tables after the fixed ones (``[[sim.vr]]``...).
    """
    return f"""schema = "xtc-daemon/1"
[daemon]
{daemon}
state_dir = "{tmp_path}/state"
[manager]
endpoint = "ipc://{tmp_path}/m.sock"
pub_endpoint = "ipc://{tmp_path}/p.sock"
[metrics]
enabled = false
{tables}
"""


class RouterPeer:
    """A daemon's manager socket played by a test: a ROUTER bound on loopback (with ``server_secret``,
    a CURVE server), read in a thread; each request, decoded, goes to :meth:`reply`, whose frames
    (None: no answer at all) are sent back to its sender.  Counts :attr:`requests`."""

    def __init__(self, server_secret: bytes | None = None, context: zmq.Context | None = None,
                 port: int | None = None) -> None:
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if server_secret is not None:
            self.sock.curve_server = True
            self.sock.curve_secretkey = server_secret
        if port is None:
            port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        else:
            self.sock.bind(f"tcp://127.0.0.1:{port}")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.port = port
        self.requests = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def reply(self, req: dict[str, Any]) -> list[bytes] | None:
        """The frames that answer ``req`` (None: stay silent)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, empty, body = self.sock.recv_multipart()
            self.requests += 1
            frames = self.reply(json.loads(body))
            if frames is not None:
                self.sock.send_multipart([ident, empty, *frames])

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self.sock.close(0)
        if self._own_ctx:
            self.ctx.term()


class InProcessLinks:
    """Exchanges answered at once by stand-in daemons in this process (a fake of the transport only, for a
    test of the engine's logic: the requests go through the daemon's request parser, the replies through
    the policer's); ``sent`` lists every request as (router, request)."""

    timeout_s = 1.0

    def __init__(self, daemons: dict[str, Any]):
        self.daemons = daemons
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def expect(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass

    def exchange_many(self, exchanges: list[tuple]) -> None:
        from xtc.daemon.api import API_VERSION
        from xtc.policer.link import DaemonRefused, parse_reply

        for name, endpoint, _key, reqs, callback, *_ in exchanges:
            results: list[Any] = []
            for req in reqs:
                self.sent.append((name, req))
                try:
                    raw = self.daemons[name].handle(json.dumps({"v": API_VERSION, **req, "id": len(self.sent)}).encode())
                    results.append(parse_reply(endpoint, raw))
                except DaemonRefused as e:
                    results.append(e)
            callback(name, results)
