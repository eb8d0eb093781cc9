"""Subcommands ``xtc xco replay`` and ``xtc xco check-config``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

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

    s = sub.add_parser("check-config", help="validate a topology file without starting anything")
    s.add_argument("topology", help="xco-topology/1 TOML file")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=_cmd_check)


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replay import ReplayError, replay
    from .topology import TopologyError, load_topology

    if args.slice_us <= 0:
        print("xtc xco replay: --slice-us must be > 0", file=sys.stderr)
        return 2
    try:
        topo = load_topology(args.topology)
    except TopologyError as e:
        print(f"xtc xco replay: {e}", file=sys.stderr)
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


def _cmd_check(args: argparse.Namespace) -> int:
    from xtc.cli import load_or_report

    from .topology import TopologyError, load_topology

    topo = load_or_report(lambda: load_topology(args.topology), TopologyError, "xtc xco check-config")
    if topo is None:
        return 2
    summary = topo.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.topology}: OK: {summary['hosts']} hosts, {summary['switches']} switches, "
              f"{summary['directed_links']} directed links, spanning tree rooted at {summary['root']}")
        for s in topo.slow_paths:
            print(f"warning: {s}")
    return 0
