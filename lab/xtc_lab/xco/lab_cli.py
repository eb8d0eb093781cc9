"""``xtc xco lab``: the XCo testbed in namespaces (``up`` / ``status`` / ``down`` / ``list`` / ``run``).

Reached through the ``xtc.xco_commands`` entry point (``lab = xtc_lab.xco.lab_cli:register``); also
runnable as ``python -m xtc_lab.xco.lab_cli lab ...``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from xtc_lab.unwind import unwinding

DEFAULT_NAME = "xco-lab"
DEFAULT_OUT = Path("docs/results/xco")


@unwinding
def register(subparsers: Any) -> None:
    """Add ``lab`` to the ``xtc xco`` subcommands."""
    from xtc_lab.xco.experiments import EXPERIMENTS, MODES
    from xtc_lab.xco.testbed import BUILTIN, DEFAULT_PORT_BUFFER_BYTES, DEFAULT_SCALE

    p = subparsers.add_parser("lab", help="the XCo testbed: hosts, switches and VMs in namespaces, and the paper's experiments",
                               epilog="example: xtc xco lab run fig22 --mode timeslice --out out/xco-lab")
    sub = p.add_subparsers(dest="xco_lab_cmd", metavar="{up,status,down,list,run}", required=True)
    u = sub.add_parser("up", help="build a topology in namespaces")
    u.add_argument("--topology", default="fig1a", help=f"xco-topology/1 file or built-in name ({', '.join(BUILTIN)})")
    u.add_argument("--scale", type=float, default=DEFAULT_SCALE,
                   help=f"rate scale (default {DEFAULT_SCALE}: a 1 Gb/s link is 100 Mb/s)")
    u.add_argument("--port-buffer", type=int, default=DEFAULT_PORT_BUFFER_BYTES,
                   help=f"switch port buffer, bytes, where the topology gives none (default {DEFAULT_PORT_BUFFER_BYTES})")
    u.add_argument("--name", default=DEFAULT_NAME, help=f"lab name (default {DEFAULT_NAME})")
    u.set_defaults(func=cmd_up)
    s = sub.add_parser("status", help="the lab as JSON: namespaces, ports, TBF rates, drops")
    s.add_argument("--name", default=DEFAULT_NAME)
    s.set_defaults(func=cmd_status)
    d = sub.add_parser("down", help="remove the lab (also after a crash)")
    d.add_argument("--name", default=DEFAULT_NAME)
    d.add_argument("--leftovers", action="store_true",
                   help="also remove xco-xxxx namespaces and links that no lab record claims")
    d.set_defaults(func=cmd_down)
    ls = sub.add_parser("list", help="list the experiments")
    ls.set_defaults(func=cmd_list)
    r = sub.add_parser("run", help="run one experiment on a fresh lab (removed afterwards)")
    r.add_argument("experiment", choices=list(EXPERIMENTS))
    r.add_argument("--quick", action="store_true", help="fewer points, shorter phases")
    r.add_argument("--mode", choices=MODES, default="none", help="without XCo, with timeslices, with rate limiting")
    r.add_argument("--scale", type=float, default=None,
                   help=f"rate scale (default: the experiment's own; {DEFAULT_SCALE} for all but fig16, 0.02)")
    r.add_argument("--gate-at", choices=("uplink", "vm"), default="uplink",
                   help="XCo's gate on each host's uplink (default) or on each VM's interface")
    r.add_argument("--slice-us", type=int, default=10_000, help="slice length with XCo, microseconds (default 10000)")
    r.add_argument("--port-buffer", type=int, default=DEFAULT_PORT_BUFFER_BYTES)
    r.add_argument("--rate-link-fraction", type=float, default=1.0,
                   help="--mode rate: the controller's rate_link_fraction, the share of each link the rates "
                        "fill, 0.5..1.1 (default 1, the paper's; other than 1 the report's name ends in "
                        "-link<fraction>)")
    r.add_argument("--in-slice", action="store_true",
                   help="fig15 with timeslices: also measure the share of packets sent inside the open slices "
                        "(a capture at the switch, agents at log level debug; it adds load, so the report's "
                        "name ends in -capture)")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    r.set_defaults(func=cmd_run)


def _err(msg: str) -> int:
    print(f"xtc xco lab: {msg}", file=sys.stderr)
    return 1


def cmd_up(args: argparse.Namespace) -> int:
    from xtc.xco.topology import TopologyError
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.testbed import build_lab, resolve_topology

    try:
        topo, _d, source = resolve_topology(args.topology)
        rec = build_lab(topo, args.name, source, scale=args.scale, port_buffer_bytes=args.port_buffer,
                        say=lambda m: print(m, file=sys.stderr))
    except (TopologyError, LabError) as e:
        return _err(str(e))
    print(f"lab {args.name} up: prefix {rec['prefix']}, {len(rec['hosts'])} hosts, {len(rec['switches'])} switches, "
          f"{len(rec['vms'])} VMs, {len(rec['ports'])} TBF ports, scale {rec['scale']} ({rec['build_s']} s)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.testbed import lab_status, read_record

    try:
        rec = read_record(args.name)
    except LabError as e:
        return _err(str(e))
    if rec is None:
        return _err(f"no lab {args.name!r} (xtc xco lab up)")
    st = lab_status(rec)
    print(json.dumps(st, indent=1))
    return 0 if st["healthy"] else 3


def cmd_down(args: argparse.Namespace) -> int:
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.testbed import leftover_prefixes, remove_lab, remove_prefix

    try:
        removed = remove_lab(args.name)
        if args.leftovers:
            for p in leftover_prefixes():
                removed += remove_prefix(p)
    except LabError as e:
        return _err(str(e))
    print(f"removed {len(removed)} objects" + (": " + ", ".join(removed[:8]) + (" ..." if len(removed) > 8 else "")
                                              if removed else ""))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from xtc_lab.xco.experiments import available

    for n, m in available().items():
        print(f"{n:8s} {m.TITLE} ({m.PAPER}); topology {m.TOPOLOGY}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from xtc.xco.topology import TopologyError
    from xtc_lab.lab.netlab import LabError
    from xtc_lab.xco.experiments import XcoUnavailable, run_experiment

    argv = [a for a in sys.argv[1:]]
    if "lab" in argv:
        argv = argv[argv.index("lab"):]
    import os
    import signal

    # the lab's settings taken from the environment (experiments/__init__.py) are part of the command
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in sorted(os.environ) if k.startswith("XTC_XCO_LAB_")]
    command = " ".join([*env, "xtc xco " + shlex.join(a for a in argv)])

    me = os.getpid()

    def on_term(_s: int, _f: object) -> None:
        # SIGTERM unwinds like Ctrl-C: XCo's processes are stopped and the lab removed (finally
        # blocks); a forked helper (pyroute2 forks to create namespaces) that inherits this handler
        # must die at once, not run this process's finally blocks (they would remove the lab)
        if os.getpid() != me:
            os._exit(143)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    try:
        paths = run_experiment(args.experiment, args.out, quick=args.quick, mode=args.mode, scale=args.scale,
                               port_buffer_bytes=args.port_buffer, command=command, slice_us=args.slice_us, gate_at=args.gate_at,
                               params={"in_slice": True} if args.in_slice else None, say=lambda m: print(m, file=sys.stderr),
                               rate_link_fraction=args.rate_link_fraction)
    except XcoUnavailable as e:
        _err(str(e))
        return 4
    except (TopologyError, LabError) as e:
        return _err(str(e))
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m xtc_lab.xco.lab_cli lab ...`` (the same as ``xtc xco lab ...``)."""
    parser = argparse.ArgumentParser(prog="xtc xco")
    sub = parser.add_subparsers(dest="xco_command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
