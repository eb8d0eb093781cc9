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
from collections.abc import Iterator, Sequence
from functools import partial
from operator import is_not
from typing import Any

import orjson

from xtc.daemon.api import (
    SAMPLES_SCHEMA,
    SAMPLES_TOPIC,
    reject_json_constant,
    unique_json_keys,
)

from .link import VR_PATTERN

__all__ = ["SampleRows", "decode_rows"]

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
    """

    __slots__ = (
        "_dicts",
        "cap_percent",
        "forwarded_pps",
        "names",
        "offered_pps",
        "present",
        "saturated",
        "setpoint_pps",
        "state",
    )

    def __init__(self, names: tuple[str, ...], state: tuple[str, ...], present: tuple[bool, ...],
                 setpoint_pps: tuple[float | None, ...], forwarded_pps: tuple[float | None, ...],
                 offered_pps: tuple[float | None, ...], cap_percent: tuple[float | None, ...],
                 saturated: tuple[str | None, ...]):
        self.names = names
        self.state = state
        self.present = present
        self.setpoint_pps = setpoint_pps
        self.forwarded_pps = forwarded_pps
        self.offered_pps = offered_pps
        self.cap_percent = cap_percent
        self.saturated = saturated
        self._dicts: list[dict[str, Any]] | None = None

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
