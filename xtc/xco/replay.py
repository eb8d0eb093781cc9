"""Replay: feed an event file through the scheduler and list every directive it issues.

Events, one JSON object per line (blank lines and lines starting with ``#`` are skipped)::

    {"t_us": 0, "host": "h1", "event": "backlog", "dests": ["h2", "h3"]}
    {"t_us": 900, "host": "h1", "event": "giveup", "dest": "h2"}
    {"t_us": 5000, "host": "h3", "event": "leave"}

``t_us`` never goes backwards.  Slice expiries come from the scheduler's own slot clock: every slot
boundary up to the time of the next event (and, at the end, up to ``until_us``) is handled before
the event.  Directives, one per line::

    {"t_us": 0, "host": "h1", "dest": "h2"}       # h1 may send to h2 from t_us on
    {"t_us": 10000, "host": "h1", "dest": null}   # hold
    {"t_us": 0, "host": "h1", "dest": "h2", "rate_bps": 500000000}   # rate mode: one per flow
    {"t_us": 0, "host": "h1", "dest": "h2", "rate_bps": 1000000000}  # hybrid: a slice, at most this rate

A host may send to the destination of its latest directive until its next one; a directive takes
effect at its ``t_us`` and the directives of one instant apply together.  This module does no I/O
itself: it takes lines and yields dicts; :mod:`xtc.xco.cli` reads and writes the files.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from .scheduler import SchedulerDirective, EventError, FastScheduler, RateLimiter
from .scheduler.hybrid import HybridScheduler
from .topology import Topology

__all__ = ["ReplayError", "MODES", "parse_event", "replay"]

MODES = ("timeslice", "rate", "hybrid")

_KEYS = {
    "backlog": {"t_us", "host", "event", "dests"},
    "giveup": {"t_us", "host", "event", "dest"},
    "leave": {"t_us", "host", "event"},
}


class ReplayError(ValueError):
    """A bad event line; the message names the line."""


def _host(topo: Topology, value: Any, what: str) -> int:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a host name (a string), got {value!r}")
    if not topo.has_host(value):
        raise ValueError(f"{what}: unknown host {value!r}")
    return topo.host_id(value)


def parse_event(topo: Topology, line: str) -> tuple[int, str, int, Any]:
    """Parse one event line into ``(t_us, event, host id, dests or dest or None)``.

    Raises
    ------
    ValueError
        With what is wrong (the caller adds the line number).
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg}") from None
    if not isinstance(obj, dict):
        raise ValueError("an event is a JSON object")
    kind = obj.get("event")
    if kind not in _KEYS:
        raise ValueError(f"event must be one of {sorted(_KEYS)}, got {kind!r}")
    extra = set(obj) - _KEYS[kind]
    if extra:
        raise ValueError(f"unknown key(s) for a {kind} event: {', '.join(sorted(extra))}")
    missing = _KEYS[kind] - set(obj)
    if missing:
        raise ValueError(f"missing key(s): {', '.join(sorted(missing))}")
    t = obj["t_us"]
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f"t_us must be an int >= 0 (microseconds), got {t!r}")
    x = _host(topo, obj["host"], "host")
    arg: Any = None
    if kind == "backlog":
        ds = obj["dests"]
        if not isinstance(ds, list) or not ds:
            raise ValueError("dests must be a non-empty list of host names")
        arg = [_host(topo, d, f"dests[{i}]") for i, d in enumerate(ds)]
        if x in arg:
            raise ValueError(f"dests: host {obj['host']!r} cannot send to itself")
    elif kind == "giveup":
        arg = _host(topo, obj["dest"], "dest")
    return t, kind, x, arg


def _out(topo: Topology, d: SchedulerDirective, rate: bool) -> dict[str, Any]:
    o: dict[str, Any] = {"t_us": d.t_us, "host": topo.hosts[d.host],
                         "dest": None if d.dest is None else topo.hosts[d.dest]}
    if rate:
        o["rate_bps"] = d.rate_bps
    return o


def replay(topo: Topology, lines: Iterable[str], *, slice_us: int = 10_000, mode: str = "timeslice",
           until_us: int | None = None, source: str = "events") -> Iterator[dict[str, Any]]:
    """Replay events and yield the directives as JSON-able dicts, in time order.

    Parameters
    ----------
    topo : Topology
        The network.
    lines : iterable of str
        The event file's lines.
    slice_us : int
        Slot length, microseconds (timeslice mode).
    mode : {"timeslice", "rate", "hybrid"}
        Timeslice scheduling (Algorithm 1, the fast implementation), the paper's rate limiting, or
        timeslices with a rate limit inside the slice for the hosts with slow paths
        (:mod:`xtc.xco.scheduler.hybrid`; every directive carries ``rate_bps``, null for a hold).
    until_us : int, optional
        Keep handling slice expiries up to this time after the last event, microseconds (default:
        stop at the last event).
    source : str
        Name used for the file in error messages.

    Raises
    ------
    ReplayError
        On a bad line, naming ``source:line``.
    """
    if mode not in MODES:
        raise ReplayError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    sched: FastScheduler | RateLimiter | HybridScheduler
    if mode == "timeslice":
        sched = FastScheduler(topo, slice_us)
    elif mode == "hybrid":
        sched = HybridScheduler(topo, slice_us)
    else:
        sched = RateLimiter(topo)
    rate = mode != "timeslice"
    last = 0
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            t, kind, x, arg = parse_event(topo, s)
            if t < last:
                raise ValueError(f"t_us={t} goes back in time (previous event at {last})")
            last = t
            if kind == "backlog":
                out = sched.backlog(t, x, arg)
            elif kind == "giveup":
                out = sched.giveup(t, x, arg)
            else:
                out = sched.leave(t, x)
        except (ValueError, EventError) as e:
            raise ReplayError(f"{source}:{no}: {e}") from None
        for d in out:
            yield _out(topo, d, rate)
    if until_us is not None and until_us > last:
        for d in sched.advance(until_us):
            yield _out(topo, d, rate)
