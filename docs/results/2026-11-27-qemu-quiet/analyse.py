"""Build this folder's tracking.json (issue 49's schema), noise.md and tracking.png from the runs' JSON.

Run from the repository root with the lab's venv:
    .venv/bin/python docs/results/2026-11-27-qemu-quiet/analyse.py
Reads tracking-*/tracking.json and noise.json (those present); writes tracking.json, steps.json,
noise-scaling.json (scatter, %, of T-second means by T) and tracking.png beside this file.

Besides the experiment's own settling rule (the trailing 3-sample mean stays within 5 %), steps.json
gives per setpoint what bounds any judgement of this plant: the standard deviation of the steady 1 s
rates, the standard error of the steady mean (sd / sqrt(n)), and the first period at which the
3-sample mean *enters* the 5 % band (the controller's speed, whether or not the noise lets it stay).
Those, the table and the figure are the lab's (xtc_lab.lab.experiments.tracking: step_noise_stats,
step_noise_table, plot_vm_tracking); the script as it ran held them itself (git show
b5fe4c2:docs/results/2026-11-27-qemu-quiet/analyse.py).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: (folder, label in tracking.json: None = the model file's name)
#: (folder, "model" in tracking.json: "default" or None for the model file's name); each run also gets
#: "run": its folder, the key of steps.json.
RUNS = (("tracking-default", "default"), ("tracking-trained", None), ("tracking-default-hold120", "default"),
        ("tracking-trained-floor1", None))


def block_cv(x: list[float], k: int) -> float:
    """Scatter (sd / mean of ``x``) of the means of consecutive non-overlapping blocks of ``k`` samples."""
    blocks = [statistics.mean(x[i * k:(i + 1) * k]) for i in range(len(x) // k)]
    return statistics.pstdev(blocks) / statistics.mean(x) if len(blocks) > 1 else math.nan


def noise_scaling() -> dict:
    """How the scatter of T-second means falls with T: open loop (noise.json, fixed caps) and closed loop
    (the steady halves of the 120 s holds).  1/sqrt(T) would mean independent seconds."""
    out: dict = {}
    noise = HERE / "noise.json"
    if noise.exists():
        capped = [r["forwarded_pps"] for r in json.loads(noise.read_text())["rows"] if r["cap_percent"]]
        out["open_loop_fixed_cap"] = {str(k): round(100 * statistics.mean(block_cv(x, k) for x in capped), 1)
                                      for k in (1, 2, 4, 5, 10)}
    p = HERE / "tracking-default-hold120" / "tracking.json"
    if p.exists():
        doc = json.loads(p.read_text())
        c = doc["controllers"]["xtc"]
        series = next(iter(c["recording"]["series"].values()))
        marks = [m["t_s"] for m in c["recording"]["marks"]] + [math.inf]
        for k, st in enumerate(c["steps"]):
            t0, t1 = marks[k], min(marks[k + 1], marks[k] + doc["hold_s"])
            x = [r for t, r in zip(series["t_s"], series["forwarded_pps"]) if t0 + (t1 - t0) / 2 <= t <= t1]
            out[f"closed_loop_{st['setpoint_pps']:.0f}"] = {str(b): round(100 * block_cv(x, b), 1) for b in (1, 2, 3, 5, 10, 15)}
    return out


def main() -> int:
    from xtc_lab.lab.experiments.tracking import plot_vm_tracking, step_noise_stats, step_noise_table, vm_tracking_report

    runs, stats = [], {}
    for sub, label in RUNS:
        p = HERE / sub / "tracking.json"
        if p.exists():
            doc = json.loads(p.read_text())
            runs.append((label or Path(doc["model"]).name, doc))
            stats[sub] = {"model": label or Path(doc["model"]).name, "hold_s": doc["hold_s"], "steps": step_noise_stats(doc)}
    if not runs:
        print("no tracking runs yet", file=sys.stderr)
        return 1
    rep = vm_tracking_report(runs)
    for r, sub in zip(rep["runs"], stats):
        r["run"] = sub
    (HERE / "tracking.json").write_text(json.dumps(rep, indent=1) + "\n")
    (HERE / "steps.json").write_text(json.dumps(stats, indent=1) + "\n")
    (HERE / "noise-scaling.json").write_text(json.dumps(noise_scaling(), indent=1) + "\n")
    plot_vm_tracking(rep, HERE / "tracking.png", f"XTC on a QEMU VR ({rep['accel']}), quiet host: tracking, default vs trained model",
                     stats)
    for sub, st in stats.items():
        print(f"## {st['model']} ({sub}, holds {st['hold_s']:g} s)")
        print(step_noise_table(st["steps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
