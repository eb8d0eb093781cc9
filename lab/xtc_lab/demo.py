"""``xtc demo``: two virtual routers held at two different setpoints, with a live table.

On a host that can run the lab (root, libvirt with the LXC driver) the demo is real: two LXC
VRs forward real packets and the XTC daemon holds them (:mod:`xtc_lab.lab.demo`).  Elsewhere, or
with ``--sim``, it says why and runs the simulated demo below.

Simulated demo: two VRs share one Dom0, each offered a 100 kp/s UDP stream of 64-byte packets
(the paper's worst case: a source that never backs off).  XTC holds VR "red" at
20 kp/s and VR "blue" at 60 kp/s, then swaps the setpoints half-way, while a CPU
hog takes 15% of "blue"'s CPU for a while.  Each control period the demo prints
setpoint, measured rate and cap per VR; at the end it writes the time series as
JSON and a PNG plot.  The loop is the daemon's own (:func:`xtc_lab.sim.run.run_loop`); ``cap`` is
the cap in force during the period.

This demo runs on the simulated plant (:mod:`xtc_lab.sim.plant`), so it needs no root
and no hypervisor; ``--speed`` sets how many simulated seconds pass per wall
second (0 = as fast as possible).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import xtc.models
from xtc.control import KINDS, make_controller
from xtc_lab.sim.plant import Dom0Config, Plant, PlantConfig, VRConfig, udp
from xtc_lab.sim.run import run_loop
from xtc_lab.unwind import unwinding

VR_NAMES = ("red", "blue")


def run_demo(
    duration_s: float = 60.0,
    kind: str | None = None,
    seed: int = 1,
    on_period: Any = None,
) -> dict[str, Any]:
    """Run the demo on the daemon's loop (:func:`xtc_lab.sim.run.run_loop`); returns the time series.

    ``on_period(row)`` is called with each period's row once the run is done (pure apart from it).
    """
    model = xtc.models.PAPER_MODEL
    plant = PlantConfig(
        vrs=tuple(VRConfig(traffic=udp(100_000.0)) for _ in VR_NAMES),
        dom0s=(Dom0Config(capacity_pps=250_000.0),),
        seed=seed,
    )
    periods = int(duration_s)
    half = periods // 2
    hog_from, hog_to = periods // 4, 3 * periods // 4

    def setpoints(t_end_s: float) -> np.ndarray:
        k = int(round(t_end_s)) - 1  # the period that ends at t_end_s
        return np.array([20_000.0, 60_000.0]) if k < half else np.array([60_000.0, 20_000.0])

    def hog(k: int) -> float:
        return 0.15 if hog_from <= k < hog_to else 0.0

    def events(p: Plant, t_s: float) -> None:
        p.set_hog(1, hog(int(round(t_s))))

    tr = run_loop(plant, lambda: make_controller(model, kind), setpoints, float(periods), names=VR_NAMES, events=events)
    rows: list[dict[str, Any]] = []
    for k in range(periods):
        row = {
            "t_s": float(tr.t_s[k]),
            "setpoint_pps": tr.setpoint_pps[k].tolist(),
            "forwarded_pps": [round(float(x), 1) for x in tr.forwarded_pps[k]],
            "offered_pps": [round(float(x), 1) for x in tr.offered_pps[k]],
            "cap_percent": [round(float(c), 3) for c in tr.cap_percent[k]],
            "hog_fraction_blue": hog(k),
        }
        rows.append(row)
        if on_period is not None:
            on_period(row)
    return {"vrs": list(VR_NAMES), "controller": kind or "xtc", "seed": seed, "periods": rows}


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    """Mean relative error per VR over the settled half of each setpoint phase."""
    rows = result["periods"]
    n = len(rows)
    half = n // 2
    out: dict[str, Any] = {}
    for i, name in enumerate(result["vrs"]):
        errs = []
        for lo, hi in ((half // 2, half), (half + half // 2, n)):
            meas = np.array([r["forwarded_pps"][i] for r in rows[lo:hi]])
            sp = rows[lo]["setpoint_pps"][i]
            if len(meas):
                errs.append(abs(float(meas.mean()) - sp) / sp)
        out[name] = {"worst_mean_error_fraction": round(max(errs), 4) if errs else None}
    return out


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["periods"]
    t = [r["t_s"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for i, (name, colour) in enumerate(zip(result["vrs"], ("tab:red", "tab:blue"))):
        ax1.plot(t, [r["forwarded_pps"][i] / 1000 for r in rows], color=colour, label=f"{name} measured")
        ax1.step(t, [r["setpoint_pps"][i] / 1000 for r in rows], color=colour, ls="--", where="pre", label=f"{name} setpoint")
        ax2.plot(t, [r["cap_percent"][i] for r in rows], color=colour, label=f"{name} cap")
    hog_t = [r["t_s"] for r in rows if r["hog_fraction_blue"] > 0]
    if hog_t:
        for ax in (ax1, ax2):
            ax.axvspan(hog_t[0], hog_t[-1], color="grey", alpha=0.15, label="15% CPU hog in blue" if ax is ax1 else None)
    ax1.set_ylabel("forwarded rate (kp/s)")
    ax2.set_ylabel("cap (% of one CPU)")
    ax2.set_xlabel("time (s)")
    ax1.legend(loc="upper right", fontsize=8, ncol=3)
    ax2.legend(loc="upper right", fontsize=8)
    ax1.set_title(f"XTC demo (simulated plant, controller '{result['controller']}')")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    kind = getattr(args, "kind", None)
    if kind is not None and args.sim:
        print("xtc demo: --kind chooses the lab's VRs and --sim runs no lab: give one of them", file=sys.stderr)
        return 1
    if not args.sim:
        from xtc_lab.lab.harness import lab_host_problem

        problem = lab_host_problem(kind or "lxc")
        if problem is None:
            from xtc_lab.lab import demo as lab_demo
            from xtc_lab.lab.netlab import LabError

            try:
                return lab_demo.main(Path(args.out), args.lab_duration_s, args.offered_pps, kind or "lxc")
            except LabError as e:
                print(f"xtc demo: the lab demo failed: {e}", file=sys.stderr)
                return 1
        if kind is not None:  # asked for these VRs: no silent fall-back to the simulation
            print(f"xtc demo: the lab cannot run {kind} VRs here: {problem}", file=sys.stderr)
            return 4
        print(f"xtc demo: the real lab cannot run here ({problem}); running the simulated demo instead.\n")
    return main_sim(args)


def main_sim(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        "XTC demo on the simulated plant: two VRs, 100 kp/s UDP each, one Dom0.\n"
        "red is held at 20 kp/s and blue at 60 kp/s, swapped half-way; a 15% CPU hog runs in blue "
        "during the middle half.\n"
    )
    header = f"{'t(s)':>5} | {'red set':>8} {'red kp/s':>8} {'red cap%':>8} | {'blue set':>8} {'blue kp/s':>9} {'blue cap%':>9} | hog"
    print(header)
    print("-" * len(header))
    tty = sys.stdout.isatty()

    def show(row: dict[str, Any]) -> None:
        sp, me, cap = row["setpoint_pps"], row["forwarded_pps"], row["cap_percent"]
        print(
            f"{row['t_s']:5.0f} | {sp[0]/1000:8.1f} {me[0]/1000:8.1f} {cap[0]:8.2f} | "
            f"{sp[1]/1000:8.1f} {me[1]/1000:9.1f} {cap[1]:9.2f} | {'on' if row['hog_fraction_blue'] else ''}",
            flush=True,
        )
        if args.speed > 0 and tty:
            time.sleep(1.0 / args.speed)

    result = run_demo(duration_s=args.duration_s, kind=args.controller, seed=args.seed, on_period=show)
    result["summary"] = _summary(result)
    (out / "demo.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "demo.png")
    print()
    for name, s in result["summary"].items():
        print(f"{name}: worst mean error over the settled part of each phase = {100 * s['worst_mean_error_fraction']:.1f}%")
    print(f"wrote {out / 'demo.json'} and {out / 'demo.png'}")
    return 0


@unwinding
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="two VRs held at two setpoints, live table and plot (host lab, else simulated)",
                       epilog="example: xtc demo --sim --duration-s 30")
    p.add_argument("--sim", action="store_true", help="run the simulated demo even where the lab could run")
    p.add_argument("--kind", choices=("lxc", "netns", "qemu"), default=None,
                   help="lab demo: the VRs, lxc (default), netns or qemu (libvirt QEMU domains forwarding in their own "
                        "kernel); given, the demo fails where the lab cannot run them instead of simulating")
    p.add_argument("--lab-duration-s", type=float, default=40.0, help="lab demo: seconds of control (default 40)")
    p.add_argument("--offered-pps", type=float, default=80_000.0, help="lab demo: offered UDP rate per VR, packets/s (default 80000)")
    p.add_argument("--duration-s", type=float, default=60.0, help="simulated demo: simulated seconds (default 60)")
    p.add_argument("--controller", choices=KINDS, default=None, help="controller kind (default: XTC's own)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--speed", type=float, default=10.0, help="simulated seconds per wall second on a terminal (0 = no wait)")
    p.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    p.set_defaults(func=main)
