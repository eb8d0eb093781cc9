"""The ``xtc`` command: one entry point with a subcommand per part of the project.

Each part registers its own subcommands through ``register(subparsers)`` in its ``cli`` module.
The product's parts are listed below; the testbed beside it (:mod:`xtc_lab`: ``xtc lab``,
``xtc simulate``, ``xtc bench``, ``xtc demo``) adds its commands through the ``xtc.commands``
entry points of the installed distribution, so the product never imports it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TypeVar

T = TypeVar("T")

# The product's parts, each a module with ``register(subparsers)``.
_COMMAND_MODULES = (
    "xtc.daemon.cli",  # xtc daemon, xtc ctl, xtc check-config
    "xtc.training.cli",  # xtc train collect | fit | design | all
    "xtc.policer.cli",  # xtc policer serve ...
    "xtc.xco.cli",  # xtc xco replay | check-config
)
ENTRY_POINT_GROUP = "xtc.commands"
# Third-party packages that only an extra installs: a part that needs a missing one is left out.
_OPTIONAL_DEPENDENCIES = frozenset({"libvirt", "fastapi", "uvicorn", "matplotlib", "scipy", "control",
                                    "pyroute2", "httpx", "sqlalchemy"})


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


def build_parser() -> argparse.ArgumentParser:
    from xtc import __version__

    parser = argparse.ArgumentParser(
        prog="xtc",
        description="XTC: hold each virtual router at a packet-rate setpoint by adjusting only its CPU cap.",
    )
    parser.add_argument("--version", action="version", version=f"xtc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            # A part whose optional dependencies (an extra) are not installed.
            if e.name and e.name.split(".")[0] in _OPTIONAL_DEPENDENCIES:
                continue
            raise
        mod.register(sub)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            register = ep.load()
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] in _OPTIONAL_DEPENDENCIES:
                continue
            raise
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
