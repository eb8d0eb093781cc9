"""XCo's one loop in simulated time: the product's :class:`~xtc.xco.agent.AgentCore` on every sending
host and its :class:`~xtc.xco.controller.ControllerCore`, over in-memory gates and a simulated clock.

What XTC's :class:`xtc.daemon.loop.ControlLoop` is to the daemon core, :class:`XcoLoop` is to
XCo's two cores: it calls them exactly as the services do (``tick`` at each core's
``next_deadline_us``, ``handle`` of each datagram at its arrival, the counters read on the agent
service's own poll schedule, :meth:`xtc.xco.agent_service.AgentService.next_poll_us`), and does
what their outputs ask (``moved`` and ``states`` to the gate, ``sends`` to the other side).  Only
the outside world is simulated:

- **the clock**: one event queue in microseconds; wall time is ``t0_us`` plus simulated time
  (``t0_us`` a multiple of every slice, so slots start at simulated multiples of ``slice_us``);
- **the network between agents and controller**: every datagram, in the protocol's own wire
  encoding (the cores produce and parse the bytes), arrives ``delay_us`` after it is sent; datagrams
  that arrive at the controller at the same microsecond go to ``handle_many`` together, as one
  socket read would;
- **the gates**: one :class:`xtc.xco.memory_gate.MemoryGate` per agent, driven by the simulated
  clock, with one endless sender per flow (the simulator's UDP sources always have data).

What runs is therefore what the agent runs: registration and welcome, small flows sent unheld
until they pass ``small_flow_bytes``, backlog reports, give-ups, heartbeats and acks, fail-open
if the controller falls silent.  The data plane does not feed back into the control plane (a gate's
counters are its own toy queues, not the switches'): the whole control run is computed first and
:meth:`XcoLoop.run` returns every change of a flow's sending rate, which the fluid simulator
(:mod:`xtc_lab.xco.simulate`) applies at its time.

Simulation economy: an agent's flows are every VM pair of the topology in the product
(:func:`xtc.xco.agent.flows_of`); here each agent is given the topology with only its own VMs and
those of the hosts it sends to, so that an agent of a 4,800-host network does not carry 4,799
flows it never uses.  A host without VMs in the topology gets one, numbered from 198.18.0.0/15.
"""

from __future__ import annotations

import dataclasses
import heapq
import ipaddress
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from xtc.xco import protocol as P
from xtc.xco.agent import AgentCore
from xtc.xco.agent_service import AgentService
from xtc.xco.controller import ControllerCore
from xtc.host.gate import CLOSED, OPEN, Flow
from xtc.xco.memory_gate import MemoryGate
from xtc.xco.topology import Topology

__all__ = ["XcoLoop", "RateChange", "with_vms", "T0_US"]

#: Wall time of simulated time 0, microseconds since the Unix epoch (2026-11-26 00:00 UTC; a
#: multiple of every slice length in use).
T0_US = 1_795_651_200_000_000
_LAB_NET = ipaddress.ip_network("198.18.0.0/15")


def with_vms(topo: Topology) -> Topology:
    """``topo`` with one VM for every host that has none (addresses from 198.18.0.0/15, host id + 1)."""
    have = set(topo.vms.values())
    if len(have) == topo.n_hosts:
        return topo
    if topo.n_hosts >= _LAB_NET.num_addresses - 2:
        raise ValueError(f"{topo.n_hosts} hosts: more than 198.18.0.0/15 can number")
    vms = dict(topo.vms)
    base = int(_LAB_NET.network_address)
    for x, name in enumerate(topo.hosts):
        if name not in have:
            vms[str(ipaddress.IPv4Address(base + x + 1))] = name
    return dataclasses.replace(topo, vms=vms)


@dataclasses.dataclass(frozen=True, slots=True)
class RateChange:
    """A flow's sending rate from ``t_us`` (simulated microseconds) on: bits/s, 0 = held."""

    t_us: int
    flow: int
    rate_bps: float


@dataclasses.dataclass
class _PollCfg:  # what AgentService.next_poll_us reads of the agent's configuration
    poll_us: int
    idle_poll_us: int = 0


class _Host:
    """One agent with its gate, in the shape AgentService.next_poll_us reads (core, cfg, link_bps)."""

    def __init__(self, core: AgentCore, gate: MemoryGate, cfg: _PollCfg, link_bps: int,
                 flows: list[tuple[int, Flow]]):
        self.core = core
        self.gate = gate
        self.cfg = cfg
        self.link_bps = link_bps
        self.flows = flows            # (the simulator's flow index, the gate's Flow)
        self.next_poll_us = 0
        self.version = 0              # of its wake-up in the event queue (older ones are stale)
        self.rates: dict[int, float] = {}

    next_poll = AgentService.next_poll_us  # the agent service's own schedule of counter reads


class XcoLoop:
    """The controller core and one agent core per sending host, in simulated time.

    Parameters
    ----------
    topo : Topology
        The network (VMs are added where missing: :func:`with_vms`).
    flows : sequence of (int, int)
        ``(sender, destination)`` host ids; every flow always has data.
    mode : {"timeslice", "rate", "hybrid"}
        The controller's scheduler.
    slice_us, lead_us, delay_us : int
        Timeslot; how long before a slot the controller sends its directives; one-way datagram
        delay between an agent and the controller (microseconds).
    poll_us, small_flow_bytes, giveup_after_us, idle_poll_us : int
        The agent's settings of the same names (the product's defaults).
    heartbeat_interval_us : int
        The controller's.
    controller_stops_us : int, optional
        Simulated time at which the controller falls silent (it neither reads nor sends from then
        on): the agents' fail-open, seen from outside.
    """

    def __init__(self, topo: Topology, flows: Sequence[tuple[int, int]], mode: str, *, slice_us: int = 10_000,
                 lead_us: int = 500, delay_us: int = 100, poll_us: int = 500, small_flow_bytes: int = 100_000,
                 giveup_after_us: int = 2_000, heartbeat_interval_us: int = 100_000,
                 idle_poll_us: int = 0, controller_stops_us: int | None = None):
        if T0_US % slice_us:
            raise ValueError(f"slice_us ({slice_us}) must divide the simulated epoch {T0_US} us")
        self.topo = topo = with_vms(topo)
        self.mode = mode
        self.delay_us = delay_us
        self.stop_us = None if controller_stops_us is None else T0_US + controller_stops_us
        digest = P.topology_digest(b"xtc simulate xco")  # both ends compare the same bytes
        self.ctl = ControllerCore(topo, digest, T0_US, slice_us=slice_us, lead_us=lead_us, mode=mode,
                                  heartbeat_interval_us=heartbeat_interval_us, session=1)
        vm_of: dict[int, list[str]] = {}
        for a, h in topo.vms.items():
            vm_of.setdefault(topo.host_id(h), []).append(a)
        by_sender: dict[int, list[tuple[int, int]]] = {}
        for i, (x, d) in enumerate(flows):
            by_sender.setdefault(int(x), []).append((i, int(d)))
        self.hosts: dict[int, _Host] = {}
        self._clock = T0_US
        for x, fl in sorted(by_sender.items()):
            mine = {a: h for a, h in topo.vms.items()
                    if topo.host_id(h) == x or topo.host_id(h) in {d for _, d in fl}}
            core = AgentCore(dataclasses.replace(topo, vms=mine), x, digest, T0_US, session=x + 1,
                             small_flow_bytes=small_flow_bytes, giveup_after_us=giveup_after_us)
            link_bps = int(topo.nic_bps[x])
            gate = MemoryGate(link_bps=link_bps, clock_us=self._now)
            gate.install()
            for d in core.dests:
                gate.add_dest(d)
            for f in core.flows:
                gate.add_flow(f)
            gflows = []
            for i, d in fl:
                f = next(f for f in core.flows if f.dest_host == d)  # the first VM pair of the flow
                gate.offer(f, None)
                gflows.append((i, f))
            self.hosts[x] = _Host(core, gate, _PollCfg(poll_us, idle_poll_us), link_bps, gflows)
        self._q: list[tuple[int, int, str, Any]] = []
        self._seq = 0
        self._ctl_version = 0
        self._ctl_inbox: list[tuple[bytes, tuple[str, int]]] = []
        self.changes: list[RateChange] = []
        #: Datagrams each way, by type; and their bytes.
        self.datagrams: Counter[str] = Counter()
        self.datagram_bytes = 0
        self.wall_s = 0.0
        self._count = False

    # -- the clock and the queue ---------------------------------------------------------------------
    def _now(self) -> int:
        return self._clock

    def _at(self, t_us: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t_us, self._seq, kind, payload))

    def _wake_agent(self, x: int) -> None:
        h = self.hosts[x]
        h.version += 1
        # a deadline already past is due now (as the service's selector would return at once)
        self._at(max(self._clock, min(h.core.next_deadline_us(), h.next_poll_us)), "agent", (x, h.version))

    def _wake_ctl(self) -> None:
        self._ctl_version += 1
        self._at(max(self._clock, self.ctl.next_deadline_us()), "ctl", self._ctl_version)

    # -- doing what the cores say --------------------------------------------------------------------
    def _send_to_ctl(self, x: int, data: bytes, now_us: int) -> None:
        if self._count:
            self.datagrams[type(P.decode(data)).__name__] += 1
        self.datagram_bytes += len(data)
        self._at(now_us + self.delay_us, "to_ctl", (data, ("sim", x)))

    def _apply(self, x: int, out: Any, now_us: int) -> None:
        h = self.hosts[x]
        for f in out.moved:
            h.gate.move_to_dest(f)
        if out.states:
            h.gate.set_states(out.states)
        if out.moved or out.states:
            self._rates(h, now_us)
        for d in out.sends:
            self._send_to_ctl(x, d, now_us)

    def _rates(self, h: _Host, now_us: int) -> None:
        """The sending rate of each of the host's flows, as its gate lets it out: the NIC shared
        among the flows not held (a small flow is never held), a rate limit capping its own."""
        g = h.gate
        free = [(i, f) for i, f in h.flows if f not in g.moved or g.state[f.dest_host] != CLOSED]
        share = h.link_bps / len(free) if free else 0.0
        new = {i: 0.0 for i, _ in h.flows}
        for i, f in free:
            s = g.state[f.dest_host]
            new[i] = share if f not in g.moved or s == OPEN else min(share, float(s))
        for i, r in new.items():
            if h.rates.get(i) != r:
                h.rates[i] = r
                self.changes.append(RateChange(now_us - T0_US, i, r))

    def _agent(self, x: int, now_us: int, data: bytes | None = None) -> None:
        h = self.hosts[x]
        core = h.core
        out = core.tick(now_us) if data is None else core.handle(data, now_us)
        self._apply(x, out, now_us)
        if now_us >= h.next_poll_us:
            sent, backlog_bytes, backlog_packets, small_sent = h.gate.counters(core.dests, core.small_flows)
            self._apply(x, core.observe_counters(now_us, sent, backlog_bytes, backlog_packets, small_sent), now_us)
            h.next_poll_us = h.next_poll(now_us)
        self._wake_agent(x)

    def _controller(self, now_us: int) -> None:
        sends = self.ctl.handle_many(self._ctl_inbox, now_us) if self._ctl_inbox else []
        self._ctl_inbox = []
        sends += self.ctl.tick(now_us)
        for s in sends:
            if self._count:
                self.datagrams[type(P.decode(s.data)).__name__] += 1
            self.datagram_bytes += len(s.data)
            self._at(now_us + self.delay_us, "to_agent", (s.host, s.data))
        self._wake_ctl()

    # -- running -------------------------------------------------------------------------------------
    def run(self, duration_us: int, count_types: bool = False) -> list[RateChange]:
        """Run both sides for ``duration_us`` of simulated time; every change of a flow's sending
        rate (simulated time, in order).  ``count_types``: count :attr:`datagrams` by type (a
        decode more per datagram)."""
        t_start = time.perf_counter()
        self._count = count_types
        end = T0_US + duration_us
        for x, h in self.hosts.items():
            self._rates(h, T0_US)
            h.next_poll_us = T0_US
            self._wake_agent(x)
        self._wake_ctl()
        q = self._q
        while q and q[0][0] <= end:
            now, _, kind, payload = heapq.heappop(q)
            self._clock = now
            if kind == "agent":
                x, v = payload
                if v == self.hosts[x].version:
                    self._agent(x, now)
            elif kind == "to_agent":
                x, data = payload
                if x in self.hosts:
                    self._agent(x, now, data)
            elif self.stop_us is not None and now >= self.stop_us:
                continue  # the controller is gone: what reaches it is lost, it sends nothing
            elif kind == "to_ctl":
                self._ctl_inbox.append(payload)
                if not (q and q[0][0] == now and q[0][2] == "to_ctl"):  # the last one of this microsecond
                    self._controller(now)
            elif payload == self._ctl_version:  # the controller's own deadline
                self._controller(now)
        self._clock = end
        self.wall_s = time.perf_counter() - t_start
        return self.changes

    def summary(self) -> dict[str, Any]:
        """What the cores counted: directives, fail-opens, give-ups, drops."""
        agents = [h.core for h in self.hosts.values()]
        sent: Counter[str] = Counter()
        for c in agents:
            sent.update(c.sent)
        return {"agents": len(agents), "directives_sent": self.ctl.directives_sent,
                "directives_late": self.ctl.directives_late,
                "agent_sent": dict(sent), "fail_opens": sum(c.fail_opens for c in agents),
                "agent_dropped": sum(sum(c.dropped.values()) for c in agents),
                "controller_dropped": dict(self.ctl.dropped), "datagram_bytes": self.datagram_bytes,
                "wall_s": round(self.wall_s, 3)}


def rate_changes(topo: Topology, flows: Sequence[tuple[int, int]], mode: str, duration_us: int,
                 **kw: Any) -> tuple[list[RateChange], dict[str, Any]]:
    """Run :class:`XcoLoop` and return its rate changes and :meth:`XcoLoop.summary`."""
    loop = XcoLoop(topo, flows, mode, **kw)
    ch = loop.run(duration_us)
    return ch, loop.summary()

