"""An in-memory XCo gate (the :class:`xtc.host.gate.Gate` contract) with a toy queue per flow: the
fake that ships with the product, for the agent's tests and for the simulator's one loop
(:mod:`xtc_lab.xco.oneloop`, which gives it the simulated clock).

Each flow has a queue fed by :meth:`MemoryGate.offer` (bytes; ``None`` for an endless sender); a
small flow (not moved to its destination's class) is never held, a moved one is held with its
destination.  When the counters are read, the time since the last read drains the flows that may
send at the link rate (shared equally) or at their destination's rate limit (shared among its
busy flows), so a closed destination's backlog grows and an open one's sent bytes grow.  Every
state change is recorded with its time in :attr:`history`, and appended as a JSON line to
``record`` (a path) if given, so that a subprocess's gate can be read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from xtc.host.gate import CLOSED, OPEN, DestStats, Flow, GateError

from .protocol import wall_us

__all__ = ["MemoryGate"]


class MemoryGate:
    def __init__(self, link_bps: int = 1_000_000_000, clock_us: Callable[[], int] = wall_us,
                 record: str | Path | None = None):
        self.link_bps = link_bps
        self.clock_us = clock_us
        self.record = Path(record) if record is not None else None
        self.installed = False
        self.restored = False
        self.closed = False
        self.state: dict[int, int] = {}        # destination -> state
        self.sent: dict[int | Flow, int] = {}  # destination's class, or a small flow's own class -> bytes
        self.moved: set[Flow] = set()          # flows in their destination's class
        self.queue: dict[Flow, float] = {}
        self.endless: set[Flow] = set()
        self.history: list[tuple[int, int, int]] = []
        self.set_calls = 0
        self.open_for: list[tuple[int, dict[int, int]]] = []  # (t_us, open_for_us) of each budgeted set_states
        self.counter_reads = 0
        self.quiet_probes = 0
        self.total_sent = 0  # every class's bytes (what the root would count)
        self._quiet_base: int | None = None
        self._last_us: int | None = None
        self._lock = threading.Lock()

    def _log(self, ev: dict) -> None:
        if self.record is not None:
            with self.record.open("a") as f:
                f.write(json.dumps(ev) + "\n")

    # -- the contract ------------------------------------------------------------------------------
    def install(self) -> None:
        self.installed = True
        self._log({"event": "install", "t_us": self.clock_us()})

    def add_dest(self, dest: int, state: int = OPEN) -> None:
        if not self.installed:
            raise GateError("add_dest before install")
        if dest in self.state:
            raise GateError(f"dest host {dest} already added")
        self.state[dest] = state
        self.sent[dest] = 0

    def add_flow(self, flow: Flow) -> None:
        if flow.dest_host not in self.state:
            raise GateError(f"flow {flow.src}->{flow.dst}: dest host {flow.dest_host} not added")
        if flow in self.queue:
            raise GateError(f"flow {flow.src}->{flow.dst} already added")
        self.queue[flow] = 0.0
        self.sent[flow] = 0

    def move_to_dest(self, flow: Flow) -> None:
        with self._lock:
            self._drain()
            if flow not in self.queue or flow in self.moved:
                raise GateError(f"flow {flow.src}->{flow.dst} unknown or already moved")
            self.moved.add(flow)
            del self.sent[flow]
            self._log({"event": "moved", "t_us": self.clock_us(), "src": str(flow.src), "dst": str(flow.dst)})

    def remove_flow(self, flow: Flow) -> None:
        if self.queue.pop(flow, None) is None:
            raise GateError(f"flow {flow.src}->{flow.dst} unknown")
        self.sent.pop(flow, None)
        self.moved.discard(flow)
        self.endless.discard(flow)

    def remove_dest(self, dest: int) -> None:
        if dest not in self.state:
            raise GateError(f"dest host {dest} unknown")
        for f in [f for f in self.queue if f.dest_host == dest]:
            self.remove_flow(f)
        del self.state[dest], self.sent[dest]

    def set_states(self, states: Mapping[int, int], open_for_us: Mapping[int, int] | None = None) -> None:
        with self._lock:
            self._drain()
            t = self.clock_us()
            self.set_calls += 1
            if open_for_us:  # recorded only: this gate does not model the kernel's byte budget
                self.open_for.append((t, dict(open_for_us)))
            for d, s in states.items():
                if d not in self.state:
                    raise GateError(f"dest host {d} unknown")
                if self.state[d] != s:
                    self.state[d] = s
                    self.history.append((t, d, s))
                    self._log({"event": "state", "t_us": t, "dest_host": d, "state": s})

    def _backlog(self, dest: int) -> int:
        return int(sum(q for f, q in self.queue.items() if f in self.moved and f.dest_host == dest))

    def stats(self) -> dict[int, DestStats]:
        with self._lock:
            self._drain()
            return {d: DestStats(self.sent[d], self.sent[d] // 1000, self._backlog(d), int(self._backlog(d) > 0))
                    for d in self.state}

    def counters(self, dests, small=()):
        with self._lock:
            self._drain()
            self.counter_reads += 1
            backlog = [self._backlog(d) for d in dests]
            return (np.array([self.sent[d] for d in dests], dtype=np.int64),
                    np.array(backlog, dtype=np.int64),
                    np.array([int(b > 0) for b in backlog], dtype=np.int64),
                    np.array([self.sent[f] for f in small], dtype=np.int64))

    def restore(self) -> None:
        self.restored = True
        self._log({"event": "restore", "t_us": self.clock_us()})

    def close(self) -> None:
        self.closed = True

    # -- the toy traffic ---------------------------------------------------------------------------
    def offer(self, flow: Flow, nbytes: int | None = None) -> None:
        """Queue ``nbytes`` on ``flow``; ``None``: an endless sender (always something queued)."""
        with self._lock:
            self._drain()
            if nbytes is None:
                self.endless.add(flow)
                self.queue[flow] = max(self.queue[flow], 1500.0)
            else:
                self.queue[flow] += nbytes

    def _drain(self) -> None:
        now = self.clock_us()
        if self._last_us is None:
            self._last_us = now
        dt_s = max(0, now - self._last_us) / 1e6
        self._last_us = now
        if dt_s == 0:
            return
        busy = [f for f, q in self.queue.items() if (q > 0 or f in self.endless)
                and (f not in self.moved or self.state[f.dest_host] != CLOSED)]
        if not busy:
            return
        share = self.link_bps / len(busy)
        per_dest: dict[int, int] = {}
        for f in busy:
            if f in self.moved:
                per_dest[f.dest_host] = per_dest.get(f.dest_host, 0) + 1
        for f in busy:
            rate = share
            if f in self.moved and self.state[f.dest_host] != OPEN:
                rate = min(share, self.state[f.dest_host] / per_dest[f.dest_host])
            n = rate * dt_s / 8
            if f not in self.endless:
                n = min(n, self.queue[f])
                self.queue[f] -= n
            self.sent[f.dest_host if f in self.moved else f] += int(n)
            self.total_sent += int(n)

    def quiet(self, headroom_bytes=None):
        """As :meth:`xtc.host.tcgate.TcGate.quiet`: nothing queued anywhere and, with
        ``headroom_bytes``, at most that many bytes sent since the last probe that said False."""
        with self._lock:
            self._drain()
            self.quiet_probes += 1
            queued = any(q > 0 for q in self.queue.values()) or bool(self.endless)
            base = self._quiet_base
            if not queued and base is not None and (headroom_bytes is None or self.total_sent - base <= headroom_bytes):
                return True
            self._quiet_base = self.total_sent
            return False

    def open_dests(self) -> set[int]:
        return {d for d, s in self.state.items() if s != CLOSED}
