"""The fast implementation of the XCo timeslice policy: same directives as the reference.

What makes it fast:

- Integer residual capacity per directed link (``res[l] = C_l - sum of C_x of the senders on l``)
  instead of sums over the active groups.
- Per directed link, the rotation keys of the *waiting* senders (backlogged, not transmitting)
  whose backlog crosses it, kept sorted: the contention group minus the active group, already in
  the order Algorithm 1 visits it.
- Only the senders that can use capacity freed by the event are looked at: the triggering senders,
  and the waiting senders on the freed links, visited least recently granted first by merging the
  freed links' lists; a link's list is abandoned as soon as its residual is below the slowest NIC.

Why that gives the reference's directives: within one event, capacity is freed only before the
loop (the triggering senders' old paths); in the loop residuals only go down, because a sender
that is transmitting and not triggering keeps its destination.  So a waiting sender none of whose
paths crosses a freed link with room for it cannot be granted, in either implementation; the
others are visited in the same order with the same destination order and the same test.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Sequence

from ..topology import Topology
from .base import SchedulerBase

__all__ = ["FastScheduler"]


class FastScheduler(SchedulerBase):
    """Fast implementation of the XCo timeslice policy (see :mod:`xtc.xco.scheduler`).

    Takes the parameters of :class:`SchedulerBase` (the network, and the slot length in microseconds).
    """

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        super().__init__(topo, slice_us)
        n = self.n
        self.nic: list[int] = [int(c) for c in topo.nic_bps]
        self.res: list[int] = [int(c) for c in topo.link_bps]
        self._min_nic = min(self.nic)
        #: B_x: destination -> path (tuple of directed link ids), insertion ordered.
        self.B: list[dict[int, tuple[int, ...]]] = [{} for _ in range(n)]
        # Links crossed by x's backlog, with multiplicity (x is in beta_l iff lc[x][l] > 0).
        self._lc: list[dict[int, int]] = [{} for _ in range(n)]
        # Per link: sorted rotation keys of the waiting senders in beta_l.
        self._W: list[list[int]] = [[] for _ in range(topo.n_links)]
        self._host_of_key: dict[int, int] = {k: x for x, k in enumerate(self.key)}
        self._waiting: list[bool] = [False] * n

    # -- backlog bookkeeping ----------------------------------------------------------------------
    def backlog_group(self, x: int) -> frozenset[int]:
        return frozenset(self.B[x])

    def _path(self, x: int, d: int) -> tuple[int, ...]:
        return self.topo.path_tuple(x, d)

    def _set_waiting(self, x: int, waiting: bool) -> None:
        if self._waiting[x] == waiting:
            return
        self._waiting[x] = waiting
        k = self.key[x]
        W = self._W
        if waiting:
            self._host_of_key[k] = x
            for ln in self._lc[x]:
                insort(W[ln], k)
        else:
            self._host_of_key.pop(k, None)
            for ln in self._lc[x]:
                lst = W[ln]
                del lst[bisect_left(lst, k)]

    def _add(self, x: int, d: int) -> None:
        p = self._path(x, d)
        self.B[x][d] = p
        lc = self._lc[x]
        k = self.key[x]
        for ln in p:
            c = lc.get(ln, 0)
            lc[ln] = c + 1
            if c == 0 and self._waiting[x]:
                insort(self._W[ln], k)

    def _remove(self, x: int, d: int) -> None:
        p = self.B[x].pop(d, None)
        if p is None:
            return
        lc = self._lc[x]
        k = self.key[x]
        for ln in p:
            c = lc[ln] - 1
            if c:
                lc[ln] = c
            else:
                del lc[ln]
                if self._waiting[x]:
                    lst = self._W[ln]
                    del lst[bisect_left(lst, k)]

    # -- Algorithm 1 ------------------------------------------------------------------------------
    def _algorithm1(self, t_us: int, trig: Sequence[int], kind: str,
                    adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        for x, d in adds:
            self._add(x, d)
        for x, _ in adds:
            if self.dest[x] is None and self.B[x]:
                self._set_waiting(x, True)
        res = self.res
        nic = self.nic
        dest = self.dest
        freed: set[int] = set()
        for t in trig:  # lines 18-21: t's old path is released
            d0 = dest[t]
            if d0 is not None:
                c = nic[t]
                p = self.B[t].get(d0) or self._path(t, d0)
                for ln in p:
                    res[ln] += c
                freed.update(p)
        for x, d in removals:
            self._remove(x, d)
            if not self.B[x]:
                self._set_waiting(x, False)

        key = self.key
        heap: list[tuple[int, int, int]] = [(key[t], -1, t) for t in trig]
        W = self._W
        min_nic = self._min_nic
        for ln in freed:
            lst = W[ln]
            if lst and res[ln] >= min_nic:
                heap.append((lst[0], ln, 0))
        heapq.heapify(heap)
        host_of_key = self._host_of_key
        seen: set[int] = set()
        grants: list[tuple[int, int]] = []
        dest_key = self._dest_key
        n = self.n
        while heap:
            k, ln, pos = heapq.heappop(heap)
            if ln < 0:
                x = pos
            else:
                x = host_of_key[k]
                lst = W[ln]
                if pos + 1 < len(lst) and res[ln] >= min_nic:
                    heapq.heappush(heap, (lst[pos + 1], ln, pos + 1))
            if x in seen:
                continue
            seen.add(x)
            Bx = self.B[x]
            if not Bx:
                continue
            c = nic[x]
            if len(Bx) == 1:
                order = Bx.items()
            else:
                dk = dest_key[x]
                order = sorted(Bx.items(), key=lambda item: dk.get(item[0], item[0] - n))
            for d, p in order:
                for l2 in p:
                    if res[l2] < c:
                        break
                else:
                    for l2 in p:
                        res[l2] -= c
                    grants.append((x, d))
                    break

        # Waiting lists: the granted stop waiting; triggering senders left without a destination
        # and still backlogged start waiting (with their rotation key, which did not change).
        granted = {x for x, _ in grants}
        for x in granted:
            self._set_waiting(x, False)
        for t in trig:
            if t not in granted and self.B[t]:
                self._set_waiting(t, True)
        return grants
