"""Subcommands ``xtc xco replay``, ``xtc xco check-config``, ``xtc xco controller`` and ``xtc xco agent``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from xtc.service import commands
from xtc.service.cli import CHECK_INVALID, CHECK_USAGE, load_or_report, readable_or_report

if TYPE_CHECKING:
    from .topology import Topology

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``xco`` command group to an argparse subparsers object."""
    p = subparsers.add_parser("xco", help="XCo: coordinate the transmissions between hosts")
    sub = p.add_subparsers(dest="xco_command", metavar="ACTION", required=True)

    s = sub.add_parser("replay", help="replay an event file through the scheduler; print the directives (JSON lines)")
    s.add_argument("topology", help="xco-topology/1 TOML file")
    s.add_argument("events", help="events, one JSON object per line ('-' = stdin)")
    s.add_argument("--slice-us", type=int, default=10_000, help="timeslice, microseconds (default 10000)")
    s.add_argument("--mode", choices=("timeslice", "rate", "hybrid"), default="timeslice",
                   help="timeslice scheduling (Algorithm 1), the paper's rate limiting, or hybrid "
                        "(timeslices, rate-limited inside the slice for hosts with slow paths)")
    s.add_argument("--until-us", type=int, default=None,
                   help="keep handling slice expiries up to this time after the last event")
    s.add_argument("--output", "-o", default="-", help="where to write the directives ('-' = stdout)")
    s.set_defaults(func=_cmd_replay)

    s = sub.add_parser("check-config",
                       help="validate a topology, controller or agent configuration file without starting anything")
    s.add_argument("topology", metavar="FILE",
                   help="xco-topology/1, xco-controller/1 or xco-agent/1 TOML file (told apart by its schema key)")
    s.add_argument("--json", action="store_true", help="print the validated configuration's summary as JSON")
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("controller", help="run the XCo controller (UDP, foreground; see docs/xco-protocol.md)")
    s.add_argument("-c", "--config", required=True, help="xco-controller/1 TOML file")
    s.set_defaults(func=_cmd_controller)

    s = sub.add_parser("keygen", help="write a new shared key for authenticated datagrams (mode 0600; "
                                      "auth_key_file in the controller's and agents' configurations)")
    s.add_argument("file", help="where to write the key (refuses to overwrite)")
    s.set_defaults(func=_cmd_keygen)

    s = sub.add_parser("agent", help="run the XCo local coordinator on this host's uplink (foreground, root)")
    s.add_argument("-c", "--config", required=True, help="xco-agent/1 TOML file")
    s.add_argument("--cleanup", action="store_true",
                   help="remove what a killed agent left on the uplink (its qdiscs) and exit")
    s.set_defaults(func=_cmd_agent)
    _register_entry_points(sub)


ENTRY_POINT_GROUP = "xtc.xco_commands"


def _register_entry_points(sub: Any) -> None:
    """Subcommands that other distributions add under ``xtc xco`` (group ``xtc.xco_commands``; the
    testbed's ``lab``), loaded as :mod:`xtc.cli` loads ``xtc.commands``."""
    argv = commands.ARGV or []
    if argv[:1] == ["xco"] and len(argv) > 1 and argv[1] in sub.choices:
        return  # a built-in action runs: the testbed's commands are not loaded
    commands.register_entry_points(sub, ENTRY_POINT_GROUP, ("xco",))


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replay import ReplayError, replay
    from .topology import TopologyError, load_topology

    if args.slice_us <= 0:
        print("xtc xco replay: --slice-us must be > 0", file=sys.stderr)
        return 2
    topo = load_or_report(lambda: load_topology(args.topology), TopologyError, "xtc xco replay")
    if topo is None:
        return 2
    try:
        src = sys.stdin if args.events == "-" else open(args.events, encoding="utf-8")
    except OSError as e:
        print(f"xtc xco replay: {args.events}: cannot read: {e.strerror}", file=sys.stderr)
        return 2
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    try:
        for d in replay(topo, src, slice_us=args.slice_us, mode=args.mode, until_us=args.until_us,
                        source=args.events):
            out.write(json.dumps(d, separators=(", ", ": ")) + "\n")
    except ReplayError as e:
        out.flush()
        print(f"xtc xco replay: {e}", file=sys.stderr)
        return 2
    finally:
        if src is not sys.stdin:
            src.close()
        if out is not sys.stdout:
            out.close()
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from .auth import AuthError, write_key

    try:
        write_key(args.file)
    except AuthError as e:
        print(f"xtc xco keygen: {e}", file=sys.stderr)
        return 2
    print(f"{args.file}: a new key; copy it (mode 0600) to the controller and every agent, and name it in "
          f"their auth_key_file")
    return 0


def _cmd_controller(args: argparse.Namespace) -> int:
    from .controller_service import run_controller

    return run_controller(args.config)


def _cmd_agent(args: argparse.Namespace) -> int:
    from .agent_service import run_agent, run_cleanup

    return run_cleanup(args.config) if args.cleanup else run_agent(args.config)


def _schema_of(path: str) -> str | None:
    """The ``schema`` value of a TOML file, or None if it cannot be read (the loader then says why)."""
    import tomllib

    try:
        with open(path, "rb") as f:
            v = tomllib.load(f).get("schema")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return v if isinstance(v, str) else None


def _config_and_topology(path: str, load: Any, error: type[Exception]) -> tuple[Any, Topology] | None:
    """A controller or agent file and the topology it names, or None after saying what is wrong."""

    from .topology import TopologyError, load_topology

    from .auth import AuthError, load_key

    prog = "xtc xco check-config"
    cfg = load_or_report(lambda: load(path), error, prog)
    if cfg is None:
        return None
    key_file = getattr(cfg, "auth_key_file", None)
    if key_file is not None and load_or_report(lambda: load_key(key_file), AuthError,
                                               f"{prog}: {path}: 'auth_key_file'") is None:
        return None
    topo = load_or_report(lambda: load_topology(cfg.topology), TopologyError, f"{prog}: {path}: 'topology'")
    return None if topo is None else (cfg, topo)


def _cmd_check_controller(args: argparse.Namespace) -> int:
    from .controller_config import ControllerConfigError, load_controller_config

    loaded = _config_and_topology(args.topology, load_controller_config, ControllerConfigError)
    if loaded is None:
        return CHECK_INVALID
    cfg, topo = loaded
    summary = {"config": cfg.model_dump(by_alias=True), "topology": topo.summary()}
    return _report_ok(args, summary, topo,
                      f"{args.topology}: OK: {cfg.mode} mode, slice {cfg.slice_us} us, lead {cfg.lead_us} us, "
                      f"listening on {cfg.listen}; topology {cfg.topology}: {topo.n_hosts} hosts", mode=cfg.mode)


def _cmd_check_agent(args: argparse.Namespace) -> int:

    from .agent import flows_of
    from .agent_config import AgentConfigError, check_against_topology, load_agent_config

    prog = "xtc xco check-config"
    loaded = _config_and_topology(args.topology, load_agent_config, AgentConfigError)
    if loaded is None:
        return CHECK_INVALID
    cfg, topo = loaded
    checked = load_or_report(lambda: check_against_topology(cfg, topo, args.topology), AgentConfigError, prog)
    if checked is None:
        return CHECK_INVALID
    x, link_bps = checked
    n = len(flows_of(topo, x))
    summary = {"config": cfg.model_dump(by_alias=True), "host_id": x, "link_bps": link_bps, "flows": n,
               "topology": topo.summary()}
    return _report_ok(args, summary, topo,
                      f"{args.topology}: OK: host {cfg.host} (id {x}) on {cfg.uplink}, {link_bps} b/s, {n} flows, "
                      f"controller {cfg.controller}; topology {cfg.topology}: {topo.n_hosts} hosts")


def _cmd_check(args: argparse.Namespace) -> int:

    from .agent_config import SCHEMA as AGENT_SCHEMA
    from .controller_config import SCHEMA as CONTROLLER_SCHEMA
    from .topology import TopologyError, load_topology

    if not readable_or_report(args.topology, "xtc xco check-config"):
        return CHECK_USAGE
    schema = _schema_of(args.topology)
    if schema == CONTROLLER_SCHEMA:
        return _cmd_check_controller(args)
    if schema == AGENT_SCHEMA:
        return _cmd_check_agent(args)
    topo = load_or_report(lambda: load_topology(args.topology), TopologyError, "xtc xco check-config")
    if topo is None:
        return CHECK_INVALID
    summary = topo.summary()
    return _report_ok(args, summary, topo,
                      f"{args.topology}: OK: {summary['hosts']} hosts, {summary['switches']} switches, "
                      f"{summary['directed_links']} directed links, spanning tree rooted at {summary['root']}")


def _report_ok(args: argparse.Namespace, summary: dict, topo: Topology, line: str, mode: str | None = None) -> int:
    """What check-config prints for a valid file: ``summary`` as JSON (``--json``), else ``line`` and,
    for each host whose NIC is faster than a link on its paths, a warning that timeslices starve it
    (a controller in ``mode`` "timeslice"; a topology or agent file: whichever mode) or, in hybrid
    mode, the slice rate that serves it; returns the exit status 0."""
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(line)
    if mode == "hybrid":
        from .scheduler.hybrid import slice_rates_bps

        rates = slice_rates_bps(topo)
        for h in sorted({s.host for s in topo.slow_paths}):
            print(f"note: host {h} is served in its slices at {int(rates[topo.host_id(h)])} b/s (hybrid mode)")
    elif mode != "rate":
        for s in topo.slow_paths:
            print(f"warning: {s}: timeslices never serve it there (the controller's mode = \"hybrid\" does)")
    return 0
