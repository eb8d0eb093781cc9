"""The XCo local coordinator (agent), pure: controller datagrams, gate counters and time in;
datagrams to send and destination states out.  No I/O, no clock: every call takes ``now_us`` (wall clock,
microseconds since the Unix epoch).

One agent runs on each host.  Its flows are every (local VM, remote VM) pair of the topology, each
a :class:`~xtc.host.gate.Flow` with the remote VM's host id; the gate holds the large ones by
destination host (one class each, :attr:`AgentCore.dests`), which is what directives name, so the
core's states, backlogs and decisions are per destination.  The rules (docs/results/2026-11-26-xco/xco.md, "Agent"):

- **Register** (with the topology digest and this host's VMs) every ``register_interval_us`` until
  a welcome arrives; then a **heartbeat** every ``heartbeat_interval_us`` of the welcome.
- **Timeslice directives** take effect at their ``start_us`` (:meth:`AgentCore.next_deadline_us`
  says when): the directive's destination host opens, every other one closes; a hold closes them
  all.  A directive stays in force until the next one.  In hybrid mode a slice may carry a rate:
  the destination then opens at that rate (bits/s) instead of the line rate.  The change is precomputed: a directive
  closes the old destination and opens the new one, whatever the number of flows.
- **Small flows are never held**: a flow stays in a class of its own, unheld, until it has sent
  more than ``small_flow_bytes``; then it is moved into its destination's class
  (:attr:`AgentOutput.moved`) and the destination is *large* (held by the directives).  ICMP is
  the gate's business: it never enters a flow's class.
- **Backlog**: a held-back (large) destination with bytes queued in its class is reported once,
  in one Backlog message with the other newly backlogged destinations.
- **Give-up** (work conservation): a reported destination whose class has had nothing queued at
  every observation for ``giveup_after_us`` is given up (for the current destination, that hands
  the rest of the slice to others).  In rate mode "nothing queued" is "nothing queued and nothing
  sent": a flow served within its rate queues nothing, and only a flow that stopped is given up.
- **Quiet give-up** (timeslices, ``giveup_quiet_us`` > 0): the destination in force is given up
  at once when two class dumps ``giveup_quiet_us`` or more apart prove that nothing entered its
  class between them (the bytes it let out equal the bytes queued at the first, nothing queued at
  the second): silence over the whole stretch, not two empty samples.  A queue that empties
  while its sender still sends (what the hysteresis is for) keeps the slice; only a sender that
  sent nothing for ``giveup_quiet_us`` loses it.  :meth:`AgentCore.drain_poll_us` says when to
  read the counters to see it: when the class's queue at the last dump has drained at the
  slice's rate, and then when the quiet stretch is long enough.
- **Rate mode**: a rate directive sets, from its ``start_us``, the rate of each named destination
  host (0 = stop): its class is limited to that rate.  Rates are forgotten when
  failing open; the controller answers every backlog report with all of this host's rates, so the
  re-report after a fail-open brings them back, and an ack that holds a reported destination for
  which no rate is in force or pending (a rate directive lost) has it reported again.
- **Demand** (rate mode, beyond the paper): every ``demand_window_us`` the agent measures what
  each reported destination sent; a flow that used less than 70% of its rate is reported with a
  bound of 5/4 of what it sent, and the bound is lifted when it uses 95% or more, so that the
  controller gives the share it cannot fill to the flows that can (docs/results/2026-11-26-xco/xco.md, "Demand").
- **Heartbeats and acks**: the controller answers every heartbeat with an ack carrying this
  host's backlog as it holds it.  While this host waits for the controller (a reported backlog or
  a destination in force) it sends a heartbeat after each silent slice (nothing heard for a slice
  and a quarter, at most 500 us more: directives a slice apart, a little late, are not silence);
  a backlog or give-up sent has a heartbeat within a slice until an ack covers it; else one every
  ``heartbeat_interval_us`` (before, a waiting host heartbeated every slice even while directives
  came every slice: a datagram each way and two wake-ups a slice).  An ack that lacks a destination reported before the heartbeat (a report lost, or refused because
  the destination had not registered yet) has it reported again, and one that holds a destination
  given up before the heartbeat has the give-up sent again.
- **Fail open**: while waiting, when nothing at all has come from the controller for
  ``fail_open_slices`` slices and the first heartbeat sent since is a slice old (so a stall of
  this host's own loop does not fail it open), every destination is OPEN and :attr:`AgentCore.failed_open`
  is set (a ``fail_open`` note).  Failed open, it registers at once and then every
  ``register_interval_us``
  (a restarted controller knows it no more); a directive, welcome or ack resumes control and the
  backlogs are re-reported.
- **Controller restart**: a welcome or directive of a new controller session (sent later than the
  last message of the old one) is accepted; the sequence check restarts with it and the backlogged
  destinations are re-reported.
- **Register again when idle and unanswered**: an idle host (nothing waits for the controller)
  does not fail open, but when a heartbeat stays unanswered for a heartbeat interval it registers
  again (at most every ``register_interval_us``; counted in :attr:`AgentCore.reregisters`): a
  controller that dropped it answers a register only, and refuses backlogs towards it meanwhile.
- **Leave** on :meth:`AgentCore.stop`.

A controller datagram that fails a check is dropped and counted in :attr:`AgentCore.dropped` by
reason (:data:`DROP_REASONS`), never raised.

Why one file: :class:`AgentCore` is one state machine, and the rules above are its transitions:
they read and write the same per-destination state (in force, pending, reported, given up, rates,
demand), so each rule is one method beside the others rather than a module of its own; the I/O
around it is :mod:`xtc.xco.agent_service`.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import protocol as P
from xtc.host.gate import CLOSED, OPEN, DestStats, Flow
from .topology import Topology

__all__ = ["DROP_REASONS", "AgentCore", "AgentOutput", "AppliedDirective", "flows_of"]

#: Why a datagram from the controller is dropped.
DROP_REASONS = (
    "malformed",   # not a protocol-1 message
    "version",     # another protocol version
    "address",     # not from the controller's address (counted by the service)
    "invalid",     # a host-to-controller type, addressed to another host, or a destination that is
                   # this host or not in the topology
    "stale",       # t_us further than clock_window_us from this host's clock
    "replay",      # seq not above the last of the controller's session, or an older session
    "auth",        # with a shared key: the datagram's tag does not verify (counted by the service)
)


def flows_of(topo: Topology, host: int) -> tuple[Flow, ...]:
    """Every VM-to-VM flow leaving ``host``: its VMs x the VMs of every other host, sorted.

    Parameters
    ----------
    topo : Topology
        The network (its ``vms`` map: address -> host name).
    host : int
        This host's id.
    """
    me = topo.hosts[host]
    def key(a: Any) -> tuple[int, int]:  # IPv4 and IPv6 addresses do not compare
        return (a.version, int(a))

    local = sorted((ipaddress.ip_address(a) for a, h in topo.vms.items() if h == me), key=key)
    remote = sorted(((ipaddress.ip_address(a), topo.host_id(h)) for a, h in topo.vms.items() if h != me),
                    key=lambda p: key(p[0]))
    return tuple(Flow(s, d, x) for s in local for d, x in remote if s.version == d.version)


@dataclass(frozen=True, slots=True)
class AppliedDirective:
    """A directive that took effect: when it arrived and when it was due (``start_us``), us."""

    arrival_us: int
    start_us: int
    dest: int | None  # timeslice destination (None = hold); -1 for a rate directive
    rate_bps: int | None = None  # the slice's rate (hybrid mode), None = the line rate


@dataclass
class AgentOutput:
    """What a call of the core asks the service to do.

    Attributes
    ----------
    sends : list of bytes
        Datagrams for the controller, in order.
    moved : list of Flow
        Flows that turned large: to move into their destination's class
        (:meth:`~xtc.host.gate.Gate.move_to_dest`), before the states are set.
    states : dict
        Destination host -> new state (``OPEN``, ``CLOSED`` or a rate, bits/s), only those that
        change.
    applied : list of AppliedDirective
        Directives that took effect in this call (the gate change is in ``states``).
    until : dict
        With ``slot_budget``: destination host -> the wall time (us) its open slice ends, for the
        destinations ``states`` opens (or keeps open, named again) by a timeslice directive: the
        service gives each the bytes its link carries until then
        (:meth:`~xtc.host.gate.Gate.set_states`' ``open_for_us``).
    """

    sends: list[bytes] = field(default_factory=list)
    states: dict[int, int] = field(default_factory=dict)
    applied: list[AppliedDirective] = field(default_factory=list)
    moved: list[Flow] = field(default_factory=list)
    until: dict[int, int] = field(default_factory=dict)

    def __iadd__(self, o: AgentOutput) -> AgentOutput:
        self.sends += o.sends
        self.moved += o.moved
        self.states.update(o.states)
        self.applied += o.applied
        for d in o.states:  # a later state of a destination replaces an earlier slice end
            self.until.pop(d, None)
        self.until.update(o.until)
        return self


@dataclass(slots=True)
class _Pending:
    start_us: int
    arrival_us: int
    dest: int | None = None              # timeslice
    rate_bps: int | None = None          # the slice's rate (hybrid mode)
    rates: tuple[tuple[int, int], ...] | None = None  # rate mode


#: Rate mode, demand reports: the window over which a flow's sending rate is measured, us.
DEMAND_WINDOW_US = 50_000
#: A flow that sent less than this fraction of its rate is bounded ...
DEMAND_SPARE_FRACTION = 0.7
#: ... to this multiple of what it sent (5/4), so that it can grow and show it ...
DEMAND_HEADROOM_NUM, DEMAND_HEADROOM_DEN = 5, 4
#: ... and a bound is lifted when the flow sends at this fraction of its rate or more.
DEMAND_USE_FRACTION = 0.95
#: The bounds in force are sent again every this many windows (a lost report is repaired).
DEMAND_REFRESH_WINDOWS = 10


class AgentCore:
    """The agent's decisions, pure.

    Parameters
    ----------
    topo : Topology
        The network; ``host`` is an index into ``topo.hosts``.
    host : int
        This host's id.
    digest : bytes
        The topology file's 8-byte digest (:func:`xtc.xco.protocol.topology_digest`).
    now_us : int
        Wall clock at start, microseconds since the Unix epoch.
    session : int
        This agent's session number (random at each start), 0 .. 2**32 - 1.
    small_flow_bytes : int
        A flow that has sent this many bytes or fewer is never held.
    giveup_after_us : int
        A reported destination with nothing queued for this long is given up.
    giveup_quiet_us : int
        Timeslices: the destination in force is given up as soon as the counters prove that
        nothing entered its class for this long (0: off, only ``giveup_after_us``).
    register_interval_us : int
        Register re-sent this often until welcomed (and while failed open).
    fail_open_slices : int
        Slices of silence from the controller, while waiting for it, before failing open.
    clock_window_us : int
        Largest accepted difference between a message's ``t_us`` and ``now_us``.
    slot_budget : bool
        Timeslices: name the end of each open slice (:attr:`AgentOutput.until`), so that the gate
        holds the destination at the slot's end by itself, however late the next directive is
        applied.  A directive holds until the end of its slot (docs/results/2026-11-26-xco/xco.md, "Slots"); its slice is
        extended ahead of time when the next slot's directive, for the same destination, has arrived.
    """

    def __init__(self, topo: Topology, host: int, digest: bytes, now_us: int, *, session: int,
                 small_flow_bytes: int = 100_000, giveup_after_us: int = 2_000,
                 register_interval_us: int = 100_000, fail_open_slices: int = 3,
                 clock_window_us: int = 1_000_000, demand_window_us: int = DEMAND_WINDOW_US,
                 giveup_quiet_us: int = 0, slot_budget: bool = False):
        self.topo = topo
        self.host = host
        self.name = topo.hosts[host]
        self.digest = digest
        self.session = session
        self.small_flow_bytes = small_flow_bytes
        self.giveup_after_us = giveup_after_us
        self.giveup_quiet_us = giveup_quiet_us
        self.register_interval_us = register_interval_us
        self.fail_open_slices = fail_open_slices
        self.clock_window_us = clock_window_us
        self.demand_window_us = demand_window_us
        self.slot_budget = slot_budget
        #: With ``slot_budget``: the end of the open slice the gate was given (wall us), None if none.
        self.open_until_us: int | None = None
        self._reopen: int | None = None  # a budgeted destination a fail-open must open plainly
        self.flows = flows_of(topo, host)
        self.vms = tuple(sorted(a for a, h in topo.vms.items() if h == self.name))
        #: The destination hosts of :attr:`flows`, sorted: the gate's classes, the index of every
        #: per-destination array here and of :meth:`observe_counters`' arguments.
        self.dests: tuple[int, ...] = tuple(sorted({f.dest_host for f in self.flows}))
        # outgoing
        self._seq = 0
        self._next_register_us = now_us
        self._next_heartbeat_us: int | None = None
        # controller
        self.welcomed = False
        self.slice_us = 0
        self.mode = "timeslice"
        self.heartbeat_interval_us = 0
        self.ctl_session: int | None = None
        self._ctl_seq = 0
        self._ctl_t_us = 0
        self.last_heard_us = now_us
        self._last_register_us = now_us
        self._first_unanswered_us: int | None = None  # the first heartbeat sent since last_heard_us
        self._last_heartbeat_us = now_us
        self._changed_seq: dict[int, int] = {}  # destination -> seq of its last backlog or give-up
        self._last_change_seq = 0  # seq of the last backlog or give-up sent
        self._acked_seq = 0        # seq of the last heartbeat acked
        self.failed_open = False
        self.failed_open_since_us: int | None = None  # when the last fail-open began
        # schedule
        self._pending: list[_Pending] = []
        self.dest: int | None = None          # timeslice destination in force (None = hold / none)
        self.dest_rate_bps: int | None = None  # its rate (hybrid mode; None = the line rate)
        self.rates: dict[int, int] = {}       # rate mode: destination host -> bits/s in force
        # demand (rate mode): the bounds told to the controller, and the measuring window
        self.bounds: dict[int, int] = {}      # destination -> bound reported, bits/s (absent: none)
        self._lifted: set[int] = set()        # bounds lifted since the last refresh (sent again then)
        n = len(topo.hosts)
        self._win_start_us = np.full(n, -1, dtype=np.int64)   # by destination host id; -1: no window
        self._win_sent = np.zeros(n, dtype=np.int64)           # its class's sent bytes then
        self._win_rate = np.zeros(n, dtype=np.int64)           # the rate in force then
        self._last_sent: np.ndarray | None = None              # sent bytes at the last observation
        self._next_refresh_us: int | None = None
        self._min_bound_bps = max(1, int(topo.nic_bps[host]) // 1000)
        # flows and destinations
        #: The flows not moved to their destination's class yet, in the order of :attr:`flows`
        #: (a new tuple each time one turns large): the gate's counters() reads their own classes.
        self.small_flows: tuple[Flow, ...] = self.flows
        self.large_flows: set[Flow] = set()
        self.large: set[int] = set()         # destinations with a large flow (held by directives)
        self.reported: set[int] = set()       # destinations reported backlogged (B_x as we told it)
        self._idle_since: dict[int, int] = {}  # reported destination -> first observation with no queue
        self.last_giveup_us: int | None = None  # when the last give-up was sent
        # The quiet give-up (timeslices): the last class dump, and the quiet stretch of the
        # destination in force.
        self._obs_us: int | None = None              # when the last dump was taken
        self._obs_sent: np.ndarray | None = None     # its sent bytes by destination index (None: unknown)
        self._obs_backlog: np.ndarray | None = None  # its queued bytes by destination index
        self._quiet_since_us: int | None = None      # nothing entered the class in force since then
        self.opened_us: int | None = None            # when the destination in force was applied
        # The same by index into dests, for the hot path.
        self._dindex = {d: i for i, d in enumerate(self.dests)}
        self._large_i = [False] * len(self.dests)
        self._state_i = [OPEN] * len(self.dests)
        self._large_np = np.zeros(len(self.dests), dtype=bool)
        self._dest_np = np.array(self.dests, dtype=np.int64)
        # counters and notes
        self.dropped: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.directives = 0
        self.fail_opens = 0
        self.reregisters = 0
        #: Log events for the service to write: (name, fields).
        self.notes: list[tuple[str, dict[str, Any]]] = []

    # -- outgoing ------------------------------------------------------------------------------------
    def _msg(self, make: Any, now_us: int, **kw: Any) -> bytes:
        self._seq += 1
        m = make(P.Header(self.host, self.session, self._seq, now_us), **kw)
        self.sent[type(m).__name__.lower()] += 1
        return P.encode(m)

    def _register(self, now_us: int) -> bytes:
        self._last_register_us = now_us
        return self._msg(P.Register, now_us, topology=self.digest, name=self.name, vms=self.vms)

    def _heartbeat(self, now_us: int) -> bytes:
        if self._first_unanswered_us is None:
            self._first_unanswered_us = now_us
        self._last_heartbeat_us = now_us
        self._next_heartbeat_us = now_us + self._heartbeat_period_us()
        return self._msg(P.Heartbeat, now_us)

    def _heartbeat_period_us(self) -> int:
        """A slice while a backlog or give-up sent is not yet covered by an ack (what acks find
        lost); else ``heartbeat_interval_us`` (a silent slice while waiting heartbeats too: see
        :meth:`next_deadline_us`)."""
        if self._last_change_seq > self._acked_seq:
            return min(self.heartbeat_interval_us, self.slice_us)
        return self.heartbeat_interval_us

    def _changed(self, now_us: int) -> None:
        """A backlog or give-up was just sent: a heartbeat within a slice, so that its ack finds it
        if it was lost."""
        self._last_change_seq = self._seq
        if self._next_heartbeat_us is not None and self.slice_us > 0:
            self._next_heartbeat_us = min(self._next_heartbeat_us, now_us + min(self.heartbeat_interval_us, self.slice_us))

    def _backlog(self, now_us: int, dests: tuple[int, ...]) -> bytes:
        d = self._msg(P.Backlog, now_us, dests=dests)
        for x in dests:
            self._changed_seq[x] = self._seq
        self._changed(now_us)
        return d

    def _giveup(self, now_us: int, dest: int) -> bytes:
        self.last_giveup_us = now_us
        d = self._msg(P.GiveUp, now_us, dest=dest)
        self._changed_seq[dest] = self._seq
        self._changed(now_us)
        return d

    # -- state ---------------------------------------------------------------------------------------
    @property
    def states(self) -> dict[int, int]:
        """Destination host -> the state last given to the gate (a new dict at each access)."""
        return dict(zip(self.dests, self._state_i))

    @property
    def under_control(self) -> bool:
        """Welcomed and not failed open: the gate follows the directives."""
        return self.welcomed and not self.failed_open

    def _want(self, i: int) -> int:
        """The state destination ``dests[i]`` should be in now."""
        if not (self.welcomed and not self.failed_open) or not self._large_i[i]:
            return OPEN
        if self.mode == "rate":
            r = self.rates.get(self.dests[i], 0)
            return CLOSED if r <= 0 else r
        if self.dests[i] != self.dest:
            return CLOSED
        return OPEN if self.dest_rate_bps is None else self.dest_rate_bps

    def _sync(self, which: Any = None) -> dict[int, int]:
        """The destinations (all, or the indices ``which``) whose state changes, with their new state."""
        out: dict[int, int] = {}
        st = self._state_i
        for i in range(len(st)) if which is None else which:
            want = self._want(i)
            if st[i] != want:
                st[i] = want
                out[self.dests[i]] = want
        return out

    def _quiet_us(self) -> int:
        """Silence after which a waiting host heartbeats: a slice and a quarter (at most 500 us
        more), so that directives a slice apart, a little late, do not each bring a heartbeat."""
        return self.slice_us + min(self.slice_us // 4, 500)

    def _waiting(self) -> bool:
        """Something here depends on the controller: a reported backlog or a destination in force."""
        return bool(self.reported) or self.dest is not None or any(self.rates.values())

    # -- time ----------------------------------------------------------------------------------------
    def next_deadline_us(self) -> int:
        """Wall time of the next :meth:`tick` that has work (a directive's start, a register,
        heartbeat or fail-open check)."""
        if not self.welcomed:
            t = self._next_register_us
        else:
            assert self._next_heartbeat_us is not None
            t = self._next_heartbeat_us
            if self.failed_open:  # no heartbeats then: registers
                t = self._last_register_us + self.register_interval_us
            elif self._waiting():
                # a heartbeat after a slice of silence, at most one a slice
                t = min(t, max(self.last_heard_us + self._quiet_us(), self._last_heartbeat_us + self.slice_us))
                if self._first_unanswered_us is not None:
                    t = min(t, max(self.last_heard_us + self.fail_open_slices * self.slice_us,
                                   self._first_unanswered_us + self.slice_us))
        if self._pending:
            t = min(t, self._pending[0].start_us)
        return t

    def next_directive_us(self) -> int | None:
        """Start of the earliest directive received and not applied yet, None if none waits."""
        return self._pending[0].start_us if self._pending else None

    def next_directive_closes(self) -> bool:
        """Whether the earliest directive waiting closes the timeslice destination in force (a hold,
        or a slice for another destination): the service makes such a directive's closes
        ``close_guard_us`` ahead of its start."""
        if not self._pending:
            return False
        p = self._pending[0]
        return p.rates is None and self.dest is not None and p.dest != self.dest

    def _slice_end(self, start_us: int) -> int:
        """The end of the open slice a timeslice directive for the destination in force starting
        at ``start_us`` begins: the end of its slot, and of every following slot whose directive
        (the same destination) has arrived already."""
        sl = self.slice_us
        end = (start_us // sl + 1) * sl
        for q in self._pending:
            if q.start_us < end:
                continue
            if q.start_us > end or q.rates is not None or q.dest != self.dest or q.rate_bps != self.dest_rate_bps:
                break
            end = (q.start_us // sl + 1) * sl
        return end

    def _budget(self, out: AgentOutput, start_us: int, force: bool) -> None:
        """With ``slot_budget``: name the slice of the destination in force that starts at
        ``start_us`` in ``out.until`` (and the destination in ``out.states``, OPEN), if it is open
        by a directive at the line rate and the slice ends later than the one the gate has
        (``force``: whatever the gate has)."""
        d = self.dest
        if (not self.slot_budget or d is None or self.dest_rate_bps is not None or self.mode != "timeslice"
                or self.slice_us <= 0 or not self.under_control):
            self.open_until_us = None
            return
        i = self._dindex.get(d)
        if i is None or not self._large_i[i]:
            self.open_until_us = None
            return
        end = self._slice_end(start_us)
        if force or self.open_until_us is None or end > self.open_until_us:
            self.open_until_us = end
            out.states[d] = OPEN
            out.until[d] = end

    def tick(self, now_us: int) -> AgentOutput:
        """Directives due by ``now_us``, registers, heartbeats and the fail-open check."""
        out = AgentOutput()
        applied = False
        budget_from: tuple[int, bool] | None = None  # (start, new destination) of the last timeslice directive
        touched: set[int] | None = set()  # timeslice: only the old and the new destination change
        while self._pending and self._pending[0].start_us <= now_us:
            p = self._pending.pop(0)
            if p.rates is None:
                if touched is not None:
                    touched.update(d for d in (self.dest, p.dest) if d is not None)
                new = p.dest != self.dest or p.rate_bps != self.dest_rate_bps
                if p.dest != self.dest:
                    self.opened_us, self._quiet_since_us = now_us, None
                self.dest, self.dest_rate_bps = p.dest, p.rate_bps
                budget_from = (p.start_us, new or (budget_from is not None and budget_from[1]))
                out.applied.append(AppliedDirective(p.arrival_us, p.start_us, p.dest, p.rate_bps))
            else:
                for d, r in p.rates:
                    if r > 0:
                        self.rates[d] = r
                    else:
                        self.rates.pop(d, None)
                out.applied.append(AppliedDirective(p.arrival_us, p.start_us, -1))
                touched = None
            applied = True
        if not self.welcomed:
            if now_us >= self._next_register_us:
                out.sends.append(self._register(now_us))
                self._next_register_us = now_us + self.register_interval_us
        else:
            assert self._next_heartbeat_us is not None
            if self.failed_open:
                if now_us - self._last_register_us >= self.register_interval_us:
                    out.sends.append(self._register(now_us))
            elif self._waiting():
                silent = now_us - self.last_heard_us
                p0 = self._first_unanswered_us
                # Fail open only after a heartbeat went unanswered for a slice: if this host itself
                # stalled (a late wake-up), silence says nothing about the controller.
                if silent >= self.fail_open_slices * self.slice_us and p0 is not None and now_us - p0 >= self.slice_us:
                    self._fail_open(now_us, silent)
                    out.sends.append(self._register(now_us))  # a restarted controller answers at once
                elif now_us >= self._next_heartbeat_us or (
                        silent >= self._quiet_us() and now_us - self._last_heartbeat_us >= self.slice_us):
                    out.sends.append(self._heartbeat(now_us))
            else:
                # Idle: nothing held waits for the controller, so no fail-open; but a heartbeat
                # unanswered for a heartbeat interval means the controller dropped this host (its
                # silence, a restart) and answers it no more.  Only a register brings it back, and
                # until then the controller refuses every backlog towards this host: the hosts that
                # send to it would wait (measured on the lab: an idle receiver dropped after a stall
                # never came back, and its senders were held until the end of the run).
                p0 = self._first_unanswered_us
                if (p0 is not None and now_us - p0 >= max(self.slice_us, self.heartbeat_interval_us)
                        and now_us - self._last_register_us >= self.register_interval_us):
                    self.reregisters += 1
                    self.notes.append(("reregister", {"silent_us": now_us - self.last_heard_us}))
                    out.sends.append(self._register(now_us))
            if not self.failed_open and now_us >= self._next_heartbeat_us:
                out.sends.append(self._heartbeat(now_us))
        if self.failed_open:
            out.states.update(self._sync())
            if self._reopen is not None:
                out.states[self._reopen] = OPEN
                self._reopen = None
        elif applied:
            if touched is None or self.mode == "rate":
                out.states.update(self._sync())
            else:
                di = self._dindex
                out.states.update(self._sync([di[d] for d in touched if d in di]))
            if budget_from is not None:
                self._budget(out, budget_from[0], force=budget_from[1])
        return out

    def _fail_open(self, now_us: int, silent_us: int) -> None:
        self.failed_open = True
        self.failed_open_since_us = now_us
        self.fail_opens += 1
        self._pending.clear()
        if self.open_until_us is not None and self.dest is not None:
            # its class holds by itself once its budget is spent, while the core's record says
            # OPEN: named again, as a plain OPEN, by the tick that failed open
            self._reopen = self.dest
        self.dest = self.dest_rate_bps = None
        self.open_until_us = None
        self.rates.clear()
        self.reported.clear()
        self._idle_since.clear()
        self._quiet_since_us = None
        self._forget_demand()
        self.notes.append(("fail_open", {"silent_us": silent_us, "slices": silent_us / self.slice_us}))

    # -- controller datagrams ------------------------------------------------------------------------
    def _drop(self, reason: str) -> AgentOutput:
        self.dropped[reason] += 1
        return AgentOutput()

    def drop_address(self) -> None:
        """Count a datagram that did not come from the controller's address (the service checks)."""
        self.dropped["address"] += 1

    def handle(self, data: bytes, now_us: int) -> AgentOutput:
        """Take one datagram from the controller at wall time ``now_us``.

        A bad one is dropped and counted in :attr:`dropped`; this never raises on any bytes.
        Due directives, registers and heartbeats are handled first (as by :meth:`tick`).
        """
        out = self.tick(now_us)
        try:
            m = P.decode(data)
        except P.DecodeError as e:
            out += self._drop(e.reason)
            return out
        h = m.header
        if not isinstance(m, (P.Directive, P.RateDirective, P.Welcome, P.Ack)) or h.host != self.host:
            out += self._drop("invalid")
            return out
        if abs(h.t_us - now_us) > self.clock_window_us:
            out += self._drop("stale")
            return out
        if isinstance(m, P.Directive) and m.dest is not None and (m.dest == self.host or m.dest >= self.topo.n_hosts):
            out += self._drop("invalid")
            return out
        if isinstance(m, P.Ack) and any(d == self.host or d >= self.topo.n_hosts for d in m.backlog):
            out += self._drop("invalid")
            return out
        if isinstance(m, P.RateDirective) and any(d == self.host or d >= self.topo.n_hosts for d, _ in m.rates):
            out += self._drop("invalid")
            return out
        new_session = h.session != self.ctl_session
        if new_session:
            if self.ctl_session is not None and h.t_us <= self._ctl_t_us:
                out += self._drop("replay")
                return out
        elif h.seq <= self._ctl_seq:
            out += self._drop("replay")
            return out
        self.received[type(m).__name__.lower()] += 1
        restarted = new_session and self.ctl_session is not None
        self.ctl_session, self._ctl_seq, self._ctl_t_us = h.session, h.seq, h.t_us
        self.last_heard_us = now_us
        self._first_unanswered_us = None
        resumed = self.failed_open
        if self.failed_open:  # backlogs were forgotten when failing open: the next observation reports them
            self.failed_open = False
            self.notes.append(("control_resumed", {"by": type(m).__name__.lower()}))
        if restarted:
            self.notes.append(("controller_restarted", {"session": h.session}))
        if isinstance(m, P.Welcome):
            first = not self.welcomed
            self.slice_us, self.mode, self.heartbeat_interval_us = m.slice_us, m.mode, m.heartbeat_interval_us
            if first:
                self.welcomed = True
                self._next_heartbeat_us = now_us + self.heartbeat_interval_us
                self.notes.append(("welcomed", {"session": h.session, "slice_us": m.slice_us, "mode": m.mode}))
        elif isinstance(m, P.Ack):
            self._acked_seq = max(self._acked_seq, m.seq)
            if self.welcomed and not restarted:
                held = set(m.backlog)
                older = self._changed_seq.get
                again = {d for d in self.reported - held if older(d, 0) < m.seq}
                if self.mode == "rate":
                    # Held there but no rate here, none coming: the rate directive was lost.
                    coming = {d for q in self._pending if q.rates for d, r in q.rates if r > 0}
                    again.update(d for d in self.reported & held
                                if d not in self.rates and d not in coming and older(d, 0) < m.seq)
                lost = tuple(sorted(again))
                if lost:
                    out.sends.append(self._backlog(now_us, lost))
                for d in sorted(held - self.reported):
                    if older(d, 0) < m.seq:
                        out.sends.append(self._giveup(now_us, d))
        else:
            self.directives += 1
            if isinstance(m, P.Directive):
                p = _Pending(m.start_us, now_us, dest=m.dest, rate_bps=m.rate_bps)
            else:
                p = _Pending(m.start_us, now_us, rates=m.rates)
            # A later directive supersedes the pending ones that start at or after its start.
            self._pending = [q for q in self._pending if q.start_us < p.start_us] + [p]
            # The next slot's directive for the destination in force, ahead: the gate's slice is
            # extended now, not at the boundary (where a late wake-up would leave the link idle).
            if (self.open_until_us is not None and p.start_us == self.open_until_us and p.rates is None
                    and p.dest == self.dest and p.rate_bps == self.dest_rate_bps and p.start_us > now_us):
                self._budget(out, p.start_us, force=False)
        if restarted:
            self._forget_demand()  # the new controller knows no bounds: measured and told again
        if restarted and self.reported:
            out.sends.append(self._backlog(now_us, tuple(sorted(self.reported))))
        out += self.tick(now_us)  # a directive due already is applied (and synced) here
        if resumed or isinstance(m, P.Welcome):  # control (or the mode) changed
            out.states.update(self._sync())
        return out

    # -- observations --------------------------------------------------------------------------------
    def _turn_large(self, flows: list[Flow], out: AgentOutput) -> bool:
        """Move ``flows`` (small ones) to their destinations' classes; True if a destination turned large."""
        turned = False
        for f in flows:
            self.large_flows.add(f)
            out.moved.append(f)
            i = self._dindex[f.dest_host]
            if not self._large_i[i]:
                self._large_i[i] = self._large_np[i] = turned = True
                self.large.add(f.dest_host)
        self.small_flows = tuple(f for f in self.small_flows if f not in self.large_flows)
        return turned

    def observe(self, now_us: int, stats: Mapping[int, DestStats], sent: Mapping[Flow, int] | None = None) -> AgentOutput:
        """Take the gate's counters read at ``now_us``: large flows, backlogs, give-ups.

        Parameters
        ----------
        stats : mapping
            Destination host -> :class:`DestStats` of its class (destinations missing count as
            nothing queued).
        sent : mapping, optional
            Small flow -> bytes its own class has sent (flows missing stay small).
        """
        out = self.tick(now_us)
        small = self.small_flow_bytes
        turned = False
        if sent:
            grown = [f for f in self.small_flows if sent.get(f, 0) > small]
            turned = bool(grown) and self._turn_large(grown, out)
        queued = {d for d, s in stats.items()
                  if d in self.large and (s.backlog_bytes > 0 or s.backlog_packets > 0)}
        self._obs_sent = None  # no sent bytes here: the quiet give-up waits for a dump
        return self._observed(now_us, out, queued, turned)

    def observe_counters(self, now_us: int, sent_bytes: Any, backlog_bytes: Any, backlog_packets: Any,
                         small_sent_bytes: Any = ()) -> AgentOutput:
        """:meth:`observe` with the counters as arrays (the gate's
        :meth:`~xtc.host.gate.Gate.counters` of :attr:`dests` and :attr:`small_flows`): no Python
        work per destination or flow unless a flow turns large.

        Parameters
        ----------
        sent_bytes, backlog_bytes, backlog_packets : numpy.ndarray
            One entry per destination of :attr:`dests`, in that order (bytes, bytes, packets).
        small_sent_bytes : numpy.ndarray
            One entry per flow of :attr:`small_flows` as it was when the counters were asked for
            (bytes its own class has sent).
        """
        out = self.tick(now_us)
        turned = False
        if len(small_sent_bytes):
            grown = np.flatnonzero(np.asarray(small_sent_bytes) > self.small_flow_bytes)
            if grown.size:
                small = self.small_flows
                turned = self._turn_large([small[i] for i in grown.tolist()], out)
        q = np.flatnonzero(self._large_np & ((backlog_bytes > 0) | (backlog_packets > 0)))
        queued = set(self._dest_np[q].tolist()) if q.size else set()
        if self.mode != "rate":
            quiet = self._quiet_giveup(now_us, sent_bytes, backlog_bytes, backlog_packets)
            return self._observed(now_us, out, queued, turned, quiet=quiet)
        # Rate mode: a flow served within its rate queues nothing, yet it is busy while its class sends.
        sent = np.asarray(sent_bytes, dtype=np.int64)
        last, self._last_sent = self._last_sent, sent.copy()
        busy = set()
        if last is not None and len(last) == len(sent):
            b = np.flatnonzero(self._large_np & (sent > last))
            busy = set(self._dest_np[b].tolist()) if b.size else set()
        out = self._observed(now_us, out, queued, turned, busy)
        if self.under_control:
            self._measure_demand(now_us, sent, out)
        return out

    # -- the quiet give-up (timeslices) ---------------------------------------------------------------
    def _quiet_armed(self) -> int | None:
        """The index of the destination in force if the quiet give-up watches it (timeslices,
        ``giveup_quiet_us`` on, under control, reported, its class not CLOSED), else None."""
        d = self.dest
        if (not self.giveup_quiet_us or self.mode == "rate" or d is None or d not in self.reported
                or not self.under_control):
            return None
        i = self._dindex.get(d)
        return None if i is None or self._state_i[i] == CLOSED else i

    def _quiet_giveup(self, now_us: int, sent_bytes: Any, backlog_bytes: Any, backlog_packets: Any) -> int | None:
        """Take a dump; the destination in force if it is to be given up now (see the module's
        "Quiet give-up"), else None.  Nothing entered class ``i`` between the last dump and this
        one when ``sent - sent_then == queued_then`` and nothing is queued now."""
        if not self.giveup_quiet_us:
            return None
        prev_us, prev_sent, prev_q = self._obs_us, self._obs_sent, self._obs_backlog
        self._obs_us = now_us
        self._obs_sent = np.array(sent_bytes, dtype=np.int64)
        self._obs_backlog = np.array(backlog_bytes, dtype=np.int64)
        i = self._quiet_armed()
        if i is None:
            self._quiet_since_us = None
            return None
        if prev_us is None or prev_sent is None or prev_q is None or len(prev_sent) != len(self._obs_sent):
            self._quiet_since_us = None
            return None
        ds = int(self._obs_sent[i]) - int(prev_sent[i])
        silent = (ds >= 0 and ds == int(prev_q[i]) and int(self._obs_backlog[i]) == 0
                  and int(backlog_packets[i]) == 0)
        if not silent:
            self._quiet_since_us = None
            return None
        if self._quiet_since_us is None:
            self._quiet_since_us = prev_us
        return self.dests[i] if now_us - self._quiet_since_us >= self.giveup_quiet_us else None

    def drain_poll_us(self, rate_bps: int, margin_us: int = 200, min_gap_us: int = 500) -> int | None:
        """When to read the counters next for the quiet give-up (None: no read needed for it).

        While the destination in force is watched (see :meth:`_quiet_armed`): if its class had
        bytes queued at the last dump, when they have drained at ``rate_bps`` (the slice's rate if
        it has one) from the later of that dump and the opening, plus ``margin_us``; if a quiet
        stretch has begun, when it reaches ``giveup_quiet_us``; never sooner than ``min_gap_us``
        after the last dump.  A class found empty while bytes still enter it (a sender passing
        straight through) asks for no extra read: the regular reads watch it.

        Parameters
        ----------
        rate_bps : int
            The line rate of the gate's open classes, bits/s.
        margin_us, min_gap_us : int
            Microseconds.
        """
        i = self._quiet_armed()
        if i is None or self._obs_us is None or self._obs_backlog is None or self._obs_sent is None:
            return None
        if self._quiet_since_us is not None:
            t = self._quiet_since_us + self.giveup_quiet_us
        else:
            b = int(self._obs_backlog[i])
            if b <= 0:
                return None
            rate = self.dest_rate_bps or rate_bps
            t = max(self._obs_us, self.opened_us or 0) + b * 8_000_000 // max(1, rate) + margin_us
        return max(t, self._obs_us + min_gap_us)

    # -- demand (rate mode) --------------------------------------------------------------------------
    def wants_counters(self) -> bool:
        """True when the next observation must read every class's counters (not the quiet probe):
        in rate mode while flows are reported, whose sent bytes tell a flow served within its rate
        (nothing queued) from an idle one, and measure its demand; with timeslices while the quiet
        give-up watches the destination in force (it needs that class's sent bytes)."""
        if self.mode == "rate":
            return self.under_control and bool(self.reported)
        return self._quiet_armed() is not None

    def _forget_demand(self) -> None:
        self.bounds.clear()
        self._lifted.clear()
        self._win_start_us[:] = -1
        self._last_sent = None
        self._next_refresh_us = None

    def _measure_demand(self, now_us: int, sent: np.ndarray, out: AgentOutput) -> None:
        """Per reported destination with a rate in force, over windows of ``demand_window_us``
        during which that rate did not change (a change starts a new window): below
        :data:`DEMAND_SPARE_FRACTION` of the rate the flow is bounded to 5/4 of what it sent; at
        :data:`DEMAND_USE_FRACTION` or more its bound is lifted; between the two nothing changes
        (the hysteresis).  Changes are sent at once; every :data:`DEMAND_REFRESH_WINDOWS` windows
        the bounds in force (and the lifts since the last refresh) are sent again, so that a lost
        report is repaired."""
        for d in [d for d in self.bounds if d not in self.reported]:  # given up: gone with the flow
            del self.bounds[d]
        changed: dict[int, int] = {}
        start, wsent, wrate = self._win_start_us, self._win_sent, self._win_rate
        for d in sorted(self.reported):
            rate = self.rates.get(d, 0)
            i = self._dindex[d]
            if rate <= 0:  # held: no window
                start[d] = -1
                continue
            if start[d] < 0 or wrate[d] != rate or sent[i] < wsent[d]:  # new window (the rate
                start[d], wsent[d], wrate[d] = now_us, sent[i], rate   # moved, or the class is new)
                continue
            dt_us = now_us - int(start[d])
            if dt_us < self.demand_window_us:
                continue
            used_bps = int(sent[i] - wsent[d]) * 8_000_000 // dt_us
            start[d], wsent[d] = now_us, sent[i]
            old = self.bounds.get(d, 0)
            new = old
            if used_bps >= rate * DEMAND_USE_FRACTION:
                new = 0
            elif used_bps < rate * DEMAND_SPARE_FRACTION:
                new = max(used_bps * DEMAND_HEADROOM_NUM // DEMAND_HEADROOM_DEN, self._min_bound_bps)
                if old and 4 * abs(new - old) < old:  # within a quarter of the bound in force: kept
                    new = old
            if new != old:
                changed[d] = new
                if new:
                    self.bounds[d] = new
                    self._lifted.discard(d)
                else:
                    del self.bounds[d]
                    self._lifted.add(d)
        if self._next_refresh_us is None:
            self._next_refresh_us = now_us + DEMAND_REFRESH_WINDOWS * self.demand_window_us
        elif now_us >= self._next_refresh_us:
            self._next_refresh_us = now_us + DEMAND_REFRESH_WINDOWS * self.demand_window_us
            for d in self._lifted:
                changed.setdefault(d, 0)
            for d, b in self.bounds.items():
                changed.setdefault(d, b)
            self._lifted.clear()
        if changed:
            out.sends.append(self._msg(P.Demand, now_us, demands=tuple(sorted(changed.items()))))

    def observe_quiet(self, now_us: int) -> AgentOutput:
        """:meth:`observe_counters` when the gate says nothing is queued in any class and no small
        flow can have passed ``small_flow_bytes`` (:meth:`xtc.host.tcgate.TcGate.quiet`): the same
        decisions, without the counters."""
        self._obs_sent = None  # no sent bytes: the quiet give-up starts again at the next dump
        return self._observed(now_us, self.tick(now_us), set(), False)

    def _observed(self, now_us: int, out: AgentOutput, queued: set[int], turned: bool,
                  busy: set[int] | None = None, quiet: int | None = None) -> AgentOutput:
        """Backlogs and give-ups from the destinations with something queued; ``busy``: others that
        sent since the last observation (rate mode), not idle either; ``quiet``: the destination in
        force, proved silent for ``giveup_quiet_us`` (given up now).  A destination that ``turned``
        large may have to close (the gate is synced only then: directives sync in tick)."""
        if not self.under_control:
            out.states.update(self._sync())
            return out
        new = sorted(queued - self.reported)
        if new:
            self.reported.update(new)
            out.sends.append(self._backlog(now_us, tuple(new)))
        active = queued | busy if busy else queued
        for d in active:
            self._idle_since.pop(d, None)
        for d in sorted(self.reported - active):
            since = self._idle_since.setdefault(d, now_us)
            if now_us - since >= self.giveup_after_us or d == quiet:
                self.reported.discard(d)
                del self._idle_since[d]
                if d == quiet:
                    self._quiet_since_us = None
                out.sends.append(self._giveup(now_us, d))
        if turned:
            out.states.update(self._sync())
        return out

    def stop(self, now_us: int) -> bytes:
        """The Leave datagram to send when the agent stops."""
        return self._msg(P.Leave, now_us)
