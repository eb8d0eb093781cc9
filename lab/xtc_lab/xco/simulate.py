"""A simulator of switch queues with finite buffers, driven by the XCo scheduler objects.

The network is a fluid model in discrete time (step ``dt_us``): every directed link of the topology
is an output port with a drop-tail buffer and a FIFO served at the link's capacity.  Traffic is
per flow (one sender host, one destination host, the path of the topology); a flow's bytes are
kept per hop (one cell per flow and link of its path), so what a port serves in one step arrives
at the next port of each flow's path in the next step.  In one step, per port:

1. arrivals ``A`` (the sources' bytes on first hops, the previous hop's output elsewhere);
2. drop-tail: if ``A`` exceeds the free buffer, only the free buffer is accepted, shared among the
   arriving flows in proportion to their arrivals (the rest is dropped);
3. service: ``min(queue, C * dt)`` leaves, shared among the flows in proportion to what each has
   queued (fluid FIFO).

Sources always have data for their destination.  A UDP source sends at the rate its mode allows:

- ``none``: every host sends at its NIC rate, shared equally among its flows, all the time;
- ``timeslice``: a host sends at its NIC rate to the destination of its latest directive, from the
  time the directive takes effect until the end of its slice (the host's own clock) or a hold;
- ``hybrid``: the same, at the directive's ``rate_bps`` (:mod:`xtc.xco.scheduler.hybrid`);
- ``rate``: every flow sends at the ``rate_bps`` of its latest directive.

A TCP source (``tcp``) sends at that rate too, but never more than its congestion window allows:
its bytes in flight (queued or on their way on its path, plus what was delivered less than
``rtt_us`` ago, whose acknowledgements are still on their way back) stay within ``cwnd``.  The
window is Reno's, in bytes: slow start from ``initial_window_segments`` until the first loss, then
``mss_bytes * acked / cwnd`` more per acknowledged byte.  A loss at a port is known to the sender
a round trip later (``rtt_us`` plus the queueing on its path at the loss: the duplicate
acknowledgements of the bytes behind it), and the window keeps growing meanwhile; then it is
halved (at least two segments), at most once per window (until the bytes in flight then are
acknowledged).  A window of fewer than four segments cannot bring three duplicate
acknowledgements: such a loss is a retransmission timeout instead, the window one segment and the
source silent until ``rto_us`` (doubled for each timeout in a row) after the loss.  Not modelled:
retransmission (lost bytes are simply not delivered), delayed acknowledgements, the receive window.

The control side (``cores=True``, the default) is XCo's one loop (:mod:`xtc_lab.xco.oneloop`):
the product's :class:`~xtc.xco.agent.AgentCore` on every sending host and its
:class:`~xtc.xco.controller.ControllerCore`, exchanging the protocol's datagrams ``delay_us``
apart over a simulated clock, each agent driving an in-memory gate
(:class:`xtc.xco.memory_gate.MemoryGate`); a source sends at the rate its host's gate lets its flow
out (the NIC shared among the flows not held; a small flow is never held).  So the runs include
what the agent does: registration, small flows sent unheld, backlog reports on the agent's poll
schedule, give-ups, heartbeats, fail-open.  The controller sends a slot's directives ``lead_us``
before it (default ``lead_us = delay_us``, so that they are in force at its start).

``cores=False`` keeps the earlier model, for comparison: the product's scheduler objects
(:class:`FastScheduler`, :class:`RateLimiter`, :class:`HybridScheduler`) through their public
event API, every flow reporting its backlog at ``t = 0`` and each directive taking effect at
``max(its t_us, issue time + delay_us)``.

Work per step is a handful of numpy operations over the cells and the links that carry traffic.
``fast_forward`` skips steps while the state is at a fixed point (same queues, same per-step drop
and delivery) until the next directive takes effect; the totals are the same as stepping through.

The paper's figures run on it, with their tables, plots and command line, in
:mod:`xtc_lab.xco.simulate_figures` (``xtc simulate xco FIG``).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from xtc.xco.scheduler import FastScheduler, RateLimiter
from xtc.xco.scheduler.hybrid import HybridScheduler
from xtc.xco.topology import Topology

from .oneloop import XcoLoop

__all__ = ["SimResult", "simulate", "fig27_flows", "MODES"]

MODES = ("none", "timeslice", "rate", "hybrid")
DATA = Path(__file__).resolve().parents[3] / "tests" / "xco" / "data"  # the checkout's (lab/xtc_lab/xco)


@dataclass
class SimResult:
    """What one simulated run measured.

    Attributes
    ----------
    mode : str
        ``none``, ``timeslice``, ``rate`` or ``hybrid``.
    sent_bytes, delivered_bytes, dropped_bytes, in_flight_bytes : float
        Bytes the sources sent, the destinations received, the ports dropped, and still queued at
        the end.
    loss_pct : float
        ``100 * dropped / (dropped + delivered)``.
    max_offered_ratio : float
        Largest, over time and links, of the sum of the source rates of the flows crossing a link
        divided by its capacity (the simulator's own feasibility accounting; <= 1 means no link was
        ever offered more than its capacity).
    max_queue_fraction : float
        Largest queue seen on any port, as a fraction of its buffer.
    slots : list of list of int
        With ``record_slots``: for each slot, the hosts that sent in it (sorted host ids).
    wall_s : float
        Wall time of the run, seconds.
    steps, steps_computed : int
        Steps simulated, and steps actually computed (the others were fast-forwarded).
    """

    mode: str
    sim_s: float
    sent_bytes: float = 0.0
    delivered_bytes: float = 0.0
    dropped_bytes: float = 0.0
    in_flight_bytes: float = 0.0
    max_offered_ratio: float = 0.0
    max_queue_fraction: float = 0.0
    slots: list[list[int]] = field(default_factory=list)
    wall_s: float = 0.0
    steps: int = 0
    steps_computed: int = 0
    directives: int = 0
    #: Bytes delivered per flow, in the order of ``flows``.
    flow_delivered_bytes: list[float] = field(default_factory=list)
    #: Bytes dropped per flow, in the order of ``flows``.
    flow_dropped_bytes: list[float] = field(default_factory=list)
    #: With ``mark_s``: bytes delivered and dropped from that time on.
    delivered_after_mark_bytes: float = 0.0
    dropped_after_mark_bytes: float = 0.0
    #: With ``cores``: what the agents and the controller counted (:meth:`XcoLoop.summary`).
    xco: dict[str, Any] = field(default_factory=dict)

    @property
    def loss_pct(self) -> float:
        tot = self.dropped_bytes + self.delivered_bytes
        return 100.0 * self.dropped_bytes / tot if tot > 0 else 0.0

    @property
    def loss_after_mark_pct(self) -> float:
        """:attr:`loss_pct` of the bytes from ``mark_s`` on (after the agents' start)."""
        tot = self.dropped_after_mark_bytes + self.delivered_after_mark_bytes
        return 100.0 * self.dropped_after_mark_bytes / tot if tot > 0 else 0.0

    @property
    def delivered_gbps(self) -> float:
        return self.delivered_bytes * 8 / self.sim_s / 1e9


def _make_scheduler(topo: Topology, mode: str, slice_us: int):
    if mode == "timeslice":
        return FastScheduler(topo, slice_us)
    if mode == "hybrid":
        return HybridScheduler(topo, slice_us)
    if mode == "rate":
        return RateLimiter(topo)
    raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def simulate(topo: Topology, flows: Sequence[tuple[int, int]], mode: str, *, duration_s: float = 1.0,
             slice_us: int = 10_000, delay_us: int = 100, lead_us: int | None = None, dt_us: int = 10,
             buffer_us: float = 1000.0, record_slots: bool = False, fast_forward: bool = True,
             tcp: Sequence[bool] | None = None, rtt_us: int = 100, mss_bytes: int = 1448,
             initial_window_segments: int = 10, rto_us: int = 200_000, cores: bool = True,
             mark_s: float | None = None, agent: dict[str, int] | None = None) -> SimResult:
    """Simulate always-backlogged UDP and TCP flows on ``topo`` under one transmission control mode.

    Parameters
    ----------
    topo : Topology
        The network.  A link's buffer is its ``buffer_bytes`` when the file gives one.
    flows : sequence of (int, int)
        ``(sender, destination)`` host ids; each flow always has data (UDP at line rate).
    mode : {"none", "timeslice", "rate", "hybrid"}
        No coordination, or one of the XCo modes (the scheduler objects of :mod:`xtc.xco`).
    duration_s : float
        Simulated time, seconds.
    slice_us : int
        Timeslot length, microseconds (a multiple of ``dt_us``).
    delay_us : int
        Time a directive takes from the controller to its host, microseconds.
    lead_us : int, optional
        How long before a slot boundary the controller computes and sends its directives,
        microseconds (default ``delay_us``).
    dt_us : int
        Time step, microseconds.
    buffer_us : float
        Buffer of a port whose link has no ``buffer_bytes``: this many microseconds of its rate.
    record_slots : bool
        Record which hosts sent in every slot (for comparing with Figure 10).
    fast_forward : bool
        Skip the steps at which the state is at a fixed point (never with TCP flows: their
        windows change every step).
    tcp : sequence of bool, optional
        Which flows are TCP (window-limited, see the module's docstring); default: none.
    rtt_us : int
        A TCP flow's round-trip time without queueing, microseconds (a multiple of ``dt_us``): how
        long a delivered byte takes to be acknowledged.
    mss_bytes : int
        A TCP segment's payload, bytes.
    initial_window_segments : int
        A TCP flow's window at the start, segments.
    rto_us : int
        A TCP flow's retransmission timeout, microseconds (Linux's minimum, 200 ms, is what a
        round trip of a few milliseconds gets).
    cores : bool
        Run the product's agent and controller cores (:mod:`xtc_lab.xco.oneloop`); False: the
        earlier model (the scheduler alone, every flow backlogged at ``t = 0``).  A TCP source's
        agent sees an always-backlogged sender (the gate's queue does not follow the window).
    agent : dict, optional
        With ``cores``: agent settings for :class:`XcoLoop` (``poll_us``, ``idle_poll_us``,
        ``small_flow_bytes``, ``giveup_after_us``).
    mark_s : float, optional
        Also count what is delivered and dropped from this simulated time on
        (:attr:`SimResult.loss_after_mark_pct`: the loss once the agents have started).

    Returns
    -------
    SimResult
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if dt_us <= 0 or slice_us % dt_us:
        raise ValueError(f"slice_us ({slice_us}) must be a positive multiple of dt_us ({dt_us})")
    lead_us = delay_us if lead_us is None else lead_us
    if not 0 <= lead_us < slice_us or delay_us < 0:
        raise ValueError("need 0 <= lead_us < slice_us and delay_us >= 0")
    t_start = time.perf_counter()
    flows = [(int(x), int(d)) for x, d in flows]
    nf = len(flows)
    is_tcp = np.zeros(nf, dtype=bool) if tcp is None else np.asarray(list(tcp), dtype=bool)
    if is_tcp.shape != (nf,):
        raise ValueError(f"tcp must give one flag per flow ({nf}), got {is_tcp.size}")
    any_tcp = bool(is_tcp.any())
    if any_tcp and (rtt_us < dt_us or rtt_us % dt_us or mss_bytes <= 0 or initial_window_segments < 1):
        raise ValueError(f"need rtt_us a positive multiple of dt_us ({dt_us}), mss_bytes > 0 and "
                         f"initial_window_segments >= 1; got {rtt_us}, {mss_bytes}, {initial_window_segments}")
    fast_forward = fast_forward and not any_tcp
    flow_of = {f: i for i, f in enumerate(flows)}
    nsteps = int(round(duration_s * 1e6 / dt_us))
    res = SimResult(mode=mode, sim_s=nsteps * dt_us / 1e6, steps=nsteps)

    # -- cells: flow-major, hop order; links compressed to those that carry a flow -------------
    paths = [topo.path_tuple(x, d) for x, d in flows]
    lens = np.fromiter((len(p) for p in paths), dtype=np.int64, count=nf)
    raw = np.fromiter((ln for p in paths for ln in p), dtype=np.int64, count=int(lens.sum()))
    used, cl = np.unique(raw, return_inverse=True)
    cl = cl.astype(np.intp)
    L = used.size
    first = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.intp)
    last = (first + lens - 1).astype(np.intp)
    cell_flow = np.repeat(np.arange(nf), lens)
    dt_s = dt_us / 1e6
    cap_bps = topo.link_bps[used].astype(np.float64)
    cap_step = cap_bps * dt_s / 8.0
    buf = np.array([topo.link_buffer_bytes[ln] if topo.link_buffer_bytes[ln] is not None
                    else cap_bps[i] * buffer_us / 1e6 / 8.0 for i, ln in enumerate(used.tolist())])
    nic = topo.nic_bps.astype(np.float64)

    # -- sources: bytes per step per flow, changed only at "change" steps ----------------------
    src = np.zeros(nf)
    changes: list[tuple[int, int, str, Any]] = []  # heap of (step, seq, kind, payload)
    seq = 0

    def at(step: int, kind: str, payload: Any) -> None:
        nonlocal seq
        heapq.heappush(changes, (step, seq, kind, payload))
        seq += 1

    host_flow = np.full(topo.n_hosts, -1, dtype=np.int64)   # flow a host is sending on (-1: none)
    host_end = np.zeros(topo.n_hosts, dtype=np.int64)       # step its slice ends

    sched = None
    if mode != "none" and cores:
        xco = XcoLoop(topo, flows, mode, slice_us=slice_us, lead_us=lead_us, delay_us=delay_us, **(agent or {}))
        for c in xco.run(nsteps * dt_us):
            at(-(-c.t_us // dt_us), "rate", (c.flow, c.rate_bps))
        res.directives = xco.ctl.directives_sent
        res.xco = xco.summary()
    elif mode == "none":
        k = np.bincount([x for x, _ in flows], minlength=topo.n_hosts)
        for i, (x, _) in enumerate(flows):
            src[i] = nic[x] / k[x] * dt_s / 8.0
    else:
        sched = _make_scheduler(topo, mode, slice_us)
        groups: dict[int, list[int]] = {}
        for x, d in flows:
            groups.setdefault(x, []).append(d)

    def issue(directives: list, issue_us: int) -> None:
        res.directives += len(directives)
        for dv in directives:
            eff_us = max(dv.t_us, issue_us + delay_us)
            at(-(-eff_us // dt_us), "directive", dv)

    def ctrl_boundary() -> None:
        nxt = sched.next_expiry_us()
        if nxt is not None:
            at(max(0, (nxt - lead_us) // dt_us), "boundary", nxt)

    if sched is not None:
        issue(sched.backlog_many(0, groups), 0)
        ctrl_boundary()

    def apply(kind: str, payload: Any, step: int) -> None:
        if kind == "rate":
            src[payload[0]] = payload[1] * dt_s / 8.0
        elif kind == "boundary":
            issue(sched.advance(payload), step * dt_us)
            ctrl_boundary()
        elif kind == "directive":
            dv = payload
            x = dv.host
            if mode == "rate":
                src[flow_of[(x, dv.dest)]] = (dv.rate_bps or 0) * dt_s / 8.0
                return
            f = host_flow[x]
            if f >= 0:
                src[f] = 0.0
                host_flow[x] = -1
            if dv.dest is not None:
                f = flow_of[(x, dv.dest)]
                host_flow[x] = f
                host_end[x] = dv.end_us // dt_us
                rate = nic[x] if dv.rate_bps is None else float(dv.rate_bps)
                src[f] = rate * dt_s / 8.0
                at(int(host_end[x]), "end", (x, f, int(host_end[x])))
        elif kind == "end":
            x, f, end = payload
            if host_flow[x] == f and host_end[x] == end:  # the slice that ends now is still in force
                src[f] = 0.0
                host_flow[x] = -1

    # -- state ----------------------------------------------------------------------------------
    ncell = cl.size
    q = np.zeros(ncell)
    Q = np.zeros(L)
    out = np.zeros(ncell)
    inp = np.zeros(ncell)
    ratio = np.zeros(L)
    sent = delivered = dropped = 0.0
    max_offer = 0.0
    max_qfrac = 0.0
    sending_log: list[tuple[int, np.ndarray]] = []
    flow_src = np.array([x for x, _ in flows], dtype=np.int64)
    src_sum = 0.0
    prev_q: np.ndarray | None = None
    prev_out: np.ndarray | None = None
    prev_tot = (-1.0, -1.0)
    flow_delivered = np.zeros(nf)
    flow_dropped = np.zeros(nf)
    not_last = np.ones(ncell, dtype=bool)
    not_last[last] = False
    # TCP: the window, the slow-start threshold, what must be acknowledged before the window is
    # halved again, and the delivered bytes whose acknowledgements are on their way (one row per
    # step of the round trip)
    mss = float(mss_bytes)
    cwnd = np.full(nf, initial_window_segments * mss)
    ssthresh = np.full(nf, np.inf)
    recover = np.zeros(nf)
    rtt_steps = max(1, rtt_us // dt_us)
    rto_steps = max(1, rto_us // dt_us)
    ack_ring = np.zeros((rtt_steps, nf))
    unacked = np.zeros(nf)
    loss_at = np.full(nf, -1, dtype=np.int64)    # step of a loss the sender has not learnt of yet
    known_at = np.zeros(nf, dtype=np.int64)      # step it learns of it
    silent_until = np.zeros(nf, dtype=np.int64)  # after a timeout: the step it sends again
    backoff = np.zeros(nf, dtype=np.int64)       # timeouts in a row
    # dropped bytes stay in flight (the sender does not know yet) until their duplicate
    # acknowledgements would be back: a ring long enough for the round trip behind full buffers
    ring_len = rtt_steps + 2 + (int(np.ceil(np.bincount(cell_flow, (buf / cap_step)[cl], minlength=nf).max()))
                                if any_tcp and nf else 0)
    drop_ring = np.zeros((ring_len, nf)) if any_tcp else None
    lost_in_flight = np.zeros(nf)
    k = 0
    computed = 0
    mark = nsteps + 1 if mark_s is None else int(round(mark_s * 1e6 / dt_us))
    at_mark = (0.0, 0.0)
    while k < nsteps:
        if k == mark:
            at_mark = (delivered, dropped)
        changed = False
        while changes and changes[0][0] <= k:
            _, _, kind, payload = heapq.heappop(changes)
            apply(kind, payload, k)
            changed = True
        if changed or k == 0:
            src_sum = float(src.sum())
            offered = np.bincount(cl, src[cell_flow], minlength=L)
            max_offer = max(max_offer, float((offered / cap_step).max()) if L else 0.0)
            if record_slots:
                sending_log.append((k, np.unique(flow_src[src > 0])))
            prev_q = None
        # one step
        inp[1:] = out[:-1]
        if any_tcp:
            in_net = np.bincount(cell_flow, q + out * not_last, minlength=nf)
            row = drop_ring[k % ring_len]
            lost_in_flight -= row
            row[:] = 0.0
            flight = in_net + unacked + lost_in_flight
            allowed = np.maximum(cwnd - flight, 0.0)
            allowed[silent_until > k] = 0.0
            sending = np.where(is_tcp, np.minimum(src, allowed), src)
            inp[first] = sending
            src_sum = float(sending.sum())
        else:
            inp[first] = src
        A = np.bincount(cl, inp, minlength=L)
        space = buf - Q
        over = A > space
        d_step = 0.0
        lost = None
        if over.any():
            f = np.ones(L)
            f[over] = np.maximum(space[over], 0.0) / A[over]
            d_step = float((A - np.minimum(A, np.maximum(space, 0.0))).sum())
            lost = np.bincount(cell_flow, inp * (1.0 - f[cl]), minlength=nf)
            flow_dropped += lost
            inp *= f[cl]
            A = np.minimum(A, np.maximum(space, 0.0))
        q += inp
        Q += A
        S = np.minimum(Q, cap_step)
        np.divide(S, Q, out=ratio, where=Q > 0)
        ratio[Q <= 0] = 0.0
        np.multiply(q, ratio[cl], out=out)
        q -= out
        np.maximum(Q - S, 0.0, out=Q)
        got = out[last]
        flow_delivered += got
        dl_step = float(got.sum())
        if any_tcp:
            slot = k % rtt_steps
            acked = ack_ring[slot].copy()
            ack_ring[slot] = got
            unacked += got - acked
            talking = silent_until <= k
            ss = cwnd < ssthresh
            cwnd += np.where(talking, np.where(ss, acked, mss * acked / cwnd), 0.0)
            recover -= acked
            backoff[talking & (acked > 0) & (recover <= 0)] = 0  # new data acknowledged
            if lost is not None:
                # the duplicate acknowledgements come back behind the queues on the path
                back = k + rtt_steps + np.ceil(np.bincount(cell_flow, (Q / cap_step)[cl], minlength=nf)).astype(np.int64)
                hit = np.flatnonzero(is_tcp & (lost > 0))
                drop_ring[back[hit] % ring_len, hit] += lost[hit]
                lost_in_flight[hit] += lost[hit]
                new = is_tcp & (lost > 0) & (recover <= 0) & (loss_at < 0)
                loss_at[new] = k
                known_at[new] = back[new]
            learnt = (loss_at >= 0) & (known_at <= k)
            if learnt.any():
                timeout = learnt & (cwnd < 4 * mss)
                halve = learnt & ~timeout
                ssthresh[learnt] = np.maximum(cwnd[learnt] / 2.0, 2 * mss)
                cwnd[halve] = ssthresh[halve]
                cwnd[timeout] = mss
                silent_until[timeout] = loss_at[timeout] + rto_steps * (2 ** np.minimum(backoff[timeout], 6))
                backoff[timeout] += 1
                backoff[halve] = 0
                recover[learnt] = flight[learnt]
                loss_at[learnt] = -1
        sent += src_sum
        dropped += d_step
        delivered += dl_step
        computed += 1
        qf = float((Q / buf).max()) if L else 0.0
        if qf > max_qfrac:
            max_qfrac = qf
        k += 1
        if fast_forward:
            tot = (d_step, dl_step)
            if prev_q is not None and np.allclose(q, prev_q, rtol=1e-12, atol=1e-6) \
                    and np.allclose(out, prev_out, rtol=1e-12, atol=1e-6) \
                    and np.isclose(tot[0], prev_tot[0], rtol=1e-12, atol=1e-9) \
                    and np.isclose(tot[1], prev_tot[1], rtol=1e-12, atol=1e-9):
                nxt = changes[0][0] if changes else nsteps
                if k < mark:
                    nxt = min(nxt, mark)
                skip = min(nxt, nsteps) - k
                if skip > 0:
                    sent += src_sum * skip
                    dropped += d_step * skip
                    delivered += dl_step * skip
                    flow_delivered += got * skip
                    if lost is not None:
                        flow_dropped += lost * skip
                    k += skip
                prev_q = None
            else:
                prev_q = q.copy()
                prev_out = out.copy()
                prev_tot = tot
    res.sent_bytes, res.delivered_bytes, res.dropped_bytes = sent, delivered, dropped
    if mark <= nsteps:
        res.delivered_after_mark_bytes, res.dropped_after_mark_bytes = delivered - at_mark[0], dropped - at_mark[1]
    res.flow_delivered_bytes = flow_delivered.tolist()
    res.flow_dropped_bytes = flow_dropped.tolist()
    # queued, plus what the last step served towards a next hop
    res.in_flight_bytes = float(q.sum() + out.sum() - out[last].sum())
    res.max_offered_ratio = max_offer
    res.max_queue_fraction = max_qfrac
    res.steps_computed = computed
    if record_slots:
        steps_per_slot = slice_us // dt_us
        n_slots = -(-nsteps // steps_per_slot)
        slots: list[set[int]] = [set() for _ in range(n_slots)]
        marks = sending_log + [(nsteps, np.array([], dtype=np.int64))]
        for (k0, hosts), (k1, _) in zip(marks, marks[1:]):
            if k1 <= k0 or hosts.size == 0:
                continue
            for s in range(k0 // steps_per_slot, (k1 - 1) // steps_per_slot + 1):
                slots[s].update(hosts.tolist())
        res.slots = [sorted(s) for s in slots]
    res.wall_s = time.perf_counter() - t_start
    return res


# -- experiments ------------------------------------------------------------------------------------

def fig27_flows(rows: int, hosts_per_row: int = 200) -> list[tuple[int, int]]:
    """Figure 27's traffic: the hosts of the first ``rows // 2`` rows each send to the host at the
    same place ``rows // 2`` rows further on (half the hosts send to the other half)."""
    half = rows // 2 * hosts_per_row
    return [(x, x + half) for x in range(half)]
