"""``xtc simulate <experiment>``: the XTC paper's experiments on the simulated plant, and
``xtc simulate xco FIG``: the XCo paper's switch-queue experiments (:mod:`xtc_lab.xco.simulate_figures`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from xtc_lab.unwind import unwinding

__all__ = ["register", "main"]

_HELP = {
    "sweep": "setpoint sweep at 100 kp/s UDP: PI, dead-beat, dead-beat+cap_min 3, XTC (Figures 5, 9, 11, 13)",
    "fixedcap": "Fixed Cap (Table 1) vs feedback, with and without a 15%% CPU hog (Figure 6)",
    "sixvr": "six TCP VRs on one Dom0, configurations A and B (Figure 15, Table 2)",
    "tcpudp": "a TCP VR beside a UDP VR at 100 kp/s, XTC at 20/80 kp/s (Figure 17)",
}


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (v > 0) or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _csv_floats(text: str) -> list[float]:
    try:
        vals = [float(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not vals or any(not (v > 0) for v in vals):
        raise argparse.ArgumentTypeError("setpoints must be numbers > 0 (kp/s)")
    return vals


@unwinding
def register(subparsers: Any) -> None:
    """Add ``simulate`` and its experiments to the ``xtc`` command."""
    p = subparsers.add_parser("simulate", help="run the XTC paper's experiments on the simulated plant",
                               epilog="example: xtc simulate sweep --duration-s 30")
    sub = p.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    for name, help_text in _HELP.items():
        e = sub.add_parser(name, help=help_text, description=help_text)
        e.add_argument("--seed", type=int, default=1, help="seed of the plant's noise (default 1)")
        e.add_argument("--duration-s", type=_positive_float, default=120.0, help="seconds per run (default 120, the paper's)")
        e.add_argument("--runs", type=_positive_int, default=3, help="repetitions per point (default 3)")
        e.add_argument("--out", type=Path, default=None, help=f"output directory (default ./out/simulate/{name}/)")
        e.add_argument(
            "--actuation",
            choices=("paper", "exact"),
            default="paper",
            help="paper: integer Xen caps, the controller continues from the applied cap; exact: caps as computed",
        )
        e.add_argument("--controllers", type=_csv, default=None, help="comma-separated controller labels (pi, deadbeat, deadbeat-capmin3, fixed, xtc)")
        e.add_argument("--quiet", action="store_true", help="no progress line")
        e.add_argument("--no-plot", action="store_true", help="do not write the PNG")
        if name == "sweep":
            e.add_argument("--setpoints-kpps", type=_csv_floats, default=None, help="comma-separated setpoints, kp/s")
            e.add_argument("--offered-kpps", type=_positive_float, default=100.0, help="UDP offered rate, kp/s (default 100)")
            e.add_argument("--initial-cap", type=_positive_float, default=1.0, help="cap at activation, percent (default 1, the paper's)")
        if name == "tcpudp":
            e.add_argument("--no-early-drop", action="store_true",
                           help="leave out the runs with early drop (issue 48: XTC + the daemon's limiter)")
            e.add_argument("--limiter-work-fraction", type=float, default=None,
                           help="Dom0's work per packet early drop's limiter drops, as a share of a traversal, "
                                "0..rx_work_fraction (0.3); default 0.1 (a limiter on the vif)")
        if name == "fixedcap":
            e.add_argument("--hog", type=float, default=0.15, help="CPU share of the hog inside the VR (default 0.15)")
        e.set_defaults(func=_run, experiment_name=name)
    from xtc_lab.xco.simulate_figures import add_xco

    add_xco(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run(args: argparse.Namespace) -> int:
    from . import experiments as ex

    name = args.experiment_name
    kw: dict[str, Any] = {}
    if args.controllers is not None:
        try:
            for c in args.controllers:
                ex.controller_spec(c)
        except ValueError as e:
            print(f"xtc simulate {name}: {e}", file=sys.stderr)
            return 2
        kw["controllers"] = [ex.controller_spec(c).label for c in args.controllers]
    if name == "sweep":
        if args.setpoints_kpps is not None:
            kw["setpoints_kpps"] = args.setpoints_kpps
        kw["offered_kpps"] = args.offered_kpps
        if not (1.0 <= args.initial_cap <= 100.0):
            print(f"xtc simulate sweep: --initial-cap must be within 1..100 percent, got {args.initial_cap}", file=sys.stderr)
            return 2
        kw["initial_cap_percent"] = args.initial_cap
    if name == "tcpudp":
        kw["early_drop"] = not args.no_early_drop
        if args.limiter_work_fraction is not None:
            kw["limiter_work_fraction"] = args.limiter_work_fraction
    if name == "fixedcap":
        if not (0.0 <= args.hog < 1.0):
            print(f"xtc simulate fixedcap: --hog must be within [0, 1), got {args.hog}", file=sys.stderr)
            return 2
        kw["hog_fraction"] = args.hog
    progress = ex.StderrProgress(enabled=not args.quiet)
    rs = ex.RunSettings(seed=args.seed, duration_s=args.duration_s, runs=args.runs, actuation=args.actuation,
                        warmup_s=min(5.0, args.duration_s / 4) if args.duration_s <= 25.0 else None,
                        progress=progress)
    try:
        result = ex.EXPERIMENTS[name](rs, **kw)
    except ValueError as e:
        progress.done()
        print(f"xtc simulate {name}: {e}", file=sys.stderr)
        return 2
    progress.done()
    if args.no_plot:
        result.plot = None
    out = args.out if args.out is not None else Path("out") / "simulate" / name
    paths = result.write(out)
    print(result.table)
    print()
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``simulate`` alone (``python -m xtc_lab.sim.cli sweep ...``)."""
    parser = argparse.ArgumentParser(prog="xtc")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
