"""What both scheduler implementations share: events, time, slots, rotation keys, directives.

Pure: no I/O and no clock.  Every event method takes the time ``t_us`` (microseconds, an int that
never goes backwards) and returns the directives it issues.  Before an event at ``t_us`` is
handled, every slot boundary at or before ``t_us`` where slices end is handled first (those
directives are returned first, in time order).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from ..topology import Topology

__all__ = ["SchedulerDirective", "EventError", "SchedulerBase"]


class EventError(ValueError):
    """An event the scheduler cannot take (bad host, time going backwards, ...); nothing changed."""


class SchedulerDirective(NamedTuple):
    """A transmission directive (a named tuple: a slot boundary issues hundreds of them, and a
    tuple is built four times faster than a frozen dataclass).

    Attributes
    ----------
    t_us : int
        When it takes effect, microseconds.
    host : int
        The sender (host id).
    dest : int or None
        The one destination host it may send to from ``t_us``; ``None`` means hold (send nothing).
    end_us : int or None
        End of the slice, microseconds (``None`` for a hold and in rate mode).
    rate_bps : int or None
        Rate limit, bits/s (rate mode only).
    """

    t_us: int
    host: int
    dest: int | None
    end_us: int | None = None
    rate_bps: int | None = None


class SchedulerBase:
    """Shared state and event handling; subclasses implement :meth:`_algorithm1`.

    Parameters
    ----------
    topo : Topology
        The network.
    slice_us : int
        Length of a timeslot, microseconds (slots start at multiples of it).
    """

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        if isinstance(slice_us, bool) or not isinstance(slice_us, int) or slice_us <= 0:
            raise ValueError(f"slice_us must be a positive int of microseconds, got {slice_us!r}")
        self.topo = topo
        self.slice_us = slice_us
        n = topo.n_hosts
        self.n = n
        self.now_us = 0
        #: D_x^old: the destination each host may send to now (None = hold).
        self.dest: list[int | None] = [None] * n
        #: End of each host's current slice, microseconds (None when holding).
        self.slice_end: list[int | None] = [None] * n
        # Rotation keys: smaller = granted less recently = goes first.  Never granted: -n + id.
        self.key: list[int] = list(range(-n, 0))
        self._dest_key: list[dict[int, int]] = [{} for _ in range(n)]
        self._seq = 0
        self._active: dict[int, None] = {}
        self._slot_end: int | None = None

    # -- what subclasses provide ------------------------------------------------------------------
    def _algorithm1(self, t_us: int, trig: Sequence[int], kind: str,
                    adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Apply ``adds`` to the backlog groups, run Algorithm 1 for the triggering set ``trig``
        (releasing their current paths, then applying ``removals``), and return the senders given a
        destination as ``(host, dest)`` in the order they were given it."""
        raise NotImplementedError

    def backlog_group(self, x: int) -> frozenset[int]:
        """``B_x``: the destinations host ``x`` has backlogged traffic for."""
        raise NotImplementedError

    # -- rotation helpers (the same for both implementations) -------------------------------------
    def dest_order(self, x: int, dests: Iterable[int]) -> list[int]:
        """Destinations of ``x`` least recently granted first (never granted: by host id)."""
        dk = self._dest_key[x]
        n = self.n
        return sorted(dests, key=lambda d: dk.get(d, d - n))

    # -- events -----------------------------------------------------------------------------------
    def _check_time(self, t_us: int) -> None:
        if isinstance(t_us, bool) or not isinstance(t_us, (int, np.integer)):
            raise EventError(f"t_us must be an int of microseconds, got {t_us!r}")
        if t_us < self.now_us:
            raise EventError(f"t_us={t_us} is before the scheduler's time {self.now_us} (events must come in time order)")

    def _check_host(self, what: str, x: int) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < self.n:
            raise EventError(f"{what}: no host with id {x!r}")
        return int(x)

    def next_expiry_us(self) -> int | None:
        """The next slot boundary where slices end, microseconds (None if nobody transmits)."""
        return self._slot_end if self._active else None

    def advance(self, t_us: int) -> list[SchedulerDirective]:
        """Handle every slice expiry at or before ``t_us``; returns their directives."""
        self._check_time(t_us)
        out: list[SchedulerDirective] = []
        while self._active and self._slot_end is not None and self._slot_end <= t_us:
            b = self._slot_end
            trig = list(self._active)
            out += self._run(b, trig, "expire", (), ())
        self.now_us = int(t_us)
        return out

    def backlog(self, t_us: int, x: int, dests: Iterable[int]) -> list[SchedulerDirective]:
        """Event 3: host ``x`` reports backlogged traffic for ``dests`` (added to ``B_x``)."""
        return self.backlog_many(t_us, {x: dests})

    def backlog_many(self, t_us: int, groups: Mapping[int, Iterable[int]]) -> list[SchedulerDirective]:
        """Backlog reports of several hosts at the same instant, handled as one scheduling event."""
        self._check_time(t_us)
        adds: list[tuple[int, int]] = []
        checked: dict[int, list[int]] = {}
        for x, dests in groups.items():
            x = self._check_host("host", x)
            ds = []
            for d in dests:
                d = self._check_host("dest", d)
                if d == x:
                    raise EventError(f"host {self.topo.hosts[x]} cannot be backlogged towards itself")
                ds.append(d)
            checked[x] = ds
        out = self.advance(t_us)
        trig: list[int] = []
        for x, ds in checked.items():
            have = self.backlog_group(x)
            new = [d for d in dict.fromkeys(ds) if d not in have]
            if not new:
                continue
            adds += [(x, d) for d in new]
            if self.dest[x] is None:
                trig.append(x)
        if adds:
            out += self._run(int(t_us), trig, "backlog", adds, ())
        return out

    def backlog_arrays(self, t_us: int, hosts: np.ndarray, counts: np.ndarray, dests: np.ndarray) -> list[SchedulerDirective]:
        """:meth:`backlog_many` with the reports as arrays: host ``hosts[i]`` reports the next
        ``counts[i]`` destinations of ``dests`` (``{hosts[i]: dests[...]}`` in that order).

        Parameters
        ----------
        t_us : int
            When, microseconds.
        hosts : array of int
            The reporting hosts (distinct host ids).
        counts : array of int
            How many destinations each reports (>= 0).
        dests : array of int
            The destinations, host after host (``len(dests) == sum(counts)``).

        Returns
        -------
        list of SchedulerDirective
            As :meth:`backlog_many`.

        Raises
        ------
        EventError
            A bad time, host or destination, a repeated host, or arrays that do not match; nothing
            changed.
        """
        xa, la, da = self._check_arrays(t_us, hosts, counts, dests)
        ends = np.cumsum(la).tolist()
        ds = da.tolist()
        return self.backlog_many(t_us, {x: ds[e - c:e] for x, c, e in zip(xa.tolist(), la.tolist(), ends)})

    def _check_arrays(self, t_us: int, hosts: Any, counts: Any, dests: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The arrays of :meth:`backlog_arrays` as int64, checked (:class:`EventError` if not)."""
        self._check_time(t_us)
        arrs = []
        for what, a in (("hosts", hosts), ("counts", counts), ("dests", dests)):
            a = np.asarray(a)
            if a.ndim != 1 or not (a.dtype.kind in "iu" or a.size == 0):
                raise EventError(f"backlog_arrays: {what} must be a 1-D array of ints, got {a.dtype} of shape {a.shape}")
            arrs.append(a.astype(np.int64, copy=False))
        xa, la, da = arrs
        n = self.n
        if len(xa) != len(la) or (len(la) and la.min() < 0) or int(la.sum()) != len(da):
            raise EventError(f"backlog_arrays: {len(xa)} hosts, counts summing to {int(la.sum())} (each >= 0)"
                             f" and {len(da)} destinations do not match")
        for what, a in (("host", xa), ("dest", da)):
            bad = a[(a < 0) | (a >= n)]
            if len(bad):
                raise EventError(f"{what}: no host with id {int(bad[0])!r}")
        if len(xa) and np.bincount(xa, minlength=n).max() > 1:
            raise EventError("backlog_arrays: a host is given twice")
        selfs = np.flatnonzero(np.repeat(xa, la) == da)
        if len(selfs):
            raise EventError(f"host {self.topo.hosts[int(da[selfs[0]])]} cannot be backlogged towards itself")
        return xa, la, da

    def events_at(self, t_us: int, events: Sequence[tuple[str, int, Any]]) -> list[SchedulerDirective]:
        """Several events at one instant, handled one after the other (the directives of all of them,
        in order: the same as calling :meth:`backlog` and :meth:`giveup` in turn).

        Parameters
        ----------
        t_us : int
            When, microseconds.
        events : sequence of (str, int, object)
            ``("backlog", x, dests)`` or ``("giveup", x, d)``.

        Returns
        -------
        list of SchedulerDirective
            Those of the slot boundaries due at ``t_us`` first, then those of every event in turn.
        """
        out: list[SchedulerDirective] = []
        for kind, x, arg in events:
            if kind == "backlog":
                out += self.backlog(t_us, x, arg)
            elif kind == "giveup":
                out += self.giveup(t_us, x, arg)
            else:
                raise EventError(f"events_at takes backlog and giveup events, not {kind!r}")
        if not events:
            out += self.advance(t_us)
        return out

    def giveup(self, t_us: int, x: int, d: int) -> list[SchedulerDirective]:
        """Event 2: host ``x`` has nothing more for ``d`` (work conservation).

        If ``d`` is the destination ``x`` is sending to, its capacity is handed to others at once;
        otherwise ``d`` just leaves ``B_x``.  A give-up for a destination not in ``B_x`` changes
        nothing.
        """
        self._check_time(t_us)
        x = self._check_host("host", x)
        d = self._check_host("dest", d)
        out = self.advance(t_us)
        if d not in self.backlog_group(x):
            return out
        trig = [x] if self.dest[x] == d else []
        out += self._run(int(t_us), trig, "giveup", (), [(x, d)])
        return out

    def leave(self, t_us: int, x: int) -> list[SchedulerDirective]:
        """Host ``x`` leaves: its flows, and every flow towards it, are dropped."""
        self._check_time(t_us)
        x = self._check_host("host", x)
        out = self.advance(t_us)
        removals = [(x, d) for d in sorted(self.backlog_group(x))]
        trig = [x] if self.dest[x] is not None else []
        for y in self._backlogged_towards(x):
            removals.append((y, x))
            if self.dest[y] == x:
                trig.append(y)
        if removals or trig:
            out += self._run(int(t_us), trig, "leave", (), removals)
        return out

    def _backlogged_towards(self, x: int) -> list[int]:
        """The hosts with ``x`` in their backlog group, in host order."""
        return [y for y in range(self.n) if y != x and x in self.backlog_group(y)]

    # -- bookkeeping after Algorithm 1 ------------------------------------------------------------
    def _run(self, t_us: int, trig: Sequence[int], kind: str,
             adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[SchedulerDirective]:
        tset = set(trig)
        grants = self._algorithm1(t_us, trig, kind, adds, removals)
        end = (t_us // self.slice_us + 1) * self.slice_us
        out: list[SchedulerDirective] = []
        granted: set[int] = set()
        for x, d in grants:
            granted.add(x)
            if x not in tset and self.dest[x] == d:
                continue  # unchanged: keeps its directive and its slice
            self.dest[x] = d
            self.slice_end[x] = end
            self.key[x] = self._seq
            self._dest_key[x][d] = self._seq
            self._seq += 1
            self._active[x] = None
            out.append(SchedulerDirective(t_us, x, d, end))
        for t in trig:
            if t not in granted and self.dest[t] is not None:
                self.dest[t] = None
                self.slice_end[t] = None
                self._active.pop(t, None)
                out.append(SchedulerDirective(t_us, t, None, None))
        # Every slice in force ends at the end of the slot that holds t_us (earlier boundaries were
        # handled by advance() before this event).
        self._slot_end = end if self._active else None
        self.now_us = int(t_us)
        return out

    # -- for tests and tools ----------------------------------------------------------------------
    def link_load_bps(self) -> np.ndarray:
        """Sum of the NIC rates of the senders on every directed link, bits/s (from the directives)."""
        load = np.zeros(self.topo.n_links, dtype=np.int64)
        nic = self.topo.nic_bps
        for x, d in enumerate(self.dest):
            if d is not None:
                load[self.topo.path(x, d)] += nic[x]
        return load

    def directives(self) -> list[int | None]:
        """The destination in force for every host (None = hold)."""
        return list(self.dest)
