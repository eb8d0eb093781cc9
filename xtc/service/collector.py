"""Python's cyclic garbage collector, kept off what a service's loop keeps alive: the settings every service
process takes, behind this one small adapter (docs/design/policer-gc.md).

A service's loop holds long-lived state (the daemon's instances and controllers; the policer engine's
routers, its live table, its connections) and makes short-lived objects each round that reference
counting frees (hardly any cycles among them).  Left as it is, the collector walks them for nothing:

- :func:`raise_young_threshold` (the policer's engine process, at start): the young generation is
  collected every :data:`YOUNG_THRESHOLD` allocations instead of Python's 700.  The engine has a batch of
  a hundred routers' samples, outcomes and plans alive at once; at 700 each batch was walked by a young
  and then an older collection while still in use, promoted, and the oldest generation's passes then
  walked the whole fleet's state.  At 1,000 routers x 16 VRs the collector's CPU in a 30 s run went from
  about 1.0 s to 0.25 s.
- :class:`PeriodicFreeze` (the daemon, after each period): what is alive at the end of a period is frozen
  (:func:`gc.freeze`: later collections skip it), and once every :data:`FULL_PERIOD_S` everything is
  unfrozen and collected, so that cycles among objects that died since are reclaimed then.  At 10,000
  VRs the full passes over every instance, controller and counter table cost 100 ms or more a period.
  (The policer's engine does not freeze: an earlier measurement found no gain beyond the young
  threshold's, and a frozen heap keeps cyclic garbage until the next full collection.)

A library user or a test leaves the process's collector alone: only a service's ``main`` calls these.
"""

from __future__ import annotations

import gc
import math

__all__ = ["FULL_PERIOD_S", "YOUNG_THRESHOLD", "PeriodicFreeze", "raise_young_threshold"]

#: With :class:`PeriodicFreeze`: a full collection (everything unfrozen) at most this often, seconds.
FULL_PERIOD_S = 3600.0
#: Allocations (less deallocations) of container objects between two collections of the youngest
#: generation (:func:`gc.set_threshold`'s first value; Python's default is 700).
YOUNG_THRESHOLD = 10_000


def raise_young_threshold(young: int = YOUNG_THRESHOLD) -> tuple[int, int, int]:
    """Collect the youngest generation every ``young`` allocations, the older generations' thresholds left as
    they are (never lowered: a threshold already above ``young`` stays).  Returns the thresholds before."""
    if isinstance(young, bool) or not isinstance(young, int) or young < 1:
        raise ValueError(f"young must be an integer >= 1, got {young!r}")
    before = gc.get_threshold()
    gc.set_threshold(max(young, before[0]), *before[1:])
    return before


class PeriodicFreeze:
    """What outlives a round of a service's loop frozen; everything collected once a full period."""

    def __init__(self, full_period_s: float = FULL_PERIOD_S):
        if not full_period_s > 0:
            raise ValueError(f"full_period_s must be > 0, got {full_period_s!r}")
        self.full_period_s = full_period_s
        self.last_full_s = -math.inf
        self.full_collections = 0

    def after_round(self, now_s: float) -> None:
        """At the end of a round (``now_s``: the loop's monotonic clock, seconds): what is alive is frozen; at
        the first round and then once every :attr:`full_period_s`, first everything is unfrozen and collected."""
        if now_s - self.last_full_s >= self.full_period_s:
            self.last_full_s = now_s
            self.full_collections += 1
            gc.unfreeze()
            gc.collect()
        gc.freeze()
