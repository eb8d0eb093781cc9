"""Build this folder's tracking.json (issue 49's schema), the guest's delay and the plots from the runs' JSON.

Run from the repository root with the lab's venv:
    .venv/bin/python docs/results/2026-11-26-qemu-loop/analyse.py
Reads capsweep*/capsweep.csv and tracking-default*/ and tracking-trained/
tracking.json (those present); writes tracking.json, delay.json, tracking.png beside this file.
The figure is the lab's (xtc_lab.lab.experiments.tracking.plot_vm_tracking); the script as it ran drew
it itself (git show 639126c:docs/results/2026-11-26-qemu-loop/analyse.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def delay_from_sweep(csv: Path) -> dict:
    """How far the first 1 s sample after each cap change has moved from the old level to the new one.

    1 = the whole step shows within the first control period (no delay beyond the period); 0 = none of it
    (one whole period of delay).  Only steps where the cap rose and the level rose by more than 2 kp/s count
    (a level that fell when the cap rose was the shared host, not the cap).
    """
    from xtc.training.sweep import read_sweep_csv

    sw = read_sweep_csv(csv)
    per_cap: dict[float, list] = {}
    order: list[float] = []
    for s in sw.samples:
        if s.cap_percent not in per_cap:
            per_cap[s.cap_percent] = []
            order.append(s.cap_percent)
        per_cap[s.cap_percent].append(s)
    steps = []
    for prev, cur in zip(order, order[1:]):
        old = statistics.mean(x.forwarded_pps for x in per_cap[prev] if not x.settling)
        new = statistics.mean(x.forwarded_pps for x in per_cap[cur] if not x.settling)
        first = [x.forwarded_pps for x in per_cap[cur] if x.settling]
        if new - old < 2000 or cur <= prev or not first:
            continue
        steps.append({"cap_from": prev, "cap_to": cur, "level_from_pps": round(old), "level_to_pps": round(new),
                      "settling_samples_pps": [round(f) for f in first],
                      "fraction_in_first_period": round((first[0] - old) / (new - old), 3),
                      "fraction_in_second_period": round((first[1] - old) / (new - old), 3) if len(first) > 1 else None})
    return {"steps": steps,
            "median_fraction_in_first_period": (statistics.median(s["fraction_in_first_period"] for s in steps)
                                                if steps else None)}


def main() -> int:
    from xtc_lab.lab.experiments.tracking import plot_vm_tracking, vm_tracking_report

    sweeps = {name: HERE / name / "capsweep.csv" for name in ("capsweep", "capsweep-run1-loaded")}
    delays = {name: delay_from_sweep(csv) for name, csv in sweeps.items() if csv.exists()}
    if delays:
        firsts = [s["fraction_in_first_period"] for d in delays.values() for s in d["steps"]]
        out = {"sweeps": delays, "median_fraction_in_first_period_all": statistics.median(firsts) if firsts else None,
               "n_steps": len(firsts)}
        (HERE / "delay.json").write_text(json.dumps(out, indent=1) + "\n")
        print(f"delay: median share of a cap step seen in the first period {out['median_fraction_in_first_period_all']} "
              f"over {len(firsts)} steps")
    runs = []
    for sub, label in (("tracking-default", "default"), ("tracking-default-run2", "default (repeat)"),
                       ("tracking-default-hold25", "default (25 s holds)"), ("tracking-trained", None)):
        p = HERE / sub / "tracking.json"
        if p.exists():
            doc = json.loads(p.read_text())
            runs.append((label or Path(doc["model"]).name, doc))
    if not runs:
        print("no tracking runs yet", file=sys.stderr)
        return 1
    rep = vm_tracking_report(runs)
    (HERE / "tracking.json").write_text(json.dumps(rep, indent=1) + "\n")
    plot_vm_tracking(rep, HERE / "tracking.png", f"XTC on a QEMU VR ({rep['accel']}): tracking, default vs trained model")
    for r in rep["runs"]:
        print(r["model"], r["uncapped_kpps"], [(x["setpoint_pps"], x["steady_mean_pps"], x["settle_periods"]) for x in r["rows"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
