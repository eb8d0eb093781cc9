"""A results session's ``xtc bench daemon --breakdown --json`` runs as a table and a figure, by group.

A session's ``table.py`` names its groups (a title and a glob of its runs' JSON) and the stages to show;
this prints the table (Markdown, spans over each group's runs) and draws one stage per group as dots.
The daemon-probe-columns session's ``table.py`` (docs/results/2026-11-29-daemon-probe-columns/) stays as
it ran; later sessions call this.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["BANK", "draw", "group", "run", "table"]

#: The controllers' stage within the core's, as ``--breakdown`` names it.
BANK = "  of which controllers (bank)"


def run(path: Path) -> dict[str, Any]:
    """One run: ``core_percent`` (the daemon's CPU, % of a core) and each stage's us a period."""
    r = json.loads(path.read_text())["results"][0]
    return {"core_percent": r["core_percent"], **r["breakdown_us_per_period"]}


def group(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """The runs whose JSON in ``folder`` match ``pattern``, by name."""
    return [run(p) for p in sorted(folder.glob(pattern))]


def _span(values: list[float], fmt: str) -> str:
    v = sorted(values)
    return f"{fmt.format(v[0])}-{fmt.format(v[-1])}" if len(v) > 1 else fmt.format(v[0])


def table(groups: dict[str, list[dict[str, Any]]], stages: dict[str, str]) -> str:
    """A Markdown table: a row per group (its runs' count, the daemon's CPU), a column per stage of
    ``stages`` (the stage's ``--breakdown`` label -> the column's title), in ms a period."""
    head = "| runs | n | the daemon's CPU (% of a core) | " + " | ".join(f"{t} (ms a period)" for t in stages.values()) + " |"
    lines = [head, "|---" * (3 + len(stages)) + "|"]
    for name, rows in groups.items():
        cells = [_span([r.get(s, 0.0) / 1e3 for r in rows], "{:.2f}") for s in stages]
        lines.append(f"| {name} | {len(rows)} | {_span([r['core_percent'] for r in rows], '{:.2f}')} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def draw(groups: dict[str, list[dict[str, Any]]], stage: str, xlabel: str, path: Path) -> None:
    """One stage's ms a period, a row of dots per group (after: blue, before: red, others: green)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(groups) + 1.0))
    for i, (name, rows) in enumerate(groups.items()):
        ys = [r.get(stage, 0.0) / 1e3 for r in rows]
        ax.scatter(ys, [i] * len(ys), color="C0" if "after" in name else ("C3" if "before" in name else "C2"))
    ax.set_yticks(range(len(groups)), list(groups))
    ax.set_xlabel(xlabel)
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
