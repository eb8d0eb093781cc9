"""The XCo agent in real time: :class:`~xtc.xco.agent.AgentCore` behind one UDP socket and a gate.

:class:`AgentService` binds a UDP socket, takes datagrams only from the controller's address
(others are dropped and counted, reason ``address``), reads the gate's counters (every ``poll_us``
until welcomed, then at most once per slice, just before a slot boundary: :meth:`AgentService.next_poll_us`;
a gate's ``quiet`` probe first when nothing was queued: :meth:`AgentService._poll`)
and sleeps, with a selector, until the earliest of: a datagram, the next poll, the core's next
deadline (a directive's ``start_us``, a register, heartbeat or probe, the fail-open check).
Destination states go to the gate with one :meth:`~xtc.host.gate.Gate.set_states` per decision; for every
directive applied, the time from the moment it could take effect (its arrival, or its
``start_us`` when it arrived ahead) to ``set_states`` returning is observed in the histogram
``xco_agent_directive_to_gate_seconds`` and kept in :attr:`AgentService.directive_log` (and, at log
level ``debug``, written as a ``directive_applied`` event: ``dest`` (None = hold, -1 = rates),
``start_us``, ``arrival_us``, ``applied_us``, ``rate_bps`` (a hybrid slice's rate, else None), and
for a rate directive ``rates_bps``, every destination's rate in force after it).

SIGTERM or SIGINT: a Leave is sent, the gate restores the uplink's original qdisc, exit 0.
``xtc xco agent -c FILE`` (:func:`run_agent`); ``xtc xco agent -c FILE --cleanup`` removes what a
killed agent left on its uplink (:func:`run_cleanup`).
"""

from __future__ import annotations

import logging
import os
import secrets
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import protocol as P
from .agent import DROP_REASONS, AgentCore, AgentOutput
from .agent_config import AgentConfig, AgentConfigError, check_against_topology, load_agent_config
from xtc.service.metrics import ServiceMetrics, labelled_counter
from .auth import AuthError, load_key, opened, seal
from .protocol import wall_us
from xtc.host.gate import CLOSED, OPEN, Gate, GateError
from xtc.host.tcgate import TcGate, cleanup  # the real gate (netlink, root); it loads pyroute2 only when used
from xtc.service.cli import load_or_report
from xtc.service.notify import Notifier
from xtc.service.logs import event, setup_logging
from xtc.service.signals import StopOnSignal

__all__ = ["AgentService", "run_agent", "run_cleanup", "POLL_DEFER_MARGIN_US", "WAKE_ADVANCE_MAX_US"]

#: A counter read is put off when a directive is due within its recent cost plus this, us.
POLL_DEFER_MARGIN_US = 100
#: The most a gate change's measured cost moves a slice's byte budget, us (a stall is not a cost).
SET_STATES_COST_MAX_US = 500
#: The most the agent wakes ahead of a directive to spin to its start, us.
WAKE_ADVANCE_MAX_US = 500

log = logging.getLogger("xtc.xco.agent")


class _Metrics(ServiceMetrics):
    def __init__(self, svc_ref: Callable[[], AgentService]):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        super().__init__("xco_agent")
        self.directive_to_gate = self.histogram(
            "xco_agent_directive_to_gate_seconds",
            "From a directive's arrival (or its start_us, if it arrived ahead) to set_states returning, seconds",
            (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 0.05))
        self.set_states_seconds = self.histogram(
            "xco_agent_set_states_seconds", "Wall time of one gate.set_states call, seconds",
            (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.02))

        def collect() -> Any:
            svc = svc_ref()
            core = svc.core
            yield labelled_counter("xco_messages_dropped", "Datagrams dropped", "reason", core.dropped, DROP_REASONS)
            yield labelled_counter("xco_messages_received", "Valid datagrams received", "type", core.received)
            yield labelled_counter("xco_messages_sent", "Datagrams sent to the controller", "type", core.sent)
            yield CounterMetricFamily("xco_agent_directives", "Directives accepted", value=core.directives)
            yield CounterMetricFamily("xco_agent_fail_opens", "Times the agent failed open", value=core.fail_opens)
            yield CounterMetricFamily("xco_agent_reregisters", "Times the agent, idle and unanswered, registered again",
                                      value=core.reregisters)
            yield CounterMetricFamily("xco_agent_gate_errors", "Gate operations that failed", value=svc.gate_errors)
            yield CounterMetricFamily("xco_agent_stats_reads", "Reads of the gate's byte counters (tc statistics)", value=svc.polls)
            yield GaugeMetricFamily("xco_agent_wake_advance_seconds",
                                    "How far ahead of a directive's start the agent wakes to spin to it, seconds",
                                    value=svc.wake_advance_us / 1e6)
            yield CounterMetricFamily("xco_agent_stats_reads_deferred",
                                      "Counter reads put off until a directive due before they would end was applied",
                                      value=svc.deferred_polls)
            yield GaugeMetricFamily("xco_agent_failed_open", "1 while every destination is open for want of a controller",
                                    value=int(core.failed_open))
            yield GaugeMetricFamily("xco_agent_welcomed", "1 once the controller has welcomed this host",
                                    value=int(core.welcomed))
            yield GaugeMetricFamily("xco_agent_flows", "Flows of this host", value=len(core.flows))
            yield GaugeMetricFamily("xco_agent_destinations_held", "Destination hosts closed now",
                                    value=sum(1 for s in core.states.values() if s == CLOSED))
            yield GaugeMetricFamily("xco_agent_backlogged_destinations", "Destinations reported backlogged",
                                    value=len(core.reported))

        self.collect_from(collect)


class AgentService(StopOnSignal):
    """The agent in real time.

    Parameters
    ----------
    cfg : AgentConfig
        The loaded configuration (its ``topology`` path is read here).
    gate : Gate
        The uplink's gate (:class:`xtc.host.tcgate.TcGate` in production).
    clock_us : callable
        Wall clock, microseconds since the Unix epoch (injectable for tests).

    Raises
    ------
    AgentConfigError
        If ``host`` is not in the topology.
    """

    def __init__(self, cfg: AgentConfig, gate: Gate, clock_us: Callable[[], int] = wall_us):
        from .topology import load_topology

        self.cfg = cfg
        self.gate = gate
        self.clock_us = clock_us
        self.topo = load_topology(cfg.topology)
        self.host_id, self.link_bps = check_against_topology(cfg, self.topo)
        self.digest = P.topology_digest(Path(cfg.topology).read_bytes())
        self.core = AgentCore(
            self.topo, self.host_id, self.digest, clock_us(), session=secrets.randbits(32),
            small_flow_bytes=cfg.small_flow_bytes, giveup_after_us=cfg.giveup_after_us,
            register_interval_us=cfg.register_interval_us, fail_open_slices=cfg.fail_open_slices,
            clock_window_us=cfg.clock_window_us, giveup_quiet_us=cfg.giveup_quiet_us, slot_budget=cfg.slot_budget)
        self.ctl_addr = cfg.controller_address
        #: The controller's shared key (``auth_key_file``): every datagram sent is sealed, every one
        #: received must verify (:mod:`xtc.xco.auth`); None: no authentication.
        self.key = load_key(cfg.auth_key_file) if cfg.auth_key_file is not None else None
        self.metrics = _Metrics(lambda: self)
        self.metrics_port: int | None = None
        self.sock: socket.socket | None = None
        self.stop = False
        self.stop_signal: int | None = None
        self.gate_errors = 0
        #: Counter reads so far, and those of them answered by the gate's ``quiet`` probe (see :meth:`_poll`).
        self.polls = 0
        self.quiet_polls = 0
        #: Counter reads put off until a directive due before they would end had been applied
        #: (see :meth:`poll_defers`), and what a read has cost of late (a decaying peak, us).
        self.deferred_polls = 0
        self.poll_cost_us = 0
        #: How far ahead of a directive's start the agent wakes (the recent wake-ups' mean
        #: lateness, us) and then spins to the start; what the spins cost at most, us.
        self.wake_advance_us = 0
        self.spin_us = 0
        #: A directive's closes are made this long ahead of its start, its opens at the start
        #: (``close_guard_us``; 0 = off); a slot budget ends as much before its slot.
        self.close_guard_us = cfg.close_guard_us
        #: What a gate change takes (the recent ones' mean, us): a slice's byte budget counts from
        #: when the kernel has it, not from when it was computed (``slot_budget``).
        self.set_states_cost_us = 0
        self._quiet: Callable[[int | None], bool] | None = getattr(gate, "quiet", None)
        self._idle = False  # the last dump found nothing queued in the agent's classes
        self._headroom: int | None = None  # small_flow_bytes minus the most a small flow had sent
        #: (arrival_us, start_us, applied_us) of the last directives applied.
        self.directive_log: deque[tuple[int, int, int]] = deque(maxlen=100_000)
        self._installed = False

    # -- set-up --------------------------------------------------------------------------------------
    def open(self) -> None:
        """Install the gate (a class per destination, every one open, and each flow in a class of
        its own, small), bind the socket, start the metrics endpoint.

        Raises
        ------
        GateError
            If the gate cannot take over the uplink (the gate is restored first).
        """

        self.gate.install()
        self._installed = True
        try:
            states = self.core.states
            for d in self.core.dests:
                self.gate.add_dest(d, states[d])
            for f in self.core.flows:
                self.gate.add_flow(f)
        except GateError:
            self.gate.restore()
            raise
        host, port = self.cfg.bind_address
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.sock.setblocking(False)
        if self.cfg.metrics.enabled:
            self.metrics_port = self.metrics.serve(self.cfg.metrics.address, self.cfg.metrics.port)
        event(log, logging.INFO, "started", pid=os.getpid(), host=self.cfg.host, host_id=self.host_id,
              uplink=self.cfg.uplink, netns=self.cfg.netns, link_bps=self.link_bps, flows=len(self.core.flows),
              dests=len(self.core.dests),
              controller=self.cfg.controller, bind="%s:%d" % self.sock.getsockname()[:2],
              session=self.core.session, metrics_port=self.metrics_port)

    # -- doing what the core says --------------------------------------------------------------------
    def _apply(self, out: AgentOutput) -> None:
        assert self.sock is not None
        for f in out.moved:
            try:
                self.gate.move_to_dest(f)
            except GateError as e:

                self.gate_errors += 1
                event(log, logging.ERROR, "gate_error", op="move_to_dest", error=str(e))
        gate_ok = True
        if out.states:
            t0 = time.perf_counter()
            try:
                if out.until:
                    # each open slice's budget: the link's bytes from when the kernel applies it (now
                    # plus what a gate change has taken of late) to the slice's end
                    now = self.clock_us() + self.set_states_cost_us + self.close_guard_us
                    self.gate.set_states(out.states, {d: u - now for d, u in out.until.items() if out.states.get(d) == OPEN})
                else:
                    self.gate.set_states(out.states)
            except GateError as e:

                self.gate_errors += 1
                gate_ok = False
                event(log, logging.ERROR, "gate_error", op="set_states", error=str(e))
            else:
                d = time.perf_counter() - t0
                self.metrics.set_states_seconds.observe(d)
                c = self.set_states_cost_us  # a mean over the last ~16 changes
                self.set_states_cost_us = c + (min(int(d * 1e6), SET_STATES_COST_MAX_US) - c) // 16
        # The gate first: a heartbeat or a report that a directive's tick also produced waits the
        # few tens of microseconds of the gate change, the slot change does not wait for them.
        key = self.key
        for d in out.sends:
            try:
                self.sock.sendto(d if key is None else seal(d, key), self.ctl_addr)
            except OSError as e:  # an unreachable controller must not stop the agent: it fails open
                self.core.dropped["send_error"] += 1
                if log.isEnabledFor(logging.DEBUG):

                    event(log, logging.DEBUG, "send_failed", error=str(e))
        if out.applied and gate_ok:
            done = self.clock_us()
            debug = log.isEnabledFor(logging.DEBUG)
            for a in out.applied:
                self.directive_log.append((a.arrival_us, a.start_us, done))
                self.metrics.directive_to_gate.observe(max(0, done - max(a.arrival_us, a.start_us)) / 1e6)
                if debug:

                    event(log, logging.DEBUG, "directive_applied", dest=a.dest, start_us=a.start_us,
                          arrival_us=a.arrival_us, applied_us=done, rate_bps=a.rate_bps,
                          **({"rates_bps": dict(self.core.rates)} if a.dest == -1 else {}))
        if self.core.notes:
            self._flush_notes()

    def _flush_notes(self) -> None:

        for name, fields in self.core.notes:
            event(log, logging.WARNING if name == "fail_open" else logging.INFO, name, **fields)
        self.core.notes.clear()

    def _tick(self, now_us: int) -> None:
        """The core's tick, with a directive due within :attr:`close_guard_us` taken now: its closes
        made at once (with what else the tick asks), its opens at its start, after a spin.

        A close is a TBF change, which refills the closing class's bucket with one frame: with
        packets queued there that frame leaves at once, some tens of microseconds after the agent
        made the change (measured at the senders' uplinks: the late packets of a slice left 50-100
        us after its end, median).  Made ``close_guard_us`` early, both fall inside the slot.  The
        core is given the directive's start as its time, so it decides as it would then."""
        d = self.core.next_directive_us()
        g = self.close_guard_us
        if not g or d is None or not now_us < d <= now_us + g or not self.core.next_directive_closes():
            self._apply(self.core.tick(now_us))
            return
        out = self.core.tick(d)
        opens = {k: v for k, v in out.states.items() if v != CLOSED}
        if opens or not out.states:
            later = AgentOutput(states=opens, applied=out.applied, until=out.until)
            out.states = {k: v for k, v in out.states.items() if v == CLOSED}
            out.applied, out.until = [], {}
            self._apply(out)
            self.spin_us += g  # an upper bound, as in _wait_for_directive
            self._spin_until(d)
            self._apply(later)
        else:  # closes only (a hold): all of it now
            self._apply(out)

    def _spin_until(self, t_us: int) -> int:
        """Read the clock until ``t_us`` (at most :data:`WAKE_ADVANCE_MAX_US` of the monotonic
        clock: a wall clock stepped back must not hold a real-time process here); the time then."""
        clock = self.clock_us
        now_us = clock()
        stop_ns = time.monotonic_ns() + 1000 * min(max(0, t_us - now_us), WAKE_ADVANCE_MAX_US)
        while now_us < t_us and time.monotonic_ns() < stop_ns:
            now_us = clock()
        return now_us

    def _directive_due_us(self) -> int | None:
        """When the earliest directive waiting is to be taken: its start, :attr:`close_guard_us`
        before it if it closes the destination in force; None if none waits."""
        d = self.core.next_directive_us()
        if d is not None and self.close_guard_us and self.core.next_directive_closes():
            d -= self.close_guard_us
        return d

    def _wait_for_directive(self, now_us: int) -> int:
        """Spin until a directive due within :attr:`wake_advance_us` is due (:attr:`close_guard_us`
        before its start); return the time then.

        The sleep before a directive ends :attr:`wake_advance_us` ahead of its start: on this
        project's 2-vCPU VMs a timer wake-up comes 0.1-0.2 ms late even under SCHED_FIFO (a
        select() of 10 ms: p50 133-146 us, p90 182-193 us), which put every slot change, the old
        slot's close with it, that much after the slice began.  The advance is the mean lateness of
        the wake-ups before directives (learnt as they happen, at most :data:`WAKE_ADVANCE_MAX_US`),
        so the spin is short: the wake-up's spread around its mean.
        """
        d = self._directive_due_us()
        if d is None or now_us >= d or d - now_us > self.wake_advance_us:
            return now_us
        self.spin_us += self.wake_advance_us  # an upper bound of the time spent spinning
        return self._spin_until(d)

    def poll_defers(self, now_us: int) -> bool:
        """Whether a counter read due now is put off: a directive is due before the read would end.

        A read costs 0.3-1 ms on a loaded host (a netlink dump of the classes and the core's
        decisions), and the read that precedes a slot boundary (:meth:`next_poll_us`) is done in
        the wake-up of the boundary's directive (:meth:`poll_early_us`): a read that ran past the
        boundary held the directive, so the old slot's close, back (measured on the lab's Figure
        15: a gate change a median 0.44 ms after its slot began, 1.1 ms at p90).  Then the
        directive goes first and the read follows it at once.  The cost is :attr:`poll_cost_us`
        plus :data:`POLL_DEFER_MARGIN_US`.
        """
        due = self._directive_due_us()
        return due is not None and now_us < due <= now_us + self.poll_cost_us + POLL_DEFER_MARGIN_US

    def _poll(self) -> None:
        t0 = self.clock_us()
        try:
            self._read_counters()
        finally:
            d = self.clock_us() - t0
            c = self.poll_cost_us
            self.poll_cost_us = d if d >= c else c - (c - d) // 8

    def _read_counters(self) -> None:
        """Read the gate's counters and let the core observe them.

        A gate with a ``quiet(headroom_bytes)`` probe (:meth:`xtc.host.tcgate.TcGate.quiet`: one
        message about the root instead of a dump of every class) is asked first while the last
        read found nothing queued in the agent's classes: when nothing is queued under the root
        and no small flow can have passed ``small_flow_bytes`` (the headroom: the threshold minus
        the most a small flow had sent at the last read), the core observes exactly that
        (:meth:`AgentCore.observe_quiet`) and the dump is skipped.  While something is queued the
        dump is read directly (no probe).  A probe that fails is logged (``gate_error``, op
        ``quiet``) and not asked again: every read is then a dump."""
        core = self.core
        if self._idle and self._quiet is not None and not core.wants_counters():
            try:
                quiet = self._quiet(self._headroom)
            except GateError as e:  # the probe is an optimisation: without it, every read is a dump

                self.gate_errors += 1
                self._quiet = None
                event(log, logging.ERROR, "gate_error", op="quiet", error=str(e))
                quiet = False
            if quiet:
                self.polls += 1
                self.quiet_polls += 1
                self._apply(core.observe_quiet(self.clock_us()))
                return
        try:
            sent, backlog_bytes, backlog_packets, small_sent = self.gate.counters(core.dests, core.small_flows)
        except GateError as e:

            self.gate_errors += 1
            event(log, logging.ERROR, "gate_error", op="counters", error=str(e))
            return
        self.polls += 1
        self._idle = not (backlog_bytes.any() or backlog_packets.any())
        self._headroom = max(0, core.small_flow_bytes - int(small_sent.max())) if len(small_sent) else None
        self._apply(core.observe_counters(self.clock_us(), sent, backlog_bytes, backlog_packets, small_sent))

    def next_poll_us(self, now_us: int) -> int:
        """When to read the counters next.

        Until welcomed: every ``poll_us``.  Then every ``poll_us`` rounded up to whole slices (at
        least one), ``min(slice / 4, 300 us)`` before a slot boundary (slots start at wall-clock
        multiples of the slice), so that a backlog is reported in time for the next slot; and
        while this host has a backlog reported, or gave one up less than two slices ago, also
        every ``max(poll_us, giveup_after_us / 2)``: a destination whose queue has emptied is given up
        within the hysteresis (work conservation), and one that fills again after its give-up is
        reported again at once (a lone paced sender is held a slice at most).  A host whose large
        destinations have nothing queued reads once per slice.  With ``giveup_quiet_us``, also
        when :meth:`AgentCore.drain_poll_us` asks (the class in force drained, or quiet long
        enough to be given up).  With ``idle_poll_us``, at least that often while nothing is
        reported (a reported host reads on the give-up cadence above: the idle reads were a dump
        every 2 ms on a host whose held class always has something queued, and a sender's agent in
        the testbed took 16.5% of a core at 10 ms slices with them).
        """
        core = self.core
        poll_us, sl = self.cfg.poll_us, core.slice_us
        if not core.welcomed or sl <= 0:
            return now_us + poll_us
        period = -(-poll_us // sl) * sl
        margin = min(sl // 4, 300)
        t = ((now_us + margin) // period + 1) * period - margin
        if t - now_us < period // 2:
            t += period
        g = core.last_giveup_us
        if core.reported or (g is not None and now_us - g < 2 * sl):
            t = min(t, now_us + max(poll_us, core.giveup_after_us // 2))
        d = core.drain_poll_us(self.link_bps)
        if d is not None:
            t = min(t, max(d, now_us))
        if self.cfg.idle_poll_us and not core.reported:
            t = min(t, now_us + self.cfg.idle_poll_us)
        return t

    def poll_early_us(self) -> int:
        """How long before it is due a poll is done in a wake-up that happens anyway (a datagram,
        a directive's start): once welcomed, ``min(slice / 4, 300 us)``, else 0.

        A directive sent ``lead_us`` ahead (500 us by default) arrives just before the poll that
        precedes the slot boundary; reading the counters in that wake-up saves one a slice, and
        sees the queues at most that much earlier.
        """
        sl = self.core.slice_us
        return min(sl // 4, 300) if self.core.welcomed and sl > 0 else 0

    def loop(self, until_us: int | None = None) -> None:
        """Receive, poll, decide, gate; until stopped (or ``until_us``)."""
        assert self.sock is not None
        sock = self.sock
        sel = selectors.SelectSelector()  # one socket; select() sleeps to the microsecond, epoll to the ms
        sel.register(sock, selectors.EVENT_READ)
        next_poll = self.clock_us()
        readable = True
        try:
            while not self.stop:
                # Datagrams first: after a late wake-up, an answer waiting in the socket must be
                # heard before the fail-open check of the next tick or poll.  A wake-up of the
                # timer (select saw nothing) skips the read (a recvfrom and its EAGAIN exception).
                for _ in range(64 if readable else 0):
                    try:
                        data, addr = sock.recvfrom(P.MAX_DATAGRAM + 1)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:  # ICMP port unreachable from a dead controller, reported here
                        continue
                    if (addr[0], addr[1]) != self.ctl_addr:
                        self.core.drop_address()
                        continue
                    data = opened(data, self.key, self.core.dropped)
                    if data is None:
                        continue
                    self._apply(self.core.handle(data, self.clock_us()))
                now = self.clock_us()
                if until_us is not None and now >= until_us:
                    return
                now = self._wait_for_directive(now)
                self._tick(now)  # a directive due first
                deferred = False
                if now >= next_poll - self.poll_early_us():
                    if self.poll_defers(now):
                        deferred = True
                        self.deferred_polls += 1
                    else:
                        self._poll()
                        next_poll = self.next_poll_us(self.clock_us())
                now = self.clock_us()
                # a slot of this host's that began since asks for reads within the give-up hysteresis
                next_poll = min(next_poll, self.next_poll_us(now))
                # a read put off waits for the directive's start (the core's next deadline), not for itself
                wake = self.core.next_deadline_us() if deferred else min(self.core.next_deadline_us(), next_poll)
                if until_us is not None:
                    wake = min(wake, until_us)
                d = self._directive_due_us()
                if d is not None and d <= wake:  # woken ahead of a directive by what wake-ups are late
                    wake = d - self.wake_advance_us
                try:  # never less than 50 us: at a real-time priority a spin would starve the host
                    readable = bool(sel.select(min(max(50, wake - now) / 1e6, 0.5)))
                except InterruptedError:
                    readable = True
                    continue
                self.notifier.watchdog(None, self._status_line)
                if not readable and d is not None and d - self.wake_advance_us == wake:
                    late = self.clock_us() - wake
                    a = self.wake_advance_us
                    self.wake_advance_us = min(WAKE_ADVANCE_MAX_US, max(0, a + (late - a) // 16))
        finally:
            sel.close()

    def close(self) -> None:
        """Send a Leave, restore the uplink, release the gate and the socket (idempotent)."""

        if self.sock is not None:
            try:
                leave = self.core.stop(self.clock_us())
                self.sock.sendto(leave if self.key is None else seal(leave, self.key), self.ctl_addr)
            except OSError:
                pass
        restored = False
        if self._installed:
            try:
                self.gate.restore()
                restored = True
            except GateError as e:
                self.gate_errors += 1
                event(log, logging.ERROR, "gate_error", op="restore", error=str(e))
            self._installed = False
            try:
                self.gate.close()
            except GateError:
                pass
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            event(log, logging.INFO, "stopped", signal=self.stop_signal, restored=restored,
                  dropped=dict(self.core.dropped), directives=self.core.directives,
                  fail_opens=self.core.fail_opens)

    def _status_line(self) -> str:
        c = self.core
        state = "failed open (no controller)" if c.failed_open else "coordinated" if c.welcomed else "registering"
        return f"{state}, gating {self.cfg.uplink}, {c.directives} directive(s), {c.fail_opens} fail-open(s)"

    def run(self) -> int:
        """Open, loop until stopped, close; the exit code (0)."""
        try:
            self.open()
            # Serving now: the gate holds the uplink and the socket is bound.
            self.notifier.ready(f"gating {self.cfg.uplink} for host {self.cfg.host}, controller {self.cfg.controller}")
            self.loop()
        finally:
            self.notifier.stopping(f"restoring {self.cfg.uplink}")
            self.close()
            self.stopped()
        return 0


def run_agent(config_path: str | Path) -> int:
    """``xtc xco agent -c FILE``: load, validate, take over the uplink, run until SIGTERM/SIGINT.

    Returns the exit code: 0 after a clean stop, 2 for a bad configuration, 1 if the gate fails.
    """
    import sys

    from .topology import TopologyError

    prog = "xtc xco agent"
    cfg = load_or_report(lambda: load_agent_config(config_path), AgentConfigError, prog)
    if cfg is None:
        return 2
    setup_logging(cfg.log.format, cfg.log.level)
    try:
        from .topology import load_topology

        _, link_bps = check_against_topology(cfg, load_topology(cfg.topology), str(config_path))
        if cfg.auth_key_file is not None:
            load_key(cfg.auth_key_file)  # before the gate takes the uplink

        gate = TcGate(cfg.uplink, link_bps=link_bps, netns=cfg.netns, open_burst_bytes=cfg.open_burst_bytes,
                      rate_burst_us=cfg.rate_burst_us, gso_max_segs=cfg.gate_gso_max_segs, pass_tcp_control=cfg.pass_tcp_control)
        svc = AgentService(cfg, gate)
    except AuthError as e:
        print(f"{prog}: 'auth_key_file': {e}", file=sys.stderr)
        return 2
    except (TopologyError, AgentConfigError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except GateError as e:
        print(f"{prog}: gate: {e}", file=sys.stderr)
        return 1
    svc.notifier = Notifier.from_environ()
    svc.install_signal_handlers()
    if cfg.realtime_priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.realtime_priority))
        except OSError as e:
            print(f"{prog}: realtime_priority {cfg.realtime_priority}: {e.strerror}", file=sys.stderr)
            return 2
    try:
        return svc.run()
    except GateError as e:
        print(f"{prog}: gate: {e}", file=sys.stderr)
        return 1


def run_cleanup(config_path: str | Path) -> int:
    """``xtc xco agent -c FILE --cleanup``: remove what a killed agent left on its uplink."""
    import sys

    prog = "xtc xco agent --cleanup"
    cfg = load_or_report(lambda: load_agent_config(config_path), AgentConfigError, prog)
    if cfg is None:
        return 2

    try:
        removed = cleanup(cfg.uplink, cfg.netns, gso_max_segs=cfg.gate_gso_max_segs)
    except GateError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    where = cfg.uplink + (f" (netns {cfg.netns})" if cfg.netns else "")
    print(f"{where}: XCo gate removed" if removed else f"{where}: no XCo gate, nothing to remove")
    return 0
