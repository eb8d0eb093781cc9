"""The profile tool's window (xtc_lab.policer_profile): CPU per measurement over whole cycles."""

from __future__ import annotations

import random

import pytest
from xtc_lab.policer_profile import Mark, take_window, window_figures

PERIOD_S = 1.0
PER_CYCLE = 900  # measurements a cycle counts
CPU_PER_S = 0.1  # the engine's CPU a second, spent evenly: 0.1 s / 900 measurements = 0.1111 ms each


class _Engine:
    """An engine on a simulated clock: cycle k starts at ``phase + k * period``; it counts its measurements
    a moment later (the cycle's dispatch: 0-0.5 s under load, seeded), all at once; CPU runs evenly."""

    def __init__(self, phase: float, seed: int) -> None:
        rng = random.Random(seed)
        self.starts = [phase + k * PERIOD_S for k in range(100)]
        self.counted_at = [s + rng.uniform(0.0, 0.5) for s in self.starts]
        self.t = 0.0

    def mark(self) -> Mark:
        cycles = sum(1 for c in self.counted_at if c <= self.t)
        return Mark(cycles, PER_CYCLE * cycles, CPU_PER_S * self.t, {"worker": CPU_PER_S * self.t}, self.t)

    def sleep(self, s: float) -> None:
        self.t += s

    def next_cycle_mark(self) -> Mark:
        """The mark at the next cycle's start, before it counts anything."""
        self.t = next(s for s in self.starts if s > self.t)
        m = self.mark()
        return m


@pytest.mark.parametrize("start_s", [0.0, 0.1, 0.2, 0.25, 0.5, 0.9, 3.05, 7.7])
@pytest.mark.parametrize("seed", range(4))
def test_the_window_covers_whole_cycles_and_divides_their_cpu_by_their_measurements(start_s, seed) -> None:
    eng = _Engine(phase=0.2, seed=seed)
    eng.t = start_s
    m0, m1 = take_window(eng.mark, eng.next_cycle_mark, eng.sleep, 10.0, PERIOD_S)
    fig = window_figures(m0, m1)
    assert fig["cycles"] == 10
    assert fig["measurements"] == 10 * PER_CYCLE
    assert fig["cpu_ms_per_measurement"] == pytest.approx(1000 * CPU_PER_S * PERIOD_S / PER_CYCLE, abs=1e-4)
    assert fig["thread_cpu_ms_per_measurement"]["worker"] == pytest.approx(fig["cpu_ms_per_measurement"], abs=1e-4)
    assert fig["measured_per_s"] == PER_CYCLE


def test_window_figures_of_a_window_without_measurements() -> None:
    m = Mark(3, 100, 1.0, {}, 5.0)
    fig = window_figures(m, m)
    assert fig["measurements"] == 0 and fig["cpu_ms_per_measurement"] is None and fig["thread_cpu_ms_per_measurement"] == {}
