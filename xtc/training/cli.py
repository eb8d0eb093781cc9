"""``xtc train collect | fit | design | all``: the training tool's command line.

Exit status: 0 done; 1 bad input or unusable data (nothing written); 3 poor fit
(R^2 < 0.9) not written because ``--accept-poor-fit`` was not given.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from xtc.host.errors import HostAdapterError
from xtc.models import ModelError, load_model, save_model

__all__ = ["register", "main"]

EXIT_ERROR = 1
EXIT_POOR_FIT = 3


def _add_collect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=("sim", "libvirt", "cgroup"), default="sim",
                   help="where the VR runs: the simulated plant, a libvirt domain or a cgroup (default sim)")
    p.add_argument("--caps", default="5:100:5",
                   help="caps to visit, percent of one CPU: list and/or START:STOP:STEP ranges (default 5:100:5)")
    p.add_argument("--offered-pps", default="100000",
                   help="offered rate(s), packets/s, comma-separated (default 100000); real backends only record it")
    p.add_argument("--samples", type=int, default=10, help="settled samples per cap (default 10)")
    p.add_argument("--settle", type=int, default=2,
                   help="samples per cap taken right after the change and flagged settling (default 2)")
    p.add_argument("--period", type=float, default=1.0, help="sample length, seconds (default 1, the control period)")
    p.add_argument("--vr", default=None, help="VR name (sim: default vr1; cgroup: a label)")
    p.add_argument("--seed", type=int, default=1, help="sim: plant seed (default 1)")
    p.add_argument("--traffic", choices=("udp", "tcp"), default="udp", help="sim: traffic kind (default udp)")
    p.add_argument("--domain", help="libvirt: domain name")
    p.add_argument("--uri", default="lxc:///", help="libvirt: connection URI (default lxc:///)")
    p.add_argument("--kind", choices=("lxc", "qemu", "xen"), default=None,
                   help="libvirt: how the cap is written (default: from the connection's driver)")
    p.add_argument("--cgroup", help="cgroup: the VR's cgroup directory")
    p.add_argument("--interfaces", default="",
                   help="host-side interfaces of the VR, comma-separated (libvirt: default from the domain XML)")
    p.add_argument("--proc-net-dev", default="/proc/net/dev",
                   help="counter file (e.g. /proc/<pid>/net/dev for another namespace)")
    p.add_argument("--hardware", default=None, help="description of the hardware, recorded in the CSV")
    p.add_argument("--traffic-desc", default=None, help="description of the traffic, recorded in the CSV")
    p.add_argument("--date", default=None, help="date of the run (recorded; YYYY-MM-DD)")
    p.add_argument("--no-traffic-check", action="store_true",
                   help="real backends: sweep even when the first sample sees less than 10%% of --offered-pps "
                        "handed to the VR (host-side TX of its interfaces)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_fit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--offered-rate", type=float, default=None,
                   help="offered rate (pps) of the main model (default: the highest in the sweep)")
    p.add_argument("--plateau-tol-kpps", type=float, default=1.0,
                   help="cap threshold rule: the throughput varies less than this after it (kp/s, default 1)")
    p.add_argument("--method", choices=("steps", "samples"), default="steps",
                   help="estimator of a and b (default steps; see docs/training-csv.md)")
    p.add_argument("--accept-poor-fit", action="store_true", help="write a model even when R^2 < 0.9")


def _add_design_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=None, help="model name (default: the output file's stem)")
    p.add_argument("--poles", default=None,
                   help="PI closed-loop poles, e.g. 0.5,0.6 or 0.24+0.38j (default: the paper's pole locations)")
    p.add_argument("--useful-fraction", type=float, default=0.10,
                   help="cap_min is the lowest cap forwarding this fraction of the offered rate (default 0.10)")
    # (--caps-min: its name before the cap floor had one name, docs/design/names.md; still accepted.)
    p.add_argument("--cap-min-percent", "--caps-min", dest="cap_min_percent", type=float, default=None,
                   help="controller.cap_min_percent of the model file, the floor every controller keeps to (default: the "
                        "chosen cap_min; e.g. 1 to leave cap_min as a recorded recommendation, like the paper)")


def register(subparsers: Any) -> None:
    """Add ``train`` and its subcommands to the ``xtc`` command."""
    train = subparsers.add_parser("train", help="train a model: sweep caps, fit, design gains, write a model file")
    sub = train.add_subparsers(dest="train_command", metavar="STEP")
    train.set_defaults(func=lambda a: (train.print_help(), 2)[1])

    c = sub.add_parser("collect", help="sweep the caps of a VR and write the samples as CSV")
    _add_collect_args(c)
    c.add_argument("--out", required=True, help="CSV to write")
    c.set_defaults(func=cmd_collect)

    f = sub.add_parser("fit", help="fit the log-cap model to a sweep CSV; print R^2 and write plots")
    f.add_argument("csv", help="sweep CSV (docs/training-csv.md)")
    _add_fit_args(f)
    f.add_argument("--plots-dir", default=None, help="where to write the PNG plots (default: beside the CSV)")
    f.set_defaults(func=cmd_fit)

    d = sub.add_parser("design", help="controller gains, margins and cap_min; write the model file")
    d.add_argument("source", metavar="MODEL_OR_FIT",
                   help="a sweep CSV (fitted first) or a model file (.toml) whose gains are redesigned")
    _add_fit_args(d)
    _add_design_args(d)
    d.add_argument("--date", default=None, help="date recorded in [fitted_on] (default: the CSV's metadata)")
    d.add_argument("--out", required=True, help="model file to write (.toml)")
    d.add_argument("--plots-dir", default=None, help="where to write the PNG plots (default: beside --out)")
    d.set_defaults(func=cmd_design)

    a = sub.add_parser("all", help="collect, fit and design in one go; a markdown report and plots in --out-dir")
    _add_collect_args(a)
    _add_fit_args(a)
    _add_design_args(a)
    a.add_argument("--out-dir", required=True, help="directory for sweep.csv, model.toml, plots and report.md")
    a.set_defaults(func=cmd_all)


def _err(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_ERROR


# --------------------------------------------------------------------------------- collect
#: Entry points of sweep targets that live outside the product (the testbed's simulated plant).
TARGET_ENTRY_POINT_GROUP = "xtc.sweep_targets"


def _sim_target(args: argparse.Namespace, offered_pps: float):  # noqa: ANN202 - xtc.training.hosts.SweepTarget
    """The simulated host, which lives in the testbed, found through an entry point.

    The product (``xtc``) never imports the testbed (``xtc_lab``, which depends on it): a router
    host installs the product alone.  ``xtc train ... --backend sim`` is the way to try the whole
    training chain without a lab, so the testbed registers its simulated sweep target under the
    ``xtc.sweep_targets`` entry points, and the command says how to get it when it is missing.
    """
    from importlib.metadata import entry_points

    missing = _Usage("the simulated backend is part of the testbed (pip install xtc-lab)")
    found = [ep for ep in entry_points(group=TARGET_ENTRY_POINT_GROUP) if ep.name == "sim"]
    if not found:
        raise missing
    try:
        make = found[0].load()
    except ModuleNotFoundError as e:  # registered, but its modules are not installed
        if e.name is not None and e.name.split(".")[0] == "xtc_lab":
            raise missing from None
        raise
    return make(args.vr or "vr1", args.seed, args.traffic, offered_pps)


def _collect(args: argparse.Namespace, out: Path) -> None:
    from xtc.training.collect import ProgressBar, SweepPlan, parse_caps, parse_rates, run_sweep
    from xtc.training.sweep import write_sweep_csv

    plan = SweepPlan(parse_caps(args.caps), parse_rates(args.offered_pps), args.samples, args.settle, args.period)
    _check_writable(out)
    ifaces = tuple(i.strip() for i in args.interfaces.split(",") if i.strip())
    meta: dict[str, str] = {"backend": args.backend, "period_s": f"{args.period:g}",
                            "settle_samples": str(args.settle), "samples_per_cap": str(args.samples)}
    min_offered = 0.0
    if args.backend == "sim":
        target = _sim_target(args, plan.offered_pps[0])
        meta.update(target.metadata)
        if args.hardware:
            meta["hardware"] = args.hardware
        if args.traffic_desc:
            meta["traffic"] = args.traffic_desc
    else:
        from xtc.training.hosts import cgroup_target, libvirt_target, this_hardware

        if args.backend == "libvirt":
            if not args.domain:
                raise _Usage("--domain is required with --backend libvirt")
            target = libvirt_target(args.domain, args.uri, args.kind, ifaces, args.proc_net_dev)
        else:
            if not args.cgroup:
                raise _Usage("--cgroup is required with --backend cgroup")
            target = cgroup_target(args.cgroup, ifaces, args.vr or Path(args.cgroup).name, args.proc_net_dev)
        meta.update(
            hardware=args.hardware or this_hardware(),
            traffic=args.traffic_desc or "generated outside the tool (not described: give --traffic-desc)",
            offered_pps_source="external: offered_pps is the rate given with --offered-pps, not generated by the "
                               "tool; measured_offered_pps is the host-side TX of the VR's interfaces",
            date=args.date or datetime.date.today().isoformat(),
        )
        meta.update(target.metadata)
        if not args.no_traffic_check:
            min_offered = 0.1
    if args.date:
        meta["date"] = args.date
    progress = None if args.quiet else ProgressBar(plan.total_samples)
    try:
        with _signals_raise():
            samples = run_sweep(plan, target.host, target.vr, target.offered, progress,
                                min_offered_fraction=min_offered, interfaces=target.interfaces,
                                clock=target.clock, sleep=target.sleep)
    finally:
        target.close()
    write_sweep_csv(out, samples, meta)
    print(f"wrote {len(samples)} samples to {out}")


def _check_writable(out: Path) -> None:
    """Refuse, before a sweep of minutes, an output path that cannot be written."""
    parent = out.resolve().parent
    if not parent.is_dir():
        raise _Usage(f"directory {parent} of --out does not exist")
    if out.is_dir():
        raise _Usage(f"--out {out} is a directory; give a file name")
    if not os.access(parent, os.W_OK):
        raise _Usage(f"cannot write into {parent} (--out)")


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP end the sweep like Ctrl-C: the VR's cap is given back before the process exits."""
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class _Usage(Exception):
    pass


def _guard(fn):  # noqa: ANN001, ANN202
    """Turn the tool's own errors into a message and exit status 1 (or 3 for a poor fit)."""

    def run(args: argparse.Namespace) -> int:
        from xtc.training.pipeline import PoorFitError
        from xtc.training.sweep import TrainingError

        try:
            return fn(args)
        except PoorFitError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_POOR_FIT
        except (TrainingError, ModelError, HostAdapterError, _Usage) as e:
            return _err(str(e))

    return run


@_guard
def cmd_collect(args: argparse.Namespace) -> int:
    _collect(args, Path(args.out))
    return 0


# ------------------------------------------------------------------------------------- fit
@_guard
def cmd_fit(args: argparse.Namespace) -> int:
    from xtc.training import plots
    from xtc.training.fit import fit_sweep, fit_sweeps, primary_offered_pps
    from xtc.training.sweep import read_sweep_csv

    sweep = read_sweep_csv(args.csv)
    rate = args.offered_rate if args.offered_rate is not None else primary_offered_pps(sweep)
    main_fit = fit_sweep(sweep, rate, plateau_tol_kpps=args.plateau_tol_kpps, method=args.method)
    fits, errors = fit_sweeps(sweep, plateau_tol_kpps=args.plateau_tol_kpps, method=args.method)  # type: ignore[arg-type]
    fits[rate] = main_fit
    for r in sorted(fits):
        print(fits[r].summary())
        print()
    for r, e in sorted(errors.items()):
        print(f"not fitted at {r:g} pps: {e}")
    plots_dir = Path(args.plots_dir) if args.plots_dir else Path(args.csv).resolve().parent
    plots_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(args.csv).stem
    p3 = plots.save(plots.throughput_vs_cap({r: f.levels for r, f in fits.items()},
                                            {r: f.cap_threshold_percent for r, f in fits.items()}),
                    plots_dir / f"{stem}-throughput-vs-cap.png")
    p4 = plots.save(plots.residual_plot(main_fit), plots_dir / f"{stem}-residuals.png")
    print(f"plots: {p3}, {p4}")
    if main_fit.poor:
        print(f"POOR FIT: R^2 = {main_fit.r_squared:.4f} < 0.9; `xtc train design` will need --accept-poor-fit",
              file=sys.stderr)
        return 0 if args.accept_poor_fit else EXIT_POOR_FIT
    return 0


# ---------------------------------------------------------------------------------- design
def _design_from_csv(args: argparse.Namespace, csv: Path, out: Path, plots_dir: Path, date: str | None):  # noqa: ANN202
    from xtc.training.analysis import PAPER_PI_POLES, parse_poles
    from xtc.training.pipeline import train_from_sweep, provenance
    from xtc.training.sweep import read_sweep_csv, sha256_of_file

    sweep = read_sweep_csv(csv)
    poles = parse_poles(args.poles) if args.poles else PAPER_PI_POLES
    t = train_from_sweep(
        sweep,
        provenance(sweep, str(csv), sha256_of_file(csv), date),
        name=args.name or out.stem,
        offered_pps=args.offered_rate,
        poles=poles,
        useful_fraction=args.useful_fraction,
        plateau_tol_kpps=args.plateau_tol_kpps,
        method=args.method,
        accept_poor_fit=args.accept_poor_fit,
        cap_min_percent=args.cap_min_percent,
    )
    return t, _write_outputs(t, out, plots_dir)


def _write_outputs(t, out: Path, plots_dir: Path) -> dict[str, Path]:  # noqa: ANN001
    from xtc.training import plots

    out.parent.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    fits = {t.fit.offered_pps: t.fit, **t.other_fits}
    written = {
        "Throughput vs cap": plots.save(
            plots.throughput_vs_cap({r: f.levels for r, f in fits.items()},
                                    {r: f.cap_threshold_percent for r, f in fits.items()}),
            plots_dir / "throughput-vs-cap.png"),
        "Residual plot": plots.save(plots.residual_plot(t.fit), plots_dir / "residuals.png"),
        "Step response": plots.save(plots.step_responses(t.fit.model, [t.pi, t.deadbeat]),
                                    plots_dir / "step-response.png"),
        "Stability region": plots.save(plots.stability_region(t.fit.model, [t.pi, t.deadbeat]),
                                       plots_dir / "stability-region.png"),
    }
    save_model(t.model_file, out)  # last: a failure above leaves no model file behind
    return written


def _print_design(t, out: Path) -> None:  # noqa: ANN001
    print(t.fit.summary())
    for d in (t.pi, t.deadbeat):
        m = d.margins
        print(f"{d.name:<9} Kp = {d.gains.kp:.4e}  Ki = {d.gains.ki:.4e}  settling {d.settling_time_s:g} s  "
              f"overshoot {d.overshoot_percent:.1f} %  stable for b x {m.b_factor_min:.3g}..{m.b_factor_max:.3g}, "
              f"a x {m.a_factor_min:.3g}..{m.a_factor_max:.3g}")
    print(f"cap_min   {t.cap_min.cap_min_percent:g} % ({t.cap_min.method}, {t.cap_min.useful_kpps:g} kp/s useful); "
          f"model floor controller.cap_min_percent = {t.model_file.caps.cap_min_percent:g} %")
    print(f"wrote {out}")


@_guard
def cmd_design(args: argparse.Namespace) -> int:
    src = Path(args.source)
    out = Path(args.out)
    plots_dir = Path(args.plots_dir) if args.plots_dir else out.resolve().parent
    if src.suffix.lower() == ".toml":
        return _redesign_model(args, src, out, plots_dir)
    t, _ = _design_from_csv(args, src, out, plots_dir, args.date)
    _print_design(t, out)
    return 0


def _redesign_model(args: argparse.Namespace, src: Path, out: Path, plots_dir: Path) -> int:
    from dataclasses import replace

    from xtc.training import plots
    from xtc.training.analysis import PAPER_PI_POLES, design_deadbeat, design_pi, parse_poles

    mf = load_model(src)
    poles = parse_poles(args.poles) if args.poles else PAPER_PI_POLES
    pi, db = design_pi(mf.model, poles), design_deadbeat(mf.model)
    new = replace(mf, name=args.name or mf.name, pi=pi.gains, deadbeat=db.gains)
    if args.cap_min_percent is not None:
        if not (1.0 <= args.cap_min_percent <= mf.caps.cap_max_percent):
            raise _Usage(f"--cap-min-percent {args.cap_min_percent:g} must be within 1..{mf.caps.cap_max_percent:g} percent of one CPU")
        new = new.with_caps(cap_min_percent=args.cap_min_percent)
    plots_dir.mkdir(parents=True, exist_ok=True)
    plots.save(plots.step_responses(mf.model, [pi, db]), plots_dir / "step-response.png")
    plots.save(plots.stability_region(mf.model, [pi, db]), plots_dir / "stability-region.png")
    save_model(new, out)
    for d in (pi, db):
        m = d.margins
        print(f"{d.name:<9} Kp = {d.gains.kp:.4e}  Ki = {d.gains.ki:.4e}  settling {d.settling_time_s:g} s  "
              f"overshoot {d.overshoot_percent:.1f} %  stable for b x {m.b_factor_min:.3g}..{m.b_factor_max:.3g}")
    print(f"controller.cap_min_percent {new.caps.cap_min_percent:g} % ("
          + ("--cap-min-percent" if args.cap_min_percent is not None else "kept: a model file has no sweep to choose cap_min from")
          + ")")
    print(f"wrote {out}")
    return 0


# ------------------------------------------------------------------------------------- all
@_guard
def cmd_all(args: argparse.Namespace) -> int:
    from xtc.training.pipeline import markdown_report

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / "sweep.csv"
    _collect(args, csv)
    model = out_dir / "model.toml"
    t, written = _design_from_csv(args, csv, model, out_dir, args.date)
    _print_design(t, model)
    rel = {k: v.name for k, v in written.items()}
    (out_dir / "report.md").write_text(markdown_report(t, rel, model.name, csv.name), encoding="utf-8")
    print(f"report: {out_dir / 'report.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``train`` alone (``python -m xtc.training.cli ...``)."""
    parser = argparse.ArgumentParser(prog="xtc")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
