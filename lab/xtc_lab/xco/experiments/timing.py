"""Packet times against XCo's slices: capture helpers, the in-slice share, gaps at the receiver."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from xtc_lab.lab.netlab import LabError
from xtc_lab.procs import stop_process
from xtc_lab.xco.experiments.flows import helper
from xtc_lab.xco.testbed import Testbed

#: A packet within this long after its slice's end still counts as "late by at most" this, for the
#: second share the report gives (a close is applied a poll or a scheduling delay late).
LATE_TOLERANCE_US = 1_000


@contextmanager
def capture(tb: Testbed, ns: str, dst_addr: str, max_s: float, egress_if: str | None = None) -> Iterator[dict[str, Any]]:
    """Capture IPv4 packets towards ``dst_addr`` arriving in namespace ``ns`` (with ``egress_if``:
    leaving it by that interface, after its queueing discipline) while the body runs.

    Yields a dict that, after the body, holds the capture (:mod:`capture`'s document:
    ``times_us`` and ``sizes`` per source address, ``drops``, ``packets``).
    """
    out: dict[str, Any] = {}
    path = Path(tempfile.mkstemp(prefix="xco-cap-", suffix=".json", dir="/run/xtc")[1])
    p = tb.spawn(ns, [*helper("capture"), dst_addr, str(max_s), str(path), *([egress_if] if egress_if else [])])
    try:
        assert p.stdout is not None
        if p.stdout.readline().strip() != b"ready":
            raise LabError(f"capture in {ns} did not start")
        yield out
    finally:
        stop_process(p, 30)
    try:
        out.update(json.loads(path.read_text()))
    finally:
        path.unlink(missing_ok=True)


def applied_directives(log_path: Path, at: str = "start_us") -> list[tuple[int, int | None]]:
    """``(t_us, dest)`` of every ``directive_applied`` event in an agent's JSON log, sorted; ``t_us`` is the
    event's ``at`` field: ``"start_us"`` (the slice the controller meant) or ``"applied_us"`` (when the
    agent's gate change returned)."""
    out = []
    for line in log_path.read_text(errors="replace").splitlines():
        if '"directive_applied"' not in line:
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        out.append((int(ev[at]), ev.get("dest")))
    out.sort(key=lambda x: x[0])
    return out


def open_intervals(directives: Sequence[tuple[int, int | None]], slice_us: int) -> np.ndarray:
    """The agent's open slices as an ``(n, 2)`` array of ``[start_us, end_us)``: from a directive with a
    destination to the next directive (the agent keeps a destination until told otherwise), the last
    one ``slice_us`` long."""
    iv = []
    for k, (start, dest) in enumerate(directives):
        if dest is None or dest == -1:
            continue
        end = directives[k + 1][0] if k + 1 < len(directives) else start + slice_us
        if end > start:
            iv.append((start, end))
    return np.asarray(iv, dtype=np.int64).reshape(-1, 2)


def _inside(t: np.ndarray, intervals: np.ndarray, late_us: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For each time of ``t``: whether it is inside one of ``intervals`` (each end extended by
    ``late_us``), and the index of the last interval starting at or before it (-1: none)."""
    starts, ends = intervals[:, 0], intervals[:, 1] + late_us
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.clip(k, 0, None)]), k


def inside_share(times_us: Sequence[int], intervals: np.ndarray, late_us: int = 0) -> float | None:
    """Share of ``times_us`` inside one of ``intervals`` (each end extended by ``late_us``); None if no times."""
    t = np.asarray(times_us, dtype=np.int64)
    if t.size == 0:
        return None
    if intervals.size == 0:
        return 0.0
    return float(_inside(t, intervals, late_us)[0].mean())


def miss_offsets(times_us: Sequence[int], intervals: np.ndarray) -> dict[str, Any]:
    """Where the packets outside ``intervals`` fall: how long after the end of the last interval
    before each (``after_end_us``) and how long before the start of the next (``before_start_us``),
    as percentiles (p10, p50, p90) over the missed packets, and how many missed."""
    t = np.asarray(times_us, dtype=np.int64)
    if t.size == 0 or intervals.size == 0:
        return {"missed": 0}
    starts, ends = intervals[:, 0], intervals[:, 1]
    inside, k = _inside(t, intervals)
    miss = t[~inside]
    km = k[~inside]
    out: dict[str, Any] = {"missed": int(miss.size)}
    if miss.size:
        prev = km >= 0
        if prev.any():
            out["after_end_us"] = np.percentile(miss[prev] - ends[km[prev]], [10, 50, 90]).round().tolist()
        nxt = km + 1 < len(starts)
        if nxt.any():
            out["before_start_us"] = np.percentile(starts[km[nxt] + 1] - miss[nxt], [10, 50, 90]).round().tolist()
    return out


def slice_shares(cap: Mapping[str, Any], agent_logs: Mapping[str, Path], addr_of: Mapping[str, str],
                 slice_us: int, t_from_us: int, t_to_us: int, min_bytes: int = 0) -> dict[str, Any]:
    """Per sender, the share of its captured packets (sizes >= ``min_bytes``, times in
    ``[t_from_us, t_to_us)``) inside the open slices its agent applied, exactly and up to
    :data:`LATE_TOLERANCE_US` late; and the share over all senders (packet-weighted).  ``inside_gate``:
    the share inside the times the agent's gate was actually open (each directive's ``applied_us`` to
    the next's), which separates late gate changes from packets the gate let out while closed."""
    per: dict[str, Any] = {}
    n_all = in_all = late_all = gate_all = 0
    for host, log in agent_logs.items():
        addr = addr_of[host]
        t = np.asarray(cap.get("times_us", {}).get(addr, []), dtype=np.int64)
        sz = np.asarray(cap.get("sizes", {}).get(addr, []), dtype=np.int64)
        keep = (t >= t_from_us) & (t < t_to_us) & (sz >= min_bytes)
        t = t[keep]
        iv = open_intervals(applied_directives(log), slice_us)
        exact = inside_share(t, iv)
        late = inside_share(t, iv, LATE_TOLERANCE_US)
        gate = inside_share(t, open_intervals(applied_directives(log, "applied_us"), slice_us))
        per[host] = {"packets": int(t.size), "open_slices": len(iv), "inside": exact,
                     "inside_or_late_1ms": late, "inside_gate": gate, "misses": miss_offsets(t, iv)}
        if t.size:
            n_all += int(t.size)
            in_all += round((exact or 0) * t.size)
            late_all += round((late or 0) * t.size)
            gate_all += round((gate or 0) * t.size)
    return {"per_sender": per, "packets": n_all, "inside": in_all / n_all if n_all else None,
            "inside_or_late_1ms": late_all / n_all if n_all else None,
            "inside_gate": gate_all / n_all if n_all else None, "min_bytes": min_bytes}


def gaps(times_us: Sequence[int], around_us: Sequence[int], before_us: int = 100_000,
         after_us: int = 500_000, change_us: int = 50_000) -> list[dict[str, Any]]:
    """For each transition time T in ``around_us``: ``gap_us``, the longest stretch without a packet (of
    ``times_us``, all sources) in ``[T - before_us, T + after_us]`` and where it starts relative to T
    (``gap_starts_at_us``); ``gap_at_change_us``, the longest such stretch that starts before
    ``T + change_us`` (the change itself, not a later hole in the schedule).  Microseconds."""
    t = np.sort(np.asarray(times_us, dtype=np.int64))
    out = []
    for T in around_us:
        lo, hi = T - before_us, T + after_us
        w = t[(t >= lo) & (t <= hi)]
        pts = np.concatenate([[lo], w, [hi]])
        d = np.diff(pts)
        k = int(np.argmax(d))
        early = d[pts[:-1] < T + change_us]
        out.append({"t_us": int(T), "gap_us": int(d[k]), "gap_starts_at_us": int(pts[k] - T),
                    "gap_at_change_us": int(early.max()) if early.size else 0, "packets": int(w.size)})
    return out
