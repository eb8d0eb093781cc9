"""SIGTERM unwinds a testbed command like Ctrl-C, so that what it made is removed on the way out.

A lab run or a benchmark makes host objects (network namespaces, veth pairs, cgroups, libvirt
domains, temporary directories) and removes them in ``finally`` blocks and context managers.
Python's default action for SIGTERM ends the process where it stands, and none of those run: a
stopped ``xtc bench daemon`` left its namespaces behind.  :func:`unwinding` wraps a command
module's ``register`` so that each command it adds raises :class:`SystemExit` (status 128 + 15)
on SIGTERM while it runs, as Ctrl-C raises KeyboardInterrupt.

Only the testbed's commands: the product's services install their own handlers (a clean stop by
SIGTERM is theirs to define, e.g. uvicorn re-raises the signal it stopped for).

Public API
----------
unwinding
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["unwinding"]


#: The process that installed the handler: a child forked from it (pyroute2's network-namespace
#: helpers are) inherits the handler and must die by the signal as before, not unwind the parent's
#: stack in its own copy (it hung `xtc lab up` rebuilding a damaged lab).
_OWNER_PID = 0


def _terminated(signum: int, _frame: object) -> None:
    if os.getpid() != _OWNER_PID:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


def _unwinds(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(func)
    def run(args: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
            return func(args)
        global _OWNER_PID
        _OWNER_PID = os.getpid()
        before = signal.signal(signal.SIGTERM, _terminated)
        try:
            return func(args)
        finally:
            if signal.getsignal(signal.SIGTERM) is _terminated:
                signal.signal(signal.SIGTERM, before)

    run.unwinds = True  # type: ignore[attr-defined]
    return run


def _wrap_tree(parser: Any) -> None:
    func = parser.get_default("func")
    if func is not None and not getattr(func, "unwinds", False):
        parser.set_defaults(func=_unwinds(func))
    for action in parser._actions:  # argparse keeps a parser's subcommands as an action whose choices are parsers
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for sub in choices.values():
                _wrap_tree(sub)


def unwinding(register: Callable[[Any], None]) -> Callable[[Any], None]:
    """``register(subparsers)`` whose commands (and their subcommands) unwind on SIGTERM."""

    @functools.wraps(register)
    def wrapped(subparsers: Any) -> None:
        before = set(subparsers.choices)
        register(subparsers)
        for name in set(subparsers.choices) - before:
            _wrap_tree(subparsers.choices[name])

    return wrapped
