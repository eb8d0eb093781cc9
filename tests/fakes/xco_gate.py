"""An in-memory XCo gate (the :class:`xtc.xco.gate.Gate` contract) with a toy queue per destination.

Each destination host's class has a queue fed by :meth:`MemoryGate.offer` (bytes; ``None`` for an
endless sender); when the counters are read, the time since the last read drains the open
classes at the link rate (shared equally) or at their rate limit, so a closed class's backlog
grows and an open one's sent bytes grow.  Every state change is recorded with its time in
:attr:`history`, and appended as a JSON line to ``record`` (a path) if given, so that a
subprocess's gate can be read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from xtc.xco.gate import CLOSED, OPEN, DestStats, Flow, GateError


def _wall_us() -> int:
    return time.time_ns() // 1000


class MemoryGate:
    def __init__(self, link_bps: int = 1_000_000_000, clock_us: Callable[[], int] = _wall_us,
                 record: str | Path | None = None):
        self.link_bps = link_bps
        self.clock_us = clock_us
        self.record = Path(record) if record is not None else None
        self.installed = False
        self.restored = False
        self.closed = False
        self.state: dict[int, int] = {}
        self.sent: dict[int, int] = {}
        self.queue: dict[int, float] = {}
        self.flows: dict[Flow, int] = {}  # flow -> its destination (a class added before)
        self.endless: set[int] = set()
        self.history: list[tuple[int, int, int]] = []
        self.set_calls = 0
        self.counter_reads = 0
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
        self.queue[dest] = 0.0

    def add_flow(self, flow: Flow) -> None:
        if flow.dest_host not in self.state:
            raise GateError(f"flow {flow.src}->{flow.dst}: dest host {flow.dest_host} not added")
        if flow in self.flows:
            raise GateError(f"flow {flow.src}->{flow.dst} already added")
        self.flows[flow] = flow.dest_host

    def remove_flow(self, flow: Flow) -> None:
        if self.flows.pop(flow, None) is None:
            raise GateError(f"flow {flow.src}->{flow.dst} unknown")

    def remove_dest(self, dest: int) -> None:
        if dest not in self.state:
            raise GateError(f"dest host {dest} unknown")
        for f in [f for f, d in self.flows.items() if d == dest]:
            del self.flows[f]
        for d in (self.state, self.sent, self.queue):
            d.pop(dest, None)
        self.endless.discard(dest)

    def set_states(self, states: Mapping[int, int]) -> None:
        with self._lock:
            self._drain()
            t = self.clock_us()
            self.set_calls += 1
            for d, s in states.items():
                if d not in self.state:
                    raise GateError(f"dest host {d} unknown")
                if self.state[d] != s:
                    self.state[d] = s
                    self.history.append((t, d, s))
                    self._log({"event": "state", "t_us": t, "dest_host": d, "state": s})

    def stats(self) -> dict[int, DestStats]:
        with self._lock:
            self._drain()
            return {d: DestStats(self.sent[d], self.sent[d] // 1000, int(self.queue[d]), int(self.queue[d] > 0))
                    for d in self.state}

    def counters(self, dests):
        with self._lock:
            self._drain()
            self.counter_reads += 1
            return (np.array([self.sent[d] for d in dests], dtype=np.int64),
                    np.array([int(self.queue[d]) for d in dests], dtype=np.int64),
                    np.array([int(self.queue[d] > 0) for d in dests], dtype=np.int64))

    def restore(self) -> None:
        self.restored = True
        self._log({"event": "restore", "t_us": self.clock_us()})

    def close(self) -> None:
        self.closed = True

    # -- the toy traffic ---------------------------------------------------------------------------
    def offer(self, dest: int, nbytes: int | None = None) -> None:
        """Queue ``nbytes`` towards destination host ``dest``; ``None``: an endless sender (always
        something queued)."""
        with self._lock:
            self._drain()
            if nbytes is None:
                self.endless.add(dest)
                self.queue[dest] = max(self.queue[dest], 1500.0)
            else:
                self.queue[dest] += nbytes

    def _drain(self) -> None:
        now = self.clock_us()
        if self._last_us is None:
            self._last_us = now
        dt_s = max(0, now - self._last_us) / 1e6
        self._last_us = now
        if dt_s == 0:
            return
        busy = [d for d, s in self.state.items() if s != CLOSED and (self.queue[d] > 0 or d in self.endless)]
        if not busy:
            return
        share = self.link_bps / len(busy)
        for d in busy:
            s = self.state[d]
            rate = share if s == OPEN else min(share, s)
            n = rate * dt_s / 8
            if d in self.endless:
                self.sent[d] += int(n)
            else:
                n = min(n, self.queue[d])
                self.queue[d] -= n
                self.sent[d] += int(n)

    def open_dests(self) -> set[int]:
        return {d for d, s in self.state.items() if s != CLOSED}
