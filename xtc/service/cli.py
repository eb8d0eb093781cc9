"""What every service's command line shares (docs/reference/cli-conventions.md): the one setpoint
parser and the ``check-config`` reporting helper.  Kept light (no third-party import): every
``--help`` loads it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import TypeVar

__all__ = ["CHECK_INVALID", "CHECK_USAGE", "CHECK_VALID", "load_or_report", "parse_setpoint", "readable_or_report"]

T = TypeVar("T")


def parse_setpoint(text: str, prog: str = "xtc ctl") -> float:
    """``"20000"``, ``"20k"`` or ``"2.5m"`` -> packets/s (validation of the value is the service's job).

    The suffix scales the decimal number as written (``"32.3k"`` is 32300.0, not the binary float
    32.3 times 1000, 32299.999999999996).  Not a number: SystemExit naming ``prog`` and the text.
    """
    t = text.strip().lower()
    scale = 1
    if t.endswith("k"):
        t, scale = t[:-1], 1000
    elif t.endswith("m"):
        t, scale = t[:-1], 1_000_000
    try:
        return float(Decimal(t) * scale)
    except (InvalidOperation, ValueError):
        raise SystemExit(f"{prog}: setpoint {text!r} is not a number of packets/s (e.g. 20000 or 20k)") from None


def load_or_report(load: Callable[[], T], errors: type[Exception] | tuple[type[Exception], ...],
                   prog: str) -> T | None:
    """``load()``, or None after printing ``prog: error`` to stderr if it raises one of ``errors``.

    For the ``check-config`` commands: the caller returns its own exit status on None.
    """
    try:
        return load()
    except errors as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


#: ``check-config``'s exit statuses, the same in every service (docs/reference/cli-conventions.md).
CHECK_VALID, CHECK_INVALID, CHECK_USAGE = 0, 1, 2


def readable_or_report(path: str, prog: str) -> bool:
    """True if ``path`` is a file this process can read, else False after printing why, naming the
    file (``check-config`` then exits :data:`CHECK_USAGE`: there is nothing to validate)."""
    try:
        with open(path, "rb"):
            return True
    except OSError as e:
        print(f"{prog}: cannot read {path}: {e.strerror or e}", file=sys.stderr)
        return False
