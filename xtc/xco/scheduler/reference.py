"""Algorithm 1 written like the paper: sets for B_x, beta_ij and alpha_ij.

Slow on purpose (every event recomputes the contention groups from their definition); it is the
yardstick the fast implementation is tested against.  Line numbers in the comments are those of
Algorithm 1 in Rajanna, Shah, Jahagirdar and Gopalan, "XCo: Explicit Coordination for Preventing Congestion in Data Center Ethernet".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..topology import Topology
from .base import SchedulerBase

__all__ = ["ReferenceScheduler"]


class ReferenceScheduler(SchedulerBase):
    """Reference implementation of the XCo timeslice policy (see :mod:`xtc.xco.scheduler`).

    Takes the parameters of :class:`SchedulerBase` (the network, and the slot length in microseconds).
    """

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        super().__init__(topo, slice_us)
        self.B: list[set[int]] = [set() for _ in range(self.n)]
        self.beta: dict[int, set[int]] = defaultdict(set)
        self.alpha: dict[int, set[int]] = defaultdict(set)
        self.C = {i: int(c) for i, c in enumerate(topo.link_bps)}
        self.Cx = [int(c) for c in topo.nic_bps]

    def P(self, s: int, d: int) -> tuple[int, ...]:
        """P_sd as a tuple of directed link ids."""
        return tuple(self.topo.path(s, d).tolist())

    def backlog_group(self, x: int) -> frozenset[int]:
        return frozenset(self.B[x])

    def _update_beta(self) -> None:
        """beta_ij = { s | exists d in B_s with (i, j) in P_sd }."""
        beta: dict[int, set[int]] = defaultdict(set)
        for s in range(self.n):
            for d in self.B[s]:
                for ij in self.P(s, d):
                    beta[ij].add(s)
        self.beta = beta

    def F(self, alpha_ij: set[int], C_ij: int) -> bool:
        """Feasibility condition (1): sum of C_x over alpha_ij <= C_ij."""
        return sum(self.Cx[x] for x in alpha_ij) <= C_ij

    def _algorithm1(self, t_us: int, trig: Sequence[int], kind: str,
                    adds: Sequence[tuple[int, int]], removals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        for x, d in adds:  # event 3: the new backlog group is known before the event is handled
            self.B[x].add(d)
        self._update_beta()
        T = set(trig)
        D_old = self.dest

        A: set[int] = set()  # 12
        for t in T:  # 13-17 (for each triggering node; its old path too, for a host that leaves)
            dests = set(self.B[t]) | ({D_old[t]} if D_old[t] is not None else set())
            for d in dests:
                for ij in self.P(t, d):
                    A |= self.beta[ij]
        for t in T:  # 18-21
            if D_old[t] is not None:
                for ij in self.P(t, D_old[t]):
                    self.alpha[ij].discard(t)
        for x, d in removals:  # 22-24 (give-up), and the flows dropped by a leave
            self.B[x].discard(d)
        self._update_beta()

        N: list[int] = []  # 26 (kept in grant order)
        in_N: set[int] = set()
        Dnew: dict[int, int] = {}
        while A:  # 27
            x = min(A, key=lambda y: self.key[y])  # 28: least recently granted first
            Dx = None  # 29
            if x not in T and D_old[x] is not None:
                order = [D_old[x]] + self.dest_order(x, self.B[x] - {D_old[x]})
            else:
                order = self.dest_order(x, self.B[x])
            for d in order:  # 30
                if not all(self.F({x} | self.alpha[ij], self.C[ij]) for ij in self.P(x, d)):  # 31-36
                    continue
                Dx = d  # 38
                if D_old[x] is not None:  # 40-46: preempt x's old transmission
                    for ij in set(self.P(x, D_old[x])) - set(self.P(x, Dx)):
                        self.alpha[ij].discard(x)
                        A |= self.beta[ij] - in_N
                for ij in self.P(x, d):  # 47-49
                    self.alpha[ij].add(x)
                break  # 50
            A.discard(x)  # 52
            if Dx is not None:  # 53-56
                N.append(x)
                in_N.add(x)
                Dnew[x] = Dx
        return [(x, Dnew[x]) for x in N]  # 58-61 (the base class sends and records them)
