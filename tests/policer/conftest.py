"""Helpers for the policer's end-to-end tests: real daemons (sim backend) and a real policer process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from procs import free_port, stop_process, wait_for
from xtc_lab.policer_bench import start_policer
from xtc.policer.link import DaemonLink, LinkDown
from xtc.daemon.ctl import ManagerClient, ManagerError

TOKEN = "e2e-token-" + "7" * 24


class Daemon:
    """An ``xtc daemon`` process on the sim backend with its own state directory and ports."""

    def __init__(self, tmp: Path, name: str, vrs: list[dict[str, Any]], period_s: float = 0.5,
                 argv_prefix: list[str] | None = None, curve: tuple[Path, str] | None = None,
                 server_keys: tuple[Path, Path] | None = None):
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port, self.pub_port = free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.period_s = period_s
        self.argv_prefix = argv_prefix
        self.curve = curve  # (client .key_secret file, server public key) for the test's own requests
        self.server_keys = server_keys  # (the daemon's .key_secret file, its clients' directory): CURVE on
        self.proc: subprocess.Popen | None = None
        self.write_config(vrs)

    def write_config(self, vrs: list[dict[str, Any]]) -> None:
        lines = ['schema = "xtc-daemon/1"', "[daemon]", 'backend = "sim"', f"control_period_s = {self.period_s}",
                 f'state_dir = "{self.dir}"', "[manager]",
                 f'endpoint = "{self.endpoint}"', f'pub_endpoint = "tcp://127.0.0.1:{self.pub_port}"']
        if self.server_keys is not None:
            lines += [f'curve_secret_key_file = "{self.server_keys[0]}"', f'curve_clients_dir = "{self.server_keys[1]}"']
        lines += ["[metrics]", "enabled = false", "[log]", 'level = "warning"']
        for v in vrs:
            lines += ["[[sim.vr]]"] + [f"{k} = {v[k]!r}".replace("'", '"') for k in v]
        self.config = self.dir / "daemon.toml"
        self.config.write_text("\n".join(lines) + "\n")

    def start(self, wait: bool = True) -> None:
        argv = self.argv_prefix or [sys.executable, "-m", "xtc.cli", "daemon"]
        with open(self.dir / "daemon.log", "a") as log:
            self.proc = subprocess.Popen([*argv, "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=log)
        if wait:
            wait_for(self.ping, 15, f"daemon {self.name} to answer")

    def restart(self) -> None:
        """Stopped (SIGTERM, waited for) and started again at once, without waiting for it to answer."""
        stop_process(self.proc)
        self.start(wait=False)

    def sampled_routers(self, db: Path, n: int) -> Any:
        """A policer's store (SQLite file ``db``) with ``n`` routers on this daemon, control off, each with
        its PUB endpoint (so measured from samples)."""
        from xtc.policer.store import Store

        store = Store(f"sqlite:///{db}")
        for i in range(n):
            store.add_router(f"r{i:02d}", self.endpoint, 1e7, "off", None, "test",
                             pub_endpoint=f"tcp://127.0.0.1:{self.pub_port}")
        return store

    def call(self, cmd: str, timeout_s: float = 1.0, **fields: Any) -> dict[str, Any]:
        """One request to the daemon (its own ctl client; the policer's link when CURVE is on)."""
        if self.curve is None:
            with ManagerClient(self.endpoint, timeout_s=timeout_s) as c:
                return c.call(cmd, **fields)
        link = DaemonLink(self.endpoint, timeout_s, self.curve[0], self.curve[1])
        try:
            return link.call(cmd, **fields)
        finally:
            link.close()

    def ping(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon {self.name} exited with {self.proc.returncode}: "
                                 f"{(self.dir / 'daemon.log').read_text()[-2000:]}")
        try:
            return bool(self.call("ping", timeout_s=0.5)["pong"])
        except (ManagerError, LinkDown):
            return False

    def vrs(self) -> dict[str, dict[str, Any]]:
        return {v["vr"]: v for v in self.call("list")["vrs"]}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        stop_process(self.proc)
        self.proc = None


class Policer:
    """A ``xtc policer serve`` process on an ephemeral loopback port, and an authenticated client."""

    def __init__(self, tmp: Path, period_s: float = 0.5, extra_env: dict[str, str] | None = None,
                 extra_config: str = ""):
        self.tmp = tmp
        # The API reads the engine's snapshots of the measurements: the tests' policers take one every
        # period, so that what the API shows moves on as the measurements do (unless a test says otherwise).
        self.extra_config = (extra_config if "snapshot_interval_s" in extra_config
                             else f"snapshot_interval_s = {period_s}\n" + extra_config)
        self.period_s = period_s
        self.extra_env = extra_env
        self.proc: subprocess.Popen | None = None
        self.http: httpx.Client | None = None

    def start(self) -> None:
        self.proc, self.url = start_policer(self.tmp, TOKEN, self.period_s, self.extra_env,
                                             extra_config=self.extra_config)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
        stop_process(self.proc)
        self.proc = None

    def call(self, method: str, path: str, **kw: Any) -> Any:
        assert self.http is not None
        r = self.http.request(method, path, **kw)
        assert r.is_success, f"{method} {path}: {r.status_code} {r.text}"
        return r.json() if r.status_code != 204 else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(name: str, vrs: list[dict[str, Any]], **kw: Any) -> Daemon:
        d = Daemon(tmp_path, name, vrs, **kw)
        made.append(d)
        d.start()
        return d

    try:
        yield make
    finally:
        for d in made:
            d.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def policer_db(request: pytest.FixtureRequest) -> str:
    """The store the test's policers run on (every policer of one test shares one database)."""
    return request.param


@pytest.fixture
def make_policer(tmp_path: Path, policer_db: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Policer]]:
    made: list[Policer] = []
    env: dict[str, str] = {}
    if policer_db == "postgresql":  # else the SQLite file start_policer configures
        env["XTC_POLICER_DB_URL"] = request.getfixturevalue("pg_cluster").new_database()

    def make(**kw: Any) -> Policer:
        kw["extra_env"] = {**env, **(kw.get("extra_env") or {})}
        p = Policer(tmp_path / "policer", **kw)
        p.tmp.mkdir(exist_ok=True)
        made.append(p)
        p.start()
        return p

    try:
        yield make
    finally:
        for p in made:
            p.stop()


# ------------------------------------------------------------------------------------ PostgreSQL
def _pg_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


class PgCluster:
    """A throw-away PostgreSQL cluster in a temporary directory, on a unix socket there only (no TCP).

    initdb refuses root: as root the cluster belongs to the ``postgres`` system user and its tools run
    through ``runuser``.  Authentication is ``trust`` (only the socket, in a private directory).
    """

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="xtc-pg-"))
        self.data = self.dir / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres"
        self.n = 0

    def run(self, *argv: str) -> None:
        r = subprocess.run([*self.as_user, *argv], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stdout[-1000:]} {r.stderr[-1000:]}")

    def start(self) -> None:
        self.run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user, "--no-sync",
                 "-E", "UTF8")
        opts = f"-c listen_addresses='' -c unix_socket_directories={self.dir} -c fsync=off -c max_connections=200"
        self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w",
                 "-t", "60", "start")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str) -> str:
        return f"postgresql://{self.user}@/{db}?host={self.dir}"

    def new_database(self) -> str:
        """A new empty database's URL."""
        import psycopg

        self.n += 1
        name = f"t{os.getpid()}_{self.n}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One real PostgreSQL server for the session (Debian's package; installed if missing and root)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg 3 is not installed (pip install 'psycopg[binary,pool]')")
    bindir = _pg_bindir()
    if bindir is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], capture_output=True, timeout=600)
        bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot run initdb as the postgres user")
    cluster = PgCluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database on each store: a SQLite file, or a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'policer.db'}"
    return request.getfixturevalue("pg_cluster").new_database()


@pytest.fixture
def one_router_engine(tmp_path: Path) -> Any:
    """``make(timeout_s, seed)`` -> ``(fleet, store, engine, daemon, tick)``: one stand-in daemon of
    xtc_lab.policer_fleet with three VRs over real sockets, a SQLite store, an engine whose clock
    ``tick(n)`` moves 1 s before each of ``n`` cycles it runs to the end.  Stopped after the test."""
    from xtc.policer.engine import Engine
    from xtc.policer.link import LinkPool
    from xtc.policer.store import Store
    from xtc_lab.policer_fleet import Fleet

    made: list[tuple[Any, Any, Any]] = []

    def make(timeout_s: float, seed: int) -> tuple[Any, Any, Any, Any, Callable[..., None]]:
        fleet = Fleet(1, vrs_per_router=3, dead_fraction=0.0, seed=seed).start()
        store = Store(f"sqlite:///{tmp_path / f'p{len(made)}.db'}")
        mono = [1000.0]
        eng = Engine(store, LinkPool(timeout_s), clock=lambda: mono[0])
        made.append((fleet, store, eng))

        def tick(n: int = 1) -> None:
            for _ in range(n):
                mono[0] += 1.0
                eng.run_cycle(wait=True)

        return fleet, store, eng, fleet.daemons[0], tick

    yield make
    for fleet, store, eng in made:
        eng.stop()
        store.close()
        fleet.stop()
