"""The policer's two databases behind one small interface: SQLite (embedded default) and PostgreSQL.

A thin layer, not an ORM: the store's SQL is written once with ``?`` placeholders in the subset both
databases speak (``ON CONFLICT ... DO UPDATE``, no ``INSERT OR REPLACE``); on PostgreSQL (psycopg 3)
the placeholders become ``%s`` and rows are dicts; on SQLite (the standard library's sqlite3) rows are
:class:`sqlite3.Row`.  Both are read by column name.  The schema's two differences (floating-point
type, auto-increment key) are filled into the migrations' DDL per dialect.

- SQLite: one connection shared under a lock; a write transaction is ``BEGIN IMMEDIATE``, so
  several processes writing one file serialise on SQLite's own lock (busy timeout 10 s).
- PostgreSQL: a connection pool (psycopg_pool); each transaction takes a connection, READ COMMITTED;
  a duplicate key or a broken reference raised by a concurrent writer becomes :class:`Conflict`.

Migrations are numbered; ``meta.schema_version`` records the last one applied (schema 1, the first
release's, wrote it already).  :func:`migrate` runs the missing ones in one transaction at open,
under ``BEGIN IMMEDIATE`` (SQLite) or a transaction-level advisory lock (PostgreSQL), so that two
processes opening one database at once migrate it once.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["SCHEMA_VERSION", "MIGRATIONS", "WouldWait", "StoreError", "NotFound", "Conflict", "NotLeader", "parse_db_url",
           "Database", "SqliteDatabase", "PgDatabase", "open_database", "LeaderLock", "LEADER_LOCK_KEY",
           "SHARD_LOCK_NS"]


class WouldWait(Exception):
    """A transaction begun under :meth:`SqliteDatabase.no_wait` found a write lock taken (this process's, or
    SQLite's: another process's writer); nothing was written."""


class StoreError(Exception):
    """The database cannot be opened or used."""


class NotFound(StoreError):
    """No such router, VR or network."""


class Conflict(StoreError):
    """The change contradicts the current state (a duplicate name, a network still in use)."""


class NotLeader(StoreError):
    """This process's engine wrote after another policer took the lead (it must stop)."""


#: Advisory lock keys (PostgreSQL, 64-bit): the leader's session lock, and the migration's.
LEADER_LOCK_KEY = 0x7874635F6C656164  # "xtc_lead"
MIGRATE_LOCK_KEY = 0x7874635F6D696772  # "xtc_migr"
#: With ``engine.shards`` n > 1, shard i's leader lock is the two-key advisory lock
#: ``(SHARD_LOCK_NS, n * 65536 + i)``; ``(SHARD_LOCK_NS, 0)`` serialises the takes (see :class:`LeaderLock`).
SHARD_LOCK_NS = 0x78746373  # "xtcs"

#: (version, DDL) in order; ``{real}`` and ``{autoid}`` are filled per dialect, or the DDL is given per
#: dialect (a dict).  Statements end with a semicolon at the end of a line (one inside a line, in a
#: trigger's body, does not end it).  Version 1 is the first release's schema verbatim (``IF NOT
#: EXISTS``: a version-1 file is left as it is).
MIGRATIONS: list[tuple[int, str | dict[str, str]]] = [
    (1, """
CREATE TABLE IF NOT EXISTS routers (
    name TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    capacity_pps {real} NOT NULL,
    control_mode TEXT NOT NULL DEFAULT 'auto',
    curve_server_key TEXT,
    status TEXT NOT NULL DEFAULT 'unknown',
    last_seen_unix_s {real},
    last_error TEXT,
    control_on INTEGER NOT NULL DEFAULT 0,
    activation_pending_since_s {real},
    demand_pps {real},
    created_unix_s {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS networks (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    sla_min_pps {real},
    sla_max_pps {real},
    sla_weight {real}
);
CREATE TABLE IF NOT EXISTS vrs (
    router TEXT NOT NULL REFERENCES routers(name),
    name TEXT NOT NULL,
    network TEXT REFERENCES networks(name),
    present INTEGER NOT NULL DEFAULT 1,
    state TEXT NOT NULL DEFAULT 'inactive',
    daemon_setpoint_pps {real},
    measured_pps {real},
    offered_pps {real},
    cap_percent {real},
    last_seen_unix_s {real},
    manual_setpoint_pps {real},
    derived_setpoint_pps {real},
    wanted_state TEXT,
    wanted_setpoint_pps {real},
    punish_level INTEGER NOT NULL DEFAULT 0,
    punish_bad_since_s {real},
    punish_good_since_s {real},
    punish_base_pps {real},
    PRIMARY KEY (router, name)
);
CREATE TABLE IF NOT EXISTS actions (
    id {autoid},
    t_unix_s {real} NOT NULL,
    kind TEXT NOT NULL,
    actor TEXT NOT NULL,
    router TEXT,
    vr TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_router ON actions(router, vr);
CREATE INDEX IF NOT EXISTS actions_kind ON actions(kind);
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)
"""),
    # 2: the filters' indexes (GET /vrs?network=, GET /routers?status=), and the leadership record
    # (epoch: incremented at every hand-over; the engine's writes are fenced on it).
    (2, """
CREATE INDEX IF NOT EXISTS vrs_network ON vrs(network);
CREATE INDEX IF NOT EXISTS routers_status ON routers(status);
INSERT INTO meta (key, value) VALUES ('leader_epoch', '0');
INSERT INTO meta (key, value) VALUES ('leader', '')
"""),
    # 3: the daemon's "setpoint out of reach" flag of each VR (cap_max, cap_min or null).
    (3, """
ALTER TABLE vrs ADD COLUMN saturated TEXT
"""),
    # 4: the daemon's PUB (samples) endpoint of each router, optional (null: measurements by ``list``).
    (4, """
ALTER TABLE routers ADD COLUMN pub_endpoint TEXT
"""),
    # 5: a router's revision, incremented by every transaction that writes its VRs' rows or its policy
    # state (the API's and the engine's): the engine keeps its VRs' rows in memory while it is unchanged.
    (5, """
ALTER TABLE routers ADD COLUMN rev INTEGER NOT NULL DEFAULT 0
"""),
    # 6: the forwarded rate has one name everywhere, the daemon's wire's (docs/design/names.md).
    (6, """
ALTER TABLE vrs RENAME COLUMN measured_pps TO forwarded_pps
"""),
    # 7: the punishment ladder's last resort, turning a misbehaving VR off, enabled per network (issue 48).
    (7, """
ALTER TABLE networks ADD COLUMN punish_vr_off INTEGER NOT NULL DEFAULT 0
"""),
    # 8: the router list's generation (``meta.routers_gen``), incremented by triggers in the same transaction
    # as any change to what the engine reads of the routers (:meth:`Store.engine_routers`: a router added,
    # deleted, removed or registered again, its endpoints, key, capacity or control mode written), whoever
    # writes it: the engine reads the list again only when the generation moved.  Per dialect (the
    # triggers' bodies); a statement ends with a semicolon at the end of its line.
    (8, {
        "sqlite": """
INSERT INTO meta (key, value) VALUES ('routers_gen', '0');
CREATE TRIGGER routers_gen_insert AFTER INSERT ON routers BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routers_gen'; END;
CREATE TRIGGER routers_gen_delete AFTER DELETE ON routers BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routers_gen'; END;
CREATE TRIGGER routers_gen_update AFTER UPDATE OF name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint ON routers BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routers_gen'; END;
CREATE TRIGGER routers_gen_status AFTER UPDATE OF status ON routers WHEN (OLD.status = 'removed') IS NOT (NEW.status = 'removed') BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'routers_gen'; END
""",
        "postgresql": """
INSERT INTO meta (key, value) VALUES ('routers_gen', '0');
CREATE OR REPLACE FUNCTION xtc_routers_gen() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'routers_gen'; RETURN NULL; END $$;
CREATE TRIGGER routers_gen_insert_delete AFTER INSERT OR DELETE ON routers FOR EACH ROW EXECUTE FUNCTION xtc_routers_gen();
CREATE TRIGGER routers_gen_update AFTER UPDATE OF name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint ON routers FOR EACH ROW EXECUTE FUNCTION xtc_routers_gen();
CREATE TRIGGER routers_gen_status AFTER UPDATE OF status ON routers FOR EACH ROW WHEN ((OLD.status = 'removed') IS DISTINCT FROM (NEW.status = 'removed')) EXECUTE FUNCTION xtc_routers_gen()
""",
    }),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]

_DIALECT = {
    "sqlite": {"real": "REAL", "autoid": "INTEGER PRIMARY KEY AUTOINCREMENT"},
    "postgresql": {"real": "DOUBLE PRECISION", "autoid": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"},
}


def parse_db_url(url: str) -> str:
    """The database a URL names.

    ``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs.db`` -> ``/abs.db``; ``sqlite://`` ->
    ``:memory:``; ``postgresql://[user[:password]@][host][:port]/dbname[?host=/socket/dir&...]`` ->
    the URL itself (a libpq connection URI, checked).
    """
    if isinstance(url, str) and url.startswith("postgresql://"):
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # pragma: no cover - the policer extra installs it
            raise StoreError("a postgresql:// URL needs psycopg 3 (pip install 'xtc[policer]')") from None
        try:
            d = conninfo_to_dict(url)
        except Exception as e:
            raise StoreError(f"invalid PostgreSQL URL {url!r}: {e}") from None
        if not d.get("dbname"):
            raise StoreError(f"PostgreSQL URL must name a database (postgresql://user@/dbname?host=/run/postgresql), got {url!r}")
        return url
    if not isinstance(url, str) or not url.startswith("sqlite://"):
        raise StoreError(f"database URL must start with sqlite:// or postgresql://, got {url!r}")
    rest = url[len("sqlite://"):]
    if rest == "":
        return ":memory:"
    if not rest.startswith("/") or rest == "/":
        raise StoreError(f"database URL must be sqlite:///<path> or sqlite://, got {url!r}")
    return rest[1:]


def _statements(ddl: str | dict[str, str], dialect: str) -> list[str]:
    """A migration's statements for ``dialect``: split at the semicolons that end a line."""
    text = ddl[dialect] if isinstance(ddl, dict) else ddl.format(**_DIALECT[dialect])
    return [s.strip() for s in re.split(r";[ \t]*(?:\n|$)", text) if s.strip()]


class Conn:
    """One connection inside a transaction: ``execute(sql with ?, args)`` -> a cursor (rows by column name)."""

    __slots__ = ("raw", "pg")
    _pg_sql: dict[str, str] = {}
    _bulk: dict[tuple[str, str, str, str], tuple[int, str, str]] = {}

    def __init__(self, raw: Any, pg: bool):
        self.raw, self.pg = raw, pg

    def execute(self, sql: str, args: tuple | list = ()) -> Any:
        if self.pg:
            q = Conn._pg_sql.get(sql)
            if q is None:
                q = Conn._pg_sql[sql] = sql.replace("?", "%s")
            return self.raw.execute(q, args)
        return self.raw.execute(sql, args)

    def tuples(self, sql: str, args: tuple | list = ()) -> list[tuple]:
        """The rows of a query as plain tuples, in the order of its columns (no per-row mapping: the
        engine's reads of thousands of rows a second build what they need from these)."""
        if self.pg:
            from psycopg.rows import tuple_row

            q = Conn._pg_sql.get(sql)
            if q is None:
                q = Conn._pg_sql[sql] = sql.replace("?", "%s")
            with self.raw.cursor(row_factory=tuple_row) as cur:
                return cur.execute(q, args).fetchall()
        cur = self.raw.cursor()
        cur.row_factory = None
        return cur.execute(sql, args).fetchall()

    def executemany(self, sql: str, rows: list[tuple] | list[list]) -> None:
        """One statement for many parameter rows (psycopg: pipelined; sqlite3: one prepared statement)."""
        if not rows:
            return
        if self.pg:
            q = Conn._pg_sql.get(sql)
            if q is None:
                q = Conn._pg_sql[sql] = sql.replace("?", "%s")
            with self.raw.cursor() as cur:
                cur.executemany(q, rows)
            return
        self.raw.executemany(sql, rows)

    def update_many(self, table: str, columns: str, types: str, rows: list[tuple] | list[list],
                    also: str = "") -> None:
        """``UPDATE table SET c1=?, ..., ck=? [, also] WHERE k1=? AND ...`` for many rows.

        ``columns``: ``"c1 c2 ... | k1 k2"``, the SET columns then the key columns, each row's values in
        that order; ``types``: one letter a column (``r`` real, ``i`` integer, ``t`` text); ``also``: a
        SET expression of the row's own columns (``rev=rev+1``).  PostgreSQL: one statement over
        arrays (``UPDATE ... FROM unnest(...)``), one round trip and one plan for the whole batch
        instead of a statement a row, when no key repeats (a repeated key falls back to one
        statement a row, applied in order); SQLite: one prepared statement, ``executemany``.
        """
        if not rows:
            return
        nset, one, bulk = Conn._bulk_sql(table, columns, types, also)
        if self.pg and len({tuple(r[nset:]) for r in rows}) == len(rows):
            # An array holds one type: a real column's ints become floats (psycopg refuses mixed lists),
            # an integer column's bools ints (a binary bool[] has no cast to int8[]).
            self.raw.execute(bulk, [[None if x is None else float(x) for x in col] if t == "r"
                                    else [None if x is None else int(x) for x in col] if t == "i" else list(col)
                                    for t, col in zip(types, zip(*rows))])
            return
        self.executemany(one, rows)

    @staticmethod
    def _bulk_sql(table: str, columns: str, types: str, also: str) -> tuple[int, str, str]:
        """:meth:`update_many`'s statements (made once): the SET columns' count, the one-row statement, and
        PostgreSQL's one statement over arrays."""
        spec = (table, columns, types, also)
        got = Conn._bulk.get(spec)
        if got is None:
            sets, keys = (part.split() for part in columns.split("|"))
            if len(types) != len(sets) + len(keys):
                raise ValueError(f"update_many: {len(types)} types for {len(sets) + len(keys)} columns")
            extra = [also] if also else []
            one = (f"UPDATE {table} SET " + ", ".join([f"{c}=?" for c in sets] + extra)
                   + " WHERE " + " AND ".join(f"{c}=?" for c in keys))
            # Binary parameters: psycopg's text form of a list escapes every element in Python (3x the
            # client's CPU of the binary form; docs/results/2026-11-26-policer/policer.md).
            arrays = ", ".join(f"%b::{_PG_ARRAY[t]}[]" for t in types)
            bulk = (f"UPDATE {table} SET " + ", ".join([f"{c}=u.c{i}" for i, c in enumerate(sets)] + extra)
                    + f" FROM unnest({arrays}) AS u({', '.join(f'c{i}' for i in range(len(types)))})"
                    + " WHERE " + " AND ".join(f"{table}.{c}=u.c{len(sets) + i}" for i, c in enumerate(keys)))
            got = Conn._bulk[spec] = (len(sets), one, bulk)
        return got

    def update_columns(self, table: str, columns: str, types: str, cols: list[list[Any]]) -> None:
        """:meth:`update_many` given a list per column (as gathered from arrays: no tuple a row to build
        on PostgreSQL, whose one statement takes the columns as they are), keys that do not repeat; a
        ``r`` column's values must be floats or None, an ``i`` column's ints or None."""
        if not cols or not cols[0]:
            return
        if not self.pg:
            self.update_many(table, columns, types, list(zip(*cols)))
            return
        self.raw.execute(Conn._bulk_sql(table, columns, types, "")[2], cols)


_PG_ARRAY = {"r": "float8", "i": "int8", "t": "text"}


class Database:
    """What the store needs of a database: transactions, reads, migrations."""

    dialect = ""
    #: When set: a lock that, taken without waiting, lets the caller run :meth:`read` on its own
    #: thread at once (the API's event loop does); None: reads belong in a worker thread.
    inline_lock: Any = None

    def tx(self) -> Any:  # a context manager yielding a Conn
        raise NotImplementedError

    def read(self, sql: str, args: tuple | list = (), tuples: bool = False) -> list[Any]:
        """The rows of a query outside a transaction: mappings of their columns, or with ``tuples`` plain
        tuples in the order of its columns (:meth:`Conn.tuples`: no mapping a row, for pages of them)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def migrate(self, what: str) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION` (one transaction); refuse a newer one."""
        with self.tx() as db:
            if self.dialect == "postgresql":
                db.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK_KEY,))
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = 0 if row is None else int(row["value"])
            if version > SCHEMA_VERSION:
                raise StoreError(f"database {what} has schema version {version}, newer than this policer's"
                                 f" {SCHEMA_VERSION}; upgrade the policer")
            for v, ddl in MIGRATIONS:
                if v > version:
                    for stmt in _statements(ddl, self.dialect):
                        db.execute(stmt)
            if row is None:
                db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif version != SCHEMA_VERSION:
                db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


#: Longest wait for another process's SQLite write lock, seconds.
SQLITE_BUSY_TIMEOUT_S = 10.0


class SqliteDatabase(Database):
    """A sqlite3 connection for the transactions under a lock (WAL, foreign keys on), and one for the
    reads under a lock of its own.

    Several processes share the file (the API's and the engine's): a write transaction waits for
    another's lock by retrying every 0.1-1 ms, for up to :data:`SQLITE_BUSY_TIMEOUT_S`.  Not SQLite's
    own busy timeout: Debian's library (3.40) behaves as one built without ``usleep``, whose busy
    handler sleeps a whole second between attempts, which stalled the API's writes for 1-2 s behind
    the engine's short transactions.

    A read outside a transaction of its thread takes the read connection: in WAL a reader neither waits
    for a writer nor sees its transaction before the commit, so a read never waits behind this
    process's write transaction (which may itself be waiting for the engine's write lock), as on
    PostgreSQL, and the API reads on its event loop (:attr:`inline_lock`) while a write runs in a
    worker thread.  A read inside a transaction of its thread takes the transaction's connection and
    sees the transaction.  An in-memory database (``:memory:``) has one connection for both.
    """

    dialect = "sqlite"

    def __init__(self, path: str):
        self.db = self._connect(path, writer=True)
        self.lock = threading.RLock()
        self._in_tx = threading.local()
        self._at_once = threading.local()
        if path == ":memory:" or path.startswith("file:"):  # a second connection could be another database
            self.rdb, self.read_lock = self.db, self.lock
        else:
            try:
                self.rdb = self._connect(path, writer=False)
            except StoreError:
                self.db.close()
                raise
            self.read_lock = threading.RLock()
        self.inline_lock = self.read_lock
        self.conn = Conn(self.db, False)

    @staticmethod
    def _connect(path: str, writer: bool) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10.0)
            db.row_factory = sqlite3.Row
            if writer:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA busy_timeout=0")  # SQLITE_BUSY at once; _busy_retry waits
            return db
        except sqlite3.Error as e:
            raise StoreError(f"cannot open database {path}: {e}") from None

    @staticmethod
    def _busy_retry(fn: Any) -> Any:
        deadline, delay_s = 0.0, 0.0001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                now = time.monotonic()
                if not deadline:
                    deadline = now + SQLITE_BUSY_TIMEOUT_S
                elif now > deadline:
                    raise
                time.sleep(delay_s)
                delay_s = min(2 * delay_s, 0.001)

    @contextmanager
    def no_wait(self) -> Iterator[None]:
        """On this thread, the next transaction (:meth:`tx`) begins only if it can at once: this process's
        transaction lock and SQLite's write lock free, else :class:`WouldWait` before anything is written.
        The transactions after it in the block wait as usual (the API's event loop runs a write this way,
        and hands it to a thread when it would wait)."""
        self._at_once.on = True
        try:
            yield
        finally:
            self._at_once.on = False

    @contextmanager
    def tx(self) -> Iterator[Conn]:
        at_once = getattr(self._at_once, "on", False)
        if at_once:
            self._at_once.on = False
            if not self.lock.acquire(blocking=False):
                raise WouldWait
        else:
            self.lock.acquire()
        try:
            if at_once:
                try:
                    self.db.execute("BEGIN IMMEDIATE")  # busy_timeout 0: SQLITE_BUSY at once
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) and "busy" not in str(e):
                        raise
                    raise WouldWait from None
            else:
                self._busy_retry(lambda: self.db.execute("BEGIN IMMEDIATE"))
            self._in_tx.on = True
            try:
                yield self.conn
            except sqlite3.IntegrityError as e:
                self.db.execute("ROLLBACK")
                raise Conflict(str(e)) from None
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            finally:
                self._in_tx.on = False
            self._busy_retry(lambda: self.db.execute("COMMIT"))
        finally:
            self.lock.release()

    def read(self, sql: str, args: tuple | list = (), tuples: bool = False) -> list[Any]:
        if getattr(self._in_tx, "on", False):  # inside this thread's transaction: what it sees
            lock, db = self.lock, self.db
        else:
            lock, db = self.read_lock, self.rdb
        with lock:
            if tuples:
                return self._busy_retry(lambda: Conn(db, False).tuples(sql, args))
            return self._busy_retry(lambda: db.execute(sql, args).fetchall())

    def close(self) -> None:
        with self.lock, self.read_lock:
            self.db.close()
            if self.rdb is not self.db:
                self.rdb.close()


#: After a failed connection of the read connection, seconds before it is tried again.
READER_RETRY_S = 1.0


def _is_local_socket(url: str) -> bool:
    """True when a libpq URL reaches its server over a unix socket on this machine (no ``host`` or a
    ``host`` that is a directory path; libpq's default is the local socket)."""
    from psycopg.conninfo import conninfo_to_dict

    hosts = str(conninfo_to_dict(url).get("host") or "")
    return all(h.startswith("/") or h.startswith("@") for h in hosts.split(",")) if hosts else True


class PgDatabase(Database):
    """A psycopg 3 connection pool; every transaction takes one connection.

    Reads take the process's own read connection when it is free at once (one round trip, no pool
    bookkeeping), else one from the pool.  When the server is on this machine's unix socket
    (:attr:`inline_lock` set), the API runs such reads on its event loop, as it does on SQLite: the
    round trip (about 25 us here) costs less than the hand-over to a thread and back (0.3-0.4 ms of
    CPU per request measured).  Over TCP a round trip is a network RTT that would hold the event
    loop, so reads stay in the threadpool there (:attr:`inline_lock` None).
    """

    dialect = "postgresql"

    def __init__(self, url: str, min_size: int = 2, max_size: int = 16):
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self._psycopg = psycopg
        self._dict_row = dict_row
        self.url = url
        #: Held while the read connection is in use (reentrant: the API holds it around a handler).
        self.lock = threading.RLock()
        self.inline_lock: threading.RLock | None = self.lock if _is_local_socket(url) else None
        self._read_conn: Any = None
        self._reader_retry_at = 0.0
        try:
            self.pool = ConnectionPool(url, min_size=min_size, max_size=max_size, open=True, timeout=10.0,
                                       kwargs={"autocommit": True, "row_factory": dict_row}, name="xtc-policer")
            self.pool.wait(timeout=10.0)
        except Exception as e:
            raise StoreError(f"cannot open database {_redact(url)}: {e}") from None

    @contextmanager
    def tx(self) -> Iterator[Conn]:
        psycopg = self._psycopg
        with self.pool.connection() as c:
            try:
                with c.transaction():
                    yield Conn(c, True)
            except psycopg.IntegrityError as e:
                raise Conflict(str(e).splitlines()[0]) from None

    def read(self, sql: str, args: tuple | list = (), tuples: bool = False) -> list[Any]:
        def rows(c: Any) -> list[Any]:
            return Conn(c, True).tuples(sql, args) if tuples else Conn(c, True).execute(sql, args).fetchall()

        if self.lock.acquire(blocking=False):
            try:
                c = self._read_conn
                if c is None or c.closed:
                    c = self._read_conn = (self._connect_reader() if time.monotonic() >= self._reader_retry_at
                                           else None)
                if c is not None:
                    try:
                        return rows(c)
                    except self._psycopg.OperationalError:
                        self._drop_reader()  # the session is gone: the pool answers (and reports)
            finally:
                self.lock.release()
        with self.pool.connection() as c:
            return rows(c)

    def _connect_reader(self) -> Any:
        try:
            return self._psycopg.connect(self.url, autocommit=True, row_factory=self._dict_row, connect_timeout=5,
                                         application_name="xtc-policer-reader")
        except self._psycopg.Error:
            self._reader_retry_at = time.monotonic() + READER_RETRY_S
            return None  # no read connection for now: the pool's connections serve (and report) reads

    def _drop_reader(self) -> None:
        c, self._read_conn = self._read_conn, None
        if c is not None:
            try:
                c.close()
            except Exception:
                pass

    def close(self) -> None:
        with self.lock:
            self._drop_reader()
        self.pool.close()


def _redact(url: str) -> str:
    return re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url)


def open_database(url: str) -> Database:
    """The database for a URL (see :func:`parse_db_url`), not yet migrated."""
    target = parse_db_url(url)
    if url.startswith("postgresql://"):
        return PgDatabase(target)
    return SqliteDatabase(target)


class LeaderLock:
    """PostgreSQL leadership: a session-level advisory lock held on a dedicated connection.

    The lock lives as long as that connection's server session: when the holder dies (even by
    SIGKILL) the server ends the session and the lock is free for the next :meth:`try_acquire`.  TCP
    keepalives (2 s idle, 1 s interval, 3 probes) bound how long a vanished host holds it.

    ``shard`` ``(i, n)``: the lock of engine shard ``i`` of ``n`` (``engine.shards``; ``(0, 1)``, the
    one engine, keeps :data:`LEADER_LOCK_KEY`).  Policers that split the routers differently must
    never command at once (a router would be in a shard of each), so a lock is taken only while no
    other session holds a leader lock of another number of shards (read from ``pg_locks``, the check
    and the take serialised by a transaction lock); otherwise :meth:`try_acquire` returns False and
    :attr:`conflict` says why.
    """

    def __init__(self, url: str, shard: tuple[int, int] = (0, 1)):
        self.url = url
        self.shard = shard
        self.conn: Any = None
        self.held = False
        #: Why the last attempt was refused although the lock itself may have been free, or None.
        self.conflict: str | None = None

    def try_acquire(self) -> bool:
        """Try once (non-blocking); True if this process now holds the lock."""
        import psycopg

        if self.held:
            return True
        i, n = self.shard
        hi, lo = LEADER_LOCK_KEY >> 32, LEADER_LOCK_KEY & 0xFFFFFFFF
        # Another layout's leader locks: the one engine's 64-bit key, or a shard key of another n.
        other = ("(objsubid = 2 AND classid::bigint = %(ns)s AND objid::bigint <> 0)" if n == 1 else
                 "((objsubid = 1 AND classid::bigint = %(hi)s AND objid::bigint = %(lo)s) OR "
                 "(objsubid = 2 AND classid::bigint = %(ns)s AND objid::bigint <> 0 AND objid::bigint / 65536 <> %(n)s))")
        args = {"ns": SHARD_LOCK_NS, "hi": hi, "lo": lo, "n": n}
        try:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5, keepalives=1,
                                            keepalives_idle=2, keepalives_interval=1, keepalives_count=3,
                                            application_name="xtc-policer-leader")
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SHARD_LOCK_NS,))
                found = self.conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                                          "AND pid <> pg_backend_pid() AND " + other, args).fetchone()[0]
                if found:
                    self.conflict = (f"another policer leads with a different engine.shards (this one: {n}); "
                                     "every policer on one database must give the same number")
                    return False
                self.conflict = None
                if n == 1:
                    row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (LEADER_LOCK_KEY,)).fetchone()
                else:
                    row = self.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (SHARD_LOCK_NS, n * 65536 + i)).fetchone()
                self.held = bool(row[0])
        except psycopg.Error:
            self._drop()
            return False
        return self.held

    def alive(self) -> bool:
        """True while the lock is still held (the session answers)."""
        import psycopg

        if not self.held:
            return False
        try:
            self.conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            self._drop()
            return False

    def _drop(self) -> None:
        self.held = False
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def close(self) -> None:
        """Release (closing the session frees the lock)."""
        self._drop()
