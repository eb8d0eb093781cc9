"""The garbage collector's settings shared by the services (xtc.service.collector): the engine's young
threshold, and the daemon's freeze after each period with a full collection at the first and once a full
period."""

from __future__ import annotations

import gc
import weakref

import pytest

from xtc.service.collector import YOUNG_THRESHOLD, PeriodicFreeze, raise_young_threshold


@pytest.fixture
def collector_state():
    """The process's collector as it was, given back afterwards (thresholds, frozen objects)."""
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_the_young_threshold_is_raised_and_the_older_ones_kept(collector_state) -> None:
    gc.set_threshold(700, 11, 12)
    assert raise_young_threshold() == (700, 11, 12)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)
    gc.set_threshold(50_000, 11, 12)
    raise_young_threshold()  # never lowered
    assert gc.get_threshold() == (50_000, 11, 12)


@pytest.mark.parametrize("young", [0, -1, 2.5, True, "10000"])
def test_a_bad_young_threshold_is_refused_and_changes_nothing(collector_state, young) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="young must be an integer >= 1"):
        raise_young_threshold(young)
    assert gc.get_threshold() == before


def test_frozen_after_each_round_collected_at_the_first_and_once_a_full_period(collector_state, monkeypatch) -> None:
    full: list[float] = []
    now = [100.0]
    monkeypatch.setattr(gc, "collect", lambda *a: full.append(now[0]) or 0)
    f = PeriodicFreeze(full_period_s=60.0)
    gc.unfreeze()
    kept = [[i] for i in range(1000)]  # long-lived containers, alive at the end of the round
    f.after_round(now[0])
    assert full == [100.0] and f.full_collections == 1
    assert gc.get_freeze_count() >= len(kept)  # what outlives a round is frozen
    for _ in range(5):
        now[0] += 10.0
        f.after_round(now[0])
    assert full == [100.0]  # 50 s later: no full collection yet
    now[0] += 10.0
    f.after_round(now[0])
    assert full == [100.0, 160.0] and f.last_full_s == 160.0 and f.full_collections == 2


def test_a_full_collection_reclaims_cycles_that_died_while_frozen(collector_state) -> None:
    class Node:
        other: object

    f = PeriodicFreeze(full_period_s=1.0)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    f.after_round(0.0)  # frozen with everything else
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is not None, "a frozen cycle is out of the collector's reach"
    f.after_round(0.5)
    assert gone() is not None
    f.after_round(1.0)  # a full period: unfrozen and collected
    assert gone() is None


@pytest.mark.parametrize("period", [0.0, -1.0, float("nan")])
def test_a_bad_full_period_is_refused_by_name(period) -> None:
    with pytest.raises(ValueError, match="full_period_s"):
        PeriodicFreeze(period)
