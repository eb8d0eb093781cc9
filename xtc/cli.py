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

from xtc import __version__
from xtc.service import commands as registry
from xtc.service.commands import (
    ENTRY_POINT_GROUP,
    UNAVAILABLE,
    load_part,
    mark_unavailable,
    needs_extra,
    register_entry_points,
    say,
)


# The product's parts, each a module with ``register(subparsers)``, and the commands it adds.
_COMMAND_MODULES = {
    "xtc.daemon.cli": ("daemon", "ctl", "check-config"),
    "xtc.training.cli": ("train",),  # collect | fit | design | all
    "xtc.policer.cli": ("policer",),  # (+ xtc.policer_commands)
    "xtc.xco.cli": ("xco",),  # replay | check-config | controller | agent (+ xtc.xco_commands)
}
#: One example per command and action, shown by its ``--help`` (the testbed's commands carry their own).
EXAMPLES = {
    ("daemon",): "xtc daemon -c /etc/xtc/daemon.toml",
    ("check-config",): "xtc check-config --json /etc/xtc/daemon.toml",
    ("ctl",): "xtc ctl -c /etc/xtc/daemon.toml status",
    ("ctl", "status"): "xtc ctl status vr1",
    ("ctl", "ping"): "xtc ctl ping",
    ("ctl", "activate"): "xtc ctl activate vr1 20k",
    ("ctl", "deactivate"): "xtc ctl deactivate vr1",
    ("ctl", "pause"): "xtc ctl pause vr1",
    ("ctl", "resume"): "xtc ctl resume vr1",
    ("ctl", "setpoint"): "xtc ctl setpoint vr1 25k",
    ("ctl", "early-drop"): "xtc ctl early-drop vr1 on",
    ("ctl", "vr-off"): "xtc ctl vr-off vr1 --reason 'floods its neighbours'",
    ("ctl", "vr-on"): "xtc ctl vr-on vr1",
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
    ("policer", "vr-off"): "xtc policer vr-off blue on",
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
        epilog="example: xtc check-config /etc/xtc/daemon.toml",
    )
    parser.add_argument("--version", action="version", version=f"xtc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands in _COMMAND_MODULES.items():
        if command is not None and command not in commands:
            continue
        mod = load_part(lambda name=name: importlib.import_module(name))
        if isinstance(mod, ModuleNotFoundError):
            for c in commands:
                message = needs_extra(f"xtc {c}", mod) or f"xtc {c}: no module named {mod.name!r}"
                mark_unavailable(sub, (c,), message, "(not installed: " + message.rsplit(": ", 1)[1] + ")")
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
    registry.ARGV = argv
    if argv == ["--version"]:  # no part's modules needed (building every part imports SciPy: seconds)
        print(f"xtc {__version__}")
        return 0
    command = _command_of(argv)
    parser = build_parser(command) if command is not None else None
    if parser is None or command not in _commands(parser):
        parser = build_parser()  # help, an unknown command (argparse names the choices), or a part left out
    for words, message in UNAVAILABLE.items():
        if argv[:len(words)] == list(words):
            return say(message)  # its --help too: one line, which extra or distribution it needs
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
        return say(message)
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
