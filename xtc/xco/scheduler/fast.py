"""The fast implementation of the XCo timeslice policy: same directives as the reference.

What makes it fast:

- Integer residual capacity per directed link (``res[l] = C_l - sum of C_x of the senders on l``)
  instead of sums over the active groups.
- Per directed link, the rotation keys of the *waiting* senders (backlogged, not transmitting)
  whose backlog crosses it, kept sorted: the contention group minus the active group, already in
  the order Algorithm 1 visits it.
- Only the senders that can use capacity freed by the event are looked at: the triggering senders,
  and the waiting senders on the released links that were too full for the fastest NIC before the
  event, visited least recently granted first by merging those links' lists; a link's list is
  abandoned as soon as its residual is below the slowest NIC.
- A host with one backlogged destination remembers a link that had no room for it; while that link
  is still too full, the host is skipped without walking its path.
- An event adding many flows updates the waiting lists in bulk (appended, then sorted once).

Why that gives the reference's directives: within one event, capacity is freed only before the
loop (the triggering senders' old paths); in the loop residuals only go down, because a sender
that is transmitting and not triggering keeps its destination.  Before the event the schedule was
maximal, so a waiting sender that fits now had, on the path it fits on, a link without room for
its NIC, and that link was released by the event: it is on one of the merged lists.  Everything
else is visited in the reference's order with the same destination order and the same test.

Why one file: one algorithm in its two forms, the pure-Python :class:`PyFastScheduler` and
:class:`KernelScheduler`, which subclasses it and runs the same steps in compiled kernels
(:mod:`._kernel`); :data:`FastScheduler` picks one of the two here.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from heapq import heapify, heappop, heappush
from itertools import chain

import numpy as np

from ..topology import Topology
from .base import SchedulerDirective, EventError, SchedulerBase

try:
    from . import _kernel
except ImportError:  # numba missing: the pure-Python implementation
    _kernel = None  # type: ignore[assignment]

__all__ = ["FastScheduler", "KernelScheduler", "PyFastScheduler", "IMPL"]


class PyFastScheduler(SchedulerBase):
    """Fast implementation of the XCo timeslice policy in pure Python (see :mod:`xtc.xco.scheduler`);
    :data:`FastScheduler` when numba is missing.

    Takes the parameters of :class:`SchedulerBase` (the network, and the slot length in microseconds).
    """

    #: Events adding more flows than this update the waiting lists in bulk (sorted once).
    bulk_adds = 8

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        super().__init__(topo, slice_us)
        n = self.n
        self.nic: list[int] = [int(c) for c in topo.nic_bps]
        self.res: list[int] = [int(c) for c in topo.link_bps]
        self._min_nic = min(self.nic)
        self._max_nic = max(self.nic)
        #: B_x: destination -> path (tuple of directed link ids), insertion ordered.
        self.B: list[dict[int, tuple[int, ...]]] = [{} for _ in range(n)]
        # Links crossed by x's backlog, with multiplicity (x is in beta_l iff lc[x][l] > 0).
        self._lc: list[dict[int, int]] = [{} for _ in range(n)]
        # Per link: sorted entries ``key * n + host`` of the waiting senders in beta_l (sorting the
        # entries sorts by rotation key, keys being unique; ``entry % n`` is the host).
        self._W: list[list[int]] = [[] for _ in range(topo.n_links)]
        self._waiting: list[bool] = [False] * n
        # Per host with one backlogged destination: a link of that path that had no room for it the
        # last time it was tried (-1: none known).  Checked first; reset when B_x changes.
        self._wit: list[int] = [-1] * n

    # -- backlog bookkeeping ----------------------------------------------------------------------
    def backlog_group(self, x: int) -> frozenset[int]:
        return frozenset(self.B[x])

    def _path(self, x: int, d: int) -> tuple[int, ...]:
        return self.topo.path_tuple(x, d)

    def _set_waiting(self, x: int, waiting: bool) -> None:
        if self._waiting[x] == waiting:
            return
        self._waiting[x] = waiting
        e = self.key[x] * self.n + x
        W = self._W
        if waiting:
            for ln in self._lc[x]:
                insort(W[ln], e)
        else:
            for ln in self._lc[x]:
                lst = W[ln]
                del lst[bisect_left(lst, e)]

    def _add(self, x: int, d: int) -> None:
        p = self._path(x, d)
        self.B[x][d] = p
        self._wit[x] = -1
        lc = self._lc[x]
        waiting = self._waiting[x]
        e = self.key[x] * self.n + x
        for ln in p:
            c = lc.get(ln, 0)
            lc[ln] = c + 1
            if c == 0 and waiting:
                insort(self._W[ln], e)

    def _remove(self, x: int, d: int) -> None:
        p = self.B[x].pop(d, None)
        if p is None:
            return
        self._wit[x] = -1
        lc = self._lc[x]
        waiting = self._waiting[x]
        e = self.key[x] * self.n + x
        for ln in p:
            c = lc[ln] - 1
            if c:
                lc[ln] = c
            else:
                del lc[ln]
                if waiting:
                    lst = self._W[ln]
                    del lst[bisect_left(lst, e)]

    # -- the frequent events, without the generic bookkeeping -------------------------------------
    # Same semantics as SchedulerBase.giveup / backlog: they only skip building frozensets and
    # running advance() when no slot boundary is due.
    def giveup(self, t_us: int, x: int, d: int) -> list[SchedulerDirective]:
        n = self.n
        if type(t_us) is not int or type(x) is not int or type(d) is not int \
                or not (0 <= x < n and 0 <= d < n) or t_us < self.now_us:
            return super().giveup(t_us, x, d)  # validation errors, numpy ints
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        if d not in self.B[x]:
            self.now_us = t_us
            return out
        trig = [x] if self.dest[x] == d else []
        out += self._run(t_us, trig, "giveup", (), [(x, d)])
        return out

    def backlog(self, t_us: int, x: int, dests: Iterable[int]) -> list[SchedulerDirective]:
        n = self.n
        if type(t_us) is not int or type(x) is not int or t_us < self.now_us or not 0 <= x < n:
            return super().backlog(t_us, x, dests)
        ds = list(dests)
        for d in ds:
            if type(d) is not int or not 0 <= d < n or d == x:
                return super().backlog(t_us, x, ds)  # raises the generic error
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        Bx = self.B[x]
        new = [d for d in dict.fromkeys(ds) if d not in Bx]
        if not new:
            self.now_us = t_us
            return out
        trig = [x] if self.dest[x] is None else []
        out += self._run(t_us, trig, "backlog", [(x, d) for d in new], ())
        return out

    def backlog_many(self, t_us: int, groups: Mapping[int, Iterable[int]]) -> list[SchedulerDirective]:
        n = self.n
        if type(t_us) is not int or t_us < self.now_us:
            return super().backlog_many(t_us, groups)
        checked: list[tuple[int, list[int]]] = []
        for x, dests in groups.items():
            ds = list(dests)
            if type(x) is not int or not 0 <= x < n:
                return super().backlog_many(t_us, groups)  # raises the generic error
            for d in ds:
                if type(d) is not int or not 0 <= d < n or d == x:
                    return super().backlog_many(t_us, groups)
            checked.append((x, ds))
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        adds: list[tuple[int, int]] = []
        trig: list[int] = []
        B, dest = self.B, self.dest
        for x, ds in checked:
            Bx = B[x]
            new = [d for d in dict.fromkeys(ds) if d not in Bx] if len(ds) != 1 or ds[0] in Bx else ds
            if not new:
                continue
            adds += [(x, d) for d in new]
            if dest[x] is None:
                trig.append(x)
        if adds:
            out += self._run(t_us, trig, "backlog", adds, ())
        else:
            self.now_us = t_us
        return out

    def _run(self, t_us: int, trig: Sequence[int], kind: str,
             adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[SchedulerDirective]:
        # SchedulerBase._run with the loops written out (same directives, same bookkeeping).
        grants = self._algorithm1(t_us, trig, kind, adds, removals)
        end = (t_us // self.slice_us + 1) * self.slice_us
        out: list[SchedulerDirective] = []
        dest, slice_end, key, dest_key, active = self.dest, self.slice_end, self.key, self._dest_key, self._active
        seq = self._seq
        tset = set(trig) if len(trig) > 1 else trig
        granted: set[int] = set()
        for x, d in grants:
            granted.add(x)
            if dest[x] == d and x not in tset:
                continue  # unchanged: keeps its directive and its slice
            dest[x] = d
            slice_end[x] = end
            key[x] = seq
            dest_key[x][d] = seq
            seq += 1
            active[x] = None
            out.append(SchedulerDirective(t_us, x, d, end))
        self._seq = seq
        for t in trig:
            if t not in granted and dest[t] is not None:
                dest[t] = None
                slice_end[t] = None
                del active[t]
                out.append(SchedulerDirective(t_us, t, None, None))
        self._slot_end = end if active else None
        self.now_us = int(t_us)
        return out

    # -- Algorithm 1 ------------------------------------------------------------------------------
    def _add_bulk(self, adds: Sequence[tuple[int, int]]) -> None:
        """:meth:`_add` for many flows, then the senders without a destination start waiting: the
        waiting lists get every new entry appended and are sorted once."""
        B, lc_all, waiting, dest, key, wit = self.B, self._lc, self._waiting, self.dest, self.key, self._wit
        n = self.n
        path = self.topo.path_tuple
        new: dict[int, list[int]] = {}
        for x, d in adds:
            p = path(x, d)
            Bx = B[x]
            Bx[d] = p
            wit[x] = -1
            lc = lc_all[x]
            if not lc and len(Bx) == 1 and len(set(p)) == len(p):
                lc_all[x] = dict.fromkeys(p, 1)  # the common case: x's first flow
                if waiting[x]:
                    e = key[x] * n + x
                    for ln in p:
                        new.setdefault(ln, []).append(e)
                continue
            w = waiting[x]
            for ln in p:
                c = lc.get(ln, 0)
                lc[ln] = c + 1
                if c == 0 and w:
                    new.setdefault(ln, []).append(key[x] * n + x)
        for x in dict.fromkeys(x for x, _ in adds):
            if dest[x] is None and not waiting[x]:
                waiting[x] = True
                e = key[x] * n + x
                for ln in lc_all[x]:
                    new.setdefault(ln, []).append(e)
        W = self._W
        for ln, es in new.items():
            lst = W[ln]
            lst += es
            lst.sort()

    def _algorithm1(self, t_us: int, trig: Sequence[int], kind: str,
                    adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        B = self.B
        dest = self.dest
        if len(adds) > self.bulk_adds:
            self._add_bulk(adds)
        else:
            for x, d in adds:
                self._add(x, d)
            for x, _ in adds:
                if dest[x] is None:
                    self._set_waiting(x, True)
        res = self.res
        nic = self.nic
        # Released links -> their residual before the event.
        before: dict[int, int] = {}
        for t in trig:  # lines 18-21: t's old path is released
            d0 = dest[t]
            if d0 is not None:
                c = nic[t]
                p = B[t].get(d0) or self._path(t, d0)
                for ln in p:
                    r = res[ln]
                    if ln not in before:
                        before[ln] = r
                    res[ln] = r + c
        for x, d in removals:
            self._remove(x, d)
            if not B[x]:
                self._set_waiting(x, False)

        W = self._W
        min_nic = self._min_nic
        # A waiting sender that fits now had, before the event, a link without room for it on the
        # path it fits on (the schedule was maximal), and that link was released: so only the lists
        # of released links that were too full for the fastest NIC need merging.
        max_nic = self._max_nic
        lists = [ln for ln, r in before.items() if r < max_nic and W[ln] and res[ln] >= min_nic]
        grants = self._first_fit_freed(trig, lists)

        # Waiting lists: the granted stop waiting; triggering senders left without a destination
        # and still backlogged start waiting (with their rotation key, which did not change).
        granted = {x for x, _ in grants}
        for x in granted:
            self._set_waiting(x, False)
        waiting = self._waiting
        for t in trig:
            if not waiting[t] and t not in granted and B[t]:
                self._set_waiting(t, True)
        return grants

    def _fits(self, x: int) -> int | None:
        """The first destination of ``x`` (in its rotation order) whose path has room for its NIC;
        that room is taken.  None if there is none (then, with one destination, the full link is
        remembered as the witness)."""
        Bx = self.B[x]
        res = self.res
        c = self.nic[x]
        if len(Bx) == 1:
            for d, p in Bx.items():
                for l2 in p:
                    if res[l2] < c:
                        self._wit[x] = l2
                        return None
                for l2 in p:
                    res[l2] -= c
                return d
            return None
        dk = self._dest_key[x]
        n = self.n
        for d, p in sorted(Bx.items(), key=lambda item: dk.get(item[0], item[0] - n)):
            for l2 in p:
                if res[l2] < c:
                    break
            else:
                for l2 in p:
                    res[l2] -= c
                return d
        return None

    def _first_fit_freed(self, trig: Sequence[int], lists: list[int]) -> list[tuple[int, int]]:
        """First fit over the triggering senders and the waiting senders on the freed links that
        have room (merged, least recently granted first; a list is left when its link fills)."""
        key, n, res, W, min_nic = self.key, self.n, self.res, self._W, self._min_nic
        nic, wit, B = self.nic, self._wit, self.B
        # Heap entries (rotation entry, link or -1, position in the link's list).
        heap: list[tuple[int, int, int]] = [(key[t] * n + t, -1, 0) for t in trig]
        heap += [(W[ln][0], ln, 0) for ln in lists]
        heapify(heap)
        seen: set[int] = set()
        grants: list[tuple[int, int]] = []
        fits = self._fits
        while heap:
            e, ln, pos = heappop(heap)
            if ln >= 0:
                lst = W[ln]
                pos += 1
                if pos < len(lst) and res[ln] >= min_nic:
                    heappush(heap, (lst[pos], ln, pos))
            x = e % n
            if x in seen:
                continue
            seen.add(x)
            c = nic[x]
            w = wit[x]
            if w >= 0 and res[w] < c:
                continue
            Bx = B[x]
            if len(Bx) == 1:  # _fits, inlined for the common case
                for d, p in Bx.items():
                    for l2 in p:
                        if res[l2] < c:
                            wit[x] = l2
                            break
                    else:
                        for l2 in p:
                            res[l2] -= c
                        grants.append((x, d))
            elif Bx:
                d = fits(x)
                if d is not None:
                    grants.append((x, d))
        return grants


class KernelScheduler(PyFastScheduler):
    """The fast policy with Algorithm 1 in compiled kernels (:mod:`._kernel`, numba); same directives.

    The kernel holds the backlog groups (per flow its path as an array of link ids, and its
    destination rotation key, kept after a give-up for when it is reported again), the integer
    residual capacities, the rotation keys and the waiting lists; :meth:`backlog_group` reads them
    from it.  The Python side keeps ``dest`` and the senders in force, and builds the directives.
    An event in which every sender in force triggers (a slot boundary, a schedule from nothing)
    visits every backlogged host least recently granted first, then refreshes the waiting lists
    (the changed hosts' entries merged in); any other event visits the triggering senders and the waiting senders of the released
    links that were too full for the fastest NIC, as :class:`PyFastScheduler` does.

    Takes the parameters of :class:`SchedulerBase` (the network, and the slot length in microseconds).
    """

    #: Refresh the waiting lists when more hosts than this changed since the last refresh (None:
    #: max(256, hosts / 8); every event scans the changed hosts, a refresh every waiting entry).
    max_dirty: int | None = None

    #: Seconds the first construction in this process spent compiling the kernels or loading them
    #: from numba's cache (None before); paid when the controller starts, not at its first event.
    warm_up_s: float | None = None

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        SchedulerBase.__init__(self, topo, slice_us)
        K = _kernel
        if KernelScheduler.warm_up_s is None:
            KernelScheduler.warm_up_s = K.warm_up()
        n = self.n
        self._min_nic = int(min(topo.nic_bps))
        self._max_nic = int(max(topo.nic_bps))
        if self.max_dirty is None:
            self.max_dirty = max(256, n // 8)
        sw_parent = np.asarray(topo._sw_parent, np.int64)
        self._T = np.stack([sw_parent, np.asarray(topo._sw_depth, np.int64),
                            np.asarray(topo._sw_up, np.int64), np.asarray(topo._sw_down, np.int64)])
        H = np.zeros((n, K.NH), np.int64)
        H[:, K.H_SW] = topo._host_sw
        H[:, K.H_NIC] = topo.nic_bps
        H[:, K.H_HEAD] = -1
        H[:, K.H_DORM] = -1
        H[:, K.H_DEST] = -1
        H[:, K.H_KEY] = np.arange(-n, 0)
        self._H = H
        self._PL = 2 * (max(topo._sw_depth, default=0) + 1) + 2
        self._F = np.zeros((0, K.NF), np.int64)
        self._FP = np.zeros((0, self._PL), np.int64)
        L = topo.n_links
        LK = np.zeros((K.NL, L), np.int64)
        LK[K.L_RES] = topo.link_bps
        LK[K.L_CAP] = topo.link_bps
        self._LK = LK
        self._CS = np.zeros(L + 1, np.int64)
        self._CE = np.zeros((2, 0), np.int64)
        self._ORD = np.zeros(0, np.int64)  # backlogged hosts in key order at the last refresh
        ctr = self._ctr = np.zeros(K.NC, np.int64)  # (with run_batch's status and run_one's event)
        ctr[K.C_MIN_NIC] = self._min_nic
        ctr[K.C_MAX_NIC] = self._max_nic
        ctr[K.C_MAX_DIRTY] = self.max_dirty
        self._io = np.zeros(64, np.int64)
        self._W = np.zeros(5 * n + 4, np.int64)  # out, fl, run_batch's order of the hosts for a refresh
        self._out = self._W[:3 * n + 4]
        self._fl = self._W[3 * n + 4:4 * n + 4]
        self._obuf = self._W[4 * n + 4:]
        self._dbuf = np.zeros(n, np.int64)
        self._rec = np.empty(4 * n + 64, np.int64)  # run_batch's records (grown before a long batch)

    @property
    def res(self) -> list[int]:
        """Residual capacity per directed link, bits/s (a copy)."""
        return self._LK[_kernel.L_RES].tolist()

    def backlog_group(self, x: int) -> frozenset[int]:
        k = _kernel.backlog_of(self._H, self._F, x, self._dbuf)
        return frozenset(self._dbuf[:k].tolist())

    def _free_slots(self, need: int) -> None:
        """Make sure the kernel has ``need`` free flow slots."""
        ctr = self._ctr
        nfree = int(ctr[_kernel.C_FREE])
        if need <= nfree:
            return
        F, FP = self._F, self._FP
        cap = F.shape[0]
        new = max(cap + need - nfree, 2 * cap, 64)
        F2 = np.zeros((new, F.shape[1]), np.int64)
        F2[:cap] = F
        FP2 = np.zeros((new, self._PL), np.int64)
        FP2[:cap] = FP
        # free slots: the old free stack, then the new slots (taken from the top: highest first)
        old_free = F[:nfree, _kernel.F_FREE].copy()
        F2[:new - cap, _kernel.F_FREE] = np.arange(new - 1, cap - 1, -1)
        F2[new - cap:new - cap + nfree, _kernel.F_FREE] = old_free
        ctr[_kernel.C_FREE] = new - cap + nfree
        self._F, self._FP = F2, FP2

    # -- events -----------------------------------------------------------------------------------
    def giveup(self, t_us: int, x: int, d: int) -> list[SchedulerDirective]:
        n = self.n
        if type(t_us) is not int or type(x) is not int or type(d) is not int \
                or not (0 <= x < n and 0 <= d < n) or t_us < self.now_us:
            return SchedulerBase.giveup(self, t_us, x, d)  # validation errors, numpy ints
        return self._one(t_us, 0, x, d)

    def backlog(self, t_us: int, x: int, dests: Iterable[int]) -> list[SchedulerDirective]:
        n = self.n
        if type(t_us) is not int or type(x) is not int or t_us < self.now_us or not 0 <= x < n:
            return SchedulerBase.backlog(self, t_us, x, dests)
        ds = dests if type(dests) is list else list(dests)
        for d in ds:
            if type(d) is not int or not 0 <= d < n or d == x:
                return SchedulerBase.backlog(self, t_us, x, ds)  # raises the generic error
        if len(ds) == 1:
            return self._one(t_us, 1, x, ds[0])
        return self._batch(t_us, [1, 0, 1, x, len(ds), *ds], len(ds))

    def backlog_many(self, t_us: int, groups: Mapping[int, Iterable[int]]) -> list[SchedulerDirective]:
        """:meth:`SchedulerBase.backlog_many`, through :meth:`backlog_arrays` (one kernel call)."""
        xs = list(groups)
        vals = [v if type(v) is list else list(v) for v in groups.values()]
        flat = list(chain.from_iterable(vals))
        if type(t_us) is not int or not set(map(type, xs)) <= {int} or not set(map(type, flat)) <= {int}:
            # numpy ints, or the generic error (iterators consumed: the generic path gets the lists)
            return SchedulerBase.backlog_many(self, t_us, dict(zip(xs, vals)))
        try:
            return self.backlog_arrays(t_us, np.array(xs, np.int64), np.fromiter(map(len, vals), np.int64, len(vals)),
                                       np.array(flat, np.int64))
        except EventError:
            return SchedulerBase.backlog_many(self, t_us, dict(zip(xs, vals)))  # raises the generic error

    def backlog_arrays(self, t_us: int, hosts: np.ndarray, counts: np.ndarray, dests: np.ndarray) -> list[SchedulerDirective]:
        """:meth:`SchedulerBase.backlog_arrays` in one kernel call (:func:`._kernel.add_backlogs`,
        then the event)."""
        xa, la, da = self._check_arrays(t_us, hosts, counts, dests)
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        self._free_slots(len(da))
        trig = np.empty(len(xa), np.int64)
        na, nt = _kernel.add_backlogs(self._H, self._T, self._F, self._FP, self._ctr, xa, la, da, trig)
        if not na:
            self.now_us = int(t_us)
            return out
        out += self._run(int(t_us), trig[:nt], "backlog", (), ())
        return out

    def events_at(self, t_us: int, events: Sequence[tuple[str, int, Any]]) -> list[SchedulerDirective]:
        """:meth:`SchedulerBase.events_at` in one kernel call (:func:`._kernel.run_batch`) when every
        event is a well-formed give-up or backlog report (otherwise one event after the other)."""
        n = self.n
        if len(events) == 1:  # (the usual case: one handler, no batch built)
            kind, x, arg = events[0]
            if kind == "giveup":
                return self.giveup(t_us, x, arg)
            if kind == "backlog":
                return self.backlog(t_us, x, arg)
        if type(t_us) is not int or t_us < self.now_us or len(events) < 2:
            return SchedulerBase.events_at(self, t_us, events)
        ev = [len(events), 0]  # (the senders in force are filled in by _batch)
        flows = 0
        for kind, x, arg in events:
            if type(x) is not int or not 0 <= x < n:
                return SchedulerBase.events_at(self, t_us, events)
            if kind == "giveup":
                if type(arg) is not int or not 0 <= arg < n:
                    return SchedulerBase.events_at(self, t_us, events)
                ev += (0, x, 1, arg)
            elif kind == "backlog":
                if type(arg) is not list:  # (a one-shot iterable must survive a fallback below)
                    return self.events_at(t_us, [(k, y, a if k != "backlog" or type(a) is list else list(a))
                                                 for k, y, a in events])
                for d in arg:
                    if type(d) is not int or not 0 <= d < n or d == x:
                        return SchedulerBase.events_at(self, t_us, events)
                ev += (1, x, len(arg), *arg)
                flows += len(arg)
            else:
                return SchedulerBase.events_at(self, t_us, events)
        return self._batch(t_us, ev, flows)

    def _one(self, t_us: int, kind: int, x: int, d: int) -> list[SchedulerDirective]:
        """A well-formed give-up (``kind`` 0) or backlog report of one destination (1) of ``x`` for
        ``d`` at ``t_us`` (:func:`._kernel.run_one`: no array built), after the slot boundary due."""
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        if kind:
            self._free_slots(1)
        K = _kernel
        H, F, FP, LK, ctr, rec, W = self._H, self._F, self._FP, self._LK, self._ctr, self._rec, self._W
        na = len(self._active)
        while K.run_one(H, self._T, F, FP, LK, self._CS, self._CE, self._ORD, ctr, W, rec, na, kind, x, d):
            self._refresh_for_batch()
        return self._records(t_us, out)

    def _batch(self, t_us: int, ev: list[int], flows: int) -> list[SchedulerDirective]:
        """Well-formed give-ups and backlog reports at ``t_us`` (``ev`` as :func:`._kernel.run_batch`
        takes it, ``flows`` destinations reported in all), after the slot boundary due if any."""
        due = self._active and self._slot_end is not None and self._slot_end <= t_us
        out = self.advance(t_us) if due else []
        if flows:
            self._free_slots(flows)
        K = _kernel
        nev = ev[0]
        rec = self._rec
        if len(rec) < 2 * (self.n + 2 * nev):
            rec = self._rec = np.empty(4 * (self.n + 2 * nev), np.int64)
        ev[1] = len(self._active)
        eva = np.array(ev, np.int64)
        H, F, FP, LK, ctr, W = self._H, self._F, self._FP, self._LK, self._ctr, self._W
        while K.run_batch(H, self._T, F, FP, LK, self._CS, self._CE, self._ORD, ctr, eva, W, rec):
            self._refresh_for_batch()
        return self._records(t_us, out)

    def _refresh_for_batch(self) -> None:
        """The refresh :func:`._kernel.run_batch` asked for (its status says with what)."""
        K = _kernel
        st = self._ctr[K.C_ST:K.C_ST + 7]
        self._CS, self._CE, self._ORD = K.refresh(self._H, self._F, self._FP, self._LK, self._ctr, self._CS,
                                                  self._CE, self._ORD, self._obuf[:st[6]], st[5], st[4])

    def _records(self, t_us: int, out: list[SchedulerDirective]) -> list[SchedulerDirective]:
        """The directives of :func:`._kernel.run_batch`'s records (appended to ``out``)."""
        nrec = int(self._ctr[_kernel.C_ST + 3])
        if nrec:
            r = self._rec[:2 * nrec].tolist()
            end = (t_us // self.slice_us + 1) * self.slice_us
            dest, active = self.dest, self._active
            mk = tuple.__new__
            for x, d in zip(r[0::2], r[1::2]):
                if d >= 0:
                    dest[x] = d
                    active[x] = None
                    out.append(mk(SchedulerDirective, (t_us, x, d, end, None)))
                else:
                    dest[x] = None
                    del active[x]
                    out.append(mk(SchedulerDirective, (t_us, x, None, None, None)))
            self._slot_end = end if active else None
        self.now_us = t_us
        return out

    def _backlogged_towards(self, x: int) -> list[int]:
        return _kernel.flows_to(self._H, self._F, x).tolist()

    def _run(self, t_us: int, trig: Sequence[int], kind: str,
             adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[SchedulerDirective]:
        K = _kernel
        dest = self.dest
        if isinstance(trig, np.ndarray):  # (many backlog reports: flows recorded, no adds here)
            m = 3 + len(trig)
            if m > len(self._io):
                self._io = np.zeros(2 * m, np.int64)
            self._io[:3] = (len(trig), 0, 0)
            self._io[3:m] = trig
            trig = trig.tolist()
            io: list[int] = []
        else:
            io = [len(trig), len(adds), len(removals), *trig]
        for x, d in adds:
            io += (x, d)
        for x, d in removals:
            io += (x, d)
        if adds:
            self._free_slots(len(adds))
        if io:
            m = len(io)
            if m > len(self._io):
                self._io = np.zeros(2 * m, np.int64)
            self._io[:m] = io
        active = self._active
        if kind == "expire" or not active:
            full = 1
        elif kind == "backlog":
            full = 0
        else:  # give-up, leave: full if every sender in force triggers
            full = 1 if len(trig) == len(active) else 0
        order, nw = K.run_event(self._H, self._T, self._F, self._FP, self._LK, self._CS, self._CE, self._ORD,
                                self._ctr, self._io, self._out, self._fl, full)
        if full or self._ctr[K.C_DIRTY] > self.max_dirty:
            self._CS, self._CE, self._ORD = K.refresh(self._H, self._F, self._FP, self._LK, self._ctr, self._CS,
                                                      self._CE, self._ORD, order, nw, full)
        out_arr = self._out
        ng = int(out_arr[0])
        nh = int(out_arr[1])
        o = out_arr[2:2 + 2 * ng + nh].tolist()
        end = (t_us // self.slice_us + 1) * self.slice_us
        mk = tuple.__new__  # SchedulerDirective(t_us, x, d, end), without the argument handling
        out = []
        add = out.append
        # (the order of _active is the order of the triggering set at the next slot boundary, and
        # so of its holds: kept as the base class keeps it)
        for x, d in zip(o[0:2 * ng:2], o[1:2 * ng:2]):
            dest[x] = d
            active[x] = None
            add(mk(SchedulerDirective, (t_us, x, d, end, None)))
        for t in o[2 * ng:]:
            dest[t] = None
            del active[t]
            add(mk(SchedulerDirective, (t_us, t, None, None, None)))
        self._slot_end = end if active else None
        self.now_us = int(t_us)
        return out

    # What the base class keeps per grant, derived here on demand (the kernel holds the keys, and
    # every slice in force ends at the same slot boundary).
    @property  # type: ignore[override]
    def key(self) -> list[int]:
        """Rotation key of every host (a copy; see :class:`SchedulerBase`)."""
        return self._H[:, _kernel.H_KEY].tolist()

    @key.setter
    def key(self, value: list[int]) -> None:
        pass  # set by SchedulerBase.__init__ (the initial keys, which the kernel starts from too)

    @property  # type: ignore[override]
    def slice_end(self) -> list[int | None]:
        """End of every host's current slice, microseconds (None when holding); a copy."""
        end = self._slot_end
        return [None if d is None else end for d in self.dest]

    @slice_end.setter
    def slice_end(self, value: list[int | None]) -> None:
        pass  # set by SchedulerBase.__init__ (nobody transmits)


#: The implementation the controller uses: compiled kernels when numba is installed.
FastScheduler: type[PyFastScheduler] = KernelScheduler if _kernel is not None else PyFastScheduler
#: Which one :data:`FastScheduler` is: ``"numba"`` or ``"python"``.
IMPL = "numba" if _kernel is not None else "python"
