"""Meter: interface packet counters from ``/proc/net/dev`` and their rates.

Public API
----------
IfCounters
    One interface's cumulative counters (rx/tx packets, bytes, drops) as read.
parse_proc_net_dev(text, problems=None, *, fast=True) -> dict[str, IfCounters]
    Pure parser.  Raises :class:`ProcNetDevFormatError` for text that is not
    ``/proc/net/dev`` at all; skips a malformed interface line and reports it
    (appended to ``problems`` when a list is given, else logged as a warning).
CounterTable
    The counters of many interfaces as one array (``names``, ``values``: an
    ``(n, 6)`` uint64 array in :class:`IfCounters` field order).  What the
    meter passes around on its hot path: no Python object per interface.
ProcNetDevParser() / parse_proc_net_dev_table(text, problems=None, *, fast=True)
    The same parser returning a :class:`CounterTable`.  A parser object
    remembers the interface names of its last text, so a file with the same
    interfaces as the previous one costs no per-interface Python work.
ProcNetDevSource(path="/proc/net/dev")
    The adapter that reads the file; ``read() -> dict[str, IfCounters]`` and
    ``read_table() -> CounterTable``.  Raises
    :class:`~xtc.host.errors.MeterError`.  Read ``/proc/<pid>/net/dev``
    to see another network namespace.
RateTracker(max_window_s=1.0, max_pps=..., max_bytes_per_s=...)
    Pure: ``update(now_s, counters) -> UpdateReport`` with samples (10 per
    second by default in the daemon), ``counters`` a mapping of
    :class:`IfCounters` or a :class:`CounterTable`;
    ``rates(window_s=None) -> dict[str, IfRates]`` averaged over about
    ``window_s`` (the control period, 0.1 s .. max_window_s);
    ``rates_table(window_s=None) -> RatesTable``, the same as arrays.
IfRates
    rx_pps, tx_pps, rx_bytes_per_s, tx_bytes_per_s, rx_drops_per_s,
    tx_drops_per_s and the span they were averaged over (span_s).
RatesTable
    The rates of every interface as arrays (``names``, ``valid``, ``rates``,
    ``span_s``, ``t_end_s``, ``index``).
GroupRateSums()
    Pure: ``sums(rates_table, groups)`` adds rx_pps and tx_pps over each
    group of interfaces (each VR's), in the groups' order.
Meter(source, tracker)
    Thin glue: ``sample(now_s)`` reads the source and feeds the tracker
    (through ``source.read_table()`` when the source has it).
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

Fast and careful paths
----------------------
The daemon samples thousands of interfaces ten times a second, so both halves
of the meter have a vectorised fast path and the original per-line /
per-interface code as the careful path; they give identical results (the
tests check this on recorded files and random inputs).

* Parser: the fast path classifies the bytes of the whole file with numpy and
  accepts it only when every interface line has the exact expected shape (one
  ``name:``, then as many decimal values of at most 19 digits as the header
  has columns; ASCII, no control characters but newlines, no duplicate
  name).  Anything else -- a malformed line, a 20-digit value, a blank line --
  is handed to the careful parser, which skips and reports exactly as before.
* Tracker: counters live in arrays aligned with the interface order of the
  last sample; the deltas of all interfaces are computed at once, and an
  interface with any counter that is not a plain, plausible increase (wrap,
  reset, jump, a delta beyond 2**53) goes through :func:`counter_delta` one by
  one.  Totals are kept modulo 2**64: their differences, which are all that a
  rate uses, are exact.

Cost (``xtc bench daemon``, 4000 interfaces, 10 samples/s): a sample is about
0.7 ms of CPU (parse 0.6, tracker 0.1) where the per-line parser and the
per-interface tracker took 43 ms.  No Python object is made per interface on
this path, and the parser and tracker reuse their arrays between samples: big
temporaries would cost fresh pages on every sample.
"""

from __future__ import annotations

import logging
import math
import os
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np

from xtc.host.errors import MeterError

__all__ = [
    "IfCounters",
    "IfRates",
    "UpdateReport",
    "ProcNetDevFormatError",
    "parse_proc_net_dev",
    "parse_proc_net_dev_table",
    "ProcNetDevParser",
    "CounterTable",
    "RatesTable",
    "GroupRateSums",
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


def _parse_careful(text: str, problems: list[str] | None) -> dict[str, IfCounters]:
    """The careful parser: line by line, every problem reported (see :func:`parse_proc_net_dev`)."""
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




def parse_proc_net_dev(
    text: str, problems: list[str] | None = None, *, fast: bool = True
) -> dict[str, IfCounters]:
    """Parse the contents of ``/proc/net/dev``.

    Parameters
    ----------
    text : str
        The whole file.
    problems : list of str, optional
        When given, one message per skipped line is appended to it; when not,
        each is logged as a warning.
    fast : bool
        Try the vectorised fast path first (default).  ``False`` runs the
        careful line-by-line parser only; both give the same result.

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
    if fast:
        table = ProcNetDevParser(remember=False)._fast(text)
        if table is not None:
            return table.to_dict()
    return _parse_careful(text, problems)


class CounterTable:
    """Cumulative counters of many interfaces, as one array.

    Attributes
    ----------
    names : tuple of str
        Interface names, in file order, no duplicates.
    values : numpy.ndarray
        ``(len(names), 6)`` uint64, read-only; row ``i`` holds the counters of
        ``names[i]`` in :class:`IfCounters` field order (rx_packets,
        tx_packets, rx_bytes, tx_bytes, rx_drops, tx_drops): packets and
        bytes, each 0 .. 2**64-1.
    """

    __slots__ = ("names", "values")

    def __init__(self, names: Sequence[str], values: Any) -> None:
        names = tuple(names)
        arr = np.asarray(values)
        if arr.dtype != np.uint64:
            raise ValueError(f"CounterTable: values must be uint64, got {arr.dtype}")
        if arr.shape != (len(names), len(_FIELD_NAMES)):
            raise ValueError(
                f"CounterTable: values must have shape ({len(names)}, {len(_FIELD_NAMES)}), got {arr.shape}"
            )
        if len(set(names)) != len(names):
            raise ValueError("CounterTable: duplicate interface names")
        arr = arr.copy()  # the caller keeps no handle on the table's counters
        arr.flags.writeable = False
        self.names: tuple[str, ...] = names
        self.values: np.ndarray = arr

    @classmethod
    def _trusted(cls, names: tuple[str, ...], values: np.ndarray) -> "CounterTable":
        """Wrap arrays the parser built and checked (no copies)."""
        t = cls.__new__(cls)
        values.flags.writeable = False
        t.names = names
        t.values = values
        return t

    @classmethod
    def from_mapping(cls, counters: Mapping[str, IfCounters]) -> "CounterTable":
        """The table of ``{name: IfCounters}``; ValueError names a counter outside 0 .. 2**64-1."""
        names = tuple(counters)
        rows = [c.as_tuple() for c in counters.values()]
        try:
            arr = np.array(rows, dtype=np.uint64).reshape(len(names), len(_FIELD_NAMES))
        except (OverflowError, ValueError, TypeError):
            for n, row in zip(names, rows):
                if not all(isinstance(v, int) and 0 <= v <= _U64_MAX for v in row):
                    raise ValueError(f"counters of {n!r} are not integers in 0..2**64-1: {row!r}") from None
            raise
        return cls._trusted(names, arr)

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def to_dict(self) -> dict[str, IfCounters]:
        """``{name: IfCounters}`` in table order (one Python object per interface)."""
        return {n: IfCounters(*row) for n, row in zip(self.names, self.values.tolist())}

    def __repr__(self) -> str:
        return f"CounterTable({len(self.names)} interfaces)"


# --- the parser's fast path ---------------------------------------------------------------
# The text is copied into a zero-padded byte buffer; for any position p, the 8 bytes starting at p
# are read as one integer (little-endian: the first byte of the text is the lowest byte) from the
# two aligned 8-byte words they straddle.  Values are read as at most three such 8-byte chunks
# ending at the value's last digit; bytes before the value's first digit are masked off and the
# eight digits of a chunk are combined with three multiply-add steps (SWAR).
_PAD = 24
_MAX_FAST_DIGITS = 19  # 10**19 - 1 < 2**64: no overflow check needed
_MAX_FAST_NAME = 16
#: _DIGITS_LAST[k]: the low nibbles of the last k bytes (in text order) of a chunk.
_DIGITS_LAST = np.array(
    [(((1 << (8 * k)) - 1) << (8 * (8 - k))) & 0x0F0F0F0F0F0F0F0F for k in range(9)], dtype=np.uint64
)
#: _BYTES_FIRST[k]: the first k bytes of a chunk.
_BYTES_FIRST = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
# Eight digits d0..d7 (d0 in the lowest byte) to their value: pairs, quads, then all eight.
_SWAR = (
    (np.uint64(10 * 2**8 + 1), np.uint64(8), np.uint64(0x00FF00FF00FF00FF)),
    (np.uint64(100 * 2**16 + 1), np.uint64(16), np.uint64(0x0000FFFF0000FFFF)),
    (np.uint64(10000 * 2**32 + 1), np.uint64(32), None),
)
_E8 = np.uint64(10**8)
_E16 = np.uint64(10**16)


def _read8(
    words: np.ndarray, at: np.ndarray, out: np.ndarray, scratch: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """The 8 bytes at each byte position ``at`` of the buffer whose aligned words are ``words``.

    Written into ``out`` (uint64, as long as ``at``); ``scratch`` is (intp, uint64, uint64)
    arrays at least as long, so that no temporary is allocated.
    """
    n = len(at)
    q, bits, hi = scratch[0][:n], scratch[1][:n], scratch[2][:n]
    np.right_shift(at, 3, out=q)
    np.bitwise_and(at, 7, out=bits, casting="unsafe")
    bits <<= np.uint64(3)
    np.take(words, q, out=out, mode="clip")
    q += 1
    np.take(words, q, out=hi, mode="clip")
    out >>= bits
    # hi << (64 - bits), written as two shifts so that no shift reaches 64 bits.
    np.subtract(np.uint64(56), bits, out=bits)
    hi <<= bits
    hi <<= np.uint64(8)
    out |= hi
    return out


def _swar8(x: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """Values of 8-byte chunks of ASCII digits (in place).

    ``digits`` selects the low nibbles of the bytes that are digits of the
    value; the other bytes count as 0.  Each step's products stay below 2**8,
    2**16 and 2**32 per lane, so no lane carries into the next.
    """
    x &= digits
    for mul, shift, mask in _SWAR:
        x *= mul
        x >>= shift
        if mask is not None:
            x &= mask
    return x


class ProcNetDevParser:
    """``/proc/net/dev`` text to :class:`CounterTable`: fast path first, careful parser otherwise.

    Parameters
    ----------
    remember : bool
        Remember the interface names and header of the last text (default), so
        that the next text with the same interfaces reuses them.

    Attributes
    ----------
    fast_parses, careful_parses : int
        How many texts each path has parsed (for tests and diagnostics).

    Notes
    -----
    A parser reuses its work buffers from one text to the next (so that a
    sample allocates almost nothing): use one parser per reader, not one
    parser from several threads.
    """

    def __init__(self, remember: bool = True) -> None:
        self.remember = remember
        self.fast_parses = 0
        self.careful_parses = 0
        self._header: tuple[str, int, tuple[int, ...]] | None = None
        self._names_key: np.ndarray | None = None
        self._names: tuple[str, ...] = ()
        self._scratch: dict[str, np.ndarray] = {}
        self._buf: bytearray | None = None
        self._buf_u8: np.ndarray | None = None
        self._buf_w8: np.ndarray | None = None
        self._vindex_key: tuple[int, int, tuple[int, ...]] | None = None
        self._vindex = (np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp))

    def parse(self, text: str | bytes, problems: list[str] | None = None) -> CounterTable:
        """Parse ``text`` (as :func:`parse_proc_net_dev`, same errors and reports).

        ``text`` may also be the file's bytes, read as ASCII: a byte outside
        ASCII stands for U+FFFD, a ``\\r\\n`` or a lone ``\\r`` for a newline
        (what reading the file as ASCII text with ``errors="replace"`` gives).
        """
        if not isinstance(text, (str, bytes)):
            raise TypeError(f"parse_proc_net_dev needs str, got {type(text).__name__}")
        table = self._fast(text)
        if table is not None:
            return table
        if isinstance(text, bytes):
            text = text.decode("ascii", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
            table = self._fast(text)
            if table is not None:
                return table
        return self.parse_careful(text, problems)

    def parse_careful(self, text: str, problems: list[str] | None = None) -> CounterTable:
        """Parse ``text`` with the careful line-by-line parser only."""
        if not isinstance(text, str):
            raise TypeError(f"parse_proc_net_dev needs str, got {type(text).__name__}")
        self.careful_parses += 1
        return CounterTable.from_mapping(_parse_careful(text, problems))

    def _columns(self, header: str) -> tuple[int, tuple[int, ...]] | None:
        """(number of value columns, column of each IfCounters field) for the two header lines."""
        if self._header is not None and self._header[0] == header:
            return self._header[1], self._header[2]
        line0, _, line1 = header.partition("\n")
        try:
            ncols, index = _parse_header(line0, line1)
        except ProcNetDevFormatError:
            return None  # the careful parser raises it
        cols = tuple(index[f] for f in _FIELD_NAMES)
        if self.remember:
            self._header = (header, ncols, cols)
        return ncols, cols

    def _scratch_array(self, name: str, size: int, dtype: Any) -> np.ndarray:
        """A scratch array of ``size`` elements, kept between calls (no fresh pages per sample)."""
        a = self._scratch.get(name)
        if a is None or a.size < size:
            a = np.empty(size + size // 4 + 64, dtype=dtype)
            self._scratch[name] = a
        return a[:size]

    def _buffer(self, raw: bytes) -> tuple[np.ndarray, np.ndarray]:
        """``raw`` between zero pads: (its bytes, the same memory as aligned uint64 words)."""
        need = len(raw) + 2 * _PAD
        if self._buf is None or len(self._buf) < need:
            size = (need + need // 4 + 16) // 8 * 8
            self._buf = bytearray(size)
            self._buf_u8 = np.frombuffer(self._buf, dtype=np.uint8)
            self._buf_w8 = np.frombuffer(self._buf, dtype="<u8")
        self._buf[_PAD : _PAD + len(raw)] = raw
        self._buf[_PAD + len(raw) : need] = bytes(_PAD)
        assert self._buf_u8 is not None and self._buf_w8 is not None
        return self._buf_u8, self._buf_w8

    def _fast(self, text: str | bytes) -> CounterTable | None:
        """The table of ``text`` if every line has the exact expected shape, else None."""
        if not text.isascii():
            return None
        raw = text if isinstance(text, bytes) else text.encode("ascii")
        nbytes = len(raw)
        arr, words = self._buffer(raw)
        txt = arr[_PAD : _PAD + nbytes]
        flag = self._scratch_array("flag", nbytes + 2, np.bool_)
        # No control character but newlines: then splitlines() and str.split() cut where this code does.
        np.less(txt, 32, out=flag[:nbytes])
        nl = np.flatnonzero(flag[:nbytes])
        if len(nl) < 3 or not np.all(txt[nl] == 10):
            return None
        h = int(nl[1]) + 1
        columns = self._columns(raw[: h - 1].decode("ascii"))
        if columns is None:
            return None
        ncols, cols = columns
        body = txt[h:]
        blen = len(body)
        at0 = _PAD + h  # buffer position of the body's first byte
        ends = nl[2:] - h  # newline positions in body coordinates
        if body[-1] != 10:
            ends = np.append(ends, blen)
        nlines = len(ends)
        starts = np.empty(nlines, dtype=ends.dtype)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        # Words: maximal runs of bytes other than space, newline and colon; k per line.
        inword = self._scratch_array("inword", blen + 2, np.bool_)
        inword[0] = inword[-1] = False
        mid = inword[1:-1]
        np.greater(body, 32, out=mid)
        colon = flag[:blen]
        np.equal(body, 58, out=colon)
        if np.count_nonzero(colon) != nlines:
            return None
        np.logical_not(colon, out=colon)
        mid &= colon
        edge = flag[: blen + 1]
        np.not_equal(inword[1:], inword[:-1], out=edge)
        edges = np.flatnonzero(edge)  # start, end, start, end, ... of every word
        k = ncols + 1
        if len(edges) != 2 * nlines * k:
            return None
        # Word group i lies inside line i and its first word (the name) is followed by a colon, the
        # line's only one (there are as many colons as lines).
        name_at = edges[0 :: 2 * k]
        name_end = edges[1 :: 2 * k]
        if np.any(name_at < starts) or np.any(edges[2 * k - 1 :: 2 * k] > ends) or not np.all(arr[name_end + at0] == 58):
            return None
        wlen = self._scratch_array("wlen", nlines * k, np.intp)
        np.subtract(edges[1::2], edges[0::2], out=wlen)
        name_len = wlen[0::k]
        if int(wlen.max()) > _MAX_FAST_DIGITS or int(name_len.max()) > _MAX_FAST_NAME:
            return None
        # Names: up to 16 bytes, read as two 8-byte chunks from their first byte.
        nv = nlines * len(_FIELD_NAMES)
        scratch = (
            self._scratch_array("q", nv, np.intp),
            self._scratch_array("bits", nv, np.uint64),
            self._scratch_array("hi", nv, np.uint64),
        )
        name_at = name_at + at0
        key = np.empty((2, nlines), dtype=np.uint64)
        _read8(words, name_at, key[0], scratch)
        key[0] &= _BYTES_FIRST[np.minimum(name_len, 8)]
        name_at += 8
        _read8(words, name_at, key[1], scratch)
        key[1] &= _BYTES_FIRST[np.clip(name_len - 8, 0, 8)]
        key = key.T.copy()
        # Every value is all digits: the digits of the body are those of the names and the values.
        name_bytes = key.view(np.uint8)
        name_digits = np.count_nonzero((name_bytes - np.uint8(48)) < 10)
        value_bytes = int(wlen.sum()) - int(name_len.sum())
        shifted = self._scratch_array("shifted", blen, np.uint8)
        np.subtract(body, np.uint8(48), out=shifted)
        np.less(shifted, 10, out=flag[:blen])
        if np.count_nonzero(flag[:blen]) - name_digits != value_bytes:
            return None
        if self._names_key is not None and np.array_equal(key, self._names_key):
            names = self._names
        else:
            names = tuple(b.decode("ascii") for b in key.view("S16").ravel().tolist())
            if len(set(names)) != nlines:
                return None  # duplicates: the careful parser reports them
            if self.remember:
                self._names_key, self._names = key, names
        # Values of the six columns used: right-aligned chunks ending at each value's last digit.
        end_index, len_index = self._value_index(nlines, k, cols)
        vlen = np.take(wlen, len_index, out=self._scratch_array("vlen", nv, np.intp), mode="clip")
        at = np.take(edges, end_index, out=self._scratch_array("at", nv, np.intp), mode="clip")
        at += at0 - 8  # where the last 8 bytes of each value start
        maxlen = int(vlen.max())
        ndig = self._scratch_array("ndig", nv, np.intp)
        digits = self._scratch_array("digits", nv, np.uint64)
        # Chunk c holds the bytes [at - 8c, at - 8c + 8): the aligned word q - c shifted down by
        # `bits`, joined with the top of word q - c + 1 (the lower word of chunk c - 1).
        q, bits, hi = scratch[0][:nv], scratch[1][:nv], scratch[2][:nv]
        up = self._scratch_array("up", nv, np.uint64)
        word = self._scratch_array("word", nv, np.uint64)
        np.right_shift(at, 3, out=q)
        np.bitwise_and(at, 7, out=bits, casting="unsafe")
        bits <<= np.uint64(3)
        np.subtract(np.uint64(56), bits, out=up)  # hi << (64 - bits) as two shifts, none of 64
        np.take(words, q, out=word, mode="clip")
        q += 1
        np.take(words, q, out=hi, mode="clip")
        vals = np.right_shift(word, bits, out=np.empty(nv, dtype=np.uint64))
        hi <<= up
        hi <<= np.uint64(8)
        vals |= hi
        np.minimum(vlen, 8, out=ndig)
        _swar8(vals, np.take(_DIGITS_LAST, ndig, out=digits, mode="clip"))
        q -= 1
        chunk = self._scratch_array("chunk", nv, np.uint64)
        for c, scale in ((1, _E8), (2, _E16)):
            if maxlen <= 8 * c:
                break
            np.left_shift(word, up, out=hi)
            hi <<= np.uint64(8)
            q -= 1
            np.take(words, q, out=word, mode="clip")
            np.right_shift(word, bits, out=chunk)
            chunk |= hi
            np.subtract(vlen, 8 * c, out=ndig)
            np.clip(ndig, 0, 8, out=ndig)
            _swar8(chunk, np.take(_DIGITS_LAST, ndig, out=digits, mode="clip"))
            chunk *= scale
            vals += chunk
        self.fast_parses += 1
        return CounterTable._trusted(names, vals.reshape(nlines, len(_FIELD_NAMES)))

    def _value_index(self, nlines: int, k: int, cols: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Where the used values end (index into the word edges) and their word numbers (cached)."""
        key = (nlines, k, cols)
        if self._vindex_key != key:
            word = (np.arange(nlines)[:, None] * k + (np.asarray(cols) + 1)[None, :]).ravel()
            self._vindex = (2 * word + 1, word)
            self._vindex_key = key
        return self._vindex


def parse_proc_net_dev_table(
    text: str, problems: list[str] | None = None, *, fast: bool = True
) -> CounterTable:
    """:func:`parse_proc_net_dev` returning a :class:`CounterTable` (same rules, same reports)."""
    p = ProcNetDevParser(remember=False)
    return p.parse(text, problems) if fast else p.parse_careful(text, problems)


class CounterSource(Protocol):
    """Anything that returns the current counters of every interface.

    A source may also have ``read_table() -> CounterTable`` (the same counters
    as arrays); :class:`Meter` then uses it.
    """

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
        self.parser = ProcNetDevParser()

    def read(self) -> dict[str, IfCounters]:
        return self.read_table().to_dict()

    def read_table(self) -> CounterTable:
        """The counters of every interface as a :class:`CounterTable`."""
        try:
            text = self.path.read_bytes()  # parsed as ASCII text, as read_text(errors="replace") would
        except OSError as e:
            raise MeterError(f"cannot read interface counters from {self.path}: {e}") from e
        problems: list[str] = []
        try:
            table = self.parser.parse(text, problems)
        except ProcNetDevFormatError as e:
            raise ProcNetDevFormatError(f"{self.path}: {e}") from None
        self.last_problems = problems
        for p in problems:
            if p not in self._logged and len(self._logged) < 1000:
                self._logged.add(p)
                log.warning("%s: %s", self.path, p)
        return table


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


@dataclass(frozen=True, slots=True, eq=False)
class RatesTable:
    """Rates of every interface of the last sample, as arrays (what :meth:`RateTracker.rates` holds).

    Attributes
    ----------
    names : tuple of str
        Interfaces of the last accepted sample, in the tracker's order.
    index : mapping of str to int
        Row of each name.
    valid : numpy.ndarray
        bool ``(n,)``: the interface has a rate (at least two samples).
    rates : numpy.ndarray
        float64 ``(n, 6)``: rx_pps, tx_pps, rx_bytes_per_s, tx_bytes_per_s,
        rx_drops_per_s, tx_drops_per_s (packets/s and bytes/s); NaN where not valid.
    span_s : numpy.ndarray
        float64 ``(n,)``: seconds each average covers; NaN where not valid.
    t_end_s : float or None
        Time of the newest sample, seconds (None before the first).
    """

    names: tuple[str, ...]
    index: Mapping[str, int]
    valid: np.ndarray
    rates: np.ndarray
    span_s: np.ndarray
    t_end_s: float | None


class _IfView:
    """Read-only history of one interface (times and totals), for inspection and tests."""

    __slots__ = ("times", "accs")

    def __init__(self, times: list[float], accs: list[tuple[int, ...]]) -> None:
        self.times = times
        self.accs = accs


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

    Notes
    -----
    Every interface present in a sample is updated by it and an interface that
    vanishes is forgotten, so the history of each interface is the tracker's
    history of samples since the interface appeared.  The tracker keeps one
    array of totals per retained sample, rows in the order of the interfaces.
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
        self._limits_arr = np.array(self._limits, dtype=np.float64)
        nf = len(_FIELD_NAMES)
        # Interfaces in order of appearance (the order of rates()), and their row.
        self._names: tuple[str, ...] = ()
        self._row: dict[str, int] = {}
        self._present: frozenset[str] = frozenset()
        self._raw = np.zeros((0, nf), dtype=np.uint64)  # counters as last read
        self._acc = np.zeros((0, nf), dtype=np.uint64)  # totals, modulo 2**64
        self._born = np.zeros(0, dtype=np.int64)  # sequence number of each interface's first sample
        # Retained samples: (time, sequence number, totals of every row at that time).
        self._hist: deque[tuple[float, int, np.ndarray]] = deque()
        self._spare: np.ndarray | None = None  # totals array of a sample that left the window
        self._seq = 0
        self._last_t: float | None = None
        # Input name order -> row order, for inputs whose order differs from the rows'.
        self._in_names: tuple[str, ...] | None = None
        self._in_perm: np.ndarray | None = None

    @property
    def last_time_s(self) -> float | None:
        """Timestamp of the last accepted sample (None before the first)."""
        return self._last_t

    @property
    def interfaces(self) -> frozenset[str]:
        """Interfaces present in the last accepted sample."""
        return self._present

    @property
    def names(self) -> tuple[str, ...]:
        """Interfaces present in the last accepted sample, in the order of :meth:`rates`."""
        return self._names

    @property
    def _ifs(self) -> dict[str, _IfView]:
        """Each interface's retained times and totals (a snapshot, for inspection and tests)."""
        out: dict[str, _IfView] = {}
        for name, row in self._row.items():
            born = int(self._born[row])
            kept = [(t, tuple(a[row].tolist())) for t, s, a in self._hist if s >= born]
            out[name] = _IfView([t for t, _ in kept], [a for _, a in kept])
        return out

    def update(self, now_s: float, counters: Mapping[str, IfCounters] | CounterTable) -> UpdateReport:
        """Feed one sample: the counters of all interfaces read at ``now_s`` seconds.

        A sample whose ``now_s`` is not finite or not later than the previous
        accepted sample is rejected (``accepted=False``) and changes nothing.
        Interfaces missing from ``counters`` are forgotten.  ``counters`` is a
        mapping of :class:`IfCounters` or a :class:`CounterTable`; a counter
        outside 0 .. 2**64-1 raises ValueError and changes nothing.
        """
        if not isinstance(now_s, (int, float)) or not math.isfinite(now_s):
            return UpdateReport(False, f"timestamp {now_s!r} is not a finite number")
        now_s = float(now_s)
        if self._last_t is not None and now_s <= self._last_t:
            what = "duplicate" if now_s == self._last_t else "older"
            return UpdateReport(
                False, f"{what} timestamp {now_s!r} (last accepted {self._last_t!r}); sample ignored"
            )
        table = counters if isinstance(counters, CounterTable) else CounterTable.from_mapping(counters)
        names, values = table.names, table.values
        report = UpdateReport(True)
        perm: np.ndarray | None = None
        if names is self._names or names == self._names:
            nkeep = len(names)
            raw, acc, born = self._raw, self._acc, self._born
            vals = values
        elif self._in_perm is not None and (names is self._in_names or names == self._in_names):
            nkeep = len(names)
            raw, acc, born = self._raw, self._acc, self._born
            perm = self._in_perm
            vals = values[perm]
        else:
            pos = {n: i for i, n in enumerate(names)}
            keep = [r for r, n in enumerate(self._names) if n in pos]
            report.vanished = [n for n in self._names if n not in pos]
            report.appeared = [n for n in names if n not in self._row]
            new_names = tuple(self._names[r] for r in keep) + tuple(report.appeared)
            nkeep = len(keep)
            perm = np.fromiter((pos[n] for n in new_names), dtype=np.intp, count=len(new_names))
            vals = values[perm]
            keep_rows = np.asarray(keep, dtype=np.intp)
            nnew = len(report.appeared)
            raw = self._raw[keep_rows]
            acc = np.concatenate([self._acc[keep_rows], np.zeros((nnew, len(_FIELD_NAMES)), np.uint64)])
            born = np.concatenate([self._born[keep_rows], np.full(nnew, self._seq + 1, np.int64)])
            hist = deque(
                (t, s, np.concatenate([a[keep_rows], np.zeros((nnew, len(_FIELD_NAMES)), np.uint64)]))
                for t, s, a in self._hist
            )
            self._hist = hist
            self._names = new_names
            self._row = {n: r for r, n in enumerate(new_names)}
            self._present = frozenset(new_names)
            identity = np.array_equal(perm, np.arange(len(perm)))
            self._in_names, self._in_perm = (None, None) if identity else (names, perm)
            if identity:
                perm = None
        # The new totals go into the array of the sample that left the window last, if it fits.
        spare = self._spare
        new_acc = spare if spare is not None and spare.shape == acc.shape else np.empty_like(acc)
        self._spare = None
        if nkeep and self._last_t is not None:
            dt = now_s - self._last_t
            cur = vals[:nkeep]
            delta = new_acc[:nkeep]
            np.subtract(cur, raw, out=delta)  # modulo 2**64; only used where cur >= raw
            # An integer is <= limit iff it is <= floor(limit); capped at 2**53, where floats stop
            # being exact (larger increases take the careful path, which compares exactly).
            limit = np.minimum(np.floor(self._limits_arr * dt), 2.0**53).astype(np.uint64)
            ok = cur >= raw
            ok &= delta <= limit
            odd_rows = None if ok.all() else np.unique(np.flatnonzero(~ok) // len(_FIELD_NAMES))
            if odd_rows is not None:
                order = odd_rows if perm is None else odd_rows[np.argsort(perm[odd_rows], kind="stable")]
                for r in order.tolist():
                    d, odd = self._careful_row(raw[r].tolist(), cur[r].tolist(), dt)
                    delta[r] = d
                    if odd:
                        report.anomalies[self._names[r]] = odd
            delta += acc[:nkeep]
            new_acc[nkeep:] = acc[nkeep:]
        else:
            new_acc[:] = acc
        acc = new_acc
        # Tables are read-only: the counters are kept without a copy.
        self._raw = vals if not vals.flags.writeable else vals.copy()
        self._acc = acc
        self._born = born
        self._seq += 1
        self._hist.append((now_s, self._seq, acc))
        cutoff = now_s - self.max_window_s
        while len(self._hist) >= 2 and self._hist[1][0] <= cutoff:
            self._spare = self._hist.popleft()[2]
        self._last_t = now_s
        return report

    def _careful_row(self, prev: list[int], cur: list[int], dt: float) -> tuple[list[int], list[str]]:
        """Deltas and odd verdicts of one interface by :func:`counter_delta` (wraps, resets, jumps)."""
        res = [counter_delta(p, r, dt, lim) for p, r, lim in zip(prev, cur, self._limits)]
        verdicts = [v for _, v in res]
        if any(verdicts[i] == "reset" for i in _PACKET_IDX):
            # The interface was re-created: every counter restarted from 0.
            res = [(r, "reset") if r <= lim * dt else (0, "reset") for r, lim in zip(cur, self._limits)]
            verdicts = [v for _, v in res]
        return [d for d, _ in res], sorted({v for v in verdicts if v != "ok"})

    def _check_window(self, window_s: float | None) -> float:
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
        return window_s

    def rates_table(self, window_s: float | None = None) -> RatesTable:
        """The rates of :meth:`rates` as arrays (no Python object per interface).

        Parameters
        ----------
        window_s : float, optional
            Averaging window in seconds, 0 < window_s <= max_window_s; default
            ``max_window_s``.
        """
        window_s = self._check_window(window_s)
        n = len(self._names)
        rates = np.full((n, len(_FIELD_NAMES)), np.nan)
        span = np.full(n, np.nan)
        valid = np.zeros(n, dtype=np.bool_)
        hist = self._hist
        m = len(hist)
        if m >= 2 and n:
            times = [h[0] for h in hist]
            # Row r's history is the retained samples from index first[r] on.
            first = np.searchsorted(np.fromiter((h[1] for h in hist), np.int64, m), self._born)
            t_end = times[-1]
            target = t_end - window_s
            j = bisect_left(times, target, 0, m - 1)  # first index with t >= target
            acc_end = hist[-1][2]
            for lo in np.unique(first).tolist():
                if m - lo < 2:
                    continue
                i = max(lo, j)
                if i > lo and (i == m - 1 or target - times[i - 1] <= times[i] - target):
                    i -= 1
                t0 = times[i]
                span_s = t_end - t0
                rows = np.flatnonzero(first == lo)
                if len(rows) == n:
                    rates[:] = (acc_end - hist[i][2]).astype(np.float64) / span_s
                else:
                    rates[rows] = (acc_end[rows] - hist[i][2][rows]).astype(np.float64) / span_s
                span[rows] = span_s
                valid[rows] = True
        return RatesTable(self._names, self._row, valid, rates, span, self._last_t)

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
        t = self.rates_table(window_s)
        out: dict[str, IfRates] = {}
        if not t.valid.any():
            return out
        t_end = t.t_end_s
        assert t_end is not None
        spans = t.span_s.tolist()
        for name, ok, r, span in zip(t.names, t.valid.tolist(), t.rates.tolist(), spans):
            if ok:
                out[name] = IfRates(r[0], r[1], r[2], r[3], r[4], r[5], span, t_end)
        return out


class GroupRateSums:
    """Sums of rx and tx packet rates over groups of interfaces (a VR's interfaces). Pure.

    ``sums(table, groups)`` adds, for each group, the ``rx_pps`` and ``tx_pps``
    of its interfaces that have a rate in ``table``, in the order the group
    lists them (so the floating-point sums equal a plain loop's), and counts
    them.  The rows of each group are looked up once and reused while the
    table's interfaces and the groups stay the same.
    """

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._groups: dict[str, tuple[str, ...]] = {}
        self._keys: list[str] = []
        self._group_of = np.zeros(0, dtype=np.intp)
        self._rows = np.zeros(0, dtype=np.intp)

    def sums(
        self, table: RatesTable, groups: Mapping[str, Sequence[str]]
    ) -> tuple[list[str], list[float], list[float], list[int]]:
        """Per group: (group names, rx_pps sums, tx_pps sums, interfaces with a rate).

        Parameters
        ----------
        table : RatesTable
            From :meth:`RateTracker.rates_table`.
        groups : mapping of str to sequence of str
            Interfaces of each group (a VR); an interface missing from the
            table or without a rate is left out.

        Returns
        -------
        names, rx_pps, tx_pps, seen
            Lists in the order of ``groups``: packets/s summed over the
            interfaces that have a rate, and how many those are.
        """
        if table.names is not self._names or groups != self._groups:
            keys, group_of, rows = [], [], []
            for g, (name, ifs) in enumerate(groups.items()):
                keys.append(name)
                for i in ifs:
                    r = table.index.get(i)
                    if r is not None:
                        group_of.append(g)
                        rows.append(r)
            self._names = table.names
            self._groups = {k: tuple(v) for k, v in groups.items()}
            self._keys = keys
            self._group_of = np.array(group_of, dtype=np.intp)
            self._rows = np.array(rows, dtype=np.intp)
        n = len(self._keys)
        has = table.valid[self._rows]
        group_of = self._group_of[has]
        rows = self._rows[has]
        rx = np.bincount(group_of, weights=table.rates[rows, 0], minlength=n)
        tx = np.bincount(group_of, weights=table.rates[rows, 1], minlength=n)
        seen = np.bincount(group_of, minlength=n)
        return list(self._keys), rx.tolist(), tx.tolist(), seen.tolist()


class Meter:
    """A counter source and a rate tracker together.

    ``sample(now_s)`` reads the source once and feeds the tracker; the caller
    owns the clock and the schedule (every 0.1 s by default).  A source with a
    ``read_table()`` method is read through it (no Python object per interface).
    """

    def __init__(self, source: CounterSource, tracker: RateTracker | None = None) -> None:
        self.source = source
        self.tracker = tracker if tracker is not None else RateTracker()
        self._last: Mapping[str, IfCounters] | CounterTable = {}
        self._last_dict: dict[str, IfCounters] | None = {}

    @property
    def last_counters(self) -> dict[str, IfCounters]:
        """Counters of the last accepted sample."""
        if self._last_dict is None:
            last = self._last
            self._last_dict = last.to_dict() if isinstance(last, CounterTable) else dict(last)
        return self._last_dict

    def sample(self, now_s: float) -> UpdateReport:
        read_table = getattr(self.source, "read_table", None)
        counters = read_table() if read_table is not None else self.source.read()
        rep = self.tracker.update(now_s, counters)
        if rep.accepted:
            self._last = counters
            self._last_dict = counters if isinstance(counters, dict) else None
        return rep

    def rates(self, window_s: float | None = None) -> dict[str, IfRates]:
        return self.tracker.rates(window_s)

    def rates_table(self, window_s: float | None = None) -> RatesTable:
        return self.tracker.rates_table(window_s)
