"""The XCo timeslice scheduler (Algorithm 1 of Rajanna, Shah, Jahagirdar and Gopalan, "XCo: Explicit Coordination for Preventing Congestion in Data Center Ethernet"), pure.

Two implementations of one policy, which must issue the same directives for the same events:

- :class:`ReferenceScheduler` (:mod:`.reference`): written like the paper, with Python sets for
  the backlog groups ``B_x``, the contention groups ``beta_ij`` and the active groups ``alpha_ij``.
- :class:`FastScheduler` (:mod:`.fast`): integer residual capacity per directed link, per-link
  lists of waiting senders kept in service order, and only the senders that could use capacity
  freed by the event are looked at.  This is the one the controller and the replay command use.
  With numba installed (extra ``xco``) it is ``KernelScheduler``, Algorithm 1 compiled over
  arrays (:mod:`._kernel`); without, the pure-Python ``PyFastScheduler``
  (``xtc.xco.scheduler.fast.IMPL`` says which).

The policy, with the choices the paper leaves open (see docs/results/2026-11-26-xco/xco.md):

- Time is divided into slots of ``slice_us`` microseconds starting at ``t_us = 0``.  A directive
  granted at ``t_us`` holds until the end of the slot it was granted in.  All the slices that end at
  one slot boundary expire together, as one scheduling event whose triggering set ``T`` is every
  sender whose slice ends there (Algorithm 1 with a set of triggering nodes instead of one).
- Events: slice expiry (:meth:`advance`), give-up (:meth:`giveup`, work conservation), new backlog
  (:meth:`backlog`), and a host leaving (:meth:`leave`, handled like a give-up of every flow from
  and to it).  Several at one instant: :meth:`backlog_many` (one event; :meth:`backlog_arrays`
  takes the same reports as arrays of hosts, counts and destinations) and :meth:`events_at`
  (backlog reports and give-ups one after the other, in one call: one kernel call with numba).
- Rotation: the affected set ``A`` is traversed least-recently-granted first (ties: host id), and a
  sender's backlog group least-recently-granted destination first.  Every grant moves the sender
  (and the destination within its group) to the back, so the order changes at every event in
  which anybody is served.
- A sender that is transmitting and is not itself in ``T`` tries its current destination first;
  it always still fits, so it keeps its directive and its slice, and is not sent anything.
- A sender of ``T`` (slice ended, or gave up) that gets no destination is sent an explicit hold.

Guarantee (tested in tests/xco): a schedulable sender (one with a backlogged destination whose
path has no link slower than its NIC) that stays backlogged from ``t0_us`` is granted a slice at
or before the ``K``-th slot boundary after ``t0_us``, where ``K`` is one plus the number of other
schedulable senders served less recently than it at ``t0_us`` (so ``K <= number of hosts``).
"""

from .base import SchedulerDirective, EventError, SchedulerBase
from .fast import FastScheduler
from .rate import RateLimiter
from .reference import ReferenceScheduler

__all__ = ["SchedulerDirective", "EventError", "SchedulerBase", "ReferenceScheduler", "FastScheduler", "RateLimiter"]
