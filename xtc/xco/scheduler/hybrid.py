"""Hybrid mode: timeslices, and a rate limit inside the slice for the hosts timeslices cannot serve.

A host whose NIC is faster than a link on one of its paths (named at load time in
:attr:`Topology.slow_paths`) never passes the feasibility test of Algorithm 1 towards the hosts
behind that link, even on an idle network: in pure timeslice mode it is starved.  The hybrid mode
gives every host a *slice rate*

    r_x = min(C_x, min over the slow paths of x of their link's capacity)

(so ``r_x = C_x`` for every host without slow paths) and runs the timeslice policy, unchanged, with
``r_x`` in place of ``C_x``: the same :class:`FastScheduler` on a copy of the topology whose NIC
rates are the ``r_x``.  A host granted a slice may send to its destination for the slice, at no more
than ``r_x`` (every directive carries ``rate_bps = r_x``; for a host without slow paths that is its
line rate, i.e. no limit).

Consequences:

- Link feasibility: on every link, the sum of the ``r_x`` of the senders granted a slice across it
  is at most its capacity (Algorithm 1's condition with ``r_x``), and each sender sends at most
  ``r_x``, so no link is ever offered more than its capacity.
- Every host is schedulable (``r_x`` is no faster than any link on any of its paths), so the
  starvation bound of :mod:`xtc.xco.scheduler` holds for every backlogged host.
- It is conservative: ``r_x`` is the slowest link slower than the NIC over *all* the host's paths,
  also used towards destinations whose paths are fast.  A per-flow rate would need per-flow
  capacities in Algorithm 1's test, which the scheduler does not have.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..topology import Topology
from .base import SchedulerDirective
from .fast import FastScheduler

__all__ = ["HybridScheduler", "slice_rates_bps"]


def slice_rates_bps(topo: Topology) -> np.ndarray:
    """The slice rate ``r_x`` of every host, bits/s (int64, indexed by host id).

    ``r_x = min(C_x, capacity of every link slower than C_x on a path of x)``, from
    :attr:`Topology.slow_paths`.
    """
    r = topo.nic_bps.astype(np.int64).copy()
    for s in topo.slow_paths:
        x = topo.host_id(s.host)
        r[x] = min(int(r[x]), int(s.link_bps))
    return r


class HybridScheduler:
    """Timeslice scheduling with the slice rates ``r_x`` (see the module docstring).

    Same event API as :class:`~xtc.xco.scheduler.base.SchedulerBase` (``advance``, ``backlog``,
    ``backlog_many``, ``events_at``, ``giveup``, ``leave``, ``next_expiry_us``, ``dest``, ``slice_end``,
    ``link_load_bps``); every directive that grants a slice carries ``rate_bps = r_x``.

    Parameters
    ----------
    topo : Topology
        The network (with the real NIC rates).
    slice_us : int
        Length of a timeslot, microseconds.
    """

    def __init__(self, topo: Topology, slice_us: int = 10_000):
        self.topo = topo
        self.rate_bps = slice_rates_bps(topo)
        #: Hosts rate-limited inside their slices (``r_x < C_x``).
        self.limited = frozenset(np.flatnonzero(self.rate_bps < topo.nic_bps).tolist())
        self._view = dataclasses.replace(topo, nic_bps=self.rate_bps, slow_paths=())
        self._sched = FastScheduler(self._view, slice_us)
        self.slice_us = slice_us
        self.n = topo.n_hosts

    def _rated(self, out: list[SchedulerDirective]) -> list[SchedulerDirective]:
        r = self.rate_bps
        return [d if d.dest is None else d._replace(rate_bps=int(r[d.host])) for d in out]

    @property
    def dest(self) -> list[int | None]:
        """The destination in force for every host (None = hold)."""
        return self._sched.dest

    @property
    def slice_end(self) -> list[int | None]:
        """End of each host's slice, microseconds (None when holding)."""
        return self._sched.slice_end

    @property
    def now_us(self) -> int:
        return self._sched.now_us

    def next_expiry_us(self) -> int | None:
        """The next slot boundary where slices end, microseconds (None if nobody transmits)."""
        return self._sched.next_expiry_us()

    def backlog_group(self, x: int) -> frozenset[int]:
        """``B_x``."""
        return self._sched.backlog_group(x)

    def advance(self, t_us: int) -> list[SchedulerDirective]:
        """Slice expiries at or before ``t_us``."""
        return self._rated(self._sched.advance(t_us))

    def backlog(self, t_us: int, x: int, dests: Iterable[int]) -> list[SchedulerDirective]:
        """Host ``x`` reports backlogged traffic for ``dests``."""
        return self._rated(self._sched.backlog(t_us, x, dests))

    def backlog_many(self, t_us: int, groups: Mapping[int, Iterable[int]]) -> list[SchedulerDirective]:
        """Several backlog reports at one instant, one scheduling event."""
        return self._rated(self._sched.backlog_many(t_us, groups))

    def events_at(self, t_us: int, events: Sequence[tuple[str, int, Any]]) -> list[SchedulerDirective]:
        """Several backlog reports and give-ups at one instant (:meth:`FastScheduler.events_at`)."""
        return self._rated(self._sched.events_at(t_us, events))

    def giveup(self, t_us: int, x: int, d: int) -> list[SchedulerDirective]:
        """Host ``x`` has nothing more for ``d``."""
        return self._rated(self._sched.giveup(t_us, x, d))

    def leave(self, t_us: int, x: int) -> list[SchedulerDirective]:
        """Host ``x`` leaves."""
        return self._rated(self._sched.leave(t_us, x))

    def link_load_bps(self) -> np.ndarray:
        """Sum of the slice rates ``r_x`` of the senders on every directed link, bits/s."""
        return self._sched.link_load_bps()
