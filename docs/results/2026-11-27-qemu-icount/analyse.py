"""Summarise this folder: the variants' table (variants.json) and, if run, the tracking run(s).

Run from the repository root with the lab's venv:
    .venv/bin/python docs/results/2026-11-27-qemu-icount/analyse.py
Prints the README's table; writes tracking.json (issue 49's schema) and steps.json when a
tracking-*/tracking.json exists (same rules as ../2026-11-27-qemu-quiet/analyse.py: the lab's
step_noise_stats and step_noise_table; the script as it ran loaded them from that script, git show
3988d09:docs/results/2026-11-27-qemu-icount/analyse.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def variants_table(name: str = "variants.json") -> None:
    doc = json.loads((HERE / name).read_text())
    print("| variant | load (1 min) | uncapped kp/s (CV) | 10 %: kp/s, CV | 30 %: kp/s, CV | vCPU thread CPU % at 10 / 30 % |")
    print("|---|---|---|---|---|---|")
    for v in doc["variants"]:
        if "conditions" not in v or len(v["conditions"]) < 3:
            print(f"| `{v['spec']}` | | {v.get('error', 'incomplete')} | | | |")
            continue
        c = {x["cap_percent"]: x for x in v["conditions"]}
        loads = [x["load_avg_1m"] for x in v["conditions"]]

        def vcpu(x: dict) -> str:
            return "+".join(f"{p:.1f}" for k, p in x["cpu_mean_percent"].items() if "/TCG" in k) or "?"

        print(f"| `{v['spec']}` | {min(loads):.1f}-{max(loads):.1f} | {c[None]['forwarded_mean_pps'] / 1000:.1f} "
              f"({100 * c[None]['forwarded_cv']:.1f} %) | {c[10.0]['forwarded_mean_pps'] / 1000:.1f}, "
              f"**{100 * c[10.0]['forwarded_cv']:.1f} %** | {c[30.0]['forwarded_mean_pps'] / 1000:.1f}, "
              f"**{100 * c[30.0]['forwarded_cv']:.1f} %** | {vcpu(c[10.0])} / {vcpu(c[30.0])} |")


def tracking() -> None:
    from xtc_lab.lab.experiments.tracking import step_noise_stats, step_noise_table, vm_tracking_report

    runs, stats = [], {}
    for p in sorted(HERE.glob("tracking-*/tracking.json")):
        doc = json.loads(p.read_text())
        label = "default" if doc["model"] == "paper" else Path(doc["model"]).name
        runs.append((label, doc))
        stats[p.parent.name] = {"model": label, "qemu_tuning": doc.get("qemu_tuning"), "hold_s": doc["hold_s"],
                                "steps": step_noise_stats(doc)}
    if not runs:
        return
    rep = vm_tracking_report(runs)
    for r, sub in zip(rep["runs"], stats):
        r["run"] = sub
        r["qemu_tuning"] = stats[sub]["qemu_tuning"]
    (HERE / "tracking.json").write_text(json.dumps(rep, indent=1) + "\n")
    (HERE / "steps.json").write_text(json.dumps(stats, indent=1) + "\n")
    for sub, st in stats.items():
        print(f"\n## {st['model']} ({sub}, tuning {st['qemu_tuning']!r}, holds {st['hold_s']:g} s)")
        print(step_noise_table(st["steps"]))


if __name__ == "__main__":
    variants_table()
    print()
    variants_table("variants-repeat.json")
    tracking()
    sys.exit(0)
