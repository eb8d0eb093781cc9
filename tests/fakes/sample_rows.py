"""A router's sample rows over seven periods, for the tests that feed the same rows two ways (two
sample formats, a sample's columns and its rows as dictionaries) and check both are recorded alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def changing_rows(rows: list[list[Any]], periods: int = 7) -> Iterator[tuple[int, list[list[Any]]]]:
    """``(period, rows)``: ``rows`` (``xtc-samples/2`` rows, the daemon's ``SAMPLE_FIELDS`` in order) with
    the four numbers after the setpoint (forwarded, offered, cap, original cap) 10% up every period but
    the sixth (the same values again), the first VR gone from the third period on, and the fourth VR's
    state changed (active <-> paused) at the fifth."""
    for period in range(periods):
        if period == 2:
            rows = rows[1:]  # a VR gone
        if period == 4:
            rows[3][1] = {"active": "paused"}.get(rows[3][1], "active")  # a VR's state changed
        if period != 5:  # (period 5: the same values again)
            rows = [[*r[:4], *(None if x is None else x * 1.1 for x in r[4:8]), *r[8:]] for r in rows]
        yield period, rows
