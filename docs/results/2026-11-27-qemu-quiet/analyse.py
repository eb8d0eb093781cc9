"""Build this folder's tracking.json (issue 49's schema), noise.md and tracking.png from the runs' JSON.

Run from the repository root with the lab's venv:
    .venv/bin/python docs/results/2026-11-27-qemu-quiet/analyse.py
Reads tracking-*/tracking.json and noise.json (those present); writes tracking.json, steps.json,
noise-scaling.json (scatter, %, of T-second means by T) and tracking.png beside this file.

Besides the experiment's own settling rule (the trailing 3-sample mean stays within 5 %), steps.json
gives per setpoint what bounds any judgement of this plant: the standard deviation of the steady 1 s
rates, the standard error of the steady mean (sd / sqrt(n)), and the first period at which the
3-sample mean *enters* the 5 % band (the controller's speed, whether or not the noise lets it stay).
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


def first_entry(after: list[float], setpoint: float, band: float = 0.05, window: int = 3) -> int | None:
    """Periods from the step to the end of the first trailing ``window`` mean within ``band``."""
    for i in range(window - 1, len(after)):
        m = statistics.mean(after[i - window + 1:i + 1])
        if abs(m - setpoint) <= band * setpoint:
            return i + 1
    return None


def step_stats(doc: dict) -> list[dict]:
    c = doc["controllers"]["xtc"]
    series = next(iter(c["recording"]["series"].values()))
    marks = [m["t_s"] for m in c["recording"]["marks"]] + [math.inf]
    out = []
    for k, s in enumerate(c["steps"]):
        t0, t1 = marks[k], min(marks[k + 1], marks[k] + doc["hold_s"])
        sp = s["setpoint_pps"]
        after = [r for t, r in zip(series["t_s"], series["forwarded_pps"]) if t0 < t <= t1]
        steady = [r for t, r in zip(series["t_s"], series["forwarded_pps"]) if t0 + (t1 - t0) / 2 <= t <= t1]
        caps = [cp for t, cp in zip(series["t_s"], series["cap_percent"]) if t0 + (t1 - t0) / 2 <= t <= t1 and cp is not None]
        sd = statistics.pstdev(steady) if len(steady) > 1 else math.nan
        out.append({"setpoint_pps": sp, "mean_error_percent": round(100 * s["rel_error"], 2),
                    "rate_sd_percent": round(100 * sd / sp, 1),
                    "mean_se_percent": round(100 * sd / sp / math.sqrt(len(steady)), 2), "n_steady": len(steady),
                    "settle_periods": s["settling_periods"], "first_entry_periods": first_entry(after, sp),
                    "cap_median_percent": round(statistics.median(caps), 2) if caps else None,
                    "cap_sd_percent": round(statistics.pstdev(caps), 2) if len(caps) > 1 else None})
    return out


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
    from xtc_lab.lab.experiments.tracking import vm_tracking_report

    runs, stats = [], {}
    for sub, label in RUNS:
        p = HERE / sub / "tracking.json"
        if p.exists():
            doc = json.loads(p.read_text())
            runs.append((label or Path(doc["model"]).name, doc))
            stats[sub] = {"model": label or Path(doc["model"]).name, "hold_s": doc["hold_s"], "steps": step_stats(doc)}
    if not runs:
        print("no tracking runs yet", file=sys.stderr)
        return 1
    rep = vm_tracking_report(runs)
    for r, sub in zip(rep["runs"], stats):
        r["run"] = sub
    (HERE / "tracking.json").write_text(json.dumps(rep, indent=1) + "\n")
    (HERE / "steps.json").write_text(json.dumps(stats, indent=1) + "\n")
    (HERE / "noise-scaling.json").write_text(json.dumps(noise_scaling(), indent=1) + "\n")
    plot(rep, stats, HERE / "tracking.png")
    for sub, st in stats.items():
        print(f"## {st['model']} ({sub}, holds {st['hold_s']:g} s)")
        print("| setpoint kp/s | mean error % | 1 s sd % | SE of mean % | settle (rule) | first entry | cap median % |")
        print("|---|---|---|---|---|---|---|")
        for s in st["steps"]:
            print(f"| {s['setpoint_pps'] / 1000:.1f} | {s['mean_error_percent']:+.1f} | {s['rate_sd_percent']} | "
                  f"{s['mean_se_percent']} | {s['settle_periods'] if s['settle_periods'] is not None else '-'} | "
                  f"{s['first_entry_periods'] if s['first_entry_periods'] is not None else '-'} | {s['cap_median_percent']} |")
    return 0


def plot(rep: dict, stats: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for r in rep["runs"]:
        sp = [x["setpoint_pps"] / 1000 for x in r["rows"]]
        err = [100 * (x["steady_mean_pps"] - x["setpoint_pps"]) / x["setpoint_pps"] for x in r["rows"]]
        st = [x["settle_periods"] if x["settle_periods"] is not None else float("nan") for x in r["rows"]]
        steps = stats[r["run"]]["steps"]
        se = [1.96 * s["mean_se_percent"] for s in steps]
        first = [s["first_entry_periods"] if s["first_entry_periods"] is not None else float("nan") for s in steps]
        line = a1.errorbar(sp, err, yerr=se, fmt="o-", capsize=3, label=f"{r['run']} (bars: 95 % of the mean's noise)")
        a2.plot(sp, st, "o-", color=line[0].get_color(), label=f"{r['run']}: settled (rule)")
        a2.plot(sp, first, "s--", mfc="none", color=line[0].get_color(), label=f"{r['run']}: first entry")
    a1.axhspan(-3, 3, color="green", alpha=0.1, label="goal: within 3%")
    a1.set_ylabel("steady mean error (%)")
    a1.legend(fontsize=8)
    a2.axhline(5, color="green", ls="--", label="goal: 5 periods")
    a2.set_ylabel("periods (gap = never)")
    a2.set_xlabel("setpoint (kp/s)")
    a2.legend(fontsize=8)
    a1.set_title(f"XTC on a QEMU VR ({rep['accel']}), quiet host: tracking, default vs trained model", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
