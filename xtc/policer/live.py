"""The live measurements of an engine's routers, in numpy arrays: one row per VR, a column per quantity.

A router's VRs are contiguous rows (``start .. start + len(names)``), in the order of its last
measurement; :class:`LiveTable` keeps per router its first row, its VRs' names and the wall time of
its last measurement.  A measurement of the same VRs overwrites the router's rows in place; one of
another VR set takes a new block at the end, and the old block is left as garbage until the table
compacts (when garbage is more than half of the rows in use).  A missing or non-finite number is NaN
in the arrays and None outside.  Nothing here does I/O: the store writes a snapshot from
:meth:`LiveTable.columns`.

Memory: 8 bytes a number, 1 a saturation code, against a tuple of ten Python objects a VR before
(about 200 bytes a VR).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["LiveTable", "SATURATION_CODES"]

#: The daemon's ``saturated`` values, by their code in the table (0: None).
SATURATION_CODES: tuple[str | None, ...] = (None, "cap_max", "cap_min", "cap_slack")
_SAT = {s: i for i, s in enumerate(SATURATION_CODES)}
#: A router's VRs' ``saturated`` flags (a tuple, as a sample's column) -> their codes: a fleet's flags repeat
#: from one period to the next, so a measurement's codes are one dictionary lookup (in C), not one a VR.
_SAT_MEMO: dict[tuple, np.ndarray] = {}
_SAT_MEMO_MAX = 4096


def _sat_codes(saturated: Iterable[str | None]) -> np.ndarray:
    """The codes of ``saturated`` (one not among :data:`SATURATION_CODES`: 0, None); not to be changed."""
    key = saturated if type(saturated) is tuple else tuple(saturated)
    try:
        got = _SAT_MEMO.get(key)
    except TypeError:  # an unhashable value (not a flag: 0)
        return np.array([_SAT.get(x, 0) if isinstance(x, str) else 0 for x in key], np.int8)
    if got is None:
        got = np.array([_SAT.get(x, 0) for x in key], np.int8)
        if len(_SAT_MEMO) >= _SAT_MEMO_MAX:
            _SAT_MEMO.clear()
        _SAT_MEMO[key] = got
    return got


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


class LiveTable:
    """The live measurements (``forwarded_pps``, ``offered_pps``, ``cap_percent``, ``saturated``) of the
    VRs of the routers one engine measures, and each router's last measurement's wall time."""

    __slots__ = ("forwarded_pps", "offered_pps", "cap_percent", "saturated", "_where", "_end", "_used", "layout",
                 "_demand", "_writes")

    def __init__(self, capacity: int = 1024):
        self.forwarded_pps = np.full(capacity, np.nan)
        self.offered_pps = np.full(capacity, np.nan)
        self.cap_percent = np.full(capacity, np.nan)
        self.saturated = np.zeros(capacity, np.int8)
        #: router -> [first row, its VRs' names (tuple), wall time of its last measurement, the number of the
        #: last write of its values (:meth:`key`)]
        self._where: dict[str, list[Any]] = {}
        self._end = 0  # rows allocated (in use or garbage)
        self._used = 0  # rows in use
        #: Changes whenever a router's rows move, appear or go, or its VRs' names change (not their values
        #: or times): a copy of :meth:`index` stays right while this is the same.
        self.layout = 0
        #: router -> its hosts' aggregate demand at its last plan (packets/s): a measurement, written by the
        #: snapshot with the others (the plan's decisions are written at once).
        self._demand: dict[str, float] = {}
        self._writes = 0  # measurements written (put), the last one's number kept per router: see key()

    def __len__(self) -> int:
        """Routers held."""
        return len(self._where)

    def __contains__(self, router: str) -> bool:
        return router in self._where

    def __bool__(self) -> bool:
        return bool(self._where)

    @property
    def rows(self) -> int:
        """VRs' rows in use."""
        return self._used

    def routers(self) -> list[str]:
        return list(self._where)

    def gone(self, names: set[str] | frozenset[str]) -> set[str]:
        """The routers the table holds that are not in ``names``."""
        return self._where.keys() - names

    def seen_unix_s(self, router: str) -> float | None:
        w = self._where.get(router)
        return None if w is None else w[2]

    def names(self, router: str) -> tuple[str, ...]:
        w = self._where.get(router)
        return () if w is None else w[1]

    def slot(self, router: str) -> tuple[int, tuple[str, ...]] | None:
        """The router's first row and its VRs' names (the rows ``start .. start + len(names)``), or None."""
        w = self._where.get(router)
        return None if w is None else (w[0], w[1])

    def key(self, router: str) -> tuple[tuple[str, ...], int] | None:
        """What identifies the router's live values now (its VRs' names and the number of the write that left
        them; :meth:`touch` keeps it): equal keys, equal values (None: not held).  Cheaper than the values."""
        w = self._where.get(router)
        return None if w is None else (w[1], w[3])

    def index(self) -> list[tuple[str, int, tuple[str, ...], float]]:
        """``(router, first row, its VRs' names, wall time of its last measurement)`` of every router held."""
        return [(r, w[0], w[1], w[2]) for r, w in self._where.items()]

    @property
    def end(self) -> int:
        """Rows allocated (the arrays' rows past it mean nothing)."""
        return self._end

    def _grow(self, need: int) -> None:
        cap = len(self.forwarded_pps)
        if self._end + need <= cap:
            return
        if self._used + need <= cap // 2 and self._end > 0:
            self._compact()
            if self._end + need <= cap:
                return
        new = max(2 * cap, self._end + need)
        for attr, fill in (("forwarded_pps", np.nan), ("offered_pps", np.nan), ("cap_percent", np.nan), ("saturated", 0)):
            old = getattr(self, attr)
            arr = np.full(new, fill, old.dtype)
            arr[:self._end] = old[:self._end]
            setattr(self, attr, arr)

    def _compact(self) -> None:
        """Move every router's rows to the front, in the order of the routers (no garbage left)."""
        order = np.empty(self._used, np.intp)
        at = 0
        for w in self._where.values():
            k = len(w[1])
            order[at:at + k] = np.arange(w[0], w[0] + k)
            w[0] = at
            at += k
        for attr in ("forwarded_pps", "offered_pps", "cap_percent", "saturated"):
            arr = getattr(self, attr)
            arr[:at] = arr[order]
        self._end = at
        self.layout += 1

    def put(self, router: str, t_unix_s: float, names: Sequence[str], forwarded_pps: Sequence[float | None],
            offered_pps: Sequence[float | None], cap_percent: Sequence[float | None],
            saturated: Iterable[str | None], finite: bool = False, moved: bool | None = None,
            arrays: tuple[Any, Any, Any, Any] | None = None) -> None:
        """A router's measurement at ``t_unix_s``: its VRs ``names`` (in this order) and their values
        (None, or a non-finite number: missing; a ``saturated`` not among :data:`SATURATION_CODES`: None).
        ``finite``: the numbers are known to be finite or None (a validated sample's columns).  ``moved``:
        whether ``forwarded_pps``, ``offered_pps`` or ``saturated`` differ from what the table holds for the
        same VRs, when the caller knows (None: compared here); the router's :meth:`key` changes only then.
        ``arrays``: the same values as the table holds them (``forwarded_pps``, ``offered_pps``,
        ``cap_percent`` as float64 with NaN for missing, the saturation codes), written as they are."""
        names = tuple(names)
        k = len(names)
        w = self._where.get(router)
        if w is None or len(w[1]) != k:
            if w is not None:
                self._used -= len(w[1])
                del self._where[router]
            self._grow(k)
            self._writes += 1
            w = self._where[router] = [self._end, names, t_unix_s, self._writes]
            self._end += k
            self._used += k
            self.layout += 1
            moved = False  # a new key already
        else:
            if w[1] != names:
                self.layout += 1
                w[1] = names
                moved = True
            w[2] = t_unix_s
        s = w[0]
        e = s + k
        if arrays is not None:  # (a sample decoded into arrays: no object per value)
            m, o, c, sat = arrays
        elif finite:  # the three columns in one conversion (None: NaN)
            m, o, c = np.array((forwarded_pps, offered_pps, cap_percent), float)
        else:
            with np.errstate(invalid="ignore"):
                m = np.array(forwarded_pps, float)
                o = np.array(offered_pps, float)
                c = np.array(cap_percent, float)
            if k:  # a non-finite number is missing (the database has no NaN, the API returns none)
                m, o, c = (np.where(np.isfinite(x), x, np.nan) for x in (m, o, c))
        if arrays is None:
            sat = _sat_codes(saturated)
        if moved is None:
            moved = (self.forwarded_pps[s:e].tobytes() != m.tobytes() or self.offered_pps[s:e].tobytes() != o.tobytes()
                     or self.saturated[s:e].tobytes() != sat.tobytes())
        if moved:
            self._writes += 1
            w[3] = self._writes
        self.forwarded_pps[s:e], self.offered_pps[s:e], self.cap_percent[s:e], self.saturated[s:e] = m, o, c, sat

    def set_demand(self, router: str, demand_pps: float) -> None:
        """The router's aggregate demand at its plan now (packets/s), kept until the next and snapshotted."""
        self._demand[router] = demand_pps

    def demand_pps(self, router: str) -> float | None:
        """The router's demand at its last plan (None: none since it is held, or not a finite number)."""
        d = self._demand.get(router)
        return d if d is not None and math.isfinite(d) else None

    def touch(self, router: str, t_unix_s: float) -> bool:
        """A measurement of the router equal to its last one, at ``t_unix_s`` (its :meth:`key` kept); False if
        it has none."""
        w = self._where.get(router)
        if w is None:
            return False
        w[2] = t_unix_s
        return True

    def drop(self, router: str) -> None:
        w = self._where.pop(router, None)
        self._demand.pop(router, None)
        if w is not None:
            self.layout += 1
            self._used -= len(w[1])
            if not self._where:
                self._end = 0

    def vr(self, router: str, name: str) -> dict[str, Any] | None:
        """One VR's live values (``forwarded_pps``, ``offered_pps``, ``cap_percent``, ``saturated``,
        ``last_seen_unix_s``), or None when the table does not hold it."""
        w = self._where.get(router)
        if w is None:
            return None
        try:
            i = w[0] + w[1].index(name)
        except ValueError:
            return None
        return {"forwarded_pps": _num(float(self.forwarded_pps[i])), "offered_pps": _num(float(self.offered_pps[i])),
                "cap_percent": _num(float(self.cap_percent[i])), "saturated": SATURATION_CODES[self.saturated[i]],
                "last_seen_unix_s": w[2]}

    def vrs(self, router: str) -> dict[str, tuple[float | None, float | None, str | None]]:
        """VR name -> (``forwarded_pps``, ``offered_pps``, ``saturated``) of the router (the plan's inputs)."""
        w = self._where.get(router)
        if w is None:
            return {}
        s, names = w[0], w[1]
        e = s + len(names)
        m = [None if x != x else x for x in self.forwarded_pps[s:e].tolist()]
        o = [None if x != x else x for x in self.offered_pps[s:e].tolist()]
        sat = [SATURATION_CODES[c] for c in self.saturated[s:e].tolist()]
        return dict(zip(names, zip(m, o, sat)))

    def columns(self, routers: Sequence[str]) -> tuple[list[tuple[float, str]], list[list[Any]]]:
        """What a snapshot writes of ``routers`` (those held): ``(last_seen_unix_s, router)`` each, and the
        VRs' columns ``forwarded_pps, offered_pps, cap_percent, saturated, last_seen_unix_s, router, name``
        (lists, None for missing), gathered from the arrays in one indexing per column."""
        heads: list[tuple[float, str]] = []
        idx: list[np.ndarray] = []
        seen: list[float] = []
        who: list[str] = []
        names: list[str] = []
        for r in routers:
            w = self._where.get(r)
            if w is None:
                continue
            k = len(w[1])
            heads.append((w[2], r))
            idx.append(np.arange(w[0], w[0] + k))
            seen.extend([w[2]] * k)
            who.extend([r] * k)
            names.extend(w[1])
        if not heads:
            return [], [[], [], [], [], [], [], []]
        ix = np.concatenate(idx)

        def col(a: np.ndarray) -> list[float | None]:
            return [None if x != x else x for x in a[ix].tolist()]

        sat = [SATURATION_CODES[c] for c in self.saturated[ix].tolist()]
        return heads, [col(self.forwarded_pps), col(self.offered_pps), col(self.cap_percent), sat, seen, who, names]
