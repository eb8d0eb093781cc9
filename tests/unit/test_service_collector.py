"""The collector kept off a service's long-lived objects (xtc.service.collector), and the policer's
engine using it as the daemon does."""

from __future__ import annotations

import gc
import time

import pytest

from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.store import Store
from xtc.service.collector import PeriodicFreeze


@pytest.fixture
def collections(monkeypatch):
    """The full collections asked for (gc.collect counted, not run), and the heap unfrozen after."""
    full: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a: full.append(1) or 0)
    gc.unfreeze()
    yield full
    gc.unfreeze()


def test_freezes_after_each_period_and_collects_once_per_full_period(collections):
    f = PeriodicFreeze(100.0)
    f.after_period(5.0)
    assert gc.get_freeze_count() > 0 and len(collections) == 1  # the first period: one full collection
    kept = [[i] for i in range(1000)]
    before = gc.get_freeze_count()
    for t in (6.0, 50.0, 104.9):
        f.after_period(t)
    assert len(collections) == 1 and gc.get_freeze_count() >= before + len(kept)
    f.after_period(105.0)  # a full period after the last full collection
    assert len(collections) == 2
    f.after_period(106.0)
    assert len(collections) == 2


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_full_period_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match="full_period_s must be positive"):
        PeriodicFreeze(bad)


def test_the_engine_freezes_after_its_cycles_only_when_told(collections):
    store = Store("sqlite:///:memory:")
    eng = Engine(store, LinkPool(0.2), period_s=0.05)
    try:
        assert eng.manage_gc is False  # a library user's collector is left alone
        eng.start()
        deadline = time.monotonic() + 10
        while eng.cycles < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert eng.cycles >= 2 and gc.get_freeze_count() == 0 and collections == []
        eng.manage_gc = True  # as the engine's process sets it
        n = eng.cycles
        while eng.cycles < n + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.get_freeze_count() > 0 and len(collections) == 1
    finally:
        eng.stop()
        store.close()
