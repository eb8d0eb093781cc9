"""A bounded load test of the REST API on loopback: ``xtc policer bench`` (the testbed adds it to
``xtc policer`` through the ``xtc.policer_commands`` entry point: :func:`register`).

Starts a throw-away policer (``xtc policer serve`` in a child process, a temporary SQLite file, an
ephemeral port, one generated token), seeds it (networks with SLAs, routers whose daemons do not
exist and are therefore polled and marked unreachable, as in a real outage), then offers requests
open-loop at ``rate_per_s`` for ``duration_s`` seconds with at most ``concurrency`` in flight: a mix
of reads (lists of routers, VRs, networks, one network, the audit log) and writes (SLA changes,
router capacity changes, new networks).  Latency is measured per request from the moment it is
sent.  Returns (and the CLI prints) JSON: requests/s achieved, latency percentiles in milliseconds,
errors and status counts.

Why one file: ``xtc policer bench`` is one command, whose two modes (the API alone; the API while the
engine polices a stand-in fleet, ``--fleet``) share the throw-away policer's start, the load
generator, the seed and the CPU accounting of the policer's processes; the throw-away PostgreSQL
server serves only them.  The parts with a job of their own live apart: the stand-in fleet
(:mod:`xtc_lab.policer_fleet`), the API goals' arithmetic (:mod:`xtc_lab.policer_api_goals`), the
before/after comparison (:mod:`xtc_lab.policer_compare`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import numpy as np

import xtc
from xtc.policer.engine import percentiles
from xtc.policer.link import tcp_sockets, tcp_states
from xtc_lab.policer_api_goals import api_figures, api_goals, latency_by_kind, latency_by_phase, latency_p99_by_second
from xtc_lab.policer_fleet import add_policer_arguments
from xtc_lab.procs import stop_process, stop_processes
from xtc_lab.unwind import unwinding

__all__ = ["register", "run_bench", "run_fleet_bench", "run_fleet_bench_on", "start_policer", "policer_log", "PAGE",
           "PgServer", "BenchConn", "seed_policer"]

#: Items per page of the lists the load test reads (``/routers``, ``/vrs``), as an operator's screen pages them.
PAGE = 100


@unwinding
def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench`` to ``xtc policer``'s actions (entry point group ``xtc.policer_commands``)."""
    s = sub.add_parser("bench", help="load test against a throw-away policer on loopback (prints JSON)",
                       epilog="example: xtc policer bench --rate 500 --duration 5")
    s.add_argument("--rate", type=float, default=500.0, help="requests/s to offer (default 500)")
    s.add_argument("--duration", type=float, default=5.0,
                   help="seconds (default 5); with --fleet, of policing measured before the API's load")
    s.add_argument("--concurrency", type=int, default=32, help="requests in flight at most (default 32)")
    s.add_argument("--write-fraction", type=float, default=0.2, help="share of writes (default 0.2)")
    s.add_argument("--workers", type=int, default=1, help="API worker processes of the throw-away policer (default 1)")
    s.add_argument("--json", action="store_true", help="JSON only (the default output is JSON too)")
    s.add_argument("--fleet", type=int, default=0, metavar="ROUTERS",
                   help="police a fleet of this many stand-in daemons (testbed) first, then load the API")
    s.add_argument("--vrs", type=int, default=16, help="VRs per fleet router (default 16)")
    s.add_argument("--dead", type=float, default=0.1, help="share of the fleet's routers that are dead (default 0.1)")
    s.add_argument("--no-samples", dest="samples", action="store_false",
                   help="fleet: measure every router by 'list' (the daemons publish no samples)")
    s.add_argument("--no-sample-link", dest="sample_link", action="store_false",
                   help="fleet: the engine takes the samples on a second connection per router, to the daemon's PUB "
                        "socket (engine.sample_link = false), instead of over the one it keeps to its manager socket")
    s.add_argument("--shards", type=int, default=1, help="fleet: engine processes (engine.shards, default 1)")
    s.add_argument("--snapshot-interval", type=float, default=None, metavar="SECONDS",
                   help="fleet: engine.snapshot_interval_s, seconds between the engine's writes of the measurements "
                        "(default: the policer's, 10 s)")
    s.add_argument("--flapping", type=float, default=0.0,
                   help="fleet: share of the routers that answer 5 s, then fall silent 5 s, over and over, to time "
                        "how soon a router that stops answering is marked (dying_marked_s; default 0; their "
                        "silences count in measure_gap_ms)")
    s.add_argument("--jitter", type=float, default=0.0,
                   help="fleet: the VRs' offered rates are drawn anew every period, base x (1 +- JITTER), so that "
                        "every sample differs from the last as a real VR's do (default 0: steady rates, and the "
                        "same samples but for their time, which the engine records without decoding them again)")
    s.add_argument("--api-duration", type=float, default=5.0, metavar="SECONDS",
                   help="fleet: seconds of API load (at --rate, --concurrency in flight) while the engine polices "
                        "(default 5); the result's api_goals sets issue 50's API goals beside the figures")
    s.add_argument("--api-nice", type=int, default=None, metavar="N",
                   help="fleet: every thread of the API's processes at this nice value during the API's load (as an "
                        "operator's systemd Nice= would set it; negative: a higher priority, as root)")
    s.add_argument("--engine-cpus", default=None, metavar="LIST",
                   help="fleet: every thread of the engine's processes pinned to these CPUs (comma-separated, as "
                        "systemd's CPUAffinity= would) during the API's load")
    s.add_argument("--transport", choices=("ipc", "tcp"), default="ipc",
                   help="fleet: the stand-in daemons' sockets, Unix (ipc, the default) or TCP on 127.0.0.1; with tcp the "
                        "result counts the policer's TCP sockets toward them by state at the end of the policing "
                        "window (fleet_tcp_states: time_wait, established, ...)")
    add_policer_arguments(s, "fleet: ")
    s.add_argument("--postgres", action="store_true",
                   help="fleet: the policer on a throw-away PostgreSQL server (fsync on) of this machine's Debian "
                        "package, started and removed by the bench, instead of SQLite (its CPU is counted)")
    s.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.fleet:
        res = run_fleet_bench_on("pg" if args.postgres else "sqlite", args.fleet, args.vrs, args.dead, args.duration,
                                 args.rate, samples=args.samples, sample_link=args.sample_link, shards=args.shards,
                                 flapping_fraction=args.flapping, snapshot_interval_s=args.snapshot_interval,
                                 jitter=args.jitter, api_duration_s=args.api_duration,
                                 api_concurrency=args.concurrency, workers=args.workers, api_nice=args.api_nice,
                                 transport=args.transport, link_transport=args.link_transport,
                                 engine_cpus=[int(c) for c in args.engine_cpus.split(",")] if args.engine_cpus else None)
        print(json.dumps(res, indent=1))
        return 0
    res = run_bench(rate_per_s=args.rate, duration_s=args.duration, concurrency=args.concurrency,
                    write_fraction=args.write_fraction, workers=args.workers)
    print(json.dumps(res, indent=1))
    return 0 if res["errors"] == 0 else 1


def start_policer(tmpdir: str | Path, token: str, period_s: float = 1.0, extra_env: dict[str, str] | None = None,
                  request_timeout_s: float = 1.0, extra_config: str = "", workers: int = 1) -> tuple[subprocess.Popen, str]:
    """Start ``xtc policer serve`` on an ephemeral loopback port with ``workers`` API processes; returns
    (process, base URL)."""
    tmp = Path(tmpdir)
    cfg = tmp / "policer.toml"
    cfg.write_text(
        'schema = "xtc-policer/1"\n[server]\nhost = "127.0.0.1"\nport = 0\n'
        f"workers = {workers}\n"
        f'[database]\nurl = "sqlite:///{tmp / "policer.db"}"\n'
        f"[engine]\nperiod_s = {period_s}\nrequest_timeout_s = {request_timeout_s}\n" + extra_config
    )
    env = {**os.environ, "XTC_POLICER_TOKENS": token, **(extra_env or {})}
    # Its log (and its engine's) to a file: a pipe nobody reads would block a chatty policer.
    with open(tmp / "policer.log", "ab") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "xtc.cli", "policer", "serve", "-c", str(cfg)],
                                stdout=subprocess.PIPE, stderr=log_file, env=env, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(5)
        raise RuntimeError(f"policer did not start: {policer_log(tmp)}")
    url = json.loads(line)["url"]
    # Readiness, not speed: the workers and shards import the service (FastAPI, numpy, the store)
    # after the supervisor has bound its port, which on a busy 2-core host took more than 10 s (a
    # fresh-clone suite run with other builds beside it).  A policer that died fails at once.
    ready_s = 60.0
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"policer exited with {proc.returncode} before answering /health: {policer_log(tmp)}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError(f"policer did not answer /health within {ready_s:g} s: {policer_log(tmp)}")


def policer_log(tmpdir: str | Path, tail_bytes: int = 2000) -> str:
    """The end of the log of the policer :func:`start_policer` started in ``tmpdir``."""
    try:
        return (Path(tmpdir) / "policer.log").read_bytes()[-tail_bytes:].decode(errors="replace")
    except OSError:
        return ""


async def seed_policer(url: str, token: str) -> None:
    """What the load reads and writes, made at the policer at ``url`` (with ``token``): networks
    ``net0``-``net7`` with SLAs, routers ``r0``-``r3`` whose daemons do not exist (control off)."""
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as c:
        for i in range(8):
            await c.post("/networks", json={"name": f"net{i}"}, headers=auth)
            await c.put(f"/networks/net{i}/sla", json={"min_pps": 1000, "max_pps": 50000, "weight": 1 + i}, headers=auth)
        for i in range(4):
            await c.post("/routers", json={"name": f"r{i}", "endpoint": f"tcp://127.0.0.1:{1 + i}",
                                           "capacity_pps": 100000, "control_mode": "off"}, headers=auth)


class BenchConn:
    """One keep-alive HTTP/1.1 connection (a minimal client: the load generator must cost little CPU)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str] | None) -> int:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port)
        assert self.r is not None
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(data)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        self.w.write(head.encode() + b"\r\n" + data)
        try:
            status_line = await self.r.readline()
            length = 0
            while True:
                line = await self.r.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                if k.lower() == "content-length":
                    length = int(v)
            if length:
                await self.r.readexactly(length)
            return int(status_line.split()[1])
        except (ValueError, IndexError, asyncio.IncompleteReadError):
            self.close()
            raise ConnectionError(f"bad or no response to {method} {path}") from None

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


async def _load(url: str, token: str, rate_per_s: float, duration_s: float, concurrency: int,
                write_fraction: float, seed: int, server_cpu_s: Callable[[], float] | None = None,
                around: Callable[[], dict[str, float]] | None = None, period_s: float | None = None) -> dict[str, Any]:
    """The load itself (seeded first); ``server_cpu_s``: the server's CPU seconds so far, read at the
    timed window's start and end; ``around``: counters (name -> value) read there too, whose
    differences over the window are the result's ``window`` (with ``window_s``, the seconds between the
    two readings).  ``period_s``: the engine's period; the result then has the latency by the phase of
    that period each request was sent at (``latency_by_phase``) and each second's p99
    (``latency_p99_by_second``), and the reads' and the writes' apart (``latency_by_kind``).  ``latency_ms`` is
    each request's from the moment it had a connection (as before); ``latency_from_due_ms`` from the moment it
    was due, its wait for one of the ``concurrency`` connections counted."""
    rng = np.random.default_rng(seed)
    auth = {"Authorization": f"Bearer {token}"}
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    lat_s: list[float] = []
    sent_s: list[float] = []  # CLOCK_MONOTONIC, the engine's cycles' clock
    methods: list[str] = []
    due_lat_s: list[float] = []  # from the moment the request was due (its connection's wait counted)
    statuses: dict[str, int] = {}
    errors = 0
    await seed_policer(url, token)
    idle: asyncio.Queue[BenchConn] = asyncio.Queue()
    for _ in range(concurrency):
        idle.put_nowait(BenchConn(host, int(port)))

    def make(i: int) -> tuple[str, str, dict[str, Any] | None, dict[str, str] | None]:
        if rng.random() < write_fraction:
            k = int(rng.integers(3))
            if k == 0:
                n = int(rng.integers(8))
                return "PUT", f"/networks/net{n}/sla", {"min_pps": 1000, "max_pps": float(rng.integers(20000, 90000)),
                                                      "weight": float(rng.integers(1, 10))}, auth
            if k == 1:
                return "PATCH", f"/routers/r{int(rng.integers(4))}", {"capacity_pps": float(rng.integers(50000, 200000))}, auth
            return "POST", "/networks", {"name": f"b{i}-{int(rng.integers(1 << 30))}"}, auth
        k = int(rng.integers(5))
        path = [f"/routers?limit={PAGE}", f"/vrs?limit={PAGE}", "/networks/net0", f"/networks/net{int(rng.integers(8))}",
                "/actions?limit=20"][k]
        return "GET", path, None, None

    async def one(method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str] | None,
                  due: float) -> None:
        nonlocal errors
        conn = await idle.get()
        sent = time.monotonic()
        t0 = time.perf_counter()
        try:
            status = await conn.request(method, path, body, headers)
            code = str(status)
            if status >= 400:
                errors += 1
        except OSError as e:
            code = type(e).__name__
            errors += 1
        end = time.perf_counter()
        lat_s.append(end - t0)
        due_lat_s.append(end - due)
        sent_s.append(sent)  # in the order of lat_s: the requests end out of order
        methods.append(method)
        statuses[code] = statuses.get(code, 0) + 1
        idle.put_nowait(conn)

    n = int(rate_per_s * duration_s)
    tasks = []
    around0 = around() if around is not None else {}
    t_around = time.perf_counter()
    cpu0 = time.process_time()
    server0 = server_cpu_s() if server_cpu_s is not None else 0.0
    t_start = time.perf_counter()
    for i in range(n):
        delay = t_start + i / rate_per_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(*make(i), t_start + i / rate_per_s)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t_start
    client_cpu_s = time.process_time() - cpu0
    server_s = server_cpu_s() - server0 if server_cpu_s is not None else None
    around1 = around() if around is not None else {}
    window_s = time.perf_counter() - t_around
    while not idle.empty():
        idle.get_nowait().close()
    lat_ms = np.array(lat_s) * 1000.0
    res = {
        "offered_rate_per_s": rate_per_s,
        "duration_s": round(elapsed, 3),
        "requests": n,
        "requests_per_s": round(n / elapsed, 1),
        "write_fraction": write_fraction,
        "concurrency": concurrency,
        "latency_ms": {
            "p50": round(float(np.percentile(lat_ms, 50)), 2),
            "p90": round(float(np.percentile(lat_ms, 90)), 2),
            "p99": round(float(np.percentile(lat_ms, 99)), 2),
            "max": round(float(lat_ms.max()), 2),
        },
        "latency_from_due_ms": {q: round(float(np.percentile(np.array(due_lat_s) * 1000.0, p)), 2)
                                for q, p in (("p50", 50), ("p99", 99))},
        "errors": errors,
        "statuses": statuses,
        "client_cpu_ms_per_request": round(1000 * client_cpu_s / n, 3),
    }
    if server_s is not None:  # the policer's processes (API workers, their supervisor, the engine)
        res["server_cpu_ms_per_request"] = round(1000 * server_s / n, 3)
    if around is not None:
        res["window"] = {"window_s": round(window_s, 3), **{k: round(around1[k] - around0[k], 3) for k in around0}}
    if period_s is not None:
        res["latency_by_phase"] = latency_by_phase(sent_s, lat_ms, period_s)
        res["latency_p99_by_second"] = latency_p99_by_second(sent_s, lat_ms)
        res["latency_by_kind"] = latency_by_kind(methods, lat_ms)
    return res


class PgServer:
    """A throw-away PostgreSQL server of the Debian package (``/usr/lib/postgresql/<v>/bin``) in a
    temporary directory, on a unix socket there only (no TCP), fsync on, ``trust`` authentication;
    as root its files belong to the ``postgres`` user and its tools run through ``runuser``.  A
    context manager: started on entry, stopped and removed on exit."""

    def __init__(self) -> None:
        import shutil

        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not found:
            raise RuntimeError("PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin"
                               " (apt-get install postgresql)")
        self.bindir = found[-1].parent
        self.version = self.bindir.parent.name
        self.dir = Path(tempfile.mkdtemp(prefix="xtc-bench-pg-"))
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.n = 0

    def _run(self, *argv: str) -> None:
        r = subprocess.run([*self.as_user, *argv], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stdout[-1000:]} {r.stderr[-1000:]}")

    def __enter__(self) -> "PgServer":
        data = self.dir / "data"
        self._run(str(self.bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        opts = f"-c listen_addresses='' -c unix_socket_directories={self.dir} -c max_connections=200"
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w",
                      "-t", "60", "start")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        import shutil

        try:
            if (self.dir / "data" / "postmaster.pid").exists():
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def new_database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        self.n += 1
        with psycopg.connect(f"postgresql://postgres@/postgres?host={self.dir}", autocommit=True) as c:
            c.execute(f"CREATE DATABASE bench{self.n}")
        return f"postgresql://postgres@/bench{self.n}?host={self.dir}"


def database_server_pid(url: str | None) -> int | None:
    """The postmaster's process id of a PostgreSQL server on this machine that ``url`` reaches by a unix
    socket (the first line of the socket's lock file, ``<dir>/.s.PGSQL.<port>.lock``); None for SQLite,
    for a server over TCP (its CPU is not this machine's to count) or when the lock file is unreadable."""
    if not url or not url.startswith(("postgresql:", "postgres:")):
        return None
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:
        return None
    host, port = str(info.get("host") or ""), str(info.get("port") or "5432")
    if not host.startswith("/"):
        return None
    try:
        return int((Path(host) / f".s.PGSQL.{port}.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class TreeCpu:
    """The CPU seconds (user + system) a process and its descendants spent since this object was
    made: the processes that start meanwhile (a server's new backends) count from zero; those that
    exit meanwhile are lost (a pool's connections live through a bench's window)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._root = psutil.Process(pid)
        self._t0 = {p.pid: s for p, s in self._times().items()}

    def _times(self) -> dict[Any, float]:
        import psutil

        out: dict[Any, float] = {}
        for p in (self._root, *self._root.children(recursive=True)):
            try:
                t = p.cpu_times()
                out[p] = t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return out

    def __call__(self) -> float:
        return sum(s - self._t0.get(p.pid, 0.0) for p, s in self._times().items())


def _database_cpu() -> TreeCpu | None:
    """A :class:`TreeCpu` of the database server the bench's policer uses (``XTC_POLICER_DB_URL``), when
    it is a PostgreSQL server on this machine; None otherwise (SQLite runs inside the policer)."""
    pid = database_server_pid(os.environ.get("XTC_POLICER_DB_URL"))
    if pid is None:
        return None
    try:
        return TreeCpu(pid)
    except Exception:
        return None


def run_bench(rate_per_s: float = 500.0, duration_s: float = 5.0, concurrency: int = 32,
              write_fraction: float = 0.2, seed: int = 1, url: str | None = None, token: str | None = None,
              workers: int = 1) -> dict[str, Any]:
    """Run the load test (against ``url`` if given, else a throw-away policer with ``workers`` API
    processes).  Returns the results."""
    if not (0 < rate_per_s <= 100000 and 0 < duration_s <= 600 and 1 <= concurrency <= 1000 and 0 <= write_fraction <= 1):
        raise ValueError("bench: need 0 < rate <= 1e5, 0 < duration <= 600 s, 1 <= concurrency <= 1000, 0 <= write_fraction <= 1")
    if url is not None:
        if token is None:
            raise ValueError("bench: give the token of the policer at url")
        return asyncio.run(_load(url, token, rate_per_s, duration_s, concurrency, write_fraction, seed))
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="xtc-policer-bench-") as tmp:
        proc, base = start_policer(tmp, token, workers=workers)
        try:
            db_cpu = _database_cpu()
            res = asyncio.run(_load(base, token, rate_per_s, duration_s, concurrency, write_fraction, seed,
                                    server_cpu_s=TreeCpu(proc.pid)))
            if db_cpu is not None:  # the set-up's few requests included
                res["database_cpu_ms_per_request"] = round(1000 * db_cpu() / res["requests"], 3)
            res["workers"] = workers
        finally:
            stop_process(proc)
    return res


def _audit_times(c: Any, kind: str, routers: set[str]) -> dict[str, list[float]]:
    """Router -> the times (``t_unix_s``, in order) of its audit records of ``kind``, for ``routers``."""
    out: dict[str, list[float]] = {}
    after = 0
    while True:
        page = c.get("/actions", params={"kind": kind, "after_id": after, "limit": 1000}).json()
        for a in page:
            if a["router"] in routers:
                out.setdefault(a["router"], []).append(a["t_unix_s"])
        if len(page) < 1000:
            break
        after = page[-1]["id"]
    return out


def _dead_marked_s(c: Any, dead: set[str], period_s: float) -> dict[str, Any]:
    """Seconds from each dead router's registration to its ``router_unreachable`` record (the audit log's
    times and the routers' ``created_unix_s``, one clock): quantiles, and how many within 2 periods."""
    created: dict[str, float] = {}
    offset = 0
    while True:
        page = c.get("/routers", params={"limit": 1000, "offset": offset}).json()
        created.update((r["name"], r["created_unix_s"]) for r in page if r["name"] in dead)
        if len(page) < 1000:
            break
        offset += len(page)
    first = {n: ts[0] for n, ts in _audit_times(c, "router_unreachable", dead).items()}
    delays = [first[n] - created[n] for n in first if n in created]
    return {**(percentiles(delays, 1.0, 2) if delays else {"p50": None, "p99": None, "max": None}),
            "within_2_periods": f"{sum(d <= 2 * period_s for d in delays)}/{len(dead)}",
            "never": len(dead) - len(delays)}


def _dying_marked_s(c: Any, silenced: dict[str, list[float]], period_s: float, flap_s: float) -> dict[str, Any]:
    """Seconds from the moment a router that was answering fell silent (the fleet's flapping routers,
    ``silenced``: router -> wall-clock times) to its ``router_unreachable`` record: quantiles, how many
    within 2 periods, and how many silences (``flap_s`` long) passed unmarked.  A silence that began
    while the router was still marked unreachable (its last record before it is one) is not counted:
    there was nothing to mark.  The audit log is read once the last silence has ended (a silence that
    began near the window's end would otherwise read as unmarked before the engine could mark it)."""
    time.sleep(max(0.0, max(max(v) for v in silenced.values()) + flap_s - time.time()))
    routers = set(silenced)
    down = _audit_times(c, "router_unreachable", routers)
    up = _audit_times(c, "router_reachable", routers)
    delays, unmarked, skipped = [], 0, 0
    for name, starts in silenced.items():
        for s in starts:
            last_down = max((t for t in down.get(name, []) if t < s), default=None)
            last_up = max((t for t in up.get(name, []) if t < s), default=None)
            if last_down is not None and (last_up is None or last_up < last_down):
                skipped += 1
                continue
            mark = min((t for t in down.get(name, []) if s <= t <= s + flap_s), default=None)
            if mark is None:
                unmarked += 1
            else:
                delays.append(mark - s)
    return {**(percentiles(delays, 1.0, 2) if delays else {"p50": None, "p99": None, "max": None}),
            "within_2_periods": f"{sum(d <= 2 * period_s for d in delays)}/{len(delays) + unmarked}",
            "unmarked": unmarked, "silent_while_unreachable": skipped}


def _api_and_engine_processes(pid: int) -> tuple[list[Any], list[Any]]:
    """The psutil processes of the policer ``pid`` (``xtc policer serve``) that serve the API (itself, and its
    workers when it supervises them: ``-m xtc.policer.service``), and those of its engine (the others)."""
    import psutil

    root = psutil.Process(pid)
    api, engine = [root], []
    for p in root.children(recursive=True):
        (api if "xtc.policer.service" in p.cmdline() else engine).append(p)
    return api, engine


def _schedule(procs: list[Any], nice: int | None = None, cpus: list[int] | None = None) -> None:
    """Every thread of ``procs`` (psutil processes) at the nice value ``nice`` and/or pinned to ``cpus``: both
    are a thread's on Linux, and the processes' threads already run (systemd's Nice= and CPUAffinity= set
    them before the service starts, so that every thread inherits them)."""
    for p in procs:
        for t in p.threads():
            if nice is not None:
                os.setpriority(os.PRIO_PROCESS, t.id, nice)
            if cpus is not None:
                os.sched_setaffinity(t.id, cpus)


def _runqueue_wait_s(procs: list[Any]) -> float:
    """Seconds the main threads of ``procs`` (psutil processes; an API process's event loop) have spent
    runnable but waiting for a CPU (``/proc/PID/schedstat``'s second field; 0 where it is not there)."""
    total = 0.0
    for p in procs:
        try:
            total += int(Path(f"/proc/{p.pid}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return total


def _cpu_s_since(before: list[Any], procs: list[Any]) -> float:
    """User + system CPU seconds that ``procs`` (psutil processes) spent since ``before`` (their
    ``cpu_times()`` then, in the same order)."""
    return sum(b.user + b.system - a.user - a.system for a, b in zip(before, (p.cpu_times() for p in procs)))


def run_fleet_bench_on(database: str, routers: int, vrs_per_router: int, dead_fraction: float, duration_s: float,
                       rate_per_s: float, **kw: Any) -> dict[str, Any]:
    """:func:`run_fleet_bench` with the policer on SQLite (``database`` ``"sqlite"``: a file in the
    policer's processes) or on a throw-away PostgreSQL server (``"pg"``: :class:`PgServer`, its CPU
    counted); the result names it (``database``)."""
    if database not in ("sqlite", "pg"):
        raise ValueError(f"database must be 'sqlite' or 'pg', got {database!r}")
    if database == "sqlite":
        res = run_fleet_bench(routers, vrs_per_router, dead_fraction, duration_s, rate_per_s, **kw)
        res["database"] = "SQLite (in the policer's processes)"
        return res
    with PgServer() as pg:
        os.environ["XTC_POLICER_DB_URL"] = pg.new_database()
        try:
            res = run_fleet_bench(routers, vrs_per_router, dead_fraction, duration_s, rate_per_s, **kw)
        finally:
            del os.environ["XTC_POLICER_DB_URL"]
        res["database"] = f"PostgreSQL {pg.version} (fsync on), started by the bench"
    return res


def run_fleet_bench(routers: int = 5000, vrs_per_router: int = 16, dead_fraction: float = 0.1,
                    duration_s: float = 20.0, api_rate_per_s: float = 2000.0, period_s: float = 1.0,
                    request_timeout_s: float = 0.9, samples: bool = True, shards: int = 1,
                    api_duration_s: float = 5.0, max_warmup_s: float = 300.0, flapping_fraction: float = 0.0,
                    flap_s: float = 5.0, snapshot_interval_s: float | None = None, jitter: float = 0.0,
                    sample_link: bool = True, api_concurrency: int = 32,
                    api_window: Callable[[int, bool, str, str], None] | None = None,
                    workers: int = 1, api_nice: int | None = None, engine_cpus: list[int] | None = None,
                    transport: str = "ipc", link_transport: str | None = None) -> dict[str, Any]:
    """The policer against a fleet of stand-in daemons (``python -m xtc_lab.policer_fleet`` in a child
    process): ``routers`` registered (control on), ``duration_s`` seconds of policing measured after a
    warm-up (``warmup_s`` from the fleet's start: until the engine has sent every healthy VR its
    activation, at least as long as the fleet leaves out of its statistics, at most ``max_warmup_s``;
    ``activations_sent_at_start`` says how many it had sent), then the API load test on the same policer.  Returns the fleet's statistics (the longest
    gap between two polls of one healthy router, seconds; routers never polled), the policy cycle's
    time over the cycles of the measured window (``/health?recent=N``; ``policy_cycle_ms_with_warmup``:
    over every cycle kept, warm-up included), the CPU the engine's process spent per second of the policing and per router
    measurement recorded (``sampled`` + ``listed`` of ``/health``) meanwhile, the fleet's own CPU per
    second (the stand-in daemons share the machine), the database server's CPU per second and per
    measurement when it is a PostgreSQL server on this machine (:func:`database_server_pid`), when the dead
    routers were marked (``dead_marked_s``: from their registration; ``dying_marked_s``: from the moment
    a router that answered fell silent, the ``flapping_fraction`` of the fleet that answers ``flap_s``
    seconds and is silent as long, over and over, measured in the policing window), the resident
    memory of the processes (MB),
    then the API's requests/s and latency while the engine goes on policing the fleet (``api``: ``api_rate_per_s``
    for ``api_duration_s`` at most ``api_concurrency`` in flight; over its timed window the CPU the API's
    process spent per request, that of all the policer's processes per request, the engine's per second
    and per measurement, the engine's measurements per second (:func:`~xtc_lab.policer_api_goals.api_figures`), the load
    generator's CPU per request, and the fleet's statistics over that time; ``api_goals``: issue 50's
    API goals beside them, :func:`~xtc_lab.policer_api_goals.api_goals`).  ``samples``: the daemons publish their
    samples, the routers are registered with their ``pub_endpoint`` and the engine reads the streams
    (``[engine] samples = true``); else every router is measured by ``list``.  ``sample_link``: the engine
    takes them over the one connection it keeps to each daemon's manager socket (``engine.sample_link``),
    else on a second connection per router, to the PUB socket; ``engine_fds`` counts the engine's open
    files and the fleet's ``link_peers`` the subscriptions over the manager sockets.  ``shards``: the policer's
    ``engine.shards`` (engine processes, each policing its share of the routers); ``workers``: its
    ``server.workers`` (API processes).  ``jitter``: the daemons'
    offered rates are drawn anew every period (:class:`xtc_lab.policer_fleet.Fleet`), so that their
    samples change as a real fleet's do.  ``api_window``: called with the API process's id, True, the policer's URL
    and a token just before the API's timed load, with False just after it (``python -m
    xtc_lab.policer_api_profile`` profiles that window; ``python -m xtc_lab.policer_api_cpu --fleet``
    measures its requests one at a time there).  ``api_nice``, ``engine_cpus``: for the API's load, every
    thread of the API's processes at that nice value, every thread of the engine's pinned to those CPUs
    (:func:`_schedule`), as an operator would run them; ``api.latency_by_phase`` says where in the engine's
    period the slowest requests were sent.  ``transport``: the stand-in daemons listen on Unix sockets
    (``ipc``) or on TCP at 127.0.0.1 (``tcp``); with ``tcp``, ``fleet_tcp_states`` counts this host's TCP
    sockets toward the fleet's ports by state, toward the answering daemons and toward the dead ones (:func:`xtc.policer.link.tcp_states`) at the end of the
    policing window, leaving out the sockets there were before the daemons listened: issue 50's TIME-WAIT
    figure (a connection per exchange left one per exchange).  ``link_transport``: the policer's
    ``engine.link_transport`` (None: its default, named in the result as given)."""
    import psutil

    if transport not in ("ipc", "tcp"):
        raise ValueError(f"transport must be 'ipc' or 'tcp', got {transport!r}")

    token = secrets.token_urlsafe(24)
    out: dict[str, Any] = {"routers": routers, "vrs_per_router": vrs_per_router, "dead_fraction": dead_fraction,
                           "workers": workers,
                           "flapping_fraction": flapping_fraction, "flap_s": flap_s,
                           "period_s": period_s, "samples": samples, "sample_link": sample_link, "shards": shards,
                           "jitter": jitter, "transport": transport, "link_transport": link_transport,
                           "product": str(Path(xtc.__file__).parent)}
    with tempfile.TemporaryDirectory(prefix="xtc-fleet-") as tmp:
        warm = 6.0 + routers / 500 + routers / 1000  # the fleet leaves this out of its statistics
        # Publishing daemons hold about 5 descriptors each: at most 2,500 of them per fleet process.
        parts = -(-routers // 2500) if samples else 1
        shares = [routers // parts + (i < routers % parts) for i in range(parts)]
        fl_files, fleets = [], []
        # The sockets there are before the daemons listen, left out of ``fleet_tcp_states``: another program's
        # connections, in TIME-WAIT toward a port that a daemon is now given, are not the policer's.
        sockets_before = tcp_sockets() if transport == "tcp" else frozenset()
        for i, share in enumerate(shares):
            fl_files.append(Path(tmp) / f"fleet{i}.json")
            fleets.append(subprocess.Popen(
                [sys.executable, "-m", "xtc_lab.policer_fleet", "--routers", str(share), "--vrs", str(vrs_per_router),
                 "--dead", str(dead_fraction), "--flapping", str(flapping_fraction), "--flap-s", str(flap_s),
                 "--out", str(fl_files[-1]), "--first", str(sum(shares[:i])),
                 "--warmup-s", str(warm), "--jitter", str(jitter), "--transport", transport,
                 *(["--publish"] if samples else [])],
                stdout=subprocess.PIPE, text=True))
        proc = None
        try:
            t = time.monotonic()
            while not all(f.exists() for f in fl_files):
                if any(f.poll() is not None for f in fleets) or time.monotonic() - t > 120:
                    raise RuntimeError("the fleet did not start")
                time.sleep(0.1)
            fl = [r for f in fl_files for r in json.loads(f.read_text())]
            proc, base = start_policer(tmp, token, period_s, request_timeout_s=request_timeout_s, workers=workers,
                                       extra_config=f"samples = {'true' if samples else 'false'}\nshards = {shards}\n"
                                       + f"sample_link = {'true' if sample_link else 'false'}\n"
                                       + (f"snapshot_interval_s = {snapshot_interval_s}\n" if snapshot_interval_s else "")
                                       + (f'link_transport = "{link_transport}"\n' if link_transport else ""))
            def window() -> Any:  # the fleets' statistics since the previous window (SIGUSR1), merged
                merged: dict[str, Any] = {}
                for f in fleets:
                    f.send_signal(signal.SIGUSR1)
                for f in fleets:
                    assert f.stdout is not None
                    for mode, m in json.loads(f.stdout.readline())["window"].items():
                        o = merged.setdefault(mode, {"routers": 0, "lists": 0, "max_gap_s": 0.0, "never_polled": 0,
                                                  "commands": {}, "published": 0, "link_peers": 0})
                        for k in ("routers", "lists", "never_polled", "published", "link_peers"):
                            o[k] += m[k]
                        o["max_gap_s"] = max(o["max_gap_s"], m["max_gap_s"])
                        for k, n in m["commands"].items():
                            o["commands"][k] = o["commands"].get(k, 0) + n
                        if "silenced_unix_s" in m:
                            o.setdefault("silenced_unix_s", {}).update(m["silenced_unix_s"])
                return merged

            auth = {"Authorization": f"Bearer {token}"}
            t_reg = time.monotonic()
            with httpx.Client(base_url=base, timeout=30) as c:
                for r in fl:
                    reg = {"name": r["name"], "endpoint": r["endpoint"], "capacity_pps": r["capacity_pps"],
                           "control_mode": "on"}
                    if samples:
                        reg["pub_endpoint"] = r["pub_endpoint"]
                    try:
                        got = c.post("/routers", json=reg, headers=auth)
                    except httpx.HTTPError as e:
                        raise RuntimeError(f"registering {r['name']}: {e}; policer exit status {proc.poll()};"
                                           f" its log ends: {policer_log(tmp)}") from e
                    if got.status_code >= 400:  # a router the bench means to police, refused: say so
                        raise RuntimeError(f"registering {r['name']}: HTTP {got.status_code} {got.text[:500]}")
                out["register_s"] = round(time.monotonic() - t_reg, 1)
                dead = {r["name"] for r in fl if r["mode"] == "dead"}
                marked: dict[str, float] = {}
                while time.monotonic() - t_reg < out["register_s"] + 4 * period_s:
                    for r in c.get("/routers", params={"status": "unreachable", "limit": 5000}).json():
                        marked.setdefault(r["name"], time.monotonic() - t_reg)
                    time.sleep(0.2)
                out["dead_marked"] = f"{len(dead & set(marked))}/{len(dead)}"
                out["dead_marked_s"] = _dead_marked_s(c, dead, period_s)
                # Warm-up: at least as long as the fleet leaves out of its statistics, and until the engine
                # has sent every healthy VR its activation (the start-up's burst of commands is over).
                n_active = (len(fl) - len(dead)) * vrs_per_router
                while True:
                    sent = sum(m["commands"].get("activate", 0) for m in window().values())
                    waited = time.monotonic() - t
                    if (sent >= n_active and waited >= warm) or waited > max_warmup_s:
                        break
                    time.sleep(1.0)
                out["warmup_s"] = round(time.monotonic() - t, 1)
                out["activations_sent_at_start"] = f"{sent}/{n_active}"
                engine = psutil.Process(proc.pid).children(recursive=True)
                fleet_ps = [psutil.Process(f.pid) for f in fleets]
                h0 = c.get("/health").json()
                cpu0, t0 = [p.cpu_times() for p in engine], time.monotonic()
                fcpu0 = [p.cpu_times() for p in fleet_ps]
                db_cpu = _database_cpu()
                time.sleep(duration_s)
                cpu_s = _cpu_s_since(cpu0, engine)
                fleet_cpu_s = _cpu_s_since(fcpu0, fleet_ps)
                db_cpu_s = db_cpu() if db_cpu is not None else None
                h = c.get("/health").json()
                window_s = time.monotonic() - t0
                # The cycles and measurement gaps of this window only (not the warm-up's).
                recent = max(1, min(600, (h.get("engine_cycles") or 0) - (h0.get("engine_cycles") or 0)))
                hw = c.get("/health", params={"recent": recent}).json()
                measured = sum((h.get(k) or 0) - (h0.get(k) or 0) for k in ("sampled", "listed"))
                out["engine_cpu_s_per_s"] = round(cpu_s / window_s, 2)
                out["fleet_cpu_s_per_s"] = round(fleet_cpu_s / window_s, 3)
                out["measured_per_s"] = round(measured / window_s)
                out["engine_cpu_ms_per_measurement"] = round(1000 * cpu_s / measured, 3) if measured else None
                if db_cpu_s is not None:  # a PostgreSQL server on this machine
                    out["database_cpu_s_per_s"] = round(db_cpu_s / window_s, 3)
                    out["database_cpu_ms_per_measurement"] = round(1000 * db_cpu_s / measured, 3) if measured else None
                out["policy_cycle_ms"] = hw.get("cycle_ms")
                out["policy_cycles"] = recent
                out["measurements"] = {k: h.get(k) for k in ("sampled", "listed", "bad_samples")}
                out["measurements"]["measure_gap_ms"] = hw.get("measure_gap_ms")
                out["policy_cycle_ms_with_warmup"] = h.get("cycle_ms")
                api_proc = psutil.Process(proc.pid)
                out["rss_mb"] = {"policer_api": round(api_proc.memory_info().rss / 1e6),
                                 "policer_engine": round(sum(p.memory_info().rss for p in api_proc.children(recursive=True)) / 1e6),
                                 "fleet": round(sum(psutil.Process(f.pid).memory_info().rss for f in fleets) / 1e6)}
                out["engine_fds"] = sum(p.num_fds() for p in api_proc.children(recursive=True))
                if transport == "tcp":  # the policer's sockets toward the daemons, after the policing window
                    # by the daemons' kind: a dead one is a loopback port nobody listens on, which a
                    # reconnecting socket can now and then connect to itself (TCP's simultaneous open)
                    for kind, rs in (("answering", [r for r in fl if r["mode"] != "dead"]),
                                     ("dead", [r for r in fl if r["mode"] == "dead"])):
                        ports = {int(p) for r in rs for k in ("endpoint", "pub_endpoint")
                                 if (p := (r.get(k) or ":").rsplit(":", 1)[1]).isdigit()}  # (an unbound PUB's: "*")
                        out.setdefault("fleet_tcp_states", {})[kind] = tcp_states(ports, ignore=sockets_before)
                    out["fleet_tcp_states_after_s"] = round(time.monotonic() - t_reg, 1)

            out["fleet"] = window()
            silenced = out["fleet"].get("flapping", {}).pop("silenced_unix_s", {})
            # The API while the engine goes on policing the fleet: the CPU of the API's processes (the one
            # that serves, or the supervisor and its workers) and of the engine's, and the engine's
            # measurements, over the load's timed window.
            api_ps, engine_ps = _api_and_engine_processes(proc.pid)
            out["api_nice"], out["engine_cpus"] = api_nice, engine_cpus
            _schedule(api_ps, nice=api_nice)
            _schedule(engine_ps, cpus=engine_cpus)
            db_cpu = _database_cpu()
            window_open: list[bool] = []

            def counters() -> dict[str, float]:
                if api_window is not None:
                    api_window(proc.pid, not window_open, base, token)
                    window_open.append(True)
                api_s = sum(t.user + t.system for t in (p.cpu_times() for p in api_ps))
                engine_s = sum(t.user + t.system for t in (p.cpu_times() for p in engine_ps))
                h = httpx.get(base + "/health", timeout=30).json()
                return {"api_cpu_s": api_s, "engine_cpu_s": engine_s, "api_loop_runqueue_wait_s": _runqueue_wait_s(api_ps),
                        "measured": (h.get("sampled") or 0) + (h.get("listed") or 0),
                        "database_cpu_s": db_cpu() if db_cpu is not None else 0.0}

            out["api"] = asyncio.run(_load(base, token, api_rate_per_s, api_duration_s, api_concurrency, 0.2, 1,
                                           around=counters, period_s=period_s if shards == 1 else None))
            out["api"].update(api_figures(out["api"]["requests"], out["api"]["window"], db_cpu is not None))
            out["api_goals"] = api_goals(out["api"], sum(r["mode"] == "ok" for r in fl), period_s)
            out["fleet_during_api"] = window()["ok"]
            with httpx.Client(base_url=base, timeout=30) as c:
                if silenced:  # routers that fell silent in the policing window: when were they marked?
                    out["dying_marked_s"] = _dying_marked_s(c, silenced, period_s, flap_s)
                h = c.get("/health").json()
                out["policy_cycle_ms_after_api"] = h.get("cycle_ms")
                out["measurements_after_api"] = {k: h.get(k) for k in ("sampled", "listed", "bad_samples", "measure_gap_ms")}
            for f in fleets:
                f.terminate()
                f.communicate(timeout=60)
        finally:
            stop_processes((proc, *fleets))
    return out
