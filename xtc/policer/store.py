"""The policer's state, in SQLite (embedded default) or PostgreSQL: the only module that queries it.

Why one file: :class:`Store` is the one door to the database, and its methods share what makes it
one: every public method is one transaction on the same connection, fenced by the same leadership
check, over tables that refer to one another (a VR's row names its router and network, every change
writes an audit row); the connection, the dialects and the migrations are :mod:`xtc.policer.db`'s.

Database URLs follow SQLAlchemy's spelling: ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``sqlite://`` (in memory, for tests), and
``postgresql://user@/dbname?host=/run/postgresql`` (psycopg 3; see :mod:`xtc.policer.db`).  A new
SQLite file is created with mode 0600 (it holds the audit log), and so are its -wal and -shm files;
it is opened in WAL mode so that readers do not wait for the policer's periodic writes.  Every
public method is one transaction (a write's reply is read in its own transaction: what that write
made, never a later writer's); the schema is migrated at open (:meth:`xtc.policer.db.Database.migrate`).

Tables: ``routers`` (a host and its daemon; a router that goes away is marked, never forgotten),
``vrs`` (as the daemons report them, plus the policer's per-VR state), ``networks`` (with their SLA),
``actions`` (the audit log), ``settings`` (the policies' switches and parameters).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Callable, NamedTuple

import orjson

from .live import LiveTable
from .rows import SampleRows
from .liveshare import LiveReader, LiveView
from .db import SCHEMA_VERSION, Conflict, Conn, NotFound, NotLeader, StoreError, open_database, parse_db_url
from .planner import Settings
from .policy import POLICIES, ActivationState, MisbehaviourState

#: The daemon's values of a VR's ``saturated`` flag (:class:`xtc.daemon.api.Instance`).
SATURATION = ("cap_max", "cap_min", "cap_slack")

__all__ = ["SATURATION", "ExchangeOutcome", "Store", "StoreError", "NotFound", "Conflict", "NotLeader", "parse_db_url", "SCHEMA_VERSION"]

#: The ``routers`` columns a router's answer shows, in its order (``control_on`` the 10th, a bool there).
_ROUTER_COLUMNS = ("name", "endpoint", "capacity_pps", "control_mode", "curve_server_key", "pub_endpoint", "status",
                   "last_seen_unix_s", "last_error", "control_on", "demand_pps", "created_unix_s")
#: The ``vrs`` columns a VR's answer shows, in its order (``present`` the 4th, a bool there), and the names
#: the answer gives them.
_VR_COLUMNS = ("router", "name", "network", "present", "state", "daemon_setpoint_pps", "forwarded_pps", "offered_pps",
               "cap_percent", "saturated", "last_seen_unix_s", "manual_setpoint_pps", "derived_setpoint_pps",
               "wanted_state", "wanted_setpoint_pps", "punish_level")
_VR_FIELDS = ("router", "name", "network", "present", "state", "setpoint_pps", "forwarded_pps", "offered_pps",
              "cap_percent", "saturated", "last_seen_unix_s", "manual_setpoint_pps", "derived_setpoint_pps",
              "wanted_state", "wanted_setpoint_pps", "punishment_level")


#: 20 digits in a row: in an audit record's detail (``json.dumps``: a float has at most 17), an integer that may
#: not fit in 64 bits, which orjson would read as a float.
_LONG_DIGITS = re.compile(r"\d{20}")


def _detail(text: str) -> Any:
    """An audit record's detail, as :meth:`Store._audit` wrote it (``json.dumps``), read by orjson (a page of
    20 records' details in about half the standard library's time); the standard library reads what orjson
    would not read the same: a detail with 20 digits in a row (an integer beyond 64 bits, which orjson makes
    a float) or one orjson refuses (a lone surrogate escaped in a string)."""
    if _LONG_DIGITS.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _f(v: Any) -> float | None:
    """A finite float or None (SQLite has no NaN; the API never returns one)."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _measured(vrs: Any, now: float, router: str) -> list[tuple]:
    """A measurement's VRs as the ``vrs`` columns :meth:`Store.record_outcomes` writes: ``(present, state,
    daemon_setpoint_pps, forwarded_pps, offered_pps, cap_percent, saturated, last_seen_unix_s, router, name)``
    each.  A sample's columns (:class:`~xtc.policer.rows.SampleRows`, validated: finite numbers or None, a
    known flag) are zipped as they are; a ``list`` reply's dictionaries are read VR by VR."""
    if isinstance(vrs, SampleRows):
        k = len(vrs.names)
        return list(zip(map(int, vrs.present), vrs.state, vrs.setpoint_pps, vrs.forwarded_pps, vrs.offered_pps,
                        vrs.cap_percent, vrs.saturated, repeat(now, k), repeat(router, k), vrs.names))
    out = []
    for v in vrs:
        sat = v.get("saturated")
        out.append((int(bool(v.get("present", True))), v.get("state", "inactive"), _f(v.get("setpoint_pps")),
                    _f(v.get("forwarded_pps")), _f(v.get("offered_pps")), _f(v.get("cap_percent")),
                    sat if sat in SATURATION else None, now, router, v["vr"]))
    return out


def _measurements_moved(rows: dict[str, VrRow], c: SampleRows, live_names: tuple[str, ...] | None = None,
                        last: SampleRows | None = None) -> dict[str, VrRow] | None:
    """A router's kept rows with a sample's measurements, if the sample lists the rows' VRs (all but ones
    already absent), each as present or absent, in the state and at the setpoint its row holds (then
    nothing is written or audited now: :meth:`Store.record_outcomes` would find no change); else None.  The rows are not changed: those
    whose measurements moved are new dictionaries in a new mapping (the very ``rows`` if none moved).

    When the sample names the very VRs the live table holds for the router (``live_names``, in their
    order), nothing is copied: the very ``rows`` are returned, and those VRs' measurements are the live
    table's alone (the rows' own may be older: :meth:`Store.plan_states`).  ``last``: the sample last
    recorded over these very rows (they hold its VRs' presence, states and setpoints); one of the same VRs
    with the same of those is compared column by column, not VR by VR."""
    if (last is not None and live_names is not None and c.names == live_names and last.names == live_names
            and c.present == last.present and c.state == last.state and c.same_numbers(last, (0,))):
        return rows
    if len(rows) != len(c.names):
        listed = frozenset(c.names)
        if any(r.present for n, r in rows.items() if n not in listed):
            return None  # a VR present before is not listed: it vanished
    if live_names is not None and c.names == live_names:
        for n, p, s, sp in zip(c.names, c.present, c.state, c.setpoint_pps):
            old = rows.get(n)
            if old is None or old.present != p or old.state != s or old.daemon_setpoint_pps != sp:
                return None
        return rows
    new = None
    for n, p, s, sp, f, o, sat in zip(c.names, c.present, c.state, c.setpoint_pps, c.forwarded_pps, c.offered_pps,
                                      c.saturated):
        old = rows.get(n)
        if old is None or old.present != p or old.state != s or old.daemon_setpoint_pps != sp:
            return None
        if old.forwarded_pps != f or old.offered_pps != o or old.saturated != sat:
            if new is None:
                new = dict(rows)
            new[n] = old._replace(forwarded_pps=f, offered_pps=o, saturated=sat)
    return rows if new is None else new


#: The words a VR's row holds in ``state`` and ``wanted_state``, one object each: the database gives a new
#: string per row read (about 55 bytes each), and the engine keeps its routers' rows.
_WORDS = {w: w for w in ("inactive", "active", "paused")}


class VrRow(NamedTuple):
    """A VR's row as :meth:`Store.router_states` gives it (the engine's plan inputs): the VR's own columns, then
    its network's SLA and whether its network lets the ladder turn a VR off (None: no network).  A tuple, not a
    dictionary: the engine keeps one per VR of its shard (80,000 at 5,000 routers), and a tuple of these 19
    fields takes 209 bytes against a dictionary's 472 (docs/design/policer-memory.md).  Never changed in place:
    a change is a new row (``_replace``)."""

    name: str
    present: int
    state: str
    daemon_setpoint_pps: float | None
    forwarded_pps: float | None
    offered_pps: float | None
    saturated: str | None
    manual_setpoint_pps: float | None
    derived_setpoint_pps: float | None
    wanted_state: str | None
    wanted_setpoint_pps: float | None
    punish_level: int
    punish_bad_since_s: float | None
    punish_good_since_s: float | None
    punish_base_pps: float | None
    sla_min_pps: float | None
    sla_max_pps: float | None
    sla_weight: float | None
    punish_vr_off: int | None


def _kept_row(values: tuple) -> VrRow:
    """A VR's row as :meth:`Store.plan_states` keeps it (:data:`STATE_COLS` from ``values``), its words shared and
    its name interned (one string for it in the samples' names, the kept row and the last ``list``)."""
    st, wanted = values[2], values[9]
    return VrRow(sys.intern(values[0]), values[1], _WORDS.get(st, st), *values[3:9], _WORDS.get(wanted, wanted), *values[10:])


#: The activation states without a timer (immutable: one object each for every router in them).
_STEADY = {False: ActivationState(False, None), True: ActivationState(True, None)}

#: Most names in one ``IN (...)`` list (SQLite allows 32766 parameters per statement, PostgreSQL 65535).
_IN_CHUNK = 500


def _chunks(names: list[str]) -> list[list[str]]:
    return [names[i:i + _IN_CHUNK] for i in range(0, len(names), _IN_CHUNK)]


def _real(v: Any) -> float | None:
    """A value as a REAL column gives it back (an int is stored as a float)."""
    return None if v is None else float(v)


#: The columns of a VR's row that :meth:`Store.router_states` gives (the engine's plan inputs): the VR's
#: own, then its network's SLA and whether its network lets the ladder turn a VR off (null: no network).
STATE_COLS: tuple[str, ...] = VrRow._fields
_NETWORK_COLS = ("sla_min_pps", "sla_max_pps", "sla_weight", "punish_vr_off")
_STATE_SQL = ("SELECT v.router, " + ", ".join(("n." if c in _NETWORK_COLS else "v.") + c for c in STATE_COLS)
              + " FROM vrs v LEFT JOIN networks n ON v.network = n.name WHERE v.router IN ({marks})")
#: The columns :meth:`Store.record_outcomes` writes from a measurement, and those :meth:`Store.save_plans` writes.
_MEASURED = ("present", "state", "daemon_setpoint_pps", "forwarded_pps", "offered_pps", "saturated")


@dataclass
class ExchangeOutcome:
    """What one exchange with a router's daemon gave, for :meth:`Store.record_outcomes`.

    Attributes
    ----------
    router : str
    status : str or None
        ``reachable`` (it answered: ``last_seen_unix_s`` is now), ``unreachable`` (with ``error``), or
        None (status unchanged).
    error : str or None
        The router's ``last_error`` (None when reachable).
    vrs : list of dict, optional
        The VRs of a ``list`` reply (validated instances), upserted.
    records : list of tuple
        ``(kind, vr, detail)`` audit records of the policer, written first (a router's command results).
    appeared, vanished : list of str
        Filled in by the store: VRs that appeared, disappeared with this poll.
    """

    router: str
    status: str | None
    error: str | None = None
    vrs: list[dict[str, Any]] | None = None
    records: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)
    appeared: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)


class Store:
    """The policer's database.

    Parameters
    ----------
    url : str
        See :func:`parse_db_url`.
    clock : callable
        Wall-clock time in seconds (timestamps of records).
    """

    def __init__(self, url: str, clock: Callable[[], float] = time.time):
        self.url = url
        self.path = parse_db_url(url)
        self.clock = clock
        if url.startswith("sqlite://") and self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise StoreError(f"database directory {parent} does not exist")
            try:  # created private (0600); SQLite gives its -wal and -shm files the same mode
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            except OSError as e:
                raise StoreError(f"cannot open database {self.path}: {e.strerror}") from None
        self.db = open_database(url)
        self.dialect = self.db.dialect
        #: The leadership epoch this process's engine writes under (PostgreSQL, once it leads); None: unfenced.
        self.fence_epoch: int | None = None
        self._epoch_key = "leader_epoch"  # its row in meta (a shard's own: :meth:`take_leadership`)
        #: router -> (rev, its VRs' rows as :meth:`router_states` gives them): the rows the engine's
        #: transactions last read or wrote, valid while the router's ``rev`` in the database is that one
        #: (every transaction that writes a router's VRs or policy state increments it; this store's
        #: engine writes keep the entry up to date).  The rows are never changed in place (a write makes
        #: new ones), so what :meth:`router_states` returned stays as it was.
        self._states: dict[str, tuple[int, dict[str, VrRow]]] = {}
        #: router -> (the VRs of its last measurement recorded, the kept rows that left): the same measurement
        #: (the very list: a sample stream's unchanged message) over those rows is recorded from these, without
        #: comparing each VR again (its live values are already in :attr:`_live`).
        self._recorded: dict[str, tuple[list[dict[str, Any]], dict[str, VrRow]]] = {}
        #: (the router generation, the list) of the last full read of :meth:`engine_routers`, and how many
        #: such reads were made (the others returned that list).
        self._engine_routers: tuple[str, list[dict[str, Any]]] | None = None
        self.engine_routers_reads = 0
        #: router -> (its activation state, its revision) as :meth:`record_outcomes` last left them (its
        #: transaction read them; :meth:`plan_states` with ``recorded``).
        self._recorded_heads: dict[str, tuple[ActivationState, int]] = {}
        #: The live measurements of the routers this store's engine measures (numpy arrays, a row per VR,
        #: :class:`~xtc.policer.live.LiveTable`), written to the database only by :meth:`snapshot` (a VR's
        #: discrete changes, its appearance and disappearance, and a router's status changes are written at
        #: once).  Empty in a process that measures nothing (the API's).
        self._live = LiveTable()
        #: In a process that measures nothing (the API's): the engines' published live values
        #: (:mod:`~xtc.policer.liveshare`), shown where fresh, the last snapshot's otherwise.
        self.live_source: LiveReader | None = None
        #: Routers measured since the last :meth:`snapshot` began, and those of the one under way.
        self._dirty: set[str] = set()
        self._snapshot_queue: list[str] = []
        #: Wall time of the last :meth:`snapshot` written (None: none yet).
        self.snapshot_unix_s: float | None = None
        try:
            self.db.migrate(self.path if self.dialect == "sqlite" else "(postgresql)")
        except StoreError:
            self.db.close()
            raise
        except Exception as e:
            self.db.close()
            raise StoreError(f"cannot open database: {e}") from None

    def close(self) -> None:
        self.db.close()

    # ----------------------------------------------------------------------------- plumbing
    def tx(self) -> Any:
        """A write transaction: a context manager yielding a :class:`~xtc.policer.db.Conn`."""
        return self.db.tx()

    def _read(self, sql: str, args: tuple | list = ()) -> list[Any]:
        return self.db.read(sql, args)

    def _page(self, sql: str, args: list[Any] | tuple, limit: int, offset: int) -> tuple[str, list[Any]]:
        """``sql`` with a page clause (``limit`` < 0: all; SQLite spells that LIMIT -1, PostgreSQL LIMIT ALL)."""
        if limit >= 0:
            return sql + " LIMIT ? OFFSET ?", [*args, limit, offset]
        return sql + (" LIMIT -1" if self.dialect == "sqlite" else " LIMIT ALL") + " OFFSET ?", [*args, offset]

    def _listing(self, sql: str, conds: list[str], args: list[Any], order_by: str, limit: int, offset: int,
                 row: Callable[[Any], dict[str, Any]],
                 live: Callable[[dict[str, Any], LiveTable | LiveView], dict[str, Any]],
                 live_page: Callable[[LiveView, list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
        """The rows of ``sql`` that meet all ``conds``, ordered by ``order_by`` and paged (see :meth:`_page`),
        each (a tuple of the columns ``sql`` selects: no mapping a row, a page's rows cost half as much
        CPU) made a dictionary by ``row`` and given its live values by ``live``, or in the API's process
        by ``live_page`` over the page in one pass (the live view read once)."""
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        rows = self.db.read(*self._page(f"{sql} ORDER BY {order_by}", args, limit, offset), tuples=True)
        items = list(map(row, rows))
        view = self._view()
        if isinstance(view, LiveView):
            live_page(view, items)
        elif view is not None:
            for item in items:
                live(item, view)
        return items

    def _audit(self, db: Conn, kind: str, actor: str, router: str | None, vr: str | None,
               detail: dict[str, Any]) -> None:
        db.execute(
            "INSERT INTO actions (t_unix_s, kind, actor, router, vr, detail) VALUES (?,?,?,?,?,?)",
            (self.clock(), kind, actor, router, vr, json.dumps(detail, allow_nan=False, default=str)),
        )

    def _audit_many(self, db: Conn, records: list[tuple[str, str, str | None, str | None, dict[str, Any]]]) -> None:
        """Append ``(kind, actor, router, vr, detail)`` records in their order, one statement."""
        t = self.clock()
        db.executemany("INSERT INTO actions (t_unix_s, kind, actor, router, vr, detail) VALUES (?,?,?,?,?,?)",
                       [(t, k, a, r, v, json.dumps(d, allow_nan=False, default=str)) for k, a, r, v, d in records])

    def audit(self, kind: str, actor: str, router: str | None = None, vr: str | None = None,
              detail: dict[str, Any] | None = None) -> None:
        """Append one record to the audit log."""
        with self.tx() as db:
            self._audit(db, kind, actor, router, vr, detail or {})

    # ------------------------------------------------------------------------------ routers
    @staticmethod
    def _router(r: Any) -> dict[str, Any]:
        """A router as the store gives it, from its row (a mapping of its columns)."""
        return Store._router_of(tuple(r[c] for c in _ROUTER_COLUMNS))

    @staticmethod
    def _router_of(t: tuple) -> dict[str, Any]:
        """A router as the store gives it, from the values of :data:`_ROUTER_COLUMNS` in their order."""
        d = dict(zip(_ROUTER_COLUMNS, t))
        d["control_on"] = bool(t[9])
        d["measured_from"] = "snapshot"
        return d

    def list_routers(self, include_removed: bool = True, status: str | None = None, limit: int = -1,
                     offset: int = 0) -> list[dict[str, Any]]:
        """Routers by name; ``status`` filters, ``limit`` (-1: all) and ``offset`` page."""
        sql, args = f"SELECT {', '.join(_ROUTER_COLUMNS)} FROM routers", []
        conds = []
        if not include_removed:
            conds.append("status != 'removed'")
        if status is not None:
            conds.append("status = ?")
            args.append(status)
        return self._listing(sql, conds, args, "name", limit, offset, self._router_of, self.live_router,
                             LiveView.merge_routers)

    def engine_routers(self, never_heard: bool = False) -> list[dict[str, Any]]:
        """The routers the engine polices (not removed), by name, with only the columns a policy cycle
        uses (``name``, ``endpoint``, ``capacity_pps``, ``control_mode``, ``curve_server_key``,
        ``pub_endpoint``).  Read every cycle, so not :meth:`list_routers`' whole rows: 5,000 routers
        take 9-11 ms of CPU a cycle this way, 18-21 ms as whole rows.

        Read again only when the database's router generation (``meta.routers_gen``, incremented by
        triggers in the transaction of any change to what this reads, whoever makes it: this store,
        another process's, plain SQL) moved since the last read; else the very list of that read is
        returned (one read of one row a cycle instead of the fleet's rows): the list and its
        dictionaries must not be changed.  The generation is read first, so the list kept is at least
        as new as the generation kept with it (each statement outside a transaction reads its own
        snapshot): a change committed in between is read once more at the next call, never missed.

        ``never_heard``: only those not heard from since their registration (status ``unknown``; read
        through the status index, between cycles), read every time."""
        cols = "SELECT name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint FROM routers"
        if never_heard:
            return self._engine_routers_of(self.db.read(f"{cols} WHERE status = 'unknown' ORDER BY name", tuples=True))
        gen = self.routers_generation()
        kept = self._engine_routers
        if kept is not None and kept[0] == gen:
            return kept[1]
        routers = self._engine_routers_of(self.db.read(f"{cols} WHERE status != 'removed' ORDER BY name", tuples=True))
        self._engine_routers = (gen, routers)
        self.engine_routers_reads += 1
        return routers

    def routers_generation(self) -> str:
        """The database's router generation (``meta.routers_gen``): it moves with every committed change to what
        :meth:`engine_routers` reads (a router registered, removed, deleted, its endpoints, key, capacity or
        control mode written), by any writer (triggers, in the writer's transaction)."""
        return str(self.db.read("SELECT value FROM meta WHERE key = 'routers_gen'", tuples=True)[0][0])

    @property
    def engine_routers_generation(self) -> str | None:
        """The router generation read just before :meth:`engine_routers`' list was last read (None: never)."""
        return None if self._engine_routers is None else self._engine_routers[0]

    @staticmethod
    def _engine_routers_of(rows: list[tuple]) -> list[dict[str, Any]]:
        return [{"name": r[0], "endpoint": r[1], "capacity_pps": r[2], "control_mode": r[3], "curve_server_key": r[4],
                 "pub_endpoint": r[5]} for r in rows]

    def router_census(self) -> tuple[int, list[str]]:
        """The number of routers not removed, and the names of the unreachable ones (by name)."""
        n = self._read("SELECT COUNT(*) AS n FROM routers WHERE status != 'removed'")[0]["n"]
        return int(n), [r["name"] for r in self._read("SELECT name FROM routers WHERE status = 'unreachable' ORDER BY name")]

    def get_router(self, name: str) -> dict[str, Any]:
        rows = self._read("SELECT * FROM routers WHERE name=?", (name,))
        if not rows:
            raise NotFound(f"no router named {name!r}")
        return self.live_router(self._router(rows[0]))

    def add_router(self, name: str, endpoint: str, capacity_pps: float, control_mode: str,
                   curve_server_key: str | None, actor: str, pub_endpoint: str | None = None) -> dict[str, Any]:
        with self.tx() as db:
            row = db.execute("SELECT status FROM routers WHERE name=?", (name,)).fetchone()
            if row is not None and row["status"] != "removed":
                raise Conflict(f"router {name!r} is already registered")
            if row is not None:  # a removed router registered again: keep its history
                db.execute(
                    "UPDATE routers SET endpoint=?, capacity_pps=?, control_mode=?, curve_server_key=?, pub_endpoint=?,"
                    " status='unknown', last_error=NULL, control_on=0, activation_pending_since_s=NULL, rev=rev+1"
                    " WHERE name=?",
                    (endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint, name),
                )
            else:
                db.execute(
                    "INSERT INTO routers (name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint,"
                    " created_unix_s) VALUES (?,?,?,?,?,?,?)",
                    (name, endpoint, capacity_pps, control_mode, curve_server_key, pub_endpoint, self.clock()),
                )
            self._audit(db, "router_registered", actor, name, None,
                        {"endpoint": endpoint, "capacity_pps": capacity_pps, "control_mode": control_mode,
                         "curve": curve_server_key is not None, "pub_endpoint": pub_endpoint})
            return self._router(db.execute("SELECT * FROM routers WHERE name=?", (name,)).fetchone())

    def update_router(self, name: str, changes: dict[str, Any], actor: str) -> dict[str, Any]:
        allowed = {"endpoint", "capacity_pps", "control_mode", "curve_server_key", "pub_endpoint"}
        assert set(changes) <= allowed, changes
        with self.tx() as db:
            row = db.execute("SELECT status FROM routers WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"no router named {name!r}")
            if row["status"] == "removed":
                raise Conflict(f"router {name!r} was removed; register it again")
            for k, v in changes.items():
                db.execute(f"UPDATE routers SET {k}=?, rev=rev+1 WHERE name=?", (v, name))
            if changes:
                shown = {k: (v if k != "curve_server_key" else v is not None) for k, v in changes.items()}
                self._audit(db, "router_updated", actor, name, None, shown)
            return self._router(db.execute("SELECT * FROM routers WHERE name=?", (name,)).fetchone())

    def remove_router(self, name: str, actor: str) -> dict[str, Any]:
        with self.tx() as db:
            row = db.execute("SELECT status FROM routers WHERE name=?", (name,)).fetchone()
            if row is None:
                raise NotFound(f"no router named {name!r}")
            if row["status"] != "removed":
                db.execute("UPDATE routers SET status='removed', control_on=0, rev=rev+1 WHERE name=?", (name,))
                db.execute("UPDATE vrs SET present=0 WHERE router=?", (name,))
                self._audit(db, "router_removed", actor, name, None, {})
            return self._router(db.execute("SELECT * FROM routers WHERE name=?", (name,)).fetchone())

    def set_router_status(self, name: str, status: str, error: str | None, seen: bool) -> str | None:
        """Record a poll's outcome; returns the previous status (None: no such router, or removed)."""
        assert seen == (status == "reachable"), (status, seen)
        return self.record_outcomes([ExchangeOutcome(name, status, error)])[name]

    # --------------------------------------------------------------------------------- vrs
    @staticmethod
    def _vr(r: Any) -> dict[str, Any]:
        """A VR as the store gives it, from its row (a mapping of its columns)."""
        return Store._vr_of(tuple(r[c] for c in _VR_COLUMNS))

    @staticmethod
    def _vr_of(t: tuple) -> dict[str, Any]:
        """A VR as the store gives it, from the values of :data:`_VR_COLUMNS` in their order."""
        d = dict(zip(_VR_FIELDS, t))
        d["present"] = bool(t[3])
        d["flagged"] = t[15] >= 3
        d["measured_from"] = "snapshot"
        return d

    def list_vrs(self, router: str | None = None, network: str | None = None, state: str | None = None,
                 flagged: bool | None = None, limit: int = -1, offset: int = 0,
                 with_setpoint: bool = False) -> list[dict[str, Any]]:
        """VRs by router and name; filters (``with_setpoint``: a manual or derived setpoint), then a page
        (``limit`` -1: all)."""
        sql, args = f"SELECT {', '.join(_VR_COLUMNS)} FROM vrs", []
        conds = []
        for col, val in (("router", router), ("network", network), ("state", state)):
            if val is not None:
                conds.append(f"{col}=?")
                args.append(val)
        if flagged is not None:
            conds.append("punish_level >= 3" if flagged else "punish_level < 3")
        if with_setpoint:
            conds.append("(manual_setpoint_pps IS NOT NULL OR derived_setpoint_pps IS NOT NULL)")
        return self._listing(sql, conds, args, "router, name", limit, offset, self._vr_of, self.live_vr,
                             LiveView.merge_vrs)

    def punished_vrs(self) -> list[tuple[str, str, int]]:
        """``(router, vr, punishment level)`` of the VRs punished now (level > 0), by router and name: a
        handful, read without the fleet's other VRs (the metrics' scrape)."""
        rows = self._read("SELECT router, name, punish_level FROM vrs WHERE punish_level > 0 ORDER BY router, name")
        return [(r["router"], r["name"], int(r["punish_level"])) for r in rows]

    def get_vr(self, router: str, name: str) -> dict[str, Any]:
        rows = self._read("SELECT * FROM vrs WHERE router=? AND name=?", (router, name))
        if not rows:
            raise NotFound(f"no VR {name!r} on router {router!r}")
        return self.live_vr(self._vr(rows[0]))

    def set_vr_network(self, router: str, name: str, network: str | None, actor: str) -> dict[str, Any]:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM vrs WHERE router=? AND name=?", (router, name)).fetchone() is None:
                raise NotFound(f"no VR {name!r} on router {router!r}")
            if network is not None and db.execute("SELECT 1 FROM networks WHERE name=?", (network,)).fetchone() is None:
                raise NotFound(f"no network named {network!r}")
            db.execute("UPDATE routers SET rev=rev+1 WHERE name=?", (router,))  # the router's row first, as above
            db.execute("UPDATE vrs SET network=? WHERE router=? AND name=?", (network, router, name))
            self._audit(db, "vr_network", actor, router, name, {"network": network})
            return self._vr(db.execute("SELECT * FROM vrs WHERE router=? AND name=?", (router, name)).fetchone())

    def set_manual_setpoint(self, router: str, name: str, setpoint_pps: float | None, actor: str) -> dict[str, Any]:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM vrs WHERE router=? AND name=?", (router, name)).fetchone() is None:
                raise NotFound(f"no VR {name!r} on router {router!r}")
            # The router's row before its VR's, the order of the engine's transactions: the other
            # order could deadlock with the engine's save of the same router on PostgreSQL.
            db.execute("UPDATE routers SET rev=rev+1 WHERE name=?", (router,))
            db.execute("UPDATE vrs SET manual_setpoint_pps=? WHERE router=? AND name=?", (setpoint_pps, router, name))
            self._audit(db, "manual_setpoint", actor, router, name, {"setpoint_pps": setpoint_pps})
            return self._vr(db.execute("SELECT * FROM vrs WHERE router=? AND name=?", (router, name)).fetchone())

    def list_setpoints(self, router: str | None = None, network: str | None = None, flagged: bool | None = None,
                       limit: int = -1, offset: int = 0) -> list[dict[str, Any]]:
        out = []
        for v in self.list_vrs(router, network, None, flagged, limit, offset, with_setpoint=True):
            if v["manual_setpoint_pps"] is not None:
                sp, src = v["manual_setpoint_pps"], "manual"
            elif v["derived_setpoint_pps"] is not None:
                sp, src = v["derived_setpoint_pps"], "allocation"
            else:
                continue
            out.append({"router": v["router"], "vr": v["name"], "setpoint_pps": sp, "source": src,
                        "effective_setpoint_pps": v["wanted_setpoint_pps"], "wanted_state": v["wanted_state"],
                        "punishment_level": v["punishment_level"]})
        return out

    # ------------------------------------------------------------------------------ networks
    @staticmethod
    def _net(r: Any) -> dict[str, Any]:
        sla = None
        if r["sla_weight"] is not None:
            sla = {"min_pps": r["sla_min_pps"], "max_pps": r["sla_max_pps"], "weight": r["sla_weight"]}
        return {"name": r["name"], "description": r["description"], "sla": sla, "vr_off": bool(r["punish_vr_off"])}

    def list_networks(self, limit: int = -1, offset: int = 0) -> list[dict[str, Any]]:
        return [self._net(r) for r in self._read(*self._page("SELECT * FROM networks ORDER BY name", [], limit, offset))]

    def get_network(self, name: str) -> dict[str, Any]:
        rows = self._read("SELECT * FROM networks WHERE name=?", (name,))
        if not rows:
            raise NotFound(f"no network named {name!r}")
        return self._net(rows[0])

    def add_network(self, name: str, description: str, actor: str) -> dict[str, Any]:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM networks WHERE name=?", (name,)).fetchone() is not None:
                raise Conflict(f"network {name!r} already exists")
            db.execute("INSERT INTO networks (name, description) VALUES (?,?)", (name, description))
            self._audit(db, "network_created", actor, None, None, {"network": name})
            return self._net(db.execute("SELECT * FROM networks WHERE name=?", (name,)).fetchone())

    def remove_network(self, name: str, actor: str) -> None:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM networks WHERE name=?", (name,)).fetchone() is None:
                raise NotFound(f"no network named {name!r}")
            n = db.execute("SELECT COUNT(*) AS n FROM vrs WHERE network=?", (name,)).fetchone()["n"]
            if n:
                raise Conflict(f"network {name!r} still has {n} VR(s); move them first")
            db.execute("DELETE FROM networks WHERE name=?", (name,))
            self._audit(db, "network_removed", actor, None, None, {"network": name})

    def set_sla(self, name: str, sla: dict[str, float] | None, actor: str) -> dict[str, Any]:
        with self.tx() as db:
            if db.execute("SELECT 1 FROM networks WHERE name=?", (name,)).fetchone() is None:
                raise NotFound(f"no network named {name!r}")
            if sla is None:
                db.execute("UPDATE networks SET sla_min_pps=NULL, sla_max_pps=NULL, sla_weight=NULL WHERE name=?", (name,))
            else:
                db.execute("UPDATE networks SET sla_min_pps=?, sla_max_pps=?, sla_weight=? WHERE name=?",
                           (sla["min_pps"], sla["max_pps"], sla["weight"], name))
            # The routers whose VRs are in the network: their VRs' rows as the engine reads them changed.
            db.execute("UPDATE routers SET rev=rev+1 WHERE name IN (SELECT router FROM vrs WHERE network=?)", (name,))
            self._audit(db, "sla_set" if sla else "sla_removed", actor, None, None, {"network": name, "sla": sla})
            return self._net(db.execute("SELECT * FROM networks WHERE name=?", (name,)).fetchone())

    def set_vr_off(self, name: str, enabled: bool, actor: str) -> dict[str, Any]:
        """Enable (or disable) the punishment ladder's last resort, turning a misbehaving VR off, for
        the network's VRs (issue 48; off by default).  A VR already off stays off until it is turned on."""
        with self.tx() as db:
            if db.execute("SELECT 1 FROM networks WHERE name=?", (name,)).fetchone() is None:
                raise NotFound(f"no network named {name!r}")
            db.execute("UPDATE networks SET punish_vr_off=? WHERE name=?", (int(bool(enabled)), name))
            db.execute("UPDATE routers SET rev=rev+1 WHERE name IN (SELECT router FROM vrs WHERE network=?)", (name,))
            self._audit(db, "vr_off_enabled" if enabled else "vr_off_disabled", actor, None, None, {"network": name})
            return self._net(db.execute("SELECT * FROM networks WHERE name=?", (name,)).fetchone())

    # ------------------------------------------------------------------------------- actions
    def list_actions(self, router: str | None = None, vr: str | None = None, kind: str | None = None,
                     after_id: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        sql = "SELECT * FROM actions WHERE id > ?"
        args: list[Any] = [after_id]
        for col, val in (("router", router), ("vr", vr), ("kind", kind)):
            if val is not None:
                sql += f" AND {col}=?"
                args.append(val)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        return [
            {"id": r["id"], "t_unix_s": r["t_unix_s"], "kind": r["kind"], "actor": r["actor"], "router": r["router"],
             "vr": r["vr"], "detail": _detail(r["detail"])}
            for r in self._read(sql, tuple(args))
        ]

    # ------------------------------------------------------------------------------ settings
    def settings(self, db: Conn | None = None) -> Settings:
        """The policies' settings (``db``: as a transaction sees them)."""
        raw = db.execute("SELECT * FROM settings").fetchall() if db is not None else self._read("SELECT * FROM settings")
        rows = {r["key"]: json.loads(r["value"]) for r in raw}
        kw: dict[str, Any] = {}
        for name, cls in POLICIES.items():  # each policy's switch and parameters (defaults: the class's)
            got = rows.get(name, {})
            kw[f"{name}_enabled"] = got.get("enabled", True)
            kw[name] = cls(**{k: v for k, v in got.items() if k != "enabled"})
        return Settings(**kw)

    def policies(self, db: Conn | None = None) -> dict[str, dict[str, Any]]:
        s = self.settings(db)
        return {name: {"enabled": getattr(s, f"{name}_enabled"), **asdict(getattr(s, name))} for name in POLICIES}

    def set_policy(self, name: str, values: dict[str, Any], actor: str) -> dict[str, Any]:
        """Store a policy's full parameter set (validated by the caller)."""
        assert name in POLICIES, name
        with self.tx() as db:
            db.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                       (name, json.dumps(values)))
            self._audit(db, "policy_changed", actor, None, None, {"policy": name, **values})
            return self.policies(db)[name]

    # ------------------------------------------------------------------------ engine's view
    def router_state(self, name: str) -> tuple[ActivationState, dict[str, VrRow]]:
        """A router's activation state and its VRs' raw rows (with SLA columns joined)."""
        st = self.router_states([name])
        if name not in st:
            raise NotFound(f"no router named {name!r}")
        return st[name]

    def router_states(self, names: list[str]) -> dict[str, tuple[ActivationState, dict[str, VrRow]]]:
        """Routers' activation states and their VRs' rows (the columns of :data:`STATE_COLS`, the network's
        SLA joined, the live measurements), one snapshot; unknown names are left out.

        The VRs' rows of a router whose ``rev`` is the one this store last read or wrote are not read
        again (they are what the database holds); the rows returned must not be changed."""
        out = self.plan_states(names)
        live = self._live
        for name, (act, rows) in out.items():
            got = live.vrs(name)
            new = None
            for n, (m, o, sat) in got.items():
                row = rows.get(n)
                if row is not None and (row.forwarded_pps != m or row.offered_pps != o or row.saturated != sat):
                    if new is None:
                        new = dict(rows)
                    new[n] = row._replace(forwarded_pps=m, offered_pps=o, saturated=sat)
            if new is not None:  # (the kept rows stay as they are: the engine's are its plan_states)
                out[name] = (act, new)
        return out

    def plan_states(self, names: list[str], recorded: bool = False) -> dict[str, tuple[ActivationState, dict[str, VrRow]]]:
        """:meth:`router_states` for this store's engine, without copying rows: the measurements of the VRs
        the live table holds for a router (:meth:`LiveTable.slot`) are the table's, and their rows' own
        ``forwarded_pps``, ``offered_pps`` and ``saturated`` may be older (a sample of the same VRs writes
        the table alone); every other column, and those of the other VRs, are as :meth:`router_states` gives.

        ``recorded``: the routers were just measured by :meth:`record_outcomes`, whose transaction read their
        activation states and revisions: a router whose kept rows are of that revision is taken from there
        (no transaction at all when all are); the others are read as without."""
        out: dict[str, tuple[ActivationState, dict[str, VrRow]]] = {}
        cache = self._states
        if recorded:
            heads, left = self._recorded_heads, []
            for name in names:
                h = heads.get(name)
                c = cache.get(name)
                if h is not None and c is not None and c[0] == h[1]:
                    out[name] = (h[0], c[1])
                else:
                    left.append(name)
            if not left:
                return out
            names = left
        with self.tx() as db:  # one consistent snapshot
            for chunk in _chunks(names):
                marks = ",".join("?" * len(chunk))
                stale: dict[str, int] = {}
                # The revisions first: rows read after them are at least as new (PostgreSQL reads each
                # statement's own snapshot), so an entry is never newer than the rows it holds.
                for name, on, pending, rev in db.tuples("SELECT name, control_on, activation_pending_since_s, rev"
                                                        f" FROM routers WHERE name IN ({marks})", chunk):
                    act = ActivationState(bool(on), pending)
                    c = cache.get(name)
                    if c is not None and c[0] == rev:
                        out[name] = (act, c[1])
                    else:
                        stale[name] = rev
                        out[name] = (act, {})
                if stale:
                    got: dict[str, dict[str, VrRow]] = {n: {} for n in stale}
                    for row in db.tuples(_STATE_SQL.format(marks=",".join("?" * len(stale))), list(stale)):
                        kept_row = _kept_row(row[1:])
                        got[row[0]][kept_row.name] = kept_row
                    for name, rows in got.items():  # the live measurements over the last snapshot's (the
                        for n, (m, o, sat) in self._live.vrs(name).items():  # other columns are written as
                            row = rows.get(n)  # they change)
                            if row is not None:
                                rows[n] = row._replace(forwarded_pps=m, offered_pps=o, saturated=sat)
                    for name, rev in stale.items():
                        cache[name] = (rev, got[name])
                        out[name] = (out[name][0], got[name])
        return out

    def keep_states(self, names: set[str] | frozenset[str]) -> None:
        """Forget the VRs' rows kept for routers not in ``names`` (routers gone)."""
        for gone in self._states.keys() - names:
            self._states.pop(gone, None)
        for gone in self._recorded.keys() - names:
            self._recorded.pop(gone, None)
        for gone in self._live.gone(names):
            self._live.drop(gone)
            self._dirty.discard(gone)

    # ---------------------------------------------------------------------------- snapshots
    def snapshot(self, max_rows: int | None = None) -> int:
        """Write the live measurements of the routers measured since the last snapshot began (their VRs'
        ``forwarded_pps``, ``offered_pps``, ``cap_percent``, ``saturated`` and ``last_seen_unix_s``, and the
        routers' ``last_seen_unix_s`` and ``demand_pps``, the demand at their last plan) in one transaction, fenced on the leadership epoch; the other
        columns are written as they change.  ``max_rows``: write about that many VRs' rows (whole
        routers) and leave the rest of this snapshot to the next calls (:attr:`snapshot_pending`), so
        that a large one does not hold the engine's worker (and SQLite's write lock) at once.  Returns
        how many VRs' rows were written."""
        if not self._snapshot_queue:  # a new snapshot: the routers measured until now
            self._snapshot_queue, self._dirty = list(self._dirty), set()
        batch: list[str] = []
        n = 0
        queue = self._snapshot_queue
        live = self._live
        while queue and (max_rows is None or n < max_rows):
            name = queue.pop()
            if name in live:
                batch.append(name)
                n += len(live.names(name))
        routers, vrs = live.columns(batch)  # gathered from the arrays, a list per column
        if not routers:
            return 0
        # A router's demand at its last plan with its time (a router not planned since it is held: its time only).
        planned, seen = [], []
        for t_seen, name in routers:
            d = live.demand_pps(name)
            if d is None:
                seen.append((t_seen, name))
            else:
                planned.append((t_seen, d, name))
        t = self.clock()
        with self.tx() as db:
            self._fence(db)
            db.update_many("routers", "last_seen_unix_s demand_pps | name", "rrt", planned)
            db.update_many("routers", "last_seen_unix_s | name", "rt", seen)
            db.update_columns("vrs", "forwarded_pps offered_pps cap_percent saturated last_seen_unix_s | router name",
                              "rrrtrtt", vrs)
            db.execute("INSERT INTO meta (key, value) VALUES ('snapshot_unix_s', ?)"
                       " ON CONFLICT (key) DO UPDATE SET value=excluded.value", (repr(t),))
        self.snapshot_unix_s = t
        return len(vrs[0])

    def last_snapshot_unix_s(self) -> float | None:
        """Wall time of the newest snapshot of the measurements any engine wrote to the database (None:
        none yet): what a process that measures nothing (the API's) reads the measurements as of."""
        rows = self._read("SELECT value FROM meta WHERE key='snapshot_unix_s'")
        return float(rows[0]["value"]) if rows else None

    @property
    def live(self) -> LiveTable:
        """The live measurements of the routers this store's engine measures."""
        return self._live

    @property
    def snapshot_pending(self) -> bool:
        """Whether a snapshot begun with ``max_rows`` has routers left to write."""
        return bool(self._snapshot_queue)

    def _view(self) -> LiveTable | LiveView | None:
        """Where live values are read now: this store's engine's table when it measures routers, else the
        engines' fresh publications (:attr:`live_source`), else nowhere (None)."""
        if self._live:
            return self._live
        return self.live_source.view() if self.live_source is not None else None

    def live_router(self, router: dict[str, Any], view: LiveTable | LiveView | None = None) -> dict[str, Any]:
        """A router as :meth:`get_router` gives it, with its live ``last_seen_unix_s`` and ``demand_pps`` (and
        ``measured_from`` ``live``) when an engine measures it and it is reachable (else the last snapshot's)."""
        if view is None:
            view = self._view()
        if isinstance(view, LiveView):  # the API's process: the publication's values written in at once
            view.merge_routers([router])
            return router
        seen = view.seen_unix_s(router["name"]) if view is not None else None
        if seen is not None and router["status"] == "reachable":
            router["last_seen_unix_s"] = seen
            router["measured_from"] = "live"
            demand = view.demand_pps(router["name"])
            if demand is not None:
                router["demand_pps"] = demand
        return router

    def live_vr(self, vr: dict[str, Any], view: LiveTable | LiveView | None = None) -> dict[str, Any]:
        """A VR as :meth:`get_vr` gives it, with its live measurements (and ``measured_from`` ``live``) when
        an engine measures its router (else the last snapshot's)."""
        if view is None:
            view = self._view()
        if isinstance(view, LiveView):  # the API's process: the publication's values written in at once
            view.merge_vrs([vr])
            return vr
        got = view.vr(vr["router"], vr["name"]) if view is not None else None
        if got is not None:
            vr.update(got)
            vr["measured_from"] = "live"
        return vr

    def record_poll(self, router: str, vrs: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
        """Upsert the VRs a daemon reported; mark the others absent.  Returns (appeared, vanished)."""
        out = ExchangeOutcome(router, None, vrs=vrs)
        self.record_outcomes([out])
        return out.appeared, out.vanished

    def record_outcomes(self, outcomes: list["ExchangeOutcome"]) -> dict[str, str | None]:
        """Record a batch of the engine's exchanges with routers in one transaction (see :class:`ExchangeOutcome`).

        For each outcome, in order: its ``records`` go to the audit log; the router's status is set (a
        change to or from ``unreachable`` is audited); the VRs of a ``list`` reply are upserted, the
        router's other VRs marked absent (appearances and disappearances audited).  A removed or unknown
        router is left alone.

        Returns
        -------
        dict
            Each router's status before the batch (None: no such router, or removed).
        """
        now = self.clock()
        names = list(dict.fromkeys(o.router for o in outcomes))
        audits: list[tuple[str, str, str | None, str | None, dict[str, Any]]] = []
        with self.tx() as db:
            prev: dict[str, str | None] = dict.fromkeys(names)
            known: dict[str, dict[str, bool]] = {}
            #: router -> VR -> (present, state, daemon_setpoint_pps) as the database holds them
            discrete: dict[str, dict[str, tuple]] = {}
            polled = [o.router for o in outcomes if o.vrs is not None]
            cache = self._states
            cached: dict[str, dict[str, VrRow]] = {}  # router -> its rows kept, valid at this rev
            revs: dict[str, int] = {}
            acts: dict[str, ActivationState] = {}
            for chunk in _chunks(names):
                marks = ",".join("?" * len(chunk))
                for name, st, rev, on, pending in db.tuples("SELECT name, status, rev, control_on, activation_pending_since_s"
                                                            f" FROM routers WHERE name IN ({marks})", chunk):
                    prev[name] = None if st == "removed" else str(st)
                    revs[name] = rev
                    acts[name] = _STEADY[bool(on)] if pending is None else ActivationState(bool(on), pending)
                    c = cache.get(name)
                    if c is not None and c[0] == rev:
                        cached[name] = c[1]
            for chunk in _chunks([n for n in polled if n not in cached]):
                marks = ",".join("?" * len(chunk))
                for router, n, present, st, sp in db.tuples(
                        f"SELECT router, name, present, state, daemon_setpoint_pps FROM vrs WHERE router IN ({marks})", chunk):
                    known.setdefault(router, {})[n] = bool(present)
                    discrete.setdefault(router, {})[n] = (present, st, sp)
            seen_rows, other_rows, updates, inserts, absent, bump_rows = [], [], [], [], [], []
            memo = self._recorded
            bumps: dict[str, int] = {}  # router -> its rev's increments in this transaction
            new_rows: dict[str, dict[str, VrRow] | None] = {}  # router -> its rows now (None: not known)
            status = dict(prev)
            for o in outcomes:
                name = o.router
                if o.records:
                    audits.extend((kind, "policer", name, vr, detail) for kind, vr, detail in o.records)
                if prev[name] is None:
                    continue
                if o.status is not None:
                    if o.status == "reachable":
                        self._dirty.add(name)
                        if status[name] != "reachable":  # a change: written at once (its time too)
                            seen_rows.append((o.status, o.error, now, name))
                            bumps[name] = bumps.get(name, 0) + 1
                        elif not self._live.touch(name, now):  # reachable again: its time is live, written
                            self._live.put(name, now, (), (), (), (), ())  # by the next snapshot
                    else:
                        other_rows.append((o.status, o.error, name))
                        bumps[name] = bumps.get(name, 0) + 1
                    if o.status == "unreachable" and status[name] != "unreachable":
                        audits.append(("router_unreachable", "policer", name, None, {"error": o.error}))
                    elif o.status == "reachable" and status[name] == "unreachable":
                        audits.append(("router_reachable", "policer", name, None, {}))
                    status[name] = o.status
                if o.vrs is None:
                    continue
                # The rows kept for the router, with this measurement (None: not known, read them next time).
                rows = new_rows[name] if name in new_rows else cached.get(name)
                m = memo.get(name)
                if m is not None and m[0] is o.vrs and m[1] is rows and rows is not None and name not in new_rows:
                    # The very measurement last recorded over the very rows it left: the same rows again (no VR
                    # appears, vanishes or changes), only their time moves (live, until the next snapshot).
                    self._live.touch(name, now)
                    self._dirty.add(name)
                    new_rows[name] = rows
                    continue
                if isinstance(o.vrs, SampleRows) and rows is not None and name not in new_rows:
                    slot = self._live.slot(name)
                    live_names = slot[1] if slot is not None else None
                    last = m[0] if m is not None and m[1] is rows and isinstance(m[0], SampleRows) else None
                    c = o.vrs
                    moved = _measurements_moved(rows, c, live_names, last)
                    if moved is not None:
                        # The same VRs in the same states at the same setpoints: only measurements moved (live
                        # until the next snapshot), nothing written or audited now; the kept rows follow them.
                        # Against the last sample recorded over these rows (its values are the table's), the
                        # columns compared whole (in C); else in the table.
                        held = last is not None and c.names == live_names and last.names == live_names
                        same = held and c.saturated == last.saturated and c.same_numbers(last, (1, 2))
                        if same and c.same_numbers(last, (3,)):
                            self._live.touch(name, now)  # the very values again
                        else:  # (a message of arrays is written from them: its columns' tuples are not made)
                            nums = ((), (), ()) if c.arrays is not None else (c.forwarded_pps, c.offered_pps, c.cap_percent)
                            self._live.put(name, now, c.names, *nums, c.saturated, finite=True,
                                           moved=not same if held else None, arrays=c.arrays)
                        self._dirty.add(name)
                        new_rows[name] = moved
                        memo[name] = (o.vrs, moved)
                        continue
                was = known.get(name)
                if was is None:
                    was = known[name] = ({n: bool(row.present) for n, row in cached[name].items()}
                                         if name in cached else {})
                held = discrete.setdefault(name, {})
                changes = len(inserts), len(absent), len(audits)
                written = len(updates)
                mine = []
                copied = False
                seen = set()
                for vals in _measured(o.vrs, now, name):
                    n = vals[9]
                    seen.add(n)
                    present = vals[0]
                    mine.append(vals)
                    old = rows.get(n) if rows is not None else None
                    if n not in was:
                        inserts.append(vals)
                        held[n] = vals[:3]
                    elif ((old.present, old.state, old.daemon_setpoint_pps) if old is not None
                          else held.get(n)) != vals[:3]:
                        updates.append(vals)  # appeared, vanished, or its state or setpoint changed: written now
                        held[n] = vals[:3]
                    # else: only its measurements changed, live until the next snapshot
                    if rows is not None:
                        if old is None:
                            rows = None  # a new row: read it whole next time
                        elif (old.present, old.state, old.daemon_setpoint_pps, old.forwarded_pps, old.offered_pps,
                              old.saturated) != (vals[0], vals[1], vals[2], vals[3], vals[4], vals[6]):
                            if not copied:
                                rows, copied = dict(rows), True
                            rows[n] = old._replace(present=vals[0], state=vals[1], daemon_setpoint_pps=vals[2],
                                                   forwarded_pps=vals[3], offered_pps=vals[4], saturated=vals[6])
                    if present and not was.get(n, False):
                        o.appeared.append(n)
                        audits.append(("vr_appeared", "policer", name, n, {}))
                    if not present and was.get(n, False):
                        o.vanished.append(n)
                        audits.append(("vr_vanished", "policer", name, n, {}))
                for n, present in was.items():
                    if n not in seen and present:
                        absent.append((name, n))
                        held.pop(n, None)  # marked absent: a return is written whole
                        o.vanished.append(n)
                        audits.append(("vr_vanished", "policer", name, n, {}))
                        rows = None
                for n in seen:
                    was[n] = True
                if isinstance(o.vrs, SampleRows):  # its columns as they are
                    c = o.vrs
                    self._live.put(name, now, c.names, c.forwarded_pps, c.offered_pps, c.cap_percent, c.saturated,
                                   finite=True, arrays=c.arrays)
                else:
                    self._live.put(name, now, [v[9] for v in mine], [v[3] for v in mine], [v[4] for v in mine],
                                   [v[5] for v in mine], [v[6] for v in mine])
                self._dirty.add(name)
                if (written, *changes) != (len(updates), len(inserts), len(absent), len(audits)) and name not in bumps:
                    bump_rows.append((name,))  # its VRs' rows written: other stores' kept rows are stale
                    bumps[name] = 1
                new_rows[name] = rows
                if rows is not None and changes == (len(inserts), len(absent), len(audits)):
                    memo[name] = (o.vrs, rows)
                else:
                    memo.pop(name, None)
            db.update_many("routers", "status last_error last_seen_unix_s | name", "ttrt", seen_rows, "rev=rev+1")
            db.update_many("routers", "status last_error | name", "ttt", other_rows, "rev=rev+1")
            db.update_many("routers", "| name", "t", bump_rows, "rev=rev+1")
            db.update_many("vrs", "present state daemon_setpoint_pps forwarded_pps offered_pps cap_percent saturated"
                           " last_seen_unix_s | router name", "itrrrrtrtt", updates)
            db.executemany("INSERT INTO vrs (present, state, daemon_setpoint_pps, forwarded_pps, offered_pps, cap_percent,"
                           " saturated, last_seen_unix_s, router, name) VALUES (?,?,?,?,?,?,?,?,?,?)", inserts)
            db.update_many("vrs", "| router name", "tt", absent, "present=0")
            self._audit_many(db, audits)
        # Committed: the kept rows follow (a router another transaction changed meanwhile has a higher rev),
        # those whose measurements only changed too (live: the database's rev is the same).
        self._recorded_heads = {name: (act, revs[name] + bumps.get(name, 0)) for name, act in acts.items()}
        for name in bumps.keys() | new_rows.keys():
            rows = new_rows[name] if name in new_rows else cached.get(name)
            if rows is None or name not in cached or prev.get(name) is None:
                cache.pop(name, None)
            else:
                cache[name] = (revs[name] + bumps.get(name, 0), rows)
        return prev

    def save_plan(self, router: str, act: ActivationState, demand_pps: float, per_vr: dict[str, dict[str, Any]],
                  events: list[tuple[str, str | None, dict[str, Any]]]) -> None:
        """Store a router's new policy state and the events of its plan, in one transaction."""
        self.save_plans([(router, act, demand_pps, per_vr, events)])

    def save_plans(self, plans: list[tuple[str, ActivationState, float, dict[str, dict[str, Any]],
                                           list[tuple[str, str | None, dict[str, Any]]]]]) -> None:
        """Store routers' new policy states and their plans' events, ``(router, activation, demand_pps,
        per_vr, events)`` each, in one transaction (fenced on the leadership epoch; removed routers skipped)."""
        if not plans:
            return
        with self.tx() as db:
            self._fence(db)
            names = [p[0] for p in plans]
            removed = set()
            cache = self._states
            kept: dict[str, tuple[int, dict[str, VrRow]]] = {}  # router -> (rev after this, its rows)
            for chunk in _chunks(names):
                marks = ",".join("?" * len(chunk))
                for name, st, rev in db.tuples(f"SELECT name, status, rev FROM routers WHERE name IN ({marks})", chunk):
                    c = cache.get(name)
                    if st == "removed":
                        removed.add(name)
                    elif c is not None and c[0] == rev:
                        kept[name] = (rev + 1, c[1])
            rows, vr_rows, audits = [], [], []
            for router, act, demand_pps, per_vr, events in plans:
                if router in removed:
                    continue
                rows.append((int(act.on), act.pending_since_s, _f(demand_pps), router))
                k = kept.get(router)
                vrs = dict(k[1]) if k is not None and per_vr else None
                for n, d in per_vr.items():
                    ms: MisbehaviourState = d["misbehaviour"]
                    vals = (_f(d["derived_setpoint_pps"]), d["wanted_state"], _f(d["wanted_setpoint_pps"]),
                            ms.level, ms.bad_since_s, ms.good_since_s, _f(d["punish_base_pps"]), router, n)
                    vr_rows.append(vals)
                    if vrs is not None:
                        old = vrs.get(n)
                        if old is None:
                            vrs = None
                            kept.pop(router, None)
                        else:
                            vrs[n] = old._replace(derived_setpoint_pps=vals[0], wanted_state=vals[1],
                                                  wanted_setpoint_pps=vals[2], punish_level=int(vals[3]),
                                                  punish_bad_since_s=_real(vals[4]), punish_good_since_s=_real(vals[5]),
                                                  punish_base_pps=vals[6])
                if vrs is not None:
                    kept[router] = (kept[router][0], vrs)
                audits.extend((kind, "policer", router, vr, detail) for kind, vr, detail in events)
            db.update_many("routers", "control_on activation_pending_since_s demand_pps | name", "irrt", rows, "rev=rev+1")
            db.update_many("vrs", "derived_setpoint_pps wanted_state wanted_setpoint_pps punish_level punish_bad_since_s"
                           " punish_good_since_s punish_base_pps | router name", "rtrirrrtt", vr_rows)
            self._audit_many(db, audits)
        # Committed: the kept rows follow (a router another transaction changed meanwhile has a higher rev).
        for name in names:
            if name in kept:
                cache[name] = kept[name]
            else:
                cache.pop(name, None)

    # ---------------------------------------------------------------------------- leadership
    def _fence(self, db: Conn) -> None:
        """Refuse the engine's write if another policer has taken the lead since this one did.

        ``FOR SHARE``: a hand-over (which updates the epoch) waits for this transaction, and this one
        for a hand-over in progress, so no plan is saved under a stale leadership.
        """
        if self.fence_epoch is None:
            return
        share = " FOR SHARE" if self.dialect == "postgresql" else ""  # SQLite: BEGIN IMMEDIATE serialises already
        row = db.execute("SELECT value FROM meta WHERE key=?" + share, (self._epoch_key,)).fetchone()
        if int(row["value"]) != self.fence_epoch:
            raise NotLeader(f"policer epoch {self.fence_epoch} was superseded by epoch {row['value']}")

    def take_leadership(self, holder: str, shard: tuple[int, int] = (0, 1)) -> int:
        """Record that ``holder`` now runs the engine (call holding the leader lock): one ``leader_changed``
        record in the audit log, a new epoch under which this store's engine writes are fenced.

        ``shard`` ``(i, n)``: the engine of shard ``i`` of ``n`` (``engine.shards``), whose epoch and
        leader are kept apart from every other shard's (meta keys ``leader_epoch:i/n``, ``leader:i/n``,
        made at its first leader; ``(0, 1)``: ``leader_epoch``, ``leader``); the record names the shard.

        Returns
        -------
        int
            The new epoch.
        """
        i, n = shard
        epoch_key, leader_key = ("leader_epoch", "leader") if n == 1 else (f"leader_epoch:{i}/{n}", f"leader:{i}/{n}")
        with self.tx() as db:
            if n > 1:
                for k, v in ((epoch_key, "0"), (leader_key, "")):
                    db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (k, v))
            lock = " FOR UPDATE" if self.dialect == "postgresql" else ""
            epoch = int(db.execute("SELECT value FROM meta WHERE key=?" + lock, (epoch_key,)).fetchone()["value"]) + 1
            prev = db.execute("SELECT value FROM meta WHERE key=?", (leader_key,)).fetchone()["value"]
            db.execute("UPDATE meta SET value=? WHERE key=?", (str(epoch), epoch_key))
            db.execute("UPDATE meta SET value=? WHERE key=?", (holder, leader_key))
            detail: dict[str, Any] = {"leader": holder, "previous": prev or None, "epoch": epoch}
            if n > 1:
                detail["shard"] = f"{i}/{n}"
            self._audit(db, "leader_changed", holder, None, None, detail)
        self._epoch_key = epoch_key
        self.fence_epoch = epoch
        return epoch
