"""The live-value channel's file (xtc.policer.liveshare): what an engine publishes a reader gets back,
fresh only, each shard's own, the index kept while the layout holds and read again when it changes or
another engine writes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from xtc.policer.live import LiveTable
from xtc.policer.liveshare import LiveReader, LiveWriter, live_file_name


def _table(routers: dict[str, dict[str, float | None]], seen: float) -> LiveTable:
    t = LiveTable(2)
    for r, vrs in routers.items():
        t.put(r, seen, list(vrs), list(vrs.values()), [2.0] * len(vrs), [None] * len(vrs), ["cap_max"] * len(vrs))
    return t


def test_a_reader_gets_what_the_engines_publish_while_fresh(tmp_path: Path) -> None:
    now = time.time()
    t0 = _table({"r1": {"a": 1.0, "b": None}, "r2": {"c": 3.0}}, now - 0.2)
    t1 = _table({"r9": {"z": 9.0}}, now - 0.1)
    w0 = LiveWriter(tmp_path / live_file_name((0, 2)), fresh_for_s=3.0)
    w1 = LiveWriter(tmp_path / live_file_name((1, 2)), fresh_for_s=3.0)
    reader = LiveReader(tmp_path)
    assert reader.view() is None  # nothing published
    t0.set_demand("r1", 1234.5)  # a router's demand at its last plan (r2: not planned yet)
    w0.publish(t0, now)
    w1.publish(t1, now)
    v = reader.view()
    assert v is not None
    assert v.vr("r1", "a") == {"forwarded_pps": 1.0, "offered_pps": 2.0, "cap_percent": None, "saturated": "cap_max",
                               "last_seen_unix_s": now - 0.2}
    assert v.vr("r1", "b")["forwarded_pps"] is None
    assert v.vr("r9", "z")["forwarded_pps"] == 9.0 and v.seen_unix_s("r9") == now - 0.1  # the other shard's
    assert v.vr("r1", "nope") is None and v.vr("r3", "a") is None and v.seen_unix_s("r3") is None
    assert v.demand_pps("r1") == 1234.5 and v.demand_pps("r2") is None and v.demand_pps("r3") is None

    # New values, same layout: read again (the file was replaced), the index kept.
    index = reader._cache[live_file_name((0, 2))].routers
    t0.put("r1", now, ["a", "b"], [5.0, 6.0], [2.0, 2.0], [0.5, 0.5], [None, None])
    w0.publish(t0, now)
    v = reader.view()
    assert v.vr("r1", "a")["forwarded_pps"] == 5.0 and v.vr("r1", "b")["cap_percent"] == 0.5
    assert reader._cache[live_file_name((0, 2))].routers is index
    # Another layout (a VR appears): the index read again.
    t0.put("r2", now, ["c", "d"], [3.0, 4.0], [2.0, 2.0], [None, None], [None, None])
    w0.publish(t0, now)
    v = reader.view()
    assert v.vr("r2", "d")["forwarded_pps"] == 4.0 and reader._cache[live_file_name((0, 2))].routers is not index
    # Another engine (restarted: a new writer) with the same layout number: its own index, not the old one.
    t_new = _table({"r5": {"a": 7.0}}, now)
    t_new.layout = t0.layout
    LiveWriter(tmp_path / live_file_name((0, 2)), fresh_for_s=3.0).publish(t_new, now + 0.001)
    v = reader.view()
    assert v.vr("r5", "a")["forwarded_pps"] == 7.0 and v.vr("r1", "a") is None


def test_stale_or_removed_publications_are_not_live(tmp_path: Path) -> None:
    now = time.time()
    w = LiveWriter(tmp_path / live_file_name((0, 1)), fresh_for_s=3.0)
    w.publish(_table({"r1": {"a": 1.0}}, now - 5), now - 4)  # an engine that stopped publishing 4 s ago
    assert LiveReader(tmp_path).view() is None
    w.publish(_table({"r1": {"a": 1.0}}, now), now)
    assert LiveReader(tmp_path).view() is not None
    w.remove()
    assert LiveReader(tmp_path).view() is None and os.listdir(tmp_path) == []
    (tmp_path / live_file_name((0, 1))).write_bytes(b"garbage")  # unreadable: ignored, not fatal
    assert LiveReader(tmp_path).view() is None
    assert LiveReader(tmp_path / "missing").view() is None
