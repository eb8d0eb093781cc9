"""The paper's rate-limiting mode (section 3.3), pure.

Every backlogged V2V flow ``(x, d)`` may send at any time, at
``min over the links l of P_xd of C_l // n_l`` bits/s, where ``n_l`` is the number of backlogged
flows whose path crosses ``l`` (the paper divides the bottleneck's capacity by the number of
senders through it; counting flows is the same when every sender has one destination and keeps
the sum on every link within its capacity when a sender has several), and at most
``C_x // |B_x|`` so that a host's flows together stay within its NIC.

Beyond the paper: a flow may carry a *demand bound* (:meth:`RateLimiter.demand`, from the agent's
demand reports: it sends less than its rate allows).  A flow whose bound is below the share above
gets its bound; the capacity it leaves on each link and NIC is shared, the same way, among the
other flows there, and so on until no bound is below its share (water-filling over the bounded
flows only).  With no bounds the rates are the paper's, exactly.

Also beyond the paper: a *link fraction* ``f`` (default 1, the paper's) shares ``f C_l`` instead of
``C_l`` on every link, as a phantom queue drains at less than the line rate (HULL, Alizadeh et
al., NSDI 2012): the senders through a link then add up to ``f`` of it, its queue drains between
their bursts and a packet crossing it waits for almost nothing, at the cost of ``1 - f`` of its
capacity.  Above 1 (at most 1.1) the senders may together exceed a link by ``f - 1``: a flow that
started late or was held up can catch up while the others still send, and the link's queue takes
the excess (for TCP, whose own congestion control bounds that queue; senders that do not back off
fill it).  The NICs are not scaled (a host's own NIC is not shared with other hosts).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from ..topology import Topology
from .base import SchedulerDirective, EventError

__all__ = ["MAX_LINK_FRACTION", "RateLimiter"]

#: The largest link fraction (see the module notes): the senders through a link exceed it by at most 10%.
MAX_LINK_FRACTION = 1.1


class RateLimiter:
    """Rate-limiting mode: one rate per backlogged flow, recomputed at every event.

    Parameters
    ----------
    topo : Topology
        The network.
    link_fraction : float
        Share this fraction of each link's capacity (0 < f <= 1.1; see the module notes).
    """

    def __init__(self, topo: Topology, link_fraction: float = 1.0):
        if not 0.0 < link_fraction <= MAX_LINK_FRACTION:
            raise ValueError(f"link_fraction must be within (0, {MAX_LINK_FRACTION:g}], got {link_fraction!r}")
        self.topo = topo
        self.link_fraction = float(link_fraction)
        #: What is shared on each link, bits/s.
        self.link_share_bps = np.floor(topo.link_bps.astype(np.float64) * self.link_fraction).astype(np.int64)
        self.n = topo.n_hosts
        self.now_us = 0
        self.B: list[dict[int, None]] = [{} for _ in range(self.n)]
        self.rate_bps: dict[tuple[int, int], int] = {}
        #: Demand bounds of backlogged flows, bits/s (absent: none, the flow takes its share).
        self.bound_bps: dict[tuple[int, int], int] = {}
        self._n_flows = np.zeros(topo.n_links, dtype=np.int64)

    def _check(self, t_us: int, *hosts: int) -> None:
        if isinstance(t_us, bool) or not isinstance(t_us, (int, np.integer)) or t_us < self.now_us:
            raise EventError(f"t_us={t_us!r} must be an int >= {self.now_us}")
        for x in hosts:
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < self.n:
                raise EventError(f"no host with id {x!r}")

    def _flow(self, x: int, d: int, add: bool) -> None:
        p = self.topo.path(x, d)
        self._n_flows[p] += 1 if add else -1
        if add:
            self.B[x][d] = None
        else:
            del self.B[x][d]
            self.bound_bps.pop((x, d), None)

    def _shares(self, caps: np.ndarray, n_flows: np.ndarray, nic_left: np.ndarray, n_out: np.ndarray,
                flows: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """Each of ``flows``' rate: its links' capacity left over the flows counted there, and its
        host's NIC left over its flows counted."""
        share = np.where(n_flows > 0, caps // np.maximum(n_flows, 1), caps)
        return {(x, d): min(int(nic_left[x]) // int(n_out[x]), int(share[self.topo.path(x, d)].min()))
                for x, d in flows}

    def _recompute(self, t_us: int) -> list[SchedulerDirective]:
        flows = [(x, d) for x in range(self.n) for d in self.B[x]]
        caps = self.link_share_bps.copy()
        nic_left = self.topo.nic_bps.astype(np.int64)
        n_flows = self._n_flows.copy()
        n_out = np.array([len(b) for b in self.B], dtype=np.int64)
        new = self._shares(caps, n_flows, nic_left, n_out, flows)
        if self.bound_bps:
            free = flows
            while True:  # each round fixes at least one bounded flow, so at most len(bound_bps) rounds
                fixed = [f for f in free if f in self.bound_bps and self.bound_bps[f] < new[f]]
                if not fixed:
                    break
                caps = caps.copy()
                for x, d in fixed:
                    b = self.bound_bps[(x, d)]
                    new[(x, d)] = b
                    p = self.topo.path(x, d)
                    caps[p] -= b
                    n_flows[p] -= 1
                    nic_left[x] -= b
                    n_out[x] -= 1
                fixed_set = set(fixed)
                free = [f for f in free if f not in fixed_set]
                new.update(self._shares(np.maximum(caps, 0), n_flows, np.maximum(nic_left, 0), n_out, free))
        out = [SchedulerDirective(t_us, x, d, None, r) for (x, d), r in new.items() if self.rate_bps.get((x, d)) != r]
        out += [SchedulerDirective(t_us, x, d, None, 0) for (x, d) in self.rate_bps if (x, d) not in new]
        self.rate_bps = new
        self.now_us = int(t_us)
        return out

    def advance(self, t_us: int) -> list[SchedulerDirective]:
        """Rates do not expire; only checks the time."""
        self._check(t_us)
        self.now_us = int(t_us)
        return []

    def next_expiry_us(self) -> int | None:
        return None

    def backlog(self, t_us: int, x: int, dests: Iterable[int]) -> list[SchedulerDirective]:
        """Flows from ``x`` to ``dests`` become backlogged."""
        dests = list(dests)
        self._check(t_us, x, *dests)
        if x in dests:
            raise EventError(f"host {self.topo.hosts[x]} cannot be backlogged towards itself")
        for d in dict.fromkeys(dests):
            if d not in self.B[x]:
                self._flow(x, d, True)
        return self._recompute(int(t_us))

    def backlog_many(self, t_us: int, groups: Mapping[int, Iterable[int]]) -> list[SchedulerDirective]:
        """Backlog reports of several hosts at one instant (the rates are recomputed once)."""
        checked = {x: list(ds) for x, ds in groups.items()}
        for x, ds in checked.items():
            self._check(t_us, x, *ds)
            if x in ds:
                raise EventError(f"host {self.topo.hosts[x]} cannot be backlogged towards itself")
        for x, ds in checked.items():
            for d in dict.fromkeys(ds):
                if d not in self.B[x]:
                    self._flow(x, d, True)
        return self._recompute(int(t_us))

    def demand(self, t_us: int, x: int, bounds: Iterable[tuple[int, int]]) -> list[SchedulerDirective]:
        """Host ``x`` reports what its flows need: ``(d, bps)`` bounds flow ``(x, d)`` to ``bps``
        bits/s (> 0), ``(d, 0)`` lifts its bound.  A flow that is not backlogged is left alone (its
        report crossed a give-up)."""
        bounds = list(bounds)
        self._check(t_us, x, *(d for d, _ in bounds))
        for d, bps in bounds:
            if d == x or isinstance(bps, bool) or not isinstance(bps, (int, np.integer)) or bps < 0:
                raise EventError(f"bad demand ({d!r}, {bps!r}) from host {self.topo.hosts[x]}")
            if d not in self.B[x]:
                continue
            if bps:
                self.bound_bps[(x, d)] = int(bps)
            else:
                self.bound_bps.pop((x, d), None)
        return self._recompute(int(t_us))

    def giveup(self, t_us: int, x: int, d: int) -> list[SchedulerDirective]:
        """Flow ``(x, d)`` has nothing more to send (its rate goes to 0)."""
        self._check(t_us, x, d)
        if d in self.B[x]:
            self._flow(x, d, False)
        return self._recompute(int(t_us))

    def leave(self, t_us: int, x: int) -> list[SchedulerDirective]:
        """Host ``x`` leaves: its flows and the flows towards it are dropped."""
        self._check(t_us, x)
        for d in list(self.B[x]):
            self._flow(x, d, False)
        for y in range(self.n):
            if x in self.B[y]:
                self._flow(y, x, False)
        return self._recompute(int(t_us))

    def link_load_bps(self) -> np.ndarray:
        """Sum of the flow rates on every directed link, bits/s."""
        load = np.zeros(self.topo.n_links, dtype=np.int64)
        for (x, d), r in self.rate_bps.items():
            load[self.topo.path(x, d)] += r
        return load
