"""The ``xtc`` command: one entry point with a subcommand per part of the project.

Each part registers its own subcommands through ``register(subparsers)`` in its ``cli`` module.
The product's parts are listed below; the testbed beside it (:mod:`xtc_lab`: ``xtc lab``,
``xtc simulate``, ``xtc bench``, ``xtc demo``) adds its commands through the ``xtc.commands``
entry points of the installed distribution, so the product never imports it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from typing import TypeVar

from xtc import __version__

T = TypeVar("T")

# The product's parts, each a module with ``register(subparsers)``, and the commands it adds.
_COMMAND_MODULES = {
    "xtc.daemon.cli": ("daemon", "ctl", "check-config"),
    "xtc.training.cli": ("train",),  # collect | fit | design | all
    "xtc.policer.cli": ("policer",),  # (+ xtc.policer_commands)
    "xtc.xco.cli": ("xco",),  # replay | check-config | controller | agent (+ xtc.xco_commands)
}
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
_OPTIONAL_DEPENDENCIES = frozenset(EXTRA_OF_MODULE) | {"sqlalchemy"}
#: The commands the testbed (the ``xtc-lab`` distribution, lab/) adds, per entry point group:
#: without it each of them says so in one line.
LAB_COMMANDS = {
    ENTRY_POINT_GROUP: ("bench", "demo", "lab", "simulate"),
    "xtc.xco_commands": ("lab",),
    "xtc.policer_commands": ("bench",),
}
#: One example per command and action, shown by its ``--help`` (the testbed's commands carry their own).
EXAMPLES = {
    ("daemon",): "xtc daemon -c /etc/xtc/xtc-daemon.toml",
    ("check-config",): "xtc check-config --json /etc/xtc/xtc-daemon.toml",
    ("ctl",): "xtc ctl -c /etc/xtc/xtc-daemon.toml status",
    ("ctl", "status"): "xtc ctl status vr1",
    ("ctl", "ping"): "xtc ctl ping",
    ("ctl", "activate"): "xtc ctl activate vr1 20k",
    ("ctl", "deactivate"): "xtc ctl deactivate vr1",
    ("ctl", "pause"): "xtc ctl pause vr1",
    ("ctl", "resume"): "xtc ctl resume vr1",
    ("ctl", "setpoint"): "xtc ctl setpoint vr1 25k",
    ("ctl", "watch"): "xtc ctl watch vr1 --count 10",
    ("ctl", "schema"): "xtc ctl schema > manager-api.schema.json",
    ("train",): "xtc train all --backend sim --out-dir out/model",
    ("train", "collect"): "xtc train collect --backend libvirt --domain vr1 --out sweep.csv",
    ("train", "fit"): "xtc train fit sweep.csv",
    ("train", "design"): "xtc train design sweep.csv --out model.toml",
    ("train", "all"): "xtc train all --backend sim --out-dir out/model",
    ("policer",): "xtc policer serve -c /etc/xtc/policer.toml",
    ("policer", "serve"): "xtc policer serve -c /etc/xtc/policer.toml",
    ("policer", "check-config"): "xtc policer check-config --json /etc/xtc/policer.toml",
    ("policer", "openapi"): "xtc policer openapi > policer-openapi.json",
    ("policer", "keygen"): "xtc policer keygen /etc/xtc/curve policer",
    ("policer", "routers"): "xtc policer routers --token-file /etc/xtc/policer.token",
    ("policer", "router-add"): "xtc policer router-add r1 tcp://198.18.0.1:7700 400000",
    ("policer", "router-rm"): "xtc policer router-rm r1",
    ("policer", "router-mode"): "xtc policer router-mode r1 off",
    ("policer", "vrs"): "xtc policer vrs --router r1",
    ("policer", "network-add"): "xtc policer network-add blue --description 'tenant blue'",
    ("policer", "networks"): "xtc policer networks",
    ("policer", "sla"): "xtc policer sla blue --min 10000 --max 50000",
    ("policer", "assign"): "xtc policer assign r1 vr1 blue",
    ("policer", "setpoint"): "xtc policer setpoint r1 vr1 20k",
    ("policer", "setpoints"): "xtc policer setpoints",
    ("policer", "policies"): "xtc policer policies",
    ("policer", "policy"): "xtc policer policy activation enabled=false",
    ("policer", "actions"): "xtc policer actions --router r1 --limit 20",
    ("xco",): "xtc xco controller -c /etc/xtc/xco-controller.toml",
    ("xco", "replay"): "xtc xco replay topology.toml events.jsonl --mode timeslice",
    ("xco", "check-config"): "xtc xco check-config /etc/xtc/xco-agent.toml",
    ("xco", "controller"): "xtc xco controller -c /etc/xtc/xco-controller.toml",
    ("xco", "keygen"): "xtc xco keygen /etc/xtc/xco.key",
    ("xco", "agent"): "xtc xco agent -c /etc/xtc/xco-agent.toml",
    ("completion",): "xtc completion bash > /usr/share/bash-completion/completions/xtc",
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


def _load(load: Callable[[], T]) -> T | ModuleNotFoundError:
    """``load()``, or the error when a part's optional dependency (an extra) is missing."""
    try:
        return load()
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in _OPTIONAL_DEPENDENCIES:
            return e
        raise


def _unavailable(sub: argparse._SubParsersAction, words: tuple[str, ...], message: str, help_: str) -> None:
    """A command that cannot run here: listed with ``help_``; running it (``--help`` included) prints
    ``message``, one line, and exits 1 (:func:`main`)."""
    UNAVAILABLE[words] = message
    if words[-1] not in sub.choices:
        p = sub.add_parser(words[-1], help=help_, add_help=False)
        p.set_defaults(func=lambda _args: _say(message))


def _say(message: str) -> int:
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
            _unavailable(sub, (*parent, ep.name), message, "(not installed: " + message.rsplit(": ", 1)[1] + ")")
        else:
            register(sub)
        found.add(ep.name)
    for name in LAB_COMMANDS.get(group, ()):
        if name not in found and (only is None or name == only) and name not in sub.choices:
            _unavailable(sub, (*parent, name), f"{prefix} {name}: part of the testbed: pip install xtc-lab",
                         "(not installed: pip install xtc-lab)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``xtc`` parser: every part's commands, or (``command``) only the part that has it.

    Building every part imports each one's modules (the training part imports numpy, scipy,
    matplotlib: seconds on a loaded host), so :func:`main` builds only the part of the command
    it runs, and everything only for ``xtc --help`` or an unknown command.  A part whose extra is
    not installed is listed, and says which extra it needs when it is run.
    """
    UNAVAILABLE.clear()
    parser = argparse.ArgumentParser(
        prog="xtc",
        description="XTC: hold each virtual router at a packet-rate setpoint by adjusting only its CPU cap.",
        epilog="example: xtc check-config /etc/xtc/xtc-daemon.toml",
    )
    parser.add_argument("--version", action="version", version=f"xtc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands in _COMMAND_MODULES.items():
        if command is not None and command not in commands:
            continue
        mod = _load(lambda name=name: importlib.import_module(name))
        if isinstance(mod, ModuleNotFoundError):
            for c in commands:
                message = needs_extra(f"xtc {c}", mod) or f"xtc {c}: no module named {mod.name!r}"
                _unavailable(sub, (c,), message, "(not installed: " + message.rsplit(": ", 1)[1] + ")")
        else:
            mod.register(sub)
    if command is None or command == "completion":
        p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
        p.add_argument("shell", choices=("bash", "zsh"))
        p.set_defaults(func=_cmd_completion)
    if command is None or command not in sub.choices:
        register_entry_points(sub, ENTRY_POINT_GROUP, only=command)
    _add_examples(sub, ())
    return parser


def _add_examples(sub: argparse._SubParsersAction, words: tuple[str, ...]) -> None:
    """Each command's example (:data:`EXAMPLES`) as the epilog of its ``--help``, its actions' too."""
    for name, p in sub.choices.items():
        example = EXAMPLES.get((*words, name))
        if example is not None and not p.epilog:
            p.epilog = f"example: {example}"
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                _add_examples(a, (*words, name))


def _cmd_completion(args: argparse.Namespace) -> int:
    """Print a static completion script generated from the whole parser (shtab): the shell runs no
    Python on TAB; it completes the commands installed when it was generated."""
    import shtab  # a base dependency, used by this command alone

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0


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
    globals()["ARGV"] = argv
    if argv == ["--version"]:  # no part's modules needed (building every part imports SciPy: seconds)
        print(f"xtc {__version__}")
        return 0
    command = _command_of(argv)
    parser = build_parser(command) if command is not None else None
    if parser is None or command not in _commands(parser):
        parser = build_parser()  # help, an unknown command (argparse names the choices), or a part left out
    for words, message in UNAVAILABLE.items():
        if argv[:len(words)] == list(words):
            return _say(message)  # its --help too: one line, which extra or distribution it needs
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as e:  # a module of an extra that is not installed, imported by the command
        message = needs_extra(" ".join(["xtc", *_words(argv)]), e)
        if message is None:
            raise
        return _say(message)
    return int(rc or 0)


def _words(argv: list[str]) -> list[str]:
    """The command's words at the front of ``argv`` (``["policer", "serve"]``), up to the first option."""
    out = []
    for a in argv[:2]:
        if a.startswith("-"):
            break
        out.append(a)
    return out


if __name__ == "__main__":
    # run as ``python -m xtc.cli``: the parts import xtc.cli, so this one module holds the state
    from xtc.cli import main as _main

    sys.exit(_main())
