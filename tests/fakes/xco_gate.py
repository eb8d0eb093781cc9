"""An in-memory XCo gate (the :class:`xtc.xco.gate.Gate` contract) with a toy queue per flow.

Each flow has a queue fed by :meth:`MemoryGate.offer` (bytes; ``demand=None`` for an endless
sender); when :meth:`stats` is read, the time since the last read drains the open flows at the
link rate (shared equally) or at their rate limit, so a closed flow's backlog grows and an open
flow's sent bytes grow.  Every ``set_states`` is recorded with its time in :attr:`history`, and
appended as a JSON line to ``record`` (a path) if given, so that a subprocess's gate can be read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from xtc.xco.gate import CLOSED, OPEN, Flow, FlowStats, GateError


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
        self.state: dict[Flow, int] = {}
        self.sent: dict[Flow, int] = {}
        self.queue: dict[Flow, float] = {}
        self.endless: set[Flow] = set()
        self.history: list[tuple[int, Flow, int]] = []
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

    def add_flow(self, flow: Flow, state: int = OPEN) -> None:
        if not self.installed:
            raise GateError("add_flow before install")
        self.state[flow] = state
        self.sent[flow] = 0
        self.queue[flow] = 0.0

    def remove_flow(self, flow: Flow) -> None:
        for d in (self.state, self.sent, self.queue):
            d.pop(flow, None)

    def set_states(self, states: Mapping[Flow, int]) -> None:
        with self._lock:
            self._drain()
            t = self.clock_us()
            self.set_calls += 1
            for f, s in states.items():
                if f not in self.state:
                    raise GateError(f"unknown flow {f}")
                if self.state[f] != s:
                    self.state[f] = s
                    self.history.append((t, f, s))
                    self._log({"event": "state", "t_us": t, "src": str(f.src), "dst": str(f.dst),
                               "dest_host": f.dest_host, "state": s})

    def stats(self) -> dict[Flow, FlowStats]:
        with self._lock:
            self._drain()
            return {f: FlowStats(self.sent[f], self.sent[f] // 1000, int(self.queue[f]), int(self.queue[f] > 0))
                    for f in self.state}

    def counters(self, flows):
        with self._lock:
            self._drain()
            self.counter_reads += 1
            return (np.array([self.sent[f] for f in flows], dtype=np.int64),
                    np.array([int(self.queue[f]) for f in flows], dtype=np.int64),
                    np.array([int(self.queue[f] > 0) for f in flows], dtype=np.int64))

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
        busy = [f for f, s in self.state.items() if s != CLOSED and (self.queue[f] > 0 or f in self.endless)]
        if not busy:
            return
        share = self.link_bps / len(busy)
        for f in busy:
            s = self.state[f]
            rate = share if s == OPEN else min(share, s)
            n = rate * dt_s / 8
            if f in self.endless:
                self.sent[f] += int(n)
            else:
                n = min(n, self.queue[f])
                self.queue[f] -= n
                self.sent[f] += int(n)

    def open_flows(self) -> set[Flow]:
        return {f for f, s in self.state.items() if s != CLOSED}
