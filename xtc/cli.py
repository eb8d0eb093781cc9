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

# The product's parts, each a module with ``register(subparsers)``, and the commands it adds.
_COMMAND_MODULES = {
    "xtc.daemon.cli": ("daemon", "ctl", "check-config"),
    "xtc.training.cli": ("train",),  # collect | fit | design | all
    "xtc.policer.cli": ("policer",),
    "xtc.xco.cli": ("xco",),  # replay | check-config | controller | agent (+ xtc.xco_commands)
}
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


#: The command line being parsed (set by :func:`main`): a part may skip loading what that command
#: does not need (``xtc.xco.cli`` loads the testbed's ``xtc xco lab`` only for it).
ARGV: list[str] | None = None


def _load(load: Callable[[], T]) -> T | None:
    """``load()``, or None when a part's optional dependency (an extra) is not installed."""
    try:
        return load()
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in _OPTIONAL_DEPENDENCIES:
            return None
        raise


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``xtc`` parser: every part's commands, or (``command``) only the part that has it.

    Building every part imports each one's modules (the training part imports numpy, scipy,
    matplotlib: seconds on a loaded host), so :func:`main` builds only the part of the command
    it runs, and everything only for ``xtc --help`` or an unknown command.
    """
    from xtc import __version__

    parser = argparse.ArgumentParser(
        prog="xtc",
        description="XTC: hold each virtual router at a packet-rate setpoint by adjusting only its CPU cap.",
    )
    parser.add_argument("--version", action="version", version=f"xtc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands in _COMMAND_MODULES.items():
        if command is not None and command not in commands:
            continue
        mod = _load(lambda name=name: importlib.import_module(name))
        if mod is not None:
            mod.register(sub)
    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    for ep in eps:
        # an entry point's name is the command it adds
        if command is not None and (ep.name != command or command in sub.choices):
            continue
        register = _load(ep.load)
        if register is not None:
            register(sub)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (its first argument not an option), if any."""
    for a in argv:
        if not a.startswith("-"):
            return a
        if a in ("-h", "--help", "--version"):
            return None
    return None


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return {c for a in parser._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # run as ``python -m xtc.cli`` this module is __main__, and the parts import xtc.cli again
    importlib.import_module("xtc.cli").ARGV = argv
    globals()["ARGV"] = argv
    command = _command_of(argv)
    parser = build_parser(command) if command is not None else None
    if parser is None or command not in _commands(parser):
        parser = build_parser()  # help, an unknown command (argparse names the choices), or a part left out
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
