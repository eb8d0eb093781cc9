"""The XCo paper's switch-queue figures (27, 1(a), 1(b), 25-26) on the simulator
(:mod:`xtc_lab.xco.simulate`): the runs, their tables and plots, and the command line
(``xtc simulate xco FIG``, ``python -m xtc_lab.xco.simulate_figures``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from xtc.xco.topology import load_topology, parse_topology

from .simulate import DATA, MODES, fig27_flows, simulate
from .topologies import fig27

__all__ = ["run_fig27", "run_fig1", "run_fig25", "add_xco", "main"]


#: Figure 27's loss is also given from this simulated time on: once the agents have started (their
#: flows turn large and are held within about two slices of 10 ms).
AFTER_START_S = 0.05
PAPER_FIG27 = {"none": "up to 90", "timeslice": "almost none", "rate": "not simulated"}


def run_fig27(rows_list: Sequence[int], modes: Sequence[str] = ("none", "timeslice", "rate"),
              progress: bool = False, **kw: Any) -> dict[str, Any]:
    """Figure 27: loss on the rack/row/core tree as the number of rows grows."""
    out_rows = []
    for rows in rows_list:
        topo = parse_topology(fig27(rows))
        flows = fig27_flows(rows)
        row: dict[str, Any] = {"rows": rows, "hosts": topo.n_hosts, "loss_pct": {}, "loss_after_start_pct": {},
                               "delivered_gbps": {}, "max_offered_ratio": {}, "wall_s": {}}
        for m in modes:
            after = kw.get("duration_s", 1.0) > AFTER_START_S
            r = simulate(topo, flows, m, mark_s=AFTER_START_S if after else None, **kw)
            row["loss_pct"][m] = round(r.loss_pct, 4)
            row["loss_after_start_pct"][m] = round(r.loss_after_mark_pct, 4) if after else None
            row["delivered_gbps"][m] = round(r.delivered_gbps, 3)
            row["max_offered_ratio"][m] = round(r.max_offered_ratio, 4)
            row["wall_s"][m] = round(r.wall_s, 2)
            if r.xco:
                row.setdefault("xco", {})[m] = r.xco
            if progress:
                print(f"fig27 rows={rows} hosts={topo.n_hosts} {m}: loss {r.loss_pct:.4f}% "
                      f"delivered {r.delivered_gbps:.1f} Gb/s wall {r.wall_s:.1f} s"
                      + (f" (cores {r.xco['wall_s']:.1f} s)" if r.xco else ""), file=sys.stderr)
        out_rows.append(row)
    return {"experiment": "fig27", "params": _params(kw), "paper_loss_pct": PAPER_FIG27, "rows": out_rows}


def _params(kw: dict[str, Any]) -> dict[str, Any]:
    sig = {"duration_s": 1.0, "slice_us": 10_000, "delay_us": 100, "lead_us": None, "dt_us": 10, "buffer_us": 1000.0,
           "cores": True}
    sig.update({k: v for k, v in kw.items() if k in sig})
    return sig


def run_fig1(which: str, modes: Sequence[str] = ("none", "timeslice", "rate"), **kw: Any) -> dict[str, Any]:
    """Figures 1(a)/1(b) with N = 1.. UDP senders (the loss of Figures 23/24) and the schedule of
    all senders slot by slot, compared with Figure 10."""
    spec = json.loads((DATA / f"fig10{which}.json").read_text())
    topo = load_topology(DATA / spec["topology"])
    senders = [topo.host_id(h) for h in spec["senders"]]
    dest = {topo.host_id(h): topo.host_id(spec["dest"][h]) for h in spec["senders"]}
    sweep = []
    for n in range(1, len(senders) + 1):
        flows = [(x, dest[x]) for x in senders[:n]]
        e: dict[str, Any] = {"senders": n, "loss_pct": {}, "delivered_gbps": {}}
        for m in modes:
            r = simulate(topo, flows, m, **kw)
            e["loss_pct"][m] = round(r.loss_pct, 4)
            e["delivered_gbps"][m] = round(r.delivered_gbps, 3)
        sweep.append(e)
    sk = dict(kw, slice_us=spec["slice_us"], duration_s=len(spec["slices"]) * spec["slice_us"] / 1e6)
    # the scheduler's schedule (every sender backlogged at t = 0, as in Figure 10), not the agents' start
    r = simulate(topo, [(x, dest[x]) for x in senders], "timeslice", record_slots=True, **dict(sk, cores=False))
    matrix = [[int(x in set(s)) for x in senders] for s in r.slots]
    return {"experiment": f"fig1{which}", "params": _params(kw), "sweep": sweep,
            "schedule": {"senders": spec["senders"], "slices": matrix,
                         "equals_figure10": matrix == spec["slices"]}}


def run_fig25(modes: Sequence[str] = ("none", "timeslice", "rate"), progress: bool = False,
              **kw: Any) -> dict[str, Any]:
    """Figures 25-26 on the simulator alone: Figure 1(a)'s five senders into r1, the last K of them
    UDP at line rate and the others TCP (Reno windows), K = 0..5; the loss at the bottleneck and
    the mean goodput of a TCP flow, per mode."""
    spec = json.loads((DATA / "fig10a.json").read_text())
    topo = load_topology(DATA / spec["topology"])
    flows = [(topo.host_id(h), topo.host_id(spec["dest"][h])) for h in spec["senders"]]
    n = len(flows)
    mixes = []
    for k_udp in range(n + 1):
        tcp = [i < n - k_udp for i in range(n)]
        e: dict[str, Any] = {"tcp": n - k_udp, "udp": k_udp, "loss_pct": {}, "delivered_gbps": {},
                             "tcp_per_flow_mbps": {}}
        for m in modes:
            r = simulate(topo, flows, m, tcp=tcp, **kw)
            got = [b for b, t in zip(r.flow_delivered_bytes, tcp) if t]
            e["loss_pct"][m] = round(r.loss_pct, 4)
            e["delivered_gbps"][m] = round(r.delivered_gbps, 3)
            e["tcp_per_flow_mbps"][m] = round(sum(got) * 8 / r.sim_s / len(got) / 1e6, 2) if got else None
            if progress:
                print(f"fig25 {n - k_udp} TCP + {k_udp} UDP {m}: loss {r.loss_pct:.2f}% "
                      f"wall {r.wall_s:.1f} s", file=sys.stderr)
        mixes.append(e)
    return {"experiment": "fig25", "params": _params(kw), "senders": spec["senders"], "mixes": mixes}


# -- output -----------------------------------------------------------------------------------------

def fig27_table(res: dict[str, Any]) -> str:
    modes = list(res["rows"][0]["loss_pct"]) if res["rows"] else []
    head = f"| rows | hosts | {_per_mode('loss {m} (%)', modes)} | {_per_mode('delivered {m} (Gb/s)', modes)} |"
    after = [m for m in modes if m != "none"]
    head += "".join(f" loss {m} after {AFTER_START_S * 1000:.0f} ms (%) |" for m in after)
    lines = [head, "|" + "---:|" * (2 + 2 * len(modes) + len(after))]
    for r in res["rows"]:
        lines.append(f"| {r['rows']} | {r['hosts']} | {_cells(r['loss_pct'], modes, '.4f')} | "
                     f"{_cells(r['delivered_gbps'], modes, '.1f')} |"
                     + "".join(f" {_num(r.get('loss_after_start_pct', {}).get(m))} |" for m in after))
    lines.append("")
    lines.append("Paper (Figure 27, text of section 5): without XCo up to 90 % loss; with XCo almost none.")
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _per_mode(label: str, modes: list[str]) -> str:
    """Header cells: ``label`` once per mode, ``{m}`` the mode."""
    return " | ".join(label.format(m=m) for m in modes)


def _cells(values: dict[str, float | None], modes: list[str], fmt: str) -> str:
    """A row's cells: each mode's value in ``fmt`` (None: ``-``)."""
    return " | ".join("-" if values[m] is None else format(values[m], fmt) for m in modes)


def _loss_table(first: str, rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], loss_fmt: str,
                other: str, other_key: str, other_fmt: str) -> list[str]:
    """A table of a row per entry (``label`` of it first), its loss per mode, then ``other_key`` per mode
    (headed ``other``, ``{m}`` the mode)."""
    modes = list(rows[0]["loss_pct"]) if rows else []
    lines = [f"| {first} | {_per_mode('loss {m} (%)', modes)} | {_per_mode(other, modes)} |",
             "|" + "---:|" * (1 + 2 * len(modes))]
    lines += [f"| {label(r)} | {_cells(r['loss_pct'], modes, loss_fmt)} | {_cells(r[other_key], modes, other_fmt)} |"
              for r in rows]
    return lines


def fig1_table(res: dict[str, Any]) -> str:
    lines = _loss_table("senders", res["sweep"], lambda e: e["senders"], ".4f",
                        "delivered {m} (Gb/s)", "delivered_gbps", ".3f")
    s = res["schedule"]
    lines += ["", f"Schedule, one row per slot (1 = may send), {' '.join(s['senders'])}; "
              f"equal to Figure 10({res['experiment'][-1]}): {s['equals_figure10']}", ""]
    lines += ["    " + " ".join(str(v) for v in row) for row in s["slices"]]
    return "\n".join(lines)


def fig25_table(res: dict[str, Any]) -> str:
    lines = _loss_table("TCP+UDP", res["mixes"], lambda e: f"{e['tcp']}+{e['udp']}", ".2f",
                        "per TCP flow {m} (Mb/s)", "tcp_per_flow_mbps", ".1f")
    lines += ["", "Paper (Figures 25-26): NS3 and the testbed report similar loss and similar TCP throughput; "
              "the lab's comparison: docs/results/2026-11-26-xco-testbed/xco-testbed.md, \"Figures 24-26\"."]
    return "\n".join(lines)


def _plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if res["experiment"] == "fig25":
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
        xs = [e["udp"] for e in res["mixes"]]
        for i, m in enumerate(res["mixes"][0]["loss_pct"]):
            ax1.plot(xs, [e["loss_pct"][m] for e in res["mixes"]], marker="os^x"[i % 4], label=m)
            pts = [(e["udp"], e["tcp_per_flow_mbps"][m]) for e in res["mixes"] if e["tcp_per_flow_mbps"][m] is not None]
            ax2.plot([x for x, _ in pts], [y for _, y in pts], marker="os^x"[i % 4], label=m)
        ax1.set_xlabel("UDP senders (of 5)")
        ax1.set_ylabel("packet loss (%)")
        ax1.set_title("Figure 25 (simulated): loss at the bottleneck")
        ax2.set_xlabel("UDP senders (of 5)")
        ax2.set_ylabel("goodput per TCP flow (Mb/s)")
        ax2.set_title("Figure 26 (simulated): TCP goodput")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if res["experiment"] == "fig27":
        xs = [r["hosts"] for r in res["rows"]]
        for i, m in enumerate(res["rows"][0]["loss_pct"]):
            ax.plot(xs, [r["loss_pct"][m] for r in res["rows"]], marker="os^x"[i % 4], ls=("-", "--", ":", "-.")[i % 4],
                    label=f"simulated: {m}")
        for i, m in enumerate(res["rows"][0].get("loss_after_start_pct", {})):
            ys = [r["loss_after_start_pct"][m] for r in res["rows"]]
            if m != "none" and None not in ys:
                ax.plot(xs, ys, marker="os^x"[i % 4], ls=":", alpha=0.7,
                        label=f"simulated: {m}, after {AFTER_START_S * 1000:.0f} ms")
        ax.axhline(90, color="grey", ls="--", lw=1, label="paper: no XCo, 'up to 90%'")
        ax.set_xlabel("hosts")
        ax.set_title("Figure 27: packet loss, half the hosts send UDP at line rate")
    else:
        xs = [e["senders"] for e in res["sweep"]]
        for i, m in enumerate(res["sweep"][0]["loss_pct"]):
            ax.plot(xs, [e["loss_pct"][m] for e in res["sweep"]], marker="os^x"[i % 4], ls=("-", "--", ":", "-.")[i % 4],
                    label=f"simulated: {m}")
        ax.set_xlabel("UDP senders")
        ax.set_title(f"Figure 1({res['experiment'][-1]}): packet loss at the bottleneck (cf. Figures 23/24)")
    ax.set_ylabel("packet loss (%)")
    ax.set_ylim(-2, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- command line -----------------------------------------------------------------------------------

def _int_list(text: str) -> list[int]:
    try:
        vals = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not vals or any(v < 2 or v % 2 for v in vals):
        raise argparse.ArgumentTypeError("rows must be even integers >= 2")
    return vals


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("figure", choices=("fig27", "fig1a", "fig1b", "fig25"),
                   help="which experiment (fig25: Figures 25-26, TCP and UDP senders, Reno TCP)")
    p.add_argument("--rows", type=_int_list, default=list(range(4, 25, 2)),
                   help="fig27: comma-separated numbers of rows (default 4,6,...,24 = 800..4800 hosts)")
    p.add_argument("--modes", default="none,timeslice,rate",
                   help="comma-separated modes among none, timeslice, rate, hybrid")
    p.add_argument("--duration-s", type=float, default=1.0, help="simulated seconds per run (default 1)")
    p.add_argument("--slice-us", type=int, default=10_000, help="timeslot, microseconds (default 10000)")
    p.add_argument("--delay-us", type=int, default=100, help="controller-to-host directive delay, us (default 100)")
    p.add_argument("--lead-us", type=int, default=None, help="how early a boundary's directives are sent, us (default: the delay)")
    p.add_argument("--dt-us", type=int, default=10, help="time step, microseconds (default 10)")
    p.add_argument("--buffer-us", type=float, default=1000.0,
                   help="buffer of a port without buffer_bytes, in microseconds of its rate (default 1000)")
    p.add_argument("--no-fast-forward", action="store_true", help="compute every step")
    p.add_argument("--control", choices=("cores", "scheduler"), default="cores",
                   help="cores (default): the product's agent and controller cores over in-memory gates and a "
                        "simulated clock (xtc_lab.xco.oneloop); scheduler: the scheduler alone, every flow "
                        "backlogged at t = 0 (the earlier model)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", type=Path, default=None, help="write JSON, table (.md) and PNG to this directory")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        print(f"xtc simulate xco: --modes: unknown mode(s) {bad}; choose among {', '.join(MODES)}", file=sys.stderr)
        return 2
    kw = {"duration_s": args.duration_s, "slice_us": args.slice_us, "delay_us": args.delay_us,
          "lead_us": args.lead_us, "dt_us": args.dt_us, "buffer_us": args.buffer_us,
          "fast_forward": not args.no_fast_forward, "cores": args.control == "cores"}
    t0 = time.perf_counter()
    try:
        if args.figure == "fig27":
            res = run_fig27(args.rows, modes, progress=not args.quiet, **kw)
            table = fig27_table(res)
        elif args.figure == "fig25":
            res = run_fig25(modes, progress=not args.quiet, **kw)
            table = fig25_table(res)
        else:
            res = run_fig1(args.figure[-1], modes, **kw)
            table = fig1_table(res)
    except ValueError as e:
        print(f"xtc simulate xco: {e}", file=sys.stderr)
        return 2
    res["wall_s_total"] = round(time.perf_counter() - t0, 1)
    res["params"]["fast_forward"] = not args.no_fast_forward
    text = json.dumps(res, indent=2)
    if args.json:
        if args.figure == "fig27":
            print(json.dumps({"rows": [{"hosts": r["hosts"], "loss_pct": r["loss_pct"]} for r in res["rows"]]}))
        else:
            print(text)
    else:
        print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.figure}.json").write_text(text + "\n")
        (args.out / f"{args.figure}.md").write_text(table + "\n")
        _plot(res, args.out / f"{args.figure}.png")
        if not args.json:
            print(f"\nwrote {args.out}/{args.figure}.json, .md, .png")
    return 0


def add_xco(sub: Any) -> None:
    """Register ``xtc simulate xco FIG`` on the ``simulate`` subparsers."""
    p = sub.add_parser("xco", help="XCo: switch queues with finite buffers under the XCo scheduler (Figures 27, 1(a), 1(b), 25-26)",
                       description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.xco.simulate_figures", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
