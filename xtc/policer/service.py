"""``xtc policer serve``: the REST API, and the policy engine in a child process.

The engine runs in a process of its own (:mod:`xtc.policer.engine_proc`: the API's requests do not
wait for its work on one interpreter lock), on the same database; with an in-memory database (tests)
it runs in a thread beside uvicorn's event loop.  If it fails unexpectedly the server is told to exit
and the process returns 1, so that its supervisor (systemd) restarts it.  HTTP input is bounded: a request head
over :data:`MAX_HEADER_BYTES` is refused by the HTTP parser (h11), a body over
:data:`xtc.policer.app.MAX_BODY_BYTES` by the app.  SIGTERM and SIGINT are uvicorn's: it stops serving, then the engine stops and the database is closed.

On PostgreSQL any number of these processes may serve one database: every one serves the API (and
writes through it), and only the holder of the leader lock (:class:`~xtc.policer.db.LeaderLock`, a
session-level advisory lock, taken by the engine's process) runs the engine's cycles.  A standby
tries for the lock every :data:`~xtc.policer.engine_proc.LEADER_RETRY_S`; the leader checks its lock's
session as often and, if it was lost, exits (status 1) so that no two engines command at once.  On
SQLite the one process always leads.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from typing import Any

import uvicorn

from .app import create_app
from .config import PolicerConfig
from .engine import Engine
from .link import LinkPool
from .samples import SampleStreams
from .engine_proc import EngineProcess
from .store import Store, StoreError

__all__ = ["run_server", "bind_socket"]

log = logging.getLogger("policer")

#: Largest request line plus headers accepted, bytes (a bigger head is refused before it is read on).
MAX_HEADER_BYTES = 16 * 1024


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0 = an ephemeral port, see ``getsockname()``)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections (it checks proto);
    # without it every small response waits for the client's delayed ACK (about 40 ms).
    s = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((host, port))
    s.listen(2048)
    s.set_inheritable(True)
    return s


def run_server(cfg: PolicerConfig, access_log: bool = False) -> int:
    """Serve until SIGTERM.  Prints one JSON line with the bound address first.  Returns the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        store = Store(cfg.db_url)
    except StoreError as e:
        print(f"xtc policer: {e}", file=sys.stderr)
        return 2
    if not cfg.tokens:
        log.warning("no bearer tokens configured: every write will be refused (401)")
    server: dict[str, Any] = {}
    failed: list[BaseException] = []

    def on_crash(e: BaseException) -> None:
        failed.append(e)
        srv = server.get("srv")
        if srv is not None:
            srv.should_exit = True

    holder = f"{socket.gethostname()}:{os.getpid()}"
    engine: Any
    if store.path != ":memory:":  # the engine (and on PostgreSQL the leader lock) in a process of its own
        engine = EngineProcess({"db_url": cfg.db_url, "period_s": cfg.period_s, "request_timeout_s": cfg.request_timeout_s,
                                "curve_secret_key_file": cfg.curve_secret_key_file,
                                "max_reply_bytes": cfg.max_reply_bytes, "max_vrs_per_router": cfg.max_vrs_per_router,
                                "samples": cfg.samples, "holder": holder, "leader_election": store.dialect == "postgresql"}, on_crash)
    else:  # an in-memory database is this process's alone: the engine runs in a thread beside the API
        links = LinkPool(cfg.request_timeout_s, cfg.curve_secret_key_file, max_reply_bytes=cfg.max_reply_bytes)
        streams = (SampleStreams(cfg.max_vrs_per_router, cfg.curve_secret_key_file, cfg.max_reply_bytes)
                   if cfg.samples else None)
        engine = Engine(store, links, period_s=cfg.period_s, on_crash=on_crash,
                        max_vrs_per_router=cfg.max_vrs_per_router, samples=streams)
    app = create_app(cfg, store, engine)
    sock = bind_socket(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    print(json.dumps({"event": "listening", "url": f"http://{host}:{port}", "port": port,
                      "db": store.dialect if store.dialect != "sqlite" else cfg.db_url, "tokens": len(cfg.tokens),
                      "leader_election": store.dialect == "postgresql"}), flush=True)
    # h11 (not httptools): it bounds what it buffers of a request's head (MAX_HEADER_BYTES).
    config = uvicorn.Config(app, log_level="warning", access_log=access_log, lifespan="on", http="h11",
                            h11_max_incomplete_event_size=MAX_HEADER_BYTES)
    if access_log:  # uvicorn sets its access logger to log_level, which would drop every record
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    srv = uvicorn.Server(config)
    server["srv"] = srv
    try:
        srv.run(sockets=[sock])
    finally:
        store.close()
    return 1 if failed else 0
