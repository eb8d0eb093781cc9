"""An object's state kept in a row of named numpy columns, read and written through properties.  Pure.

The controllers' bank (:mod:`xtc.control.bank`) keeps each controller's state, and its lag estimator's
(:mod:`xtc.control.estimate`), in columns with one row per controller, so that a period's law runs on
whole columns; an *attached* object (``_rows``, ``_row`` in its ``__dict__``) reads and writes its
attributes there (docs/design/control-law.md, "One law; where the state lives").
"""

from __future__ import annotations

import copy
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

__all__ = ["DTYPE", "Attached", "attach", "column_property", "new_columns", "object_column", "put_columns"]

#: Each kind's column: counts are Python ints (no overflow), an optional float (kind None) has a flag
#: column ``has_<column>``, ``object`` holds any value as it is.
DTYPE: dict[Any, Any] = {float: np.float64, None: np.float64, bool: bool, int: object, object: object}


def column_property(col: str, kind: Any) -> property:
    """An attribute kept in column ``col`` of the object's rows (``self._rows``, row ``self._row``),
    of kind ``kind`` (a key of :data:`DTYPE`)."""
    get_col = attrgetter(col)
    if kind is object:
        return property(lambda self: get_col(self._rows)[self._row],
                        lambda self, v: get_col(self._rows).__setitem__(self._row, v))
    if kind is not None:
        return property(lambda self: kind(get_col(self._rows)[self._row]),
                        lambda self, v: get_col(self._rows).__setitem__(self._row, v))
    get_has = attrgetter("has_" + col)

    def get(self: Any) -> float | None:
        rows = self._rows
        return get_col(rows)[self._row].item() if get_has(rows)[self._row] else None

    def put(self: Any, v: float | None) -> None:
        rows = self._rows
        get_has(rows)[self._row] = v is not None
        get_col(rows)[self._row] = 0.0 if v is None else v

    return property(get, put)


def new_columns(rows: Any, spec: tuple[tuple[str, str, Any], ...], objs: Sequence[Any]) -> None:
    """Give ``rows`` the columns of ``spec`` ((attribute, column, kind) each), one row per object of
    ``objs`` holding its attributes."""
    for _, col, kind in spec:
        setattr(rows, col, np.zeros(len(objs), dtype=DTYPE[kind]))
        if kind is None:
            setattr(rows, "has_" + col, np.zeros(len(objs), dtype=bool))
    put_columns(rows, spec, slice(None), objs)


def put_columns(rows: Any, spec: tuple[tuple[str, str, Any], ...], at: Any, objs: Sequence[Any]) -> None:
    """The attributes of ``objs`` written to the rows ``at`` (an index array or a slice) of the columns of
    ``spec`` of ``rows``."""
    for name, col, kind in spec:
        vals = list(map(attrgetter(name), objs))
        if kind is None:
            getattr(rows, "has_" + col)[at] = [v is not None for v in vals]
            vals = [0.0 if v is None else v for v in vals]
        getattr(rows, col)[at] = object_column(vals) if kind is object else vals


def object_column(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a column of objects, each one value (a tuple too, not a row of values)."""
    out = np.empty(len(values), dtype=object)
    for k, v in enumerate(values):
        out[k] = v
    return out


class Attached:
    """What a class of attached objects adds to its plain class ``_plain``: its columns ``_spec``
    ((attribute, column, kind) each) as properties (:func:`column_property`), and the copies: a copy
    (:func:`copy.copy`, :func:`copy.deepcopy`) is a plain object with the same state (the attributes
    ``_state``), and a plain copy copies the sub-objects ``_owned`` too (they have state of their own)."""

    _plain: type
    _spec: tuple[tuple[str, str, Any], ...] = ()
    _state: tuple[str, ...] = ()
    _owned: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, col, kind in cls._spec:
            setattr(cls, name, column_property(col, kind))

    def _detached(self, memo: dict[int, Any] | None) -> Any:
        cls = self._plain
        new = cls.__new__(cls)
        if memo is not None:
            memo[id(self)] = new
        d = {k: v for k, v in self.__dict__.items() if k not in ("_rows", "_row")}
        if memo is None:
            d.update({k: copy.deepcopy(d[k]) for k in self._owned if k in d})
        new.__dict__.update(d if memo is None else copy.deepcopy(d, memo))
        for name in self._state:
            setattr(new, name, getattr(self, name))  # floats, bools, ints and tuples of them: immutable
        return new

    def __copy__(self) -> Any:
        return self._detached(None)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self._detached(memo)


def attach(objs: Sequence[Any], rows: Any, row_cls: type[Attached]) -> None:
    """``objs[k]`` attached to row ``k`` of ``rows`` as a ``row_cls``: its state (``row_cls._state``,
    which the columns hold already) leaves its ``__dict__``."""
    for k, obj in enumerate(objs):
        d = obj.__dict__
        for name in row_cls._state:
            d.pop(name, None)
        obj.__class__ = row_cls
        d["_rows"], d["_row"] = rows, k
