"""``xtc lab``: the host lab (``up`` / ``status`` / ``down``) and the paper's experiments on it (``run``).

``xtc lab run NAME`` builds its own lab (random ``xtcx-xxxx`` prefix), runs one experiment with
the real daemon on real packets and removes the lab; it writes ``NAME.json``, ``NAME.png`` and
``NAME.md`` under ``--out`` (default ``out/lab``).  ``xtc lab list`` names the experiments.
Only one measurement runs on a host at a time (``/run/xtc/lab-measure.lock``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from xtc_lab.unwind import unwinding

EXIT_OK, EXIT_ERROR, EXIT_GOALS, EXIT_UNSUPPORTED = 0, 1, 3, 4
#: ``--kind`` choices (the same as xtc_lab.lab.harness.LAB_MODES, kept here so the parser imports nothing heavy).
LAB_KINDS = ("lxc", "netns", "qemu")


@unwinding
def register(subparsers: Any) -> None:
    p = subparsers.add_parser("lab", help="the host lab (real LXC VRs, real packets) and the paper's experiments on it",
                               epilog="example: xtc lab run tracking --quick --out out/lab")
    sub = p.add_subparsers(dest="lab_cmd", metavar="{up,status,down,run,list}")
    sub.required = True
    import importlib

    try:
        lifecycle = importlib.import_module("xtc_lab.lab.lifecycle")
    except ModuleNotFoundError as e:
        if e.name != "xtc_lab.lab.lifecycle":
            raise
    else:
        lifecycle.register(sub)

    from xtc_lab.lab.experiments import available
    from xtc_lab.lab.netlab import add_work_arguments

    exps = available()
    r = sub.add_parser("run", help="run one of the paper's experiments (or 'all') on a fresh lab",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="experiments:\n" + "\n".join(
                           f"  {n:10s} {m.TITLE} ({m.PAPER})" for n, m in exps.items()))
    r.add_argument("experiment", choices=[*exps, "all"], help="experiment name, or 'all'")
    r.add_argument("--out", type=Path, default=Path("out/lab"), help="output directory (default out/lab)")
    r.add_argument("--quick", action="store_true", help="a short version (fewer points, shorter phases)")
    r.add_argument("--offered-pps", type=float, default=100_000.0,
                   help="offered rate per VR stream, packets/s (default 100000; scaled down where the host cannot push it)")
    add_work_arguments(r, "the VRs' forwarder")
    r.add_argument("--cfs-period-us", type=int, default=0,
                   help="[daemon] cfs_period_us of the experiment's XTC daemons: the CFS period written with each "
                        "cap, microseconds, doubled where the quota would be under 1 ms (default 0: the VRs' own, "
                        "100 ms)")
    r.add_argument("--kind", choices=LAB_KINDS, default=None,
                   help="the VRs: lxc (libvirt LXC domains, default), netns (the forwarder in a namespace and a "
                        "cgroup) or qemu (libvirt QEMU domains forwarding in their own kernel; KVM where it works, "
                        "TCG otherwise); experiments that cannot run on that kind say so")
    r.add_argument("--check", action="store_true", help="exit with status 3 when a goal is missed")
    for m in exps.values():
        if hasattr(m, "add_arguments"):
            m.add_arguments(r)
    r.set_defaults(func=cmd_run)
    ls = sub.add_parser("list", help="list the experiments")
    ls.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from xtc_lab.lab.experiments import available

    for n, m in available().items():
        print(f"{n:10s} {m.TITLE} ({m.PAPER})")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from xtc_lab.lab.experiments import available
    from xtc.daemon.ctl import ManagerError
    from xtc_lab.lab.harness import RunContext, host_description, lab_host_problem, measurement_lock, write_outputs
    from xtc_lab.lab.libvirtd import LibvirtdError
    from xtc.host.actuators import check_cfs_period
    from xtc_lab.lab.netlab import LabError, check_work_factor

    exps = available()
    kind = args.kind or "lxc"
    try:
        names = experiments_for(args.experiment, kind, exps)
    except ValueError as e:
        print(f"xtc lab run: {e}", file=sys.stderr)
        return EXIT_ERROR
    problem = lab_host_problem(kind)
    if problem:
        print(f"xtc lab run: this host cannot run the lab ({kind} VRs): {problem}", file=sys.stderr)
        return EXIT_UNSUPPORTED
    if not (1_000 <= args.offered_pps <= 2_000_000):
        print(f"xtc lab run: --offered-pps {args.offered_pps:g} out of range 1000..2000000", file=sys.stderr)
        return EXIT_ERROR
    if args.work < 0:
        print(f"xtc lab run: --work {args.work} must be >= 0", file=sys.stderr)
        return EXIT_ERROR
    try:
        check_work_factor(args.work_factor, "--work-factor")
    except LabError as e:
        print(f"xtc lab run: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        check_cfs_period(args.cfs_period_us)
    except ValueError as e:
        print(f"xtc lab run: --cfs-period-us: {e}", file=sys.stderr)
        return EXIT_ERROR
    missed = []
    for name in names:
        ctx = RunContext(out_dir=args.out, quick=args.quick, offered_pps=args.offered_pps, work_iters=args.work,
                         work_factor=args.work_factor, cfs_period_us=args.cfs_period_us, kind=kind)
        t0 = time.monotonic()
        ctx.say(f"== {name}: {exps[name].TITLE} ({exps[name].PAPER})")
        try:
            with measurement_lock(say=ctx.say):
                t0 = time.monotonic()  # the time the experiment took, not the wait for the lock
                host = host_description()
                outcome = exps[name].run(ctx, args)
        except (LabError, LibvirtdError, ManagerError, OSError, ValueError) as e:
            print(f"xtc lab run {name}: {e}", file=sys.stderr)
            return EXIT_ERROR
        md = finish(name, outcome, host, display_command(sys.argv[1:]), time.monotonic() - t0, args.quick)
        paths = write_outputs(ctx, name, outcome.result, md, outcome.plot)
        summary = {"experiment": name, "goals_met": all(g.met for g in outcome.goals),
                   "files": {k: str(v) for k, v in paths.items()}}
        print(json.dumps(summary))
        missed += [f"{name}: {g.goal} ({g.measured})" for g in outcome.goals if not g.met]
    if missed:
        print("goals missed:\n  " + "\n  ".join(missed), file=sys.stderr)
        if args.check:
            return EXIT_GOALS
    return EXIT_OK


def experiment_kinds(module: Any) -> tuple[str, ...]:
    """The VR kinds an experiment module runs on: its ``KINDS`` (default: LXC VRs only)."""
    return tuple(getattr(module, "KINDS", ("lxc",)))


def experiments_for(experiment: str, kind: str, exps: dict[str, Any]) -> list[str]:
    """The experiments ``xtc lab run EXPERIMENT --kind KIND`` runs, in order.

    ``all`` runs those of ``exps`` that run on ``kind`` VRs (at least one must); a named
    experiment that does not run on them is a :class:`ValueError` naming the kinds it runs on.
    """
    if kind not in LAB_KINDS:
        raise ValueError(f"--kind {kind!r}: want one of {', '.join(LAB_KINDS)}")
    if experiment == "all":
        names = [n for n, m in exps.items() if kind in experiment_kinds(m)]
        if not names:
            raise ValueError(f"no experiment runs on --kind {kind} VRs")
        return names
    if experiment not in exps:
        raise ValueError(f"unknown experiment {experiment!r}: want one of {', '.join(exps)} or 'all'")
    kinds = experiment_kinds(exps[experiment])
    if kind not in kinds:
        raise ValueError(f"experiment {experiment} does not run on --kind {kind} VRs (it runs on: {', '.join(kinds)})")
    return [experiment]


def display_command(argv: list[str]) -> str:
    """The command line as a report shows it (``--out DIR`` left out: it does not change the result)."""
    import shlex

    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        if a.startswith("--out="):
            continue
        shown.append(a)
    return "xtc " + shlex.join(shown)


def finish(name: str, outcome: Any, host: dict[str, Any], command: str, duration_s: float, quick: bool) -> str:
    """Complete ``outcome.result`` (experiment, host, command, duration, goals); return the full markdown report."""
    from xtc_lab.lab.harness import markdown_table

    outcome.result.setdefault("experiment", name)
    outcome.result.setdefault("host", host)
    outcome.result["quick"] = quick
    outcome.result["command"] = command
    outcome.result["duration_s"] = round(duration_s, 1)
    outcome.result["goals"] = [{"goal": g.goal, "measured": g.measured, "met": g.met} for g in outcome.goals]
    md = outcome.report_md
    if outcome.goals:
        md = md.rstrip() + "\n\n## Goals\n\n" + markdown_table(
            ["goal", "measured", "met"], [(g.goal, g.measured, "yes" if g.met else "**no**") for g in outcome.goals])
    md += (f"\n\nCommand: `{command}`; host: {host['cpus']} CPUs ({host['cpu_model']}), kernel {host['kernel']}, "
           f"load {host['load_avg_1m']} at the start; took {duration_s:.0f} s.\n")
    return md
