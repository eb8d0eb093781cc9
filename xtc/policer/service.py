"""``xtc policer serve``: the REST API, and the policy engine in a child process.

The engine runs in a process of its own (:mod:`xtc.policer.engine_proc`: the API's requests do not
wait for its work on one interpreter lock), on the same database; with an in-memory database (tests)
it runs in a thread beside uvicorn's event loop.  If it fails unexpectedly the server is told to exit
and the process returns 1, so that its supervisor (systemd) restarts it.  HTTP input is bounded: a request head
over :data:`.httpproto.MAX_HEADER_BYTES` is refused by the HTTP parser (431, :mod:`.httpproto`), a body over
:data:`xtc.policer.api.MAX_BODY_BYTES` by the app; a head that takes longer than
``server.header_timeout_s`` to arrive gets 408 and its connection is closed.  With
``server.tls_certificate_file`` and ``server.tls_key_file`` it serves HTTPS only; without them plain
HTTP, on a loopback address only unless ``server.allow_plain_http`` (checked at start too: ``--host``
may have changed the address).  SIGTERM and SIGINT are uvicorn's: it stops serving, then the engine stops and the database is closed.

With ``workers`` > 1 (``--workers N``, ``server.workers``) the process becomes a supervisor: it starts
the engine's process (``engine.shards`` of them, :class:`~xtc.policer.engine_proc.EngineShards`), then N API worker processes (``python -m xtc.policer.service``), each with
its own store on the same database (so a write through one is read through every other) and its own
listening socket on the same port with ``SO_REUSEPORT`` (the kernel spreads the connections over
them).  The supervisor serves no HTTP; it relays the engine's reports to the workers (for
``/health`` and ``/metrics``) on their stdin, which they read until end of file: a worker whose
supervisor is gone (even SIGKILLed) stops.  SIGTERM or SIGINT to the supervisor stops the workers
(SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`), then the engine; a worker or the engine that
ends by itself stops the rest and the supervisor returns 1.

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
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from typing import Any, Callable

import uvicorn

from xtc.service.cli import load_or_report
from xtc.service.logs import setup_logging

from .api import create_app
from .config import PolicerConfigError, PolicerConfig, check_transport, server_ssl_context
from .engine import Engine
from .link import LinkPool
from .liveshare import LiveReader
from .samples import SampleStreams
from .engine_proc import REPORT_S, EngineProcess, EngineShards
from .httpproto import bounded_protocol
from .store import Store, StoreError
from xtc.service.asgi import NotifyingServer
from xtc.service.notify import Notifier
from xtc.service.signals import StopOnSignal

__all__ = ["run_server", "bind_socket", "RelayedEngine", "STOP_TIMEOUT_S"]

log = logging.getLogger("xtc.policer")

#: Seconds a worker has to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0


def bind_socket(host: str, port: int, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A listening TCP socket (port 0 = an ephemeral port, see ``getsockname()``).

    ``reuse_port``: with ``SO_REUSEPORT``, so that other processes' sockets may listen on the same port
    (the kernel then spreads new connections over them); ``listen=False``: bound only (it holds the
    port and takes no connection).
    """
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections (it checks proto);
    # without it every small response waits for the client's delayed ACK (about 40 ms).
    s = socket.socket(fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.bind((host, port))
    if listen:
        s.listen(2048)
    s.set_inheritable(True)
    return s


def _event_loop() -> str:
    """uvicorn's event loop: uvloop (the policer extra's) when it imports, else asyncio's own, said once
    in the log (it serves the same, at more CPU per request: docs/design/policer-api.md)."""
    try:
        import uvloop  # noqa: F401 - a third-party module, imported only to see that it is there
    except ImportError as e:
        log.warning("uvloop is not installed (%s): serving on asyncio's own event loop, at more CPU per request"
                    " (pip install uvloop, or the policer extra)", e)
        return "asyncio"
    return "uvloop"


def _uvicorn(app: Any, access_log: bool, cfg: PolicerConfig) -> uvicorn.Server:
    # httptools with the request head bounded (MAX_HEADER_BYTES, header_timeout_s): a fifth less CPU per
    # request than h11; on uvloop (_event_loop).  TLS: the context checked by the configuration
    # (server_ssl_context), not uvicorn's.
    ssl_factory = None
    if cfg.tls_certificate_file is not None and cfg.tls_key_file is not None:
        ctx = server_ssl_context(cfg.tls_certificate_file, cfg.tls_key_file)
        ssl_factory = lambda _config, _default: ctx  # noqa: E731
    # log_config=None: uvicorn's records go to the root logger's structured handler (setup_logging),
    # not to uvicorn's own plain-text handlers.
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=access_log, lifespan="on",
                            http=bounded_protocol(cfg.header_timeout_s), loop=_event_loop(),
                            ssl_context_factory=ssl_factory)
    if access_log:  # uvicorn sets its access logger to log_level, which would drop every record
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    return uvicorn.Server(config)


def _engine_settings(cfg: PolicerConfig, store: Store) -> dict[str, Any]:
    holder = f"{socket.gethostname()}:{os.getpid()}"
    return {"db_url": cfg.db_url, "period_s": cfg.period_s, "request_timeout_s": cfg.request_timeout_s,
            "curve_secret_key_file": cfg.curve_secret_key_file,
            "max_reply_bytes": cfg.max_reply_bytes, "max_vrs_per_router": cfg.max_vrs_per_router,
            "samples": cfg.samples, "sample_link": cfg.sample_link, "sample_schema": cfg.sample_schema, "sample_udp": cfg.sample_udp, "link_transport": cfg.link_transport, "snapshot_interval_s": cfg.snapshot_interval_s, "holder": holder, "leader_election": store.dialect == "postgresql",
            "log_format": cfg.log_format, "log_level": cfg.log_level}


def _live_dir() -> str:
    """A private directory (0700) for the engines' live values (:mod:`.liveshare`): in ``/dev/shm`` (memory)
    when there is one, else in the temporary directory."""
    shm = "/dev/shm"
    return tempfile.mkdtemp(prefix="xtc-policer-live-", dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)


def _engine_procs(cfg: PolicerConfig, store: Store, on_crash: Callable[[BaseException], None],
                  live_dir: str | None = None) -> Any:
    """The engine's process, or ``engine.shards`` of them (:class:`EngineShards`), publishing their live
    values in ``live_dir``."""
    settings = {**_engine_settings(cfg, store), "live_dir": live_dir}
    return EngineProcess(settings, on_crash) if cfg.shards == 1 else EngineShards(settings, cfg.shards, on_crash)


def _listening(cfg: PolicerConfig, store: Store, port: int, host: str, workers: int) -> None:
    scheme = "https" if cfg.tls_certificate_file else "http"
    shown = f"[{host}]" if ":" in host else host
    print(json.dumps({"event": "listening", "url": f"{scheme}://{shown}:{port}", "port": port,
                      "db": store.dialect if store.dialect != "sqlite" else cfg.db_url, "tokens": len(cfg.tokens),
                      "leader_election": store.dialect == "postgresql", "workers": workers}), flush=True)


def run_server(cfg: PolicerConfig, access_log: bool = False) -> int:
    """Serve until SIGTERM.  Prints one JSON line with the bound address first.  Returns the exit code."""
    setup_logging(cfg.log_format, cfg.log_level)
    try:  # (again: --host may have changed the address, and the files may have changed since)
        check_transport(cfg)
    except PolicerConfigError as e:
        print(f"xtc policer: {e}", file=sys.stderr)
        return 2
    store = load_or_report(lambda: Store(cfg.db_url), StoreError, "xtc policer")
    if store is None:
        return 2
    if not cfg.tokens:
        log.warning("no bearer tokens configured: every write will be refused (401)")
    if cfg.shards > 1 and store.path == ":memory:":
        store.close()
        print("xtc policer: 'engine.shards': more than one engine process needs a database file or PostgreSQL "
              "(an in-memory database is one process's alone)", file=sys.stderr)
        return 2
    if cfg.workers > 1:
        if store.path == ":memory:":
            store.close()
            print("xtc policer: 'server.workers': more than one worker needs a database file or PostgreSQL "
                  "(an in-memory database is one process's alone)", file=sys.stderr)
            return 2
        return _supervise(cfg, store, access_log)
    server: dict[str, Any] = {}
    failed: list[BaseException] = []

    def on_crash(e: BaseException) -> None:
        failed.append(e)
        srv = server.get("srv")
        if srv is not None:
            srv.should_exit = True

    notifier = Notifier.from_environ()  # before the engine's process starts: it must not inherit it
    engine: Any
    live_dir = None
    if store.path != ":memory:":  # the engine (and on PostgreSQL the leader lock) in a process of its own
        live_dir = _live_dir()
        store.live_source = LiveReader(live_dir)
        engine = _engine_procs(cfg, store, on_crash, live_dir)
    else:  # an in-memory database is this process's alone: the engine runs in a thread beside the API
        links = LinkPool(cfg.request_timeout_s, cfg.curve_secret_key_file, max_reply_bytes=cfg.max_reply_bytes,
                         sample_schema=cfg.sample_schema, sample_udp=cfg.sample_udp, transport=cfg.link_transport)
        streams = (SampleStreams(cfg.max_vrs_per_router, cfg.curve_secret_key_file, cfg.max_reply_bytes,
                                 links=links if cfg.sample_link else None) if cfg.samples else None)
        engine = Engine(store, links, period_s=cfg.period_s, on_crash=on_crash,
                        max_vrs_per_router=cfg.max_vrs_per_router, samples=streams)
    app = create_app(cfg, store, engine)
    sock = bind_socket(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    _listening(cfg, store, port, host, 1)
    srv = _uvicorn(app, access_log, cfg)
    server["srv"] = srv
    # The same server, telling systemd: READY=1 once it serves, WATCHDOG=1 from its loop.
    srv = server["srv"] = NotifyingServer(srv.config, notifier, f"serving the REST API on {host}:{port}")
    try:
        srv.run(sockets=[sock])
    finally:
        store.close()
        if live_dir is not None:
            shutil.rmtree(live_dir, ignore_errors=True)
    return 1 if failed else 0


# ------------------------------------------------------------------------------ several workers

#: The engine's attributes the API reads (``/health``, ``/metrics``), relayed to the workers.
_RELAYED = ("cycles", "bad_replies", "sampled", "listed", "probed", "shed", "bad_samples", "cycle_s", "cycle_hist", "gap_s",
            "leader_epoch")


class RelayedEngine:
    """A worker's view of the engine that runs in another process: the attributes of an
    :class:`~xtc.policer.engine_proc.EngineProcess`, set from the JSON lines the supervisor writes on
    ``stream`` (every :data:`~xtc.policer.engine_proc.REPORT_S`).  At the end of ``stream`` (the
    supervisor is gone) ``on_eof`` is called."""

    def __init__(self, stream: Any, on_eof: Callable[[], None]):
        self.stream, self.on_eof = stream, on_eof
        self.cycles = self.sampled = self.listed = self.probed = self.shed = self.bad_samples = 0
        self.bad_replies: dict[str, int] = {}
        self.cycle_s: list[float] = []
        self.cycle_hist: dict[str, Any] = {"counts": [], "sum": 0.0}
        self.gap_s: list[float] = []
        self.leader_epoch: int | None = None
        self.shard_states: list[dict[str, Any]] | None = None
        self.error: BaseException | None = None
        self._leads = False
        self._reader: threading.Thread | None = None

    def update(self, rep: dict[str, Any]) -> None:
        for k in _RELAYED:
            setattr(self, k, rep[k])
        self._leads = rep["leader"]
        self.shard_states = rep.get("shards")
        if rep.get("error") and self.error is None:
            self.error = RuntimeError(rep["error"])

    def is_leader(self) -> bool:
        return self._leads

    def start(self) -> None:
        self._reader = threading.Thread(target=self._read, name="policer-engine-relay", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.stream:
            try:
                self.update(json.loads(line))
            except (ValueError, KeyError):
                continue
        self.on_eof()

    def stop(self) -> None:
        pass


def _report(engine: EngineProcess | EngineShards) -> str:
    rep = {k: getattr(engine, k) for k in _RELAYED}
    rep["leader"] = engine.is_leader()
    rep["shards"] = getattr(engine, "shard_states", None)
    rep["error"] = str(engine.error) if engine.error is not None else None
    return json.dumps(rep) + "\n"


def _supervise(cfg: PolicerConfig, store: Store, access_log: bool) -> int:
    """Run the engine's process and ``cfg.workers`` API workers until SIGTERM/SIGINT or a failure."""
    stop = threading.Event()
    failed: list[str] = []

    def on_crash(e: BaseException) -> None:
        failed.append(str(e))
        stop.set()

    signals = StopOnSignal()
    signals.stop_stacks_after_s = STOP_TIMEOUT_S + 2.0  # past the workers' own stop
    signals.stop_event = stop
    signals.install_signal_handlers()
    notifier = Notifier.from_environ()  # the engine and the workers must not inherit it
    live_dir = _live_dir()
    engine = _engine_procs(cfg, store, on_crash, live_dir)
    # Bound, not listening: it holds the port (an ephemeral one is chosen here) and takes no connection.
    hold = bind_socket(cfg.host, cfg.port, reuse_port=True, listen=False)
    host, port = hold.getsockname()[:2]
    _listening(cfg, store, port, host, cfg.workers)
    store.close()
    workers: list[subprocess.Popen] = []
    try:
        engine.start()
        wcfg = {**asdict(cfg), "tokens": sorted(cfg.tokens), "port": port, "access_log": access_log,
                "live_dir": live_dir}
        for _ in range(cfg.workers if not stop.is_set() else 0):
            p = subprocess.Popen([sys.executable, "-m", "xtc.policer.service"], stdin=subprocess.PIPE, text=True,
                                 bufsize=1)
            workers.append(p)
            assert p.stdin is not None
            p.stdin.write(json.dumps(wcfg) + "\n" + _report(engine))
            p.stdin.flush()
        ready = False
        while not stop.wait(REPORT_S):
            notifier.watchdog()
            if not ready and notifier.enabled and _answers(host, port):
                ready = notifier.ready(f"serving the REST API on {host}:{port} with {cfg.workers} workers")
            line = _report(engine)
            for p in workers:
                if p.poll() is not None:
                    failed.append(f"API worker {p.pid} ended (status {p.returncode})")
                    stop.set()
                    continue
                try:
                    assert p.stdin is not None
                    p.stdin.write(line)
                    p.stdin.flush()
                except OSError:
                    pass
    finally:
        notifier.stopping("stopping the workers")
        for p in workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in workers:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            try:
                assert p.stdin is not None
                p.stdin.close()
            except OSError:
                pass
        engine.stop()
        shutil.rmtree(live_dir, ignore_errors=True)
        hold.close()
        signals.restore_signal_handlers()
        signals.stopped()
    for f in failed:
        log.critical("%s", f)
    return 1 if failed else 0


def _answers(host: str, port: int) -> bool:
    """True if a connection to the workers' port is accepted (one of them listens)."""
    try:
        with socket.create_connection((host if host not in ("0.0.0.0", "::") else "localhost", port), timeout=0.2):
            return True
    except OSError:
        return False


def _worker_main() -> int:
    """An API worker (started by :func:`_supervise`): its settings on the first line of stdin, then the
    engine's reports."""
    d = json.loads(sys.stdin.readline())
    access_log = d.pop("access_log")
    live_dir = d.pop("live_dir", None)
    cfg = PolicerConfig(**{**d, "tokens": frozenset(d["tokens"])})
    setup_logging(cfg.log_format, cfg.log_level)
    store = Store(cfg.db_url)
    if live_dir:
        store.live_source = LiveReader(live_dir)
    server: dict[str, Any] = {}

    def on_eof() -> None:
        server["srv"].should_exit = True

    engine = RelayedEngine(sys.stdin, on_eof)
    sock = bind_socket(cfg.host, cfg.port, reuse_port=True)
    srv = _uvicorn(create_app(cfg, store, engine), access_log, cfg)
    server["srv"] = srv
    try:
        srv.run(sockets=[sock])
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
