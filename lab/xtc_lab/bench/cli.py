"""``xtc bench ...``: benchmarks.  Each benchmark module provides ``add_<name>(sub)``.

To add a benchmark: import its ``add_<name>`` and append it to ``_ADDERS``.
"""

from __future__ import annotations

from typing import Any, Callable

from xtc_lab.unwind import unwinding
from xtc_lab.xco.bench import add_xco

from .control_bench import add_control
from .daemon_bench import add_daemon

__all__ = ["register"]

# One entry per ``xtc bench`` subcommand.
_ADDERS: list[Callable[[Any], None]] = [add_control, add_daemon, add_xco]


@unwinding
def register(subparsers: Any) -> None:
    """Add ``bench`` and its subcommands to the ``xtc`` command."""
    p = subparsers.add_parser("bench", help="benchmarks (control: controllers on the simulated plant)",
                               epilog="example: xtc bench control --controllers xtc --out /tmp/ctl --quiet")
    sub = p.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    for add in _ADDERS:
        add(sub)
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])
