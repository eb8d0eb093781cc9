"""The XCo controller's pure core: datagrams and time in, datagrams out.

:class:`ControllerCore` holds the registered hosts and the scheduler (:class:`FastScheduler` in
timeslice mode, :class:`RateLimiter` in rate mode, :class:`HybridScheduler` in hybrid mode: slices,
and inside them a rate for the hosts whose NIC is faster than a link on one of their paths,
:mod:`xtc.xco.scheduler.hybrid`) and takes time as an argument: wall-clock
microseconds since the Unix epoch.  The scheduler runs ``lead_us`` ahead of the wall clock, so
every directive is sent ``lead_us`` before it takes effect; scheduler time ``0`` is the wall time
``epoch_us`` (a multiple of ``slice_us``), so slots start at wall-clock multiples of ``slice_us``
on every host.  An event received when the scheduler has already moved past ``now + lead`` (the
next slot was computed ahead) takes effect at the scheduler's time.

Every datagram is checked (docs/xco-protocol.md); one that fails is dropped and counted in
:attr:`ControllerCore.dropped` by reason, never raised, and no directive ever goes to a host that
is not registered.

:class:`~xtc.xco.controller_service.ControllerService` (a module of its own) is the loop around it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from . import protocol as P
from .scheduler import SchedulerDirective
from .scheduler import FastScheduler, RateLimiter
from .scheduler.hybrid import HybridScheduler
from .topology import Topology

__all__ = ["DROP_REASONS", "Send", "ControllerCore", "STATE_SCHEMA"]

STATE_SCHEMA = "xco-controller-state/1"

#: Why a datagram is dropped.
DROP_REASONS = (
    "malformed",          # not a protocol-1 message (length, magic, type, fields)
    "version",            # another protocol version
    "unknown_host",       # host id not in the topology, name not matching it, or not registered
    "topology",           # register with another topology's digest
    "stale",              # t_us further than clock_window_us from the controller's clock
    "replay",             # seq not above the last one of the session, or an older register
    "session",            # a session other than the host's registered one
    "address",            # from another address than the host registered from
    "invalid",            # a well-formed message that makes no sense (self as dest, unknown dest,
                          # a controller-to-host type, VM addresses not the topology's)
    "auth",               # with a shared key: a datagram whose tag does not verify (xtc.xco.auth)
)


@dataclass(frozen=True, slots=True)
class Send:
    """A datagram to send: to ``addr`` (ip, port), for host id ``host``."""

    addr: tuple[str, int]
    host: int
    data: bytes


@dataclass(slots=True)
class _Host:
    name: str
    addr: tuple[str, int]
    session: int
    seq: int
    registered_t_us: int
    last_heard_us: int
    vms: tuple[str, ...]


class ControllerCore:
    """The controller's decisions, pure: no I/O, no clock.

    Parameters
    ----------
    topo : Topology
        The network.
    digest : bytes
        The topology file's 8-byte digest (:func:`xtc.xco.protocol.topology_digest`).
    now_us : int
        Wall clock at start, microseconds since the Unix epoch.
    slice_us, lead_us : int
        Timeslot, and how long before its start a directive is sent, microseconds.
    mode : {"timeslice", "rate", "hybrid"}
        Scheduler.  In hybrid mode a slice directive to a host whose NIC is faster than a link on
        one of its paths carries that host's slice rate (bits/s); every other one is a plain slice.
    heartbeat_interval_us, heartbeat_misses : int
        A host not heard for ``interval * misses`` microseconds is dropped from every group.
    clock_window_us : int
        Largest accepted difference between a message's ``t_us`` and ``now_us``, microseconds.
    session : int
        The controller's session number (directives carry it).
    rate_link_fraction : float
        Rate mode: the fraction of each link's capacity shared among the flows through it
        (:class:`~xtc.xco.scheduler.rate.RateLimiter`; 1, the paper's, fills the link).
    """

    def __init__(self, topo: Topology, digest: bytes, now_us: int, *, slice_us: int = 10_000,
                 lead_us: int = 500, mode: str = "timeslice", heartbeat_interval_us: int = 100_000,
                 heartbeat_misses: int = 3, clock_window_us: int = 1_000_000, session: int = 1,
                 rate_link_fraction: float = 1.0):
        self.topo = topo
        self.digest = digest
        self.slice_us = slice_us
        self.lead_us = lead_us
        self.mode = mode
        self.heartbeat_interval_us = heartbeat_interval_us
        self.silence_us = heartbeat_interval_us * heartbeat_misses
        self.clock_window_us = clock_window_us
        self.session = session
        self.epoch_us = (now_us // slice_us) * slice_us
        if mode not in P.MODES:
            raise ValueError(f"mode must be one of {', '.join(P.MODES)}, got {mode!r}")
        self.sched: Any
        #: Hosts whose slices carry a rate (hybrid mode), by host id.
        self.rated: frozenset[int] = frozenset()
        if mode == "timeslice":
            self.sched = FastScheduler(topo, slice_us)
        elif mode == "hybrid":
            self.sched = HybridScheduler(topo, slice_us)
            self.rated = self.sched.limited
        else:
            self.sched = RateLimiter(topo, link_fraction=rate_link_fraction)
        self.hosts: dict[int, _Host] = {}
        self.dropped: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.directives_sent = 0
        #: Directives sent after the start of the slice they grant (the service woke up late: a
        #: loaded controller host).  The host applies such a directive at once.
        self.directives_late = 0
        #: Log events for the service to write: (name, fields).
        self.notes: list[tuple[str, dict[str, Any]]] = []
        #: Registered hosts or backlogs changed since the last :meth:`to_state`.
        self.dirty = False
        self._next_hb_check_us = now_us
        self._out_seq = 0

    # -- time ----------------------------------------------------------------------------------------
    def _sched_t(self, now_us: int) -> int:
        return max(now_us + self.lead_us - self.epoch_us, self.sched.now_us)

    def next_deadline_us(self) -> int:
        """Wall time of the next :meth:`tick` that has work: slot boundary minus lead, or heartbeat check."""
        t = self._next_hb_check_us
        e = self.sched.next_expiry_us()
        if e is not None:
            t = min(t, self.epoch_us + e - self.lead_us)
        return t

    # -- directives ----------------------------------------------------------------------------------
    def _sends(self, ds: Iterable[SchedulerDirective], now_us: int) -> list[Send]:
        out: list[Send] = []
        if self.mode == "rate":
            by_host: dict[int, list[SchedulerDirective]] = {}
            for d in ds:
                by_host.setdefault(d.host, []).append(d)
            items = [(x, ds_) for x, ds_ in by_host.items()]
        else:
            items = [(d.host, [d]) for d in ds]
        for x, group in items:
            h = self.hosts.get(x)
            if h is None:
                self.dropped["unregistered_directive"] += 1  # never happens: nobody unregistered is backlogged
                continue
            hdr = P.Header(x, self.session, self._next_seq(), now_us)
            d0 = group[0]
            start = self.epoch_us + d0.t_us
            if start <= now_us:
                self.directives_late += 1
            if self.mode == "rate":
                msg: P.Message = P.RateDirective(hdr, start, tuple((d.dest, d.rate_bps or 0) for d in group))
            else:
                length = 0 if d0.end_us is None else d0.end_us - d0.t_us
                rate = d0.rate_bps if d0.dest is not None and x in self.rated else None
                msg = P.Directive(hdr, d0.dest, start, length, rate)
            out.append(Send(h.addr, x, P.encode(msg)))
        self.directives_sent += len(out)
        return out

    def _with_rates_of(self, x: int, ds: list[SchedulerDirective]) -> list[SchedulerDirective]:
        """Rate mode: ``ds`` plus the unchanged rates of host ``x`` (its full set, in one directive)."""
        named = {d.dest for d in ds if d.host == x}
        t = self.sched.now_us
        return ds + [SchedulerDirective(t, x, d, None, r) for (y, d), r in sorted(self.sched.rate_bps.items())
                     if y == x and d not in named]

    def _event(self, kind: str, now_us: int, run: Callable[[int], list[SchedulerDirective]]) -> list[Send]:
        self.events[kind] += 1
        return self._sends(run(self._sched_t(now_us)), now_us)

    # -- datagrams -----------------------------------------------------------------------------------
    def _drop(self, reason: str) -> list[Send]:
        self.dropped[reason] += 1
        return []

    def handle_many(self, datagrams: Iterable[tuple[bytes, tuple[str, int]]], now_us: int) -> list[Send]:
        """Take the datagrams of one socket read, ``(data, addr)`` in arrival order, at wall time
        ``now_us``; returns the datagrams to send: the same, in the same order, as :meth:`handle` of
        each in turn at ``now_us``.  In timeslice mode the backlog reports and give-ups that follow
        one another go to the scheduler as one batch (``events_at``: one kernel call); anything else
        that needs the scheduler or a sequence number (registration, heartbeat, leave, a slot
        boundary due) first hands it the events before it.
        """
        pending: list[tuple[str, int, Any]] = []
        out: list[Send] = []
        for data, addr in datagrams:
            out += self._handle(data, addr, now_us, pending)
        return out + self._flush(pending, now_us)

    def _flush(self, pending: list[tuple[str, int, Any]], now_us: int) -> list[Send]:
        if not pending:
            return []
        evs = list(pending)
        pending.clear()
        return self._sends(self.sched.events_at(self._sched_t(now_us), evs), now_us)

    def handle(self, data: bytes, addr: tuple[str, int], now_us: int) -> list[Send]:
        """Take one datagram from ``addr`` at wall time ``now_us``; returns the datagrams to send.

        Expired slots are handled first (as by :meth:`tick`); silent hosts are not looked for
        here but in :meth:`tick`, which the service calls once it has read every datagram waiting:
        after a stall of the controller's own, the heartbeats queued in its socket must count
        before anybody is declared lost (measured on the lab: a 200-300 ms stall dropped every
        idle host, whose heartbeats come every 100 ms, while their heartbeats sat unread).
        A bad datagram is dropped and counted in :attr:`dropped`; this never raises on any input bytes.
        """
        return self._handle(data, addr, now_us, None)

    def _handle(self, data: bytes, addr: tuple[str, int], now_us: int,
                pending: list[tuple[str, int, Any]] | None) -> list[Send]:
        # ``pending``: the backlog reports and give-ups not yet given to the scheduler (handle_many);
        # every path below that touches the scheduler or takes a sequence number flushes it first.
        # (No slot boundary is due here with events pending: the first datagram handled any due at
        # ``now_us``, and events at ``now_us`` end their slices after ``now_us + lead_us``.)
        out = self._expire(now_us)
        try:
            m = P.decode(data)
        except P.DecodeError as e:
            return out + self._drop(e.reason)
        self.received[type(m).__name__.lower()] += 1
        h = m.header
        if abs(h.t_us - now_us) > self.clock_window_us:
            return out + self._drop("stale")
        if isinstance(m, (P.Directive, P.RateDirective, P.Welcome, P.Ack)):
            return out + self._drop("invalid")
        if not h.host < self.topo.n_hosts:
            return out + self._drop("unknown_host")
        if isinstance(m, P.Register):
            if pending:
                out += self._flush(pending, now_us)
            return out + self._register(m, addr, now_us)
        st = self.hosts.get(h.host)
        if st is None:
            return out + self._drop("unknown_host")
        if h.session != st.session:
            return out + self._drop("session")
        if h.seq <= st.seq:
            return out + self._drop("replay")
        if addr != st.addr:
            return out + self._drop("address")
        x = h.host
        if isinstance(m, P.Backlog):
            # A destination needs no agent to receive (its link is in the topology): a backlog
            # towards a host whose agent is down or never ran is scheduled like any other, so
            # that losing a receiver's agent loses its senders nothing but the coordination.
            for d in m.dests:
                if d >= self.topo.n_hosts or d == x:
                    return out + self._drop("invalid")
        elif isinstance(m, P.GiveUp):
            if m.dest >= self.topo.n_hosts or m.dest == x:
                return out + self._drop("invalid")
        elif isinstance(m, P.Demand):
            if any(d >= self.topo.n_hosts or d == x for d, _ in m.demands):
                return out + self._drop("invalid")
        st.seq = h.seq
        st.last_heard_us = now_us
        if pending is not None and self.mode != "rate" and isinstance(m, (P.Backlog, P.GiveUp)):
            if isinstance(m, P.Backlog):
                self.dirty = True
                self.events["backlog"] += 1
                pending.append(("backlog", x, list(m.dests)))
            else:
                self.dirty = True
                self.events["giveup"] += 1
                pending.append(("giveup", x, m.dest))
            return out
        if pending:
            out += self._flush(pending, now_us)
        if isinstance(m, P.Backlog):
            self.dirty = True
            if self.mode == "rate":
                # The reporting host gets every rate it has, changed or not: a host that failed open
                # (or lost a rate directive) forgot them, and re-reporting is how it asks again.
                return out + self._event("backlog", now_us,
                                         lambda t: self._with_rates_of(x, self.sched.backlog(t, x, m.dests)))
            return out + self._event("backlog", now_us, lambda t: self.sched.backlog(t, x, m.dests))
        if isinstance(m, P.GiveUp):
            self.dirty = True
            return out + self._event("giveup", now_us, lambda t: self.sched.giveup(t, x, m.dest))
        if isinstance(m, P.Demand):
            if self.mode != "rate":
                return out  # demand bounds are a rate-mode matter; the slices need none
            self.dirty = True
            return out + self._event("demand", now_us, lambda t: self.sched.demand(t, x, m.demands))
        if isinstance(m, P.Leave):
            return out + self._remove(x, now_us, "host_left")
        # heartbeat: acknowledged with the host's backlog as held here
        ack = P.Ack(P.Header(x, self.session, self._next_seq(), now_us), h.seq, tuple(self.backlog_of(x)))
        return out + [Send(st.addr, x, P.encode(ack))]

    def _register(self, m: P.Register, addr: tuple[str, int], now_us: int) -> list[Send]:
        h = m.header
        x = h.host
        if self.topo.hosts[x] != m.name:
            return self._drop("unknown_host")
        if m.topology != self.digest:
            return self._drop("topology")
        if any(self.topo.vms.get(a, m.name) != m.name for a in m.vms):
            return self._drop("invalid")  # an address the topology puts behind another host
        out: list[Send] = []
        st = self.hosts.get(x)
        if st is not None:
            if h.session == st.session:
                if h.seq <= st.seq:
                    return self._drop("replay")
                if addr != st.addr:
                    return self._drop("address")
            else:
                if h.t_us <= st.registered_t_us:
                    return self._drop("replay")
                # The host restarted: what it had backlogged before is gone.
                out += self._remove(x, now_us, "host_restarted")
        if x not in self.hosts:
            self.notes.append(("host_registered", {"host": m.name, "addr": f"{addr[0]}:{addr[1]}",
                                                   "vms": list(m.vms)}))
        self.hosts[x] = _Host(m.name, addr, h.session, h.seq, h.t_us, now_us, m.vms)
        self.dirty = True
        w = P.Welcome(P.Header(x, self.session, self._next_seq(), now_us), self.slice_us, self.mode,
                      self.heartbeat_interval_us)
        return out + [Send(addr, x, P.encode(w))]

    def _next_seq(self) -> int:
        """The sequence number of the next message sent, one counter for every host of this session:
        a host dropped (silent, left) and registered again must not see a number it has already seen,
        or it drops the welcome and every later message as a replay."""
        self._out_seq += 1
        return self._out_seq

    def _remove(self, x: int, now_us: int, why: str) -> list[Send]:
        st = self.hosts.pop(x)
        self.dirty = True
        self.notes.append((why, {"host": st.name}))
        return self._event("leave", now_us, lambda t: self.sched.leave(t, x))

    def _expire(self, now_us: int) -> list[Send]:
        e = self.sched.next_expiry_us()
        if e is not None and self.epoch_us + e - self.lead_us <= now_us:
            return self._event("expiry", now_us, self.sched.advance)
        return []

    def tick(self, now_us: int) -> list[Send]:
        """Slot expiries due by ``now_us + lead_us`` and hosts silent for too long (call it after
        the datagrams received so far have been handled)."""
        out = self._expire(now_us)
        if now_us >= self._next_hb_check_us:
            self._next_hb_check_us = now_us + max(1, self.heartbeat_interval_us // 4)
            for x in [x for x, h in self.hosts.items() if now_us - h.last_heard_us > self.silence_us]:
                out += self._remove(x, now_us, "host_lost")
        return out

    # -- state ---------------------------------------------------------------------------------------
    def backlog_of(self, x: int) -> list[int]:
        """``B_x``, the destinations host ``x`` is backlogged towards (sorted host ids)."""
        s = self.sched
        return sorted(s.backlog_group(x) if hasattr(s, "backlog_group") else s.B[x])

    def to_state(self) -> dict[str, Any]:
        """The registered hosts and their backlogs, as a JSON-able document; clears :attr:`dirty`."""
        self.dirty = False
        names = self.topo.hosts
        return {
            "schema": STATE_SCHEMA,
            "topology_digest": self.digest.hex(),
            "hosts": [{"name": h.name, "addr": [h.addr[0], h.addr[1]], "session": h.session, "seq": h.seq,
                       "registered_t_us": h.registered_t_us, "vms": list(h.vms),
                       "backlog": [names[d] for d in self.backlog_of(x)]}
                      for x, h in sorted(self.hosts.items())],
        }

    def load_state(self, doc: dict[str, Any], now_us: int) -> list[Send]:
        """Take back the hosts and backlogs of :meth:`to_state`; returns the directives they get.

        Hosts are counted as heard at ``now_us``.  Raises ValueError on a document that does not
        fit (another schema or topology, bad fields); a host the topology no longer has is skipped
        with a note.
        """
        if doc.get("schema") != STATE_SCHEMA:
            raise ValueError(f"schema must be {STATE_SCHEMA!r}, got {doc.get('schema')!r}")
        if doc.get("topology_digest") != self.digest.hex():
            raise ValueError("saved for another topology file (digest differs)")
        backlogs: dict[int, list[str]] = {}
        try:
            for e in doc["hosts"]:
                name = e["name"]
                if not self.topo.has_host(name):
                    self.notes.append(("state_host_skipped", {"host": name}))
                    continue
                x = self.topo.host_id(name)
                addr = (str(e["addr"][0]), int(e["addr"][1]))
                self.hosts[x] = _Host(name, addr, int(e["session"]), int(e["seq"]), int(e["registered_t_us"]),
                                      now_us, tuple(str(v) for v in e["vms"]))
                backlogs[x] = [str(d) for d in e["backlog"]]
        except (KeyError, TypeError, IndexError, ValueError) as err:
            self.hosts.clear()
            raise ValueError(f"bad host entry: {err!r}") from None
        groups = {x: [self.topo.host_id(d) for d in ds if self.topo.has_host(d) and self.topo.host_id(d) in self.hosts]
                  for x, ds in backlogs.items()}
        groups = {x: ds for x, ds in groups.items() if ds}
        self.notes.append(("state_loaded", {"hosts": len(self.hosts), "backlogged": len(groups)}))
        if not groups:
            return []
        if hasattr(self.sched, "backlog_many"):
            return self._event("backlog", now_us, lambda t: self.sched.backlog_many(t, groups))
        out: list[Send] = []
        for x, ds in groups.items():
            out += self._event("backlog", now_us, lambda t, x=x, ds=ds: self.sched.backlog(t, x, ds))
        return out

