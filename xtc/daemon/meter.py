"""Meter: interface packet counters from ``/proc/net/dev`` and their rates.

Public API
----------
IfCounters
    One interface's cumulative counters (rx/tx packets, bytes, drops) as read.
parse_proc_net_dev(text, problems=None) -> dict[str, IfCounters]
    Pure parser.  Raises :class:`ProcNetDevFormatError` for text that is not
    ``/proc/net/dev`` at all; skips a malformed interface line and reports it
    (appended to ``problems`` when a list is given, else logged as a warning).
ProcNetDevSource(path="/proc/net/dev")
    The adapter that reads the file; ``read() -> dict[str, IfCounters]``.
    Raises :class:`~xtc.daemon.host_errors.MeterError`.  Read
    ``/proc/<pid>/net/dev`` to see another network namespace.
RateTracker(max_window_s=1.0, max_pps=..., max_bytes_per_s=...)
    Pure: ``update(now_s, counters) -> UpdateReport`` with samples (10 per
    second by default in the daemon); ``rates(window_s=None) -> dict[str, IfRates]``
    averaged over about ``window_s`` (the control period, 0.1 s .. max_window_s).
IfRates
    rx_pps, tx_pps, rx_bytes_per_s, tx_bytes_per_s, rx_drops_per_s,
    tx_drops_per_s and the span they were averaged over (span_s).
Meter(source, tracker)
    Thin glue: ``sample(now_s)`` reads the source and feeds the tracker.
counter_delta(prev, cur, dt_s, max_rate_per_s) -> (delta, verdict)
    The wrap / reset rule below, exposed for tests and for the documentation.

Counter wrap and reset rule
---------------------------
Kernel counters only grow, so when a counter goes *down* between two samples
taken ``dt_s`` apart, it either wrapped or was reset (interface deleted and
created again under the same name, e.g. when a VR reboots).  A change is
*plausible* when it is at most ``max_rate_per_s * dt_s`` (``max_pps`` =
150 Mpps by default, the line rate of 100 GbE at 64-byte frames; ``max_bytes_per_s``
= 12.5 GB/s).  For ``cur < prev``:

1. if ``prev < 2**32`` and ``2**32 - prev + cur`` is plausible, it is a 32-bit
   wrap (the counter is a 32-bit one and crossed 2**32);
2. else if ``2**64 - prev + cur`` is plausible, it is a 64-bit wrap;
3. else it is a reset: the counter restarted from 0, so ``cur`` packets happened
   since; ``cur`` is counted if plausible, otherwise nothing is counted.

A reset of any packet counter of an interface means the whole interface was
re-created: all its counters are then treated as reset.  A counter that goes
*up* by an implausible amount (garbage, an interface replaced between two
samples) counts nothing for that interval and the tracker re-bases on the new
value.  A 64-bit counter that is reset while its value was within
``max_rate*dt`` below 2**32 is read as a 32-bit wrap; the error is at most one
interval's worth of plausible traffic and is accepted.

Samples with a timestamp equal to or older than the last accepted one are
rejected (reported, nothing changes).  An interface that vanishes loses its
history; when it comes back it is new (no rate until its second sample).
"""

from __future__ import annotations

import logging
import math
import os
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping, Protocol

from xtc.daemon.host_errors import MeterError

__all__ = [
    "IfCounters",
    "IfRates",
    "UpdateReport",
    "ProcNetDevFormatError",
    "parse_proc_net_dev",
    "CounterSource",
    "ProcNetDevSource",
    "RateTracker",
    "Meter",
    "counter_delta",
    "DEFAULT_MAX_PPS",
    "DEFAULT_MAX_BYTES_PER_S",
    "DEFAULT_SAMPLE_PERIOD_S",
]

log = logging.getLogger(__name__)

#: Default meter period: 10 samples per second (the XTC paper's meter).
DEFAULT_SAMPLE_PERIOD_S = 0.1
#: Largest plausible packet rate of one interface, packets/s (100 GbE, 64-byte frames).
DEFAULT_MAX_PPS = 150e6
#: Largest plausible byte rate of one interface, bytes/s (100 Gbit/s).
DEFAULT_MAX_BYTES_PER_S = 12.5e9

_U64_MAX = 2**64 - 1
_WRAP32 = 2**32
_WRAP64 = 2**64


class ProcNetDevFormatError(MeterError, ValueError):
    """The text is not in ``/proc/net/dev`` format (no header, missing columns)."""


@dataclass(frozen=True, slots=True)
class IfCounters:
    """Cumulative counters of one interface as the kernel reports them.

    All values are non-negative integers below 2**64; packets and drops are in
    packets, bytes in bytes.  "rx" is what the host received on the interface
    and "tx" what it sent, seen from the namespace whose file was read.
    """

    rx_packets: int
    tx_packets: int
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_drops: int = 0
    tx_drops: int = 0

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.rx_packets,
            self.tx_packets,
            self.rx_bytes,
            self.tx_bytes,
            self.rx_drops,
            self.tx_drops,
        )


_FIELD_NAMES = tuple(f.name for f in fields(IfCounters))
# Which counters are packet counts (the others are bytes).
_IS_PACKETS = tuple(not n.endswith("_bytes") for n in _FIELD_NAMES)
# Counters whose reset decides that the interface was re-created.
_PACKET_IDX = (0, 1)

# (section, column) in the header -> IfCounters field.
_COLUMNS = {
    ("receive", "packets"): "rx_packets",
    ("transmit", "packets"): "tx_packets",
    ("receive", "bytes"): "rx_bytes",
    ("transmit", "bytes"): "tx_bytes",
    ("receive", "drop"): "rx_drops",
    ("transmit", "drop"): "tx_drops",
}


def _parse_header(line0: str, line1: str) -> tuple[int, dict[str, int]]:
    """Return (number of value columns, field name -> column index)."""
    if not line0.lstrip().startswith("Inter-") or "|" not in line0 or "|" not in line1:
        raise ProcNetDevFormatError(
            "not /proc/net/dev: expected the header 'Inter-|   Receive ... |  Transmit' "
            f"on the first line, got {line0[:60]!r}"
        )
    sections = [s.strip().lower() for s in line0.split("|")[1:]]
    groups = [g.split() for g in line1.split("|")[1:]]
    if len(sections) != len(groups):
        raise ProcNetDevFormatError(
            f"not /proc/net/dev: header lines disagree ({len(sections)} sections named, "
            f"{len(groups)} column groups)"
        )
    index: dict[str, int] = {}
    ncols = 0
    for section, cols in zip(sections, groups):
        for col in cols:
            name = _COLUMNS.get((section, col))
            if name is not None and name not in index:
                index[name] = ncols
            ncols += 1
    missing = [n for n in _FIELD_NAMES if n not in index]
    if missing:
        raise ProcNetDevFormatError(
            f"not /proc/net/dev: header lacks the columns for {', '.join(missing)}"
        )
    return ncols, index


def _parse_u64(tok: str) -> int | None:
    if not tok.isascii() or not tok.isdigit():
        return None
    v = int(tok)
    return v if v <= _U64_MAX else None


def parse_proc_net_dev(text: str, problems: list[str] | None = None) -> dict[str, IfCounters]:
    """Parse the contents of ``/proc/net/dev``.

    Parameters
    ----------
    text : str
        The whole file.
    problems : list of str, optional
        When given, one message per skipped line is appended to it; when not,
        each is logged as a warning.

    Returns
    -------
    dict of str to IfCounters
        Counters per interface name, in file order.  Columns the header names
        beyond the six used here are ignored wherever they sit.

    Raises
    ------
    ProcNetDevFormatError
        The text has no ``/proc/net/dev`` header or the header lacks the
        packets/bytes/drop columns of either direction.

    Notes
    -----
    A line is skipped (and reported) when it has no ``name:``, an empty or
    duplicate name, a different number of values than the header has columns,
    or a value that is not a decimal integer in 0 .. 2**64-1.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_proc_net_dev needs str, got {type(text).__name__}")
    lines = text.splitlines()
    if len(lines) < 2:
        raise ProcNetDevFormatError(
            f"not /proc/net/dev: {len(lines)} line(s), the header alone has 2"
        )
    ncols, index = _parse_header(lines[0], lines[1])
    out: dict[str, IfCounters] = {}

    def report(lineno: int, msg: str) -> None:
        full = f"/proc/net/dev line {lineno}: {msg}"
        if problems is not None:
            problems.append(full)
        else:
            log.warning("%s", full)

    for lineno, line in enumerate(lines[2:], start=3):
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not sep:
            report(lineno, f"no 'name:' in {line[:60]!r}; skipped")
            continue
        if not name or any(c.isspace() for c in name):
            report(lineno, f"bad interface name {name!r}; skipped")
            continue
        toks = rest.split()
        if len(toks) != ncols:
            report(lineno, f"{name}: {len(toks)} values, header has {ncols} columns; skipped")
            continue
        values = [_parse_u64(t) for t in toks]
        bad = [toks[i] for i, v in enumerate(values) if v is None]
        if bad:
            report(lineno, f"{name}: not a counter in 0..2**64-1: {bad[0][:30]!r}; skipped")
            continue
        if name in out:
            report(lineno, f"{name}: duplicate interface; the first line is kept")
            continue
        out[name] = IfCounters(**{f: values[i] for f, i in index.items()})  # type: ignore[arg-type]
    return out


class CounterSource(Protocol):
    """Anything that returns the current counters of every interface."""

    def read(self) -> dict[str, IfCounters]: ...


class ProcNetDevSource:
    """Reads ``/proc/net/dev`` (or any file in its format) and parses it.

    Parameters
    ----------
    path : str or os.PathLike
        File to read; ``/proc/<pid>/net/dev`` shows the namespace of ``pid``,
        tests pass a recorded file.

    Malformed lines are logged once per distinct message (the meter reads 10
    times per second); the problems of the last read are in ``last_problems``.
    """

    def __init__(self, path: str | os.PathLike[str] = "/proc/net/dev") -> None:
        self.path = Path(path)
        self.last_problems: list[str] = []
        self._logged: set[str] = set()

    def read(self) -> dict[str, IfCounters]:
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except OSError as e:
            raise MeterError(f"cannot read interface counters from {self.path}: {e}") from e
        problems: list[str] = []
        try:
            counters = parse_proc_net_dev(text, problems)
        except ProcNetDevFormatError as e:
            raise ProcNetDevFormatError(f"{self.path}: {e}") from None
        self.last_problems = problems
        for p in problems:
            if p not in self._logged and len(self._logged) < 1000:
                self._logged.add(p)
                log.warning("%s: %s", self.path, p)
        return counters


def counter_delta(prev: int, cur: int, dt_s: float, max_rate_per_s: float) -> tuple[int, str]:
    """Increase of a cumulative counter between two samples, per the module's rule.

    Parameters
    ----------
    prev, cur : int
        Counter values at the older and the newer sample (0 .. 2**64-1).
    dt_s : float
        Seconds between the samples (> 0).
    max_rate_per_s : float
        Largest plausible rate of this counter (units per second).

    Returns
    -------
    delta : int
        Units counted in the interval (never negative).
    verdict : str
        ``"ok"``, ``"wrap32"``, ``"wrap64"``, ``"reset"`` or ``"jump"``
        (implausible increase, nothing counted).
    """
    limit = max_rate_per_s * dt_s
    if cur >= prev:
        d = cur - prev
        return (d, "ok") if d <= limit else (0, "jump")
    if prev < _WRAP32:
        w = _WRAP32 - prev + cur
        if w <= limit:
            return w, "wrap32"
    w = _WRAP64 - prev + cur
    if w <= limit:
        return w, "wrap64"
    return (cur, "reset") if cur <= limit else (0, "reset")


@dataclass(frozen=True, slots=True)
class IfRates:
    """Average rates of one interface over ``span_s`` seconds ending at ``t_end_s``.

    ``rx_pps``/``tx_pps`` in packets/s, ``*_bytes_per_s`` in bytes/s,
    ``*_drops_per_s`` in packets/s.
    """

    rx_pps: float
    tx_pps: float
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    rx_drops_per_s: float
    tx_drops_per_s: float
    span_s: float
    t_end_s: float


@dataclass(slots=True)
class UpdateReport:
    """What one :meth:`RateTracker.update` did (for logs and tests)."""

    accepted: bool
    reason: str = ""
    appeared: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    #: interface -> verdicts other than "ok" seen for its counters, e.g. {"vif3.0": ["wrap32"]}
    anomalies: dict[str, list[str]] = field(default_factory=dict)


class _IfState:
    __slots__ = ("raw", "acc", "times", "accs")

    def __init__(self, t: float, raw: tuple[int, ...]) -> None:
        self.raw = raw
        self.acc = (0,) * len(raw)
        self.times: deque[float] = deque([t])
        self.accs: deque[tuple[int, ...]] = deque([self.acc])


class RateTracker:
    """Per-interface packet and byte rates from timestamped counter samples. Pure.

    Each interface's raw counters are turned into monotonic totals (wraps and
    resets handled by the module's rule); a rate is the increase of the total
    between the newest sample and the sample closest to ``window_s`` before
    it, divided by the actual time between those two samples (``span_s``).

    Parameters
    ----------
    max_window_s : float
        Longest averaging window that :meth:`rates` may be asked for, seconds.
        History older than that is dropped.
    max_pps : float
        Plausibility limit for packet counters, packets/s per interface.
    max_bytes_per_s : float
        Plausibility limit for byte counters, bytes/s per interface.
    """

    def __init__(
        self,
        max_window_s: float = 1.0,
        max_pps: float = DEFAULT_MAX_PPS,
        max_bytes_per_s: float = DEFAULT_MAX_BYTES_PER_S,
    ) -> None:
        for name, v in (
            ("max_window_s", max_window_s),
            ("max_pps", max_pps),
            ("max_bytes_per_s", max_bytes_per_s),
        ):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"RateTracker: {name} must be a finite number > 0, got {v!r}")
        self.max_window_s = float(max_window_s)
        self._limits = tuple(float(max_pps) if p else float(max_bytes_per_s) for p in _IS_PACKETS)
        self._ifs: dict[str, _IfState] = {}
        self._last_t: float | None = None

    @property
    def last_time_s(self) -> float | None:
        """Timestamp of the last accepted sample (None before the first)."""
        return self._last_t

    @property
    def interfaces(self) -> frozenset[str]:
        """Interfaces present in the last accepted sample."""
        return frozenset(self._ifs)

    def update(self, now_s: float, counters: Mapping[str, IfCounters]) -> UpdateReport:
        """Feed one sample: the counters of all interfaces read at ``now_s`` seconds.

        A sample whose ``now_s`` is not finite or not later than the previous
        accepted sample is rejected (``accepted=False``) and changes nothing.
        Interfaces missing from ``counters`` are forgotten.
        """
        if not isinstance(now_s, (int, float)) or not math.isfinite(now_s):
            return UpdateReport(False, f"timestamp {now_s!r} is not a finite number")
        now_s = float(now_s)
        if self._last_t is not None and now_s <= self._last_t:
            what = "duplicate" if now_s == self._last_t else "older"
            return UpdateReport(
                False, f"{what} timestamp {now_s!r} (last accepted {self._last_t!r}); sample ignored"
            )
        report = UpdateReport(True)
        for name in list(self._ifs):
            if name not in counters:
                del self._ifs[name]
                report.vanished.append(name)
        cutoff = now_s - self.max_window_s
        for name, c in counters.items():
            raw = c.as_tuple()
            st = self._ifs.get(name)
            if st is None:
                self._ifs[name] = _IfState(now_s, raw)
                report.appeared.append(name)
                continue
            dt = now_s - st.times[-1]
            res = [counter_delta(p, r, dt, lim) for p, r, lim in zip(st.raw, raw, self._limits)]
            verdicts = [v for _, v in res]
            if any(verdicts[i] == "reset" for i in _PACKET_IDX):
                # The interface was re-created: every counter restarted from 0.
                res = [
                    (r, "reset") if r <= lim * dt else (0, "reset")
                    for r, lim in zip(raw, self._limits)
                ]
                verdicts = [v for _, v in res]
            odd = sorted({v for v in verdicts if v != "ok"})
            if odd:
                report.anomalies[name] = odd
            st.raw = raw
            st.acc = tuple(a + d for a, (d, _) in zip(st.acc, res))
            st.times.append(now_s)
            st.accs.append(st.acc)
            while len(st.times) >= 2 and st.times[1] <= cutoff:
                st.times.popleft()
                st.accs.popleft()
        self._last_t = now_s
        return report

    def rates(self, window_s: float | None = None) -> dict[str, IfRates]:
        """Average rates per interface over about ``window_s`` seconds up to the last sample.

        Parameters
        ----------
        window_s : float, optional
            Averaging window in seconds, 0 < window_s <= max_window_s; default
            ``max_window_s``.

        Returns
        -------
        dict of str to IfRates
            Interfaces with at least two samples.  ``span_s`` is the exact time
            the average covers: the sample closest to ``window_s`` before the
            newest is used, so it is shorter for an interface that just
            appeared and longer after a gap in sampling.
        """
        if window_s is None:
            window_s = self.max_window_s
        if (
            not isinstance(window_s, (int, float))
            or not math.isfinite(window_s)
            or not 0 < window_s <= self.max_window_s
        ):
            raise ValueError(
                f"rates: window_s must be in (0, {self.max_window_s}] seconds, got {window_s!r}"
            )
        out: dict[str, IfRates] = {}
        for name, st in self._ifs.items():
            n = len(st.times)
            if n < 2:
                continue
            t_end = st.times[-1]
            target = t_end - window_s
            i = bisect_left(st.times, target, 0, n - 1)  # first index with t >= target
            if i > 0 and (i == n - 1 or target - st.times[i - 1] <= st.times[i] - target):
                i -= 1
            t0 = st.times[i]
            span = t_end - t0
            a0, a1 = st.accs[i], st.accs[-1]
            r = [(y - x) / span for x, y in zip(a0, a1)]
            out[name] = IfRates(
                rx_pps=r[0],
                tx_pps=r[1],
                rx_bytes_per_s=r[2],
                tx_bytes_per_s=r[3],
                rx_drops_per_s=r[4],
                tx_drops_per_s=r[5],
                span_s=span,
                t_end_s=t_end,
            )
        return out


class Meter:
    """A counter source and a rate tracker together.

    ``sample(now_s)`` reads the source once and feeds the tracker; the caller
    owns the clock and the schedule (every 0.1 s by default).
    """

    def __init__(self, source: CounterSource, tracker: RateTracker | None = None) -> None:
        self.source = source
        self.tracker = tracker if tracker is not None else RateTracker()
        self.last_counters: dict[str, IfCounters] = {}

    def sample(self, now_s: float) -> UpdateReport:
        counters = self.source.read()
        rep = self.tracker.update(now_s, counters)
        if rep.accepted:
            self.last_counters = counters
        return rep

    def rates(self, window_s: float | None = None) -> dict[str, IfRates]:
        return self.tracker.rates(window_s)
