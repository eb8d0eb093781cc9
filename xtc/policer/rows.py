"""A daemon's ``samples`` message decoded straight into columns: one pass per field, none per VR.

:func:`decode_rows` is the fast path of :func:`xtc.policer.samples.parse_samples` (which stays the
definition of a valid message and the source of its error messages): it decodes the body (strict
JSON, as there), transposes the rows into one tuple per field (``zip``, in C), and checks each field
over the whole column at once (the types a column holds as one set; the states, flags and names
against their sets; the numbers by one sum (an infinite one, or an integer beyond a float, refused); the VR
names by one regular expression over the names joined by newlines, which no name may hold).  A
message that passes is exactly one :func:`~xtc.policer.samples.parse_samples` accepts, with the same
values (tests/policer/test_policer_rows.py checks that on random and mutated messages); for any
other, :func:`decode_rows` returns None and the caller asks :func:`~xtc.policer.samples.parse_samples`,
which refuses it with its one clear error (or, for a message only the fast path declines, such as
``xtc-samples/1``, decodes it per VR).

What the JSON wire still costs per VR: the decoder makes a list per row and an object per value (in
C); the columns are tuples of those values.  No Python code runs per VR, and no dictionary is made
per VR unless a consumer iterates the rows as dictionaries (:meth:`SampleRows.__iter__`, the rare
paths: a lost reply's confirmation).  The body is read by orjson when it is written as a daemon writes
it, by the standard library otherwise (:func:`_strict_json`).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator, Sequence
from functools import partial
from operator import is_not
from typing import Any

import numpy as np
import orjson

from xtc.daemon.api import (
    SAMPLES_SCHEMA,
    SAMPLES_SCHEMA_V3,
    SAMPLES_TOPIC,
    V3_LAYOUT,
    V3_NUMBERS,
    V3_SATURATED,
    V3_STATES,
    reject_json_constant,
    unique_json_keys,
)

from .link import VR_PATTERN, BadReply

__all__ = ["SampleRows", "V3Memory", "decode_rows", "decode_v3"]

_STATES = frozenset(("inactive", "active", "paused"))
_SATURATED = frozenset((None, "cap_max", "cap_min", "cap_slack"))
_REQUIRED = ("vr", "state", "setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "original_cap_percent")
_NUMBERS = ("setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "original_cap_percent")
_NONE = type(None)
_not_none = partial(is_not, None)
_NUMBER_TYPES = frozenset((float, int, _NONE))
_STR = frozenset((str,))
_STR_OR_NONE = frozenset((str, _NONE))
_BOOL_OR_NONE = frozenset((bool, _NONE))
_LIST = frozenset((list,))
# Every name, each followed by a newline (which the name pattern excludes): one match for the column.
assert VR_PATTERN.startswith("^") and VR_PATTERN.endswith("$")
_NAMES = re.compile("(?:" + VR_PATTERN[1:-1] + "\n)*")
#: The members of a VR as :func:`~xtc.policer.samples.parse_samples` gives it, in its order.
ROW_KEYS = ("vr", "state", "present", "setpoint_pps", "forwarded_pps", "offered_pps", "cap_percent", "saturated")


class SampleRows(Sequence[dict[str, Any]]):
    """The VRs of one sample message as columns (tuples, in the message's order; None: missing).

    As a sequence it is the list of dictionaries :func:`~xtc.policer.samples.parse_samples` gives (made
    when first asked for, once); the engine and the store read the columns.

    A message that came as arrays (``xtc-samples/3``, :meth:`from_grid`) keeps its numbers there and makes
    the tuples of ``setpoint_pps``, ``forwarded_pps``, ``offered_pps`` and ``cap_percent`` only when one is
    asked for (a tuple of 16 floats is about 550 bytes, and the engine holds a router's newest sample and
    its last recorded one); :meth:`same_numbers` compares two messages' columns without making them.
    """

    __slots__ = (
        "_cols",
        "_dicts",
        "_grid",
        "_nulls",
        "arrays",
        "names",
        "present",
        "saturated",
        "state",
    )

    def __init__(self, names: tuple[str, ...], state: tuple[str, ...], present: tuple[bool, ...],
                 setpoint_pps: tuple[float | None, ...], forwarded_pps: tuple[float | None, ...],
                 offered_pps: tuple[float | None, ...], cap_percent: tuple[float | None, ...],
                 saturated: tuple[str | None, ...]):
        self.names = names
        self.state = state
        self.present = present
        #: setpoint_pps, forwarded_pps, offered_pps, cap_percent (None: not made yet, from ``_grid``)
        self._cols: list[tuple[float | None, ...] | None] = [setpoint_pps, forwarded_pps, offered_pps, cap_percent]
        self.saturated = saturated
        self._dicts: list[dict[str, Any]] | None = None
        #: The numbers as a (columns, VRs) float64 array and each column's missing places (``xtc-samples/3``).
        self._grid: Any = None
        self._nulls: tuple[tuple[int, ...], ...] = ()
        #: The live table's columns as arrays, when the message came as them (``xtc-samples/3``):
        #: ``forwarded_pps``, ``offered_pps``, ``cap_percent`` (float64, NaN: missing) and the saturation
        #: codes (uint8, :data:`xtc.policer.live.SATURATION_CODES`' order); None otherwise.
        self.arrays: tuple[Any, Any, Any, Any] | None = None

    @classmethod
    def from_grid(cls, names: tuple[str, ...], state: tuple[str, ...], present: tuple[bool, ...], grid: Any,
                  nulls: tuple[tuple[int, ...], ...], saturated: tuple[str | None, ...]) -> SampleRows:
        """The columns of a message whose numbers are ``grid`` (a ``(columns, VRs)`` float64 array: setpoint,
        forwarded, offered, cap percent first), ``nulls[j]`` the places of column ``j``'s missing values."""
        out = cls(names, state, present, None, None, None, None, saturated)  # type: ignore[arg-type]
        out._grid, out._nulls = grid, nulls
        return out

    def _col(self, j: int) -> tuple[float | None, ...]:
        got = self._cols[j]
        if got is None:
            col = self._grid[j].tolist()
            if j < len(self._nulls):
                for i in self._nulls[j]:
                    col[i] = None
            got = self._cols[j] = tuple(col)
        return got

    @property
    def setpoint_pps(self) -> tuple[float | None, ...]:
        return self._col(0)

    @property
    def forwarded_pps(self) -> tuple[float | None, ...]:
        return self._col(1)

    @property
    def offered_pps(self) -> tuple[float | None, ...]:
        return self._col(2)

    @property
    def cap_percent(self) -> tuple[float | None, ...]:
        return self._col(3)

    def same_numbers(self, other: SampleRows, columns: tuple[int, ...]) -> bool:
        """Whether ``other`` holds the same values in these columns (0: setpoint_pps, 1: forwarded_pps,
        2: offered_pps, 3: cap_percent).  Two messages of arrays are compared as bytes with their missing
        places (a value -0.0 against 0.0 then differs: said different, never the same when not); else the
        tuples."""
        if self._grid is not None and other._grid is not None and len(self.names) == len(other.names):
            sn, on = self._nulls, other._nulls
            for j in columns:
                if (sn[j] if j < len(sn) else ()) != (on[j] if j < len(on) else ()):
                    return False
                if self._grid[j].tobytes() != other._grid[j].tobytes():
                    return False
            return True
        return all(self._col(j) == other._col(j) for j in columns)

    @classmethod
    def from_dicts(cls, vrs: Sequence[dict[str, Any]]) -> SampleRows:
        """The columns of VRs as :func:`~xtc.policer.samples.parse_samples` gives them."""
        if not vrs:
            return cls((), (), (), (), (), (), (), ())
        cols = list(zip(*([v[k] for k in ROW_KEYS] for v in vrs)))
        out = cls(*cols)
        out._dicts = list(vrs)
        return out

    def dicts(self) -> list[dict[str, Any]]:
        if self._dicts is None:
            self._dicts = [dict(zip(ROW_KEYS, r)) for r in zip(
                self.names, self.state, self.present, self.setpoint_pps, self.forwarded_pps, self.offered_pps,
                self.cap_percent, self.saturated)]
        return self._dicts

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: Any) -> Any:
        return self.dicts()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.dicts())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleRows):
            return self.dicts() == other.dicts()
        if isinstance(other, list):
            return self.dicts() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SampleRows({self.dicts()!r})"


_EMPTY = SampleRows((), (), (), (), (), (), (), ())


def _floats(col: tuple[Any, ...]) -> tuple[float | None, ...] | None:
    """A column of JSON numbers or nulls as floats (None kept), or None if one is not a finite number.

    One sum over the column (in C) says whether every value is finite: an infinite one (``1e999``) makes
    it infinite, an integer beyond a float makes ``isfinite`` overflow.  (Finite values whose sum
    overflows are declined too, and left to the per-VR path.)  A column of floats and nulls is kept as
    it is; integers are converted."""
    kinds = set(map(type, col))
    if not kinds <= _NUMBER_TYPES:
        return None  # a bool, a string, a list...
    try:
        if not math.isfinite(sum(filter(_not_none, col)) if _NONE in kinds else sum(col)):
            return None
    except OverflowError:  # an integer beyond a float
        return None
    if int not in kinds:
        return col
    return tuple(None if x is None else float(x) for x in col)


def _strict_json(body: bytes) -> Any:
    """``body``'s JSON document read strictly (no NaN or infinity, no member twice), as
    :func:`~xtc.policer.samples.parse_samples` reads it; raises ValueError (or RecursionError).

    orjson reads it (about 3 us for 16 VRs, against 19 us for the standard library with the hook that
    refuses a member written twice) when the body is exactly orjson's own writing of what it read: what a
    daemon sends (:func:`xtc.daemon.api.encode`).  orjson takes a member written twice (the last one), but
    its writing of a document holds each member once, so a body equal to it holds none twice; and it
    refuses NaN and the infinities, as the strict reading does.  Any other body (written otherwise, or
    one orjson refuses) is read by the standard library as before."""
    try:
        doc = orjson.loads(body)
        if orjson.dumps(doc) == body:
            return doc
    except (orjson.JSONDecodeError, TypeError):
        pass
    return json.loads(body, parse_constant=reject_json_constant, object_pairs_hook=unique_json_keys)


def decode_rows(frames: list[bytes], max_vrs: int, max_bytes: int) -> SampleRows | None:
    """The VRs of a valid ``xtc-samples/2`` message as columns, or None when it is not one this fast path
    takes (then :func:`~xtc.policer.samples.parse_samples` decides, and says why it refuses it).

    Parameters
    ----------
    frames : list of bytes
        The message's frames (topic, body).
    max_vrs : int
        Most rows accepted.
    max_bytes : int
        Largest body accepted, bytes.
    """
    if len(frames) != 2 or frames[0] != SAMPLES_TOPIC or len(frames[1]) > max_bytes:
        return None
    try:
        doc = _strict_json(frames[1])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if type(doc) is not dict or doc.get("schema") != SAMPLES_SCHEMA:
        return None
    fields, rows, period = doc.get("fields"), doc.get("vrs"), doc.get("period_s")
    if type(fields) is not list or type(rows) is not list or len(rows) > max_vrs:
        return None
    if type(period) is not float or not math.isfinite(period) or not period > 0:
        return None  # (an integer period, as rare as it is harmless, goes the per-VR way)
    if not set(map(type, fields)) <= _STR:
        return None
    at = {f: i for i, f in enumerate(fields)}
    if len(at) != len(fields) or not all(f in at for f in _REQUIRED):
        return None
    if not rows:
        return _EMPTY
    if set(map(type, rows)) != _LIST or set(map(len, rows)) != {len(fields)}:
        return None
    cols = list(zip(*rows))
    names = cols[at["vr"]]
    if set(map(type, names)) != _STR or len(set(names)) != len(names):
        return None
    joined = "\n".join(names) + "\n"
    if joined.count("\n") != len(names) or not _NAMES.fullmatch(joined):
        return None
    state = cols[at["state"]]
    if set(map(type, state)) != _STR or not set(state) <= _STATES:
        return None
    if "present" in at:
        pres = cols[at["present"]]
        if not set(map(type, pres)) <= _BOOL_OR_NONE:
            return None
        present = pres if None not in pres else tuple(True if p is None else p for p in pres)
    else:
        present = (True,) * len(names)
    if "saturated" in at:
        sat = cols[at["saturated"]]
        if not set(map(type, sat)) <= _STR_OR_NONE or not set(sat) <= _SATURATED:
            return None
    else:
        sat = (None,) * len(names)
    if "actuation_error" in at and not set(map(type, cols[at["actuation_error"]])) <= _STR_OR_NONE:
        return None
    nums = {}
    for k in _NUMBERS:
        got = _floats(cols[at[k]])
        if got is None:
            return None
        nums[k] = got
    return SampleRows(names, state, present, nums["setpoint_pps"], nums["forwarded_pps"], nums["offered_pps"],
                      nums["cap_percent"], sat)


# ------------------------------------------------------------------------------------ xtc-samples/3
_V3_STATES = tuple(V3_STATES)
_V3_SAT = tuple(V3_SATURATED)
_V3_K = len(V3_NUMBERS)
_V3_HEADER_MAX = 4096  # a header holds five numbers (and, rarely, the VRs' actuation errors)
_FINITE_NUMBER = (float, int)
_least, _most = np.minimum.reduce, np.maximum.reduce
_BELOW_7F = bytes(range(0x7F))


class V3Memory:
    """What :func:`decode_v3` keeps of a router's last valid ``xtc-samples/3`` message: its names and codes
    and what they decoded to (decoded again only when their bytes change), its body and the rest of its
    header after the time, and its VRs (a message equal to it but for its time gives the very same VRs)."""

    __slots__ = ("body", "codes", "codes_b", "errors", "head_rest", "names", "names_b", "nulls", "vrs")

    def __init__(self, names_b: bytes, names: tuple[str, ...], codes_b: bytes,
                 codes: tuple[tuple[str, ...], tuple[bool, ...], tuple[str | None, ...]],
                 nulls: tuple[tuple[int, ...], ...]):
        self.names_b, self.names, self.codes_b, self.codes, self.nulls = names_b, names, codes_b, codes, nulls
        self.body = b""
        self.head_rest: bytes | None = None
        self.errors: dict[str, str] | None = None  # the header's 'actuation_errors'
        self.vrs: SampleRows | None = None


#: The start of a header as the daemon writes it (its schema, then its time: a plain decimal number, always
#: finite), for the message equal to the last but for its time (as :func:`~xtc.policer.samples.parse_newer`).
_TIMED_V3 = re.compile(rb'\{"schema":' + re.escape(json.dumps(SAMPLES_SCHEMA_V3).encode())
                       + rb',"t_unix_s":-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,20})?,')


def _bad(why: str) -> BadReply:
    return BadReply(f"an {SAMPLES_SCHEMA_V3} message {why}")


def _v3_header(head: bytes, max_vrs: int) -> tuple[int, dict[str, str] | None]:
    """An ``xtc-samples/3`` header's number of VRs and actuation errors (None: none), the header checked whole."""
    try:
        doc = _strict_json(head)  # (orjson for a header as the daemon writes it, as for /2's body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise _bad(f"whose header is not strict JSON: {str(e)[:200]}") from None
    if type(doc) is not dict or doc.get("schema") != SAMPLES_SCHEMA_V3:
        raise _bad(f"whose header does not say schema {SAMPLES_SCHEMA_V3!r}")
    layout, n, period, t = doc.get("layout"), doc.get("vrs"), doc.get("period_s"), doc.get("t_unix_s")
    if type(layout) is not int or layout != V3_LAYOUT:
        raise _bad(f"of layout {str(layout)[:20]!r} (this reader knows layout {V3_LAYOUT})")
    if type(n) is not int or not 0 <= n <= max_vrs:
        raise _bad(f"of {str(n)[:20]} VRs (0 to {max_vrs} accepted per router)")
    for what, x in (("period_s", period), ("t_unix_s", t)):
        try:
            ok = type(x) in _FINITE_NUMBER and math.isfinite(x) and (what != "period_s" or x > 0)
        except OverflowError:  # an integer beyond a float
            ok = False
        if not ok:
            raise _bad(f"without a {'positive ' if what == 'period_s' else ''}finite {what!r}")
    errors = doc.get("actuation_errors")
    if errors is not None and (type(errors) is not dict or not set(map(type, errors.values())) <= _STR):
        raise _bad("whose 'actuation_errors' is not an object of strings")
    return n, errors


def decode_v3(frames: list[bytes], max_vrs: int, max_bytes: int,
              last: V3Memory | None = None) -> tuple[SampleRows, V3Memory]:
    """The VRs of a valid ``xtc-samples/3`` message (:func:`xtc.daemon.api.samples_message_v3`) as columns.

    The numbers are read with one :func:`numpy.frombuffer` and checked over the whole message at once
    (every value finite and not negative: each number's top byte below 0x7F, one slice and one translate;
    else one minimum and one maximum); the header, the names and the codes are decoded only when their
    bytes differ from the router's last valid message's (``last``: the header but for its time, a VR set
    and its states and flags change rarely; the check is a comparison of bytes); a message equal to the
    last one but for its time gives its very VRs without decoding anything (as
    :func:`~xtc.policer.samples.parse_newer` does for /2: the store and the engine then skip what they
    did for them already).  No Python code runs per VR
    but where a column holds missing values (their places come from the codes, kept with them).

    Parameters
    ----------
    frames : list of bytes
        The message's frames (topic, header, body).
    max_vrs : int
        Most VRs accepted.
    max_bytes : int
        Largest message accepted (all its frames), bytes.
    last : V3Memory, optional
        What this returned second for the router's last valid message.

    Returns
    -------
    vrs, memory
        The VRs, and what to pass as ``last`` next time.

    Raises
    ------
    BadReply
        Not a valid message (wrong frames or lengths, an unknown layout, too many VRs, a bad name,
        state or flag, a number that is NaN, infinite or negative), saying which, never echoing the input.
    """
    if len(frames) != 3 or frames[0] != SAMPLES_TOPIC:
        raise _bad(f"of {len(frames)} frame(s) (the topic {SAMPLES_TOPIC.decode()!r}, a header and a body expected)")
    _, head, body = frames
    size = len(head) + len(body)
    if size > max_bytes or len(head) > _V3_HEADER_MAX:
        raise _bad(f"of {size} bytes (at most {max_bytes}, a header of at most {_V3_HEADER_MAX})")
    m = _TIMED_V3.match(head)
    rest = head[m.end():] if m is not None else None
    if last is not None and rest is not None and rest == last.head_rest and last.vrs is not None:
        if body == last.body:
            return last.vrs, last  # the last valid message again but for its time: the very same VRs
        # The last valid header but for its time (a plain finite number: the pattern), so valid as that one
        # was, with its number of VRs and its errors: not decoded again.
        n, errors = len(last.names), last.errors
    else:
        n, errors = _v3_header(head, max_vrs)
    fixed = (8 * _V3_K + 4) * n
    if len(body) < fixed + 2 * n:  # the numbers, the codes, and names of at least one character and a newline
        raise _bad(f"of {n} VRs with a body of {len(body)} bytes (at least {fixed + 2 * n} expected)")
    codes_b, names_b = body[8 * _V3_K * n:fixed], body[fixed:]
    if last is not None and names_b == last.names_b:
        names = last.names
    else:
        try:
            text = names_b.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("whose names are not UTF-8") from None
        if text.count("\n") != n or (n and not text.endswith("\n")) or not _NAMES.fullmatch(text):
            raise _bad(f"whose names are not {n} VR names matching {VR_PATTERN}, each ended by a newline")
        # (interned: the engine keeps a VR's name from its samples, its kept row and its last 'list' once)
        names = tuple(map(sys.intern, text.split("\n")[:-1])) if n else ()
        if len(set(names)) != n:
            raise _bad("that names a VR twice")
    if errors and not set(errors) <= set(names):
        raise _bad("whose 'actuation_errors' names a VR it does not list")
    if last is not None and codes_b == last.codes_b:
        codes, nulls = last.codes, last.nulls
    else:
        st, pr, sa, mi = codes_b[:n], codes_b[n:2 * n], codes_b[2 * n:3 * n], codes_b[3 * n:]
        if st.translate(None, b"\x00\x01\x02") or pr.translate(None, b"\x00\x01") \
                or sa.translate(None, b"\x00\x01\x02\x03") or (n and max(mi) >= 1 << _V3_K):
            raise _bad("with a state, presence, saturation or missing-value code it does not define")
        codes = (tuple(map(_V3_STATES.__getitem__, st)), tuple(map(bool, pr)), tuple(map(_V3_SAT.__getitem__, sa)))
        nulls = tuple(tuple(i for i, m in enumerate(mi) if m & (1 << j)) if any(m & (1 << j) for m in mi) else ()
                      for j in range(_V3_K))
    mem = V3Memory(names_b, names, codes_b, codes, nulls)
    mem.errors = errors
    if not n:
        mem.body, mem.head_rest, mem.vrs = body, rest, _EMPTY
        return _EMPTY, mem
    nums = np.frombuffer(body, "<f8", _V3_K * n)
    # A little-endian float64's last byte holds its sign and the top of its exponent: below 0x7F in every
    # number, each is finite and not negative (one slice and one translate, in C); else the arrays' check.
    if body[7:8 * _V3_K * n:8].translate(None, _BELOW_7F) and not (_least(nums) >= 0.0 and _most(nums) < math.inf):
        raise _bad("with a number that is NaN, infinite or negative")  # (NaN fails both)
    grid = nums.reshape(_V3_K, n)  # (a view of the body: the columns' tuples are made when asked for)
    live = grid[1:4]  # forwarded_pps, offered_pps, cap_percent
    for j, where in enumerate(nulls):
        if where and 1 <= j <= 3:
            if live.base is not None:
                live = live.copy()
            live[j - 1, list(where)] = math.nan
    out = SampleRows.from_grid(names, codes[0], codes[1], grid, nulls, codes[2])
    out.arrays = (live[0], live[1], live[2], np.frombuffer(codes_b, np.int8, n, 2 * n))
    mem.body, mem.head_rest, mem.vrs = body, rest, out
    return out, mem
