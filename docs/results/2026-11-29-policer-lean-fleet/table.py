"""The table of this session's runs (python table.py > tables.md): each run's fleet and engine; with ``--plot``,
also throughput.png: the measurements a second against the routers, beside what the healthy routers ask."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def runs_table() -> list[str]:
    lines = ["| run | routers | the fleet's CPU (cores) | measured / s | CPU / measurement (ms) | links thread | worker "
             "| measured by sample / list / probe (window) | resets | late replies | RSS (MB) | pymalloc arenas (in use) (MB) "
             "| structures (MB) | shed (the window) |", "|" + "---|" * 14]
    for f in sorted(HERE.glob("[rst]*-*-*.json")):
        if not f.stat().st_size:  # (a run still going)
            continue
        d = json.loads(f.read_text())
        t, by, ln, heap = d["thread_cpu_ms_per_measurement"], d["measured_by"]["plain"], d["links"], d["heap_bytes"]
        lines.append(
            f"| {f.stem} | {d['routers']:,} | {d['fleet_cpu_s_per_s']} | {d['measured_per_s']['plain']:,} "
            f"| {d['cpu_ms_per_measurement']['plain']} | {t.get('policer-links')} | {t.get('policer-worker')} "
            f"| {by['sampled']:,} / {by['listed']:,} / {by['probed']:,} | {ln['resets']:,} | {ln['late_replies']:,} "
            f"| {d['rss_mb']} | {heap['pymalloc_arenas'] / 1e6:.1f} ({heap['pymalloc_in_use'] / 1e6:.1f}) "
            f"| {sum(d['structure_bytes'].values()) / 1e6:.1f} | {by.get('shed', '')} |")
    return lines


def plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for fleet, marker in (("main", "o"), ("lean", "s")):
        pts = []
        for f in sorted(HERE.glob(f"r*-*-{fleet}.json")):  # (the fleet runs: r3000, r4000, r5000)
            d = json.loads(f.read_text())
            pts.append((d["routers"], d["measured_per_s"]["plain"]))
        ax.scatter(*zip(*pts), marker=marker, label=f"measured / s, fleet {fleet}")
    xs = [3000, 4000, 5000]
    ax.plot(xs, [0.9 * x for x in xs], "k--", label="healthy routers (one measurement each a second)")
    ax.set_xlabel("routers (16 VRs each, 10% dead)")
    ax.set_ylabel("measurements / s")
    ax.set_title("One engine process and the stand-in fleet on 2 cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    print("\n".join(runs_table()))
    if "--plot" in sys.argv[1:]:
        plot(HERE / "throughput.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
