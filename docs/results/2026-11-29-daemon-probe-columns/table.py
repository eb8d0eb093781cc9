"""The runs' table (table.md) and figure (figure.png): the daemon's CPU and its controllers' stage, before/after.

    python table.py     # from this folder, with the project's venv (matplotlib)
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).parent
BANK = "  of which controllers (bank)"


def run(path: Path) -> dict:
    r = json.loads(path.read_text())["results"][0]
    b = r["breakdown_us_per_period"]
    return {"core_percent": r["core_percent"], "core_us": b["core"], "bank_us": b[BANK], "counters_us": b["counters"]}


def group(pattern: str) -> list[dict]:
    return [run(p) for p in sorted(HERE.glob(pattern))]


def span(rows: list[dict], key: str, fmt: str, scale: float = 1.0) -> str:
    v = sorted(r[key] * scale for r in rows)
    return f"{fmt.format(v[0])}-{fmt.format(v[-1])}" if len(v) > 1 else fmt.format(v[0])


groups = {
    "steady, before (6f27b55)": group("bench-*-before.json"),
    "steady, after": group("bench-*-after.json"),
    "steady, without the probe": group("noprobe-*.json"),
    "moving, before (6f27b55)": group("moving-*-before.json"),
    "moving, after": group("moving-*-after.json"),
}
lines = ["| runs | n | the daemon's CPU (% of a core) | its core stage (ms a period) | of it, the controllers (ms) | "
         "the counters (ms) |", "|---|---|---|---|---|---|"]
for name, rows in groups.items():
    lines.append(f"| {name} | {len(rows)} | {span(rows, 'core_percent', '{:.2f}')} | "
                 f"{span(rows, 'core_us', '{:.1f}', 1e-3)} | {span(rows, 'bank_us', '{:.2f}', 1e-3)} | "
                 f"{span(rows, 'counters_us', '{:.1f}', 1e-3)} |")
(HERE / "table.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))

fig, ax = plt.subplots(figsize=(7, 3.2))
for i, (name, rows) in enumerate(groups.items()):
    ys = [r["bank_us"] / 1e3 for r in rows]
    ax.scatter(ys, [i] * len(ys), color="C0" if "after" in name else ("C2" if "without" in name else "C3"))
ax.set_yticks(range(len(groups)), list(groups))
ax.set_xlabel("the daemon's controllers' stage, ms a period (1,000 VRs, 1 s period)")
ax.set_xlim(left=0)
ax.grid(axis="x", alpha=0.3)
fig.tight_layout()
fig.savefig(HERE / "figure.png", dpi=110)
