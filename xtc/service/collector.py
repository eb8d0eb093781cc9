"""Python's cyclic garbage collector kept off a long-lived service's objects (the daemon, the policer's
engine).

A service's state (instances, controllers, counter tables; the engine's routers, streams and rows)
lives for hours and is acyclic work's background: the collector's full passes walk all of it again
and again (at 10,000 VRs 100 ms or more per daemon period; 25-60 ms per pass in a policer engine of
1,000 routers).  :meth:`PeriodicFreeze.after_period` freezes what is alive at the end of a period
(:func:`gc.freeze`: later collections skip it), and once every ``full_period_s`` unfreezes and
collects everything, so that cycles among objects that died since are reclaimed then.  A period's own
work is freed by reference counting, and its cycles, if any, by the young generations' collections
before the next freeze.
"""

from __future__ import annotations

import gc
import math

__all__ = ["PeriodicFreeze"]


class PeriodicFreeze:
    """Freeze the heap after each period; a full collection every ``full_period_s`` seconds."""

    def __init__(self, full_period_s: float = 3600.0) -> None:
        if not full_period_s > 0:
            raise ValueError(f"full_period_s must be positive, got {full_period_s!r}")
        self.full_period_s = full_period_s
        self._last_full_s = -math.inf

    def after_period(self, now_s: float) -> None:
        """At the end of a period ending at ``now_s`` (monotonic seconds)."""
        if now_s - self._last_full_s >= self.full_period_s:
            self._last_full_s = now_s
            gc.unfreeze()
            gc.collect()
        gc.freeze()
