"""The registry of the ``xtc`` command's parts (shared by :mod:`xtc.cli` and the parts that take
subcommands from other distributions, ``xtc policer`` and ``xtc xco``): which extra installs which
third-party module, the testbed's commands, and the commands that cannot run here.  Kept light (the
standard library only): every ``--help`` loads it."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ENTRY_POINT_GROUP = "xtc.commands"
#: The extra of the product that installs each third-party module an extra brings (pyproject.toml).
EXTRA_OF_MODULE = {
    "libvirt": "libvirt",
    "fastapi": "policer", "uvicorn": "policer", "httptools": "policer", "httpx": "policer",
    "psycopg": "policer", "psycopg_pool": "policer", "fastapi_offline": "policer", "starlette": "policer",
    "scipy": "training", "control": "training", "matplotlib": "training",
    "pyroute2": "net",
    "numba": "xco",
}
# Third-party packages that only an extra installs: a part that needs a missing one says which.
OPTIONAL_DEPENDENCIES = frozenset(EXTRA_OF_MODULE) | {"sqlalchemy"}
#: The commands the testbed (the ``xtc-lab`` distribution, lab/) adds, per entry point group:
#: without it each of them says so in one line.
LAB_COMMANDS = {
    ENTRY_POINT_GROUP: ("bench", "demo", "lab", "simulate"),
    "xtc.xco_commands": ("lab",),
    "xtc.policer_commands": ("bench",),
}
#: The one-line message of each command that cannot run here (an extra or the testbed missing), by its
#: words (``("xco", "lab")``); filled while the parser is built, read by :func:`main` before parsing.
UNAVAILABLE: dict[tuple[str, ...], str] = {}


def needs_extra(command: str, e: ModuleNotFoundError) -> str | None:
    """The one line saying which extra ``command`` (``"xtc policer serve"``) needs, if ``e`` is the
    import of a module that an extra of the product installs; else None."""
    top = (e.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    if extra == "net" and command.startswith("xtc xco"):
        extra = "xco-agent"
    return f"{command}: needs the {extra} extra (no module named {top!r}): pip install 'xtc[{extra}]'"


#: The command line being parsed (set by :func:`main`): a part may skip loading what that command
#: does not need (``xtc.xco.cli`` loads the testbed's ``xtc xco lab`` only for it).
ARGV: list[str] | None = None


def load_part(load: Callable[[], T]) -> T | ModuleNotFoundError:
    """``load()``, or the error when a part's optional dependency (an extra) is missing."""
    try:
        return load()
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in OPTIONAL_DEPENDENCIES:
            return e
        raise


def mark_unavailable(sub: argparse._SubParsersAction, words: tuple[str, ...], message: str, help_: str) -> None:
    """A command that cannot run here: listed with ``help_``; running it (``--help`` included) prints
    ``message``, one line, and exits 1 (:func:`main`)."""
    UNAVAILABLE[words] = message
    if words[-1] not in sub.choices:
        p = sub.add_parser(words[-1], help=help_, add_help=False)
        p.set_defaults(func=lambda _args: say(message))


def say(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def register_entry_points(sub: argparse._SubParsersAction, group: str, parent: tuple[str, ...] = (),
                          only: str | None = None) -> None:
    """Add the commands that other distributions register under ``group`` (the testbed's) to ``sub``,
    the actions of the command ``parent`` (``()``: ``xtc`` itself); ``only``: that one alone.

    A testbed command whose distribution is not installed (or whose modules need a missing extra)
    is still listed, and says so in one line when it is run.
    """
    prefix = " ".join(("xtc", *parent))
    found = set()
    for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        if (only is not None and ep.name != only) or ep.name in sub.choices:
            continue
        try:
            register = ep.load()
        except ModuleNotFoundError as e:  # registered, but its modules (or what they need) are not here
            message = (needs_extra(f"{prefix} {ep.name}", e)
                       or f"{prefix} {ep.name}: part of the testbed, not installed here (no module named "
                          f"{e.name!r}): pip install xtc-lab")
            mark_unavailable(sub, (*parent, ep.name), message, "(not installed: " + message.rsplit(": ", 1)[1] + ")")
        else:
            register(sub)
        found.add(ep.name)
    for name in LAB_COMMANDS.get(group, ()):
        if name not in found and (only is None or name == only) and name not in sub.choices:
            mark_unavailable(sub, (*parent, name), f"{prefix} {name}: part of the testbed: pip install xtc-lab",
                         "(not installed: pip install xtc-lab)")
