"""SQLite: the reads of a process have a connection of their own (xtc.policer.db.SqliteDatabase), as on
PostgreSQL, so that a read never waits behind this process's write transaction (which may itself wait
for another process's write lock: the engine's) and sees what is committed."""

from __future__ import annotations

import threading
import time
from typing import Any

from xtc.policer.db import SqliteDatabase, open_database


def _db(tmp_path: Any) -> SqliteDatabase:
    db = open_database(f"sqlite:///{tmp_path / 'p.db'}")
    assert isinstance(db, SqliteDatabase)
    with db.tx() as c:
        c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
        c.execute("INSERT INTO t VALUES ('a', 1)")
    return db


def test_a_read_does_not_wait_for_a_write_transaction_and_sees_only_commits(tmp_path: Any) -> None:
    db = _db(tmp_path)
    in_tx, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.tx() as c:
            c.execute("UPDATE t SET v = 2 WHERE k = 'a'")
            in_tx.set()
            release.wait(2)

    t = threading.Thread(target=writer)
    t.start()
    assert in_tx.wait(5)
    t0 = time.monotonic()
    rows = db.read("SELECT v FROM t WHERE k = 'a'")
    waited_s = time.monotonic() - t0
    release.set()
    t.join(5)
    assert waited_s < 1.0, f"the read waited {waited_s:.2f} s for the write transaction"
    assert rows[0]["v"] == 1  # the committed value, not the transaction's
    assert db.read("SELECT v FROM t WHERE k = 'a'")[0]["v"] == 2  # the commit, seen by the next read at once
    # The event loop may read at once while a write transaction runs in another thread.
    in_tx.clear()
    release.clear()
    t = threading.Thread(target=writer)
    t.start()
    assert in_tx.wait(5)
    assert db.inline_lock.acquire(blocking=False)
    db.inline_lock.release()
    release.set()
    t.join(5)
    db.close()


def test_a_read_inside_a_write_transaction_of_its_thread_sees_that_transaction(tmp_path: Any) -> None:
    db = _db(tmp_path)
    with db.tx() as c:
        c.execute("UPDATE t SET v = 3 WHERE k = 'a'")
        assert db.read("SELECT v FROM t WHERE k = 'a'")[0]["v"] == 3
        c.execute("INSERT INTO t VALUES ('b', 4)")
        assert [r["k"] for r in db.read("SELECT k FROM t ORDER BY k")] == ["a", "b"]
    assert db.read("SELECT COUNT(*) AS n FROM t")[0]["n"] == 2
    try:
        with db.tx() as c:
            c.execute("INSERT INTO t VALUES ('c', 5)")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert db.read("SELECT COUNT(*) AS n FROM t")[0]["n"] == 2  # nothing of a rolled-back transaction
    db.close()


def test_an_in_memory_database_reads_on_its_one_connection() -> None:
    db = open_database("sqlite://")
    with db.tx() as c:
        c.execute("CREATE TABLE t (k TEXT)")
        c.execute("INSERT INTO t VALUES ('a')")
    assert [r["k"] for r in db.read("SELECT k FROM t")] == ["a"]  # a second connection would be another database
    db.close()
