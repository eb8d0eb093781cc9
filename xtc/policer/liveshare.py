"""The live-value channel: the engine's live measurements, read by the API's processes.

The engine's process keeps its routers' live measurements in a :class:`~xtc.policer.live.LiveTable`
and writes them to the database only in snapshots.  So that the REST API (another process, or several
workers) can show live values without asking the engine, the engine's worker publishes the table to a
file every :data:`PUBLISH_S` (:class:`LiveWriter`): in a private directory the server makes
(``/dev/shm`` when there is one: memory, not disk), written whole under a temporary name and renamed,
so that a reader sees one publication whole or the one before.  A reader (:class:`LiveReader`) reads
a file again only when it was replaced, keeps its routers' index while the table's layout is the same,
and ignores a file older than the freshness its writer set (two periods and a second: an engine that
stopped, died or no longer leads publishes nothing, and its file goes stale).  What is not in a fresh
file is read from the database's last snapshot, and each router and VR the API returns says which
(``measured_from``).

The file (little-endian): the header :data:`_HEAD` (magic, the writer's random id, the table's layout,
the wall time it was written, how long it stays fresh, the routers, the rows, the index's bytes), the
index (JSON ``[[router, first row, [VR names]], ...]``, padded to 8 bytes), then per router the wall
time of its last measurement and its demand at its last plan (float64 each, NaN: none), and the columns ``forwarded_pps``, ``offered_pps``,
``cap_percent`` (float64, NaN: none) and ``saturated`` (int8 codes, :data:`~xtc.policer.live.SATURATION_CODES`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from .live import SATURATION_CODES, LiveTable

__all__ = ["LiveWriter", "LiveReader", "LiveView", "PUBLISH_S", "live_file_name"]

log = logging.getLogger("xtc.policer.live")

#: Seconds between two publications of an engine's live measurements (at most: a period's).
PUBLISH_S = 0.5
_MAGIC = b"XTCLIVE2"
_HEAD = struct.Struct("<8sQQddQQQ")


def live_file_name(shard: tuple[int, int]) -> str:
    """The file an engine shard publishes to, in the live directory."""
    return f"live-{shard[0]}-of-{shard[1]}.bin"


class LiveWriter:
    """Publishes a :class:`LiveTable` to ``path`` (see the module)."""

    def __init__(self, path: str | Path, fresh_for_s: float):
        self.path = Path(path)
        self.fresh_for_s = fresh_for_s
        self._id = secrets.randbits(64)
        self._layout: int | None = None
        self._index = b""

    def publish(self, table: LiveTable, now_unix_s: float) -> None:
        idx = table.index()
        if table.layout != self._layout:
            self._index = json.dumps([[r, s, list(n)] for r, s, n, _ in idx], separators=(",", ":")).encode()
            self._index += b" " * (-len(self._index) % 8)
            self._layout = table.layout
        end = table.end
        parts = [_HEAD.pack(_MAGIC, self._id, table.layout, now_unix_s, self.fresh_for_s, len(idx), end, len(self._index)),
                 self._index, np.array([x[3] for x in idx], np.float64).tobytes(),
                 np.array([table.demand_pps(x[0]) for x in idx], np.float64).tobytes(),
                 table.forwarded_pps[:end].tobytes(), table.offered_pps[:end].tobytes(), table.cap_percent[:end].tobytes(),
                 table.saturated[:end].tobytes()]
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(parts))
        os.replace(tmp, self.path)

    def remove(self) -> None:
        """The engine stops: its values are no longer live."""
        for p in (self.path, self.path.with_name(self.path.name + ".tmp")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


class _Parsed:
    __slots__ = ("key", "id", "layout", "written", "fresh_for", "routers", "seen", "demand", "m", "o", "c", "sat",
                 "_lists")

    def lists(self) -> tuple[list[float], list[float], list[float], list[float], list[float], list[int]]:
        """The columns as Python lists (made at the first read of this publication): a request reads
        its routers and VRs value by value, and a list's item costs a fraction of a numpy scalar's."""
        if self._lists is None:
            self._lists = (self.seen.tolist(), self.demand.tolist(), self.m.tolist(), self.o.tolist(),
                           self.c.tolist(), self.sat.tolist())
        return self._lists


def _parse(data: bytes, prev: _Parsed | None) -> _Parsed:
    magic, wid, layout, written, fresh_for, n, end, ilen = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a live-values file")
    p = _Parsed()
    p._lists = None
    p.id, p.layout, p.written, p.fresh_for = wid, layout, written, fresh_for
    at = _HEAD.size + ilen
    if prev is not None and (prev.id, prev.layout) == (wid, layout):
        p.routers = prev.routers
    else:  # router -> (its position, first row, {VR name: row})
        p.routers = {r: (i, s, {name: s + k for k, name in enumerate(names)})
                     for i, (r, s, names) in enumerate(json.loads(data[_HEAD.size:at]))}
    p.seen = np.frombuffer(data, np.float64, n, at)
    at += 8 * n
    p.demand = np.frombuffer(data, np.float64, n, at)
    at += 8 * n
    p.m = np.frombuffer(data, np.float64, end, at)
    p.o = np.frombuffer(data, np.float64, end, at + 8 * end)
    p.c = np.frombuffer(data, np.float64, end, at + 16 * end)
    p.sat = np.frombuffer(data, np.int8, end, at + 24 * end)
    return p


class LiveView:
    """The fresh live values of every engine that publishes, at one moment (one request's).

    A page reads its routers' values one after the other, a router's VRs together: the router last
    found is kept with its publication's columns."""

    __slots__ = ("_files", "_last", "_last_found")

    def __init__(self, files: list[_Parsed]):
        self._files = files
        self._last: str | None = None
        self._last_found: tuple[tuple[list[float], ...], int, dict[str, int]] | None = None

    def _find(self, router: str) -> tuple[tuple[Any, ...], int, dict[str, int]] | None:
        """The router's publication's columns (:meth:`_Parsed.lists`), its position and its VRs' rows."""
        if router == self._last:
            return self._last_found
        found = None
        for p in self._files:
            got = p.routers.get(router)
            if got is not None:
                found = (p.lists(), got[0], got[2])
                break
        self._last, self._last_found = router, found
        return found

    def seen_unix_s(self, router: str) -> float | None:
        """When the router was last measured (None: no engine publishes it)."""
        f = self._find(router)
        return None if f is None else f[0][0][f[1]]

    def demand_pps(self, router: str) -> float | None:
        """The router's demand at its last plan (None: no engine publishes it, or none yet)."""
        f = self._find(router)
        if f is None:
            return None
        x = f[0][1][f[1]]
        return None if x != x else x  # noqa: PLR0124 - NaN: none

    def vr(self, router: str, name: str) -> dict[str, Any] | None:
        """A VR's live ``forwarded_pps``, ``offered_pps``, ``cap_percent``, ``saturated`` and
        ``last_seen_unix_s`` (None: no engine publishes it)."""
        f = self._find(router)
        if f is None:
            return None
        k = f[2].get(name)
        if k is None:
            return None
        out: dict[str, Any] = {}
        _write_vr(out, f, k)
        return out

    def merge_routers(self, routers: list[dict[str, Any]]) -> None:
        """Each reachable router's (as the store gives them: ``name``, ``status``) live ``last_seen_unix_s``
        and ``demand_pps`` (when it has one) written into its dictionary, with ``measured_from`` ``live``; the
        others (not reachable, or no engine publishes them) left as they are.  One pass over a page, no
        dictionary of the values' own."""
        files = [(p.routers, p.lists()) for p in self._files]
        for router in routers:
            if router["status"] != "reachable":
                continue
            name = router["name"]
            for index, cols in files:
                got = index.get(name)
                if got is not None:
                    i = got[0]
                    router["last_seen_unix_s"] = cols[0][i]
                    router["measured_from"] = "live"
                    demand = cols[1][i]
                    if demand == demand:  # noqa: PLR0124 - NaN: none
                        router["demand_pps"] = demand
                    break

    def merge_vrs(self, vrs: list[dict[str, Any]]) -> None:
        """Each VR's (as the store gives them: ``router``, ``name``) :meth:`vr` values written into its
        dictionary, with ``measured_from`` ``live``; those no engine publishes left as they are.  One pass
        over a page (a router's VRs one after the other), no dictionary of the values' own."""
        last, f = None, None
        for vr in vrs:
            router = vr["router"]
            if router != last:
                last, f = router, self._find(router)
            if f is None:
                continue
            k = f[2].get(vr["name"])
            if k is None:
                continue
            _write_vr(vr, f, k)
            vr["measured_from"] = "live"


def _write_vr(out: dict[str, Any], found: tuple, k: int) -> None:
    """VR ``k``'s live ``forwarded_pps``, ``offered_pps``, ``cap_percent``, ``saturated`` and
    ``last_seen_unix_s`` written into ``out``, from a router's publication as :meth:`LiveView._find` gives it
    (NaN and an unknown saturation code: None)."""
    (seen, _, m, o, c, sat), i, _rows = found
    fw, of, cp, code = m[k], o[k], c[k], sat[k]
    out["forwarded_pps"] = None if fw != fw else fw  # noqa: PLR0124 - NaN: none
    out["offered_pps"] = None if of != of else of  # noqa: PLR0124
    out["cap_percent"] = None if cp != cp else cp  # noqa: PLR0124
    out["saturated"] = SATURATION_CODES[code] if 0 <= code < 4 else None
    out["last_seen_unix_s"] = seen[i]


class LiveReader:
    """Reads the files of the live directory ``directory`` (see the module)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._cache: dict[str, _Parsed] = {}

    def view(self) -> LiveView | None:
        """The fresh publications now (None: none)."""
        now = time.time()
        files = []
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.startswith("live-") and e.name.endswith(".bin")]
        except OSError:
            return None
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                continue
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            p = self._cache.get(e.name)
            if p is None or p.key != key:
                try:
                    with open(e.path, "rb") as f:
                        data = f.read()
                    p = _parse(data, p)
                except (OSError, ValueError, struct.error) as err:
                    log.warning("live values %s unreadable: %s", e.path, err)
                    self._cache.pop(e.name, None)
                    continue
                p.key = key
                self._cache[e.name] = p
            if now - p.written <= p.fresh_for:
                files.append(p)
        return LiveView(files) if files else None
