"""The thread CPU inside named functions of a running program, counted only while switched on.

A measurement in place (the product's own loop, its own threads), not a micro-benchmark: each function named
``module:attribute`` (``xtc.policer.store:Store.record_outcomes``, ``xtc.policer.engine:plan_router``) is
replaced, in this process only, by a wrapper that reads the calling thread's CPU clock
(:func:`time.thread_time_ns`, about 1 us a read on the lab's host: about 2 us of every call's figure is the
timer's) before and after each call made while the timers are on, and adds the difference to the function's
total: what it spends itself and in what it calls, not the waits for a lock, the database or the interpreter
lock.  A function that calls itself, or another timed function, counts that time in both.

``python -m xtc_lab.policer_profile --time NAME ...`` switches them on for its unprofiled window's whole
cycles and reports each function's CPU per measurement beside the threads' (two results sessions of
2026-11-28 wrote this wrapper in their own scripts; those stay as they ran).
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Self

__all__ = ["FunctionTimers", "resolve"]

_MISSING = object()


def resolve(target: str) -> tuple[Any, str]:
    """``"package.module:Class.method"`` -> (the class, ``"method"``); ``"package.module:function"`` -> (the
    module, ``"function"``).  ValueError naming what is wrong: the form, a module that does not import, an
    attribute that is not there, or one that is not callable."""
    module_name, sep, path = target.partition(":")
    parts = path.split(".")
    if not sep or not module_name or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{target!r}: a function is named module:function or module:Class.method")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{target!r}: module {module_name!r} does not import ({e})") from None
    found = owner
    for k, p in enumerate(parts):
        owner, found = found, getattr(found, p, _MISSING)
        if found is _MISSING:
            raise ValueError(f"{target!r}: {module_name} has no {'.'.join(parts[:k + 1])}")
    if not callable(found):  # a bad name on a command line, not a caller's wrong type
        raise ValueError(f"{target!r}: {module_name}:{path} is not a function")  # noqa: TRY004
    return owner, parts[-1]


class FunctionTimers:
    """Wrappers that total the thread CPU of calls made while :meth:`start` ... :meth:`stop`; :meth:`restore`
    (or the end of a ``with`` block) puts the functions back.  Every name is resolved before any is replaced,
    so a bad one changes nothing."""

    def __init__(self, targets: Iterable[str], clock: Callable[[], int] = time.thread_time_ns) -> None:
        owners = [(t, *resolve(t)) for t in targets]
        self._on = threading.Event()
        self._clock = clock
        self._lock = threading.Lock()
        self._totals: dict[str, list[int]] = {t: [0, 0] for t, _, _ in owners}  # calls, ns
        self._saved: list[tuple[Any, str, Any]] = []
        for target, owner, name in owners:
            # the owner's own attribute as it is (a staticmethod or classmethod object; _MISSING where inherited),
            # to put back as it was
            own = vars(owner).get(name, _MISSING)
            self._saved.append((owner, name, own))
            if isinstance(own, (staticmethod, classmethod)):
                setattr(owner, name, type(own)(self._wrap(target, own.__func__)))
            else:
                setattr(owner, name, self._wrap(target, getattr(owner, name)))

    def _wrap(self, target: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        on, clock, lock, total = self._on, self._clock, self._lock, self._totals[target]

        def timed(*a: Any, **kw: Any) -> Any:
            if not on.is_set():
                return fn(*a, **kw)
            t0 = clock()
            try:
                return fn(*a, **kw)
            finally:
                ns = clock() - t0
                with lock:
                    total[0] += 1
                    total[1] += ns

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def start(self) -> None:
        self._on.set()

    def stop(self) -> None:
        self._on.clear()

    def restore(self) -> None:
        """The functions as they were (the timers off)."""
        self.stop()
        for owner, name, original in reversed(self._saved):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved.clear()

    def figures(self, measurements: int) -> dict[str, dict[str, float | int | None]]:
        """Each function's calls while on, its us a call and us a measurement (of ``measurements``: the work
        done while on; None where there were no calls or no measurements)."""
        with self._lock:
            totals = {t: tuple(v) for t, v in self._totals.items()}
        return {t: {"calls": c,
                    "us_per_call": round(ns / c / 1000, 2) if c else None,
                    "us_per_measurement": round(ns / measurements / 1000, 2) if measurements else None}
                for t, (c, ns) in totals.items()}
