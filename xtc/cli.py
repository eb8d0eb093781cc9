"""The ``xtc`` command: one entry point with a subcommand per part of the project.

Each part registers its own subcommands through ``register(subparsers)`` in its
``cli`` module; the list below is the complete, fixed set of parts.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that provide ``register(subparsers)``.  Fixed here on purpose (no plugins).
_COMMAND_MODULES = (
    "xtc.sim.cli",  # xtc simulate ...
    "xtc.bench.cli",  # xtc bench control | daemon
    "xtc.daemon.cli",  # xtc daemon, xtc ctl, xtc check-config
    "xtc.lab.cli",  # xtc lab up | status | down | run
    "xtc.demo",  # xtc demo
    "training.cli",  # xtc train collect | fit | design | all
    "policer.cli",  # xtc policer serve ...
)


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
            # A part that is not built yet (or an optional dependency that is not installed).
            if e.name and (name.startswith(e.name) or e.name in ("libvirt", "fastapi", "uvicorn")):
                continue
            raise
        mod.register(sub)
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
